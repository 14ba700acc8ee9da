"""The time a `nanobert glue` call has left, said after each run: the seconds per step of the runs done so
far (kept ones too) times the steps of the runs still to train."""

from __future__ import annotations

import math
from typing import Any

from nanobert.config import FinetuneConfig
from nanobert.finetuning.classification import ClassifierTask
from nanobert.finetuning.glue_data import TaskFiles
from nanobert.finetuning.task import default_epochs


def expected_steps(files: TaskFiles, cfg: FinetuneConfig) -> int:
    """The steps `finetune` will take on the task: its epochs (`finetune`'s default for the set's size) of
    batches of its training rows (twice the rows where pairs are read both ways)."""
    symmetric = cfg.symmetric_pairs
    if symmetric is None:
        symmetric = ClassifierTask(files.task.spec()).symmetric_pairs()[0]
    rows = files.rows * (2 if symmetric and files.task.pair is not None else 1)
    per_epoch = math.ceil(rows / cfg.batch_size)
    return per_epoch * (cfg.epochs or default_epochs(per_epoch, cfg))


class Clock:
    """The time left: the seconds per step of the runs done so far (kept ones too), times the steps of the
    runs still to train (`steps`) among the call's `total`."""

    def __init__(self, steps: dict[Any, int], total: int):
        self.left, self.total, self.done = dict(steps), total, 0
        self.seconds = self.steps = 0.0

    def line(self, run, result: dict[str, Any], kept: bool) -> str:
        self.left.pop(run, None)
        self.seconds += result["seconds"]
        self.steps += result["steps"]
        left = self.seconds / max(1.0, self.steps) * sum(self.left.values())
        key = run.task.keys()[0]
        how = "kept from an earlier call" if kept else f"{result['seconds']:.0f} s"
        self.done += 1
        done, value = self.done, result["metrics"][key]
        return (
            f"nanobert: glue: {run.task.title} {run.init} seed {run.seed}: dev {key} {value:.4f} ({how}); "
            f"{done} of {self.total} runs done, {duration(left)} left"
        )


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"about {seconds:.0f} s" if seconds else "nothing"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


__all__ = ["Clock", "duration", "expected_steps"]
