"""The precision a job trains in, chosen by timing the job's own training step on this machine.

`device.choose_precision` decides between fp32 and bf16 autocast (and caches the answer per machine and
shape); what it times is one step of the job: `precision_step` runs a forward and backward pass of the job's
loss on a batch of its shape, leaving the RNG states and gradients as they were, and `shape_key` names what
the measurement depends on besides the machine. Every job asks through `training_precision`, and the first
run's size rule times a step through `step_seconds`; both time with the one timing function,
`device.time_steps`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from nanobert.device import autocast, choose_precision, time_steps
from nanobert.engine.run_state import rng_state

Loss = Callable[[nn.Module, dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def precision_step(
    model: nn.Module, loss: Callable, batch: dict[str, torch.Tensor], device: torch.device
) -> Callable[[torch.dtype | None], None]:
    """For `device.choose_precision`: one forward and backward of `loss` on `batch` under an autocast dtype,
    leaving the RNG states (dropout draws from them) and the gradients as they were, so measuring does not
    change the run."""

    def step(dtype: torch.dtype | None) -> None:
        states = rng_state(device)
        model.train()  # dropout included, as in training
        with autocast(device, dtype):
            value = loss(model, {k: v.to(device) for k, v in batch.items()})["loss"]
        value.backward()
        if device.type == "cuda":  # the kernels run asynchronously: a timed step ends when they have
            torch.cuda.synchronize(device)
        model.zero_grad(set_to_none=True)
        torch.set_rng_state(states["torch"])
        if "cuda" in states:
            torch.cuda.set_rng_state(states["cuda"], device)

    return step


def shape_key(model: nn.Module, batch: dict[str, torch.Tensor], objective: str) -> str:
    """What a precision measurement depends on besides the machine: the model's shape and the batch's."""
    c = model.config
    layout = "pre-LN" if c.pre_layer_norm else "post-LN"
    dims = "x".join(str(d) for d in batch["input_ids"].shape)
    # Dropout 0 takes faster kernels, so it is part of the shape.
    dropout = f"dropout {c.hidden_dropout_prob:g}/{c.attention_probs_dropout_prob:g}"
    return (
        f"{objective} {type(model).__name__} L{c.num_hidden_layers} H{c.hidden_size} "
        f"A{c.num_attention_heads} I{c.intermediate_size} V{c.vocab_size} {layout} {dropout} batch {dims}"
    )


def training_precision(
    precision: str,
    model: nn.Module,
    loss: Loss,
    batch: dict[str, torch.Tensor],
    device: torch.device,
    job: str,
) -> tuple[torch.dtype | None, str]:
    """`device.choose_precision` for a training job: the autocast dtype (None = fp32) and why, "auto" timing
    the job's own step on `batch` and caching the answer under its shape (`job` names the job in the key)."""
    step = precision_step(model, loss, batch, device)
    return choose_precision(precision, device, step, shape_key(model, batch, job))


def step_seconds(
    model: nn.Module,
    loss: Loss,
    batch: dict[str, torch.Tensor],
    device: torch.device,
    dtype: torch.dtype | None,
) -> float:
    """Median seconds of one training step of `model` on `batch` under `dtype`, after a warm-up."""
    return time_steps(precision_step(model, loss, batch, device), {"step": dtype})["step"]


__all__ = ["precision_step", "shape_key", "step_seconds", "training_precision"]
