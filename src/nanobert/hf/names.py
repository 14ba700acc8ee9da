"""An explicit key map between nanobert weights and transformers' `BertForPreTraining` (and, for causal
models, `BertLMHeadModel` with `is_decoder=True`: the same names without the pooler and the NSP head).

Written as a table, as litgpt's `convert_lit_checkpoint.py` does, so a reader can see every tensor's two
names. Two entries are not a pure rename: our fused `qkv` projection is split into BERT's query, key and
value (and concatenated back on import), and the tied MLM decoder is written out under both of transformers'
names (`cls.predictions.decoder.weight` = the word embeddings, `cls.predictions.decoder.bias` = the bias).
Pre-LN models have no transformers BERT equivalent (it is post-LN only) and are refused.

export_hf.py and import_hf.py apply the map to whole directories: a nanobert checkpoint becomes a directory
that `BertForPreTraining.from_pretrained` and `BertTokenizerFast.from_pretrained` load (the tied decoder
stored once, as transformers saves it), and a transformers BERT directory becomes a nanobert checkpoint, with
any absent head initialised freshly and the vocabulary renumbered when its special tokens are not at ids 0..4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from nanobert.config import ModelConfig, config_from_dict
from nanobert.errors import NanobertError

# nanobert name -> transformers name, for everything outside the repeated layers.
_TOP_LEVEL = {
    "bert.embeddings.word_embeddings.weight": "bert.embeddings.word_embeddings.weight",
    "bert.embeddings.position_embeddings.weight": "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight": "bert.embeddings.token_type_embeddings.weight",
    "bert.embeddings.layer_norm.weight": "bert.embeddings.LayerNorm.weight",
    "bert.embeddings.layer_norm.bias": "bert.embeddings.LayerNorm.bias",
    "bert.pooler.weight": "bert.pooler.dense.weight",
    "bert.pooler.bias": "bert.pooler.dense.bias",
    "mlm_head.dense.weight": "cls.predictions.transform.dense.weight",
    "mlm_head.dense.bias": "cls.predictions.transform.dense.bias",
    "mlm_head.layer_norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm_head.layer_norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm_head.bias": "cls.predictions.bias",
    "nsp_head.weight": "cls.seq_relationship.weight",
    "nsp_head.bias": "cls.seq_relationship.bias",
}

# Per encoder layer i: "bert.layers.{i}." + left  <->  "bert.encoder.layer.{i}." + right.
_PER_LAYER = {
    "attention.output.weight": "attention.output.dense.weight",
    "attention.output.bias": "attention.output.dense.bias",
    "attention_layer_norm.weight": "attention.output.LayerNorm.weight",
    "attention_layer_norm.bias": "attention.output.LayerNorm.bias",
    "feed_forward.intermediate.weight": "intermediate.dense.weight",
    "feed_forward.intermediate.bias": "intermediate.dense.bias",
    "feed_forward.output.weight": "output.dense.weight",
    "feed_forward.output.bias": "output.dense.bias",
    "output_layer_norm.weight": "output.LayerNorm.weight",
    "output_layer_norm.bias": "output.LayerNorm.bias",
}

_QKV = ("query", "key", "value")  # the order of the three blocks inside our fused qkv projection


def to_hf_config(config: ModelConfig) -> dict:
    """A transformers `BertConfig` dict for a nanobert model config."""
    if config.pre_layer_norm:
        raise NanobertError(
            "this model is pre-LN; transformers' BERT is post-LN only, so it cannot be exported"
        )
    if config.hidden_act != "gelu":
        raise NanobertError(
            f"this model's feed-forward is {config.hidden_act}; transformers' BERT has only the plain GELU "
            "one, so it cannot be exported"
        )
    return {
        "architectures": ["BertLMHeadModel" if config.is_decoder else "BertForPreTraining"],
        "model_type": "bert",
        "is_decoder": config.is_decoder,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": config.hidden_act,
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "layer_norm_eps": config.layer_norm_eps,
        "initializer_range": config.initializer_range,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }


_HF_SHAPE = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")


def from_hf_config(hf: dict) -> ModelConfig:
    """A nanobert ModelConfig from a transformers BERT config dict (absolute positions, GELU only)."""
    # transformers' defaults for absent fields describe BERT-base; a config that omits the shape of its
    # weights would be read as that and fail later on every tensor, so the shape must be written down.
    absent = [n for n in _HF_SHAPE if n not in hf]
    if absent:
        raise NanobertError(
            f"the transformers config lacks {', '.join(absent)}; the weights' shape needs them"
        )
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise NanobertError("only absolute position embeddings are supported")
    if hf.get("hidden_act", "gelu") != "gelu":
        raise NanobertError(f"hidden_act {hf.get('hidden_act')!r} is not supported; nanobert uses exact GELU")
    names = (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "intermediate_size",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "max_position_embeddings",
        "type_vocab_size",
        "layer_norm_eps",
        "initializer_range",
        "pad_token_id",
        "is_decoder",
    )
    return config_from_dict(ModelConfig, {n: hf[n] for n in names if n in hf and hf[n] is not None})


# A causal model (BertLMHeadModel) calls its vocabulary head lm_head; the table names it mlm_head.
_CAUSAL_HEAD, _TABLE_HEAD = "lm_head.", "mlm_head."
_CAUSAL_ABSENT = ("bert.pooler.", "nsp_head.")  # what BertLMHeadModel does not have


def _rename_head(state: dict, old: str, new: str) -> dict:
    return {(new + k[len(old) :] if k.startswith(old) else k): v for k, v in state.items()}


def to_hf_state_dict(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename (and split) a BertForPreTraining (or causal BertLMHeadModel) state dict into transformers'
    names."""
    to_hf_config(config)  # refuses pre-LN
    if config.is_decoder:
        state = _rename_head(state, _CAUSAL_HEAD, _TABLE_HEAD)
    out = {
        hf: state[ours]
        for ours, hf in _TOP_LEVEL.items()
        if not (config.is_decoder and ours.startswith(_CAUSAL_ABSENT))
    }
    out.update(_encoder_layers(state, config))
    # transformers stores the tied decoder under its own names as well.
    out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return {k: v.contiguous() for k, v in out.items()}


def to_hf_qa_state_dict(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """A BertForQuestionAnswering state dict in transformers' names: the encoder (no pooler) and qa_outputs,
    which both sides call the same."""
    to_hf_config(config)  # refuses pre-LN
    out = {hf: state[ours] for ours, hf in _TOP_LEVEL.items() if ours.startswith("bert.embeddings.")}
    out.update(_encoder_layers(state, config))
    out.update({k: state[k] for k in ("qa_outputs.weight", "qa_outputs.bias")})
    return {k: v.contiguous() for k, v in out.items()}


def _encoder_layers(state: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Every encoder layer's weights in transformers' names, the fused qkv split into query, key, value."""
    out = {}
    for i in range(config.num_hidden_layers):
        ours, hf = f"bert.layers.{i}.", f"bert.encoder.layer.{i}."
        for a, b in _PER_LAYER.items():
            out[hf + b] = state[ours + a]
        weights = state[ours + "attention.qkv.weight"].chunk(3, dim=0)  # 3 x (H, H)
        biases = state[ours + "attention.qkv.bias"].chunk(3, dim=0)  # 3 x (H,)
        for name, w, b in zip(_QKV, weights, biases, strict=True):
            out[f"{hf}attention.self.{name}.weight"] = w
            out[f"{hf}attention.self.{name}.bias"] = b
    return out


def from_hf_state_dict(
    hf_state: dict[str, torch.Tensor], config: ModelConfig
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The reverse map. Accepts BertForPreTraining or BertModel weights (with or without the `bert.` prefix).

    Returns our state dict and the list of our keys that were absent (heads a BertModel does not have, the
    pooler a BertForMaskedLM does not have); the caller keeps those freshly initialised and tells the user.
    """
    if not any(k.startswith("bert.") for k in hf_state):  # a bare BertModel checkpoint
        hf_state = {"bert." + k: v for k, v in hf_state.items()}
    out: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    for ours, hf in _TOP_LEVEL.items():
        if hf in hf_state:
            out[ours] = hf_state[hf]
        else:
            missing.append(ours)
    for i in range(config.num_hidden_layers):
        ours, hf = f"bert.layers.{i}.", f"bert.encoder.layer.{i}."
        try:
            for a, b in _PER_LAYER.items():
                out[ours + a] = hf_state[hf + b]
            out[ours + "attention.qkv.weight"] = torch.cat(
                [hf_state[f"{hf}attention.self.{n}.weight"] for n in _QKV], dim=0
            )
            out[ours + "attention.qkv.bias"] = torch.cat(
                [hf_state[f"{hf}attention.self.{n}.bias"] for n in _QKV], dim=0
            )
        except KeyError as e:
            raise NanobertError(f"transformers checkpoint lacks encoder weight {e.args[0]}") from None
    if "mlm_head.bias" in missing and "cls.predictions.decoder.bias" in hf_state:
        out["mlm_head.bias"] = hf_state["cls.predictions.decoder.bias"]
        missing.remove("mlm_head.bias")
    # The heads, and the pooler (absent from BertForMaskedLM), can start fresh; the encoder cannot.
    encoder_missing = [k for k in missing if not k.startswith(("mlm_head.", "nsp_head.", "bert.pooler."))]
    if encoder_missing:
        raise NanobertError(f"transformers checkpoint lacks encoder weights: {', '.join(encoder_missing)}")
    if config.is_decoder:  # no pooler, no NSP head; the vocabulary head under its causal name
        out = _rename_head(
            {k: v for k, v in out.items() if not k.startswith(_CAUSAL_ABSENT)}, _TABLE_HEAD, _CAUSAL_HEAD
        )
        missing = [_CAUSAL_HEAD + k[len(_TABLE_HEAD) :] for k in missing if k.startswith(_TABLE_HEAD)]
    return out, missing


# transformers writes a tied tensor once: the decoder is the word embeddings and its bias is
# `cls.predictions.bias`, so a directory holding these keys too would report them as unexpected.
_TIED_DUPLICATES = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")

HF_CONFIG_NAME = "config.json"

HF_WEIGHTS_NAME = "model.safetensors"


def config_of_kind(nanobert: bool) -> Any:
    """A test for `check_output_dir`: whether a directory's config.json is nanobert's own (it records
    `format_version` and `kind`) or, with nanobert=False, a transformers one (a `model_type`, neither of
    those): both name the file config.json, so the file alone does not tell them apart."""

    def test(directory: Path) -> bool:
        try:
            config = json.loads((directory / HF_CONFIG_NAME).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            return False
        if not isinstance(config, dict):
            return False
        ours = "format_version" in config and "kind" in config
        return ours if nanobert else (not ours and "model_type" in config)

    return test


__all__ = [
    "HF_CONFIG_NAME",
    "HF_WEIGHTS_NAME",
    "config_of_kind",
    "from_hf_config",
    "from_hf_state_dict",
    "to_hf_config",
    "to_hf_qa_state_dict",
    "to_hf_state_dict",
]
