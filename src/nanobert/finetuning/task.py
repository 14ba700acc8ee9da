"""What every fine-tuning job shares: an encoder taken from a pretraining checkpoint (or its from-scratch
control), the start of the run (device, output directory, seeds), the loop's setup for epochs of shuffled
examples with a dev evaluation after each epoch and the best epoch saved as best/, the record of the best
epoch's test scores, and the part of summary.json every task writes.

`classification.py` (classification and regression) and `qa.py` (extractive question answering) differ only in
their head, their data, their loss, their dev metric and their summary: each is a `Task`, and `run_task` is
the one job that runs either, in one order of steps around the loop every job runs (`engine.loop.fit`).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoints.checkpoint import checkpoint_tokenizer, load_language_model, save_checkpoint
from nanobert.checkpoints.kinds import kind_of_model, wrong_kind
from nanobert.config import FinetuneConfig, ModelConfig
from nanobert.data.labelled import Encoded, ExampleStream, collate
from nanobert.device import hardware_description, resolve_device
from nanobert.engine.loop import Job, Outcome, Plan, fit, run_summary
from nanobert.engine.optimizer import build_optimizer
from nanobert.engine.precision import training_precision
from nanobert.engine.run_log import RunLog, checkpoint_bytes, prepare_out_dir, write_summary
from nanobert.engine.run_state import RunState
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining


def with_encoder(
    pretrained: BertForPreTraining,
    head_model: Callable[[ModelConfig], torch.nn.Module],
    from_scratch: bool,
    seed: int,
    dropout: float | None,
    fresh_pooler: bool = False,
) -> torch.nn.Module:
    """A task model built by `head_model(config)` under `seed`, with the pretrained encoder unless
    `from_scratch`; `config` is the pretrained one with `dropout` for the hidden states and attention
    (None: the pretrained config's).

    The head (and, from scratch, the encoder) is initialised from `seed`, so a pretrained run and its
    from-scratch control start from the same head. A head model without a pooler takes the encoder only.
    The from-scratch control is the checkpoint's config from random weights (`control_start` says what
    that start is: the recipes' roles attention is in it), at the default position-table spread whatever
    pretraining used, and with the same dropout as the pretrained run, so the two differ only by the
    encoder's weights. With `fresh_pooler` the pooler keeps its own init from `seed` rather than the
    checkpoint's weights.
    """
    torch.manual_seed(seed)
    overrides: dict[str, float] = {}
    if dropout is not None:  # None: the pretrained config's own
        overrides.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    if from_scratch:
        # The control's position table at the default spread: scaled up for fast pretraining (the CPU
        # preset's 3x) it left small from-scratch fine-tuning runs at chance, which would flatter pretraining.
        overrides["position_embedding_scale"] = ModelConfig.position_embedding_scale  # the default, 1.0
    # Fine-tuning reads both ways, whatever the pretraining objective (a hybrid model's encoder too).
    config = dataclasses.replace(pretrained.config, is_decoder=False, **overrides)
    model = head_model(config)
    if not from_scratch:
        copy_encoder(pretrained, model, pooler=not fresh_pooler)
    return model


def control_start(config: ModelConfig) -> str:
    """What the from-scratch control (`finetune --from-scratch`, `glue --control scratch`) starts from, in
    words: the checkpoint's config from random weights, which is BERT's normal(0.02) noise only where the
    config asks for no other start."""
    attention = {
        "normal": "attention at BERT's normal(0.02) noise",
        "mimetic": "mimetic attention (keys start as copies of the queries)",
        "roles": "roles attention (half the heads start reading where a token is, half what it is)",
    }[config.attention_init]
    positions = (
        "sinusoidal position rows"
        if config.position_embedding_init == "sinusoidal"
        else "position rows drawn at random"
    )
    return (
        f"the checkpoint's config from random weights: {attention}, {positions} at the default spread "
        f"({ModelConfig.position_embedding_scale:g})"
    )


def default_epochs(steps_per_epoch: int, cfg: FinetuneConfig) -> int:
    """Epochs when none are asked for: 3, or enough for `cfg.min_steps` steps on a small training set, at
    most `cfg.max_default_epochs` (FinetuneConfig.epochs says why)."""
    wanted = math.ceil(cfg.min_steps / max(1, steps_per_epoch))
    return max(3, min(cfg.max_default_epochs, wanted))


def copy_encoder(pretrained: BertForPreTraining, model: torch.nn.Module, pooler: bool = True) -> None:
    """`pretrained`'s encoder (and pooler, where both have one, unless `pooler` is False) into `model.bert`;
    the MLM and NSP heads stay behind. A language model without a pooler (causal, hybrid) leaves the task
    model's fresh one."""
    state = pretrained.bert.state_dict()
    if model.bert.pooler is None or not pooler:
        state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    missing, unexpected = model.bert.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("pooler.") for k in missing):
        raise RuntimeError(f"encoder weights do not fit: missing {missing}, unexpected {unexpected}")


def start_run(
    model: torch.nn.Module,
    cfg: FinetuneConfig,
    out_dir: Path,
    overwrite: bool,
    checkpoint: str | Path,
    files: dict[str, str | Path | None],
) -> torch.device:
    """The last of a job's setup: `model` moved to `cfg.device` (returned), `out_dir` claimed for a fresh run
    (never the run that holds `checkpoint` or one of the data `files`, nor a folder inside the checkpoint,
    even with `overwrite`), Python and torch seeded from `cfg.seed` (dropout). Called once the checkpoint and
    data have loaded, so that every error in them comes before the output directory is touched."""
    device = resolve_device(cfg.device)
    model.to(device)
    need = checkpoint_bytes(model, trainer_state=False)
    prepare_out_dir(out_dir, overwrite, resumable=False, inputs=(checkpoint, *files.values()), need=need)
    seed_run(cfg.seed)
    return device


def seed_run(seed: int) -> None:
    """Python's and torch's generators (dropout, shuffles) as a fine-tuning run starts them."""
    random.seed(seed)
    torch.manual_seed(seed)


def record_test(log: RunLog, run: RunState, metrics: dict[str, float], digits: int) -> None:
    """The best epoch's scores on the test file: a metrics.jsonl record and a line of `digits` decimals."""
    log.record({"split": "test", "step": run.step, "epoch": run.best()["epoch"], **metrics})
    log.say("test (best epoch): " + "  ".join(f"{k} {v:.{digits}f}" for k, v in metrics.items()))


def write_run_summary(
    out_dir: Path,
    task_fields: dict[str, Any],
    *,
    run: RunState,
    outcome: Outcome,
    wall_start: float,
    model: torch.nn.Module,
    device: torch.device,
    cfg: FinetuneConfig,
    files: dict[str, str | Path | None],
    adaptation: dict | None,
) -> dict[str, Any]:
    """summary.json of a fine-tuning run: the task's own fields (scores, examples, ...) first, then what every
    task reports: the dev history, the adaptation, the files, the loop's summary and the config. Returned."""
    summary = {
        **task_fields,
        "dev_history": run.history,
        "adaptation": adaptation,
        "files": {k: str(v) if v is not None else None for k, v in files.items()},
        **run_summary(run, outcome, wall_start, model, hardware_description(device)),
        "finetune": dataclasses.asdict(cfg),
    }
    write_summary(out_dir, summary)
    return summary


def _epochs_plan(cfg: FinetuneConfig, steps_per_epoch: int) -> Plan:
    """`cfg.epochs` epochs with a dev evaluation at the end of each, and no resumable checkpoint."""
    return Plan(
        learning_rate=cfg.learning_rate,
        warmup_ratio=cfg.warmup_ratio,
        total_steps=cfg.epochs * steps_per_epoch,
        grad_clip=cfg.grad_clip,
        log_interval=cfg.log_interval,
        eval_interval=steps_per_epoch,  # evaluate at the end of every epoch
        checkpoint_interval=None,
        resumable=False,
    )


def epoch_job(
    model: torch.nn.Module,
    tokenizer: Any,
    train: Encoded,
    cfg: FinetuneConfig,
    out_dir: Path,
    *,
    loss: Callable,
    evaluate: Callable[[torch.dtype | None], dict[str, float]],
    metric: str,
    kind: str,
    extra: dict[str, Any],
    quiet: bool,
) -> tuple[Job, Plan, RunState, RunLog]:
    """What the loop needs for `cfg.epochs` epochs of `train`: AdamW (with layer-wise decay when asked),
    the precision (`engine.precision.training_precision` on a batch of `train`), the plan (a dev evaluation,
    `evaluate(autocast dtype)`, at every epoch's end; the best by `metric` saved as best/ of `kind`, its
    config.json carrying `extra`, the precision, the epoch and the dev metrics)."""
    device = next(model.parameters()).device
    sample = collate(train, np.arange(min(cfg.batch_size, len(train))))
    amp_dtype, why = training_precision(cfg.precision, model, loss, sample, device, kind)
    extra = {**extra, "precision": "bf16" if amp_dtype else "fp32"}
    optimizer = build_optimizer(
        model, cfg.learning_rate, cfg.weight_decay, eps=cfg.adam_eps, layer_lr_decay=cfg.layer_lr_decay
    )
    stream = ExampleStream(train, cfg.batch_size, cfg.seed)
    steps_per_epoch = stream.batches_per_epoch()
    plan = _epochs_plan(cfg, steps_per_epoch)
    run = RunState()

    def evaluate_epoch() -> dict[str, float]:
        return {"epoch": run.step // steps_per_epoch, **evaluate(amp_dtype)}

    def save(name: str, run: RunState, state: dict | None) -> Path:
        record = run.history[-1]
        dev_metrics = {k: v for k, v in record.items() if k not in ("step", "epoch")}
        extras = {**extra, "epoch": record["epoch"], "dev_metrics": dev_metrics}
        return save_checkpoint(out_dir / name, model, None, tokenizer, extra=extras, kind=kind)

    job = Job(
        model=model,
        train_model=model,
        optimizer=optimizer,
        feeder=stream,
        data_state=stream.state_dict(),
        loss=loss,
        evaluate=evaluate_epoch,
        save=save,
        device=device,
        amp_dtype=amp_dtype,
        metric=metric,
        higher_is_better=True,
        eval_split="dev",
        divergence_hint="lower --learning-rate",
    )
    log = RunLog(out_dir, plan.total_steps, 0, quiet)
    log.say(f"nanobert: precision {why}")
    return job, plan, run, log


# ----------------------------------------------------------------------------------------------------------
# A task, and the one job that runs any task


class Task:
    """One fine-tuning run of a task: the parts that differ between tasks, which `run_task` calls in its one
    order of steps. A subclass sets `digits` (of the test scores' line) and fills in the methods; it keeps
    what they load (splits, labels, windows) on itself."""

    digits: int

    def check(self, cfg: FinetuneConfig, from_scratch: bool) -> None:
        """NanobertError for settings the task cannot run, before anything loads."""

    def load(self, files: dict[str, Any], tokenizer: Any, cfg: FinetuneConfig, pretrained: Any) -> None:
        """Read and encode the train, dev and (optional) test files."""
        raise NotImplementedError

    def build(
        self, pretrained: BertForPreTraining, from_scratch: bool, cfg: FinetuneConfig
    ) -> torch.nn.Module:
        """The task model: its head around `pretrained`'s encoder (or a fresh one: `with_encoder`)."""
        raise NotImplementedError

    def adapt(self, pretrained, model, tokenizer, cfg: FinetuneConfig, out_dir: Path, quiet: bool) -> dict:
        """Masked-LM on the task's own text first (adapt.py), with `cfg.adapt_epochs`; its summary."""
        raise NotImplementedError

    def train_rows(self) -> int:
        """Rows (examples, or QA windows) in the loaded training split: what an epoch steps through."""
        raise NotImplementedError

    def dropout(self, pretrained_config: ModelConfig) -> tuple[float, str]:
        """The fine-tuning dropout when none is asked for, and why: by default what the encoder was pretrained
        with, so fine-tuning starts from the statistics pretraining shaped (see `FinetuneConfig.dropout`)."""
        return pretrained_config.hidden_dropout_prob, "as the checkpoint was pretrained"

    def fresh_pooler(self) -> tuple[bool, str]:
        """Whether the head reads a fresh pooler when none is asked for, and why
        (`FinetuneConfig.fresh_pooler`); by default the checkpoint's."""
        return False, "the default"

    def pooling(self) -> tuple[str | None, str]:
        """What the pooler reads when not asked (`FinetuneConfig.pooling`), and why; None for a head that
        reads every token (question answering)."""
        return None, "no pooler"

    def symmetric_pairs(self) -> tuple[bool, str]:
        """Whether pairs are read both ways when not asked (`FinetuneConfig.symmetric_pairs`), and why; by
        default not: the order of a question and its passage, or of a premise and its hypothesis, matters."""
        return False, "the default"

    def extra(self, checkpoint: str | Path, cfg: FinetuneConfig, from_scratch: bool) -> dict[str, Any]:
        """What best/config.json records besides the model."""
        raise NotImplementedError

    def job(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        cfg: FinetuneConfig,
        out_dir: Path,
        extra: dict[str, Any],
        saved: dict,  # the pretraining checkpoint's config.json
        device: torch.device,
        quiet: bool,
    ) -> tuple[Job, Plan, RunState, RunLog]:
        """What the loop needs (`epoch_job`: the task's loss, dev evaluation and metric) and the lines that
        announce the run: (job, plan, run, log)."""
        raise NotImplementedError

    def after_fit(self, model: torch.nn.Module, out_dir: Path) -> None:
        """What the task does with its best epoch before the test file (QA: the dev answers)."""

    def test(self, model: torch.nn.Module, out_dir: Path, job: Job, cfg: FinetuneConfig) -> dict[str, float]:
        """The best epoch's scores on the test file."""
        raise NotImplementedError

    def fields(self, out_dir: Path, checkpoint, extra: dict, run: RunState, test: dict | None) -> dict:
        """The task's own fields of summary.json (scores, examples, ...), first in it."""
        raise NotImplementedError

    def closing(self, run: RunState, out_dir: Path) -> str:
        """The run's last line."""
        raise NotImplementedError


def _task_default(
    cfg: FinetuneConfig, field: str, choose: Callable, given: str, whys: dict[str, str]
) -> tuple[FinetuneConfig, dict[str, str]]:
    """`cfg` with `field` set to the task's measured default (`choose()` gives the value and why) when
    the user left it None, so summary.json records the value used; and `whys` with why it has that value
    (`given` when the user set it)."""
    if getattr(cfg, field) is not None:
        return cfg, {**whys, field: given}
    value, why = choose()
    return dataclasses.replace(cfg, **{field: value}), {**whys, field: why}


def say_choices(
    log: RunLog, cfg: FinetuneConfig, whys: dict[str, str], model, pretrained, from_scratch
) -> None:
    """The log's lines on what the run chose and why: dropout, the control's start, the pooler and what it
    reads, the pairs' order."""
    log.say(f"nanobert: dropout {cfg.dropout:g} ({whys['dropout']})")
    if from_scratch:
        log.say(f"nanobert: the from-scratch control: {control_start(pretrained.config)}")
    if getattr(model.bert, "pooler", None) is not None and not from_scratch:
        has_one = getattr(pretrained.bert, "pooler", None) is not None  # a causal checkpoint has none
        source = "from the checkpoint" if has_one and not cfg.fresh_pooler else "fresh"
        log.say(
            f"nanobert: pooler {source} ({whys['fresh_pooler'] if has_one else 'the checkpoint has none'})"
        )
    if cfg.pooling is not None:
        read = "the mean of every token's final state" if cfg.pooling == "mean" else "the [CLS] final state"
        log.say(f"nanobert: the pooler reads {read} ({whys['pooling']})")
    if cfg.symmetric_pairs:
        why = whys["symmetric_pairs"]
        log.say(f"nanobert: pairs read both ways, A-B and B-A, in training and scoring ({why})")


def run_task(
    task: Task,
    checkpoint: str | Path,
    files: dict[str, str | Path | None],
    out_dir: str | Path,
    cfg: FinetuneConfig,
    *,
    from_scratch: bool,
    overwrite: bool,
    quiet: bool,
) -> dict[str, Any]:
    """Fine-tune a pretraining checkpoint's encoder for `task` on files["train"], keep the best epoch on
    files["dev"], score it on files["test"] when given; write best/, metrics.jsonl and summary.json (and
    what the task adds). Returns the summary dict."""
    wall_start, out_dir = time.perf_counter(), Path(out_dir)
    task.check(cfg, from_scratch)
    # setup: checkpoint and data first (every error before the output directory is touched), then the model
    pretrained, saved = load_language_model(checkpoint)
    kind = kind_of_model(pretrained)
    if "finetune" not in kind.commands:
        raise wrong_kind(checkpoint, kind.name, "a pretraining checkpoint")
    if cfg.adapt_epochs and not isinstance(pretrained, BertForPreTraining):
        raise NanobertError("--adapt-epochs re-runs BERT's masked-LM and NSP heads; this checkpoint has none")
    tokenizer = checkpoint_tokenizer(checkpoint, pretrained, saved)
    # before loading: it decides the training rows
    cfg, whys = _task_default(cfg, "symmetric_pairs", task.symmetric_pairs, "--symmetric-pairs", {})
    task.load(files, tokenizer, cfg, pretrained)
    cfg, whys = _task_default(cfg, "dropout", lambda: task.dropout(pretrained.config), "--dropout", whys)
    given = "--fresh-pooler" if cfg.fresh_pooler else "--no-fresh-pooler"
    cfg, whys = _task_default(cfg, "fresh_pooler", task.fresh_pooler, given, whys)
    cfg, whys = _task_default(cfg, "pooling", task.pooling, f"--pooling {cfg.pooling}", whys)
    if cfg.epochs is None:
        steps_per_epoch = math.ceil(task.train_rows() / cfg.batch_size)
        cfg = dataclasses.replace(cfg, epochs=default_epochs(steps_per_epoch, cfg))
    model = task.build(pretrained, from_scratch, cfg)
    device = start_run(model, cfg, out_dir, overwrite, checkpoint, files)
    adaptation = task.adapt(pretrained, model, tokenizer, cfg, out_dir, quiet) if cfg.adapt_epochs else None
    extra = task.extra(checkpoint, cfg, from_scratch)
    # the loop: epochs of shuffled batches, a dev evaluation after each, the best one saved
    job, plan, run, log = task.job(model, tokenizer, cfg, out_dir, extra, saved, device, quiet)
    say_choices(log, cfg, whys, model, pretrained, from_scratch)
    outcome = fit(job, plan, run, log)
    task.after_fit(model, out_dir)
    # the best epoch on the test file, if one was given
    test_metrics = None
    if files.get("test") is not None:
        test_metrics = task.test(model, out_dir, job, cfg)
        record_test(log, run, test_metrics, digits=task.digits)
    summary = write_run_summary(
        out_dir, task.fields(out_dir, checkpoint, extra, run, test_metrics), run=run, outcome=outcome,
        wall_start=wall_start, model=model, device=device, cfg=cfg, files=files, adaptation=adaptation,
    )  # fmt: skip
    log.say(task.closing(run, out_dir))
    return summary


__all__ = [
    "Task",
    "control_start",
    "copy_encoder",
    "epoch_job",
    "record_test",
    "run_task",
    "seed_run",
    "start_run",
    "with_encoder",
    "write_run_summary",
]
