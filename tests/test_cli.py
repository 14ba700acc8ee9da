"""Bad input gets one line on stderr and exit code 2, never a traceback, and never loses earlier work."""

import json
import subprocess
import sys

import pytest
import torch
from helpers import TINY_SET, write_corpus

from nanobert.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus.txt")


def assert_one_line_error(code, err, needle):
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanobert: error:"), err
    assert needle in err, err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["pretrain", "--data", "toy", "--preset", "gigantic"], "unknown preset"),
        (["pretrain", "--data", "toy", "--set", "no_such_key=1"], "unknown key"),
        (["pretrain", "--data", "toy", "--set", "hidden_size=wide"], "expected int"),
        (["pretrain", "--data", "toy", "--set", "learning_rate"], "key=value"),
        (["pretrain", "--data", "toy", "--set", "type_vocab_size=1"], "leaves no segment B"),
        (
            ["pretrain", "--data", "toy", "--bogus-option"],
            "unrecognized arguments: --bogus-option (see `nanobert pretrain --help`)",
        ),
        (["evaluate", __file__], "is a file; pass a checkpoint directory"),
        (["pretrain", "--data", "toy", "--max-steps", "3", "--epochs", "1"], "not allowed with"),
        (["pretrain", "--train", "/nonexistent/corpus.txt"], "/nonexistent/corpus.txt"),
        (["evaluate", "/nonexistent/ckpt"], "does not exist"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments(capsys, argv, needle):
    assert_one_line_error(*run_cli(capsys, *argv), needle)


def test_bad_corpora(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Caf\u00e9 au lait .\n".encode("latin-1"))
    one_doc = tmp_path / "one.txt"
    one_doc.write_text("Only one document here . It has two sentences .\n")
    for path, needle in [(empty, "empty"), (binary, "binary"), (latin, "UTF-8"), (one_doc, "two documents")]:
        code, err = run_cli(
            capsys,
            "pretrain",
            "--train",
            str(path),
            "--valid",
            str(path),
            "--out",
            str(tmp_path / "out"),
            "--max-steps",
            "1",
            "--quiet",
        )
        assert_one_line_error(code, err, needle)
        assert not (tmp_path / "out").exists()  # bad input fails before anything is written


def test_resume_from_a_non_checkpoint(tmp_path, capsys):
    (tmp_path / "notckpt").mkdir()
    assert_one_line_error(
        *run_cli(capsys, "pretrain", "--resume", str(tmp_path / "notckpt")), "not a nanobert checkpoint"
    )


@pytest.mark.parametrize("value", ["0", "-1"])
def test_stop_after_counts_steps_from_one(capsys, value):
    assert_one_line_error(*run_cli(capsys, "pretrain", "--data", "toy", "--stop-after", value), "at least 1")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_requested_but_absent(capsys):
    assert_one_line_error(*run_cli(capsys, "pretrain", "--data", "toy", "--device", "cuda"), "no CUDA")


def test_existing_run_is_not_overwritten(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    base = [
        "pretrain",
        "--train",
        str(corpus),
        "--out",
        str(out),
        "--max-steps",
        "2",
        "--device",
        "cpu",
        "--quiet",
        "--set",
        *TINY_SET,
    ]
    assert main(base) == 0
    capsys.readouterr()
    before = (out / "last" / "model.safetensors").read_bytes()
    metrics = (out / "metrics.jsonl").read_text()
    assert_one_line_error(*run_cli(capsys, *base), "already holds a run")
    assert (out / "last" / "model.safetensors").read_bytes() == before
    assert (out / "metrics.jsonl").read_text() == metrics
    assert main(base + ["--overwrite"]) == 0


def test_no_traceback_from_a_real_process(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "nanobert", "pretrain", "--train", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_causal_text_shorter_than_one_window_is_a_one_line_error(tmp_path, capsys):
    """It used to hang: every epoch had no batch, and the stream looked for one forever."""
    out = tmp_path / "out"
    argv = ["pretrain", "--data", "toy", "--objective", "causal", "--out", str(out), "--max-steps", "2"]
    code, err = run_cli(
        capsys, *argv, "--device", "cpu", "--quiet", "--set", "precision=fp32", "max_seq_len=128"
    )
    assert_one_line_error(code, err, "too short for one window of max_seq_len=128 tokens")
    assert "--set max_seq_len=" in err
    assert not out.exists()  # the corpus is checked before the output directory is made
    # A prepared corpus is checked as it opens, before anything is written.
    small = tmp_path / "small.txt"
    small.write_text(" = One = \n\n Alpha bravo charlie .\n\n = Two = \n\n Delta echo foxtrot .\n")
    prepare = ["prepare", "--data", str(small), "--valid", str(small), "--out", str(tmp_path / "prep")]
    assert main([*prepare, "--vocab-size", "120", "--quiet"]) == 0
    prepared = tmp_path / "prepared-run"
    argv = ["pretrain", "--prepared", str(tmp_path / "prep"), "--objective", "causal", "--out", str(prepared)]
    code, err = run_cli(capsys, *argv, "--max-steps", "2", "--device", "cpu", "--quiet", "--set", *TINY_SET)
    assert_one_line_error(code, err, "too short for one window of max_seq_len=48 tokens")
    assert not prepared.exists()


def test_set_objective_causal_is_the_same_as_the_objective_option(tmp_path, capsys):
    """`--set objective=causal` sets the field `--objective causal` sets: the same causal run."""
    tiny = [s for s in TINY_SET if "vocab" not in s]  # the toy corpus keeps its preset's vocabulary

    def pretrain(out, *how):
        argv = [
            "pretrain",
            "--data",
            "toy",
            "--out",
            str(out),
            "--max-steps",
            "3",
            "--device",
            "cpu",
            "--quiet",
        ]
        assert main([*argv, *how, "--set", *tiny]) == 0, capsys.readouterr().err
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert json.loads((out / "best" / "config.json").read_text())["kind"] == "causal_lm"
        return [(r["split"], r["step"], r["loss"] if "loss" in r else r["lm_loss"]) for r in rows]

    option = pretrain(tmp_path / "option", "--objective", "causal")
    tokenizer = ["--tokenizer", str(tmp_path / "option" / "last")]  # WordPiece training may break ties apart
    assert pretrain(tmp_path / "set", *tokenizer, "--set", "objective=causal") == option


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("nanobert 0.")
