"""Using a checkpoint: fill-mask, NSP, embeddings and similarity, attention maps; the CLI that prints them."""

import json
import re

import matplotlib.image
import numpy as np
import pytest
import torch
from helpers import train_tiny_checkpoint

import nanobert
from nanobert.cli import main
from nanobert.errors import NanobertError
from nanobert.tokenizer import NUM_SPECIAL_TOKENS
from nanobert.use.inference import load
from nanobert.use.plots import ATTENTION_DPI, attention_figure_inches


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny post-LN model trained for 5 steps: enough to have real weights and a real tokenizer."""
    return train_tiny_checkpoint(tmp_path_factory.mktemp("pretrained"), steps=5)


@pytest.fixture(scope="module")
def model(checkpoint):
    return load(checkpoint)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def test_load_is_the_public_api(checkpoint):
    m = nanobert.load(checkpoint)
    assert isinstance(m, nanobert.InferenceModel) and not m.model.training


def test_fill_mask_several_masks(model):
    result = model.fill_mask("alpha bravo [MASK] delta . echo [mask] golf", top_k=4)
    assert len(result.masks) == 2  # "[mask]" in lower case counts too
    assert result.tokens[0] == "[CLS]" and result.tokens[-1] == "[SEP]"
    for mask in result.masks:
        assert result.tokens[mask.position] == "[MASK]"
        probs = [c.probability for c in mask.candidates]
        assert len(probs) == 4 and probs == sorted(probs, reverse=True)
        assert all(0.0 < p < 1.0 for p in probs)
        assert all(c.token_id >= NUM_SPECIAL_TOKENS for c in mask.candidates)  # never [PAD], [CLS], ...
        # each candidate's display text fills its own mask and leaves the other one
        assert all(c.sequence.count("[MASK]") == 1 for c in mask.candidates)
    assert "[MASK]" not in result.filled
    # The probabilities are the model's: a softmax over the vocabulary at that position.
    enc, out = model.forward("alpha bravo [MASK] delta . echo [MASK] golf")
    pos = result.masks[0].position
    expected = out.prediction_logits[0, pos].softmax(-1)[result.masks[0].candidates[0].token_id].item()
    assert result.masks[0].candidates[0].probability == pytest.approx(expected, rel=1e-5)


def test_fill_mask_word_pieces_are_joined(model):
    result = model.fill_mask("[MASK] delta", top_k=1)
    assert result.filled.endswith("delta")  # "d ##el ##ta" reads back as one word


def test_fill_mask_without_mask_is_a_clear_error(model):
    with pytest.raises(NanobertError, match=r"no \[MASK\]"):
        model.fill_mask("the cat sat on the mat .")
    # a text longer than the position table: a [MASK] cut off is an error, not silently skipped
    long = "[MASK] bravo . " + "alpha " * model.max_length
    with pytest.raises(NanobertError, match=r"every \[MASK\] fell beyond"):
        model.fill_mask("alpha " * model.max_length + "[MASK] .")
    with pytest.raises(NanobertError, match=r"1 of the text's 2 \[MASK\]s fall beyond the model's"):
        model.fill_mask(long + "[MASK] .")
    assert len(model.fill_mask(long).masks) == 1  # cut text, every mask inside: fine


def test_next_sentence_probabilities(model):
    ns = model.next_sentence("alpha bravo charlie .", "delta echo .")
    assert ns.is_next + ns.not_next == pytest.approx(1.0)
    _, out = model.forward("alpha bravo charlie .", "delta echo .")
    assert ns.is_next == pytest.approx(out.seq_relationship_logits[0].softmax(-1)[0].item(), rel=1e-5)


def test_embeddings_do_not_depend_on_batching(model):
    texts = ["alpha", "bravo charlie delta echo foxtrot golf hotel", "", "india juliet kilo"]
    batched = model.embed(texts, batch_size=3)  # mixed lengths: padding inside a batch
    assert batched.shape == (4, model.model.config.hidden_size) and batched.dtype == np.float32
    for text, row in zip(texts, batched, strict=True):
        np.testing.assert_allclose(model.embed(text), row, atol=1e-5)
    # the mean covers the real tokens of the text, [CLS] and [SEP] included
    with torch.no_grad():
        h = model.model.bert(torch.tensor([model.encode(texts[1])["input_ids"]])).last_hidden_state
    np.testing.assert_allclose(batched[1], h[0].mean(0).numpy(), atol=1e-5)


def test_similarity(model):
    assert model.similarity("alpha bravo", "alpha bravo") == pytest.approx(1.0, abs=1e-5)
    assert -1.0 <= model.similarity("alpha bravo", "river stone ocean") <= 1.0


def test_attention_maps(model):
    maps = model.attention("alpha bravo .", pair="charlie .")
    cfg = model.model.config
    T = len(maps.tokens)
    assert maps.probs.shape == (cfg.num_hidden_layers, cfg.num_attention_heads, T, T)
    np.testing.assert_allclose(maps.probs.sum(-1), 1.0, atol=1e-5)
    assert maps.token_type_ids == [0, 0, 0, 0, 0, 1, 1, 1]


def test_cli_fill_mask(checkpoint, capsys):
    code, out, _ = run_cli(capsys, "fill-mask", checkpoint, "alpha [MASK] charlie .", "--top-k", "3")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith("[MASK] 1 of 1") and len(lines) == 4
    assert all(re.match(r"\s+\d+\.\d%\s+\S+\s+\S", line) for line in lines[1:])
    code, out, _ = run_cli(capsys, "fill-mask", checkpoint, "[MASK] and [MASK]", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["masks"]) == 2 and len(data["masks"][0]["candidates"]) == 5


def test_cli_nsp_and_similarity(checkpoint, capsys):
    code, out, _ = run_cli(capsys, "nsp", checkpoint, "alpha bravo .", "charlie delta .")
    assert code == 0 and re.fullmatch(r"IsNext \d+\.\d%  NotNext \d+\.\d%\n", out), out
    code, out, _ = run_cli(capsys, "nsp", checkpoint, "alpha .", "bravo .", "--json")
    assert sum(json.loads(out).values()) == pytest.approx(1.0)
    code, out, _ = run_cli(capsys, "similarity", checkpoint, "alpha", "alpha", "--json")
    assert code == 0 and json.loads(out)["cosine_similarity"] == pytest.approx(1.0, abs=1e-5)


def test_cli_embed_file(checkpoint, tmp_path, capsys, model):
    lines = ["alpha bravo .", "", "charlie delta echo foxtrot golf .", "hotel"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out_path = tmp_path / "sub" / "vectors.npy"
    code, out, _ = run_cli(
        capsys, "embed", checkpoint, "--input", tmp_path / "in.txt", "--out", out_path, "--batch-size", "2"
    )
    assert code == 0 and "4 embeddings" in out
    vectors = np.load(out_path)
    assert vectors.shape == (4, model.model.config.hidden_size)  # one row per line, blank ones included
    np.testing.assert_allclose(vectors, model.embed(lines), atol=1e-5)
    # Rows follow "\n" line ends only: a form feed, U+0085 or U+2028 inside a line does not split it.
    odd = ["first line", "second\u2028 still second", "third \x0c page", "fourth \x85 x"]
    (tmp_path / "odd.txt").write_text("\r\n".join(odd) + "\r\n", encoding="utf-8")
    code, out, err = run_cli(capsys, "embed", checkpoint, "--input", tmp_path / "odd.txt", "--out", out_path)
    assert code == 0 and "4 embeddings" in out, err
    np.testing.assert_allclose(np.load(out_path), model.embed(odd), atol=1e-5)


def decode_png(path):
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    return image


def assert_size(image, width_in, height_in):
    """The PNG is the figure's size in inches times the dpi (matplotlib truncates to whole pixels)."""
    h, w = image.shape[:2]
    assert abs(w - width_in * ATTENTION_DPI) <= 1 and abs(h - height_in * ATTENTION_DPI) <= 1, (w, h)


def test_cli_attention_grid_png(checkpoint, tmp_path, capsys, model):
    out_path = tmp_path / "attention.png"
    code, out, _ = run_cli(
        capsys, "attention", checkpoint, "alpha bravo .", "--pair", "charlie .", "--out", out_path
    )
    assert code == 0, out
    image = decode_png(out_path)
    tokens = model.attention("alpha bravo .", "charlie .").tokens
    width, height = attention_figure_inches(tokens, rows=2, cols=4)  # every layer by every head
    assert_size(image, width, height)
    assert image[..., :3].std() > 0.05  # not blank: heatmaps, labels and titles


def test_cli_attention_one_head(checkpoint, tmp_path, capsys, model):
    out_path = tmp_path / "one.png"
    argv = ["attention", checkpoint, "alpha bravo charlie", "--layer", "1", "--head", "2"]
    code, out, _ = run_cli(capsys, *argv, "--out", out_path, "--json")
    data = json.loads(out)
    assert code == 0 and data["layers"] == [1] and data["heads"] == [2]
    maps = model.attention("alpha bravo charlie")
    np.testing.assert_allclose(data["attentions"][0][0], maps.probs[1, 2], atol=1e-4)
    width, height = attention_figure_inches(maps.tokens, rows=1, cols=1)
    assert_size(decode_png(out_path), width, height)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["fill-mask", "{ckpt}", "no mask in this text"], "no [MASK]"),
        (["fill-mask", "/nonexistent/ckpt", "a [MASK]"], "does not exist"),
        (["nsp", "{tmp}", "a", "b"], "not a nanobert checkpoint"),
        (["embed", "{ckpt}", "--input", "{tmp}/missing.txt", "--out", "{tmp}/x.npy"], "no such file"),
        (["embed", "{ckpt}", "--input", "{tmp}/empty.txt", "--out", "{tmp}/x.npy"], "has no text"),
        (["embed", "{ckpt}", "--input", "{tmp}/blank.txt", "--out", "{tmp}/x.npy"], "has no text"),
        (["embed", "{ckpt}", "--input", "{tmp}/binary.bin", "--out", "{tmp}/x.npy"], "binary file"),
        (["embed", "{ckpt}", "--input", "{tmp}", "--out", "{tmp}/x.npy"], "is a directory"),
        # zero-width characters only: the tokenizer drops them, so there is no text
        (["similarity", "{ckpt}", "\u200b\u200d", "\u200b"], "the text is empty"),
        (["nsp", "{ckpt}", "alpha", "\u2060"], "the text is empty"),
        (["embed", "{ckpt}", "--input", "{tmp}/empty.txt", "--out", "{tmp}/x.txt"], ".npy"),
        (["attention", "{ckpt}", "a b", "--layer", "7", "--out", "{tmp}/a.png"], "layers 0..1"),
        (["attention", "{ckpt}", "a b", "--head", "4", "--out", "{tmp}/a.png"], "heads 0..3"),
        (["similarity", "{ckpt}", "a"], "required"),
        # a command-line byte that is not UTF-8 reaches Python as a lone surrogate
        (["fill-mask", "{ckpt}", "caf\udce9 [MASK]"], "not valid Unicode"),
        (["nsp", "{ckpt}", "\udcff a", "b"], "not valid Unicode"),
    ],
)
def test_cli_bad_input_is_one_line(checkpoint, tmp_path, capsys, argv, needle):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n \n\u200b\n")
    (tmp_path / "binary.bin").write_bytes(b"\x7fELF\0\0abc\n")
    argv = [a.format(ckpt=checkpoint, tmp=tmp_path) for a in argv]
    code, _, err = run_cli(capsys, *argv)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("nanobert: error:"), err
    assert needle in err, err


def test_corrupt_checkpoint(checkpoint, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in checkpoint.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    weights = bad / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    code, _, err = run_cli(capsys, "nsp", bad, "a", "b")
    assert code == 2 and "corrupt" in err and len(err.splitlines()) == 1


# ----------------------------------------------------------------------------------------------------------
# A causal checkpoint: generate, and the errors that name the command that fits


@pytest.fixture(scope="module")
def causal(tmp_path_factory):
    return train_tiny_checkpoint(tmp_path_factory.mktemp("causal"), steps=5, objective="causal")


def test_generate_is_seeded_greedy_at_zero_and_keeps_to_top_k(causal):
    model = load(causal)
    assert model.kind == "causal_lm"
    a = model.generate("alpha bravo", max_new_tokens=8, seed=3)
    assert a == model.generate("alpha bravo", max_new_tokens=8, seed=3)  # same seed, same text
    assert len(a.tokens) == len(a.probabilities) <= 8 and a.text.startswith("alpha bravo")
    assert a.stop_reason in ("max_new_tokens", "end of document")
    greedy = model.generate("alpha bravo", max_new_tokens=5, temperature=0)
    ids = model.encode("alpha bravo")["input_ids"]
    for token, p in zip(greedy.tokens, greedy.probabilities, strict=True):  # the most probable ordinary piece
        with torch.no_grad():
            logits = model.model(torch.tensor([ids])).logits[0, -1]
        full = logits.softmax(-1)  # its probability is the model's, before [UNK] and the like are ruled out
        logits[[0, 1, 2, 4]] = float("-inf")
        assert model.tokenizer.id_to_token(int(logits.argmax())) == token
        assert p == pytest.approx(full[int(logits.argmax())].item(), rel=1e-5)
        ids.append(model.tokenizer.token_to_id(token))
    one = model.generate("alpha", max_new_tokens=6, top_k=1, seed=9)  # top-k 1 is greedy too
    assert one.tokens == model.generate("alpha", max_new_tokens=6, temperature=0).tokens
    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(NanobertError, match="a finite temperature >= 0"):
            model.generate("alpha", temperature=bad)
    for bad in (-1, 2**63, 10**30):
        with pytest.raises(NanobertError, match=r"seed must be in \[0, 2\*\*63\)"):
            model.generate("alpha", seed=bad)
    # The text keeps the prompt as typed (case, characters the vocabulary lacks), then the continuation.
    typed = model.generate("Alpha Café 🐱 bravo", max_new_tokens=4, temperature=0)
    assert typed.text.startswith("Alpha Café 🐱 bravo") and "[UNK]" not in typed.text
    # the continuation as decoded after the prompt's pieces: a first "##" piece joins the prompt's last word
    joins = typed.tokens[0].startswith("##")
    assert typed.text == "Alpha Café 🐱 bravo" + ("" if joins else " ") + typed.continuation
    # extreme but finite: greedy at the bottom (below float32's smallest normal), near-uniform at the top
    assert model.generate("alpha", max_new_tokens=3, temperature=1e-300).tokens == greedy_of("alpha", model)
    assert len(model.generate("alpha", max_new_tokens=3, temperature=1e308, seed=1).tokens) >= 1


def greedy_of(prompt, model):
    return model.generate(prompt, max_new_tokens=3, temperature=0).tokens


def test_each_objective_refuses_the_other_ones_commands(checkpoint, causal, capsys, tmp_path):
    for argv, needle in [
        (["fill-mask", causal, "a [MASK] b"], "use `nanobert generate`"),
        (["nsp", causal, "a", "b"], "use `nanobert generate`"),
        (["generate", checkpoint, "alpha"], "use `nanobert fill-mask`"),
        (["answer", causal, "--question", "q", "--context", "c"], "not a question-answering model"),
    ]:  # fmt: skip
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
    code, out, err = run_cli(
        capsys, "generate", causal, "alpha bravo", "--max-new-tokens", "3", "--seed", "1"
    )
    assert code == 0 and out.startswith("alpha bravo"), err
    code, out, _ = run_cli(
        capsys, "attention", causal, "alpha bravo charlie", "--out", tmp_path / "c.png", "--json"
    )
    attention = np.array(json.loads(out)["attentions"][0][0])  # layer 0, head 0: a triangle
    assert (
        code == 0 and np.triu(attention, k=1).max() == 0.0 and np.allclose(attention.sum(-1), 1.0, atol=1e-3)
    )


@pytest.mark.parametrize("prompt", ["", "  \t "])
def test_generate_refuses_an_empty_prompt_like_every_other_command(causal, capsys, prompt):
    with pytest.raises(NanobertError, match="the text is empty"):
        load(causal).generate(prompt)
    code, out, err = run_cli(capsys, "generate", causal, prompt)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "the text is empty" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["fill-mask", ""],
        ["nsp", "", "the river ."],
        ["nsp", "the river .", " "],
        ["similarity", "alpha", ""],
        ["attention", "", "--out", "unused.png"],
        ["explain", "alpha", "\t"],
    ],
)
def test_every_command_refuses_an_empty_text(checkpoint, capsys, argv):
    code, out, err = run_cli(capsys, argv[0], checkpoint, *argv[1:])
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "the text is empty" in err, err


def test_results_read_well_in_a_notebook(model):
    """print() of a fill-mask result is what the CLI prints; a trace prints as the `explain` text and its
    repr is one line, not thousands of numbers."""
    result = model.fill_mask("alpha [MASK] charlie . [MASK]", top_k=2)
    lines = str(result).splitlines()
    assert lines[0] == f"[MASK] 1 of 2 (token position {result.masks[0].position}):" and len(lines) == 7
    assert lines[-1] == f"top guesses together: {result.filled}"
    nsp = model.next_sentence("alpha bravo", "charlie")
    assert str(nsp) == f"IsNext {nsp.is_next:.1%}  NotNext {nsp.not_next:.1%}"
    trace = model.explain("alpha bravo", "charlie")
    assert str(trace).startswith("model: ") and "\n" not in repr(trace) and len(repr(trace)) < 100


def test_a_huge_line_is_cut_before_the_tokenizer_sees_it(checkpoint, model, tmp_path, capsys, monkeypatch):
    """One 200 MB line once took the tokenizer 5 GB and aborted it: the window keeps only the start anyway."""
    import nanobert.tokenizer as tokenizer_module

    seen, encode = [], tokenizer_module.encode_sentences

    def spy(tokenizer, sentences):
        seen.extend(map(len, sentences))
        return encode(tokenizer, sentences)

    monkeypatch.setattr(tokenizer_module, "encode_sentences", spy)
    huge = "alpha bravo " * 200_000  # 2.4 MB of words on one line
    (tmp_path / "in.txt").write_text(f"charlie delta\n{huge}\n{'x' * 3_000_000}\n", encoding="utf-8")
    out_path = tmp_path / "v.npy"
    code, out, err = run_cli(capsys, "embed", checkpoint, "--input", tmp_path / "in.txt", "--out", out_path)
    assert code == 0 and "3 embeddings" in out
    assert max(seen) <= model.max_length * tokenizer_module.CHARS_PER_POSITION
    assert len(err.splitlines()) == 1 and err.startswith("nanobert: 2 lines longer than")  # said once
    np.testing.assert_allclose(np.load(out_path)[1], model.embed(huge[:20_000]), atol=1e-5)  # same window
    with pytest.raises(NanobertError, match="characters, more than the model's"):  # one endless word
        model.check_text("x" * 3_000_000 + " [MASK]")
