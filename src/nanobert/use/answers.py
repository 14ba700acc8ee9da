"""A fine-tuned question-answering model at work: answers to one question, and to a SQuAD file's questions.

The inference side of `finetuning/qa.py` (section 4.2 of Devlin et al. 2019, google-research/bert
`run_squad.py`): `QAModel` (from `load_qa_model`) windows each context as the model was trained, scores a
start and an end per word piece in length-sorted batches, and decodes the best span (`squad.best_answers`);
`answer` is one question (`nanobert answer`, the page's answer panel), `predict` a whole SQuAD file (`nanobert
predict` writes the official `{question id: answer text}` file with `predict_qa`). It imports nothing of the
training side, so the page that serves a QA model loads no trainer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoints.checkpoint import load_qa
from nanobert.config import QAConfig, config_from_dict
from nanobert.data.labelled import Encoded, length_sorted_batches
from nanobert.data.squad import Answer, QAExample, QAFeatures, best_answers, featurize, read_squad
from nanobert.device import autocast, autocast_dtype, evaluating, resolve_device
from nanobert.errors import NanobertError
from nanobert.files import atomic_file, check_output_file
from nanobert.model import BertForQuestionAnswering
from nanobert.use.inference import require_words
from nanobert.use.metrics import squad_scores


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


def write_answers(answers: dict[str, Answer], path: Path | None) -> dict[str, str]:
    """The official prediction file, {question id: answer text}, to `path` (stdout for None)."""
    texts = {k: a.text for k, a in answers.items()}
    text = json.dumps(texts, indent=1, ensure_ascii=False) + "\n"
    if path is None:
        print(text, end="")
    else:
        with atomic_file(path, "w", encoding="utf-8") as f:  # a failed write keeps the old file
            f.write(text)
    return texts


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
    answers = write_answers(qa.predict(examples, batch_size), Path(out) if out is not None else None)
    result: dict[str, Any] = {"questions": len(examples), "out": str(out) if out is not None else None}
    if golds(examples):
        version_2 = is_version_2(examples)
        result.update(squad_scores(answers, golds(examples), version_2=version_2))
        result["squad_version"] = "2.0" if version_2 else "1.1"
    return result


__all__ = [
    "QAModel",
    "golds",
    "is_version_2",
    "load_qa_model",
    "predict_qa",
    "span_logits",
    "write_answers",
]
