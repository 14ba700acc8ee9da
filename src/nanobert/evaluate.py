"""Held-out metrics: MLM loss, accuracy and perplexity, and NSP loss and accuracy.

The held-out protocol is fixed, whatever the training recipe: NSP instances built once from the held-out
documents with `eval_seed`, standard masking (15% of tokens, 80/10/10, no whole-word masking) from a collator
seeded with `eval_seed`. Every evaluation of every model therefore sees exactly the same masked batches, so
numbers are comparable across steps, runs and recipes. Which documents are held out is decided by the run's
`DataSources` (sources.py), for the run's own evaluations and for `nanobert evaluate` alike.

MLM figures are per masked token over the whole split (not a mean of batch means); perplexity is
exp(mlm_loss). A causal checkpoint (`pretrain --objective causal`) is scored on next-word prediction over
the same held-out documents, cut into windows from their start: lm_loss, lm_accuracy and lm_perplexity per
predicted token.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

from nanobert.checkpoint import (
    CAUSAL_LM,
    checkpoint_kind,
    checkpoint_tokenizer,
    load_language_model,
    load_train_config,
)
from nanobert.config import config_from_dict
from nanobert.device import autocast, autocast_dtype, resolve_device
from nanobert.errors import NanobertError
from nanobert.model import IGNORE_INDEX, BertForPreTraining, BertLMHeadModel
from nanobert.pretraining_data import (
    CausalCollator,
    Instance,
    MaskingCollator,
    causal_windows,
    create_instances,
)
from nanobert.sources import DataSources

METRIC_KEYS = ("mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy")
CAUSAL_METRIC_KEYS = ("lm_loss", "lm_accuracy", "lm_perplexity")
EVAL_MASK_PROB = 0.15  # the standard rate for held-out figures, independent of the training recipe


def eval_instances(tokenized: list[list[list[int]]], max_seq_len: int, eval_seed: int = 0) -> list[Instance]:
    """The held-out NSP instances, in the order `prepare_eval_batches` batches them (a pure function)."""
    if len(tokenized) < 2:  # say it is the held-out split, not the training corpus, that is short
        raise NanobertError(
            f"the held-out split has {len(tokenized)} document(s), and next-sentence pairs need two; give "
            "--valid a file of several documents (separated by blank lines or ' = Title = ' headings)"
        )
    instances = create_instances(tokenized, max_seq_len, seed=eval_seed, epoch=0)
    if not instances:
        raise NanobertError("the held-out split yields no NSP instances; give it more text")
    # Sorting by length keeps padding small; order does not affect the summed metrics. The sort is stable.
    return sorted(instances, key=lambda inst: len(inst.input_ids))


def prepare_eval_batches(
    tokenized: list[list[list[int]]], max_seq_len: int, batch_size: int, vocab_size: int, eval_seed: int = 0
) -> list[dict[str, torch.Tensor]]:
    """The fixed, pre-masked held-out batches (built once, reused at every evaluation)."""
    instances = eval_instances(tokenized, max_seq_len, eval_seed)
    collator = MaskingCollator(vocab_size, mask_prob=EVAL_MASK_PROB, seed=eval_seed)
    return [collator(instances[i : i + batch_size]) for i in range(0, len(instances), batch_size)]


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and no gradients for the block; the model's mode is put back after it."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


class _Tally:
    """Summed cross-entropy and correct argmaxes of (N, C) scores against (N,) targets, kept on the device
    so that an evaluation syncs with the host once, at the end."""

    def __init__(self, device: torch.device):
        self.loss = torch.zeros((), dtype=torch.float64, device=device)
        self.correct = torch.zeros((), dtype=torch.long, device=device)
        self.count = 0

    def add(self, scores: torch.Tensor, targets: torch.Tensor) -> None:
        scores = scores.float()
        self.loss += F.cross_entropy(scores, targets, reduction="sum").double()
        self.correct += (scores.argmax(-1) == targets).sum()
        self.count += targets.numel()

    def mean_loss(self) -> float:
        return self.loss.item() / max(self.count, 1)

    def accuracy(self) -> float:
        return self.correct.item() / max(self.count, 1)


def _on_device(
    model: torch.nn.Module, batches: list[dict[str, torch.Tensor]], device: torch.device
) -> Iterator[dict[str, torch.Tensor]]:
    """Each batch moved to `device`, with the model in eval mode and gradients off meanwhile."""
    with evaluating(model):
        for batch in batches:
            yield {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def _perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))  # capped so a diverged model is inf-free


def prepare_causal_eval_batches(
    tokenized: list[list[list[int]]], seq_len: int, batch_size: int
) -> list[dict[str, torch.Tensor]]:
    """The held-out documents as next-word windows from their start, in reading order, batched."""
    windows = causal_windows(tokenized, seq_len, seed=0, shuffle=False, keep_last=True)
    if not windows:
        raise NanobertError("the held-out split has no tokens; give it more text")
    collator = CausalCollator()
    return [collator(windows[i : i + batch_size]) for i in range(0, len(windows), batch_size)]


def evaluate_model(
    model: BertForPreTraining | BertLMHeadModel,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Held-out metrics of a pretraining model on its fixed batches, per masked token, pair or predicted
    token over the whole split: METRIC_KEYS (MLM + NSP) or, for a causal model, CAUSAL_METRIC_KEYS."""
    device = torch.device(device)
    causal = model.config.is_decoder
    tallies = [_Tally(device) for _ in range(1 if causal else 2)]
    for batch in _on_device(model, batches, device):
        with autocast(device, autocast_dtype):
            scored = _next_words(model, batch) if causal else _masked_words_and_pairs(model, batch)
        for tally, (scores, targets) in zip(tallies, scored, strict=True):
            tally.add(scores, targets)
    loss = tallies[0].mean_loss()
    if causal:
        return {"lm_loss": loss, "lm_accuracy": tallies[0].accuracy(), "lm_perplexity": _perplexity(loss)}
    mlm, nsp = tallies
    return {
        "mlm_loss": loss,
        "mlm_accuracy": mlm.accuracy(),
        "mlm_perplexity": _perplexity(loss),
        "nsp_loss": nsp.mean_loss(),
        "nsp_accuracy": nsp.accuracy(),
    }


Scored = list[tuple[torch.Tensor, torch.Tensor]]  # (N, C) scores and their (N,) targets, per metric


def _masked_words_and_pairs(model: BertForPreTraining, batch: dict[str, torch.Tensor]) -> Scored:
    """The MLM logits at the masked positions and the NSP logits, each with its targets."""
    out = model(
        batch["input_ids"],
        batch["token_type_ids"],
        batch["attention_mask"],
        labels=batch["labels"],
        next_sentence_label=batch["next_sentence_label"],
    )
    labels = batch["labels"][batch["labels"] != IGNORE_INDEX]  # same order as prediction_logits
    return [(out.prediction_logits, labels), (out.seq_relationship_logits, batch["next_sentence_label"])]


def _next_words(model: BertLMHeadModel, batch: dict[str, torch.Tensor]) -> Scored:
    """The logits at every position that has a next token, with that token."""
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]  # the token after each position
    keep = targets != IGNORE_INDEX
    return [(logits[:, :-1][keep], targets[keep])]  # (N, V), (N,)


def evaluate_checkpoint(
    checkpoint: str,
    data: str | None = None,
    valid_file: str | None = None,
    batch_size: int = 64,
    device: str = "auto",
) -> dict[str, float]:
    """Metrics of a pretraining checkpoint on a held-out split.

    By default the split its run held out (the `DataSources` recorded in the checkpoint), so the numbers
    are the run's own final evaluation; `data` or `valid_file` names another (held out by the same rule).
    """
    if batch_size < 1:
        raise NanobertError(f"--batch-size must be at least 1, got {batch_size}")
    dev = resolve_device(device)
    model, config = load_language_model(checkpoint, map_location=dev)
    tokenizer = checkpoint_tokenizer(checkpoint, model, config)
    train_config = load_train_config(config)
    if data is None and valid_file is None:
        sources = config_from_dict(DataSources, config.get("data") or {"data": None})
        if not any((sources.data, sources.train_file, sources.valid_file, sources.prepared)):
            raise NanobertError("the checkpoint records no held-out data; pass --valid FILE or --data NAME")
        # paths are recorded as the run was given them, so from another folder they may not resolve
        needed = [sources.valid_file] if sources.valid_file else [sources.train_file, sources.prepared]
        for path in filter(None, needed):
            if not Path(path).exists():
                raise NanobertError(
                    f"the checkpoint's held-out data comes from {path}, as its run recorded it, which is not "
                    f"found from {Path.cwd()}; pass --valid FILE (or run from the run's folder)"
                )
    else:
        sources = DataSources(data=data, valid_file=valid_file)
    held_out, _ = sources.held_out(tokenizer)
    # The precision the run chose (and evaluated itself in), so the numbers are the run's own.
    amp_dtype = autocast_dtype(config.get("precision", train_config.precision), dev)
    if checkpoint_kind(config) == CAUSAL_LM:
        batches = prepare_causal_eval_batches(held_out, train_config.max_seq_len, batch_size)
        return evaluate_model(model, batches, dev, amp_dtype)
    batches = prepare_eval_batches(
        held_out, train_config.max_seq_len, batch_size, model.config.vocab_size, train_config.eval_seed
    )
    return evaluate_model(model, batches, dev, amp_dtype)


__all__ = [
    "CAUSAL_METRIC_KEYS",
    "EVAL_MASK_PROB",
    "METRIC_KEYS",
    "evaluate_checkpoint",
    "evaluate_model",
    "evaluating",
    "eval_instances",
    "prepare_causal_eval_batches",
    "prepare_eval_batches",
]
