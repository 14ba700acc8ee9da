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

import torch
import torch.nn.functional as F

from nanobert.checkpoint import CAUSAL_LM, checkpoint_kind, load_language_model, load_train_config
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
from nanobert.tokenizer import load_tokenizer

METRIC_KEYS = ("mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy")
CAUSAL_METRIC_KEYS = ("lm_loss", "lm_accuracy", "lm_perplexity")
EVAL_MASK_PROB = 0.15  # the standard rate for held-out figures, independent of the training recipe


def eval_instances(tokenized: list[list[list[int]]], max_seq_len: int, eval_seed: int = 0) -> list[Instance]:
    """The held-out NSP instances, in the order `prepare_eval_batches` batches them (a pure function)."""
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


def evaluate_model(
    model: BertForPreTraining,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """The five held-out metrics (METRIC_KEYS) of `model` on pre-masked `batches`."""
    device = torch.device(device)
    mlm_loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    mlm_correct = torch.zeros((), dtype=torch.long, device=device)
    nsp_loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    nsp_correct = torch.zeros((), dtype=torch.long, device=device)
    n_masked = n_pairs = 0
    with evaluating(model):
        for batch in batches:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with autocast(device, autocast_dtype):
                out = model(
                    batch["input_ids"],
                    batch["token_type_ids"],
                    batch["attention_mask"],
                    labels=batch["labels"],
                    next_sentence_label=batch["next_sentence_label"],
                )
            labels = batch["labels"][batch["labels"] != IGNORE_INDEX]  # same order as prediction_logits
            logits = out.prediction_logits.float()
            mlm_loss_sum += F.cross_entropy(logits, labels, reduction="sum").double()
            mlm_correct += (logits.argmax(-1) == labels).sum()
            nsp_logits = out.seq_relationship_logits.float()
            nsp_labels = batch["next_sentence_label"]
            nsp_loss_sum += F.cross_entropy(nsp_logits, nsp_labels, reduction="sum").double()
            nsp_correct += (nsp_logits.argmax(-1) == nsp_labels).sum()
            n_masked += labels.numel()
            n_pairs += nsp_labels.numel()
    mlm_loss = mlm_loss_sum.item() / max(n_masked, 1)
    return {
        "mlm_loss": mlm_loss,
        "mlm_accuracy": mlm_correct.item() / max(n_masked, 1),
        "mlm_perplexity": math.exp(min(mlm_loss, 700.0)),  # capped so a diverged model is inf-free
        "nsp_loss": nsp_loss_sum.item() / max(n_pairs, 1),
        "nsp_accuracy": nsp_correct.item() / max(n_pairs, 1),
    }


def prepare_causal_eval_batches(
    tokenized: list[list[list[int]]], seq_len: int, batch_size: int
) -> list[dict[str, torch.Tensor]]:
    """The held-out documents as next-word windows from their start, in reading order, batched."""
    windows = causal_windows(tokenized, seq_len, seed=0, shuffle=False, keep_last=True)
    if not windows:
        raise NanobertError("the held-out split has no tokens; give it more text")
    collator = CausalCollator()
    return [collator(windows[i : i + batch_size]) for i in range(0, len(windows), batch_size)]


def evaluate_causal(
    model: BertLMHeadModel,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Next-word loss, accuracy and perplexity (CAUSAL_METRIC_KEYS) per predicted token over `batches`."""
    device = torch.device(device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.long, device=device)
    n_targets = 0
    with evaluating(model):
        for batch in batches:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with autocast(device, autocast_dtype):
                logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits
            targets = batch["labels"][:, 1:]  # the token after each position
            keep = targets != IGNORE_INDEX
            scores, targets = logits[:, :-1][keep].float(), targets[keep]  # (N, V), (N,)
            loss_sum += F.cross_entropy(scores, targets, reduction="sum").double()
            correct += (scores.argmax(-1) == targets).sum()
            n_targets += targets.numel()
    loss = loss_sum.item() / max(n_targets, 1)
    return {
        "lm_loss": loss,
        "lm_accuracy": correct.item() / max(n_targets, 1),
        "lm_perplexity": math.exp(min(loss, 700.0)),
    }


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
    tokenizer = load_tokenizer(checkpoint)
    train_config = load_train_config(config)
    if data is None and valid_file is None:
        sources = config_from_dict(DataSources, config.get("data") or {"data": None})
        if not any((sources.data, sources.train_file, sources.valid_file, sources.prepared)):
            raise NanobertError("the checkpoint records no held-out data; pass --valid FILE or --data NAME")
    else:
        sources = DataSources(data=data, valid_file=valid_file)
    held_out, _ = sources.held_out(tokenizer)
    # The precision the run chose (and evaluated itself in), so the numbers are the run's own.
    amp_dtype = autocast_dtype(config.get("precision", train_config.precision), dev)
    if checkpoint_kind(config) == CAUSAL_LM:
        batches = prepare_causal_eval_batches(held_out, train_config.max_seq_len, batch_size)
        return evaluate_causal(model, batches, dev, amp_dtype)
    batches = prepare_eval_batches(
        held_out, train_config.max_seq_len, batch_size, model.config.vocab_size, train_config.eval_seed
    )
    return evaluate_model(model, batches, dev, amp_dtype)


__all__ = [
    "CAUSAL_METRIC_KEYS",
    "EVAL_MASK_PROB",
    "METRIC_KEYS",
    "evaluate_causal",
    "evaluate_checkpoint",
    "evaluate_model",
    "evaluating",
    "eval_instances",
    "prepare_causal_eval_batches",
    "prepare_eval_batches",
]
