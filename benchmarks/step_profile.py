"""What throughput.py looks at besides the rate: whether a training step makes the host wait for the device
(`host_syncs`: a sync inside the step, which a CUDA graph cannot capture), and where a step's time goes
(`profile_steps`, torch.profiler's top operations after the timed rounds).
"""

from __future__ import annotations

import time

import torch
from torch.autograd import DeviceType
from torch.utils._python_dispatch import TorchDispatchMode


class HostSyncs(TorchDispatchMode):
    """Records the operations that make the host wait for the device (on CUDA: a sync inside the step, which
    a CUDA graph cannot capture). Runs on any device: `_local_scalar_dense` is what `.item()`, `bool()`,
    `int()` and `float()` of a tensor dispatch to, and the others have a data-dependent output shape."""

    SYNCING = ("_local_scalar_dense", "nonzero", "masked_select", "unique", "repeat_interleave", "item")

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name.startswith(self.SYNCING) or name.startswith("_unique"):
            self.seen.append(name)
        elif name.startswith("index") and any(_bool_tensors(a) for a in args):
            self.seen.append(f"{name} with a boolean mask")  # x[mask]: its nonzero runs inside the kernel
        return func(*args, **(kwargs or {}))


def _bool_tensors(arg) -> bool:
    items = arg if isinstance(arg, list | tuple) else [arg]
    return any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in items)


def host_syncs(fn) -> list[str]:
    """The syncing operations `fn()` dispatches, forward, backward and optimizer alike (empty: graph-safe)."""
    with HostSyncs() as mode:
        fn()
    return mode.seen


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def profile_steps(side, batches, n: int, device, top: int = 12) -> dict:
    """Where `side`'s step spends its time: torch.profiler over `n` steps (after the timed rounds, so the
    figures above are unaffected). The operations with the most self time on the device (CUDA) or the CPU,
    in ms per step, and the step's wall time beside the device's busy time: a device busy for much less
    than the step is waiting on the host (launch-bound)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    sync(device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for i in range(n):
            side.step(batches[i % len(batches)])
        sync(device)
    wall = (time.perf_counter() - start) / n
    # on CUDA the kernels themselves (an operator's row would count its kernels' time a second time)
    on_device = device.type == "cuda"
    events = [
        e
        for e in prof.key_averages()
        if (e.device_type == DeviceType.CUDA) == on_device and getattr(e, attr) > 0
    ]
    events.sort(key=lambda e: getattr(e, attr), reverse=True)
    return {
        "steps": n,
        "clock": "device" if device.type == "cuda" else "cpu",
        "wall_ms_per_step": wall * 1e3,  # under the profiler: slower than the timed rounds
        "busy_ms_per_step": sum(getattr(e, attr) for e in events) / 1e3 / n,
        "top": [
            {"name": e.key[:100], "ms_per_step": getattr(e, attr) / 1e3 / n, "calls_per_step": e.count / n}
            for e in events[:top]
        ],
    }


__all__ = ["HostSyncs", "host_syncs", "profile_steps", "sync"]
