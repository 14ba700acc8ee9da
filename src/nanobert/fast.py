"""Speed-only pieces under the model: each does what a plain torch call does, faster on a CPU.

`model.py` imports them by name, so a reader of the model can take each for the call it stands for:

- `dropout` / `Dropout`: `F.dropout` / `nn.Dropout`, the CPU mask drawn from numpy's SFC64 generator
  (seeded from torch's, so the same seed gives the same masks; other masks than F.dropout's);
- `linear_cross_entropy`: `F.cross_entropy(F.linear(h, weight, bias).float(), target)` with -100 targets
  ignored, computed in chunks of rows without the (N, V) logits by a custom autograd function
  (`_LinearCrossEntropy`): the same loss and gradients within rounding.

Each was measured faster on a 2-core CPU (records 2026-11-25-cpu-throughput-bf16, 2026-11-25-faster-cpu-step);
tests/test_fast.py holds each to the call it replaces.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nanobert.tokenizer import IGNORE_INDEX


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout (zero each element with probability p, scale the rest by 1 / (1 - p)), its mask drawn
    faster on the CPU.

    torch's CPU dropout draws one Mersenne-Twister number per element on one thread: 22% of a bf16 training
    step of the `mini` benchmark (record 2026-11-25-cpu-throughput-bf16). Here one 64-bit draw of numpy's
    SFC64 generator gives four 16-bit numbers, each kept when >= round(p * 2^16), so p is exact to 1/65,536.
    The generator is seeded from torch's, so `torch.manual_seed` and an exact resume still fix every mask.
    CUDA, compiled graphs and other dtypes keep F.dropout.
    """
    if not training or p == 0.0:
        return x
    fast = x.device.type == "cpu" and x.dtype in (torch.float32, torch.bfloat16) and p < 1.0
    if not fast or torch.compiler.is_compiling():
        return F.dropout(x, p, training=True)
    n = x.numel()
    seed = int(torch.randint(2**63 - 1, (1,)))
    bits = np.random.SFC64(seed).random_raw((n + 3) // 4).view(np.uint16)[:n]
    keep = bits >= round(p * 65536)
    scale = torch.tensor(1.0 / (1.0 - p), dtype=x.dtype)
    if x.dtype == torch.bfloat16:  # the mask as bf16 bit patterns: 0 or the scale's 16 bits
        mask = keep.astype(np.uint16)
        mask *= np.uint16(scale.view(torch.int16).item() & 0xFFFF)
        return x * torch.from_numpy(mask).view(torch.bfloat16).view(x.shape)
    mask = keep.astype(np.float32)
    mask *= np.float32(scale.item())
    return x * torch.from_numpy(mask).view(x.shape)


class Dropout(nn.Dropout):
    """nn.Dropout through `dropout` above (same parameters and state dict, a faster CPU mask)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


LOSS_CHUNK_ROWS = 128  # rows of the vocabulary projection in flight: 128 x V floats stay in a CPU's cache
# A GPU has no such cache to fit, and every chunk is ~15 more kernel launches and, under torch.compile, one
# more unrolled copy in the graph (BERT-base at batch 256 x 128 has ~5,000 masked rows: 39 chunks of 128).
# 8192 rows, an (8192, V) fp32 block (1 GB at V = 30,522), keeps that batch in one chunk. Speed unmeasured.
GPU_LOSS_CHUNK_ROWS = 8192


def loss_chunk_rows(device: torch.device) -> int:
    """Rows of the chunked vocabulary loss computed at once on `device`."""
    return LOSS_CHUNK_ROWS if device.type == "cpu" else GPU_LOSS_CHUNK_ROWS


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `h @ weight.T + bias` against `target`, in chunks of rows, never holding the
    whole (N, V) logits matrix. The backward of softmax cross-entropy is softmax - one_hot, so each chunk's
    gradients are computed right away in the forward pass and the backward only scales them.

    The vocabulary projection is the largest matrix multiply of a small BERT and its softmax the largest
    elementwise op; chunked, they stay in cache (faster than linear + cross_entropy on a 2-core CPU, record
    2026-11-24-cpu-throughput-avx2). The numbers are the same: logits in `dtype` (bf16 under autocast),
    softmax and loss in fp32, gradients summed in fp32.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, target, dtype):  # noqa: D102 (the class docstring says it)
        x, w, b = h.to(dtype), weight.to(dtype), bias.to(dtype)
        keep = (target != IGNORE_INDEX).to(torch.float32)  # rows that count: (N,)
        safe = target.clamp(min=0)  # an ignored row scores class 0, then weighs nothing
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h = torch.empty(h.shape, dtype=torch.float32, device=h.device)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=h.device)
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=h.device)
        chunk = loss_chunk_rows(h.device)
        for start in range(0, h.size(0), chunk):
            rows = slice(start, start + chunk)
            logits = torch.addmm(b, x[rows], w.t()).float()  # (C, V)
            lse = logits.logsumexp(-1)  # (C,)
            picked = logits.gather(1, safe[rows, None]).squeeze(1)
            loss += ((lse - picked) * keep[rows]).sum()
            probs = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
            probs.scatter_add_(1, safe[rows, None], -torch.ones_like(probs[:, :1]))  # - one_hot
            probs.mul_(keep[rows, None])
            g = probs.to(dtype)
            grad_h[rows] = g @ w
            grad_w += (g.t() @ x[rows]).float()
            grad_b += probs.sum(0)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        ctx.dtypes = (h.dtype, weight.dtype, bias.dtype)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):  # noqa: D102
        grad_h, grad_w, grad_b = ctx.saved_tensors
        h_dtype, w_dtype, b_dtype = ctx.dtypes
        return (
            (grad_h * grad_loss).to(h_dtype),
            (grad_w * grad_loss).to(w_dtype),
            (grad_b * grad_loss).to(b_dtype),
            None,
            None,
        )


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy of the logits `h @ weight.T + bias` (h (N, H), weight (V, H)) against `target`
    (N,), over the rows whose target is not -100 (0 when there are none), without materialising the logits.
    Equal to F.cross_entropy(F.linear(h, weight, bias).float(), target) within rounding; for training
    (`return_logits=False`), where nothing reads the logits."""
    dtype = torch.get_autocast_dtype(h.device.type) if torch.is_autocast_enabled(h.device.type) else h.dtype
    with torch.autocast(h.device.type, enabled=False):
        total = _LinearCrossEntropy.apply(h, weight, bias, target, dtype)
    return total / (target != IGNORE_INDEX).sum().clamp(min=1)


__all__ = [
    "GPU_LOSS_CHUNK_ROWS",
    "LOSS_CHUNK_ROWS",
    "Dropout",
    "dropout",
    "linear_cross_entropy",
    "loss_chunk_rows",
]
