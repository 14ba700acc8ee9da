"""Masked words and next sentence (BERT, Devlin et al. 2019): the objective's loss, its sample batch, its
held-out batches and metrics, and its record, `MLM_NSP`.

The held-out NSP instances are built once from the held-out documents with `eval_seed` and masked at the
standard rate by a collator seeded with `eval_seed`; MLM figures are per masked token over the whole split,
NSP figures per pair.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer

from nanobert.checkpoints.kinds import PRETRAINING
from nanobert.config import ModelConfig, TrainConfig
from nanobert.data.masking import MaskingCollator, query_layout, word_start_table
from nanobert.data.nsp import Instance, create_instances
from nanobert.data.shards import nsp_window_batches
from nanobert.data.streams import (
    MLM_POSITIONS_MULTIPLE,
    QUERY_WIDTH_MULTIPLE,
    add_query_layout,
    check_nsp_corpus,
    nsp_corpus_batches,
)
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining
from nanobert.objectives.held_out import EVAL_MASK_PROB, Scored, perplexity, tallied
from nanobert.objectives.objective import Objective, random_ids
from nanobert.tokenizer import IGNORE_INDEX, MASK_ID

METRIC_KEYS = ("mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy")


def mlm_nsp_loss(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], nsp_weight: float = 1.0
) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's MLM + NSP loss (`streams.shard_batch`'s `loss_share`), the
    NSP term times `nsp_weight` (the train config's nsp_loss_weight; BERT's sum at 1). The terms are
    returned unweighted, for the log."""
    share = batch.pop("loss_share")
    out = model(**batch, return_logits=False)  # the loss in chunks, without the (N, V) logits
    mlm, nsp = out.mlm_loss * share[0], out.nsp_loss * share[1]
    return {"loss": mlm + nsp * nsp_weight, "mlm_loss": mlm, "nsp_loss": nsp}


def mlm_nsp_held_out_loss(metrics: dict[str, float]) -> float:
    """Both heads' held-out losses: among evaluations of equal MLM accuracy, the lower has learnt more,
    the next-sentence head included."""
    return metrics["mlm_loss"] + metrics["nsp_loss"]


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


def mlm_nsp_held_out(
    held_out: list, seq_len: int, batch_size: int, vocab_size: int, eval_seed: int
) -> list[dict[str, torch.Tensor]]:
    """Masked NSP pairs of the held-out documents, the standard protocol (`prepare_eval_batches`)."""
    return prepare_eval_batches(held_out, seq_len, batch_size, vocab_size, eval_seed)


def masking_collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> MaskingCollator:
    """The run's masking collator (its rate, cap, whole-word masking and seed)."""
    return MaskingCollator(
        vocab_size,
        mask_prob=cfg.mask_prob,
        max_predictions=cfg.max_predictions,
        pad_to_multiple_of=cfg.pad_to_multiple_of,
        seed=cfg.seed,
        whole_word_mask=cfg.whole_word_mask,
        word_start=word_start_table(tokenizer, vocab_size) if cfg.whole_word_mask else None,
    )


def mlm_nsp_sample(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random tokens masked at the run's rate, as the stream hands a batch to the loss."""
    ids, g = random_ids(cfg, vocab_size)
    B, T = ids.shape
    labels = torch.where(torch.rand(B, T, generator=g) < cfg.mask_prob, ids, IGNORE_INDEX)
    labels[:, 0] = IGNORE_INDEX
    query_positions, mlm_positions = query_layout(labels, MLM_POSITIONS_MULTIPLE, QUERY_WIDTH_MULTIPLE)
    return {
        "input_ids": torch.where(labels != IGNORE_INDEX, MASK_ID, ids),
        "token_type_ids": (torch.arange(T) >= T // 2).long().expand(B, T).contiguous(),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (B,), generator=g),
        "query_positions": query_positions,
        "mlm_positions": mlm_positions,
        "loss_share": torch.ones(2),
    }


def check_segment_b(model_config: ModelConfig) -> None:
    """Next-sentence pairs need a segment B: NanobertError for a model with one token type."""
    if model_config.type_vocab_size < 2:
        raise NanobertError(
            f"model config: type_vocab_size {model_config.type_vocab_size} leaves no segment B, which "
            "next-sentence pairs need; use 2 (or --objective causal)"
        )


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


# NSP accuracy within this of the majority label's share: the head still answers one label for every pair.
NSP_UNLEARNED_MARGIN = 0.02


def nsp_not_learned(
    best: dict | None, batches: list[dict[str, torch.Tensor]], longer: str = "--time-budget"
) -> str | None:
    """Why best/'s next-sentence figure is what it is, when the head has not started learning: its accuracy
    is no better than always answering the more common label of the held-out pairs. None when it has, or
    when the run has no NSP figures. The recipe learns the masked words first and the pairs later: at the
    default size NSP leaves the majority label after about 3,000 steps (2026-11-29-step-protocol). `longer`
    says how to train longer: the command that continues the run, where it has one."""
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
        f"are learned first and the pairs later in a run, so train longer for them ({longer})"
    )


MLM_NSP = Objective(
    name="mlm_nsp",
    kind=PRETRAINING,
    is_decoder=False,
    loss=mlm_nsp_loss,
    metric="mlm_accuracy",
    higher_is_better=True,
    tiebreak=mlm_nsp_held_out_loss,
    metric_keys=METRIC_KEYS,
    metrics=mlm_nsp_metrics,
    held_out=mlm_nsp_held_out,
    collator=masking_collator,
    sample=mlm_nsp_sample,
    corpus_batches=nsp_corpus_batches,
    check_corpus=check_nsp_corpus,
    window_batches=nsp_window_batches,
    check_windows=None,  # WindowedInstances itself refuses a split of fewer than two documents
    layout=add_query_layout,
    check_model=check_segment_b,
)


__all__ = [
    "METRIC_KEYS",
    "MLM_NSP",
    "eval_instances",
    "masking_collator",
    "mlm_nsp_loss",
    "mlm_nsp_metrics",
    "nsp_not_learned",
    "prepare_eval_batches",
]
