"""The held-out protocol of pretraining: what every objective's held-out metrics share.

The held-out protocol is fixed, whatever the training recipe: each objective builds its held-out batches once
from the held-out documents with `eval_seed` (masked at the standard EVAL_MASK_PROB, 80/10/10, no whole-word
masking, where it masks), so that every evaluation of every model sees exactly the same batches and numbers
are comparable across steps, runs and recipes. Figures are per masked or predicted token (or per pair) over
the whole split, not a mean of batch means, tallied on the device (`tallied`); perplexity is exp(loss). Each
objective's own batches and metrics are in its file (mlm_nsp.py, causal.py, hybrid.py); evaluate.py scores
a saved checkpoint with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from nanobert.device import autocast, evaluating

EVAL_MASK_PROB = 0.15  # the standard rate for held-out figures, independent of the training recipe


class _Tally:
    """Summed cross-entropy and correct argmaxes of (N, C) scores against (N,) targets, kept on the device
    so that an evaluation syncs with the host once, at the end."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.correct = torch.zeros((), dtype=torch.long, device=device)
        self.count = 0

    def add(self, scores: torch.Tensor, targets: torch.Tensor) -> None:
        scores = scores.float()
        self.loss += F.cross_entropy(scores, targets, reduction="sum").double()
        self.correct += (scores.argmax(-1) == targets).sum()
        self.count += targets.numel()

    def mean_loss(self) -> float:
        return self.loss.item() / max(self.count, 1)

    def accuracy(self) -> float:
        return self.correct.item() / max(self.count, 1)


def _on_device(
    model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], device: torch.device
) -> Iterator[dict[str, torch.Tensor]]:
    """Each batch moved to `device`, with the model in eval mode and gradients off meanwhile."""
    with evaluating(model):
        for batch in batches:
            yield {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))  # capped so a diverged model is inf-free


Scored = list[tuple[torch.Tensor, torch.Tensor]]  # (N, C) scores and their (N,) targets, per metric


def tallied(model, batches, device, autocast_dtype, scorer, n: int) -> list[_Tally]:
    """The tallies of `scorer`'s (scores, targets) pairs over every held-out batch."""
    device = torch.device(device)
    tallies = [_Tally(device) for _ in range(n)]
    for batch in _on_device(model, batches, device):
        with autocast(device, autocast_dtype):
            scored = scorer(model, batch)
        for tally, (scores, targets) in zip(tallies, scored, strict=True):
            tally.add(scores, targets)
    return tallies


__all__ = ["EVAL_MASK_PROB", "Scored", "perplexity", "tallied"]
