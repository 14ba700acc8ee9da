"""`nanobert glue`: a pretraining checkpoint fine-tuned on every GLUE task and scored as the papers score it,
beside its from-scratch control.

Each (task, init, seed) is one `finetune` run with `finetune`'s own defaults, as `nanobert finetune` runs it
with the task's columns and `--seed N` (and `--from-scratch` for the control), written to
OUT/TASK/INIT-seedN/. Its best epoch is then scored on each of the task's dev files with the task's GLUE
metrics (`glue_tasks.py`; `finetune`'s own figures where it has them, so they agree to the digit), and the
result is kept beside the run (glue-result.json). A rerun of the same command finds those results and does
not train their runs again, so an interrupted `nanobert glue` picks up where it stopped; OUT/glue-options.json
says which checkpoint (by a digest of its contents: a moved or copied checkpoint is the same one), data and
settings its results belong to (`glue_options.py`), so that another command never mixes its runs with them
(nor replaces them, unless asked). The first seed's pretrained model labels the test files for the GLUE
server (OUT/submission/; the MNLI model also labels the diagnostic set). The table, JSON, CSV, picture and
the submission's notice are `glue_report.py`'s, the test files' labels `glue_submission.py`'s and the
time left `glue_clock.py`'s.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nanobert.checkpoints.checkpoint import load_finetuned, read_config
from nanobert.checkpoints.kinds import KINDS, checkpoint_kind, wrong_kind
from nanobert.config import FinetuneConfig, ModelConfig, config_from_dict
from nanobert.data.labelled import load_split
from nanobert.device import autocast_dtype, resolve_device
from nanobert.errors import NanobertError
from nanobert.files import atomic_file, check_room
from nanobert.finetuning.classification import finetune
from nanobert.finetuning.glue_clock import Clock, expected_steps
from nanobert.finetuning.glue_data import TaskFiles, cap_train, check_task, hub_tasks, local_tasks
from nanobert.finetuning.glue_options import (
    OPTIONS_NAME,
    check_out,
    default_out,
    legacy_key,
    run_options,
    upgraded,
)
from nanobert.finetuning.glue_report import build_report, write_report
from nanobert.finetuning.glue_submission import current_files, write_predictions
from nanobert.finetuning.glue_tasks import GLUE_TASKS, GlueTask, choose_tasks, server_files
from nanobert.finetuning.task import control_start
from nanobert.use.classifier import split_outputs

INITS = {"pretrained": False, "scratch": True}  # an init -> finetune's from_scratch
CONTROLS = ("scratch",)  # what --control may ask for besides the pretrained start
RESULT_NAME = "glue-result.json"


@dataclass(frozen=True)
class Run:
    """One fine-tuning run of a `glue` call."""

    task: GlueTask
    init: str
    seed: int

    def folder(self, out: Path) -> Path:
        return out / self.task.name / f"{self.init}-seed{self.seed}"


@dataclass
class GlueJob:
    """What every run of one `glue` call shares."""

    checkpoint: Path
    out: Path
    cfg: FinetuneConfig
    inits: tuple[str, ...]
    seeds: tuple[int, ...]
    options: dict[str, Any]  # what a kept result must have been made with (glue-options.json)
    quiet: bool
    legacy: dict[str, Any]  # the checkpoint as glue-options.json named it before its digest (old runs)

    def runs(self, task: GlueTask) -> list[Run]:
        return [Run(task, init, seed) for init in self.inits for seed in self.seeds]

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)


def glue(
    checkpoint: str | Path,
    out: str | Path | None = None,
    *,
    data: str | Path | None = None,
    tasks: list[str] | None = None,
    control: str | None = None,
    seeds: tuple[int, ...] | list[int] = (1,),
    max_train_examples: int | None = None,
    cfg: FinetuneConfig | None = None,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Fine-tune a pretraining checkpoint on each GLUE task (`tasks`, default all nine; GLUE's spellings
    work) with every seed in `seeds`, and with `control="scratch"` the same from its untrained start; write
    the GLUE table (OUT/glue.md, .json, .csv, .png), each run's directory and the test-set predictions.

    `data` is a `glue_data/`-style folder (tasks whose files are missing are skipped and named); None takes
    the tasks from the Hugging Face hub. `max_train_examples` caps the large tasks' training sets. `cfg` is
    the fine-tuning every run shares (its seed is each run's). `out` defaults to runs/glue-NAME
    (`default_out`); calling again with the same arguments keeps the runs that finished, wherever the
    checkpoint has moved since. Returns the report (`glue_report.build_report`), whose "table" is glue.md's
    text and "stopped_by_signal" says if a signal cut the call short.
    """
    cfg = cfg or FinetuneConfig()
    chosen = choose_tasks(tasks)
    if max_train_examples is not None and max_train_examples < 1:
        raise NanobertError(f"--max-train-examples {max_train_examples}: give a number of at least 1")
    out = Path(out) if out is not None else default_out(checkpoint)
    inits, seeds = choose_inits(control), check_seeds(seeds)
    check_checkpoint(Path(checkpoint))
    options = run_options(checkpoint, data, max_train_examples, cfg)
    job = GlueJob(Path(checkpoint), out, cfg, inits, seeds, options, quiet, legacy_key(Path(checkpoint)))
    inputs = (job.checkpoint, *([Path(data)] if data is not None else []))
    check_out(job.out, job.options, job.legacy, overwrite, inputs)
    if data is not None:  # every file read and checked before the output folder is touched
        found, skipped = local_tasks(data, chosen)
        found = [check_task(files) for files in found]
        claim_out(job)
    else:
        claim_out(job)
        found, skipped = [check_task(files) for files in hub_tasks(chosen, job.out / "data", job.say)], {}
    found = [cap_train(files, max_train_examples, job.out / files.task.name) for files in found]
    if skipped:
        job.say(f"nanobert: glue: not in {data}: " + ", ".join(f"{t} ({why})" for t, why in skipped.items()))
    return run_tasks(job, found, skipped)


# ----------------------------------------------------------------------------------------------------------
# The arguments, checked before anything is written


def choose_inits(control: str | None) -> tuple[str, ...]:
    if control is not None and control not in CONTROLS:
        raise NanobertError(f"unknown control {control!r}; use: {', '.join(CONTROLS)}")
    return ("pretrained",) if control is None else ("pretrained", control)


def check_seeds(seeds) -> tuple[int, ...]:
    seeds = tuple(int(s) for s in seeds)
    if not seeds or len(set(seeds)) < len(seeds) or min(seeds) < 0:
        raise NanobertError(
            f"--seeds {' '.join(map(str, seeds))}: give one or more different seeds, 0 or more"
        )
    return seeds


def checkpoint_config(checkpoint: Path) -> ModelConfig:
    """The model config a checkpoint's config.json holds (checked by `check_checkpoint` first)."""
    return config_from_dict(ModelConfig, read_config(checkpoint)["model"])


def check_checkpoint(checkpoint: Path) -> None:
    """A NanobertError unless `checkpoint` is one `finetune` takes (a pretrained language model)."""
    name = checkpoint_kind(read_config(checkpoint))
    kind = KINDS.get(name)
    if kind is None or "finetune" not in kind.commands:
        raise wrong_kind(checkpoint, name, "a pretraining checkpoint")


def claim_out(job: GlueJob) -> None:
    """OUT made (a place it can write checked first) and its options recorded."""
    check_room(job.out, 0, "GLUE runs")
    write_json(job.out / OPTIONS_NAME, job.options)


def write_json(path: Path, data: Any) -> None:
    with atomic_file(path, "w", encoding="utf-8") as f:  # whole, or the earlier file
        f.write(json.dumps(data, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------------------
# The runs


def run_tasks(job: GlueJob, found: list[TaskFiles], skipped: dict[str, str]) -> dict[str, Any]:
    """Every run of every task (kept ones read back), the test predictions, and the report written after
    each task; a signal that stops a run stops the call, with the report of what finished."""
    results: list[dict] = []
    runs = {run: files for files in found for run in job.runs(files.task)}
    kept = {run: kept_result(run, job) for run in runs}  # read first: the time left counts only the others
    clock = Clock(
        {run: expected_steps(files, job.cfg) for run, files in runs.items() if kept[run] is None}, len(runs)
    )
    for files in found:
        capped = f" (a random {files.rows:,} of {files.full_rows:,})" if files.rows < files.full_rows else ""
        job.say(
            f"nanobert: glue: {files.task.title}, {files.rows:,} training examples{capped}: "
            f"{' and '.join(job.inits)}, seed{'s' * (len(job.seeds) > 1)} {', '.join(map(str, job.seeds))}"
        )
        for run in job.runs(files.task):
            result = kept[run]
            if result is None:
                result = train_run(run, files, job)
                if isinstance(result, int):  # the signal that stopped the run
                    return report(job, found, skipped, results, stopped=result)
            results.append(result)
            job.say(clock.line(run, result, kept[run] is not None))
        first = Run(files.task, "pretrained", job.seeds[0]).folder(job.out) / RESULT_NAME
        if first.is_file():
            write_predictions(files, first, job.out, job.cfg.device, job.cfg.eval_batch_size)
        report(job, found, skipped, results)
    return report(job, found, skipped, results, final=True)


def report(job, found, skipped, results, stopped: int | None = None, final: bool = False) -> dict[str, Any]:
    """The report of the runs so far, written to OUT (the picture only once a task is done)."""
    present = current_files(job.out, lambda result: belongs(result, job))
    about = {
        "checkpoint": str(job.checkpoint),
        "data": job.options["data"],
        "out": str(job.out),
        "skipped": skipped,
        "capped": {f.task.title: [f.rows, f.full_rows] for f in found if f.rows < f.full_rows},
        "max_train_examples": job.options["max_train_examples"],
        "submission": present,
        "submission_needs": server_files(),
        "submission_missing": [name for name in server_files() if name not in present],
        "stopped_by_signal": stopped,
        "control": control_start(checkpoint_config(job.checkpoint)) if "scratch" in job.inits else None,
    }
    built = build_report([f.task for f in found], job.inits, job.seeds, results, about)
    write_report(job.out, built)
    if final or stopped:
        job.say(f"nanobert: glue: the table is in {job.out / 'glue.md'}")
    return built


def kept_result(run: Run, job: GlueJob) -> dict[str, Any] | None:
    """The result an earlier call kept for `run`, if it was made with this call's options."""
    try:
        result = json.loads((run.folder(job.out) / RESULT_NAME).read_text())
    except (OSError, ValueError):
        return None
    same = (result.get("task"), result.get("init"), result.get("seed")) == (run.task.name, run.init, run.seed)
    metrics = result.get("metrics")
    options = upgraded(result.get("options"), job.options, job.legacy)
    if not same or options != job.options or not isinstance(metrics, dict):
        return None
    return result if set(metrics) == set(run.task.keys()) else None


def train_run(run: Run, files: TaskFiles, job: GlueJob) -> dict[str, Any] | int:
    """`finetune` for one run, then its dev scores, kept in glue-result.json; the signal's number instead
    when one stopped the run (nothing is kept then: the next call trains it again)."""
    folder = run.folder(job.out)
    (folder / RESULT_NAME).unlink(missing_ok=True)  # its run is being replaced
    cfg = dataclasses.replace(job.cfg, seed=run.seed, metric=job.cfg.metric or run.task.select)
    from_scratch, spec = INITS[run.init], run.task.spec()
    summary = finetune(
        job.checkpoint, spec, files.train, files.devs[0], folder, cfg,
        from_scratch=from_scratch, overwrite=True, quiet=job.quiet,
    )  # fmt: skip
    if summary.get("stopped_by_signal"):
        return int(summary["stopped_by_signal"])
    result = {
        "task": run.task.name,
        "init": run.init,
        "seed": run.seed,
        "metrics": dev_scores(run, files, folder, summary, job),
        "seconds": summary["wall_time_s"],
        "steps": summary["steps"],
        "best_epoch": summary["best_epoch"],
        "train_examples": files.rows,
        "options": job.options,
    }
    write_json(folder / RESULT_NAME, result)
    return result


def dev_scores(run: Run, files: TaskFiles, folder: Path, summary: dict, job: GlueJob) -> dict[str, float]:
    """The task's GLUE metrics of the run's best epoch on each dev file, in `task.keys()`'s order. Each is
    computed in one place: on the first dev file `finetune`'s own figures where it has them (the same to the
    digit as `nanobert finetune`), and the rest (MRPC's and QQP's F1, MNLI's mismatched accuracy) from the
    best epoch's outputs, scored as `finetune` scores its dev file (same encoding, precision and pair order);
    the model is loaded only when a metric needs it."""
    task, first = run.task, run.task.devs[0]
    scores = {task.key(m, first): summary["dev"][m] for m in task.metrics if m in summary["dev"]}
    loaded = None
    for file, path in zip(task.devs, files.devs, strict=True):
        wanted = [m for m in task.metrics if task.key(m, file) not in scores]
        if not wanted:
            continue
        device = resolve_device(job.cfg.device)
        model, tokenizer, config = loaded = loaded or load_finetuned(folder, device)
        symmetric = bool(config["finetune"].get("symmetric_pairs"))
        max_len, labels = int(config["max_seq_len"]), config["labels"]
        split, _ = load_split(path, task.spec(), tokenizer, max_len, labels, files.train, symmetric)
        amp_dtype = autocast_dtype(config.get("precision", "fp32"), device)
        outputs = split_outputs(model, split, device, amp_dtype, job.cfg.eval_batch_size)
        scores |= task.scores(outputs, split.data.labels, labels, file, wanted)
    return {key: scores[key] for key in task.keys()}


def belongs(result: Path, job: GlueJob) -> bool:
    """Whether a run's result is the one this call labels the test files with: the first seed's pretrained
    run of its task, made with this call's checkpoint and options."""
    try:
        task = GLUE_TASKS[json.loads(result.read_text())["task"]]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    run = Run(task, "pretrained", job.seeds[0])
    return result == run.folder(job.out) / RESULT_NAME and kept_result(run, job) is not None


__all__ = ["CONTROLS", "INITS", "Run", "default_out", "glue"]
