"""Fine-tuning data: labelled tables -> texts and labels -> token ids -> padded batches.

A `TaskSpec` names the columns of a CSV/TSV/JSONL file (`tables.py`) that hold the text(s) and the label.
`load_split` reads and checks one file and encodes every example as `[CLS] A [SEP]` or
`[CLS] A [SEP] B [SEP]` (`tokenizer.encode_pairs`); the train split fixes the label mapping (labels sorted,
numerically when they are numbers, so ids do not depend on row order). `ExampleStream` feeds the training
loop shuffled, dynamically padded batches epoch after epoch, a pure function of (seed, epoch).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.data.feeder import Feeder
from nanobert.data.tables import Column, Table, read_table
from nanobert.errors import NanobertError
from nanobert.tokenizer import encode_pairs, pad

TASKS = ("classification", "regression")


@dataclass
class TaskSpec:
    """Which columns of the files hold the text(s) and the label, and what the label is.

    Columns are all names (files with a header row, JSONL objects) or all 0-based indexes (headerless
    CSV/TSV, JSONL arrays). `format` overrides the file extension; `encoding` defaults to UTF-8.
    """

    text_col: Column
    label_col: Column
    text_pair_col: Column | None = None
    task: str = "classification"
    format: str | None = None
    encoding: str | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise NanobertError(f"unknown task {self.task!r}; use one of: {', '.join(TASKS)}")
        kinds = {isinstance(c, int) for c in self.columns().values() if c is not None}
        if len(kinds) > 1:
            raise NanobertError(
                "give every column as a name (files with a header row) or every one as a 0-based index "
                "(headerless files), not a mix"
            )

    def columns(self) -> dict[str, Column | None]:
        return {"text": self.text_col, "text_pair": self.text_pair_col, "label": self.label_col}

    @property
    def headerless(self) -> bool:
        return isinstance(self.text_col, int)


def label_key(value: Any) -> str:
    """A label as the string the mapping stores: text as is, JSON numbers and booleans as JSON writes them,
    a whole-number float as the integer (JSON's 1.0 and 1 are one class)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, str) else json.dumps(value)


def label_order(keys: list[str]) -> list[str]:
    """The distinct labels in a fixed order (numeric when every label is a finite number, else by string), so
    the ids do not depend on which label comes first in the file, nor on hashing (NaN sorts nowhere)."""
    distinct = set(keys)
    try:
        numbers = {k: float(k) for k in distinct}
    except ValueError:
        return sorted(distinct)
    if not all(math.isfinite(x) for x in numbers.values()):
        return sorted(distinct)
    return sorted(distinct, key=lambda k: (numbers[k], k))


def read_texts(table: Table, col: Column) -> list[str]:
    texts = []
    for value, line in zip(table.column(col), table.line_numbers, strict=True):
        if value is None or (isinstance(value, str) and not value.strip()):
            raise NanobertError(
                f"line {line} of {table.path}: text column {col!r} is empty; fill or drop such rows"
            )
        texts.append(value if isinstance(value, str) else str(value))
    return texts


def _label_keys(table: Table, col: Column) -> list[str]:
    keys = []
    for value, line in zip(table.column(col), table.line_numbers, strict=True):
        if value is None or (isinstance(value, str) and not value.strip()):
            raise NanobertError(f"line {line} of {table.path}: label column {col!r} is empty")
        keys.append(label_key(value).strip())
    return keys


def label_ids(table: Table, col: Column, labels: list[str], train_path: Path | str | None) -> np.ndarray:
    """Class ids of a split under the train split's mapping; a label train never saw is an error.
    `train_path` names the training file in that error (None: it is not known here)."""
    index = {label: i for i, label in enumerate(labels)}
    ids = []
    for key, line in zip(_label_keys(table, col), table.line_numbers, strict=True):
        if key not in index:
            shown = ", ".join(repr(x) for x in labels[:20]) + (", ..." if len(labels) > 20 else "")
            raise NanobertError(
                f"line {line} of {table.path}: label {key!r} never occurs in the training file"
                f"{f' {train_path}' if train_path is not None else ''} (its labels: {shown})"
            )
        ids.append(index[key])
    return np.asarray(ids, dtype=np.int64)


def regression_targets(table: Table, col: Column) -> np.ndarray:
    targets = []
    for key, line in zip(_label_keys(table, col), table.line_numbers, strict=True):
        try:
            value = float(key)
        except ValueError:
            raise NanobertError(
                f"line {line} of {table.path}: label {key!r} is not a number, and --task regression needs one"
            ) from None
        if not math.isfinite(value):
            raise NanobertError(f"line {line} of {table.path}: label {key!r} is not a finite number")
        targets.append(value)
    return np.asarray(targets, dtype=np.float32)


@dataclass
class Encoded:
    """Token ids of every example (unpadded) and their labels (class ids, scores, or None to predict)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.input_ids)


def collate(data: Encoded, index: np.ndarray | list[int]) -> dict[str, torch.Tensor]:
    """Pad the chosen examples to the longest of them (dynamic padding) and stack them.

    A batch with no padding carries no attention_mask, which lets SDPA take its fastest kernel.
    """
    input_ids, mask = pad([data.input_ids[i] for i in index])  # (B, T)
    token_type_ids, _ = pad([data.token_type_ids[i] for i in index], 0)
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    if not bool(mask.all()):
        batch["attention_mask"] = mask.long()
    if data.labels is not None:
        batch["labels"] = torch.as_tensor(data.labels[np.asarray(index)])
    return batch


def train_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """A fresh shuffle of 0..n-1 cut into batches; a pure function of (seed, epoch)."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass
class Split:
    table: Table | None  # None for texts given in memory (`use.classifier.classify`)
    data: Encoded
    swapped: Encoded | None = None  # the pairs read the other way round (B-A), for a symmetric task

    def both_ways(self) -> Encoded:
        """Every pair read both ways, the A-B rows then the B-A rows: a symmetric task's training rows."""
        if self.swapped is None:
            return self.data
        a, b = self.data, self.swapped
        labels = None if a.labels is None else np.concatenate([a.labels, b.labels])
        return Encoded(a.input_ids + b.input_ids, a.token_type_ids + b.token_type_ids, labels)


def _is_number(key: str) -> bool:
    try:
        float(key)
    except ValueError:
        return False
    return True


def _refuse_header_row(table: Table, spec: TaskSpec) -> None:
    """Indexed columns mean "no header row"; catch the usual slip of indexing a file that has one (its first
    label is a word such as 'label' where every other row has a number)."""
    keys = _label_keys(table, spec.label_col)
    numeric_below = len(keys) > 1 and all(_is_number(k) for k in keys[1:])
    if numeric_below and not _is_number(keys[0]) and (spec.task == "regression" or keys[0] not in keys[1:]):
        raise NanobertError(
            f"line {table.line_numbers[0]} of {table.path} looks like a header row (label {keys[0]!r} over "
            "numbers); 0-based column indexes are for files without one: give the columns by name"
        )


def load_split(
    path: str | Path,
    spec: TaskSpec,
    tokenizer: Any,
    max_seq_len: int,
    labels: list[str] | None,
    train_path: str | Path | None = None,
    symmetric: bool = False,
) -> tuple[Split, list[str] | None]:
    """Read, check and tokenize one labelled file. With `labels` None (the train split) the label mapping is
    built from this file and returned; otherwise every label must be one of `labels`. With `symmetric`, the
    split also holds its pairs read B-A (`Split.swapped`)."""
    table = read_table(path, spec.format, spec.encoding, header=not spec.headerless)
    # Read every column first, so a missing one is reported before any cell of another is checked.
    for col in spec.columns().values():
        if col is not None:
            table.column(col)
    if spec.headerless:
        _refuse_header_row(table, spec)
    texts_a = read_texts(table, spec.text_col)
    texts_b = read_texts(table, spec.text_pair_col) if spec.text_pair_col is not None else None
    if spec.task == "regression":
        y = regression_targets(table, spec.label_col)
    else:
        if labels is None:
            labels = label_order(_label_keys(table, spec.label_col))
            if len(labels) < 2:
                raise NanobertError(
                    f"{path}: every row has the label {labels[0]!r}; classification needs at least two labels"
                )
        y = label_ids(table, spec.label_col, labels, train_path or path)
    return encode_split(table, tokenizer, texts_a, texts_b, max_seq_len, y, symmetric), labels


def encode_split(
    table: Table | None,
    tokenizer: Any,
    texts_a: list[str],
    texts_b: list[str] | None,
    max_seq_len: int,
    labels: np.ndarray | None = None,
    symmetric: bool = False,
) -> Split:
    """Texts (and pairs) encoded as `[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`; with `symmetric`, pairs are
    also encoded the other way round (B-A, `Split.swapped`), with the same labels."""
    data = Encoded(*encode_pairs(tokenizer, texts_a, texts_b, max_seq_len), labels)
    swapped = None
    if symmetric and texts_b is not None:
        swapped = Encoded(*encode_pairs(tokenizer, texts_b, texts_a, max_seq_len), labels)
    return Split(table, data, swapped)


def length_sorted_batches(
    data: Encoded, batch_size: int
) -> Iterator[tuple[np.ndarray, dict[str, torch.Tensor]]]:
    """(indexes, unlabelled batch) over every example, shortest first, so little compute goes to padding:
    how predictions and dev evaluations walk a dataset."""
    order = np.argsort([len(ids) for ids in data.input_ids], kind="stable")
    unlabelled = Encoded(data.input_ids, data.token_type_ids, None)
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        yield index, collate(unlabelled, index)


class ExampleStream(Feeder):
    """Endless training batches of `data`: each epoch a fresh shuffle (`train_batches`), collated on demand.

    Its position (epoch, index) is all a resume needs; the loop records it with each batch.
    """

    def __init__(self, data: Encoded, batch_size: int, seed: int):
        self.data, self.batch_size, self.seed = data, batch_size, seed
        self.epoch, self.index = 1, 0  # epochs count from 1, as the dev records do
        self._order = self.batches(self.epoch)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Epoch `epoch`'s batches of row indices (a subclass may order them otherwise)."""
        return train_batches(len(self.data), self.batch_size, self.seed, epoch)

    def collate(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        """The batch of rows `index` (a subclass may mask them)."""
        return collate(self.data, index)

    def batches_per_epoch(self) -> int:
        return len(self._order)

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        if self.index >= len(self._order):
            self.epoch, self.index = self.epoch + 1, 0
            self._order = self.batches(self.epoch)
        batch = self.collate(self._order[self.index])
        self.index += 1
        return batch, self.state_dict()

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "index": self.index}

    def close(self) -> None:
        pass


__all__ = [
    "TASKS",
    "Encoded",
    "ExampleStream",
    "Split",
    "TaskSpec",
    "collate",
    "label_ids",
    "label_key",
    "label_order",
    "length_sorted_batches",
    "encode_split",
    "load_split",
    "read_texts",
    "regression_targets",
    "train_batches",
]
