"""Data-parallel training across processes: who this process is, the process group, and a few agreements.

Follows nanoGPT's `train.py` (its `ddp` branch) and PyTorch's DistributedDataParallel notes. `torchrun`
starts one process per GPU (on one machine or many) and tells each its place through the environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT); every process then runs the whole of `pretrain()`.
DistributedDataParallel averages the gradients; this module adds the few other collective steps a run
needs: the same tokenizer everywhere, one decision to stop (time budgets and signals are seen per process),
rank 0's evaluation shared with the others, and every rank's RNG state gathered into rank 0's checkpoint.

Those small agreements go through a CPU (gloo) group even when training uses NCCL, so they never make the
host wait for the GPU.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from nanobert.errors import NanobertError

__all__ = ["Distributed", "from_environment"]


@dataclass
class Distributed:
    """This process's place in a data-parallel run; a single process is rank 0 of a world of 1.

    Every method is a no-op (or the identity) for a single process, so the training loop needs no branches.
    Collective methods must be called by every rank in the same order.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # we initialised the process group, so we tear it down
    control: Any = None  # the CPU group for agreements (None: the default group, already gloo)

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier(group=self.control)

    def agree_max(self, values: list[float]) -> list[float]:
        """The element-wise maximum over ranks (e.g. elapsed time and 'a signal arrived', as 0/1)."""
        if not self.enabled:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return t.tolist()

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum a device tensor over ranks in place (the default group: NCCL on GPUs, gloo on the CPU)."""
        if self.enabled:
            dist.all_reduce(tensor)
        return tensor

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank (pickled, between our own processes only)."""
        if not self.enabled:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        """`obj` of every rank, in rank order, on every rank."""
        if not self.enabled:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def seed_dropout(self, seed: int) -> None:
        """After the model's init (the same weights on every rank): each other rank its own dropout draws."""
        if self.rank > 0:
            torch.manual_seed(seed + 7919 * self.rank)

    def on_main(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on rank 0 only and return its result on every rank; its NanobertError is raised on all."""
        result, error = None, None
        if self.is_main:
            try:
                result = fn()
            except NanobertError as e:
                error = str(e)
        result, error = self.broadcast((result, error))
        if error is not None:
            raise NanobertError(error)
        return result

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def from_environment(device: torch.device) -> tuple[Distributed, torch.device]:
    """Join the process group torchrun describes in the environment, or return a single-process context.

    `device` is the device the user asked for; under torchrun on GPUs each process takes
    `cuda:LOCAL_RANK`. The backend is NCCL for CUDA and gloo for the CPU. A process group that the caller
    initialised already (pretrain() called from a user's own DDP script) is used and left open.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 and not dist.is_initialized():
        return Distributed(), device
    if not dist.is_available():
        raise NanobertError("this PyTorch build has no torch.distributed; run a single process instead")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise NanobertError(
                f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPUs are visible; "
                "start at most one process per GPU (torchrun --nproc_per_node)"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    owns = not dist.is_initialized()
    if owns:
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    backend = dist.get_backend()
    control = None if backend == "gloo" else dist.new_group(backend="gloo")
    ctx = Distributed(dist.get_rank(), dist.get_world_size(), local_rank, owns, control)
    return ctx, device
