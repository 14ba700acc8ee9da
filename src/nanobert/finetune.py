"""Fine-tuning a pretrained encoder on sentence(-pair) classification or regression, and prediction.

Follows section 4.1 of Devlin et al. (2019) and google-research/bert `run_classifier.py`: `[CLS] A [SEP]`
or `[CLS] A [SEP] B [SEP]` (segment ids 0 then 1) through the pretrained encoder, the pooled `[CLS]` vector
through dropout and one linear layer (`BertForSequenceClassification`), cross-entropy (or squared error for
regression), AdamW with linear warmup and decay, a few epochs, and the epoch with the best dev metric kept.
`from_scratch=True` trains the same architecture from random initialisation (same tokenizer, same head init,
same budget), which is the control that shows what pretraining bought.

A run directory holds `best/` (a checkpoint of kind "sequence_classification" whose config.json also carries
the label mapping, task and columns), `metrics.jsonl` (train logs and one dev record per epoch) and
`summary.json`. `load_finetuned` reads `best/` back; `predict` labels a file with it.

Metrics are computed here with numpy: accuracy, macro-F1 and Matthews correlation (Gorodkin's multi-class
R_K) for classification; Pearson and Spearman (average ranks for ties) for regression.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoint import (
    load_pretraining_checkpoint,
    load_state_dict,
    read_config,
    save_checkpoint,
)
from nanobert.config import ModelConfig, config_from_dict, config_to_dict
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining, BertForSequenceClassification
from nanobert.tabular import Column, Table, detect_format, read_table, write_table
from nanobert.tokenizer import CLS_ID, PAD_ID, SEP_ID, encode_sentences, load_tokenizer
from nanobert.train import (
    RunLog,
    autocast_dtype,
    hardware_description,
    lr_multiplier,
    prepare_out_dir,
    resolve_device,
)

KIND = "sequence_classification"  # the `kind` of a fine-tuned checkpoint's config.json
TASKS = ("classification", "regression")
METRICS = {"classification": ("accuracy", "macro_f1", "mcc"), "regression": ("pearson", "spearman")}


@dataclass
class FinetuneConfig:
    """One fine-tuning run; defaults are the ones behind the SST-2 and TREC-6 numbers in benchmarks/."""

    epochs: int = 3
    batch_size: int = 32
    # BERT's paper searched 2e-5..5e-5 for BERT-base; Google's small-BERT release (BERT-Mini and friends)
    # searched {3e-4, 1e-4, 5e-5, 3e-5} with 4 epochs; small encoders favour the upper end, from-scratch
    # controls even more so. `benchmarks/finetune_glue.py --learning-rate 5e-5 1e-4 3e-4` compares on dev.
    learning_rate: float = 1e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01  # not applied to biases and LayerNorm weights
    # Layer-wise learning-rate decay (ELECTRA's fine-tuning recipe): the pooler and head train at
    # learning_rate, each encoder layer below at `layer_lr_decay` times the one above, the embeddings last.
    # Below 1 it keeps more of what pretraining put in the lower layers; 1.0 = one learning rate.
    layer_lr_decay: float = 1.0
    adam_eps: float = 1e-6  # BERT's value
    grad_clip: float = 1.0
    max_seq_len: int = 128  # tokens including [CLS]/[SEP]; longer inputs lose tokens from the longer side
    metric: str | None = None  # the dev metric that picks the best epoch; None = accuracy / pearson
    seed: int = 1337
    device: str = "auto"
    precision: str = "auto"  # bf16 autocast on CUDA and on CPUs with native bf16, else fp32
    eval_batch_size: int = 128
    log_interval: int = 50

    def __post_init__(self) -> None:
        checks = [
            ("epochs", self.epochs >= 1, "at least 1"),
            ("batch_size", self.batch_size >= 1, "at least 1"),
            ("eval_batch_size", self.eval_batch_size >= 1, "at least 1"),
            ("learning_rate", self.learning_rate > 0, "positive"),
            ("warmup_ratio", 0.0 <= self.warmup_ratio < 1.0, "in [0, 1)"),
            ("weight_decay", self.weight_decay >= 0, "non-negative"),
            ("layer_lr_decay", 0.0 < self.layer_lr_decay <= 1.0, "in (0, 1]"),
            ("max_seq_len", self.max_seq_len >= 3, "at least 3 ([CLS], a token, [SEP])"),
            ("log_interval", self.log_interval >= 1, "at least 1"),
            ("precision", self.precision in ("auto", "fp32", "bf16"), "auto, fp32 or bf16"),
        ]
        for name, ok, want in checks:
            if not ok:
                raise NanobertError(f"finetune: {name} must be {want}, got {getattr(self, name)!r}")


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


# ----------------------------------------------------------------------------------------------------------
# Metrics (numpy; each takes 1-D arrays of equal length)


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


# ----------------------------------------------------------------------------------------------------------
# Data: tables -> texts and labels -> token ids -> padded batches


def label_key(value: Any) -> str:
    """A label as the string the mapping stores: text as is, JSON numbers and booleans as JSON writes them."""
    return value if isinstance(value, str) else json.dumps(value)


def label_order(keys: list[str]) -> list[str]:
    """The distinct labels in a fixed order (numeric when every label is a number, else by string), so the
    ids do not depend on which label happens to come first in the file."""
    distinct = set(keys)
    try:
        return sorted(distinct, key=lambda k: (float(k), k))
    except ValueError:
        return sorted(distinct)


def _texts(table: Table, col: Column) -> list[str]:
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


def label_ids(table: Table, col: Column, labels: list[str], train_path: Path | str) -> np.ndarray:
    """Class ids of a split under the train split's mapping; a label train never saw is an error."""
    index = {label: i for i, label in enumerate(labels)}
    ids = []
    for key, line in zip(_label_keys(table, col), table.line_numbers, strict=True):
        if key not in index:
            shown = ", ".join(repr(x) for x in labels[:20]) + (", ..." if len(labels) > 20 else "")
            raise NanobertError(
                f"line {line} of {table.path}: label {key!r} never occurs in the training file {train_path} "
                f"(its labels: {shown})"
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


def encode_texts(
    tokenizer: Any, texts_a: list[str], texts_b: list[str] | None, max_seq_len: int
) -> tuple[list[list[int]], list[list[int]]]:
    """`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]` ids and segment ids for every example, in two batched
    encodes. Same output as `tokenizer.encode_pair(..., max_length=max_seq_len)` one by one: the longer side
    loses tokens from its end until the pair fits (google-research/bert `truncate_seq_pair`)."""
    ids_a = encode_sentences(tokenizer, texts_a)
    ids_b = encode_sentences(tokenizer, texts_b) if texts_b is not None else [None] * len(ids_a)
    input_ids, token_type_ids = [], []
    for a, b in zip(ids_a, ids_b, strict=True):
        budget = max_seq_len - (2 if b is None else 3)
        len_a, len_b = len(a), len(b) if b is not None else 0
        while len_a + len_b > budget:
            if b is None or len_a > len_b:
                len_a -= 1
            else:
                len_b -= 1
        ids = [CLS_ID, *a[:len_a], SEP_ID]
        types = [0] * len(ids)
        if b is not None:
            ids += [*b[:len_b], SEP_ID]
            types += [1] * (len_b + 1)
        input_ids.append(ids)
        token_type_ids.append(types)
    return input_ids, token_type_ids


def collate(data: Encoded, index: np.ndarray | list[int]) -> dict[str, torch.Tensor]:
    """Pad the chosen examples to the longest of them (dynamic padding) and stack them.

    A batch with no padding carries no attention_mask, which lets SDPA take its fastest kernel.
    """
    T = max(len(data.input_ids[i]) for i in index)
    input_ids = torch.full((len(index), T), PAD_ID, dtype=torch.long)  # (B, T)
    token_type_ids = torch.zeros((len(index), T), dtype=torch.long)
    attention_mask = torch.zeros((len(index), T), dtype=torch.long)
    for row, i in enumerate(index):
        n = len(data.input_ids[i])
        input_ids[row, :n] = torch.tensor(data.input_ids[i])
        token_type_ids[row, :n] = torch.tensor(data.token_type_ids[i])
        attention_mask[row, :n] = 1
    batch = {"input_ids": input_ids, "token_type_ids": token_type_ids}
    if not bool(attention_mask.all()):
        batch["attention_mask"] = attention_mask
    if data.labels is not None:
        batch["labels"] = torch.as_tensor(data.labels[np.asarray(index)])
    return batch


def train_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """A fresh shuffle of 0..n-1 cut into batches; a pure function of (seed, epoch)."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


@dataclass
class Split:
    table: Table
    data: Encoded


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
) -> tuple[Split, list[str] | None]:
    """Read, check and tokenize one labelled file. With `labels` None (the train split) the label mapping is
    built from this file and returned; otherwise every label must be one of `labels`."""
    table = read_table(path, spec.format, spec.encoding, header=not spec.headerless)
    # Read every column first, so a missing one is reported before any cell of another is checked.
    for col in spec.columns().values():
        if col is not None:
            table.column(col)
    if spec.headerless:
        _refuse_header_row(table, spec)
    texts_a = _texts(table, spec.text_col)
    texts_b = _texts(table, spec.text_pair_col) if spec.text_pair_col is not None else None
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
    ids, types = encode_texts(tokenizer, texts_a, texts_b, max_seq_len)
    return Split(table, Encoded(ids, types, y)), labels


# ----------------------------------------------------------------------------------------------------------
# Models: from a pretraining checkpoint, and fine-tuned ones back from disk


def layerwise_parameter_groups(
    model: BertForSequenceClassification, weight_decay: float, layer_lr_decay: float
) -> list[dict]:
    """AdamW groups with an `lr_scale` each: 1 for the pooler and head, `layer_lr_decay ** k` for the
    encoder layer k steps below the top (k = 1 for the last layer) and for the embeddings below them all.

    Weight decay is split as in pretraining (none on biases and LayerNorm parameters).
    """
    num_layers = len(model.bert.layers)

    def depth_below_top(name: str) -> int:
        if name.startswith("bert.embeddings."):
            return num_layers + 1
        if name.startswith("bert.layers."):
            return num_layers - int(name.split(".")[2])
        return 0  # pooler, final LayerNorm of pre-LN models, classifier

    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        k, decays = depth_below_top(name), p.ndim >= 2  # biases and LayerNorm parameters are 1-D
        group = groups.setdefault(
            (k, decays),
            {"params": [], "weight_decay": weight_decay if decays else 0.0, "lr_scale": layer_lr_decay**k},
        )
        group["params"].append(p)
    return list(groups.values())


def build_classifier(
    pretrained: BertForPreTraining, num_labels: int, task: str, from_scratch: bool, seed: int
) -> BertForSequenceClassification:
    """A BertForSequenceClassification shaped like `pretrained`, holding its encoder unless `from_scratch`.

    The head (and, from scratch, the encoder) is initialised from `seed`, so a pretrained run and its
    from-scratch control start from the same head.
    """
    torch.manual_seed(seed)
    model = BertForSequenceClassification(pretrained.config, num_labels, task)
    if not from_scratch:
        model.bert.load_state_dict(pretrained.bert.state_dict())  # the pooler too; the MLM/NSP heads go
    return model


def load_finetuned(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[BertForSequenceClassification, Any, dict]:
    """A fine-tuned model (eval mode), its tokenizer and its config.json (labels, task, columns).

    `directory` is a checkpoint (RUN/best) or a fine-tuning run directory holding best/.
    """
    directory = Path(directory)
    if not (directory / "config.json").is_file() and (directory / "best" / "config.json").is_file():
        directory = directory / "best"
    config = read_config(directory)
    kind = config.get("kind", "pretraining")
    if kind != KIND:
        raise NanobertError(
            f"{directory} holds a {kind} checkpoint, not a fine-tuned model; "
            f"fine-tune it first with `nanobert finetune {directory} ...`"
        )
    try:
        model_config = config_from_dict(ModelConfig, config["model"])
        model = BertForSequenceClassification(model_config, int(config["num_labels"]), config["task"])
    except (KeyError, TypeError, ValueError) as e:
        raise NanobertError(f"{directory}/config.json: invalid fine-tuned model config ({e})") from None
    try:
        model.load_state_dict(load_state_dict(directory))
    except RuntimeError as e:
        raise NanobertError(
            f"{directory}: weights do not match its config.json ({str(e).splitlines()[0]})"
        ) from None
    return model.to(map_location).eval(), load_tokenizer(directory), config


@torch.no_grad()
def model_outputs(
    model: BertForSequenceClassification,
    data: Encoded,
    device: torch.device,
    amp_dtype: torch.dtype | None,
    batch_size: int,
) -> np.ndarray:
    """Logits (or regression scores) of every example, (N, num_labels) float32, in the input order.

    Batches are formed from length-sorted examples, so little compute goes to padding.
    """
    was_training = model.training
    model.eval()
    order = np.argsort([len(ids) for ids in data.input_ids], kind="stable")
    out = np.zeros((len(data), model.num_labels), dtype=np.float32)
    unlabelled = Encoded(data.input_ids, data.token_type_ids, None)
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size]
        batch = {k: v.to(device) for k, v in collate(unlabelled, index).items()}
        autocast = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
        with autocast:
            logits = model(**batch).logits
        out[index] = logits.float().cpu().numpy()
    model.train(was_training)
    return out


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
    wall_start = time.perf_counter()
    cfg = cfg or FinetuneConfig()
    out_dir = Path(out_dir)
    metric = cfg.metric or METRICS[spec.task][0]
    if metric not in METRICS[spec.task]:
        raise NanobertError(
            f"metric {metric!r} does not apply to {spec.task}; use one of: {', '.join(METRICS[spec.task])}"
        )
    device = resolve_device(cfg.device)
    amp_dtype = autocast_dtype(cfg.precision, device)

    # --- setup: checkpoint check, data (all errors before the output directory is touched), model
    pretrained, _ = load_pretraining_checkpoint(checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    train, labels = load_split(train_file, spec, tokenizer, cfg.max_seq_len, None)
    dev, _ = load_split(dev_file, spec, tokenizer, cfg.max_seq_len, labels, train_file)
    test = None
    if test_file is not None:
        test, _ = load_split(test_file, spec, tokenizer, cfg.max_seq_len, labels, train_file)
    num_labels = len(labels) if labels is not None else 1
    model = build_classifier(pretrained, num_labels, spec.task, from_scratch, cfg.seed)
    del pretrained
    if cfg.max_seq_len > model.config.max_position_embeddings:
        raise NanobertError(
            f"max_seq_len {cfg.max_seq_len} exceeds the model's {model.config.max_position_embeddings} "
            "positions; lower --max-seq-len"
        )
    model.to(device)
    if not overwrite and any((out_dir / n).exists() for n in ("best", "metrics.jsonl", "summary.json")):
        raise NanobertError(
            f"{out_dir} already holds a run; pass --overwrite to replace it, or choose another --out"
        )
    prepare_out_dir(out_dir, overwrite, resuming_inside=False)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # dropout

    optimizer = torch.optim.AdamW(
        layerwise_parameter_groups(model, cfg.weight_decay, cfg.layer_lr_decay),
        lr=cfg.learning_rate,
        eps=cfg.adam_eps,
    )
    steps_per_epoch = math.ceil(len(train.data) / cfg.batch_size)
    total_steps = cfg.epochs * steps_per_epoch
    init = "scratch" if from_scratch else "pretrained"
    extra = {
        "task": spec.task,
        "labels": labels,  # position = class id
        "num_labels": num_labels,
        "columns": spec.columns(),
        "format": train.table.format,
        "max_seq_len": cfg.max_seq_len,
        "base_checkpoint": str(checkpoint),
        "init": init,
        "finetune": config_to_dict(cfg),
    }
    log = RunLog(out_dir, total_steps, 0, quiet)
    n_params = sum(p.numel() for p in model.parameters())
    target = f"{num_labels} labels" if labels else "a score"
    log.say(
        f"nanobert: fine-tuning {n_params / 1e6:.2f}M parameters ({init} encoder) to predict {target}; "
        f"{len(train.data)} train / {len(dev.data)} dev examples, {cfg.epochs} epochs of {steps_per_epoch} "
        f"steps on {device}"
    )

    # --- the loop: epochs of shuffled batches, a dev evaluation after each, the best one saved
    history: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    step, loss_sum, window_steps, window_tokens = 0, torch.zeros((), device=device), 0, 0
    loop_start = window_start = time.perf_counter()
    model.train()
    try:
        for epoch in range(1, cfg.epochs + 1):
            for index in train_batches(len(train.data), cfg.batch_size, cfg.seed, epoch):
                # learning rate for this step: linear warmup, then linear decay to 0
                lr = cfg.learning_rate * lr_multiplier((step + 1) / total_steps, cfg.warmup_ratio)
                for group in optimizer.param_groups:
                    group["lr"] = lr * group["lr_scale"]
                # forward and backward
                batch = {k: v.to(device, non_blocking=True) for k, v in collate(train.data, index).items()}
                window_tokens += sum(len(train.data.input_ids[i]) for i in index)
                autocast = torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else nullcontext()
                with autocast:
                    loss = model(**batch).loss
                loss.backward()
                loss_sum += loss.detach()
                # clip, step, clear
                if cfg.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                window_steps += 1
                # log (the only host sync in the loop)
                if step % cfg.log_interval == 0 or step == total_steps:
                    mean_loss = loss_sum.item() / window_steps
                    if not math.isfinite(mean_loss):
                        raise NanobertError(
                            f"fine-tuning diverged at step {step} (loss {mean_loss}); lower --learning-rate"
                        )
                    now = time.perf_counter()
                    tokens_per_s = window_tokens / max(now - window_start, 1e-9)
                    log.record(
                        {
                            "split": "train",
                            "step": step,
                            "epoch": round(step / steps_per_epoch, 3),
                            "loss": mean_loss,
                            "lr": lr,
                            "tokens_per_s": tokens_per_s,
                        }
                    )
                    eta = (now - loop_start) / step * (total_steps - step)
                    log.progress(step, total_steps, mean_loss, tokens_per_s, eta)
                    loss_sum.zero_()
                    window_steps, window_tokens, window_start = 0, 0, time.perf_counter()
            # evaluate on dev; keep the best epoch
            outputs = model_outputs(model, dev.data, device, amp_dtype, cfg.eval_batch_size)
            metrics = compute_metrics(spec.task, outputs, dev.data.labels)
            record = {"split": "dev", "step": step, "epoch": epoch, **metrics}
            log.record(record)
            history.append(record)
            log.say(f"dev epoch {epoch}: " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
            if best is None or metrics[metric] > best[metric]:
                best = record
                save_checkpoint(
                    out_dir / "best",
                    model,
                    None,
                    tokenizer,
                    extra={**extra, "epoch": epoch, "dev_metrics": metrics},
                    kind=KIND,
                )
    finally:
        log.close()
    train_time = time.perf_counter() - loop_start

    # --- the best epoch on the test file, if one was given
    test_metrics = None
    if test is not None:
        model.load_state_dict(load_state_dict(out_dir / "best"))
        outputs = model_outputs(model, test.data, device, amp_dtype, cfg.eval_batch_size)
        test_metrics = compute_metrics(spec.task, outputs, test.data.labels)
        log.record({"split": "test", "step": step, "epoch": best["epoch"], **test_metrics})
        log.say("test (best epoch): " + "  ".join(f"{k} {v:.4f}" for k, v in test_metrics.items()))

    summary = {
        "out": str(out_dir),
        "checkpoint": str(checkpoint),
        "init": init,
        "task": spec.task,
        "metric": metric,
        "labels": labels,
        "best_epoch": best["epoch"],
        "dev": {k: best[k] for k in METRICS[spec.task] + (("mse",) if spec.task == "regression" else ())},
        "test": test_metrics,
        "dev_history": history,
        "files": {
            "train": str(train_file),
            "dev": str(dev_file),
            "test": str(test_file) if test_file else None,
        },
        "examples": {
            "train": len(train.data),
            "dev": len(dev.data),
            "test": len(test.data) if test else None,
        },
        "columns": spec.columns(),
        "steps": step,
        "train_time_s": round(train_time, 2),
        "wall_time_s": round(time.perf_counter() - wall_start, 2),
        "parameters": n_params,
        "hardware": hardware_description(device),
        "finetune": dataclasses.asdict(cfg),
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.say(
        f"nanobert: best dev {metric} {best[metric]:.4f} at epoch {best['epoch']}, {train_time:.0f} s; "
        f"model in {out_dir / 'best'}"
    )
    return summary


# ----------------------------------------------------------------------------------------------------------
# Prediction


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
    texts_a = _texts(table, text_col)
    texts_b = _texts(table, text_pair_col) if text_pair_col is not None else None
    ids, types = encode_texts(tokenizer, texts_a, texts_b, int(config.get("max_seq_len", 128)))
    outputs = model_outputs(model, Encoded(ids, types), dev, autocast_dtype("auto", dev), batch_size)

    task, labels = config["task"], config.get("labels")
    if task == "regression":
        new_columns: dict[str, list[Any]] = {"prediction": [round(float(s), 6) for s in outputs[:, 0]]}
    else:
        probs = torch.softmax(torch.from_numpy(outputs), dim=-1).numpy()
        predicted = [labels[i] for i in probs.argmax(axis=1)]
        if table.format == "jsonl":
            new_columns = {
                "prediction": predicted,
                "probabilities": [
                    {lab: round(float(p), 6) for lab, p in zip(labels, row, strict=True)} for row in probs
                ],
            }
        else:
            new_columns = {"prediction": predicted}
            new_columns.update(
                {f"prob_{lab}": [f"{p:.6f}" for p in probs[:, i]] for i, lab in enumerate(labels)}
            )
    write_table(table, new_columns, out)

    result: dict[str, Any] = {"rows": len(table), "out": str(out) if out is not None else None, "task": task}
    label_col = columns.get("label")
    same_kind = label_col is not None and isinstance(label_col, int) == headerless
    if same_kind and table.column(label_col, required=False) is not None:
        try:  # score the predictions when the input is labelled (all known labels); otherwise just predict
            y = (
                regression_targets(table, label_col)
                if task == "regression"
                else label_ids(table, label_col, labels, "the training file")
            )
            result["metrics"] = compute_metrics(task, outputs, y)
        except NanobertError as e:
            result["metrics_skipped"] = str(e)
    return result


__all__ = [
    "KIND",
    "METRICS",
    "TASKS",
    "Encoded",
    "FinetuneConfig",
    "TaskSpec",
    "accuracy",
    "average_ranks",
    "build_classifier",
    "collate",
    "compute_metrics",
    "confusion_matrix",
    "encode_texts",
    "finetune",
    "label_order",
    "load_finetuned",
    "load_split",
    "macro_f1",
    "matthews_corrcoef",
    "model_outputs",
    "pearson",
    "predict",
    "spearman",
    "train_batches",
]
