"""Extractive question answering data: SQuAD JSON -> examples -> windows of word pieces -> answer spans.

Follows google-research/bert `run_squad.py` and section 4.2 of Devlin et al. (2019). The question is segment
A and the context segment B: `[CLS] question [SEP] context [SEP]`. A context longer than the window is cut
into overlapping windows (`doc_stride` word pieces between their starts); every window keeps the question.
Character offsets from the `tokenizers` encoding map the gold answer to word pieces for training, and a
predicted span of word pieces back to characters, so an answer is always an exact substring of the context.
A window that does not hold the whole answer (and every window of an unanswerable SQuAD 2.0 question) points
at [CLS] (position 0). Decoding takes, over all windows of an example, the best start/end pair among each
window's n-best starts and ends, with the end not before the start, the answer at most `max_answer_length`
pieces long, and the start in the window that gives its token the most context (Google's rule); for SQuAD 2.0
it answers "" when the [CLS] score beats the best span by more than a threshold.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, SEP_ID


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[str] | None  # every gold answer text; [] when unanswerable (2.0); None when unlabelled
    answer_start: int | None = None  # character offset of the first answer, for training
    version_2: bool = False  # from a SQuAD 2.0 file: unanswerable questions, scored by 2.0's EM/F1 rules


def read_squad(path: str | Path) -> list[QAExample]:
    """The questions of a SQuAD-layout JSON file (v1.1 or 2.0; `answers` may be absent to just predict).

    Every example of a file that is SQuAD 2.0 (its `version` starts with 2 or v2, or a question is marked
    `is_impossible`) has `version_2` set. NanobertError, naming the file and where in it, for anything else: a
    file that is not SQuAD JSON, a field of the wrong type, an empty context or question, or an answer whose
    text does not occur in its context. An `answer_start` that is absent, negative, past the context or not
    pointing at its text is replaced by the text's first occurrence (as in the rebuilt SQuAD files).
    """
    path = Path(path)
    if not path.is_file():
        raise NanobertError(f"{path} does not exist; give a SQuAD JSON file (data -> paragraphs -> qas)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise NanobertError(
            f"{path} is not SQuAD JSON: expected an object whose 'data' lists articles with paragraphs of qas"
        ) from None
    version_2 = isinstance(raw, dict) and str(raw.get("version", "")).lower().lstrip("v").startswith("2")
    examples = []
    for a, article in enumerate(_field(raw, "data", path, "the file", list)):
        for p, paragraph in enumerate(_field(article, "paragraphs", path, f"article {a}", list)):
            where = f"article {a} paragraph {p}"
            context = _field(paragraph, "context", path, where, str)
            if not context.strip():
                raise NanobertError(f"{path}: {where} has an empty context; fill or drop it")
            for q, qa in enumerate(_field(paragraph, "qas", path, where, list)):
                example, impossible = _example(qa, context, path, f"{where} question {q}")
                examples.append(example)
                version_2 = version_2 or impossible
    if not examples:
        raise NanobertError(f"{path} holds no questions")
    seen: set[str] = set()
    for example in examples:
        if example.id in seen:  # predictions and scores are keyed by id: a repeat would silently drop one
            raise NanobertError(f"{path}: question id {example.id} occurs twice; ids must be unique")
        seen.add(example.id)
        example.version_2 = version_2
    return examples


def _field(obj: Any, key: str, path: Path, where: str, kind: type | None = None) -> Any:
    """obj[key], where `obj` must be a JSON object holding `key` (of type `kind` when given)."""
    if not isinstance(obj, dict):
        raise NanobertError(f"{path} is not SQuAD JSON: {where} is {_json_type(obj)}, not an object")
    if key not in obj:
        raise NanobertError(f"{path} is not SQuAD JSON: {where} has no {key!r}")
    value = obj[key]
    if kind is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        wanted = {list: "a list", str: "a string", int: "a whole number"}[kind]
        wrong = _json_type(value)
        raise NanobertError(f"{path} is not SQuAD JSON: {where} has {key!r} {wrong}, not {wanted}")
    return value


def _json_type(value: Any) -> str:
    """How JSON would name a parsed value's type, for error messages."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)  # null, true, false
    names = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _example(qa: Any, context: str, path: Path, where: str) -> tuple[QAExample, bool]:
    """One question of a paragraph, and whether it is marked unanswerable (`is_impossible`, SQuAD 2.0)."""
    qid = _field(qa, "id", path, where)
    if not isinstance(qid, str | int) or isinstance(qid, bool):
        raise NanobertError(f"{path} is not SQuAD JSON: {where} has 'id' {_json_type(qid)}, not a string")
    qid = str(qid)
    question = _field(qa, "question", path, f"question {qid}", str)
    if not question.strip():
        raise NanobertError(f"{path}: question {qid} is empty")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        wrong = _json_type(impossible)
        raise NanobertError(
            f"{path} is not SQuAD JSON: question {qid} has 'is_impossible' {wrong}, not true/false"
        )
    if "answers" not in qa:
        return QAExample(qid, question, context, None), impossible
    answers, start = [], None
    for i, answer in enumerate(_field(qa, "answers", path, f"question {qid}", list)):
        text = _field(answer, "text", path, f"question {qid} answer {i}", str)
        if not text.strip():
            raise NanobertError(f"{path}: question {qid} has an empty answer text")
        offset = answer.get("answer_start")
        if offset is not None:
            offset = _field(answer, "answer_start", path, f"question {qid} answer {i}", int)
        # Absent, negative (a slice would count it from the end), past the context or pointing elsewhere (as
        # in the rebuilt SQuAD files): a misplaced offset, replaced by the text's first occurrence.
        if offset is None or offset < 0 or not context.startswith(text, offset):
            offset = context.find(text)
        if offset < 0:
            raise NanobertError(f"{path}: question {qid}: the answer {text!r} does not occur in its context")
        answers.append(text)
        start = offset if i == 0 else start
    if not answers and not impossible:
        raise NanobertError(f"{path}: question {qid} has no answer and is not marked is_impossible")
    return QAExample(qid, question, context, answers, start), impossible


# ----------------------------------------------------------------------------------------------------------
# Windows of word pieces


@dataclass
class QAFeatures:
    """Every window of a list of examples (parallel lists, one entry per window)."""

    example_index: list[int] = field(default_factory=list)
    input_ids: list[list[int]] = field(default_factory=list)
    token_type_ids: list[list[int]] = field(default_factory=list)
    offsets: list[list[tuple[int, int] | None]] = field(default_factory=list)  # context characters, or None
    max_context: list[list[bool]] = field(default_factory=list)  # this window gives the token most context
    positions: list[tuple[int, int]] = field(default_factory=list)  # answer (start, end) tokens; (0, 0) none

    def __len__(self) -> int:
        return len(self.input_ids)


def featurize(
    examples: list[QAExample], tokenizer: Any, max_seq_len: int, doc_stride: int, max_query_length: int = 64
) -> QAFeatures:
    """Cut every example into windows `[CLS] question [SEP] context piece [SEP]` of at most `max_seq_len`.

    Window starts are `doc_stride` word pieces apart (google's doc_stride); questions longer than
    `max_query_length` pieces, or than half of `max_seq_len`, are cut. Contexts are encoded once however many
    questions share them, and which window gives each context piece the most context is worked out once per
    window layout (the windows' starts and lengths), not once per question: most questions of a context
    share its layout.
    """
    questions = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    unique = list(dict.fromkeys(e.context for e in examples))
    encoded = tokenizer.encode_batch(unique, add_special_tokens=False)
    contexts = {c: (enc.ids, enc.offsets) for c, enc in zip(unique, encoded, strict=True)}
    layouts: dict[tuple[tuple[int, int], ...], list[list[bool]]] = {}  # windows -> their max-context flags
    features = QAFeatures()
    for index, (example, question) in enumerate(zip(examples, questions, strict=True)):
        # At most half the window, so a long question (asked of a model trained on short windows) still
        # leaves room for the context instead of failing.
        q_ids = question.ids[: min(max_query_length, max_seq_len // 2)]
        ids, offsets = contexts[example.context]
        room = max_seq_len - len(q_ids) - 3
        if room < 1:
            raise NanobertError(
                f"max_seq_len {max_seq_len} leaves no room for a context; raise --max-seq-len"
            )
        windows = tuple(_windows(len(ids), room, doc_stride))
        if windows not in layouts:
            layouts[windows] = _max_context(windows)
        answer = _answer_tokens(example, offsets)
        head = len(q_ids) + 2  # [CLS] question [SEP]
        for (start, length), best in zip(windows, layouts[windows], strict=True):
            features.example_index.append(index)
            features.input_ids.append([CLS_ID, *q_ids, SEP_ID, *ids[start : start + length], SEP_ID])
            features.token_type_ids.append([0] * head + [1] * (length + 1))
            features.offsets.append([None] * head + list(offsets[start : start + length]) + [None])
            features.max_context.append([False] * head + best + [False])
            inside = answer is not None and start <= answer[0] and answer[1] < start + length
            span = (head + answer[0] - start, head + answer[1] - start) if inside else (0, 0)
            features.positions.append(span)
    return features


def _windows(n: int, room: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of the windows over n context pieces, `room` pieces each, starts `stride` apart."""
    windows, start = [], 0
    while True:
        length = min(n - start, room)
        windows.append((start, length))
        if start + length >= n:
            return windows
        start += min(length, stride)


def _max_context(windows: tuple[tuple[int, int], ...]) -> list[list[bool]]:
    """For every window (start, length), whether it gives each of its pieces the most context on the piece's
    shorter side (google's `_check_is_max_context`: score min(left, right) + 0.01 * window length, the first
    best window wins), in one pass over the windows rather than one per piece."""
    if len(windows) == 1:
        return [[True] * windows[0][1]]
    n = windows[-1][0] + windows[-1][1]
    best, best_score = [0] * n, [-1.0] * n
    for w, (start, length) in enumerate(windows):
        for position in range(start, start + length):
            score = min(position - start, start + length - 1 - position) + 0.01 * length
            if score > best_score[position]:
                best[position], best_score[position] = w, score
    return [[best[p] == w for p in range(start, start + length)] for w, (start, length) in enumerate(windows)]


def _answer_tokens(example: QAExample, offsets: list[tuple[int, int]]) -> tuple[int, int] | None:
    """The first and last context piece that overlap the first gold answer's characters, or None
    (unanswerable, unlabelled). Pieces come in text order, so both are found by bisection."""
    if not example.answers or example.answer_start is None:
        return None
    begin, end = example.answer_start, example.answer_start + len(example.answers[0])
    first = bisect.bisect_right(offsets, begin, key=lambda o: o[1])  # the first piece ending after begin
    last = bisect.bisect_left(offsets, end, key=lambda o: o[0]) - 1  # the last piece starting before end
    return (first, last) if first <= last else None


# ----------------------------------------------------------------------------------------------------------
# Decoding: from start/end logits of every window to one answer per example


@dataclass
class Answer:
    text: str  # an exact substring of the context ("" = no answer)
    start: int  # character span in the context; -1 for no answer
    end: int
    score: float  # start logit + end logit of the span (of [CLS] for no answer)
    probability: float  # P(start) x P(end) within its window


def best_answers(
    examples: list[QAExample],
    features: QAFeatures,
    start_logits: list[np.ndarray],
    end_logits: list[np.ndarray],
    max_answer_length: int = 30,
    n_best_size: int = 20,
    null_threshold: float | None = None,
) -> dict[str, Answer]:
    """One answer per example id: the best valid span over all its windows (see the module docstring).

    `null_threshold` None never answers "" (SQuAD v1.1); a number answers "" when the [CLS] score (the lowest
    over the example's windows) exceeds the best span's score by more than it (SQuAD 2.0).
    """
    by_example: dict[int, list[int]] = {}
    for f, e in enumerate(features.example_index):
        by_example.setdefault(e, []).append(f)
    answers = {}
    for e, feature_ids in by_example.items():
        example, best, null = examples[e], None, math.inf
        for f in feature_ids:
            starts, ends = start_logits[f], end_logits[f]
            null = min(null, float(starts[0] + ends[0]))
            candidate = _best_span(starts, ends, features, f, max_answer_length, n_best_size)
            if candidate is not None and (best is None or candidate[0] > best[0]):
                best = (*candidate, f)
        if best is None or (null_threshold is not None and null - best[0] > null_threshold):
            p = _probability(start_logits[feature_ids[0]], end_logits[feature_ids[0]], 0, 0)
            answers[example.id] = Answer("", -1, -1, null, p)
            continue
        score, s, t, f = best
        begin, end = features.offsets[f][s][0], features.offsets[f][t][1]
        p = _probability(start_logits[f], end_logits[f], s, t)
        answers[example.id] = Answer(example.context[begin:end], begin, end, score, p)
    return answers


def _best_span(
    starts: np.ndarray,
    ends: np.ndarray,
    features: QAFeatures,
    f: int,
    max_answer_length: int,
    n_best_size: int,
) -> tuple[float, int, int] | None:
    """(score, start, end) of the best valid span of one window among its n-best starts and ends."""
    offsets, max_context = features.offsets[f], features.max_context[f]
    n = len(offsets)
    top_starts = [i for i in np.argsort(-starts[:n])[:n_best_size] if max_context[i]]  # context pieces only
    top_ends = [i for i in np.argsort(-ends[:n])[:n_best_size] if offsets[i] is not None]
    best = None
    for s in top_starts:
        for t in top_ends:
            if s <= t < s + max_answer_length:
                score = float(starts[s] + ends[t])
                if best is None or score > best[0]:
                    best = (score, int(s), int(t))
    return best


def _probability(starts: np.ndarray, ends: np.ndarray, s: int, t: int) -> float:
    """P(start = s) x P(end = t), each a softmax over the window's positions."""

    def softmax_at(x: np.ndarray, i: int) -> float:
        x = x.astype(np.float64)
        return float(np.exp(x[i] - x.max()) / np.exp(x - x.max()).sum())

    return softmax_at(starts, s) * softmax_at(ends, t)


__all__ = ["Answer", "QAExample", "QAFeatures", "best_answers", "featurize", "read_squad"]
