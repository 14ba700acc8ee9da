"""Extractive question answering: fine-tune on SQuAD, predict a file's answers, answer one question.

Follows section 4.2 of Devlin et al. (2019) and google-research/bert `run_squad.py`: a start and an end score
per word piece (`BertForQuestionAnswering`, transformers' `qa_outputs`), cross-entropy on the gold start and
end (the mean of the two), AdamW with linear warmup and decay, the epoch with the best dev F1 kept. Data,
windows and decoding are in `data/squad.py`; exact match and F1 are SQuAD's own (`metrics.squad_scores`), by
the official v1.1 script's rules for v1.1 data and the 2.0 script's for 2.0 data.

`finetune_qa()` is setup, the loop every job runs (via `task.epoch_job`), and a summary; it scores the dev
questions after each epoch with `QAModel`. `QAModel` (from `load_qa_model`) answers: `predict(examples)` for a
whole SQuAD file (what `nanobert predict` writes, the official `{question id: answer text}` file) and
`answer(question, context)` for one question (`nanobert answer`); it lives in `use/answers.py`, the inference
side, and is re-exported here. Dev evaluation packs windows into length-sorted batches, so little goes to
padding.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoints.checkpoint import load_state_dict
from nanobert.checkpoints.kinds import QUESTION_ANSWERING
from nanobert.config import QAConfig, config_to_dict
from nanobert.data.labelled import Encoded
from nanobert.data.squad import QAExample, QAFeatures, featurize, read_squad
from nanobert.errors import NanobertError
from nanobert.finetuning.adapt import adapt_encoder, check_adaptation
from nanobert.finetuning.task import Task, epoch_job, run_task, with_encoder
from nanobert.model import BertForPreTraining, BertForQuestionAnswering
from nanobert.use.answers import (
    QAModel,
    golds,
    is_version_2,
    load_qa_model,
    predict_qa,
    span_logits,
    write_answers,
)

# ----------------------------------------------------------------------------------------------------------
# The run


def finetune_qa(
    checkpoint: str | Path,
    train_file: str | Path,
    dev_file: str | Path,
    out_dir: str | Path,
    cfg: QAConfig | None = None,
    *,
    test_file: str | Path | None = None,
    from_scratch: bool = False,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Fine-tune a pretraining checkpoint's encoder for SQuAD-style QA; keep the epoch with the best dev F1.

    Writes OUT/best/ (a "question_answering" checkpoint), OUT/metrics.jsonl, OUT/summary.json and
    OUT/predictions.json (the best epoch's dev answers); with `test_file` (e.g. XQuAD) the best model is
    scored on it too. Returns the summary dict.
    """
    files = {"train": train_file, "dev": dev_file, "test": test_file}
    kwargs = dict(from_scratch=from_scratch, overwrite=overwrite, quiet=quiet)
    return run_task(QATask(), checkpoint, files, out_dir, cfg or QAConfig(), **kwargs)


class QATask(Task):
    """Extractive question answering as a `task.Task`: SQuAD's reader and windows, the span head, the mean
    of the start and end cross-entropies, SQuAD's exact match and F1 on the dev answers, and the best epoch's
    dev answers in predictions.json."""

    digits = 2

    def check(self, cfg: QAConfig, from_scratch: bool) -> None:
        if cfg.symmetric_pairs:
            raise NanobertError(
                "--symmetric-pairs is for sentence pairs; a question and its passage have an order"
            )
        check_adaptation(cfg, from_scratch)

    def load(self, files: dict[str, Any], tokenizer: Any, cfg: QAConfig, pretrained: Any) -> None:
        positions = pretrained.config.max_position_embeddings
        self.splits, self.features = _qa_data(files, tokenizer, cfg, positions)

    def train_rows(self) -> int:
        return len(self.features)

    def build(self, pretrained, from_scratch: bool, cfg: QAConfig) -> BertForQuestionAnswering:
        self.from_scratch = from_scratch  # the window note leaves the control alone
        return with_encoder(pretrained, BertForQuestionAnswering, from_scratch, cfg.seed, cfg.dropout)

    def adapt(self, pretrained, model, tokenizer, cfg: QAConfig, out_dir: Path, quiet: bool) -> dict:
        return _adapt(pretrained, model, tokenizer, self.splits["dev"], self.features, cfg, out_dir, quiet)

    def extra(self, checkpoint, cfg: QAConfig, from_scratch: bool) -> dict[str, Any]:
        splits = self.splits
        return {
            "task": "qa",
            "version_2_with_negative": is_version_2(splits["train"]) or is_version_2(splits["dev"]),
            "base_checkpoint": str(checkpoint),
            "init": "scratch" if from_scratch else "pretrained",
            "finetune": config_to_dict(cfg),
        }

    def job(self, model, tokenizer, cfg: QAConfig, out_dir, extra, saved, device, quiet: bool) -> tuple:
        splits, features = self.splits, self.features
        self.qa = qa = QAModel(model, tokenizer, extra)
        positions = np.asarray(features.positions, dtype=np.int64)
        job, plan, run, log = epoch_job(
            model, tokenizer, Encoded(features.input_ids, features.token_type_ids, positions), cfg, out_dir,
            loss=_span_loss, evaluate=lambda amp_dtype: qa.score(splits["dev"]), metric=cfg.metric or "f1",
            kind=QUESTION_ANSWERING, extra=extra, quiet=quiet,
        )  # fmt: skip
        qa.amp_dtype = job.amp_dtype  # dev answers in the precision the run chose
        log.say(
            f"nanobert: fine-tuning {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters "
            f"({extra['init']} encoder) for question answering; {len(splits['train'])} train questions in "
            f"{len(features)} windows of at most {cfg.max_seq_len}, {len(splits['dev'])} dev questions; "
            f"{cfg.epochs} epochs of {plan.eval_interval} steps on {device}"
        )
        if note := _window_note(saved, cfg, self.from_scratch):
            log.say(note)
        return job, plan, run, log

    def after_fit(self, model, out_dir: Path) -> None:
        model.load_state_dict(load_state_dict(out_dir / "best"))  # the best epoch answers from here on
        write_answers(self.qa.predict(self.splits["dev"]), out_dir / "predictions.json")

    def test(self, model, out_dir: Path, job, cfg: QAConfig) -> dict[str, float]:
        return self.qa.score(self.splits["test"])

    def fields(self, out_dir: Path, checkpoint, extra: dict, run, test: dict | None) -> dict:
        best = run.best()
        return {
            "out": str(out_dir),
            "checkpoint": str(checkpoint),
            "init": extra["init"],
            "task": "qa",
            "best_epoch": best["epoch"],
            "dev": {k: best[k] for k in ("exact_match", "f1")},
            "test": test,
            "examples": {k: len(v) for k, v in self.splits.items() if v is not None}
            | {"train_windows": len(self.features)},
        }

    def closing(self, run, out_dir: Path) -> str:
        best = run.best()
        return f"nanobert: best dev F1 {best['f1']:.2f} at epoch {best['epoch']}; model in {out_dir / 'best'}"


def _adapt(
    pretrained: BertForPreTraining,
    model: BertForQuestionAnswering,
    tokenizer: Any,
    dev: list[QAExample],
    features: QAFeatures,
    cfg: QAConfig,
    out_dir: Path,
    quiet: bool,
) -> dict[str, Any] | None:
    """With `cfg.adapt_epochs`: masked-LM on the training windows first (adapt.py), scored on the dev
    questions' windows; None otherwise."""
    if not cfg.adapt_epochs:
        return None
    dev_features = featurize(dev, tokenizer, cfg.max_seq_len, cfg.doc_stride, cfg.max_query_length)
    rows = [Encoded(f.input_ids, f.token_type_ids) for f in (features, dev_features)]
    return adapt_encoder(pretrained, model, tokenizer, *rows, cfg, out_dir, quiet)


def _window_note(saved: dict, cfg: QAConfig, from_scratch: bool) -> str | None:
    """A note when QA windows reach positions the checkpoint never pretrained (their embeddings are still the
    initial ones). Measured on SQuAD from the 128-token CPU preset (record 2026-11-25-squad-128-windows):
    windows of 128 trained 3x faster to the same dev F1 as the default 384."""
    seen = (saved.get("train") or {}).get("max_seq_len")
    if from_scratch or not seen or cfg.max_seq_len <= seen:
        return None
    return (
        f"nanobert: note: this checkpoint was pretrained on windows of {seen} tokens, so positions {seen}-"
        f"{cfg.max_seq_len - 1} start untrained; --max-seq-len {seen} --doc-stride {seen // 2} keeps to what "
        "it learned (and is faster)"
    )


def _qa_data(
    files: dict[str, Any], tokenizer: Any, cfg: QAConfig, max_positions: int
) -> tuple[dict[str, list[QAExample] | None], QAFeatures]:
    """The train, dev and (optional) test questions, checked, and the training windows."""
    if (cfg.metric or "f1") not in ("f1", "exact_match"):
        raise NanobertError(f"metric {cfg.metric!r} does not apply to qa; use f1 or exact_match")
    if cfg.max_seq_len > max_positions:
        raise NanobertError(f"--max-seq-len {cfg.max_seq_len} exceeds the model's {max_positions} positions")
    splits = {k: read_squad(v) if v is not None else None for k, v in files.items()}
    if cfg.max_train_examples is not None and cfg.max_train_examples < len(splits["train"]):
        splits["train"] = random.Random(cfg.seed).sample(splits["train"], cfg.max_train_examples)  # seeded
    if not golds(splits["dev"]):
        raise NanobertError(f"{files['dev']} has no answers to score against; give a labelled dev file")
    return splits, featurize(
        splits["train"], tokenizer, cfg.max_seq_len, cfg.doc_stride, cfg.max_query_length
    )


def _span_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    positions = batch.pop("labels")  # (B, 2): start, end
    return {"loss": model(**batch, start_positions=positions[:, 0], end_positions=positions[:, 1]).loss}


__all__ = ["QAModel", "finetune_qa", "golds", "is_version_2", "load_qa_model", "predict_qa", "span_logits"]
