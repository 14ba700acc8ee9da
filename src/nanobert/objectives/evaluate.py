"""Held-out metrics of a model or a saved checkpoint: MLM loss, accuracy and perplexity and NSP loss and
accuracy, or a causal model's next-word loss, accuracy and perplexity.

The protocol (fixed batches, standard masking, per-token figures over the whole split) is `held_out.py`'s;
which batches and metrics belong to a model is its objective's (`registry.OBJECTIVES`). Which documents are
held out is decided by the run's `DataSources` (sources.py), for the run's own evaluations and for
`nanobert evaluate` alike.
"""

from __future__ import annotations

from pathlib import Path

import torch

from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.checkpoint import checkpoint_tokenizer, load_language_model, load_train_config
from nanobert.checkpoints.kinds import checkpoint_kind
from nanobert.config import config_from_dict
from nanobert.data.sources import DataSources
from nanobert.device import autocast_dtype, evaluating, resolve_device
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining
from nanobert.objectives.causal import CAUSAL_METRIC_KEYS, prepare_causal_eval_batches
from nanobert.objectives.held_out import EVAL_MASK_PROB
from nanobert.objectives.mlm_nsp import METRIC_KEYS, eval_instances, prepare_eval_batches
from nanobert.objectives.registry import objective_of_kind, objective_of_model


def evaluate_model(
    model: BertForPreTraining | BertLMHeadModel,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """Held-out metrics of a pretraining model on its fixed batches, per masked token, pair or predicted
    token over the whole split: METRIC_KEYS (MLM + NSP) or, for a causal model, CAUSAL_METRIC_KEYS."""
    return objective_of_model(model).metrics(model, batches, device, autocast_dtype)


def evaluate_checkpoint(
    checkpoint: str,
    data: str | None = None,
    valid_file: str | None = None,
    batch_size: int = 64,
    device: str = "auto",
) -> dict[str, float]:
    """Metrics of a pretraining checkpoint on a held-out split.

    By default the split its run held out (the `DataSources` recorded in the checkpoint), so the numbers
    are the run's own final evaluation; `data` or `valid_file` names another (held out by the same rule).
    """
    if batch_size < 1:
        raise NanobertError(f"--batch-size must be at least 1, got {batch_size}")
    dev = resolve_device(device)
    model, config = load_language_model(checkpoint, map_location=dev)
    tokenizer = checkpoint_tokenizer(checkpoint, model, config)
    train_config = load_train_config(config)
    if data is None and valid_file is None:
        sources = config_from_dict(DataSources, config.get("data") or {"data": None})
        if not any((sources.data, sources.train_file, sources.valid_file, sources.prepared)):
            raise NanobertError("the checkpoint records no held-out data; pass --valid FILE or --data NAME")
        # paths are recorded as the run was given them, so from another folder they may not resolve
        needed = [sources.valid_file] if sources.valid_file else [sources.train_file, sources.prepared]
        for path in filter(None, needed):
            if not Path(path).exists():
                raise NanobertError(
                    f"the checkpoint's held-out data comes from {path}, as its run recorded it, which is not "
                    f"found from {Path.cwd()}; pass --valid FILE (or run from the run's folder)"
                )
    else:
        sources = DataSources(data=data, valid_file=valid_file)
    held_out, _ = sources.held_out(tokenizer)
    # The precision the run chose (and evaluated itself in), so the numbers are the run's own.
    amp_dtype = autocast_dtype(config.get("precision", train_config.precision), dev)
    objective = objective_of_kind(checkpoint_kind(config), checkpoint)
    seq_len, vocab_size = train_config.max_seq_len, model.config.vocab_size
    batches = objective.held_out(held_out, seq_len, batch_size, vocab_size, train_config.eval_seed)
    return objective.metrics(model, batches, dev, amp_dtype)


__all__ = [
    "CAUSAL_METRIC_KEYS",
    "EVAL_MASK_PROB",
    "METRIC_KEYS",
    "evaluate_checkpoint",
    "evaluate_model",
    "evaluating",
    "eval_instances",
    "prepare_causal_eval_batches",
    "prepare_eval_batches",
]
