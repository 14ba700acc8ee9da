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
from nanobert.pretraining.recipes import GPU_SHAPES, MODEL_PRESETS, SHORT_RUN_STEPS, SHORT_RUN_WARMUP_STEPS


def choose_size(
    ctx: Distributed, device: torch.device, cfg: TrainConfig, model: torch.nn.Module, stream: BatchStream
) -> tuple[torch.nn.Module, TrainConfig, str | None]:
    """`model`, or a fresh one of the size the run's config asks to choose (`choose_shape`, then
    `choose_depth`), the config the run then trains with (a halved depth may bring its own rate), and a
    sentence saying which and why, "shape ..." or "depth ..." (None when nothing was left to choose)."""
    model, shape = choose_shape(ctx, device, cfg, model)
    model, cfg, depth = choose_depth(ctx, device, cfg, model, stream)
    return model, cfg, f"shape {shape}" if shape else f"depth {depth}" if depth else None


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
) -> tuple[torch.nn.Module, TrainConfig, str | None]:
    """`model`, or a fresh one with half its layers where the plan gives it fewer than
    `cfg.shallow_below_steps` steps; the config it trains with (`short_run_rate` for the halved one where
    `cfg.shallow_learning_rate` is set and it makes fewer than `SHORT_RUN_STEPS`); and a sentence saying
    which and why (None when that field is None: the layers as configured). A time budget's steps come
    from `time_step`."""
    if cfg.shallow_below_steps is None:
        return model, cfg, None
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
        return (
            model,
            cfg,
            f"{layers} layers (auto: {why}; from {threshold} they learn more than half as many)",
        )
    shallow = _fresh(ctx, device, cfg, dataclasses.replace(model.config, num_hidden_layers=layers // 2))
    why = f"{layers // 2} layers (auto: {why}; below {threshold} half the layers learn more in the same time)"
    if cfg.shallow_learning_rate is None:
        return shallow, cfg, why
    cfg, rate = _short_run(ctx, device, cfg, shallow, steps)
    return shallow, cfg, f"{why}, {rate}"


def _short_run(
    ctx: Distributed, device: torch.device, cfg: TrainConfig, shallow: torch.nn.Module, steps: float
) -> tuple[TrainConfig, str]:
    """The halved run's config and the log's words on its rate: `short_run_rate` below `SHORT_RUN_STEPS` of
    its own steps (a time budget's from a step of `shallow` timed here), else the rate as configured."""
    about = ""
    if cfg.time_budget is not None:  # the timing leaves the model and the RNG states as they were
        steps, about = cfg.time_budget / time_step(ctx, device, cfg, shallow), "~"
    if steps >= SHORT_RUN_STEPS:
        return cfg, (
            f"{about}{steps:,.0f} of their steps at a peak rate of {cfg.learning_rate:g} "
            f"(shallow_learning_rate is for fewer than {SHORT_RUN_STEPS:,})"
        )
    cfg = short_run_rate(cfg, steps)
    return cfg, (
        f"at a peak rate of {cfg.learning_rate:g}, warming up over {about}{cfg.warmup_ratio * steps:,.0f} "
        "steps (shallow_learning_rate: the rate at which few steps of half the layers learn more; "
        "--set learning_rate=... chooses)"
    )


def short_run_rate(cfg: TrainConfig, steps: float) -> TrainConfig:
    """`cfg` with `shallow_learning_rate` as its peak rate and a warm-up over at least
    `SHORT_RUN_WARMUP_STEPS` of a run's `steps` (at most half of them), for a run the depth rule halved that
    makes fewer than `SHORT_RUN_STEPS`.

    Half the layers at twice the rate learn more masked words in the steps of the AVX2 CPUs' first runs,
    provided the warm-up is not a few dozen steps: at 1,000 steps with 60 the rate stalled on the
    frequent-words plateau (record 2026-12-06-short-run-rate)."""
    floor = min(SHORT_RUN_WARMUP_STEPS / max(steps, 1.0), 0.5)
    return dataclasses.replace(
        cfg, learning_rate=cfg.shallow_learning_rate, warmup_ratio=max(cfg.warmup_ratio, round(floor, 4))
    )


__all__ = ["choose_depth", "choose_shape", "choose_size", "short_run_rate", "time_step"]
