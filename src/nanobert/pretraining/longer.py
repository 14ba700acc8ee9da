"""Train longer: continue a run as one longer run (`nanobert pretrain --resume RUN --time-budget S`).

A schedule that holds the peak rate and then decays (the recipes' `decay_ratio=0.3`) cannot simply go on from
its end: that end is cooled, and a longer plan would put the rate back at the peak. So the loop keeps the last
state at the peak, RUN/pre-decay/ (`engine.loop.PRE_DECAY`), and a longer run continues from there with the
hold and the decay replanned to its own end: the run then decays over the last `decay_ratio` of the new
total, as a run of that length from the start would. What differs from that run is the warmup, which keeps
the length it had (`longer_overrides`), and, with a time budget, the seconds the shorter run spent on its
decay, which are trained again.

`--resume RUN` names the run, not a checkpoint: given a longer total (`--max-steps`, `--epochs` or
`--time-budget`, in the unit the run was planned in, counting the whole run) it continues from pre-decay/,
or from last/ while the run has not reached its decay; with no length it continues last/ as planned.
In its own folder, the shorter run's best/ and last/ (hard links: no more space), records and summary are
kept in RUN/ended-at-step-N/ before anything is written, so nothing of it is lost.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Any

from nanobert.checkpoints.checkpoint import CONFIG_NAME, read_config
from nanobert.checkpoints.run_files import METRICS_NAME, SUMMARY_NAME
from nanobert.config import TrainConfig
from nanobert.engine.loop import PRE_DECAY
from nanobert.engine.run_log import CURVES_NAME
from nanobert.engine.run_state import RunState
from nanobert.errors import NanobertError
from nanobert.files import write_atomically

# The length options, in the order a plan reads them (`pretrain._plan`: epochs, else steps, else seconds).
LENGTHS = {"epochs": "--epochs", "max_steps": "--max-steps", "time_budget": "--time-budget"}
# The closing advice's new total: four times the run, 15 minutes to the hour of the README's table.
LONGER_FACTOR = 4


def checkpoint_to_resume(path: str | Path, lengthened: bool) -> tuple[Path, bool]:
    """What `--resume PATH` continues: (checkpoint, whether it continues the run as one longer run).

    A checkpoint continues itself. A run folder (no config.json, a last/ inside) continues its last/, and,
    `lengthened` (a new length given), continues as one longer run: from last/ while its last step still
    trained at the peak rate, else from the pre-decay/ the run kept; a run without one is refused."""
    path = Path(path)
    if (path / CONFIG_NAME).is_file() or not (path / "last").is_dir():
        return path, False  # a checkpoint, or not a run: read_config says what it is
    last = path / "last"
    config = read_config(last)
    if not lengthened:
        return last, False
    if not config.get("in_decay", True):  # checkpoints before pre-decay/ existed say nothing: in their decay
        return last, True
    step, pre_decay = config.get("pre_decay_step"), path / PRE_DECAY
    if step is None or not (pre_decay / CONFIG_NAME).is_file() or read_config(pre_decay).get("step") != step:
        raise NanobertError(
            f"{path} keeps no checkpoint from before its decay began ({PRE_DECAY}/: its schedule decays from "
            "the warmup's end, decay_ratio 1, or an earlier nanobert trained it), so it cannot go on as one "
            f"longer run; continue its decayed end with --resume {last} and a longer length, or start anew"
        )
    return pre_decay, True


def length_of(cfg: TrainConfig) -> tuple[str, float] | None:
    """The field that sets a run's length and its value, as its plan reads them; None without one."""
    return next(((name, getattr(cfg, name)) for name in LENGTHS if getattr(cfg, name) is not None), None)


def longer_overrides(resume: Path, recorded: TrainConfig, overrides: dict[str, Any]) -> dict[str, Any]:
    """The overrides of a longer run from `resume` (a run recorded as `recorded`), checked: the same seed, a
    length in the unit the run was planned in and longer than it; and with the warmup kept at the length it
    had (its ratio scaled by old / new length) unless the overrides set one, so the rate never warms up again.
    """
    if "seed" in overrides and overrides["seed"] != recorded.seed:
        raise NanobertError(
            f"a longer run continues {resume}'s own seed ({recorded.seed}), which orders its data; start a "
            "new run to try another seed"
        )
    if length_of(recorded) is None:  # no recorded length to be longer than (not one the CLI writes)
        return overrides
    name, old = length_of(recorded)
    given = [field for field in LENGTHS if overrides.get(field) is not None]
    if given != [name]:
        asked = ", ".join(LENGTHS[field] for field in given)
        raise NanobertError(
            f"{resume} was planned by {LENGTHS[name]} ({old:g}); give its longer total as {LENGTHS[name]}, "
            f"not {asked}"
        )
    new = overrides[name]
    if new <= old:
        raise NanobertError(
            f"{LENGTHS[name]} {new:g} is not longer than {resume}'s {old:g}: a longer run counts the whole "
            f"run, so give more than {old:g}"
        )
    if "warmup_ratio" in overrides:
        return overrides
    return {**overrides, "warmup_ratio": recorded.warmup_ratio * old / new}


def longer_command(run_dir: Path, cfg: TrainConfig, run: RunState) -> str | None:
    """The command that continues the run in `run_dir` (planned by `cfg`, at `run`) as one run `LONGER_FACTOR`
    times as long, or None when it kept no pre-decay/ (the one its run state names) to continue from."""
    length, pre_decay = length_of(cfg), run_dir / PRE_DECAY
    if length is None or run.pre_decay_step is None or not (pre_decay / CONFIG_NAME).is_file():
        return None
    if read_config(pre_decay).get("step") != run.pre_decay_step:  # another run's, left by --overwrite
        return None
    name, value = length
    total = f"{LONGER_FACTOR * value:.0f}" if name == "time_budget" else f"{LONGER_FACTOR * value:g}"
    return f"nanobert pretrain --resume {shlex.quote(str(run_dir))} {LENGTHS[name]} {total}"


def longer_note(resume: Path, step: int, cfg: TrainConfig, kept: Path | None) -> str:
    """The log line of a longer run: where it continues from, its replanned schedule, where the shorter run
    was kept."""
    where = "before its decay began" if resume.name == PRE_DECAY else "still at the peak rate"
    note = (
        f"one longer run: continues {resume} (step {step}, {where}), the decay replanned to the last "
        f"{cfg.decay_ratio:g} of the new total, the warmup as long as it was (ratio {cfg.warmup_ratio:.4g})"
    )
    return note + (f"; the shorter run's best/, last/ and records are kept in {kept}" if kept else "")


def _link_or_copy(source: str, target: str) -> None:
    """A hard link (no more space: a checkpoint's files are replaced, never written in place), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def keep_the_shorter_run(run_dir: Path) -> Path:
    """Before a longer run continues in its own folder: the shorter run's best/ and last/ (hard links),
    metrics.jsonl, summary.json and curves.png into RUN/ended-at-step-N (N its last step), a folder the
    longer run never writes. Kept as it is when it exists (an earlier try at this continuation made it)."""
    kept = run_dir / f"ended-at-step-{read_config(run_dir / 'last').get('step', 0)}"
    if kept.exists():
        return kept

    def write(tmp: Path) -> None:
        for name in ("best", "last"):
            if (run_dir / name / CONFIG_NAME).is_file():
                shutil.copytree(run_dir / name, tmp / name, copy_function=_link_or_copy)
        for name in (METRICS_NAME, SUMMARY_NAME, CURVES_NAME):
            if (run_dir / name).is_file():
                shutil.copy2(run_dir / name, tmp / name)

    return write_atomically(kept, write)


__all__ = [
    "LENGTHS",
    "LONGER_FACTOR",
    "checkpoint_to_resume",
    "keep_the_shorter_run",
    "length_of",
    "longer_command",
    "longer_note",
    "longer_overrides",
]
