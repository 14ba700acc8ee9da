"""Bad input gets one line on stderr and exit code 2, never a traceback, and never loses earlier work."""

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
        (["pretrain", "--data", "toy", "--bogus-option"], "unrecognized arguments"),
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
