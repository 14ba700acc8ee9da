"""Where and in what precision a job runs: the device, the autocast dtype, and a description of the hardware.

Every job resolves its device here: "auto" is CUDA when present, else the CPU. Precision "auto" means the
faster of fp32 and bf16 autocast *on this machine*: on a CPU, `choose_precision` times a few training steps
of the job's own model and batch shape in each and keeps the faster (CPUs differ: bf16 doubles a 4-layer
model's speed on one with native bf16 and slows a small one down on another), caching the answer per CPU,
torch version, threads and shape; on CUDA it is bf16. An explicit fp32 or bf16 always wins.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

from nanobert.errors import NanobertError


def resolve_device(name: str) -> torch.device:
    """'auto' picks CUDA when present; asking for CUDA without one is a user error, not a crash.

    A CPU job also gets `keep_freed_memory`: every job passes here before it allocates its first tensor."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NanobertError(f"device {name!r} was asked for but no CUDA GPU is available; use --device cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise NanobertError(f"unknown device {name!r}; use auto, cpu or cuda") from None
    if device.type == "cpu":
        keep_freed_memory()
    return device


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to keep freed blocks of up to 32 MiB for reuse (mallopt), instead of returning
    them to the system and page-faulting them back in on the next training step.

    By default a multi-megabyte tensor (a weight's bf16 copy, an embedding gradient, an optimizer temporary)
    gets fresh pages every step, and touching them cost 20% of a `mini` bf16 step and a third of the CPU
    preset's (record 2026-11-25-faster-cpu-step). The process then keeps memory it has used; it does not use
    more. A no-op returning False where the C library has no mallopt (macOS, musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 matmuls natively on this CPU (AVX512-BF16 or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype: bf16 when asked for, or for "auto" where bf16 is fast; None means fp32.

    "auto" is bf16 on CUDA and on a CPU with native bf16 matmuls (AVX512-BF16 or AMX), where bf16 autocast
    about doubles training speed (record 2026-11-23-cpu-throughput-first); elsewhere oneDNN emulates bf16,
    slower than fp32.
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


def precision_cache() -> Path:
    """Where measured precision choices are kept: $NANOBERT_CACHE or ~/.cache/nanobert, precision.json."""
    return Path(os.environ.get("NANOBERT_CACHE", Path.home() / ".cache" / "nanobert")) / "precision.json"


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), to key measurements by machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_kernels() -> str:
    """The instruction sets torch's CPU kernels run with here: ATen's capability, and oneDNN's limit where
    ONEDNN_MAX_CPU_ISA sets one. Limited (ATEN_CPU_CAPABILITY=avx2, ...), the same CPU times the precisions
    differently: on an AMX Xeon held to AVX2, bf16 took 17 s a step against fp32's 0.29 s."""
    limit = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return torch.backends.cpu.get_cpu_capability() + (f", oneDNN {limit}" if limit else "")


CLEAR_WIN = 1.1  # a precision measured at least this much faster is cached as the choice for its key


def choose_precision(
    precision: str,
    device: torch.device,
    step: Callable[[torch.dtype | None], None],
    shape: str,
    trials: int = 3,
) -> tuple[torch.dtype | None, str]:
    """The autocast dtype for a job (None = fp32) and a sentence saying why.

    `step(dtype)` runs one forward and backward pass of the job's model on a batch of its shape (no
    optimizer step); for "auto" on a CPU each precision gets a warm-up step and then `trials` timed steps,
    the two precisions taking turns so that a passing load slows both alike; the one with the lower median
    is kept and, when it won by at least CLEAR_WIN, cached under (CPU, its kernels, torch, threads, `shape`),
    so the next run of that shape on this machine does not measure again. The caller keeps RNG states and
    gradients as they were.
    """
    if precision in ("fp32", "bf16"):
        return autocast_dtype(precision, device), f"{precision}, as asked"
    if device.type != "cpu":
        return torch.bfloat16, "bf16 autocast: auto on a GPU"
    threads = torch.get_num_threads()
    key = f"{cpu_name()} | {cpu_kernels()} | torch {torch.__version__} | {threads} threads | {shape}"
    cache = _read_cache()
    measured = cache.get(key) or time_steps(step, {"fp32": None, "bf16": torch.bfloat16}, trials)
    seconds = {name: round(value, 5) for name, value in measured.items()}
    # Only a clear winner is cached. A close call is cheap to measure again next time, and it is what a
    # measurement looks like when another job shares the cores: beside a second 2-thread run, a 60 ms bf16
    # step of the CPU recipe timed at 2.6 s in both precisions, and the cached choice would have stuck.
    if key not in cache and max(seconds.values()) >= CLEAR_WIN * min(seconds.values()):
        cache[key] = seconds
        _write_cache(cache)
    chosen = min(seconds, key=seconds.get)
    fp32, bf16 = (seconds[k] * 1e3 for k in ("fp32", "bf16"))
    why = f"{chosen} (auto: a step took {fp32:.0f} ms in fp32 and {bf16:.0f} ms in bf16 on this machine)"
    return (torch.bfloat16 if chosen == "bf16" else None), why


def time_steps(
    step: Callable[[torch.dtype | None], None], dtypes: dict[str, torch.dtype | None], trials: int = 3
) -> dict[str, float]:
    """Median seconds per `step(dtype)` for each of `dtypes` (name -> autocast dtype, None for fp32), timed
    in turns after a warm-up step of each, so that a passing load slows them alike: the one place nanobert
    times a step (the choice of precision, the first run's size rule)."""
    for dtype in dtypes.values():
        step(dtype)  # warm-up: oneDNN builds its kernels for these shapes on first use
    times: dict[str, list[float]] = {name: [] for name in dtypes}
    for _ in range(trials):
        for name, dtype in dtypes.items():
            start = time.perf_counter()
            step(dtype)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def _read_cache() -> dict[str, Any]:
    try:
        return json.loads(precision_cache().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(cache: dict[str, Any]) -> None:
    try:
        precision_cache().parent.mkdir(parents=True, exist_ok=True)
        precision_cache().write_text(json.dumps(cache, indent=1) + "\n")
    except OSError:  # a read-only home: measure again next time, nothing worse
        pass


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """torch.autocast for `dtype` on `device`, or a no-op context for fp32 (dtype None)."""
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else nullcontext()


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients for the block; the model's mode is put back after it."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def software_versions() -> dict[str, str]:
    """The versions a run's numbers depend on: a seed reproduces a run with these, on one machine."""

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "not installed"

    return {
        "python": platform.python_version(),
        "nanobert": installed("nanobert"),
        "torch": torch.__version__,
        "tokenizers": installed("tokenizers"),
        "numpy": installed("numpy"),
    }


def hardware_description(device: torch.device, world_size: int = 1) -> dict[str, Any]:
    """What ran a job, for summary.json: device, processes, torch version, CPU count and threads, the GPU,
    and the versions of the packages the numbers depend on (`software_versions`)."""
    info = {
        "device": device.type,
        "world_size": world_size,
        "torch": torch.__version__,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
        "versions": software_versions(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


__all__ = [
    "precision_cache",
    "autocast",
    "autocast_dtype",
    "evaluating",
    "choose_precision",
    "cpu_has_native_bf16",
    "cpu_kernels",
    "cpu_name",
    "hardware_description",
    "resolve_device",
    "software_versions",
    "time_steps",
]
