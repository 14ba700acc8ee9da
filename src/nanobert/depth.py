"""The first run's depth: half the layers where the run's plan gives the model too few passes over its corpus.

At equal CPU time two layers of 128 beat four at a few passes and lose at a few hundred (benchmarks/README.md,
Rounds 11, 17 and 18), so `TrainConfig.shallow_below_passes` (which the first run with no options sets)
lets a new run choose before it starts, from its length and, for a time budget, a step timed on this machine.
"""

from __future__ import annotations

import dataclasses

import torch

from nanobert.config import TrainConfig
from nanobert.device import choose_precision, step_seconds
from nanobert.distributed import Distributed
from nanobert.engine import precision_step, shape_key
from nanobert.objectives import objective_of
from nanobert.streams import BatchStream


def choose_depth(
    ctx: Distributed, device: torch.device, cfg: TrainConfig, model: torch.nn.Module, stream: BatchStream
) -> tuple[torch.nn.Module, str | None]:
    """`model`, or a fresh one with half its layers where the plan gives it fewer than
    `cfg.shallow_below_passes` passes over the corpus, and a sentence saying which and why (None when that
    field is None: the layers as configured).

    A time budget's steps come from one forward and backward of `model` on a full batch in the run's
    precision, timed here on rank 0. The shallow model is initialised as a run asking for its depth would be
    (torch's global RNG re-seeded with `cfg.seed`, the same draws; other ranks then their own dropout seed).
    """
    if cfg.shallow_below_passes is None:
        return model, None
    steps_per_epoch = stream.steps_per_epoch()
    objective, layers = objective_of(cfg), model.config.num_hidden_layers
    if cfg.time_budget is None:
        steps = cfg.max_steps or cfg.epochs * steps_per_epoch
        how = f"{steps:,.0f} steps"
    else:
        sample = objective.sample(cfg, model.config.vocab_size)
        step = precision_step(model, objective.loss, sample, device)

        def timed() -> float:
            dtype, _ = choose_precision(cfg.precision, device, step, shape_key(model, sample, cfg.objective))
            return step_seconds(step, dtype)

        seconds = ctx.on_main(timed)
        steps = cfg.time_budget / seconds
        how = f"~{steps:,.0f} steps in {cfg.time_budget:.0f} s at {seconds * 1e3:.0f} ms a step"
    passes = steps / steps_per_epoch
    why = (
        f"{layers} layers would make {how}, {passes:.1f} passes of {steps_per_epoch:,} steps over the corpus"
    )
    threshold = f"{cfg.shallow_below_passes:g} passes"
    if passes >= cfg.shallow_below_passes or layers < 2:
        return model, f"{layers} layers (auto: {why}; at least {threshold})"
    torch.manual_seed(cfg.seed)
    shallow = objective.model(dataclasses.replace(model.config, num_hidden_layers=layers // 2)).to(device)
    ctx.seed_dropout(cfg.seed)
    return (
        shallow,
        f"{layers // 2} layers (auto: {why}; below {threshold} half the layers learn more in the same time)",
    )


__all__ = ["choose_depth"]
