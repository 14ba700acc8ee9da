"""The next word (GPT, Radford et al. 2018) on the same stack: the objective's loss, its sample batch, its
held-out batches and metrics, and its record, `CAUSAL`.

A causal model is scored on next-word prediction over the held-out documents, cut into windows from their
start: lm_loss, lm_accuracy and lm_perplexity per predicted token.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.kinds import CAUSAL_LM
from nanobert.config import ModelConfig, TrainConfig
from nanobert.data.shards import causal_window_batches, check_causal_windows
from nanobert.data.streams import causal_corpus_batches, check_causal_corpus
from nanobert.data.windows import CausalCollator, causal_windows
from nanobert.errors import NanobertError
from nanobert.objectives.held_out import Scored, perplexity, tallied
from nanobert.objectives.objective import Objective, random_ids
from nanobert.tokenizer import IGNORE_INDEX

CAUSAL_METRIC_KEYS = ("lm_loss", "lm_accuracy", "lm_perplexity")


def causal_lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's next-word loss."""
    share = batch.pop("loss_share")
    lm = model(**batch, return_logits=False).loss * share[0]
    return {"loss": lm, "lm_loss": lm}


def prepare_causal_eval_batches(
    tokenized: list[list[list[int]]], seq_len: int, batch_size: int
) -> list[dict[str, torch.Tensor]]:
    """The held-out documents as next-word windows from their start, in reading order, batched."""
    windows = causal_windows(tokenized, seq_len, seed=0, shuffle=False, keep_last=True)
    if not windows:
        raise NanobertError("the held-out split has no tokens; give it more text")
    collator = CausalCollator()
    return [collator(windows[i : i + batch_size]) for i in range(0, len(windows), batch_size)]


def causal_held_out(
    held_out: list, seq_len: int, batch_size: int, vocab_size: int, eval_seed: int
) -> list[dict[str, torch.Tensor]]:
    """Next-word windows of the held-out documents from their start (no masking, so no seed)."""
    return prepare_causal_eval_batches(held_out, seq_len, batch_size)


def causal_collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> CausalCollator:
    """Plain stacking of the windows (padded to the run's multiple)."""
    return CausalCollator(pad_to_multiple_of=cfg.pad_to_multiple_of)


def causal_sample(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random windows, as the stream hands a batch to the loss."""
    ids, _ = random_ids(cfg, vocab_size)
    return {**CausalCollator()(ids.tolist()), "loss_share": torch.ones(2)}


def any_segments(model_config: ModelConfig) -> None:
    """The causal model reads one segment: any type_vocab_size does."""


def _next_words(model: BertLMHeadModel, batch: dict[str, torch.Tensor]) -> Scored:
    """The logits at every position that has a next token, with that token."""
    logits = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]  # the token after each position
    keep = targets != IGNORE_INDEX
    return [(logits[:, :-1][keep], targets[keep])]  # (N, V), (N,)


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


CAUSAL = Objective(
    name="causal",
    kind=CAUSAL_LM,
    is_decoder=True,
    loss=causal_lm_loss,
    metric="lm_loss",
    higher_is_better=False,
    tiebreak=None,  # the metric is a loss already
    metric_keys=CAUSAL_METRIC_KEYS,
    metrics=causal_lm_metrics,
    held_out=causal_held_out,
    collator=causal_collator,
    sample=causal_sample,
    corpus_batches=causal_corpus_batches,
    check_corpus=check_causal_corpus,
    window_batches=causal_window_batches,
    check_windows=check_causal_windows,
    layout=None,  # every position is predicted: the last layer computes them all
    check_model=any_segments,
)


__all__ = [
    "CAUSAL",
    "CAUSAL_METRIC_KEYS",
    "any_segments",
    "causal_lm_loss",
    "causal_lm_metrics",
    "prepare_causal_eval_batches",
]
