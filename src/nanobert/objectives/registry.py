"""The pretraining objectives by name: one record each (`OBJECTIVES`), and the lookups the jobs make.

`pretrain` and `evaluate` look an objective up by name (`objective_of`, which also checks the name: the
registry's keys are the valid ones), by the checkpoint kind it writes or by its model, and ask the record;
none spells a name. A new objective is one file (its loss, data, held-out batches, metrics and record, as
mlm_nsp.py, causal.py and hybrid.py are), one line here, its tests and its docs.
"""

from __future__ import annotations

from typing import Any

import torch
from tokenizers import Tokenizer

from nanobert.checkpoints.kinds import wrong_kind
from nanobert.config import ModelConfig, TrainConfig
from nanobert.errors import NanobertError
from nanobert.objectives.causal import CAUSAL
from nanobert.objectives.hybrid import HYBRID
from nanobert.objectives.mlm_nsp import MLM_NSP
from nanobert.objectives.objective import Objective

OBJECTIVES = {objective.name: objective for objective in (MLM_NSP, CAUSAL, HYBRID)}


def objective_of(cfg: TrainConfig, model_config: ModelConfig | None = None) -> Objective:
    """The run's objective; a one-line NanobertError for a name that is not one of OBJECTIVES' keys, or (given
    the model config of a new run) for a model shape the objective cannot train."""
    if cfg.objective not in OBJECTIVES:
        names = ", ".join(OBJECTIVES)
        raise NanobertError(f"train config: objective must be one of {names}, got {cfg.objective!r}")
    objective = OBJECTIVES[cfg.objective]
    if model_config is not None:
        objective.check_model(model_config)
    return objective


def objective_of_kind(kind: str, directory: Any, wanted: str = "a pretrained language model") -> Objective:
    """The objective whose checkpoints are of `kind`; else `kinds.wrong_kind`'s one-line error."""
    for objective in OBJECTIVES.values():
        if objective.kind == kind:
            return objective
    raise wrong_kind(directory, kind, wanted)


def objective_of_model(model: torch.nn.Module) -> Objective:
    """The objective a pretraining model was built for (by its class)."""
    return next(o for o in OBJECTIVES.values() if type(model) is o.model)


# The run-wide helpers the jobs call (kept as names of their own: tests and benchmarks use them).


def eval_batches(cfg: TrainConfig, held_out: list, vocab_size: int) -> list[dict[str, torch.Tensor]]:
    """The run's fixed held-out batches."""
    return objective_of(cfg).held_out(
        held_out, cfg.max_seq_len, cfg.eval_batch_size, vocab_size, cfg.eval_seed
    )


def collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> Any:
    """What turns the run's training instances into a batch."""
    return objective_of(cfg).collator(cfg, tokenizer, vocab_size)


def sample_batch(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """A batch of the run's shape (batch_size x max_seq_len, its masking rate) of random tokens, as the
    stream would hand it to the loss: what `device.choose_precision` times the two precisions on."""
    return objective_of(cfg).sample(cfg, vocab_size)


__all__ = [
    "OBJECTIVES",
    "Objective",
    "collator",
    "eval_batches",
    "objective_of",
    "objective_of_kind",
    "objective_of_model",
    "sample_batch",
]
