"""What a run is and remembers: its step, time and tokens, its evaluations, and the rule that picks best/.

`RunState` is saved in every resumable checkpoint with the optimizer's state, the data position and every
rank's RNG states (`trainer_state`), so that a resumed run continues the exact run (`restore_rng`) and keeps
the best/ the uninterrupted run would have kept: the rule (`RunState.offer`) is replayed over the history
(`RunState.choose_best`) rather than trusted from the checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from nanobert.engine.distributed import Distributed


@dataclass
class RunState:
    """What a resume restores besides weights, optimizer, data position and RNG states."""

    step: int = 0
    train_time: float = 0.0  # seconds spent in the loop (the time budget counts these)
    tokens_seen: int = 0
    best_value: float | None = None  # the best held-out value of the job's selection metric so far
    best_step: int | None = None  # the step best/ holds: the best, or a later one within the job's margin
    best_reason: str | None = None  # why best/ holds that step (`offer`)
    evals_since_best: int = 0
    history: list[dict] = field(default_factory=list)  # every evaluation: {"step": ..., **metrics}
    # Evaluations made where a resumable run stopped between its scheduled ones (--stop-after, a signal):
    # kept in the history, but not offered to best/ unless there is none yet, so that a resumed run keeps
    # the best/ the uninterrupted run would have (which never evaluated there).
    interim_steps: list[int] = field(default_factory=list)
    # Where the schedule stands: whether the last step trained ran in its decay (below the held peak), and the
    # step of the pre-decay/ checkpoint this run kept (the last state at the peak), which a longer run of the
    # same start continues from (`loop.PRE_DECAY`).
    in_decay: bool = False
    pre_decay_step: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        """A saved state; checkpoints of earlier versions called best_value best_mlm_loss."""
        data = dict(data)
        if "best_mlm_loss" in data:
            loss = data.pop("best_mlm_loss")
            data.setdefault("best_value", loss if math.isfinite(loss) else None)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def best(self) -> dict | None:
        return next((h for h in self.history if h["step"] == self.best_step), None)

    def reached(self, accuracy: float) -> bool:
        """Whether the last evaluation scored at least `accuracy` on every accuracy it reports (a corpus
        memorised: the toy demo's end, `Plan.stop_at_accuracy`)."""
        scores = [v for k, v in (self.history[-1] if self.history else {}).items() if k.endswith("accuracy")]
        return bool(scores) and min(scores) >= accuracy

    def choose_best(
        self,
        metric: str,
        higher_is_better: bool,
        margin: float = 0.0,
        tiebreak: Callable[[dict], float] | None = None,
    ) -> None:
        """best_value, best_step and evals_since_best from the history by `metric`, replayed through `offer`,
        so that a resumed run keeps the best/ the loop would have kept by this version's rule."""
        scored = [
            h
            for h in self.history
            if isinstance(h.get(metric), int | float) and h["step"] not in self.interim_steps
        ]
        if not scored:
            if self.best_step in self.interim_steps:  # best/ is a stop's evaluation only: the next takes it
                self.best_value, self.best_step, self.best_reason, self.evals_since_best = None, None, None, 0
            return
        self.best_value, self.best_step, self.evals_since_best = None, None, 0
        for h in scored:
            self.offer(h, metric, higher_is_better, margin, tiebreak)
        self.evals_since_best = sum(h["step"] > self.best_step for h in scored)

    def offer(
        self,
        evaluation: dict,
        metric: str,
        higher_is_better: bool,
        margin: float,
        tiebreak: Callable[[dict], float] | None = None,
    ) -> str | None:
        """Whether `evaluation` (a history record: its step and metrics) takes best/, and why (None: it does
        not; the reason is kept in `best_reason`).

        A new best by `metric` takes it. So does a tie or near-tie, trailing the best value so far by no more
        than `margin`: with a `tiebreak` (a held-out loss, lower is better), when it is lower than that of the
        evaluation best/ holds; without one, when it trails by less than `margin`. best_value stays the best
        seen, so a run of small declines cannot walk best/ downhill. Why: late in a run the metric is flat
        within its sampling noise (and on a memorised corpus it sits at 1.0), and among evaluations it cannot
        tell apart, the later one with the lower loss has learnt more (the next-sentence head included)."""
        step, value = evaluation["step"], evaluation[metric]
        sign = 1.0 if higher_is_better else -1.0
        gap = None if self.best_value is None else sign * (value - self.best_value)
        reason = None
        if gap is None or gap > 0:
            reason = f"the best held-out {metric} so far ({value:.4f})"
        elif tiebreak is not None and gap >= -margin:
            held, ours = self.best(), tiebreak(evaluation)
            if held is not None and ours < tiebreak(held):
                near = "ties" if gap == 0 else f"is within best_margin {margin:g} of"
                reason = (
                    f"held-out {metric} {value:.4f} {near} the best ({self.best_value:.4f}) and its held-out "
                    f"loss is lower than step {held['step']}'s ({ours:.4f} < {tiebreak(held):.4f})"
                )
        elif tiebreak is None and gap > -margin:
            reason = f"held-out {metric} {value:.4f} is within best_margin {margin:g} of the best"
        if gap is None or gap > 0:
            self.best_value = value
        if reason is not None:
            self.best_step, self.best_reason, self.evals_since_best = step, reason, 0
        else:
            self.evals_since_best += 1
        return reason


def rng_state(device: torch.device) -> dict[str, Any]:
    """This process's torch RNG states (dropout draws from them)."""
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def trainer_state(optimizer, data_state: dict, run: RunState, rng_states: list[dict[str, Any]]) -> dict:
    """What a resume needs besides the weights; `rng_states` holds one entry per rank."""
    state = {
        "optimizer": optimizer.state_dict(),
        "data": data_state,
        "run": dataclasses.asdict(run),  # plain numbers and dicts: loadable with weights_only=True
        "rng": {**rng_states[0], "python": list(random.getstate()[1])},
    }
    if len(rng_states) > 1:
        state["rng"]["ranks"] = rng_states
    return state


def restore_rng(state: dict, ctx: Distributed, device: torch.device, seed: int, step: int) -> None:
    """Each rank's RNG states from a checkpoint; a rank the checkpoint did not have gets a fresh stream."""
    ranks = state.get("ranks")
    mine = ranks[ctx.rank] if ranks and len(ranks) == ctx.world_size else state
    torch.set_rng_state(mine["torch"])
    random.setstate((3, tuple(state["python"]), None))
    if device.type == "cuda" and "cuda" in mine:
        torch.cuda.set_rng_state(mine["cuda"], device)
    if mine is state and ctx.rank > 0:  # resumed on more processes than saved: distinct dropout per rank
        torch.manual_seed(seed + 7919 * ctx.rank + step)


__all__ = ["RunState", "restore_rng", "rng_state", "trainer_state"]
