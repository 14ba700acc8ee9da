"""The held-out protocol of pretraining: the fixed held-out batches of each objective and their metrics.

The held-out protocol is fixed, whatever the training recipe: NSP instances built once from the held-out
documents with `eval_seed`, standard masking (15% of tokens, 80/10/10, no whole-word masking) from a collator
seeded with `eval_seed`. Every evaluation of every model therefore sees exactly the same masked batches, so
numbers are comparable across steps, runs and recipes. MLM figures are per masked token over the whole split
(not a mean of batch means); perplexity is exp(mlm_loss). A causal model is scored on next-word prediction
over the same held-out documents, cut into windows from their start: lm_loss, lm_accuracy and lm_perplexity
per predicted token. `objectives.py` names which builder and which metrics belong to which objective;
`evaluate.py` scores a saved checkpoint with them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import Instance, create_instances
from nanobert.data.windows import CausalCollator, causal_windows
from nanobert.device import autocast, evaluating
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining, BertLMHeadModel
from nanobert.tokenizer import IGNORE_INDEX

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


def perplexity(loss: float) -> float:
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


def tallied(model, batches, device, autocast_dtype, scorer, n: int) -> list[_Tally]:
    """The tallies of `scorer`'s (scores, targets) pairs over every held-out batch."""
    device = torch.device(device)
    tallies = [_Tally(device) for _ in range(n)]
    for batch in _on_device(model, batches, device):
        with autocast(device, autocast_dtype):
            scored = scorer(model, batch)
        for tally, (scores, targets) in zip(tallies, scored, strict=True):
            tally.add(scores, targets)
    return tallies


def mlm_nsp_metrics(
    model: BertForPreTraining,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """METRIC_KEYS of an MLM + NSP model on its fixed batches: per masked token and per pair, over the whole
    split."""
    mlm, nsp = tallied(model, batches, device, autocast_dtype, _masked_words_and_pairs, 2)
    loss = mlm.mean_loss()
    return {
        "mlm_loss": loss,
        "mlm_accuracy": mlm.accuracy(),
        "mlm_perplexity": perplexity(loss),
        "nsp_loss": nsp.mean_loss(),
        "nsp_accuracy": nsp.accuracy(),
    }


def causal_lm_metrics(
    model: BertLMHeadModel,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """CAUSAL_METRIC_KEYS of a causal model on its fixed batches, per predicted token over the whole split."""
    (lm,) = tallied(model, batches, device, autocast_dtype, _next_words, 1)
    loss = lm.mean_loss()
    return {"lm_loss": loss, "lm_accuracy": lm.accuracy(), "lm_perplexity": perplexity(loss)}


# NSP accuracy within this of the majority label's share: the head still answers one label for every pair.
NSP_UNLEARNED_MARGIN = 0.02


def nsp_not_learned(best: dict | None, batches: list[dict[str, torch.Tensor]]) -> str | None:
    """Why best/'s next-sentence figure is what it is, when the head has not started learning: its accuracy
    is no better than always answering the more common label of the held-out pairs. None when it has, or
    when the run has no NSP figures. The recipe learns the masked words first and the pairs later: at the
    default size NSP leaves the majority label after about 3,000 steps (2026-11-29-step-protocol)."""
    labels = [b["next_sentence_label"] for b in batches if "next_sentence_label" in b]
    if not best or not isinstance(best.get("nsp_accuracy"), float) or not labels:
        return None
    share_random = torch.cat(labels).float().mean().item()
    majority = max(share_random, 1.0 - share_random)
    if best["nsp_accuracy"] > majority + NSP_UNLEARNED_MARGIN:
        return None
    return (
        f"next sentence not learned yet: best/'s NSP accuracy {best['nsp_accuracy']:.3f} is what always "
        f"answering the more common label scores ({majority:.3f} of the held-out pairs); the masked words "
        "are learned first and the pairs later in a run, so train longer for them (--time-budget)"
    )


__all__ = [
    "CAUSAL_METRIC_KEYS",
    "EVAL_MASK_PROB",
    "METRIC_KEYS",
    "causal_lm_metrics",
    "eval_instances",
    "mlm_nsp_metrics",
    "nsp_not_learned",
    "perplexity",
    "prepare_causal_eval_batches",
    "prepare_eval_batches",
    "tallied",
]
