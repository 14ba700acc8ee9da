"""examples/pretrain_minimal.py, the short path beside the engine, stays the engine's: the same first losses
on the toy corpus as `nanobert pretrain --data toy` in fp32, with plain PyTorch and the package's data and
model pieces only."""

import ast
import importlib.util
import json
from pathlib import Path

import pytest

from nanobert.cli import main as cli
from nanobert.data.corpus import load_documents
from nanobert.pretraining.recipes import build_configs
from nanobert.tokenizer import save_tokenizer, train_tokenizer

SCRIPT = Path(__file__).parents[1] / "examples" / "pretrain_minimal.py"
pytestmark = pytest.mark.usefixtures("one_thread")  # both runs sum in the same order


def load_script():
    spec = importlib.util.spec_from_file_location("pretrain_minimal", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_first_20_losses_are_the_engines(tmp_path, capsys):
    # One tokenizer for both, trained once (the same corpus trains the same one; this saves the time).
    tokenizer = tmp_path / "tokenizer"
    documents = load_documents("toy")
    save_tokenizer(train_tokenizer((s for d in documents for s in d), 200, min_frequency=1), tokenizer)
    run = tmp_path / "engine"
    argv = ["pretrain", "--data", "toy", "--out", str(run), "--device", "cpu", "--quiet"]
    # --stop-after keeps the full run's learning-rate schedule (2,000 steps at most, 50 warming up)
    argv += ["--tokenizer", str(tokenizer), "--stop-after", "20", "--set", "precision=fp32", "log_interval=1"]
    assert cli(argv) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    engine = [r["loss"] for r in records if r["split"] == "train"]
    assert len(engine) == 20

    losses = load_script().main(["--tokenizer", str(tokenizer), "--stop-after", "20", "--log-every", "10"])
    assert losses == pytest.approx(engine, abs=1e-5, rel=0)
    printed = capsys.readouterr().out
    assert "step    20 | loss" in printed and "masked-word accuracy" in printed


def test_its_defaults_are_the_toy_presets():
    """The loss test covers 20 steps of the warmup; the rest of the run (its length, the held peak and the
    decay) is the preset's because the script's defaults are."""
    _, train_cfg = build_configs("toy")
    args = load_script().parse_args([])
    assert (args.vocab_size, args.seq_len, args.batch_size, args.dupe_factor, args.seed) == (
        train_cfg.vocab_size,
        train_cfg.max_seq_len,
        train_cfg.batch_size,
        train_cfg.dupe_factor,
        train_cfg.seed,
    )
    assert (args.steps, args.lr, args.warmup, args.decay) == (
        train_cfg.max_steps,
        train_cfg.learning_rate,
        train_cfg.warmup_ratio,
        train_cfg.decay_ratio,
    )
    assert (train_cfg.min_lr_ratio, train_cfg.weight_decay, train_cfg.mask_prob) == (0.0, 0.01, 0.15)
    assert train_cfg.precision == "fp32"  # the script has no autocast


def test_it_is_short_and_uses_no_engine_module():
    source = SCRIPT.read_text()
    assert len(source.splitlines()) <= 200
    imported = {
        node.module.removeprefix("nanobert.")
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nanobert.")
    }
    # the tokenizer, the NSP pairs and masking collator, the model, AdamW and its schedule: nothing else
    assert imported == {
        "config",
        "data.corpus",
        "tokenizer",
        "data.nsp",
        "data.masking",
        "model",
        "engine.optimizer",
    }
