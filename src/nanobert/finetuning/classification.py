"""Fine-tuning a pretrained encoder on sentence(-pair) classification or regression, and prediction.

Follows section 4.1 of Devlin et al. (2019) and google-research/bert `run_classifier.py`: `[CLS] A [SEP]`
or `[CLS] A [SEP] B [SEP]` (segment ids 0 then 1) through the pretrained encoder, the pooled `[CLS]` vector
through dropout and one linear layer (`BertForSequenceClassification`), cross-entropy (or squared error for
regression), AdamW with linear warmup and decay, a few epochs, and the epoch with the best dev metric kept.
`from_scratch=True` trains the same architecture from random initialisation (same tokenizer, same head init,
same budget), which is the control that shows what pretraining bought.

`finetune()` runs a `ClassifierTask` (data from `data/labelled.py`, the classifier) with the one fine-tuning
job (`task.run_task`: setup, the loop every job shares, evaluating on dev at the end of each epoch, and a
summary). A run directory holds `best/` (a
checkpoint of kind "sequence_classification" whose config.json also carries the label mapping, task and
columns), `metrics.jsonl` (train logs and one dev record per epoch) and `summary.json`.
`checkpoint.load_finetuned` reads `best/` back; `predict` labels a file with it and `predict_texts` texts in
memory (both in `use/classifier.py`, the inference side, re-exported here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nanobert.checkpoints.checkpoint import load_state_dict
from nanobert.checkpoints.kinds import SEQUENCE_CLASSIFICATION
from nanobert.config import FinetuneConfig, config_to_dict
from nanobert.data.labelled import Split, TaskSpec, load_split
from nanobert.engine.loop import Job, Plan
from nanobert.engine.run_log import RunLog
from nanobert.engine.run_state import RunState
from nanobert.errors import NanobertError
from nanobert.finetuning.adapt import adapt_encoder, check_adaptation
from nanobert.finetuning.task import Task, epoch_job, run_task, with_encoder
from nanobert.model import BertForPreTraining, BertForSequenceClassification
from nanobert.use.classifier import (
    Prediction,
    classify,
    model_outputs,
    predict,
    predict_texts,
    split_outputs,
)
from nanobert.use.metrics import compute_metrics

CLASSIFICATION_DROPOUT = 0.1
METRICS = {"classification": ("accuracy", "macro_f1", "mcc"), "regression": ("pearson", "spearman")}


# ----------------------------------------------------------------------------------------------------------
# The model: a classifier around a pretrained (or fresh) encoder


def build_classifier(
    pretrained: BertForPreTraining,
    num_labels: int,
    task: str,
    from_scratch: bool,
    seed: int,
    dropout: float | None = None,
    fresh_pooler: bool = False,
    pooling: str = "cls",
) -> BertForSequenceClassification:
    """A BertForSequenceClassification shaped like `pretrained`, holding its encoder unless `from_scratch`
    (the pooler too, unless `fresh_pooler`; the head is seeded the same way either way, and dropout is the
    fine-tuning run's: `task.with_encoder`)."""
    head = lambda config: BertForSequenceClassification(config, num_labels, task, pooling)  # noqa: E731
    return with_encoder(pretrained, head, from_scratch, seed, dropout, fresh_pooler)


def start_at_mean_score(model: BertForSequenceClassification, scores: Any) -> None:
    """Set a regression head's bias to the mean training score, so its first predictions are the mean.

    With the bias at 0 and STS-B's scores around 2.7, the first steps' squared error (~9, against a variance
    of ~2.1) is mostly the offset, and the encoder moves to serve it. From the default-scale checkpoint,
    STS-B dev Pearson after the first epoch rose from 0.165 / 0.109 to 0.424 / 0.424 (seeds 1, 2), the best
    epoch from 0.466 / 0.483 to 0.547 / 0.544 (record 2026-11-27-sts-b-head-and-pooler).
    """
    with torch.no_grad():
        model.classifier.bias.fill_(float(torch.as_tensor(scores, dtype=torch.float64).mean()))


# ----------------------------------------------------------------------------------------------------------
# The run


def finetune(
    checkpoint: str | Path,
    spec: TaskSpec,
    train_file: str | Path,
    dev_file: str | Path,
    out_dir: str | Path,
    cfg: FinetuneConfig | None = None,
    *,
    test_file: str | Path | None = None,
    from_scratch: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Fine-tune the encoder of a pretraining checkpoint on `train_file`; keep the best epoch on `dev_file`.

    Writes OUT/best/ (model, tokenizer, label mapping), OUT/metrics.jsonl and OUT/summary.json; with
    `test_file`, the best model is also scored on it. Returns the summary dict.
    """
    files = {"train": train_file, "dev": dev_file, "test": test_file}
    task = ClassifierTask(spec)
    kwargs = dict(from_scratch=from_scratch, overwrite=overwrite, quiet=quiet)
    return run_task(task, checkpoint, files, out_dir, cfg or FinetuneConfig(), **kwargs)


class ClassifierTask(Task):
    """Sentence(-pair) classification or regression (`spec.task`) as a `task.Task`: the table reader, the
    classifier head, cross-entropy (or squared error), the dev metric, and the label mapping in best/."""

    digits = 4

    def __init__(self, spec: TaskSpec):
        self.spec = spec

    def check(self, cfg: FinetuneConfig, from_scratch: bool) -> None:
        task = self.spec.task
        self.metric = cfg.metric or METRICS[task][0]
        if self.metric not in METRICS[task]:
            raise NanobertError(
                f"metric {self.metric!r} does not apply to {task}; use one of: {', '.join(METRICS[task])}"
            )
        if cfg.symmetric_pairs and self.spec.text_pair_col is None:
            raise NanobertError(
                "--symmetric-pairs reads sentence pairs both ways; give the second text's column "
                "(--text-pair-col)"
            )
        check_adaptation(cfg, from_scratch)

    def load(self, files: dict[str, Any], tokenizer: Any, cfg: FinetuneConfig, pretrained: Any) -> None:
        symmetric = bool(cfg.symmetric_pairs)  # then every split also holds its pairs read B-A
        self.splits, self.labels = _load_splits(files, self.spec, tokenizer, cfg.max_seq_len, symmetric)

    def train_rows(self) -> int:
        train = self.splits["train"]  # counted, not built: both_ways() concatenates
        return len(train.data) * (1 if train.swapped is None else 2)

    def dropout(self, pretrained_config) -> tuple[float, str]:
        """Sentence classification keeps BERT's 0.1 whatever pretraining used: from the no-dropout CPU
        checkpoints SST-2 lost without it (FinetuneConfig.dropout); regression follows pretraining."""
        if self.spec.task == "classification":
            return CLASSIFICATION_DROPOUT, "BERT's, for classification"
        return super().dropout(pretrained_config)

    def fresh_pooler(self) -> tuple[bool, str]:
        """Regression starts from a fresh pooler (one STS-B seed in four stalled on the NSP-trained one:
        FinetuneConfig.fresh_pooler); classification keeps the checkpoint's (SST-2 lost with a fresh one)."""
        if self.spec.task == "regression":
            return True, "the default for regression"
        return super().fresh_pooler()

    def pooling(self) -> tuple[str, str]:
        """Every table task reads the mean of the tokens' final states: on [CLS], one STS-B seed in five fit
        its training pairs without learning the task (FinetuneConfig.pooling)."""
        return "mean", "the default; --pooling cls reads [CLS] as BERT's paper does"

    def symmetric_pairs(self) -> tuple[bool, str]:
        """Sentence-pair regression reads its pairs both ways (similarity and relatedness scores do not
        depend on the order: FinetuneConfig.symmetric_pairs); classification keeps the order (entailment)."""
        if self.spec.task == "regression" and self.spec.text_pair_col is not None:
            return True, "the default for sentence-pair regression; --no-symmetric-pairs keeps the order"
        return super().symmetric_pairs()

    def build(self, pretrained, from_scratch: bool, cfg: FinetuneConfig) -> BertForSequenceClassification:
        num_labels = len(self.labels) if self.labels is not None else 1
        task, fresh = self.spec.task, bool(cfg.fresh_pooler)
        model = build_classifier(
            pretrained, num_labels, task, from_scratch, cfg.seed, cfg.dropout, fresh, cfg.pooling or "mean"
        )
        if task == "regression":
            start_at_mean_score(model, self.splits["train"].data.labels)
        if cfg.max_seq_len > model.config.max_position_embeddings:
            raise NanobertError(
                f"max_seq_len {cfg.max_seq_len} exceeds the model's {model.config.max_position_embeddings} "
                "positions; lower --max-seq-len"
            )
        return model

    def adapt(self, pretrained, model, tokenizer, cfg: FinetuneConfig, out_dir: Path, quiet: bool) -> dict:
        train, dev = self.splits["train"].data, self.splits["dev"].data
        return adapt_encoder(pretrained, model, tokenizer, train, dev, cfg, out_dir, quiet)

    def extra(self, checkpoint, cfg: FinetuneConfig, from_scratch: bool) -> dict[str, Any]:
        """What best/config.json records besides the model: the task, label mapping, columns and recipe."""
        return {
            "task": self.spec.task,
            "labels": self.labels,  # position = class id
            "num_labels": len(self.labels) if self.labels is not None else 1,
            "pooling": cfg.pooling,
            "columns": self.spec.columns(),
            "format": self.splits["train"].table.format,
            "max_seq_len": cfg.max_seq_len,
            "base_checkpoint": str(checkpoint),
            "init": "scratch" if from_scratch else "pretrained",
            "finetune": config_to_dict(cfg),
        }

    def job(self, model, tokenizer, cfg, out_dir, extra, saved: dict, device, quiet: bool) -> tuple:
        task, metric = self.spec.task, self.metric
        return _job(model, tokenizer, self.splits, task, metric, cfg, out_dir, extra, quiet)

    def test(self, model, out_dir: Path, job: Job, cfg: FinetuneConfig) -> dict[str, float]:
        model.load_state_dict(load_state_dict(out_dir / "best"))
        device, test = next(model.parameters()).device, self.splits["test"]
        outputs = split_outputs(model, test, device, job.amp_dtype, cfg.eval_batch_size)
        return compute_metrics(self.spec.task, outputs, test.data.labels)

    def fields(self, out_dir: Path, checkpoint, extra: dict, run: RunState, test: dict | None) -> dict:
        task, best = self.spec.task, run.best()
        return {
            "out": str(out_dir),
            "checkpoint": str(checkpoint),
            "init": extra["init"],
            "task": task,
            "metric": self.metric,
            "labels": self.labels,
            "best_epoch": best["epoch"],
            "dev": {k: best[k] for k in METRICS[task] + (("mse",) if task == "regression" else ())},
            "test": test,
            "examples": {
                k: len(split.data) if split is not None else None for k, split in self.splits.items()
            },
            "columns": self.spec.columns(),
        }

    def closing(self, run: RunState, out_dir: Path) -> str:
        best, metric = run.best(), self.metric
        return (
            f"nanobert: best dev {metric} {best[metric]:.4f} at epoch {best['epoch']}, "
            f"{run.train_time:.0f} s; model in {out_dir / 'best'}"
        )


def _load_splits(
    files: dict[str, str | Path | None], spec: TaskSpec, tokenizer: Any, max_seq_len: int, symmetric: bool
) -> tuple[dict[str, Split | None], list[str] | None]:
    """Read and encode the train, dev and (optional) test files; the train file fixes the label mapping.
    With `symmetric`, each split holds its pairs read B-A too."""
    train, labels = load_split(files["train"], spec, tokenizer, max_seq_len, None, symmetric=symmetric)
    splits: dict[str, Split | None] = {"train": train}
    for name in ("dev", "test"):
        path = files[name]
        splits[name] = (
            None
            if path is None
            else load_split(path, spec, tokenizer, max_seq_len, labels, files["train"], symmetric)[0]
        )
    return splits, labels


def _job(
    model: BertForSequenceClassification,
    tokenizer: Any,
    splits: dict[str, Split | None],
    task: str,
    metric: str,
    cfg: FinetuneConfig,
    out_dir: Path,
    extra: dict[str, Any],
    quiet: bool,
) -> tuple[Job, Plan, RunState, RunLog]:
    """What the loop needs: epochs of shuffled batches, the loss, a dev evaluation per epoch, saving best/."""
    device = next(model.parameters()).device
    train, dev = splits["train"], splits["dev"]

    def evaluate(amp_dtype: torch.dtype | None) -> dict[str, float]:
        outputs = split_outputs(model, dev, device, amp_dtype, cfg.eval_batch_size)
        return compute_metrics(task, outputs, dev.data.labels)

    # A symmetric task trains on every pair read both ways; dev and test score their mean (split_outputs).
    job, plan, run, log = epoch_job(
        model, tokenizer, train.both_ways(), cfg, out_dir, loss=lambda m, batch: {"loss": m(**batch).loss},
        evaluate=evaluate, metric=metric, kind=SEQUENCE_CLASSIFICATION, extra=extra, quiet=quiet,
    )  # fmt: skip
    target = f"{len(extra['labels'])} labels" if extra["labels"] else "a score"
    log.say(
        f"nanobert: fine-tuning {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters "
        f"({extra['init']} encoder) to predict {target}; {len(train.data)} train / {len(dev.data)} dev "
        f"examples, {cfg.epochs} epochs of {plan.eval_interval} steps on {device}"
    )
    return job, plan, run, log


__all__ = [
    "METRICS",
    "Prediction",
    "build_classifier",
    "classify",
    "finetune",
    "model_outputs",
    "predict",
    "predict_texts",
]
