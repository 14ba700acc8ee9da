"""Prepared corpora: streamed documents, the memory-mapped layout, windowed instances, --prepared runs."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import TINY_SET, write_corpus

import nanobert.data.shards as shards_mod
from nanobert.cli import main
from nanobert.config import TrainConfig
from nanobert.data.corpus import read_text_file
from nanobert.data.prepare import iter_documents, prepare_corpus
from nanobert.data.shards import PreparedCorpus, WindowedInstances
from nanobert.errors import NanobertError
from nanobert.tokenizer import encode_documents

CLS, SEP = 2, 3


@pytest.mark.parametrize(
    "text",
    [
        " = A = \n\n Intro before . Two .\n = = Sec = = \n More text here .\n\n = B = \n Other doc . Yes .\n",
        "Lead paragraph without a title . Still lead .\n\nSecond block .\n = = Deep = = \nSame block .\n",
        "\ufeffFirst para . Done .\n\n\n\nNext para <unk> here .\n",
        "\ufeff = Only Title = \n\nFirst para . Words .\n\nSecond para . More .\n",  # a BOM before a title
        "Before any title .\n\n = T1 = \n\nBody one .\n\nBody one more .\n = T2 = \nBody two .\n",
        "",
        "\n\n   \n",
    ],
)
def test_iter_documents_matches_read_text_file(tmp_path, text):
    path = tmp_path / "c.txt"
    path.write_text(text, encoding="utf-8")
    assert list(iter_documents(path)) == read_text_file(path)


def test_iter_documents_matches_on_a_generated_corpus(tmp_path):
    path = write_corpus(tmp_path / "c.txt", n_docs=9, sentences=5, seed=3)
    assert list(iter_documents(path)) == read_text_file(path)


@pytest.fixture
def prepared(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", n_docs=12)
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    out = tmp_path / "prep"
    meta = prepare_corpus(str(corpus), out, valid=str(valid), vocab_size=120, min_frequency=1, quiet=True)
    return out, corpus, valid, meta


def test_prepared_layout_holds_the_tokenized_corpus(prepared):
    out, corpus, valid, meta = prepared
    assert meta["format"] == "nanobert-prepared" and meta["dtype"] == "uint16"
    assert json.loads((out / "meta.json").read_text()) == meta
    pc = PreparedCorpus(out)
    tokenizer = pc.tokenizer()
    for name, path in (("train", corpus), ("valid", valid)):
        split = pc.split(name)
        expected = encode_documents(tokenizer, read_text_file(path))
        assert list(split) == expected
        assert meta["splits"][name] == {
            "documents": len(expected),
            "sentences": sum(map(len, expected)),
            "tokens": sum(len(s) for d in expected for s in d),
        }
        assert split.tokens.dtype == np.uint16 and split.sentence_offsets[0] == 0
    assert not list(out.parent.glob(".prep.tmp-*"))  # the temporary directory was renamed into place


def test_prepare_refuses_to_overwrite_and_reports_damage(prepared, tmp_path):
    out, corpus, _, _ = prepared
    with pytest.raises(NanobertError, match="already exists"):
        prepare_corpus(str(corpus), out, vocab_size=120, quiet=True)
    prepare_corpus(str(corpus), out, tokenizer_dir=out, overwrite=True, quiet=True)
    assert not PreparedCorpus(out).has_split("valid")
    tokens = out / "train" / "tokens.bin"
    tokens.write_bytes(tokens.read_bytes()[:-3])
    with pytest.raises(NanobertError, match="truncated or corrupt"):
        PreparedCorpus(out).split("train")
    (out / "meta.json").write_text("{not json")
    with pytest.raises(NanobertError, match="not a nanobert prepared-corpus"):
        PreparedCorpus(out)
    with pytest.raises(NanobertError, match="not a prepared corpus"):
        PreparedCorpus(tmp_path)


def test_prepare_never_replaces_its_input_or_a_stranger_folder(prepared, tmp_path):
    """--overwrite replaces the whole --out folder: not one holding the text, nor one that is no corpus."""
    _, corpus, _, _ = prepared
    with pytest.raises(NanobertError, match="holds the input"):
        prepare_corpus(str(corpus), tmp_path, vocab_size=120, overwrite=True, quiet=True)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("keep me")
    with pytest.raises(NanobertError, match="not a prepared corpus"):
        prepare_corpus(str(corpus), other, vocab_size=120, overwrite=True, quiet=True)
    with pytest.raises(NanobertError, match="is a file"):
        prepare_corpus(str(corpus), other / "keep.txt", vocab_size=120, overwrite=True, quiet=True)
    with pytest.raises(NanobertError, match="is a file, not a folder"):
        prepare_corpus(str(corpus), other / "keep.txt" / "prep", vocab_size=120, quiet=True)
    assert corpus.is_file() and (other / "keep.txt").read_text() == "keep me"
    (other / "meta.json").write_text("{}")  # a meta.json alone does not make the folder a prepared corpus
    with pytest.raises(NanobertError, match="something other than a prepared corpus"):
        prepare_corpus(str(corpus), other, vocab_size=120, overwrite=True, quiet=True)
    assert (other / "keep.txt").read_text() == "keep me"


def test_prepare_checks_the_vocabulary_first_and_clears_a_killed_runs_leftover(prepared, tmp_path):
    _, corpus, _, _ = prepared
    with pytest.raises(NanobertError, match="vocab_size -5 is too small"):
        prepare_corpus(str(corpus), tmp_path / "p3", vocab_size=-5, quiet=True)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    stale = tmp_path / f".p4.tmp-{child.pid}"  # what a prepare killed by SIGKILL leaves
    stale.mkdir()
    prepare_corpus(str(corpus), tmp_path / "p4", vocab_size=120, min_frequency=1, quiet=True)
    assert not stale.exists() and (tmp_path / "p4" / "meta.json").is_file()


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(dtype="float99"),
        lambda m: m.update(dtype=5),
        lambda m: m.update(version="2"),
        lambda m: m["splits"]["train"].pop("tokens"),
        lambda m: m["splits"].update(train=[1, 2]),
        lambda m: m["splits"]["train"].update(documents=0),
    ],
)
def test_an_edited_description_is_corrupt_not_a_traceback(prepared, edit):
    out, *_ = prepared
    meta = json.loads((out / "meta.json").read_text())
    edit(meta)
    (out / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(NanobertError, match="not a nanobert prepared-corpus description"):
        PreparedCorpus(out).split("train")


@pytest.mark.parametrize(
    "name, index, value",
    [
        ("document_offsets.bin", 1, 10**9),
        ("document_offsets.bin", 0, 1),
        ("sentence_offsets.bin", 2, 10**9),
        ("sentence_offsets.bin", -1, 0),
    ],
)
def test_edited_offsets_of_the_right_size_are_corrupt(prepared, name, index, value):
    out, *_ = prepared
    offsets = np.fromfile(out / "train" / name, dtype=np.int64)
    offsets[index] = value
    offsets.tofile(out / "train" / name)
    with pytest.raises(NanobertError, match=f"{name} is corrupt"):
        PreparedCorpus(out).split("train")


def test_windowed_instances_cover_every_document_deterministically(prepared):
    out, *_ = prepared
    split = PreparedCorpus(out).split("train")
    cfg = TrainConfig(max_seq_len=24, batch_size=4, seed=5)
    source = WindowedInstances(split, cfg, window_tokens=120)
    assert source.num_windows(0) > 2
    windows = source._epoch_windows(0)
    assert sorted(np.concatenate(windows).tolist()) == list(range(len(split)))
    assert sum(source.window_fraction(0, w) for w in range(source.num_windows(0))) == pytest.approx(1.0)
    again = WindowedInstances(split, cfg, window_tokens=120)
    for w in range(source.num_windows(0)):
        got = source.batches(0, w)
        assert got == again.batches(0, w)
        for batch in got:
            assert 1 <= len(batch) <= cfg.batch_size
            for inst in batch:
                assert len(inst.input_ids) <= cfg.max_seq_len
                assert inst.input_ids[0] == CLS and inst.input_ids.count(SEP) == 2
    assert [b for w in range(source.num_windows(1)) for b in source.batches(1, w)] != [
        b for w in range(source.num_windows(0)) for b in source.batches(0, w)
    ]


def pretrain_prepared(out_dir, prep, *extra):
    argv = ["pretrain", "--prepared", str(prep), "--out", str(out_dir), "--device", "cpu", "--quiet"]
    return main([*argv, "--set", *TINY_SET, *extra])


def losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("mlm_loss")) for r in rows]


def test_pretrain_prepared_resumes_exactly_across_windows(prepared, tmp_path, monkeypatch, capsys):
    out, *_ = prepared
    monkeypatch.setattr(shards_mod, "WINDOW_TOKENS", 150)  # several windows in this tiny corpus
    full, split = tmp_path / "full", tmp_path / "split"
    assert pretrain_prepared(full, out, "--max-steps", "12") == 0
    assert pretrain_prepared(split, out, "--max-steps", "12", "--stop-after", "5") == 0
    data_state = torch.load(split / "last" / "trainer_state.pt", weights_only=True)["data"]
    assert data_state["window"] > 0 or data_state["epoch"] > 0  # stopped past the first window
    assert main(["pretrain", "--resume", str(split / "last"), "--quiet"]) == 0
    assert losses(split) == losses(full)
    config = json.loads((full / "last" / "config.json").read_text())
    assert config["data"]["prepared"] == str(out)
    # `nanobert evaluate` finds the held-out split in the recorded prepared corpus, with the run's numbers
    summary = json.loads((full / "summary.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", str(full / "last"), "--device", "cpu"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["mlm_loss"] == pytest.approx(summary["final"]["mlm_loss"], abs=1e-6)
    # The corpus moved: resuming says which option names its new place, and that option works.
    moved = out.with_name("moved")
    out.rename(moved)
    assert main(["pretrain", "--resume", str(split / "last"), "--max-steps", "13", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --prepared PATH" in err, err
    argv = ["pretrain", "--resume", str(split / "last"), "--max-steps", "13", "--prepared", str(moved)]
    assert main([*argv, "--quiet"]) == 0
    # Prepared again with another tokenizer: evaluate refuses ids that now mean other words.
    _, corpus, valid, _ = prepared
    prepare_corpus(
        str(corpus), moved, valid=str(valid), vocab_size=60, min_frequency=1, overwrite=True, quiet=True
    )
    assert main(["evaluate", str(split / "last"), "--device", "cpu"]) == 2  # it records `moved` now
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "was prepared with another tokenizer" in err, err


def test_cli_prepare_and_prepared_errors(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "prep"
    argv = ["prepare", "--data", str(corpus), "--out", str(out), "--vocab-size", "120", "--quiet"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["splits"]["train"]["documents"] == 8 and "valid" not in printed["splits"]
    for bad, needle in [
        (["pretrain", "--prepared", str(out), "--data", "toy"], "--prepared replaces"),
        (["pretrain", "--prepared", str(out), "--max-steps", "2", "--out", str(tmp_path / "r")], "no valid"),
        (["pretrain", "--prepared", str(tmp_path), "--max-steps", "2"], "not a prepared corpus"),
        (["prepare", "--data", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "p2")], "no such file"),
        (argv, "already exists"),
    ]:
        assert main(bad) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
