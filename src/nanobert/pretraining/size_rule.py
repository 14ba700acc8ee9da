"""The first run's size, chosen by timing a step here: the depth on a CPU, the shape on a GPU.

At equal CPU time four layers of 128 learn more than two once the run makes several thousand four-layer steps,
and fewer below (record 2026-12-06-first-run-depth; with an earlier recipe, 2026-11-27-depth-rule), so
`TrainConfig.shallow_below_steps` (which the CPU first run sets) lets a new run choose its depth before it
starts, from its length and, for a time budget, a step timed on this machine. A GPU's first run has steps to
spare at the CPU's size, so `TrainConfig.min_planned_steps` (which the GPU first run sets) times one step of
each shape of `recipes.GPU_SHAPES` on the device and trains the largest that leaves that many steps in the
budget.
"""

from __future__ import annotations

import dataclasses

import torch

from nanobert.config import TrainConfig
from nanobert.data.streams import BatchStream
from nanobert.engine.distributed import Distributed
from nanobert.engine.precision import step_seconds, training_precision
from nanobert.objectives.registry import objective_of
from nanobert.pretraining.recipes import GPU_SHAPES, MODEL_PRESETS


def choose_size(
    ctx: Distributed, device: torch.device, cfg: TrainConfig, model: torch.nn.Module, stream: BatchStream
) -> tuple[torch.nn.Module, str | None]:
    """`model`, or a fresh one of the size the run's config asks to choose (`choose_shape`, then
    `choose_depth`), and a sentence saying which and why, "shape ..." or "depth ..." (None when nothing was
    left to choose)."""
    model, shape = choose_shape(ctx, device, cfg, model)
    model, depth = choose_depth(ctx, device, cfg, model, stream)
    return model, f"shape {shape}" if shape else f"depth {depth}" if depth else None


def time_step(ctx: Distributed, device: torch.device, cfg: TrainConfig, model: torch.nn.Module) -> float:
    """Seconds of one forward and backward of `model` on a full batch in the run's precision, timed on rank 0
    (the same answer for every rank)."""
    objective = objective_of(cfg)
    sample = objective.sample(cfg, model.config.vocab_size)

    def timed() -> float:
        dtype, _ = training_precision(cfg.precision, model, objective.loss, sample, device, cfg.objective)
        return step_seconds(model, objective.loss, sample, device, dtype)

    return ctx.on_main(timed)


def _fresh(ctx: Distributed, device: torch.device, cfg: TrainConfig, config) -> torch.nn.Module:
    """A new model of `config`, initialised as a run asking for that shape would be (torch's global RNG
    re-seeded with `cfg.seed`, the same draws; other ranks then their own dropout seed)."""
    torch.manual_seed(cfg.seed)
    model = objective_of(cfg).model(config).to(device)
    ctx.seed_dropout(cfg.seed)
    return model


def choose_shape(
    ctx: Distributed, device: torch.device, cfg: TrainConfig, model: torch.nn.Module
) -> tuple[torch.nn.Module, str | None]:
    """The largest shape of `GPU_SHAPES` whose timed step leaves `cfg.min_planned_steps` steps in the time
    budget (the smallest when none does), as a fresh model, and why; `model` and None when the field or the
    time budget is None."""
    if cfg.min_planned_steps is None or cfg.time_budget is None:
        return model, None
    timings = []
    for name in GPU_SHAPES:
        config = dataclasses.replace(model.config, **MODEL_PRESETS[name])
        candidate = objective_of(cfg).model(config).to(device)
        seconds = time_step(ctx, device, cfg, candidate)
        del candidate
        if device.type == "cuda":
            torch.cuda.empty_cache()
        steps = cfg.time_budget / seconds
        timings.append(f"{name} {seconds * 1e3:.0f} ms a step, ~{steps:,.0f} steps")
        if steps >= cfg.min_planned_steps:
            break
    why = f"{'; '.join(timings)} in {cfg.time_budget:.0f} s; the largest with {cfg.min_planned_steps:,} steps"
    c = config
    shape = f"{name}: {c.num_hidden_layers} layers of {c.hidden_size}, {c.num_attention_heads} heads"
    return _fresh(ctx, device, cfg, config), f"{shape} (auto: {why})"


def choose_depth(
    ctx: Distributed, device: torch.device, cfg: TrainConfig, model: torch.nn.Module, stream: BatchStream
) -> tuple[torch.nn.Module, str | None]:
    """`model`, or a fresh one with half its layers where the plan gives it fewer than
    `cfg.shallow_below_steps` steps, and a sentence saying which and why (None when that field is None: the
    layers as configured). A time budget's steps come from `time_step`."""
    if cfg.shallow_below_steps is None:
        return model, None
    layers = model.config.num_hidden_layers
    if cfg.time_budget is None:
        steps = cfg.max_steps or cfg.epochs * stream.steps_per_epoch()
        why = f"{layers} layers make {steps:,.0f} steps"
    else:
        seconds = time_step(ctx, device, cfg, model)
        steps = cfg.time_budget / seconds
        why = (
            f"{layers} layers would make ~{steps:,.0f} steps in {cfg.time_budget:.0f} s "
            f"at {seconds * 1e3:.0f} ms a step"
        )
    threshold = f"{cfg.shallow_below_steps:,} steps"
    if steps >= cfg.shallow_below_steps or layers < 2:
        return model, f"{layers} layers (auto: {why}; from {threshold} they learn more than half as many)"
    shallow = _fresh(ctx, device, cfg, dataclasses.replace(model.config, num_hidden_layers=layers // 2))
    return (
        shallow,
        f"{layers // 2} layers (auto: {why}; below {threshold} half the layers learn more in the same time)",
    )


__all__ = ["choose_depth", "choose_shape", "choose_size", "time_step"]
