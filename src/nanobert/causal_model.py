"""The causal language models on BERT's stack: GPT's next word (`BertLMHeadModel`) and GPT-BERT's hybrid of
next and masked words on one head (`BertForHybridLM`).

They share `model.py`'s encoder, vocabulary head and initialisation; `config.is_decoder` makes every attention
causal (each token sees only itself and the tokens before it), and the vocabulary head is read as GPT reads
it: the output at position t predicts the token at t + 1. Kept apart from `model.py` so that file stays the
BERT paper; transformers' `BertLMHeadModel` has the same names.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from nanobert.config import ModelConfig
from nanobert.model import BertPreTrainedModel, LMPredictionHead
from nanobert.tokenizer import IGNORE_INDEX


@dataclass
class CausalLMOutput:
    """What BertLMHeadModel.forward returns (the fields of transformers' CausalLMOutput)."""

    loss: torch.Tensor | None  # mean next-token cross-entropy over the labelled targets
    logits: torch.Tensor | None  # (B, T, V): position t scores the token at t + 1; None without return_logits
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class BertLMHeadModel(BertPreTrainedModel):
    """The encoder with a causal mask and the vocabulary head: GPT's next-word task on BERT's stack.

    The same embeddings, layers and head as BertForPreTraining (no pooler, no NSP head), with
    `config.is_decoder` making every attention causal. transformers' `BertLMHeadModel` with the same names.
    """

    def __init__(self, config: ModelConfig):
        if not config.is_decoder:
            raise ValueError("BertLMHeadModel needs config.is_decoder=True (causal attention)")
        super().__init__(config, add_pooling_layer=False)
        self.lm_head = LMPredictionHead(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_logits: bool = True,
    ) -> CausalLMOutput:
        """labels (B, T): as transformers, the input ids themselves (-100 where nothing is to be predicted);
        the model shifts them, so that the logits at position t are scored against labels[:, t + 1].
        return_logits=False (training, with labels): the loss is computed in chunks without the (B, T, V)
        logits (`linear_cross_entropy`), and logits is None."""
        enc = self.bert(input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states)
        h, decoder_weight = enc.last_hidden_state, self.bert.embeddings.word_embeddings.weight  # tied
        logits = self.lm_head(h, decoder_weight) if return_logits or labels is None else None  # (B, T, V)
        loss = None
        if labels is not None:
            targets = labels[:, 1:].reshape(-1)  # (B * (T - 1),): each position's next token, the last's none
            if logits is None:
                loss = self.lm_head.loss(h[:, :-1].reshape(-1, h.size(-1)), decoder_weight, targets)
            else:
                scores = logits[:, :-1].reshape(-1, logits.size(-1)).float()
                n_targets = (targets != IGNORE_INDEX).sum().clamp(min=1)
                loss = F.cross_entropy(scores, targets, reduction="sum") / n_targets
        return CausalLMOutput(loss, logits, enc.hidden_states, enc.attentions)


@dataclass
class HybridLMOutput:
    """What BertForHybridLM.forward returns: CausalLMOutput's fields, read in either direction."""

    loss: torch.Tensor | None  # mean cross-entropy over the labelled outputs
    logits: torch.Tensor | None  # (B, T, V): position t scores the token at t + 1; None without return_logits
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None

    @property
    def prediction_logits(self) -> torch.Tensor:
        """The logits by the position they fill, (B, T, V): position t holds output t - 1's (position 0,
        which nothing precedes, zeros), so a [MASK] at t is read where BERT's fill-mask reads it."""
        return F.pad(self.logits[:, :-1], (0, 0, 1, 0))


class BertForHybridLM(BertLMHeadModel):
    """GPT-BERT (Charpentier & Samuel 2024): one stack trained on next-word and masked batches alike.

    The masked prediction is shifted like the causal one, so one head serves both: the output at t predicts
    the token at t + 1, read causally (`causal=True`: the next word) or both ways (`causal=False`: the [MASK]
    at t + 1, with the text on both sides of it). The weights are BertLMHeadModel's and `config.is_decoder`
    is set, so generation, scoring and the attention maps read it causally unless a call asks otherwise.
    """

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        return_logits: bool = True,
        causal: bool = True,
    ) -> HybridLMOutput:
        """labels (B, T), already shifted: labels[:, t] is the token output t predicts (-100: none), as the
        hybrid objective lays out both kinds of batch. return_logits=False (training, with labels): the loss
        over the labelled outputs only (a masked batch labels a fraction of them), without the logits."""
        enc = self.bert(
            input_ids, token_type_ids, attention_mask, output_attentions, output_hidden_states, causal=causal
        )
        h, decoder_weight = enc.last_hidden_state, self.bert.embeddings.word_embeddings.weight  # tied
        logits = self.lm_head(h, decoder_weight) if return_logits or labels is None else None  # (B, T, V)
        loss = None
        if labels is not None:
            keep = labels != IGNORE_INDEX  # (B, T)
            if logits is None:
                loss = self.lm_head.loss(h[keep], decoder_weight, labels[keep])  # (N, H) rows only
            else:
                total = F.cross_entropy(logits[keep].float(), labels[keep], reduction="sum")
                loss = total / keep.sum().clamp(min=1)
        return HybridLMOutput(loss, logits, enc.hidden_states, enc.attentions)


__all__ = ["BertForHybridLM", "BertLMHeadModel", "CausalLMOutput", "HybridLMOutput"]
