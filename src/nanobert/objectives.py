"""The two pretraining objectives on one stack: what differs between BERT's and GPT's task.

`mlm_nsp` (Devlin et al. 2019): masked words and next sentence, both sides of every word visible.
`causal` (Radford et al. 2018): the next word, each token seeing only the tokens before it (the model's
`is_decoder` flag makes the attention causal). Everything else, the data sources, tokenizer, training loop,
checkpoints, resume and DDP, is shared; `train.py` looks the differences up here: the model class and the
checkpoint kind, how batches are collated, the fixed held-out batches, the loss and the held-out metrics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from nanobert.checkpoint import CAUSAL_LM, PRETRAINING
from nanobert.config import TrainConfig
from nanobert.evaluate import (
    prepare_causal_eval_batches,
    prepare_eval_batches,
)
from nanobert.model import IGNORE_INDEX, BertForPreTraining, BertLMHeadModel
from nanobert.pretraining_data import CausalCollator, MaskingCollator, query_layout, word_start_table
from nanobert.streams import MLM_POSITIONS_MULTIPLE, QUERY_WIDTH_MULTIPLE
from nanobert.tokenizer import CLS_ID, MASK_ID, NUM_SPECIAL_TOKENS


def mlm_nsp_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's MLM + NSP loss (`streams.shard_batch`'s `loss_share`)."""
    share = batch.pop("loss_share")
    out = model(**batch, return_logits=False)  # the loss in chunks, without the (N, V) logits
    mlm, nsp = out.mlm_loss * share[0], out.nsp_loss * share[1]
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp}


def causal_lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's next-word loss."""
    share = batch.pop("loss_share")
    lm = model(**batch, return_logits=False).loss * share[0]
    return {"loss": lm, "lm_loss": lm}


@dataclass(frozen=True)
class Objective:
    """What differs between the two pretraining tasks; everything else (data sources, tokenizer, loop,
    checkpoints, resume, DDP) is shared."""

    kind: str  # the checkpoint kind it writes
    model: type  # the model class
    loss: Callable
    metric: str  # the held-out metric that picks best/
    higher_is_better: bool


OBJECTIVES = {
    "mlm_nsp": Objective(PRETRAINING, BertForPreTraining, mlm_nsp_loss, "mlm_accuracy", True),
    "causal": Objective(CAUSAL_LM, BertLMHeadModel, causal_lm_loss, "lm_loss", False),
}


def eval_batches(cfg: TrainConfig, held_out: list, vocab_size: int) -> list[dict[str, torch.Tensor]]:
    """The fixed held-out batches: masked NSP pairs (the standard protocol), or next-word windows."""
    if cfg.objective == "causal":
        return prepare_causal_eval_batches(held_out, cfg.max_seq_len, cfg.eval_batch_size)
    return prepare_eval_batches(held_out, cfg.max_seq_len, cfg.eval_batch_size, vocab_size, cfg.eval_seed)


def collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> MaskingCollator | CausalCollator:
    """What turns training instances into a batch: the masking collator, or plain stacking (causal)."""
    if cfg.objective == "causal":
        return CausalCollator(pad_to_multiple_of=cfg.pad_to_multiple_of)
    return MaskingCollator(
        vocab_size,
        mask_prob=cfg.mask_prob,
        max_predictions=cfg.max_predictions,
        pad_to_multiple_of=cfg.pad_to_multiple_of,
        seed=cfg.seed,
        whole_word_mask=cfg.whole_word_mask,
        word_start=word_start_table(tokenizer, vocab_size) if cfg.whole_word_mask else None,
    )


def sample_batch(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """A batch of the run's shape (batch_size x max_seq_len, its masking rate) of random tokens, as the
    stream would hand it to the loss: what `device.choose_precision` times the two precisions on."""
    g = torch.Generator().manual_seed(0)
    B, T = cfg.batch_size, cfg.max_seq_len
    ids = torch.randint(NUM_SPECIAL_TOKENS, vocab_size, (B, T), generator=g)
    ids[:, 0] = CLS_ID
    if cfg.objective == "causal":
        windows = ids.tolist()
        return {**CausalCollator()(windows), "loss_share": torch.ones(2)}
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


__all__ = [
    "OBJECTIVES",
    "Objective",
    "causal_lm_loss",
    "collator",
    "eval_batches",
    "mlm_nsp_loss",
    "sample_batch",
]
