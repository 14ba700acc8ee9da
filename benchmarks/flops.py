"""What a training step should cost and what the machine can do: the useful FLOPs of a BERT step (the count
every MFU figure of throughput.py and gpu_check.py uses), and a CPU's dense matmul peak measured here.
"""

from __future__ import annotations

import time

import torch

from nanobert.config import ModelConfig


def useful_flops(config: ModelConfig, batch_size: int, seq_len: int, n_masked: float) -> float:
    """Training FLOPs (forward + backward = 3 x forward) of the work a BERT must do for one step."""
    H, L, V, inter = config.hidden_size, config.num_hidden_layers, config.vocab_size, config.intermediate_size
    tokens = batch_size * seq_len
    per_layer_params = 4 * H * H + 2 * H * inter  # qkv + output projection + feed-forward (weights only)
    encoder = 6 * L * per_layer_params * tokens + 6 * 2 * L * seq_len * H * tokens  # matmuls + QK^T and AV
    mlm_head = 6 * (H * H + H * V) * n_masked  # transform + tied decoder, masked positions only
    pooler_nsp = 6 * (H * H + 2 * H) * batch_size
    return encoder + mlm_head + pooler_nsp


def matmul_peak(dtype: torch.dtype | None, n: int = 2048, repeats: int = 8) -> float:
    """FLOP/s of the best of a few (n x n) @ (n x n) products on the CPU in `dtype` (None = fp32)."""
    a = torch.randn(n, n, dtype=dtype or torch.float32)
    b = torch.randn(n, n, dtype=dtype or torch.float32)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


__all__ = ["matmul_peak", "useful_flops"]
