"""A fine-tuned classifier (or regressor) at work: its outputs for texts, labels for texts and for a file.

The inference side of `finetuning/classification.py`: what `nanobert predict` (a table's rows),
`predict_texts` (texts in memory) and the browser page's label panel call, and the dev evaluation of a
fine-tuning run. Texts are encoded as the model was trained (`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, its
own max_seq_len) and run in the precision it was trained in, in length-sorted batches. It imports nothing of
the training side, so the page that serves a classifier loads no trainer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoints.checkpoint import load_finetuned
from nanobert.data.labelled import (
    Encoded,
    Split,
    encode_split,
    label_ids,
    length_sorted_batches,
    read_texts,
    regression_targets,
)
from nanobert.data.tables import Column, Table, detect_format, read_table, write_table
from nanobert.device import autocast, autocast_dtype, evaluating, resolve_device
from nanobert.errors import NanobertError
from nanobert.files import check_output_file
from nanobert.model import BertForSequenceClassification
from nanobert.tokenizer import count_cut
from nanobert.use.metrics import compute_metrics


@torch.no_grad()
def model_outputs(
    model: BertForSequenceClassification,
    data: Encoded,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    batch_size: int,
) -> np.ndarray:
    """Logits (or regression scores) of every example, (N, num_labels) float32, in the input order."""
    out = np.zeros((len(data), model.num_labels), dtype=np.float32)
    with evaluating(model):
        for index, batch in length_sorted_batches(data, batch_size):
            with autocast(device, amp_dtype):
                logits = model(**{k: v.to(device) for k, v in batch.items()}).logits
            out[index] = logits.float().cpu().numpy()
    return out


def split_outputs(
    model: BertForSequenceClassification,
    split: Split,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    batch_size: int,
) -> np.ndarray:
    """`model_outputs` of a split's examples; for a symmetric task (the split holds its pairs read B-A too)
    the mean of the A-B and the B-A outputs, which scores a pair the same whichever text comes first."""
    out = model_outputs(model, split.data, device, amp_dtype, batch_size)
    if split.swapped is not None:
        out = (out + model_outputs(model, split.swapped, device, amp_dtype, batch_size)) / 2
    return out


def classify(
    model: BertForSequenceClassification,
    tokenizer: Any,
    config: dict,
    texts_a: list[str],
    texts_b: list[str] | None = None,
    batch_size: int = 128,
) -> np.ndarray:
    """A fine-tuned model's outputs for texts (and pairs), as trained: (N, num_labels) logits, or scores.

    Encoded with the model's own max_seq_len; `predict` (files) and the browser page (one text) call this.
    """
    if any(not t.strip() for t in texts_a + (texts_b or [])):
        raise NanobertError("a text is empty; give every example some words")
    device, max_len = next(model.parameters()).device, int(config.get("max_seq_len", 128))
    symmetric = bool(config.get("finetune", {}).get("symmetric_pairs"))  # trained, so scored, both ways
    split = encode_split(None, tokenizer, texts_a, texts_b, max_len, symmetric=symmetric)
    amp_dtype = autocast_dtype(config.get("precision", "auto"), device)  # as the model was trained
    return split_outputs(model, split, device, amp_dtype, batch_size)


@dataclass
class Prediction:
    """A fine-tuned model's answer for one text (or pair)."""

    text: str
    label: str | float  # the most probable label; for a regression model, the predicted score
    probabilities: dict[str, float] | None  # every label's probability (None for regression)


def predict_texts(
    model_dir: str | Path,
    texts: list[str],
    pairs: list[str] | None = None,
    *,
    batch_size: int = 128,
    device: str = "cpu",
) -> list[Prediction]:
    """Label texts in memory with a fine-tuned model (`model_dir`: a run directory or its best/): one
    `Prediction` per text, in order; `pairs` gives segment B of a sentence-pair model. `predict` does the same
    for the rows of a file."""
    model, tokenizer, config = load_finetuned(model_dir, resolve_device(device))
    if (config["columns"].get("text_pair") is None) != (pairs is None):
        need = "pairs (segment B)" if pairs is None else "no pairs"
        raise NanobertError(f"{model_dir} was trained with {need}; pass pairs accordingly")
    outputs = classify(model, tokenizer, config, list(texts), pairs, batch_size)
    if config["task"] == "regression":
        return [Prediction(t, float(s), None) for t, s in zip(texts, outputs[:, 0], strict=True)]
    labels = config["labels"]
    probs = torch.softmax(torch.from_numpy(outputs), dim=-1).tolist()
    return [
        Prediction(t, labels[max(range(len(p)), key=p.__getitem__)], dict(zip(labels, p, strict=True)))
        for t, p in zip(texts, probs, strict=True)
    ]


def _prediction_columns(config: dict[str, Any], fmt: str) -> list[str]:
    """The columns `predict` adds: the prediction, and each label's probability (JSONL: one object)."""
    if config["task"] == "regression":
        return ["prediction"]
    probabilities = ["probabilities"] if fmt == "jsonl" else [f"prob_{label}" for label in config["labels"]]
    return ["prediction", *probabilities]


def predict(
    model_dir: str | Path,
    input_file: str | Path,
    out: str | Path | None = None,
    *,
    fmt: str | None = None,
    encoding: str | None = None,
    text_col: Column | None = None,
    text_pair_col: Column | None = None,
    batch_size: int = 128,
    device: str = "auto",
) -> dict[str, Any]:
    """Label every row of `input_file` with a fine-tuned model and write it back in the input's format.

    Classification adds `prediction` (the label) and one `prob_LABEL` column per label (JSONL: a
    `probabilities` object); regression adds `prediction` (the score). The text columns default to the ones
    the model was trained on. `out` None writes to stdout. When the input also has the label column, the
    returned dict carries the metrics.
    """
    if isinstance(out, str | Path):
        check_output_file(out, inputs=(input_file, model_dir))  # before the model runs, not after
    dev = resolve_device(device)
    model, tokenizer, config = load_finetuned(model_dir, dev)
    columns = config["columns"]
    text_col = columns["text"] if text_col is None else text_col
    text_pair_col = columns.get("text_pair") if text_pair_col is None else text_pair_col
    if (columns.get("text_pair") is None) != (text_pair_col is None):
        need = "a text pair column" if text_pair_col is None else "no text pair column"
        raise NanobertError(f"{model_dir} was trained with {need}; pass --text-pair-col accordingly")
    headerless = isinstance(text_col, int)
    try:
        fmt = detect_format(input_file, fmt)
    except NanobertError:
        fmt = config.get("format")  # an unknown extension: assume the format the model was trained on
        if fmt is None:
            raise
    table = read_table(input_file, fmt, encoding, header=not headerless)
    names = _prediction_columns(config, table.format)
    table.check_new_columns(names)  # before the model runs
    texts_a = read_texts(table, text_col)
    texts_b = read_texts(table, text_pair_col) if text_pair_col is not None else None
    outputs = classify(model, tokenizer, config, texts_a, texts_b, batch_size)

    write_table(table, dict(zip(names, _prediction_values(outputs, config, table.format), strict=True)), out)

    result: dict[str, Any] = {
        "rows": len(table),
        "out": str(out) if out is not None else None,
        "task": config["task"],
    }
    cut = count_cut(texts_a + (texts_b or []), int(config.get("max_seq_len", 128)))
    if cut:  # cut before tokenizing (encode_pairs): a command says so once
        result["texts_cut"] = cut
    return {**result, **_scores(table, config, headerless, outputs)}


def _prediction_values(outputs: np.ndarray, config: dict, fmt: str) -> list[list[Any]]:
    """The new columns' values (`_prediction_columns`' order): the score (regression), or the label and each
    label's probability (a column per label, or in JSONL one object)."""
    task, labels = config["task"], config.get("labels")
    if task == "regression":
        return [[round(float(s), 6) for s in outputs[:, 0]]]
    probs = torch.softmax(torch.from_numpy(outputs), dim=-1).numpy()
    values = [[labels[i] for i in probs.argmax(axis=1)]]
    if fmt == "jsonl":  # one object of every label's probability
        rows = [[round(float(p), 6) for p in row] for row in probs]
        values.append([dict(zip(labels, row, strict=True)) for row in rows])
    else:  # a column per label
        values += [[f"{p:.6f}" for p in probs[:, i]] for i in range(len(labels))]
    return values


def _scores(table: Table, config: dict, headerless: bool, outputs: np.ndarray) -> dict[str, Any]:
    """{"metrics": ...} of the predictions when the input is labelled (all known labels), {"metrics_skipped":
    why} when its labels cannot be scored, {} when it has no label column: then it is only predicted."""
    task, labels, label_col = config["task"], config.get("labels"), config["columns"].get("label")
    same_kind = label_col is not None and isinstance(label_col, int) == headerless
    if not same_kind or table.column(label_col, required=False) is None:
        return {}
    try:
        y = (
            regression_targets(table, label_col)
            if task == "regression"
            else label_ids(table, label_col, labels, None)
        )
        return {"metrics": compute_metrics(task, outputs, y)}
    except NanobertError as e:
        return {"metrics_skipped": str(e)}


__all__ = ["Prediction", "classify", "model_outputs", "predict", "predict_texts", "split_outputs"]
