"""`nanobert export-hf`: a checkpoint written as a transformers BERT directory, through the name map.

A pretraining checkpoint becomes what `BertForPreTraining.from_pretrained` and
`BertTokenizerFast.from_pretrained` load (the tied decoder stored once, as transformers saves it), a causal
one a `BertLMHeadModel` with is_decoder, a question-answering one a `BertForQuestionAnswering`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from tokenizers import processors

from nanobert.checkpoints.checkpoint import (
    checkpoint_tokenizer,
    load_language_model,
    load_qa,
    read_config,
)
from nanobert.checkpoints.kinds import KINDS, checkpoint_kind
from nanobert.files import check_output_dir, write_atomically
from nanobert.hf.names import (
    _TIED_DUPLICATES,
    HF_CONFIG_NAME,
    HF_WEIGHTS_NAME,
    config_of_kind,
    to_hf_config,
    to_hf_qa_state_dict,
    to_hf_state_dict,
)
from nanobert.tokenizer import CLS_ID, SEP_ID, save_tokenizer


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
        out, overwrite, (checkpoint,), HF_CONFIG_NAME, "transformers model directory", config_of_kind(False)
    )

    def write(tmp: Path) -> None:
        (tmp / HF_CONFIG_NAME).write_text(json.dumps(hf_config, indent=2) + "\n")
        save_file(state, str(tmp / HF_WEIGHTS_NAME), metadata={"format": "pt"})
        save_tokenizer(tokenizer, tmp, tokenizer_class)

    return write_atomically(out, write)


__all__ = ["export_hf"]
