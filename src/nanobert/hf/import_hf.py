"""`nanobert import-hf`: a transformers BERT directory made a nanobert checkpoint, through the name map.

Any absent head is initialised freshly (and named), and the vocabulary is renumbered when its special tokens
are not at ids 0..4, the embedding rows permuted the same way, so the model computes what it computed.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.checkpoint import (
    CONFIG_NAME,
    save_checkpoint,
)
from nanobert.checkpoints.kinds import kind_of_model
from nanobert.errors import NanobertError
from nanobert.files import check_output_dir
from nanobert.hf.names import (
    HF_CONFIG_NAME,
    HF_WEIGHTS_NAME,
    config_of_kind,
    from_hf_config,
    from_hf_state_dict,
)
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import CLS_ID, PAD_ID, SEP_ID, SPECIAL_TOKENS

_HEAD_NAMES = {
    "mlm_head.": "masked-LM head",
    "lm_head.": "next-word head",
    "nsp_head.": "next-sentence head",
    "bert.pooler.": "pooler",
}


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


def _tokenizer_json(directory: Path) -> Any:
    """A transformers directory's tokenizer.json, refused unless it is WordPiece."""
    try:
        tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    except Exception as e:  # the Rust side raises a bare Exception for any parse error
        raise NanobertError(f"cannot read {directory / 'tokenizer.json'} ({e})") from None
    if json.loads(tokenizer.to_str())["model"]["type"] != "WordPiece":
        raise NanobertError(f"{directory}: only WordPiece (BERT) tokenizers can be imported")
    return tokenizer


def _tokenizer_from_vocab(directory: Path) -> Any:
    """BERT's WordPiece tokenizer built from vocab.txt and the settings of tokenizer_config.json, as
    transformers' BertTokenizer reads them."""
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
    return tokenizer


def _read_hf_tokenizer(directory: Path) -> Any:
    """The WordPiece tokenizer of a transformers directory: tokenizer.json, else built from vocab.txt."""
    if (directory / "tokenizer.json").is_file():
        tokenizer = _tokenizer_json(directory)
    elif (directory / "vocab.txt").is_file():
        tokenizer = _tokenizer_from_vocab(directory)
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
    check_output_dir(out, overwrite, (hf_dir,), CONFIG_NAME, "nanobert checkpoint", config_of_kind(True))
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


__all__ = ["ImportResult", "import_hf"]
