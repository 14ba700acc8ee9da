"""The kinds of checkpoint: one record each, with what it holds and what takes it.

config.json names a checkpoint's kind; `KINDS` maps the name to its `Kind`: the model class its weights
rebuild, the commands and the page's panels that fit it, the interface that answers it, and how export-hf
writes it. The CLI, the page and the exporter ask this record rather than testing a kind's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nanobert.causal_model import BertForHybridLM, BertLMHeadModel
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification

# The kinds of checkpoint, recorded in config.json.
PRETRAINING = "pretraining"  # BertForPreTraining: MLM + NSP heads
CAUSAL_LM = "causal_lm"  # BertLMHeadModel: the causal next-word model (`pretrain --objective causal`)
HYBRID_LM = "hybrid_lm"  # BertForHybridLM: next word and masked word on one head (`--objective hybrid`)
SEQUENCE_CLASSIFICATION = "sequence_classification"  # a fine-tuned BertForSequenceClassification
QUESTION_ANSWERING = "question_answering"  # a fine-tuned BertForQuestionAnswering (SQuAD-style spans)


@dataclass(frozen=True)
class Kind:
    """One kind of checkpoint: what it holds and what takes it. The CLI, the page and the exporter ask this
    record (through `KINDS`) rather than testing a kind's name."""

    name: str  # as config.json records it
    what: str  # what it is, as an error message names it ("a fine-tuned model")
    model: type  # the model class its weights rebuild
    commands: tuple[str, ...]  # the `nanobert` commands that take it
    panels: tuple[str, ...]  # the browser page's panels (POST /api/PANEL) that fit it
    answered_by: str  # the inference interface that answers it: language_model, classifier or qa
    predict_reads: str | None = None  # what `nanobert predict` reads with it: "table", "squad" or None
    hf_architecture: str | None = None  # the transformers class export-hf writes it as (None: not exported)
    hf_leaves_out: str | None = None  # what of it that class cannot hold, as export-hf says
    fill_mask_call: tuple[tuple[str, Any], ...] = ()  # the forward's keywords for reading a [MASK]


KINDS = {
    kind.name: kind
    for kind in (
        Kind(
            PRETRAINING, "a pretraining checkpoint", BertForPreTraining,
            ("evaluate", "fill-mask", "nsp", "similarity", "embed", "attention", "explain", "finetune",
             "export-hf"),
            ("fill-mask", "nsp", "score", "similarity", "attention", "explain"),
            "language_model", hf_architecture="BertForPreTraining",
        ),
        Kind(
            CAUSAL_LM, "a causal language model (pretrain --objective causal)", BertLMHeadModel,
            ("generate", "evaluate", "attention", "explain", "finetune", "export-hf"),
            ("generate", "score", "similarity", "attention", "explain"),
            "language_model", hf_architecture="BertLMHeadModel",
        ),
        Kind(
            HYBRID_LM, "a hybrid language model (pretrain --objective hybrid)", BertForHybridLM,
            ("generate", "fill-mask", "evaluate", "attention", "explain", "finetune", "export-hf"),
            ("generate", "fill-mask", "score", "similarity", "attention", "explain"),
            "language_model", hf_architecture="BertLMHeadModel",
            hf_leaves_out="the masked reading (both ways, shifted by one); transformers reads the next word",
            fill_mask_call=(("causal", False),),
        ),
        Kind(
            SEQUENCE_CLASSIFICATION, "a fine-tuned model", BertForSequenceClassification, ("predict",),
            ("classify",), "classifier", predict_reads="table",
        ),
        Kind(
            QUESTION_ANSWERING, "a question-answering model (finetune --task qa)", BertForQuestionAnswering,
            ("answer", "predict", "export-hf"), ("answer",), "qa", predict_reads="squad",
            hf_architecture="BertForQuestionAnswering",
        ),
    )
}  # fmt: skip
# The commands that fit each kind, as wrong-kind errors list them.
COMMANDS = {name: ", ".join(kind.commands) for name, kind in KINDS.items()}
LANGUAGE_MODELS = tuple(name for name, kind in KINDS.items() if kind.answered_by == "language_model")


def checkpoint_kind(config: dict) -> str:
    kind = config.get("kind", PRETRAINING)
    if not isinstance(kind, str):
        raise NanobertError(f"a checkpoint's kind is a name, not {kind!r}; its config.json is damaged")
    return kind


def wrong_kind(directory: Path | str, kind: str, wanted: str) -> NanobertError:
    """The one-line error for a checkpoint of the wrong kind, naming the commands that do fit it."""
    fits = COMMANDS.get(kind)
    hint = f"; use it with: nanobert {fits}" if fits else ""
    return NanobertError(f"{directory} holds a {kind} checkpoint, not {wanted}{hint}")


def kind_of_model(model: torch.nn.Module) -> Kind:
    """The kind of checkpoint `model` is saved as (by its class)."""
    return next(kind for kind in KINDS.values() if type(model) is kind.model)


__all__ = [
    "CAUSAL_LM",
    "COMMANDS",
    "HYBRID_LM",
    "KINDS",
    "LANGUAGE_MODELS",
    "Kind",
    "PRETRAINING",
    "QUESTION_ANSWERING",
    "SEQUENCE_CLASSIFICATION",
    "checkpoint_kind",
    "kind_of_model",
    "wrong_kind",
]
