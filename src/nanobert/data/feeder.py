"""What the training loop takes its batches from: a feeder.

The engine asks a `Feeder` for one batch at a time with the data position after it, which a resumable
checkpoint records, so that a resumed run starts from the next batch; at the end of the run the engine
closes it. `streams.Prefetcher` and `streams.Synchronous` feed pretraining (a `BatchStream` of masked pairs
or next-word windows), `labelled.ExampleStream` feeds fine-tuning (and, masked, task-adaptive pretraining):
each says that it implements this interface by naming it as its base, as litgpt's data modules name theirs.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class Feeder(Protocol):
    """A source of training batches for `engine.loop.fit`."""

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The next batch, on the host (the loop moves it to the device), and the data position after it
        (a plain dict a checkpoint can hold, from which the feeder's stream resumes)."""
        ...

    def close(self) -> None:
        """Release what feeding needs (a prefetching thread); called once, when the run ends."""
        ...


__all__ = ["Feeder"]
