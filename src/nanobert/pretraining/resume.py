"""Continuing a run (`nanobert pretrain --resume`): the configs and data sources it continues with, and what
a resume refuses.

A resume keeps the model and how the held-out split is scored and best/ chosen (HELD_OUT_FIELDS); it may
change the run's length (counted over the whole run) and where its data now lies. The weights, optimizer,
data position and RNG states come from the checkpoint (`engine.run_state`), so the resumed run continues
the exact run. Continuing a run as one longer run, from before its decay, is `longer.py`'s.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from nanobert.checkpoints.checkpoint import load_train_config, read_config
from nanobert.checkpoints.run_files import METRICS_NAME
from nanobert.config import ModelConfig, TrainConfig, config_from_dict
from nanobert.data.sources import DataSources
from nanobert.engine.loop import PRE_DECAY, Plan
from nanobert.engine.run_log import RunLog
from nanobert.engine.run_state import RunState
from nanobert.errors import NanobertError
from nanobert.pretraining.longer import keep_the_shorter_run, longer_command, longer_overrides

# What the held-out scores of a run and its choice of best/ depend on: changed in the middle of a run, the
# evaluations before and after would measure different things, and the history's replay (`choose_best`)
# would no longer name the best/ on disk.
HELD_OUT_FIELDS = ("objective", "max_seq_len", "eval_seed", "eval_batch_size", "best_margin")


def resume_configs(
    resume: str | Path,
    model_overrides: dict[str, Any] | None = None,
    train_overrides: dict[str, Any] | None = None,
    sources: DataSources | None = None,
    preset: str | None = None,
    longer: bool = False,
) -> tuple[ModelConfig, TrainConfig, DataSources]:
    """The configs and data sources to continue a checkpoint with: its own, with `train_overrides` applied
    (a new length replaces the old one) and any field of `sources` that is set replacing the recorded one.
    The model cannot change, nor can a preset be asked for (`preset` is refused, not ignored). `longer`: the
    run goes on as one longer run (`longer.longer_overrides`: a longer length, the warmup it had)."""
    if preset is not None:
        raise NanobertError("--preset applies to a new run; --resume keeps the run's own (change it: --set)")
    config = read_config(resume)
    if model_overrides:
        raise NanobertError(
            f"--resume continues a model as it is; model fields cannot change ({', '.join(model_overrides)})"
        )
    train_config = load_train_config(config)
    train_overrides = train_overrides or {}
    changed = [
        k for k in HELD_OUT_FIELDS if k in train_overrides and train_overrides[k] != getattr(train_config, k)
    ]
    if changed:
        raise NanobertError(
            f"--resume keeps how the held-out split is scored and best/ chosen; {', '.join(changed)} cannot "
            "change (start a new run to try other values)"
        )
    if longer:
        train_overrides = longer_overrides(Path(resume), train_config, train_overrides)
    if {"max_steps", "epochs", "time_budget"} & set(train_overrides):
        train_config.max_steps = train_config.epochs = train_config.time_budget = None
    train_config = TrainConfig(**{**dataclasses.asdict(train_config), **train_overrides})
    recorded = config_from_dict(DataSources, config.get("data") or {})
    given = dataclasses.asdict(sources) if sources is not None else {}
    merged = {k: given.get(k) or v for k, v in dataclasses.asdict(recorded).items()}
    for field, option in (("train_file", "--train"), ("valid_file", "--valid"), ("prepared", "--prepared")):
        path = merged[field]
        if path and not given.get(field) and not Path(path).exists():  # recorded as typed, maybe elsewhere
            raise NanobertError(
                f"the run's {option[2:]} source {path} is not found from {Path.cwd()}; pass {option} PATH "
                "to say where it is now"
            )
    return config_from_dict(ModelConfig, config["model"]), train_config, DataSources(**merged)


def refuse_a_finished_run(resume: Path, state: dict, plan: Plan) -> None:
    """A run at (or past) its full length has nothing left to train: resuming it only re-evaluated it. The
    refusal names the command that trains its run longer, when the run kept a pre-decay/ to continue."""
    run = RunState.from_dict(state["run"])
    if plan.progress(run.step - 1, run.train_time) >= 1.0:
        length = f"{plan.total_steps} steps" if plan.total_steps else f"a {plan.time_budget:.0f} s budget"
        command = longer_command(resume.parent, load_train_config(read_config(resume)), run)
        how = (
            f"to train longer as one run, give the run its new total: {command}"
            if command
            else "give a longer --max-steps, --epochs or --time-budget (each counts the whole run, not more "
            "of it)"
        )
        raise NanobertError(
            f"{resume} is at step {run.step} of a run of {length}: nothing is left to train; {how}"
        )


def continue_records(
    resume: Path, out_dir: Path, run: RunState, log: RunLog, is_main: bool, longer: bool
) -> Path | None:
    """Resuming: keep the run's records up to the resumed step. Into a new --out, copy them over, and the
    run's best/ and pre-decay/ too when they are the ones the resumed state names, so the new directory
    holds the whole run. A longer run from pre-decay/ in its own folder first keeps the shorter run aside
    (`longer.keep_the_shorter_run`): returns that folder, else None."""
    source_run, kept = resume.resolve().parent, None
    in_place = source_run == out_dir.resolve()
    if longer and in_place and is_main and resume.name == PRE_DECAY:
        kept = keep_the_shorter_run(source_run)
    log.continue_from(run.step, earlier=source_run / METRICS_NAME)
    for name, step in (("best", run.best_step), (PRE_DECAY, run.pre_decay_step)):
        source, target = source_run / name, out_dir / name
        if is_main and not in_place and source.is_dir() and not target.exists():
            if read_config(source).get("step") == step:
                shutil.copytree(source, target)
    return kept


__all__ = ["HELD_OUT_FIELDS", "continue_records", "refuse_a_finished_run", "resume_configs"]
