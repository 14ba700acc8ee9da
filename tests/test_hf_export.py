"""Export to and import from transformers directories: clean loads, logit parity, lossless round trips."""

import json
import re
import shutil

import pytest
import torch
from helpers import train_tiny_checkpoint
from safetensors.torch import load_file, save_file

import nanobert
from nanobert.checkpoints.checkpoint import load_pretraining_checkpoint, read_config, save_checkpoint
from nanobert.cli import main
from nanobert.config import ModelConfig
from nanobert.errors import NanobertError
from nanobert.hf.export_hf import export_hf
from nanobert.hf.import_hf import import_hf
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import SPECIAL_TOKENS, encode_pair, load_tokenizer

transformers = pytest.importorskip("transformers")

PAIRS = [("alpha bravo charlie .", "delta echo ."), ("Zulu, Yankee!", "xray"), ("silver river", None)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny post-LN (BERT's layout, the only one transformers has) model trained for a few steps."""
    return train_tiny_checkpoint(tmp_path_factory.mktemp("pretrained"))


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory):
    return export_hf(checkpoint, tmp_path_factory.mktemp("hf") / "model")


def batch_of(tokenizer, pairs):
    """Our own encoding of `pairs`, right-padded: (ids, token types, mask) as (B, T) tensors."""
    encs = [encode_pair(tokenizer, a, b) for a, b in pairs]
    T = max(len(e["input_ids"]) for e in encs)
    return [torch.tensor([e[k] + [0] * (T - len(e[k])) for e in encs]) for k in encs[0]]


def test_transformers_loads_it_cleanly_with_the_same_logits(checkpoint, exported):
    hf, info = transformers.BertForPreTraining.from_pretrained(exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    hf_tok = transformers.BertTokenizerFast.from_pretrained(exported)
    ours, _ = load_pretraining_checkpoint(checkpoint)
    tokenizer = load_tokenizer(checkpoint)
    ids, types, mask = batch_of(tokenizer, PAIRS)
    theirs = hf_tok([a for a, _ in PAIRS[:2]], [b for _, b in PAIRS[:2]])
    assert theirs["input_ids"] == [encode_pair(tokenizer, a, b)["input_ids"] for a, b in PAIRS[:2]]
    hf.eval()
    with torch.no_grad():
        a = ours(ids, types, mask)
        b = hf(input_ids=ids, token_type_ids=types, attention_mask=mask)
    real = mask.bool()
    assert (a.prediction_logits - b.prediction_logits)[real].abs().max() < 1e-4
    assert (a.seq_relationship_logits - b.seq_relationship_logits).abs().max() < 1e-4


def test_export_import_export_is_lossless(checkpoint, exported, tmp_path):
    result = import_hf(exported, tmp_path / "imported")
    assert result.fresh_heads == [] and result.fresh_parameters == [] and not result.vocab_remapped
    original = load_file(str(checkpoint / "model.safetensors"))
    imported = load_file(str(tmp_path / "imported" / "model.safetensors"))
    assert set(original) == set(imported) and all(torch.equal(original[k], imported[k]) for k in original)
    again = export_hf(tmp_path / "imported", tmp_path / "again")
    first, second = (
        load_file(str(exported / "model.safetensors")),
        load_file(str(again / "model.safetensors")),
    )
    assert set(first) == set(second) and all(torch.equal(first[k], second[k]) for k in first)
    assert json.loads((again / "config.json").read_text()) == json.loads(
        (exported / "config.json").read_text()
    )
    assert (again / "tokenizer.json").read_text() == (exported / "tokenizer.json").read_text()


def test_bert_model_weights_get_fresh_heads(checkpoint, exported, tmp_path, capsys):
    source = tmp_path / "bert-model"
    transformers.BertModel.from_pretrained(exported).save_pretrained(source)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(exported / name, source / name)
    assert main(["import-hf", str(source), str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "initialised freshly" in out and "masked-LM head" in out and "next-sentence head" in out
    imported, config = load_pretraining_checkpoint(tmp_path / "out")
    original, _ = load_pretraining_checkpoint(checkpoint)
    assert sorted({k.split(".")[0] for k in config["fresh_parameters"]}) == ["mlm_head", "nsp_head"]
    for name, p in original.bert.state_dict().items():
        assert torch.equal(p, imported.bert.state_dict()[name]), name


@pytest.mark.parametrize("tokenizer_file", ["vocab.txt", "tokenizer.json"])
def test_google_style_vocabulary_is_renumbered(checkpoint, exported, tmp_path, tokenizer_file):
    """Google's vocab.txt puts [UNK] [CLS] [SEP] [MASK] at 100..103; import moves them to 1..4."""
    vocab = (exported / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab[:5] == list(SPECIAL_TOKENS)
    V = json.loads((exported / "config.json").read_text())["vocab_size"]
    # [PAD], seven ordinary tokens, then [UNK] [CLS] [SEP] [MASK], then the rest: row j holds our row perm[j]
    perm = [0, *range(5, 12), 1, 2, 3, 4, *range(12, V)]
    source = tmp_path / "google-style"
    source.mkdir()
    (source / "vocab.txt").write_text(
        "\n".join(vocab[i] for i in perm[: len(vocab)]) + "\n", encoding="utf-8"
    )
    (source / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    shutil.copy(exported / "config.json", source / "config.json")
    state = load_file(str(exported / "model.safetensors"))
    for key in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):
        state[key] = state[key][torch.tensor(perm)].contiguous()
    save_file(state, str(source / "model.safetensors"), metadata={"format": "pt"})
    # The directory is a faithful Google-style copy: transformers computes our logits from it.
    hf = transformers.BertForPreTraining.from_pretrained(source).eval()
    hf_tok = transformers.BertTokenizerFast.from_pretrained(source)
    assert (hf_tok.unk_token_id, hf_tok.cls_token_id, hf_tok.mask_token_id) == (8, 9, 11)
    if tokenizer_file == "tokenizer.json":  # as transformers writes it: the full pipeline, ids 8..11 inside
        hf_tok.save_pretrained(source)
    ours, _ = load_pretraining_checkpoint(checkpoint)
    ids, types, mask = batch_of(load_tokenizer(checkpoint), PAIRS[:1])
    with torch.no_grad():
        nsp = ours(ids, types, mask).seq_relationship_logits
        enc = hf_tok(PAIRS[0][0], PAIRS[0][1], return_tensors="pt")
        assert (hf(**enc).seq_relationship_logits - nsp).abs().max() < 1e-4

    result = import_hf(source, tmp_path / "imported")
    assert result.vocab_remapped and result.fresh_heads == []
    original = load_file(str(checkpoint / "model.safetensors"))
    imported = load_file(str(tmp_path / "imported" / "model.safetensors"))
    assert all(torch.equal(original[k], imported[k]) for k in original)  # back in our order exactly
    tok = load_tokenizer(tmp_path / "imported")
    for a, b in PAIRS:
        assert encode_pair(tok, a, b) == encode_pair(load_tokenizer(checkpoint), a, b)


@pytest.mark.parametrize(
    "change, needle", [(dict(pre_layer_norm=True), "pre-LN"), (dict(hidden_act="geglu"), "geglu")]
)
def test_models_transformers_cannot_hold_are_refused(checkpoint, tmp_path, change, needle):
    config = ModelConfig(**{**load_pretraining_checkpoint(checkpoint)[0].config.__dict__, **change})
    save_checkpoint(tmp_path / "odd", BertForPreTraining(config), None, load_tokenizer(checkpoint))
    with pytest.raises(NanobertError, match=needle):
        export_hf(tmp_path / "odd", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["export-hf", "{tmp}/missing", "{tmp}/out"], "does not exist"),
        (["export-hf", "{ckpt}", "{tmp}/full"], "--overwrite"),
        (["export-hf", "{ckpt}", "{ckpt}"], "is the input"),
        # --overwrite replaces the whole folder: never one that holds the input (the run with best/ in it)
        (["export-hf", "{ckpt}", "{parent}", "--overwrite"], "holds the input"),
        (["export-hf", "{ckpt}", "{tmp}/full/precious.txt", "--overwrite"], "is a file"),
        (["import-hf", "{tmp}/empty", "{tmp}/out"], "no config.json"),
        (["import-hf", "{tmp}/roberta", "{tmp}/out"], "only BERT"),
        (["import-hf", "{tmp}/no-weights", "{tmp}/out"], "no model.safetensors"),
        # --overwrite replaces only an output of the same kind: both kinds hold a config.json
        (["export-hf", "{ckpt}", "{tmp}/nb", "--overwrite"], "something other than a transformers model"),
        (["import-hf", "{tmp}/no-weights", "{tmp}/roberta", "--overwrite"], "than a nanobert checkpoint"),
    ],
)
def test_bad_directories_are_one_line_errors(checkpoint, tmp_path, capsys, argv, needle):
    shutil.copytree(checkpoint, tmp_path / "nb")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "precious.txt").write_text("keep me")
    (tmp_path / "empty").mkdir()
    (tmp_path / "roberta").mkdir()
    (tmp_path / "roberta" / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    (tmp_path / "no-weights").mkdir()
    (tmp_path / "no-weights" / "config.json").write_text(
        json.dumps(
            {
                "model_type": "bert",
                "vocab_size": 50,
                "hidden_size": 8,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 16,
            }
        )
    )
    before = sorted(p.name for p in checkpoint.iterdir())
    code = main([a.format(tmp=tmp_path, ckpt=checkpoint, parent=checkpoint.parent) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert (tmp_path / "full" / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in checkpoint.iterdir()) == before
    assert read_config(tmp_path / "nb")["kind"] == "pretraining"
    assert json.loads((tmp_path / "roberta" / "config.json").read_text()) == {"model_type": "roberta"}


def test_cli_export_hf(checkpoint, tmp_path, capsys):
    assert main(["export-hf", str(checkpoint), str(tmp_path / "hf"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"config.json", "model.safetensors", "tokenizer.json", "vocab.txt"} <= set(data["files"])


@pytest.fixture(scope="module")
def causal_checkpoint(tmp_path_factory):
    return train_tiny_checkpoint(tmp_path_factory.mktemp("causal"), objective="causal")


def test_a_causal_checkpoint_exports_as_bert_lm_head_model(causal_checkpoint, tmp_path, capsys):
    """transformers loads it with no missing or unexpected keys, as a decoder, with the same logits."""
    from nanobert.checkpoints.checkpoint import load_causal_lm

    out = export_hf(causal_checkpoint, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["BertLMHeadModel"] and config["is_decoder"] is True
    hf, info = transformers.BertLMHeadModel.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    ours, _ = load_causal_lm(causal_checkpoint)
    ids = torch.tensor([[2, 17, 33, 41, 9, 60, 12], [2, 50, 51, 52, 0, 0, 0]])
    mask = (ids != 0).long()
    hf.eval()
    with torch.no_grad():
        a = ours(ids, None, mask).logits
        b = hf(input_ids=ids, attention_mask=mask).logits
    assert (a - b)[mask.bool()].abs().max() < 1e-4
    # a prompt encodes as the causal model read its corpus ([CLS] text, no [SEP]: that ends a document),
    # and generation stops at [SEP]: transformers continues the text as `nanobert generate` does
    assert config["bos_token_id"] == 2 and config["eos_token_id"] == 3
    ours_model = nanobert.load(causal_checkpoint)
    prompt = transformers.AutoTokenizer.from_pretrained(out)("alpha bravo", return_tensors="pt")
    assert prompt["input_ids"][0].tolist() == ours_model.encode("alpha bravo")["input_ids"]
    greedy = ours_model.generate("alpha bravo", max_new_tokens=5, temperature=0)
    never = [[0], [1], [2], [4]]  # [PAD] [UNK] [CLS] [MASK]: `generate` never emits them
    with torch.no_grad():
        generated = hf.generate(**prompt, max_new_tokens=5, do_sample=False, bad_words_ids=never)[0].tolist()
    expected = [ours_model.tokenizer.token_to_id(t) for t in greedy.tokens]
    assert generated[prompt["input_ids"].shape[1] :][: len(expected)] == expected
    # and back: import-hf makes it a causal checkpoint again, weight for weight
    assert main(["import-hf", str(out), str(tmp_path / "back"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fresh_parameters"] == [] and result["vocab_remapped"] is False
    back, config = load_causal_lm(tmp_path / "back")
    assert config["kind"] == "causal_lm"
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in ours.state_dict().items())


def _damage(root, exported, change):
    """A copy of the exported directory with one file changed by `change(dir)`."""
    damaged = root / "damaged"
    shutil.copytree(exported, damaged)
    change(damaged)
    return damaged


def _edit_config(**fields):
    def change(d):
        config = json.loads((d / "config.json").read_text())
        config.update(fields)
        (d / "config.json").write_text(json.dumps(config))

    return change


def _weights_as_bin(payload):
    def change(d):
        (d / "model.safetensors").unlink()
        (d / "pytorch_model.bin").write_bytes(payload)

    return change


def _vocab_only(lines_edit, tokenizer_config=None):
    def change(d):
        (d / "tokenizer.json").unlink()
        lines = (d / "vocab.txt").read_text().split("\n")[:-1]
        (d / "vocab.txt").write_text("\n".join(lines_edit(lines)) + "\n")
        if tokenizer_config is not None:
            (d / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))

    return change


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda d: (d / "config.json").write_text("[1, 2]"), "is not a JSON object"),
        (_edit_config(vocab_size="197"), "ModelConfig.vocab_size is '197', not int"),
        (_edit_config(is_decoder="yes"), "ModelConfig.is_decoder is 'yes', not bool"),
        (lambda d: (d / "config.json").write_text('{"model_type": "bert"}'), "lacks vocab_size, hidden_size"),
        (_weights_as_bin(b"garbage"), "cannot read the weights"),
        (_vocab_only(lambda lines: [*lines[:10], lines[0], *lines[11:]]), "lists a token twice"),
        (_vocab_only(lambda lines: lines), None),  # vocab.txt alone imports
        # a token holding U+2028 is still one line of vocab.txt (as transformers reads it), so ids stay put
        (_vocab_only(lambda lines: [*lines[:10], "odd\u2028token", *lines[11:]]), None),
        (_vocab_only(lambda lines: lines, {"do_lower_case": "yes"}), 'do_lower_case is "yes", not true'),
        (_vocab_only(lambda lines: lines, {"strip_accents": 3}), "strip_accents is 3, not true, false"),
    ],
)
def test_damaged_transformers_directories_are_one_line_errors(exported, tmp_path, change, needle):
    damaged = _damage(tmp_path, exported, change)
    if needle is None:
        import_hf(damaged, tmp_path / "ok")
        return
    with pytest.raises(NanobertError, match=re.escape(needle)):
        import_hf(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.tmp-*"))
