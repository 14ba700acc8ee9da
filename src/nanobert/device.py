"""Where and in what precision a job runs: the device, the autocast dtype, and a description of the hardware.

Every job (pretraining, fine-tuning, evaluation, inference) resolves its device and precision here, so
"auto" means the same thing everywhere: CUDA when present, else the CPU; bf16 autocast where the hardware
runs bf16 natively (CUDA, or a CPU with AVX512-BF16 or AMX), else fp32.
"""

from __future__ import annotations

import os
import platform
import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from nanobert.errors import NanobertError


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present; asking for CUDA without one is a user error, not a crash."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NanobertError(f"device {name!r} was asked for but no CUDA GPU is available; use --device cpu")
    return torch.device(name)


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 matmuls natively on this CPU (AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype: bf16 when asked for, or for "auto" where bf16 is fast; None means fp32.

    "auto" is bf16 on CUDA and on a CPU with native bf16 matmuls (AVX512-BF16 or AMX), where bf16 autocast
    about doubles training speed (benchmarks/README.md); elsewhere oneDNN emulates bf16, slower than fp32.
    """
    native = device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16())
    if precision == "bf16" and not native:
        print(
            "nanobert: note: this CPU has no native bf16, so precision bf16 is slow; "
            "--set precision=fp32 is faster",
            file=sys.stderr,
        )
    if precision == "bf16" or (precision == "auto" and native):
        return torch.bfloat16
    return None


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """torch.autocast for `dtype` on `device`, or a no-op context for fp32 (dtype None)."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()


def hardware_description(device: torch.device, world_size: int = 1) -> dict[str, Any]:
    """What ran a job, for summary.json: device, processes, torch version, CPU count and threads, the GPU."""
    info = {
        "device": device.type,
        "world_size": world_size,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


__all__ = ["autocast", "autocast_dtype", "cpu_has_native_bf16", "hardware_description", "resolve_device"]
