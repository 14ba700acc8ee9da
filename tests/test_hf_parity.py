"""Parity with the reference implementation: our weights, mapped into transformers' BertForPreTraining."""

import pytest
import torch
from helpers import TINY_MODEL

from nanobert.config import ModelConfig
from nanobert.hf.names import from_hf_state_dict, to_hf_config, to_hf_state_dict
from nanobert.model import BertForPreTraining
from nanobert.pretraining.recipes import MODEL_PRESETS

transformers = pytest.importorskip("transformers")


def hf_model_for(model: BertForPreTraining):
    hf = transformers.BertForPreTraining(transformers.BertConfig(**to_hf_config(model.config))).eval()
    result = hf.load_state_dict(to_hf_state_dict(model.state_dict(), model.config), strict=False)
    # Only non-persistent buffers may be reported (e.g. position_ids in older transformers).
    assert not result.unexpected_keys
    assert all("position_ids" in k for k in result.missing_keys), result.missing_keys
    return hf


def randomise(model):
    """Move every parameter off its initial value so the map cannot pass by accident (zeros, ones)."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(**TINY_MODEL),
        ModelConfig(vocab_size=8192, max_position_embeddings=128, **MODEL_PRESETS["mini"]),
    ],
    ids=["odd-tiny", "mini"],
)
def test_logits_match_transformers(config):
    torch.manual_seed(0)
    model = BertForPreTraining(config).eval()
    randomise(model)
    hf = hf_model_for(model)
    B, T = 3, 23
    ids = torch.randint(5, config.vocab_size, (B, T))
    tt = (torch.arange(T) > 10).long().expand(B, T)
    am = torch.ones(B, T, dtype=torch.long)
    am[1, 17:] = 0
    ids[1, 17:] = 0
    with torch.no_grad():
        ours = model(ids, tt, am)
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
    real = am.bool()
    mlm_diff = (ours.prediction_logits - ref.prediction_logits)[real].abs().max().item()
    nsp_diff = (ours.seq_relationship_logits - ref.seq_relationship_logits).abs().max().item()
    assert mlm_diff < 1e-4, mlm_diff
    assert nsp_diff < 1e-4, nsp_diff
    # The losses agree too (transformers computes MLM over all positions, we decode only masked ones).
    labels = torch.full_like(ids, -100)
    labels[:, 3:9:2] = ids[:, 3:9:2]
    nsl = torch.tensor([0, 1, 0])
    with torch.no_grad():
        ours = model(ids, tt, am, labels=labels, next_sentence_label=nsl)
        ref = hf(input_ids=ids, token_type_ids=tt, attention_mask=am, labels=labels, next_sentence_label=nsl)
    assert abs(ours.loss.item() - ref.loss.item()) < 1e-4


def test_key_map_round_trip(tiny_config):
    model = BertForPreTraining(tiny_config)
    randomise(model)
    state = model.state_dict()
    back, missing = from_hf_state_dict(to_hf_state_dict(state, tiny_config), tiny_config)
    assert not missing
    ours_keys = set(state)
    assert set(back) == ours_keys
    for k in ours_keys:
        assert torch.equal(back[k], state[k]), k


def test_bert_model_weights_leave_heads_missing(tiny_config):
    model = BertForPreTraining(tiny_config)
    hf_state = to_hf_state_dict(model.state_dict(), tiny_config)
    encoder_only = {k[len("bert.") :]: v for k, v in hf_state.items() if k.startswith("bert.")}
    _, missing = from_hf_state_dict(encoder_only, tiny_config)
    assert missing and all(k.startswith(("mlm_head.", "nsp_head.")) for k in missing)
