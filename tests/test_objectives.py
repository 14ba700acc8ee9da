"""The pretraining objectives' records: each one, asked for its parts, gives a stream, a loss, held-out
batches and metrics that fit together on a tiny odd-sized model; names and kinds resolve through the
registry."""

import dataclasses

import pytest
import torch
from helpers import TINY_MODEL

from nanobert.checkpoints.kinds import KINDS
from nanobert.config import ModelConfig, TrainConfig
from nanobert.errors import NanobertError
from nanobert.objectives.registry import (
    OBJECTIVES,
    objective_of,
    objective_of_kind,
    objective_of_model,
    sample_batch,
)
from nanobert.tokenizer import NUM_SPECIAL_TOKENS

# five documents of a few sentences each, ids above the special tokens
DOCS = [
    [[NUM_SPECIAL_TOKENS + (d * 7 + s * 3 + i) % 90 for i in range(4 + s)] for s in range(6)]
    for d in range(5)
]


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_each_objective_trains_and_scores_its_own_model(name):
    """Stream -> loss -> backward, and held-out batches -> metrics with the record's keys and its metric."""
    objective = OBJECTIVES[name]
    cfg = TrainConfig(objective=name, max_seq_len=24, batch_size=3, eval_batch_size=4)
    config = dataclasses.replace(ModelConfig(**TINY_MODEL), is_decoder=objective.is_decoder)
    model = objective.model(config)
    assert objective_of(cfg) is objective and objective_of_model(model) is objective
    stream = objective.stream(DOCS, cfg, objective.collator(cfg, None, config.vocab_size))
    losses = objective.loss(model, stream.next())
    losses["loss"].backward()
    assert torch.isfinite(losses["loss"])
    batches = objective.held_out(DOCS, cfg.max_seq_len, cfg.eval_batch_size, config.vocab_size, 0)
    metrics = objective.metrics(model, batches, "cpu")
    assert tuple(metrics) == objective.metric_keys and objective.metric in metrics
    sample = sample_batch(cfg, config.vocab_size)  # the shape the precision is timed on
    assert sample["input_ids"].shape == (cfg.batch_size, cfg.max_seq_len)
    assert torch.isfinite(objective.loss(model, sample)["loss"])


def test_the_registry_is_the_one_list_of_names_and_kinds():
    for name, objective in OBJECTIVES.items():
        assert objective.name == name and objective.kind in KINDS
        assert objective.model is KINDS[objective.kind].model and objective.commands
        assert objective_of_kind(objective.kind, "ckpt") is objective
    with pytest.raises(NanobertError, match="objective must be one of mlm_nsp, causal, hybrid, got 'gpt'"):
        objective_of(TrainConfig(objective="gpt"))
    fine_tuned = next(kind for kind in KINDS if kind not in {o.kind for o in OBJECTIVES.values()})
    with pytest.raises(NanobertError, match="use it with: nanobert"):
        objective_of_kind(fine_tuned, "ckpt")


def test_only_the_objectives_that_pair_sentences_need_a_segment_b():
    one_segment = ModelConfig(**{**TINY_MODEL, "type_vocab_size": 1})
    with pytest.raises(NanobertError, match="leaves no segment B"):
        OBJECTIVES["mlm_nsp"].check_model(one_segment)
    OBJECTIVES["causal"].check_model(one_segment)
