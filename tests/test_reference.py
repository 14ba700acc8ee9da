"""The NumPy reference computes what the torch model computes, from the same checkpoint files."""

import numpy as np
import pytest
import torch
from helpers import TINY_MODEL

from nanobert.checkpoints.checkpoint import save_checkpoint
from nanobert.config import ModelConfig
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining
from nanobert.reference import forward, gelu, layer_norm, load_reference, softmax


def saved_model(directory, pre_layer_norm: bool, **change) -> BertForPreTraining:
    """A tiny odd-sized model with every weight moved off its initial value, saved as a checkpoint."""
    torch.manual_seed(1)
    config = ModelConfig(**TINY_MODEL, pre_layer_norm=pre_layer_norm, **change)
    model = BertForPreTraining(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_checkpoint(directory, model, None, None)
    return model


@pytest.mark.parametrize(
    "pre_layer_norm, change",
    [(False, {}), (True, {}), (False, dict(hidden_act="geglu")), (True, dict(hidden_act="geglu"))],
    ids=["post-LN", "pre-LN", "GEGLU", "pre-LN-GEGLU"],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_torch_on_random_inputs(tmp_path, pre_layer_norm, change, seed):
    model = saved_model(tmp_path / "ckpt", pre_layer_norm, **change)
    weights, cfg = load_reference(tmp_path / "ckpt")
    rng = np.random.default_rng(seed)
    B, T = int(rng.integers(1, 4)), int(rng.integers(2, 40))
    ids = rng.integers(5, 99, size=(B, T))
    types = (np.arange(T) >= rng.integers(1, T + 1)).astype(np.int64)[None].repeat(B, 0)
    mask = np.ones((B, T), dtype=np.int64)
    mask[0, T - int(rng.integers(0, T - 1)) :] = 0  # padding at the end of the first row
    ids[mask == 0] = 0
    ref = forward(weights, cfg, ids, types, mask)
    with torch.no_grad():
        out = model(
            torch.from_numpy(ids), torch.from_numpy(types), torch.from_numpy(mask), output_attentions=True
        )
    real = mask.astype(bool)  # what padded positions compute is not specified, so only real ones count
    np.testing.assert_allclose(ref.prediction_logits[real], out.prediction_logits.numpy()[real], atol=1e-4)
    np.testing.assert_allclose(ref.seq_relationship_logits, out.seq_relationship_logits.numpy(), atol=1e-4)
    for ours, theirs in zip(ref.attentions, out.attentions, strict=True):
        rows = (0, 2, 1, 3)  # (B, nh, T, T) -> (B, T, nh, T): select the queries at real positions
        np.testing.assert_allclose(
            ours.transpose(rows)[real], theirs.numpy().transpose(rows)[real], atol=1e-4
        )


def test_building_blocks():
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    w = {"ln.weight": np.ones(4), "ln.bias": np.zeros(4)}
    y = layer_norm(x, w, "ln", 1e-12)
    np.testing.assert_allclose([y.mean(), y.var()], [0.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(softmax(np.array([0.0, -np.inf, 0.0])), [0.5, 0.0, 0.5])
    t = torch.linspace(-5, 5, 101, dtype=torch.float64)
    np.testing.assert_allclose(gelu(t.numpy()), torch.nn.functional.gelu(t).numpy(), atol=1e-12)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(NanobertError, match="not a nanobert checkpoint"):
        load_reference(tmp_path)


@pytest.mark.parametrize("pre_layer_norm", [False, True], ids=["post-LN", "pre-LN"])
def test_the_causal_mask_matches_torch(tmp_path, pre_layer_norm):
    """The reference takes the causal mask too: BertLMHeadModel's logits and its triangular attention."""
    from nanobert.causal_model import BertLMHeadModel

    torch.manual_seed(2)
    model = BertLMHeadModel(ModelConfig(**TINY_MODEL, pre_layer_norm=pre_layer_norm, is_decoder=True)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    save_checkpoint(tmp_path / "ckpt", model, None, None, kind="causal_lm")
    weights, cfg = load_reference(tmp_path / "ckpt")
    assert cfg.is_decoder
    ids = np.random.default_rng(0).integers(5, 99, size=(2, 17))
    mask = np.ones_like(ids)
    mask[1, 12:] = 0  # padding and the causal mask together
    ref = forward(weights, cfg, ids, None, mask)
    with torch.no_grad():
        out = model(torch.from_numpy(ids), None, torch.from_numpy(mask), output_attentions=True)
    real = mask.astype(bool)
    np.testing.assert_allclose(ref.prediction_logits[real], out.logits.numpy()[real], atol=1e-4)
    assert ref.seq_relationship_logits is None and ref.pooler_output is None
    for ours, theirs in zip(ref.attentions, out.attentions, strict=True):
        assert np.abs(np.triu(ours, k=1)).max() == 0.0  # nothing above the diagonal
        np.testing.assert_allclose(ours[0], theirs.numpy()[0], atol=1e-4)
