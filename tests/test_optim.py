"""The optimizer every job uses: parameter groups (weight decay, layer-wise rates) and the schedule."""

import pytest
import torch

from nanobert.config import ModelConfig
from nanobert.engine.optimizer import build_optimizer, lr_multiplier, parameter_groups, set_learning_rate
from nanobert.model import BertForPreTraining, BertForSequenceClassification


def test_lr_schedule_is_warmup_then_linear_decay():
    assert lr_multiplier(0.0, 0.1) == 0.0
    assert lr_multiplier(0.05, 0.1) == pytest.approx(0.5)
    assert lr_multiplier(0.1, 0.1) == pytest.approx(1.0)
    assert lr_multiplier(0.55, 0.1) == pytest.approx(0.5)
    assert lr_multiplier(1.0, 0.1) == 0.0
    assert lr_multiplier(1.0, 0.1, min_lr_ratio=0.1) == pytest.approx(0.1)
    assert lr_multiplier(0.5, 0.0) == pytest.approx(0.5)


def test_decay_ratio_holds_the_peak_until_the_last_share_of_the_run():
    """Warmup-stable-decay: after the warmup the rate holds at 1 until the last decay_ratio of the run,
    then falls linearly to min_lr_ratio; decay_ratio 1 is BERT's schedule exactly."""
    for p in (0.0, 0.05, 0.1, 0.3, 0.55, 0.99, 1.0):
        assert lr_multiplier(p, 0.1, 0.0, 1.0) == lr_multiplier(p, 0.1)
    assert lr_multiplier(0.05, 0.1, 0.0, 0.3) == pytest.approx(0.5)  # the warmup as before
    assert lr_multiplier(0.5, 0.1, 0.0, 0.3) == 1.0 == lr_multiplier(0.7, 0.1, 0.0, 0.3)
    assert lr_multiplier(0.85, 0.1, 0.0, 0.3) == pytest.approx(0.5)
    assert lr_multiplier(1.0, 0.1, 0.2, 0.3) == pytest.approx(0.2)
    assert lr_multiplier(0.6, 0.6, 0.0, 0.9) == pytest.approx(1.0)  # a decay longer than what is left
    assert lr_multiplier(0.8, 0.6, 0.0, 0.9) == pytest.approx(0.5)  # starts when the warmup ends


def test_no_weight_decay_on_biases_and_layer_norm(tiny_config):
    model = BertForPreTraining(tiny_config)
    decay, no_decay = parameter_groups(model, 0.01)
    ln = model.bert.embeddings.layer_norm.weight
    assert any(p is ln for p in no_decay["params"]) and not any(p is ln for p in decay["params"])
    n = sum(p.numel() for g in (decay, no_decay) for p in g["params"])
    assert n == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("pre_layer_norm", [False, True])
def test_layer_lr_decay_scales_each_depth(pre_layer_norm):
    config = ModelConfig(
        vocab_size=31, hidden_size=16, num_hidden_layers=3, num_attention_heads=2, intermediate_size=19,
        max_position_embeddings=24, pre_layer_norm=pre_layer_norm,
    )  # fmt: skip
    model = BertForSequenceClassification(config, 3)
    groups = parameter_groups(model, weight_decay=0.05, layer_lr_decay=0.5)
    scale = {id(p): g["lr_scale"] for g in groups for p in g["params"]}
    decay = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert len(scale) == len(named)  # every parameter in exactly one group
    want = {"classifier": 1.0, "bert.pooler": 1.0, "bert.layers.2": 0.5, "bert.layers.1": 0.25}
    want |= {"bert.layers.0": 0.125, "bert.embeddings": 0.0625, "bert.final_layer_norm": 1.0}
    for name, p in named.items():
        prefix = next(k for k in want if name.startswith(k + "."))
        assert scale[id(p)] == want[prefix], name
        assert decay[id(p)] == (0.05 if p.ndim >= 2 else 0.0), name
    ones = parameter_groups(model, 0.05, 1.0)
    assert {g["lr_scale"] for g in ones} == {1.0}


def test_the_scheduled_rate_reaches_every_group_times_its_scale(tiny_config):
    model = BertForSequenceClassification(tiny_config, 2)
    optimizer = build_optimizer(model, 1e-3, 0.01, layer_lr_decay=0.5)
    set_learning_rate(optimizer, 2e-3)
    scales = sorted({g["lr_scale"] for g in optimizer.param_groups})
    assert scales == [0.125, 0.25, 0.5, 1.0]  # embeddings, layer 0, layer 1, pooler and head
    for group in optimizer.param_groups:
        assert group["lr"] == pytest.approx(2e-3 * group["lr_scale"])
    assert all(g["fused"] for g in optimizer.param_groups)  # torch's fused kernel, on the CPU as on CUDA
    groups = parameter_groups(BertForPreTraining(tiny_config), 0.0)
    assert [len(g["params"]) > 0 for g in groups] == [True, True]
    assert torch.optim.AdamW(groups).param_groups[0]["weight_decay"] == 0.0
