"""The learner's trace: every layer is listed, and every number in it is the model's own."""

import json

import pytest
import torch
from helpers import train_tiny_checkpoint

from nanobert.cli import main
from nanobert.config import ModelConfig
from nanobert.model import BertForPreTraining
from nanobert.use.explain import DIGITS, explain, format_trace
from nanobert.use.inference import InferenceModel, load


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return train_tiny_checkpoint(tmp_path_factory.mktemp("pretrained"))


@pytest.fixture(scope="module")
def model(checkpoint):
    return load(checkpoint)


def pre_ln_model(model: InferenceModel, **change) -> InferenceModel:
    """A random pre-LN model with the same tokenizer: the other branch of every layer."""
    torch.manual_seed(0)
    cfg = ModelConfig(**{**model.model.config.__dict__, "pre_layer_norm": True, **change})
    m = BertForPreTraining(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return InferenceModel(m, model.tokenizer)


A, B = "alpha bravo [MASK] delta .", "echo foxtrot golf ."


@pytest.mark.parametrize("variant", ["post-LN", "pre-LN"])
def test_trace_is_the_models_forward_pass(model, variant):
    if variant == "pre-LN":
        model = pre_ln_model(model)
    trace = explain(model, A, B, preview=1000)  # preview past H: every number is kept
    enc, out = model.forward(A, B, output_hidden_states=True, output_attentions=True)
    tol = 10.0**-DIGITS
    cfg = model.model.config
    assert trace.model["layer_norm"] == variant
    assert trace.input_ids == enc["input_ids"] and trace.token_type_ids == enc["token_type_ids"]
    assert len(trace.layers) == cfg.num_hidden_layers
    for i, layer in enumerate(trace.layers):
        assert torch.allclose(torch.tensor(layer.output.preview), out.hidden_states[i + 1][0], atol=tol)
        assert torch.allclose(torch.tensor(layer.cls_attention), out.attentions[i][0, :, 0], atol=tol)
        T, hd = len(trace.tokens), cfg.hidden_size // cfg.num_attention_heads
        assert layer.q_k_v_shape == [1, cfg.num_attention_heads, T, hd]
        assert layer.attention_shape == [1, cfg.num_attention_heads, T, T]
        assert layer.feed_forward_hidden_shape == [1, T, cfg.intermediate_size]
    assert torch.allclose(torch.tensor(trace.embeddings[-1].preview), out.hidden_states[0][0], atol=tol)
    nsp = out.seq_relationship_logits[0].softmax(-1)
    assert trace.next_sentence["IsNext"] == pytest.approx(nsp[0].item(), abs=1e-4)
    probs = out.prediction_logits[0, trace.masked[0].position].softmax(-1)
    for token, p in trace.masked[0].top:
        assert p == pytest.approx(probs[model.tokenizer.token_to_id(token)].item(), abs=1e-3)
    assert trace.masked[0].top[0][1] == pytest.approx(probs[5:].max().item(), abs=1e-3)
    assert (trace.final_layer_norm is not None) == (variant == "pre-LN")


def test_a_gated_feed_forward_is_named_as_such(model):
    text = format_trace(explain(pre_ln_model(model, hidden_act="geglu"), A, B))
    assert "GEGLU feed-forward" in text.splitlines()[0] and "GEGLU: GELU(x W) * (x V)" in text
    assert "GELU feed-forward" in format_trace(explain(model, A, B)).splitlines()[0]


def test_embeddings_add_up(model):
    trace = model.explain("alpha bravo", preview=4)  # the method form of explain()
    tok, pos, seg, total, normed = (v.preview for v in trace.embeddings)
    H = model.model.config.hidden_size
    assert [v.shape for v in trace.embeddings] == [[1, len(trace.tokens), H]] * 5
    assert all(len(row) == 4 for row in normed)  # the preview is cut, the shape is not
    summed = torch.tensor(tok) + torch.tensor(pos) + torch.tensor(seg)
    assert torch.allclose(summed, torch.tensor(total), atol=2e-3)


def test_text_lists_every_section_and_layer(model):
    text = format_trace(explain(model, A, B))
    for heading in (
        "1. Tokens",
        "2. Embeddings",
        "3. Encoder layers",
        "4. The [CLS] vector",
        "5. Next sentence",
    ):
        assert heading in text
    for i in range(model.model.config.num_hidden_layers):
        assert f"   layer {i}\n" in text
    assert "position 3:" in text  # the [MASK]
    T = len(model.encode(A, B)["input_ids"])
    assert f"(1, 4, {T}, 8)" in text  # q, k, v: batch, 4 heads, T tokens, head size 8
    assert f"(1, 4, {T}, {T})" in text  # the attention weights


def test_cli_explain(checkpoint, capsys):
    assert main(["explain", str(checkpoint), A, B]) == 0
    text = capsys.readouterr().out
    assert "layer 0" in text and "layer 1" in text and "IsNext" in text
    assert main(["explain", str(checkpoint), "alpha bravo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        len(data["layers"]) == 2
        and data["masked"] == []
        and set(data["next_sentence"]) == {"IsNext", "NotNext"}
    )


@pytest.mark.parametrize("option", [["--top-k", "0"], ["--top-k", "-1"], ["--preview", "0"]])
def test_cli_explain_refuses_counts_below_one(checkpoint, capsys, option):
    assert main(["explain", str(checkpoint), "alpha [MASK]", *option]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "at least 1" in err


def test_cli_explain_missing_checkpoint(tmp_path, capsys):
    assert main(["explain", str(tmp_path / "nope"), "a", "b"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_causal_trace_shows_the_mask_and_the_next_token_guesses(tmp_path, capsys):
    causal = train_tiny_checkpoint(tmp_path, objective="causal")
    model = load(causal)
    trace = model.explain("alpha bravo charlie", preview=3)
    assert trace.model["attention"] == "causal" and trace.next_sentence is None and trace.masked == []
    assert all(layer.above_diagonal == 0.0 for layer in trace.layers)
    assert all(row[1:] == [0.0] * (len(trace.tokens) - 1) for row in trace.layers[0].cls_attention)
    tokens = trace.tokens
    assert [nt.actual for nt in trace.next_tokens] == tokens[1:] + [None]
    with torch.no_grad():
        probs = model.model(torch.tensor([trace.input_ids])).logits[0].softmax(-1)
    for nt in trace.next_tokens:  # the guesses are the model's own next-word probabilities
        token, p = nt.top[0]
        assert p == pytest.approx(probs[nt.position, model.tokenizer.token_to_id(token)].item(), abs=1e-3)
    text = format_trace(trace)
    assert "causal mask: every weight above the diagonal is zero" in text and "4. Next-token guesses" in text
    assert "Next sentence" not in text and "the last token attends to" in text
    assert main(["explain", str(causal), "alpha bravo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["next_tokens"][0]["actual"] == "alpha"
