import json

import pytest
import torch
from helpers import TINY_SET, write_corpus

from nanobert import train
from nanobert.cli import main
from nanobert.train import autocast_dtype, lr_multiplier

ARTEFACTS = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "trainer_state.pt")


def test_lr_schedule_is_warmup_then_linear_decay():
    assert lr_multiplier(0.0, 0.1) == 0.0
    assert lr_multiplier(0.05, 0.1) == pytest.approx(0.5)
    assert lr_multiplier(0.1, 0.1) == pytest.approx(1.0)
    assert lr_multiplier(0.55, 0.1) == pytest.approx(0.5)
    assert lr_multiplier(1.0, 0.1) == 0.0
    assert lr_multiplier(1.0, 0.1, min_lr_ratio=0.1) == pytest.approx(0.1)
    assert lr_multiplier(0.5, 0.0) == pytest.approx(0.5)


def read_metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def pretrain(tmp_path, out, *extra):
    corpus = write_corpus(tmp_path / "corpus.txt")
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    argv = [
        "pretrain",
        "--train",
        str(corpus),
        "--valid",
        str(valid),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--quiet",
        "--set",
        *TINY_SET,
        *extra,
    ]
    return main(argv)


def test_smoke_run_writes_every_artefact(tmp_path, capsys):
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "7") == 0
    printed = json.loads(capsys.readouterr().out)
    for ckpt in ("best", "last"):
        for name in ARTEFACTS:
            assert (run / ckpt / name).is_file(), f"{ckpt}/{name}"
    rows = read_metrics(run)
    train = [r for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] == "valid"]
    assert set(train[0]) == {"split", "step", "loss", "mlm_loss", "nsp_loss", "lr", "tokens_per_s"}
    assert train[-1]["step"] == 7  # the final step is always logged
    assert [r["step"] for r in valid] == [5, 7]
    assert set(valid[0]) >= {"mlm_loss", "mlm_accuracy", "mlm_perplexity", "nsp_loss", "nsp_accuracy"}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["final"]["step"] == 7 and summary["best"]["step"] in (5, 7)
    assert summary["hardware"]["device"] == "cpu" and summary["tokens_per_s"] > 0
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert printed["held_out"]["mlm_accuracy"] == summary["final"]["mlm_accuracy"]
    # nanobert evaluate reproduces the final held-out metrics from last/
    assert main(["evaluate", str(run / "last"), "--device", "cpu", "--batch-size", "16"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    for key in ("mlm_loss", "mlm_accuracy", "nsp_accuracy"):
        assert evaluated[key] == pytest.approx(summary["final"][key], abs=1e-6)


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    set_dropout = ["--set", "hidden_dropout_prob=0.1"]  # dropout draws from the RNG the checkpoint restores
    assert pretrain(tmp_path, full, "--max-steps", "12", *set_dropout) == 0
    # The same tokenizer: WordPiece training itself is not bit-reproducible across processes (see pretrain()).
    assert (
        pretrain(
            tmp_path,
            split,
            "--max-steps",
            "12",
            "--stop-after",
            "6",
            "--tokenizer",
            str(full / "last"),
            *set_dropout,
        )
        == 0
    )
    assert json.loads((split / "summary.json").read_text())["steps"] == 6
    assert main(["pretrain", "--resume", str(split / "last"), "--quiet"]) == 0

    def losses(run):
        return [(r["step"], r["loss"], r["lr"]) for r in read_metrics(run) if r["split"] == "train"]

    assert losses(split) == losses(full)  # step for step, bit for bit on the CPU

    def final(run):
        return json.loads((run / "summary.json").read_text())["final"]

    assert final(split) == final(full)
    best = lambda run: json.loads((run / "summary.json").read_text())["best"]  # noqa: E731
    assert best(split) == best(full)


def test_time_budget_ends_the_run(tmp_path):
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--time-budget", "3") == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] > 0 and summary["train_time_s"] < 10


def test_toy_corpus_is_memorised(tmp_path, capsys):
    """The 30-second demo: `nanobert pretrain --data toy` memorises the built-in corpus."""
    run = tmp_path / "toy"
    assert main(["pretrain", "--data", "toy", "--out", str(run), "--device", "cpu", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run / "best"), "--device", "cpu"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["mlm_accuracy"] >= 0.95 and metrics["nsp_accuracy"] >= 0.95, metrics


def test_prefetcher_yields_the_same_batches_and_states(tmp_path):
    """The GPU path prepares batches on a thread; it must feed exactly what the synchronous path does."""
    import torch

    from nanobert.config import TrainConfig
    from nanobert.pretraining_data import MaskingCollator
    from nanobert.train import BatchStream, Prefetcher, Synchronous

    docs = [[[5 + (d * 7 + s) % 40] * (3 + s) for s in range(6)] for d in range(5)]
    cfg = TrainConfig(max_seq_len=24, batch_size=4)
    sync = Synchronous(BatchStream(docs, cfg, MaskingCollator(50, seed=3)))
    pre = Prefetcher(BatchStream(docs, cfg, MaskingCollator(50, seed=3)), depth=2, pin_memory=False)
    try:
        for _ in range(12):  # crosses epoch boundaries
            (a, sa), (b, sb) = sync.next(), pre.next()
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
            assert (sa["epoch"], sa["index"]) == (sb["epoch"], sb["index"])
            assert torch.equal(sa["collator"]["generator"], sb["collator"]["generator"])
    finally:
        pre.close()


def test_precision_auto_uses_bf16_only_where_it_is_native(monkeypatch, capsys):
    cpu = torch.device("cpu")
    assert autocast_dtype("fp32", cpu) is None
    monkeypatch.setattr(train, "cpu_has_native_bf16", lambda: True)
    assert autocast_dtype("auto", cpu) is torch.bfloat16
    monkeypatch.setattr(train, "cpu_has_native_bf16", lambda: False)
    assert autocast_dtype("auto", cpu) is None
    assert capsys.readouterr().err == ""
    # Asked for explicitly, bf16 is honoured, with a one-line note that fp32 would be faster here.
    assert autocast_dtype("bf16", cpu) is torch.bfloat16
    note = capsys.readouterr().err.strip().splitlines()
    assert len(note) == 1 and "precision=fp32" in note[0]
