"""Extractive question answering: fine-tune on SQuAD, predict a file's answers, answer one question.

Follows section 4.2 of Devlin et al. (2019) and google-research/bert `run_squad.py`: a start and an end
score per word piece (`BertForQuestionAnswering`, transformers' `qa_outputs`), cross-entropy on the gold
start and end (the mean of the two), AdamW with linear warmup and decay, the epoch with the best dev F1 kept.
Data, windows and decoding are in `qa_data.py`; exact match and F1 are SQuAD's own (`metrics.squad_scores`),
by the official v1.1 script's rules for v1.1 data and the 2.0 script's for 2.0 data.

`finetune_qa()` is setup, the loop every job runs (via `tuning.epoch_job`), and a summary. `QAModel` (from
`load_qa_model`) answers: `predict(examples)` for a whole SQuAD file (what `nanobert predict` writes, the
official `{question id: answer text}` file) and `answer(question, context)` for one question
(`nanobert answer`). Dev evaluation packs windows into length-sorted batches, so little goes to padding.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.adapt import adapt_encoder, check_adaptation
from nanobert.checkpoint import (
    QUESTION_ANSWERING,
    checkpoint_tokenizer,
    load_pretraining_checkpoint,
    load_qa,
    load_state_dict,
)
from nanobert.config import QAConfig, config_from_dict, config_to_dict
from nanobert.device import autocast, autocast_dtype, evaluating, resolve_device
from nanobert.engine import fit
from nanobert.errors import NanobertError, atomic_file, check_output_file
from nanobert.finetune_data import Encoded, length_sorted_batches
from nanobert.inference import require_words
from nanobert.metrics import squad_scores
from nanobert.model import BertForPreTraining, BertForQuestionAnswering
from nanobert.qa_data import Answer, QAExample, QAFeatures, best_answers, featurize, read_squad
from nanobert.tuning import epoch_job, record_test, start_run, with_encoder, write_run_summary


class QAModel:
    """A fine-tuned question-answering model with its tokenizer and window settings, ready to answer.

    A SQuAD 2.0 model (trained with unanswerable questions) answers "" when the [CLS] score beats the best
    span's by more than `null_score_threshold`: the one it was trained with (config.json), unless given here.
    A v1.1 model always answers a span, so a threshold does not apply to it (NanobertError).
    """

    def __init__(
        self,
        model: BertForQuestionAnswering,
        tokenizer: Any,
        config: dict,
        null_score_threshold: float | None = None,
    ):
        self.model, self.tokenizer, self.config = model.eval(), tokenizer, config
        self.settings = config_from_dict(QAConfig, config.get("finetune") or {})  # checks the types
        self.with_no_answer = bool(config.get("version_2_with_negative", False))
        if null_score_threshold is not None and not math.isfinite(null_score_threshold):
            raise NanobertError(f"--null-score-threshold must be a finite number, not {null_score_threshold}")
        if null_score_threshold is not None and not self.with_no_answer:
            raise NanobertError(
                "--null-score-threshold applies only to a SQuAD 2.0 model (trained with unanswerable "
                "questions); this one was trained on v1.1 data and always answers a span"
            )
        given, recorded = null_score_threshold, self.settings.null_score_threshold
        self.null_threshold = (recorded if given is None else given) if self.with_no_answer else None
        self.device = next(model.parameters()).device
        self.amp_dtype = autocast_dtype(config.get("precision", self.settings.precision), self.device)

    def predict(self, examples: list[QAExample], batch_size: int | None = None) -> dict[str, Answer]:
        """The best answer to every example (by id); `batch_size` windows at a time (default: the run's
        eval_batch_size)."""
        s = self.settings
        features = featurize(examples, self.tokenizer, s.max_seq_len, s.doc_stride, s.max_query_length)
        batch_size = batch_size or s.eval_batch_size
        starts, ends = span_logits(self.model, features, self.device, self.amp_dtype, batch_size)
        return best_answers(
            examples, features, starts, ends, s.max_answer_length, s.n_best_size, self.null_threshold
        )

    def score(self, examples: list[QAExample], batch_size: int | None = None) -> dict[str, float]:
        """SQuAD's exact match and F1 of this model's answers to labelled examples, by the rules of their
        dataset's version (2.0 for a file with unanswerable questions, else v1.1)."""
        answers = {k: a.text for k, a in self.predict(examples, batch_size).items()}
        return squad_scores(answers, golds(examples), version_2=is_version_2(examples))

    def answer(self, question: str, context: str) -> Answer:
        """The answer to one question about one context: its text (a substring of the context), character
        span and probability."""
        if not question.strip() or not context.strip():
            raise NanobertError("the question and the context must both hold some text")
        require_words(question, context)  # and valid Unicode, which the tokenizer needs
        return self.predict([QAExample("q", question, context, None)])["q"]


def load_qa_model(
    directory: str | Path, device: str = "cpu", null_score_threshold: float | None = None
) -> QAModel:
    """A QA checkpoint (RUN/best, or the run directory) on `device` ("cpu", "cuda", "auto"), ready to answer;
    `null_score_threshold` overrides the recorded one of a SQuAD 2.0 model."""
    model, tokenizer, config = load_qa(directory, resolve_device(device))
    return QAModel(model, tokenizer, config, null_score_threshold)


@torch.no_grad()
def span_logits(
    model: BertForQuestionAnswering,
    features: QAFeatures,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    batch_size: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Start and end logits of every window (each as long as its window), from length-sorted batches."""
    starts: list[np.ndarray] = [None] * len(features)  # type: ignore[list-item]
    ends: list[np.ndarray] = [None] * len(features)  # type: ignore[list-item]
    windows = Encoded(features.input_ids, features.token_type_ids)
    with evaluating(model):
        for index, batch in length_sorted_batches(windows, batch_size):
            with autocast(device, amp_dtype):
                out = model(**{k: v.to(device) for k, v in batch.items()})
            s, e = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for row, i in enumerate(index):
                n = len(features.input_ids[i])
                starts[i], ends[i] = s[row, :n], e[row, :n]
    return starts, ends


def golds(examples: list[QAExample]) -> dict[str, list[str]]:
    """The gold answer texts of the labelled examples, by id."""
    return {e.id: e.answers for e in examples if e.answers is not None}


def is_version_2(examples: list[QAExample]) -> bool:
    """Whether the examples come from a SQuAD 2.0 file (`read_squad` marks every example of one)."""
    return any(e.version_2 for e in examples)


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
    wall_start = time.perf_counter()
    cfg, out_dir = cfg or QAConfig(), Path(out_dir)
    files = {"train": train_file, "dev": dev_file, "test": test_file}
    check_adaptation(cfg, from_scratch)
    # setup: checkpoint and data first (every error before the output directory is touched), then the model
    pretrained, saved = load_pretraining_checkpoint(checkpoint)
    tokenizer = checkpoint_tokenizer(checkpoint, pretrained, saved)
    splits, features = _qa_data(files, tokenizer, cfg, pretrained.config.max_position_embeddings)
    model = with_encoder(pretrained, BertForQuestionAnswering, from_scratch, cfg.seed, cfg.dropout)
    device = start_run(model, cfg, out_dir, overwrite, checkpoint, files)
    adaptation = _adapt(pretrained, model, tokenizer, splits["dev"], features, cfg, out_dir, quiet)
    extra = {
        "task": "qa",
        "version_2_with_negative": is_version_2(splits["train"]) or is_version_2(splits["dev"]),
        "base_checkpoint": str(checkpoint),
        "init": "scratch" if from_scratch else "pretrained",
        "finetune": config_to_dict(cfg),
    }
    qa = QAModel(model, tokenizer, extra)

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
    if note := _window_note(saved, cfg, from_scratch):
        log.say(note)
    outcome = fit(job, plan, run, log)
    model.load_state_dict(load_state_dict(out_dir / "best"))  # the best epoch answers from here on
    _write_answers(qa.predict(splits["dev"]), out_dir / "predictions.json")
    best, test_metrics = run.best(), None
    if splits["test"] is not None:
        test_metrics = qa.score(splits["test"])
        record_test(log, run, test_metrics, digits=2)
    task_fields = {
        "out": str(out_dir),
        "checkpoint": str(checkpoint),
        "init": extra["init"],
        "task": "qa",
        "best_epoch": best["epoch"],
        "dev": {k: best[k] for k in ("exact_match", "f1")},
        "test": test_metrics,
        "examples": {k: len(v) for k, v in splits.items() if v is not None}
        | {"train_windows": len(features)},
    }
    summary = write_run_summary(
        out_dir, task_fields, run=run, outcome=outcome, wall_start=wall_start, model=model, device=device,
        cfg=cfg, files=files, adaptation=adaptation,
    )  # fmt: skip
    log.say(f"nanobert: best dev F1 {best['f1']:.2f} at epoch {best['epoch']}; model in {out_dir / 'best'}")
    return summary


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
    initial ones). Measured on SQuAD from the 128-token CPU preset (benchmarks/README.md): windows of 128
    trained 3x faster to the same dev F1 as the default 384."""
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


def _write_answers(answers: dict[str, Answer], path: Path | None) -> dict[str, str]:
    """The official prediction file, {question id: answer text}, to `path` (stdout for None)."""
    texts = {k: a.text for k, a in answers.items()}
    text = json.dumps(texts, indent=1, ensure_ascii=False) + "\n"
    if path is None:
        print(text, end="")
    else:
        with atomic_file(path, "w", encoding="utf-8") as f:  # a failed write keeps the old file
            f.write(text)
    return texts


def _span_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    positions = batch.pop("labels")  # (B, 2): start, end
    return {"loss": model(**batch, start_positions=positions[:, 0], end_positions=positions[:, 1]).loss}


# ----------------------------------------------------------------------------------------------------------
# Prediction


def predict_qa(
    model_dir: str | Path,
    input_file: str | Path,
    out: str | Path | None = None,
    *,
    batch_size: int | None = None,
    device: str = "auto",
    null_score_threshold: float | None = None,
) -> dict[str, Any]:
    """Answer every question of a SQuAD JSON file; write the official `{id: answer text}` file to `out`.

    The model runs on `device`, `batch_size` windows at a time (default: its eval_batch_size). Returns
    {"questions", "out"} and, when the file has gold answers, their "exact_match" and "f1" with the SQuAD
    version whose rules scored them.
    """
    if batch_size is not None and batch_size < 1:
        raise NanobertError(f"--batch-size must be at least 1, not {batch_size}")
    if out is not None:
        check_output_file(out, inputs=(input_file, model_dir))  # before the model runs, not after
    qa = load_qa_model(model_dir, device, null_score_threshold)
    examples = read_squad(input_file)
    answers = _write_answers(qa.predict(examples, batch_size), Path(out) if out is not None else None)
    result: dict[str, Any] = {"questions": len(examples), "out": str(out) if out is not None else None}
    if golds(examples):
        version_2 = is_version_2(examples)
        result.update(squad_scores(answers, golds(examples), version_2=version_2))
        result["squad_version"] = "2.0" if version_2 else "1.1"
    return result


__all__ = ["QAModel", "finetune_qa", "golds", "is_version_2", "load_qa_model", "predict_qa", "span_logits"]
