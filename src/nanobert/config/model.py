"""The model's shape and start: `ModelConfig`, with the field names of transformers' `configuration_bert.py`
so a nanobert `config.json` reads like a BERT one and export is a rename, not a translation."""

from __future__ import annotations

from dataclasses import dataclass

from nanobert.errors import NanobertError


@dataclass
class ModelConfig:
    """Shape and regularisation of a BERT encoder; defaults are the `mini` preset with an 8,192 vocabulary."""

    vocab_size: int = 8192  # WordPiece 8,192: the size the project compares quality at on WikiText-2
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 1024  # 4x hidden, as in BERT
    # "gelu": exact (erf) GELU, the activation of the original BERT and of transformers. "geglu": the gated
    # feed-forward of Shazeer (2020), GELU(x W) * (x V), with W and V both H -> intermediate_size (so 1.5x the
    # feed-forward's weights and work); transformers' BERT has no such layer, so it cannot be exported. At
    # equal CPU time it tied the plain GELU (record 2026-11-25-geglu-and-no-bias).
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segment A and segment B
    layer_norm_eps: float = 1e-12  # BERT's value; transformers uses it too, which keeps the parity test exact
    initializer_range: float = 0.02
    # "sinusoidal": the learned position table starts as Vaswani et al.'s sines and cosines instead of noise,
    # so "attend to the next word" is a direction attention can find at once; training then changes it like
    # any weight. "normal" is BERT's init.
    position_embedding_init: str = "normal"
    # The position table's initial spread in units of initializer_range. At 3, position outweighs the token
    # in the first LayerNorm, and the CPU recipe left the frequent-words plateau sooner on every seed
    # (record 2026-11-25-position-scale).
    position_embedding_scale: float = 1.0
    # "mimetic": each head's key projection starts as a copy of its query projection (Trockman & Kolter 2023,
    # "Mimetic Initialization of Self-Attention Layers"), so from step 0 a token attends to the tokens most
    # like it: itself and, through the position rows, its neighbours. The frequent-words plateau is the time
    # random attention takes to find the neighbours. "roles": mimetic, with the first half of the heads
    # reading only where a token is (the position and segment rows start in the first half of the
    # dimensions) and the other half only what it is (the token rows' second half): those heads attend to
    # the same word wherever it is, in either segment. "normal" is BERT's init.
    attention_init: str = "normal"
    # mimetic: the attention score (q.k / sqrt(head size)) of a token with itself at step 0, on average
    mimetic_score: float = 8.0
    pad_token_id: int = 0
    pre_layer_norm: bool = False  # False = post-LN as in BERT; True = LayerNorm before each sublayer
    # True = causal self-attention (each token sees itself and the tokens before it): GPT's next-word task on
    # BERT's stack. Set by `pretrain --objective causal`; transformers' name for the same switch.
    is_decoder: bool = False

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise NanobertError(f"model config: {name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise NanobertError(
                f"model config: hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; pick a head count that divides it"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise NanobertError(f"model config: {name} must be in [0, 1), got {getattr(self, name)}")
        if self.hidden_act not in ("gelu", "geglu"):
            raise NanobertError(f"model config: hidden_act {self.hidden_act!r} is not one of 'gelu', 'geglu'")
        if self.position_embedding_init not in ("normal", "sinusoidal"):
            raise NanobertError(
                f"model config: position_embedding_init {self.position_embedding_init!r} is not one of "
                "'normal', 'sinusoidal'"
            )
        if self.attention_init not in ("normal", "mimetic", "roles"):
            raise NanobertError(
                f"model config: attention_init {self.attention_init!r} is not one of 'normal', 'mimetic', "
                "'roles'"
            )
        if self.attention_init == "roles" and (self.num_attention_heads < 2 or self.hidden_size % 2):
            raise NanobertError(
                "model config: attention_init 'roles' needs at least two heads and an even hidden_size "
                "(half the heads read positions, half read words)"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise NanobertError(f"model config: pad_token_id {self.pad_token_id} is outside the vocabulary")
        # written as "not > 0" so that NaN fails too
        positive = (
            self.layer_norm_eps,
            self.initializer_range,
            self.position_embedding_scale,
            self.mimetic_score,
        )
        if not all(value > 0 for value in positive):
            raise NanobertError(
                "model config: layer_norm_eps, initializer_range, position_embedding_scale and mimetic_score "
                "must be positive"
            )


__all__ = ["ModelConfig"]
