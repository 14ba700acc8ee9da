"""The same BERT forward pass in plain NumPy, to read next to the paper.

Devlin et al. 2019 ("BERT", section 3 and figure 2) builds on Vaswani et al. 2017 ("Attention Is All You
Need", section 3): each function below is one box of those figures, written out with matrix products and no
framework. It loads the weights of a nanobert checkpoint (the same `model.safetensors`, read as NumPy arrays)
and computes in float64, so it is also an independent check of `model.py`: tests/test_reference.py shows the
two agree within 1e-4 on random inputs.

Shapes in comments: B batch, T tokens, H hidden size, nh heads, hd = H / nh, V vocabulary. Weight names are
nanobert's state-dict keys; a Linear layer's weight is (out, in), so `x @ W.T + b` applies it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from nanobert.errors import NanobertError

Weights = dict[str, np.ndarray]


@dataclass
class ReferenceConfig:
    """The few ModelConfig fields the forward pass needs."""

    num_hidden_layers: int
    num_attention_heads: int
    layer_norm_eps: float
    pre_layer_norm: bool = False
    hidden_act: str = "gelu"  # or "geglu": the gated feed-forward
    is_decoder: bool = (
        False  # causal attention and the next-word head (a `pretrain --objective causal` model)
    )


@dataclass
class ReferenceOutput:
    prediction_logits: np.ndarray  # (B, T, V): the masked-LM head, or the next-word head of a causal model
    seq_relationship_logits: np.ndarray | None  # (B, 2): 0 = IsNext, 1 = NotNext; None for a causal model
    last_hidden_state: np.ndarray  # (B, T, H)
    pooler_output: np.ndarray | None  # (B, H); None for a causal model
    attentions: list[np.ndarray]  # L x (B, nh, T, T)


# --- the building blocks ---------------------------------------------------------------------------------


def linear(x: np.ndarray, w: Weights, name: str) -> np.ndarray:
    """x @ W^T + b for the Linear layer stored under `name`."""
    return x @ w[name + ".weight"].T + w[name + ".bias"]


def layer_norm(x: np.ndarray, w: Weights, name: str, eps: float) -> np.ndarray:
    """Normalise each vector to mean 0 and variance 1 (biased variance), then scale and shift."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact GELU of BERT: x * Phi(x), Phi the standard normal CDF (not the tanh approximation)."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x) / sum(exp(x)), shifted by the maximum so exp never overflows; -inf entries get 0."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def embeddings(w: Weights, input_ids: np.ndarray, token_type_ids: np.ndarray, eps: float) -> np.ndarray:
    """Token + position + segment embeddings (BERT figure 2), then LayerNorm: (B, T) ids -> (B, T, H)."""
    T = input_ids.shape[1]
    x = (
        w["bert.embeddings.word_embeddings.weight"][input_ids]  # (B, T, H): row lookup
        + w["bert.embeddings.position_embeddings.weight"][:T]  # (T, H), the same for every sequence
        + w["bert.embeddings.token_type_embeddings.weight"][token_type_ids]  # (B, T, H)
    )
    return layer_norm(x, w, "bert.embeddings.layer_norm", eps)


def self_attention(
    w: Weights, prefix: str, x: np.ndarray, key_mask: np.ndarray, num_heads: int, causal: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-head scaled dot-product attention (Vaswani et al. section 3.2).

    x (B, T, H); key_mask (B, T) bool, False at padding. `causal`: query i may attend only to keys 0..i
    (the decoder's mask of section 3.2.3), which makes the probabilities zero above the diagonal. Returns
    the output (B, T, H) and the attention probabilities (B, nh, T, T). nanobert stores W_Q, W_K, W_V
    stacked in one (3H, H) matrix.
    """
    B, T, H = x.shape
    hd = H // num_heads
    q, k, v = np.split(linear(x, w, prefix + "qkv"), 3, axis=-1)  # 3 x (B, T, H)

    def heads(t: np.ndarray) -> np.ndarray:  # (B, T, H) -> (B, nh, T, hd): each head sees its own slice
        return t.reshape(B, T, num_heads, hd).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)  # (B, nh, T, T): query i . key j
    allowed = key_mask[:, None, None, :]  # (B, 1, 1, T): never attend to padding
    if causal:
        allowed = allowed & np.tril(np.ones((T, T), bool))  # (B, 1, T, T): nor to a later token
    scores = np.where(allowed, scores, -np.inf)
    probs = softmax(scores, axis=-1)  # each row sums to 1
    y = (probs @ v).transpose(0, 2, 1, 3).reshape(B, T, H)  # weighted values, heads concatenated
    return linear(y, w, prefix + "output"), probs


def feed_forward(w: Weights, prefix: str, x: np.ndarray, gated: bool = False) -> np.ndarray:
    """Position-wise FFN: H -> intermediate (GELU) -> H, the same for every token. Gated (GEGLU): the
    intermediate projection yields a gate and a value, and GELU(gate) * value goes on."""
    h = linear(x, w, prefix + "intermediate")
    if gated:
        gate, value = np.split(h, 2, axis=-1)
        return linear(gelu(gate) * value, w, prefix + "output")
    return linear(gelu(h), w, prefix + "output")


def encoder_layer(
    w: Weights, i: int, x: np.ndarray, key_mask: np.ndarray, cfg: ReferenceConfig
) -> tuple[np.ndarray, np.ndarray]:
    """One Transformer encoder layer. BERT is post-LN: x = LN(x + Attention(x)); x = LN(x + FFN(x))."""
    p = f"bert.layers.{i}."
    eps = cfg.layer_norm_eps
    gated = cfg.hidden_act == "geglu"
    if cfg.pre_layer_norm:  # nanobert's optional variant: x = x + Sublayer(LN(x))
        a, probs = self_attention(
            w,
            p + "attention.",
            layer_norm(x, w, p + "attention_layer_norm", eps),
            key_mask,
            cfg.num_attention_heads,
            cfg.is_decoder,
        )
        x = x + a
        x = x + feed_forward(w, p + "feed_forward.", layer_norm(x, w, p + "output_layer_norm", eps), gated)
        return x, probs
    a, probs = self_attention(w, p + "attention.", x, key_mask, cfg.num_attention_heads, cfg.is_decoder)
    x = layer_norm(x + a, w, p + "attention_layer_norm", eps)
    x = layer_norm(x + feed_forward(w, p + "feed_forward.", x, gated), w, p + "output_layer_norm", eps)
    return x, probs


def forward(
    w: Weights,
    cfg: ReferenceConfig,
    input_ids: np.ndarray,
    token_type_ids: np.ndarray | None = None,
    attention_mask: np.ndarray | None = None,
) -> ReferenceOutput:
    """The whole of BertForPreTraining in eval mode: the encoder, the pooler, and both heads; or, for a causal
    model (`cfg.is_decoder`), of BertLMHeadModel: the encoder with causal attention and the next-word head.

    input_ids, token_type_ids, attention_mask: (B, T) integers (attention_mask 1 = token, 0 = padding).
    """
    input_ids = np.asarray(input_ids)
    token_type_ids = np.zeros_like(input_ids) if token_type_ids is None else np.asarray(token_type_ids)
    key_mask = np.ones(input_ids.shape, bool) if attention_mask is None else np.asarray(attention_mask) != 0
    x = embeddings(w, input_ids, token_type_ids, cfg.layer_norm_eps)  # (B, T, H)
    attentions = []
    for i in range(cfg.num_hidden_layers):
        x, probs = encoder_layer(w, i, x, key_mask, cfg)
        attentions.append(probs)
    if cfg.pre_layer_norm:
        x = layer_norm(x, w, "bert.final_layer_norm", cfg.layer_norm_eps)
    pooled = nsp_logits = None
    if not cfg.is_decoder:
        # NSP (section 3.1, task 2): the [CLS] vector through the pooler (dense + tanh), then two logits.
        pooled = np.tanh(linear(x[:, 0], w, "bert.pooler"))  # (B, H)
        nsp_logits = linear(pooled, w, "nsp_head")  # (B, 2)
    # Masked LM (task 1), or the next word: dense + GELU + LayerNorm, then scores against every token
    # embedding (tied). A causal model's output at position t scores the token at t + 1.
    head = "lm_head" if cfg.is_decoder else "mlm_head"
    h = layer_norm(gelu(linear(x, w, f"{head}.dense")), w, f"{head}.layer_norm", cfg.layer_norm_eps)
    logits = h @ w["bert.embeddings.word_embeddings.weight"].T + w[f"{head}.bias"]  # (B, T, V)
    return ReferenceOutput(logits, nsp_logits, x, pooled, attentions)


# --- loading ---------------------------------------------------------------------------------------------


def load_reference(checkpoint: str | Path) -> tuple[Weights, ReferenceConfig]:
    """The float64 weights and the config of a nanobert checkpoint directory, without torch."""
    directory = Path(checkpoint)
    config_path, weights_path = directory / "config.json", directory / "model.safetensors"
    if not config_path.is_file() or not weights_path.is_file():
        raise NanobertError(
            f"{directory} is not a nanobert checkpoint (it needs config.json and model.safetensors)"
        )
    try:
        model = json.loads(config_path.read_text())["model"]
        cfg = ReferenceConfig(
            num_hidden_layers=int(model["num_hidden_layers"]),
            num_attention_heads=int(model["num_attention_heads"]),
            layer_norm_eps=float(model["layer_norm_eps"]),
            pre_layer_norm=bool(model.get("pre_layer_norm", False)),
            hidden_act=str(model.get("hidden_act", "gelu")),
            is_decoder=bool(model.get("is_decoder", False)),
        )
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, UnicodeDecodeError):
        raise NanobertError(f"{config_path} is not a nanobert checkpoint config (corrupt?)") from None
    try:
        weights = {k: v.astype(np.float64) for k, v in load_file(str(weights_path)).items()}
    except (SafetensorError, OSError, ValueError, TypeError) as e:
        raise NanobertError(
            f"{weights_path} cannot be read as NumPy arrays ({str(e).splitlines()[0]})"
        ) from None
    return weights, cfg


__all__ = [
    "ReferenceConfig",
    "ReferenceOutput",
    "embeddings",
    "encoder_layer",
    "feed_forward",
    "forward",
    "gelu",
    "layer_norm",
    "linear",
    "load_reference",
    "self_attention",
    "softmax",
]
