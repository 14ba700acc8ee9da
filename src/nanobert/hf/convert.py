"""An explicit key map between nanobert weights and transformers' `BertForPreTraining` (and, for causal
models, `BertLMHeadModel` with `is_decoder=True`: the same names without the pooler and the NSP head).

Written as a table, as litgpt's `convert_lit_checkpoint.py` does, so a reader can see every tensor's two
names. Two entries are not a pure rename: our fused `qkv` projection is split into BERT's query, key and
value (and concatenated back on import), and the tied MLM decoder is written out under both of transformers'
names (`cls.predictions.decoder.weight` = the word embeddings, `cls.predictions.decoder.bias` = the bias).
Pre-LN models have no transformers BERT equivalent (it is post-LN only) and are refused.

`export_hf` and `import_hf` apply the map to whole directories: a nanobert checkpoint becomes a directory that
`BertForPreTraining.from_pretrained` and `BertTokenizerFast.from_pretrained` load (the tied decoder stored
once, as transformers saves it), and a transformers BERT directory becomes a nanobert checkpoint, with any
absent head initialised freshly and the vocabulary renumbered when its special tokens are not at ids 0..4.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from nanobert.checkpoints.checkpoint import (
    CONFIG_NAME,
    checkpoint_tokenizer,
    load_language_model,
    load_qa,
    read_config,
    save_checkpoint,
)
from nanobert.checkpoints.kinds import KINDS, checkpoint_kind, kind_of_model
from nanobert.config import ModelConfig, config_from_dict
from nanobert.errors import NanobertError
from nanobert.files import check_output_dir, write_atomically
from nanobert.model import BertForPreTraining, BertLMHeadModel
from nanobert.tokenizer import CLS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS, save_tokenizer

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


# --- whole directories: export to, and import from, a transformers model directory ------------------------

# transformers writes a tied tensor once: the decoder is the word embeddings and its bias is
# `cls.predictions.bias`, so a directory holding these keys too would report them as unexpected.
_TIED_DUPLICATES = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")
HF_CONFIG_NAME = "config.json"
HF_WEIGHTS_NAME = "model.safetensors"
_HEAD_NAMES = {
    "mlm_head.": "masked-LM head",
    "lm_head.": "next-word head",
    "nsp_head.": "next-sentence head",
    "bert.pooler.": "pooler",
}


def _config_of_kind(nanobert: bool) -> Any:
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


def _qa_model_for_hf(checkpoint: Path) -> tuple[dict, dict, Any, str]:
    """A question-answering checkpoint as a `BertForQuestionAnswering`: (config, state, tokenizer, class)."""
    model, tokenizer, _ = load_qa(checkpoint)
    hf_config = {**to_hf_config(model.config), "architectures": ["BertForQuestionAnswering"]}
    return hf_config, to_hf_qa_state_dict(model.state_dict(), model.config), tokenizer, "BertTokenizerFast"


def _language_model_for_hf(checkpoint: Path) -> tuple[dict, dict, Any, str]:
    """A pretrained language model as `BertForPreTraining` or `BertLMHeadModel`: (config, state, tokenizer,
    tokenizer class)."""
    model, saved = load_language_model(checkpoint)
    tokenizer = checkpoint_tokenizer(checkpoint, model, saved)
    hf_config, tokenizer_class = to_hf_config(model.config), "BertTokenizerFast"
    if model.config.is_decoder:
        # The causal model read `[CLS] text`, and [SEP] ends a document: a prompt must not end with it,
        # and generation stops there, as `nanobert generate` does. BertTokenizerFast would rebuild the
        # `[CLS] A [SEP]` template, so the tokenizer is saved for AutoTokenizer's generic class.
        hf_config.update(bos_token_id=CLS_ID, eos_token_id=SEP_ID)
        tokenizer_class = "PreTrainedTokenizerFast"
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A", pair="[CLS] $A $B", special_tokens=[("[CLS]", CLS_ID)]
        )
    state = to_hf_state_dict(model.state_dict(), model.config)
    for key in _TIED_DUPLICATES:
        del state[key]
    return hf_config, state, tokenizer, tokenizer_class


# How a checkpoint kind is written for transformers, by the class it becomes (kinds.Kind.hf_architecture)
# where that is not the language models' way
_EXPORTERS = {"BertForQuestionAnswering": _qa_model_for_hf}


def export_hf(checkpoint: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write a nanobert pretraining checkpoint as a transformers BERT directory.

    `out` gets config.json (a BertConfig for BertForPreTraining, or for BertLMHeadModel with is_decoder for a
    causal checkpoint), model.safetensors (transformers' names, tied weights once, as transformers itself
    saves them) and the tokenizer files, so that `BertForPreTraining.from_pretrained(out)` (or
    `BertLMHeadModel`) and `BertTokenizerFast.from_pretrained(out)` load it with no missing or unexpected
    keys. A question-answering checkpoint becomes a `BertForQuestionAnswering` directory. Pre-LN models
    are refused (transformers' BERT is post-LN only).
    """
    checkpoint, out = Path(checkpoint), Path(out)
    kind = KINDS.get(checkpoint_kind(read_config(checkpoint)))
    # by the transformers class the kind becomes; any other kind is refused by the language-model loader
    exporter = _EXPORTERS.get(kind.hf_architecture if kind else None, _language_model_for_hf)
    hf_config, state, tokenizer, tokenizer_class = exporter(checkpoint)
    state = {k: v.detach().clone().cpu() for k, v in state.items()}  # no two keys may share memory
    check_output_dir(
        out, overwrite, (checkpoint,), HF_CONFIG_NAME, "transformers model directory", _config_of_kind(False)
    )

    def write(tmp: Path) -> None:
        (tmp / HF_CONFIG_NAME).write_text(json.dumps(hf_config, indent=2) + "\n")
        save_file(state, str(tmp / HF_WEIGHTS_NAME), metadata={"format": "pt"})
        save_tokenizer(tokenizer, tmp, tokenizer_class)

    return write_atomically(out, write)


@dataclass
class ImportResult:
    out: Path
    fresh_parameters: list[str]  # nanobert parameter names initialised freshly (absent from the source)
    fresh_heads: list[str]  # the same, as parts: "masked-LM head", "next-sentence head", "pooler"
    vocab_remapped: bool  # True when the special tokens were moved to ids 0..4 (see import_hf)


def _read_hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    """A transformers directory's weights: model.safetensors (single or sharded), else pytorch_model.bin."""
    index = directory / (HF_WEIGHTS_NAME + ".index.json")
    try:
        if (directory / HF_WEIGHTS_NAME).is_file():
            state = load_file(str(directory / HF_WEIGHTS_NAME))
        elif index.is_file():
            state = {}
            for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
                state.update(load_file(str(directory / shard)))
        elif (directory / "pytorch_model.bin").is_file():
            # weights_only: tensors only, nothing unpickled that could run code
            state = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
        else:
            raise NanobertError(
                f"{directory} has no {HF_WEIGHTS_NAME} or pytorch_model.bin; "
                "point at a transformers model directory"
            )
    except (SafetensorError, OSError, ValueError, RuntimeError, KeyError, TypeError, AttributeError,
            pickle.UnpicklingError) as e:  # fmt: skip
        raise NanobertError(f"cannot read the weights in {directory} ({str(e).splitlines()[0]})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise NanobertError(f"the weights in {directory} are not a name -> tensor mapping")
    # Old TensorFlow conversions name LayerNorm parameters gamma/beta; transformers renames them on load too.
    renamed = {}
    for k, v in state.items():
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[k] = v.float() if v.is_floating_point() else v
    return renamed


def _read_hf_tokenizer(directory: Path) -> Any:
    """The WordPiece tokenizer of a transformers directory: tokenizer.json, else built from vocab.txt."""
    if (directory / "tokenizer.json").is_file():
        try:
            tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        except Exception as e:  # the Rust side raises a bare Exception for any parse error
            raise NanobertError(f"cannot read {directory / 'tokenizer.json'} ({e})") from None
        if json.loads(tokenizer.to_str())["model"]["type"] != "WordPiece":
            raise NanobertError(f"{directory}: only WordPiece (BERT) tokenizers can be imported")
    elif (directory / "vocab.txt").is_file():
        try:
            # as transformers' load_vocab reads it: one token per line, lines split at "\n", "\r\n" or "\r"
            # only (str.splitlines() would also split a token at U+0085 or U+2028 and shift every id after it)
            with open(directory / "vocab.txt", encoding="utf-8") as f:
                vocab = [line.rstrip("\n") for line in f]
            settings = {}
            if (directory / "tokenizer_config.json").is_file():
                settings = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise NanobertError(f"cannot read the tokenizer files in {directory} ({e})") from None
        if not isinstance(settings, dict):
            raise NanobertError(f"{directory / 'tokenizer_config.json'} is not a JSON object")
        if len(set(vocab)) != len(vocab):  # ids are line numbers: a repeated token leaves a gap
            raise NanobertError(f"{directory / 'vocab.txt'} lists a token twice; each id needs its own token")
        # transformers' BertTokenizer settings: two booleans, and strip_accents a boolean or null (= follow
        # lowercasing)
        options = {
            "do_lower_case": settings.get("do_lower_case", True),
            "tokenize_chinese_chars": settings.get("tokenize_chinese_chars", True),
            "strip_accents": settings.get("strip_accents"),
        }
        for key, value in options.items():
            if not (isinstance(value, bool) or (key == "strip_accents" and value is None)):
                kind = "true, false or null" if key == "strip_accents" else "true or false"
                raise NanobertError(
                    f"{directory / 'tokenizer_config.json'}: {key} is {json.dumps(value)}, not {kind}"
                )
        lowercase = options["do_lower_case"]
        tokenizer = Tokenizer(
            models.WordPiece(
                vocab={t: i for i, t in enumerate(vocab)},
                unk_token="[UNK]",
                continuing_subword_prefix="##",
                max_input_chars_per_word=100,
            )
        )
        tokenizer.normalizer = normalizers.BertNormalizer(
            lowercase=lowercase,
            clean_text=True,
            handle_chinese_chars=options["tokenize_chinese_chars"],
            strip_accents=options["strip_accents"],
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece(prefix="##")
        tokenizer.add_special_tokens([t for t in SPECIAL_TOKENS if t in set(vocab)])
    else:
        raise NanobertError(
            f"{directory} has no tokenizer.json or vocab.txt; it needs its tokenizer to import"
        )
    tokenizer.no_padding()  # nanobert pads in its own collators; a saved padding setting would interfere
    tokenizer.no_truncation()
    return tokenizer


def _specials_first(tokenizer: Any, vocab_size: int) -> tuple[Any, list[int] | None]:
    """Move [PAD] [UNK] [CLS] [SEP] [MASK] to ids 0..4, keeping every other token in its original order.

    Returns the renumbered tokenizer (with nanobert's `[CLS] A [SEP] B [SEP]` template) and `order`, where new
    id i is old id order[i], or None when the specials were already at 0..4. nanobert's data code and model
    config rely on those five ids, and Google's BERT vocabularies put them elsewhere ([UNK] = 100, [CLS] =
    101, ...); renumbering the vocabulary, and permuting the embedding rows the same way, keeps the model
    exactly as it was while meeting nanobert's convention.
    """
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise NanobertError(
            "the tokenizer's ids are not 0..N-1 (a repeated token or a gap); it cannot be imported"
        )
    absent = [t for t in SPECIAL_TOKENS if t not in vocab]
    if absent:
        raise NanobertError(
            f"the tokenizer lacks {', '.join(absent)}; nanobert needs all of {SPECIAL_TOKENS}"
        )
    if max(vocab.values()) >= vocab_size:
        raise NanobertError(
            f"the tokenizer has ids up to {max(vocab.values())} but the model's vocab_size is {vocab_size}"
        )
    old_special = [vocab[t] for t in SPECIAL_TOKENS]
    order = None
    if old_special != list(range(len(SPECIAL_TOKENS))):
        taken = set(old_special)
        order = old_special + [i for i in range(vocab_size) if i not in taken]
        new_id = {old: new for new, old in enumerate(order)}
        data = json.loads(tokenizer.to_str())
        data["model"]["vocab"] = {tok: new_id[i] for tok, i in data["model"]["vocab"].items()}
        for added in data.get("added_tokens") or []:
            added["id"] = new_id[added["id"]]
        data["post_processor"] = None  # replaced below; its ids would be stale
        tokenizer = Tokenizer.from_str(json.dumps(data))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", CLS_ID), ("[SEP]", SEP_ID)],
    )
    for expected, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == expected, (token, tokenizer.token_to_id(token))
    return tokenizer, order


def import_hf(hf_dir: str | Path, out: str | Path, overwrite: bool = False, seed: int = 0) -> ImportResult:
    """Convert a transformers BERT directory (BertForPreTraining, BertModel, or BertLMHeadModel with
    `is_decoder`, which becomes a causal checkpoint) to a nanobert checkpoint.

    Heads that the source lacks (a BertModel has neither the masked-LM nor the next-sentence head) are
    initialised freshly with BERT's initialisation, seeded by `seed`; the result lists them. When the source
    vocabulary does not put the special tokens at ids 0..4 (Google's releases do not), the vocabulary is
    renumbered with the specials first and the other tokens in their original order, and the word-embedding
    rows and the MLM bias are permuted to match, so the model computes exactly what it did before.
    """
    hf_dir, out = Path(hf_dir), Path(out)
    if not 0 <= seed < 2**63:  # what torch.manual_seed takes
        raise NanobertError(f"--seed must be in [0, 2**63), not {seed}")
    if not (hf_dir / HF_CONFIG_NAME).is_file():
        raise NanobertError(f"{hf_dir} is not a transformers model directory (it has no {HF_CONFIG_NAME})")
    try:
        hf_config = json.loads((hf_dir / HF_CONFIG_NAME).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise NanobertError(f"{hf_dir / HF_CONFIG_NAME} is not valid JSON") from None
    if not isinstance(hf_config, dict):
        raise NanobertError(f"{hf_dir / HF_CONFIG_NAME} is not a JSON object (a transformers config)")
    if hf_config.get("model_type", "bert") != "bert":
        raise NanobertError(f"{hf_dir} holds a {hf_config['model_type']!r} model; only BERT can be imported")
    config = from_hf_config(hf_config)
    config.pad_token_id = PAD_ID  # [PAD] is id 0 once the vocabulary is in nanobert's order
    check_output_dir(out, overwrite, (hf_dir,), CONFIG_NAME, "nanobert checkpoint", _config_of_kind(True))
    hf_state = _read_hf_weights(hf_dir)
    tokenizer, order = _specials_first(_read_hf_tokenizer(hf_dir), config.vocab_size)
    state, missing = from_hf_state_dict(hf_state, config)
    if order is not None:
        index = torch.tensor(order)
        for key in ("bert.embeddings.word_embeddings.weight", "mlm_head.bias", "lm_head.bias"):
            if key in state:
                state[key] = state[key].index_select(0, index)
    torch.manual_seed(seed)
    model = (BertLMHeadModel if config.is_decoder else BertForPreTraining)(config)
    try:
        result = model.load_state_dict(state, strict=False)
    except RuntimeError as e:
        raise NanobertError(
            f"{hf_dir}: weights do not match its config.json ({str(e).splitlines()[0]})"
        ) from None
    fresh = sorted(result.missing_keys)
    assert not result.unexpected_keys and set(fresh) == set(missing), (result, missing)
    heads = [name for prefix, name in _HEAD_NAMES.items() if any(k.startswith(prefix) for k in fresh)]
    save_checkpoint(
        out,
        model,
        None,
        tokenizer,
        extra={"imported_from": str(hf_dir), "fresh_parameters": fresh, "vocab_remapped": order is not None},
        kind=kind_of_model(model).name,
    )
    return ImportResult(out=out, fresh_parameters=fresh, fresh_heads=heads, vocab_remapped=order is not None)


__all__ = [
    "ImportResult",
    "export_hf",
    "from_hf_config",
    "from_hf_state_dict",
    "import_hf",
    "to_hf_config",
    "to_hf_qa_state_dict",
    "to_hf_state_dict",
]
