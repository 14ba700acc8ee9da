"""Speed-only pieces under the model: each does what a plain torch call does, faster on a CPU.

`model.py` imports them by name, so a reader of the model can take each for the call it stands for:

- `dropout` / `Dropout`: `F.dropout` / `nn.Dropout`, the CPU mask drawn from numpy's SFC64 generator
  (seeded from torch's, so the same seed gives the same masks; other masks than F.dropout's);
- `linear_cross_entropy`: `F.cross_entropy(F.linear(h, weight, bias).float(), target)` with -100 targets
  ignored, computed in chunks of rows without the (N, V) logits by a custom autograd function
  (`_LinearCrossEntropy`): the same loss and gradients within rounding;
- `attention_by_math`: where the model computes attention as its explicit math instead of
  `F.scaled_dot_product_attention` (the same function; a CPU trains short sequences faster so).

Each was measured faster on a 2-core CPU (records 2026-11-25-cpu-throughput-bf16, 2026-11-25-faster-cpu-step,
2026-12-06-bf16-step); tests/test_fast.py holds each to the call it replaces.
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


MATH_ATTENTION_MAX_LEN = 256  # the longest sequence a CPU trains faster by the explicit attention math


def attention_by_math(x: torch.Tensor, dropout_p: float) -> bool:
    """Whether attention over x (B, T, H) is computed as the explicit math, softmax(q k^T / sqrt(hd)) v,
    rather than by `F.scaled_dot_product_attention`: on a CPU with dropout (SDPA has no CPU dropout kernel
    and falls back to the same math with torch's slow mask), and on a CPU while training (gradients on) up
    to `MATH_ATTENTION_MAX_LEN` positions, where the fused kernel's backward is the slower: 12.8 ms against
    3.6 for a layer of the first run in bf16, 6.7 against 5.4 in fp32; at 512 positions and 12 heads the
    math is slower (2026-12-06-bf16-step). Elsewhere (a GPU, inference) the fused kernel."""
    if x.device.type != "cpu":
        return False
    return dropout_p > 0 or (torch.is_grad_enabled() and x.size(1) <= MATH_ATTENTION_MAX_LEN)


LOSS_CHUNK_ROWS = 512  # rows of the vocabulary projection in flight on a CPU (2026-12-06-bf16-step)
# A GPU has no cache to fit, and every chunk is ~15 more kernel launches and, under torch.compile, one more
# unrolled copy in the graph (BERT-base at batch 256 x 128 has ~5,000 masked rows: 10 chunks of 512).
# 8192 rows, an (8192, V) block (1 GB in fp32 at V = 30,522), keeps that batch in one chunk. Speed unmeasured.
GPU_LOSS_CHUNK_ROWS = 8192
LOSS_GROUP_ROWS = 2048  # rows whose probabilities one weight-gradient product reads (V x 4 KB in bf16)


def loss_chunk_rows(device: torch.device) -> int:
    """Rows of the chunked vocabulary loss computed at once on `device`."""
    return LOSS_CHUNK_ROWS if device.type == "cpu" else GPU_LOSS_CHUNK_ROWS


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of `h @ weight.T + bias` against `target`, in chunks of rows, never holding the
    whole (N, V) logits matrix. The backward of softmax cross-entropy is softmax - one_hot, so each chunk's
    gradients are computed right away in the forward pass and the backward only scales them.

    The vocabulary projection is the largest matrix multiply of a small BERT and its softmax the largest
    elementwise op, so each chunk makes one pass over its (C, V) block besides the three matrix multiplies:
    `softmax` (fp32 inside, rounded once to `dtype`: the gradient's precision before its matmuls) gives the
    probabilities, the loss is -log of the target's, and the one-hot is subtracted at C entries. Ignored rows
    are zeroed where it costs C x H, not C x V: in the chunk's inputs to the weight and bias gradients and in
    its input gradient. Before (2026-12-06-bf16-step) the chunk made seven passes (cast, log-sum-exp,
    subtract, exp, mask, cast, column sum): 82 of a 105 ms bf16 step of the first run on a 2-core Xeon.
    A target probability below fp32's smallest normal (a loss above 87 nats) counts as 87.3; its gradient
    is exact.
    """

    @staticmethod
    def forward(ctx, h, weight, bias, target, dtype):  # noqa: D102 (the class docstring says it)
        N, (V, H) = h.size(0), weight.shape
        keep = (target != IGNORE_INDEX).to(dtype)[:, None]  # rows that count: (N, 1)
        # The bias folded into the matrix multiply as one more input column of ones (in bf16 with zeros up
        # to a multiple of 16, which oneDNN's bf16 kernels need for speed; fp32's BLAS needs no padding):
        # the logits without a pass of their own for the bias, and the bias gradient as one more row of the
        # weight gradient's product.
        fp32 = dtype == torch.float32
        K = H + 1 if fp32 else (H + 1 + 15) // 16 * 16
        x = torch.zeros((N, K), dtype=dtype, device=h.device)
        x[:, :H] = h
        x[:, H] = 1
        # [weight | bias] in the weight's own (V, K) layout: the logits' matmul reads it transposed within
        # 0.04 ms a chunk, where building it as a contiguous (K, V) block was a strided copy (3.0 ms a bf16
        # step of the first run on the AMX Xeon, against 0.22 ms: record 2026-12-06-bf16-step).
        w_vk = torch.zeros((V, K), dtype=dtype, device=h.device)
        w_vk[:, :H] = weight
        w_vk[:, H] = bias
        w_t, w = w_vk.t(), w_vk[:, :H]  # (K, V) for the logits, (V, H) for the input gradient
        flat = target.clamp(min=0) + torch.arange(0, N * V, V, device=h.device)  # an ignored row: class 0
        loss = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h = torch.empty(h.shape, dtype=torch.float32, device=h.device)
        grad_wt = torch.zeros((K, V), dtype=torch.float32, device=h.device)  # [weight | bias] gradient^T
        tiny = torch.finfo(torch.float32).tiny
        chunk = loss_chunk_rows(h.device)
        # In bf16 the chunks' probabilities are kept for one weight-gradient product per group of rows: one
        # (K, G) @ (G, V) product beat G / C products of the chunks, each rounded, converted and added to
        # the fp32 sum (with the layout above, the loss 24.2 -> 18.8 ms at the first run's shape on the AMX
        # Xeon). fp32 accumulates each chunk in place while it is in cache (a group read from memory, fp32's
        # 4 bytes a probability, was the slower).
        group = chunk if fp32 else max(chunk, LOSS_GROUP_ROWS)
        for first in range(0, N, group):
            last = min(first + group, N)
            probs_group = torch.empty((last - first, V), dtype=dtype, device=h.device)
            for start in range(first, last, chunk):
                rows = slice(start, min(start + chunk, last))
                probs = probs_group[start - first : rows.stop - first]
                torch._softmax(x[rows] @ w_t, -1, False, out=probs)  # (C, V) in dtype, fp32 inside
                at = flat[rows] - start * V  # the targets' places in the chunk, flattened
                picked = probs.view(-1)[at].float()  # the target's probability
                loss -= (picked.clamp(min=tiny).log() * keep[rows, 0].float()).sum()
                probs.view(-1).index_add_(0, at, -torch.ones_like(picked, dtype=dtype))  # softmax - one_hot
                grad_h[rows] = (probs @ w) * keep[rows]
            # (K, G) @ (G, V), the gradient transposed. In fp32 it is accumulated in place (BLAS reads the
            # transposed rows as they are, no (K, V) temporary): 76 -> 61 ms for the loss at the first run's
            # shape on the AMX Xeon, 94 -> 84 ms on AVX2 kernels. bf16 products go to an fp32 sum, so oneDNN
            # makes the product, fastest with both operands contiguous (the (V, G) @ (G, H) product, reading
            # the block transposed, took twice as long).
            kept_rows = x[first:last] * keep[first:last]
            if fp32:
                grad_wt.addmm_(kept_rows.t(), probs_group)
            else:
                grad_wt += kept_rows.t().contiguous() @ probs_group
        ctx.save_for_backward(grad_h, grad_wt[:H].t().contiguous(), grad_wt[H].clone())
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
    "MATH_ATTENTION_MAX_LEN",
    "Dropout",
    "attention_by_math",
    "dropout",
    "linear_cross_entropy",
    "loss_chunk_rows",
]
