"""Metrics of fine-tuned models, in NumPy: accuracy, macro-F1 and Matthews correlation for classification,
Pearson and Spearman for regression, and SQuAD's exact match and F1 for question answering (the rules of
the official v1.1 and 2.0 evaluation scripts, each for its own version's data).

Each classification and regression function takes 1-D arrays of equal length. Macro-F1 counts the classes
that occur (as scikit-learn does); the Matthews correlation is Gorodkin's multi-class R_K, the usual MCC for
two classes; Spearman averages the ranks of ties (scipy's `rankdata(method="average")`). tests/test_metrics.py
checks them against hand-worked cases and against scipy.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter

import numpy as np


def accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    return float(np.mean(np.asarray(y_true) == np.asarray(y_pred)))


def confusion_matrix(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int | None = None) -> np.ndarray:
    """C[i, j] = how many examples of true class i were predicted as j (classes are 0..K-1)."""
    y_true, y_pred = np.asarray(y_true, dtype=np.int64), np.asarray(y_pred, dtype=np.int64)
    k = num_classes or int(max(y_true.max(initial=-1), y_pred.max(initial=-1)) + 1)
    return np.bincount(y_true * k + y_pred, minlength=k * k).reshape(k, k)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Unweighted mean of per-class F1 over the classes that occur in y_true or y_pred (as scikit-learn).

    A class with no true and no predicted example does not count; one with no true positive scores 0.
    """
    c = confusion_matrix(y_true, y_pred)
    tp = np.diag(c).astype(np.float64)
    support, predicted = c.sum(axis=1), c.sum(axis=0)
    present = (support + predicted) > 0
    f1 = np.divide(2 * tp, support + predicted, out=np.zeros_like(tp), where=present)  # 2TP / (2TP+FP+FN)
    return float(f1[present].mean()) if present.any() else 0.0


def matthews_corrcoef(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Matthews correlation for K classes (Gorodkin 2004, R_K); the usual MCC when K = 2.

    R_K = (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2)(s^2 - sum_k t_k^2)), with c correct predictions,
    s examples, t_k true and p_k predicted counts of class k. 0 when either side is a single class.
    """
    cm = confusion_matrix(y_true, y_pred).astype(np.float64)
    t, p = cm.sum(axis=1), cm.sum(axis=0)
    c, s = np.trace(cm), cm.sum()
    denom = math.sqrt((s * s - p @ p) * (s * s - t @ t))
    return float((c * s - t @ p) / denom) if denom > 0 else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson correlation; 0 when either side is constant (no linear relation can be measured)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    denom = math.sqrt(float(x @ x) * float(y @ y))
    return float(x @ y / denom) if denom > 0 else 0.0


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, tied values sharing the mean of the ranks they span (scipy's rankdata 'average')."""
    _, inverse, counts = np.unique(np.asarray(x), return_inverse=True, return_counts=True)
    starts = np.cumsum(counts) - counts  # 0-based position where each distinct value's run begins
    return (starts + (counts + 1) / 2.0)[inverse.reshape(-1)]


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson of the tie-averaged ranks."""
    return pearson(average_ranks(x), average_ranks(y))


def compute_metrics(task: str, outputs: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Dev/test metrics from model outputs (N, num_labels) and labels (N,): class ids or target scores."""
    if task == "regression":
        scores = outputs[:, 0]
        return {
            "pearson": pearson(scores, labels),
            "spearman": spearman(scores, labels),
            "mse": float(np.mean((scores - labels) ** 2)),
        }
    pred = outputs.argmax(axis=1)
    return {
        "accuracy": accuracy(labels, pred),
        "macro_f1": macro_f1(labels, pred),
        "mcc": matthews_corrcoef(labels, pred),
    }


__all__ = [
    "accuracy",
    "average_ranks",
    "compute_metrics",
    "confusion_matrix",
    "exact_match",
    "f1_score",
    "macro_f1",
    "matthews_corrcoef",
    "normalize_answer",
    "pearson",
    "spearman",
    "squad_scores",
]


# ----------------------------------------------------------------------------------------------------------
# Extractive question answering: SQuAD's exact match and F1, as the official evaluation scripts compute them.
# The versions differ only where an answer normalises to nothing: evaluate-v1.1.py keeps every gold answer and
# scores F1 0 without a common token (F1("", "") = 0, while EM("", "") = 1); evaluate-v2.0.py drops gold
# answers that normalise to nothing (a question left with none is unanswerable: its gold is "") and scores
# F1 1 when both sides are empty. Which applies is the dataset's: 2.0 for a file with unanswerable questions.


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles (a, an, the), single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


_PUNCTUATION = frozenset(string.punctuation)


def exact_match(prediction: str, gold: str) -> float:
    """1 when the normalised texts are equal (both versions), else 0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, version_2: bool = False) -> float:
    """Token-overlap F1 of the normalised texts. SQuAD v1.1: 0 without a common token, so two texts that
    normalise to nothing score 0. SQuAD 2.0 (`version_2`): an empty side scores 1 if both are, else 0."""
    pred, true = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if version_2 and (not pred or not true):
        return float(pred == true)
    common = Counter(pred) & Counter(true)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(true)
    return 2 * precision * recall / (precision + recall)


def squad_scores(
    predictions: dict[str, str], golds: dict[str, list[str]], *, version_2: bool = False
) -> dict[str, float]:
    """Exact match and F1 in percent, each the maximum over a question's gold answers, averaged over the
    questions of `golds`; a question with no prediction scores 0 (evaluate-v2.0.py leaves it out of the
    average instead; nanobert predicts every question, so the two agree).

    SQuAD v1.1 rules by default (evaluate-v1.1.py): every gold answer counts, also one that normalises to
    nothing, and a question without gold answers scores 0. `version_2` applies SQuAD 2.0's (evaluate-v2.0.py):
    gold answers that normalise to nothing are dropped, a question left with none is unanswerable and its
    gold is the empty answer, and F1 of two empty answers is 1.
    """
    em = f1 = 0.0
    for qid, answers in golds.items():
        if version_2:
            answers = [a for a in answers if normalize_answer(a)] or [""]
        prediction = predictions.get(qid)
        if prediction is None:
            continue
        em += max((exact_match(prediction, a) for a in answers), default=0.0)
        f1 += max((f1_score(prediction, a, version_2) for a in answers), default=0.0)
    n = max(len(golds), 1)
    return {"exact_match": 100.0 * em / n, "f1": 100.0 * f1 / n}
