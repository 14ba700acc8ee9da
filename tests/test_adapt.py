"""Task-adaptive pretraining before fine-tuning: masked batches, the adapted encoder, its records, errors."""

import json
import os
import signal

import numpy as np
import pytest
import torch
from helpers import qa_checkpoint, train_tiny_checkpoint, write_squad_task
from test_finetune import assert_one_line_error, run_cli, write_task

from nanobert.checkpoints.checkpoint import load_pretraining_checkpoint, load_state_dict
from nanobert.config import FinetuneConfig
from nanobert.data.labelled import Encoded, TaskSpec, load_split
from nanobert.errors import NanobertError
from nanobert.finetuning.adapt import MaskedRows, adapt_encoder
from nanobert.finetuning.classification import build_classifier
from nanobert.tokenizer import CLS_ID, IGNORE_INDEX, MASK_ID, PAD_ID, SEP_ID, load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return train_tiny_checkpoint(tmp_path_factory.mktemp("pre"), steps=5)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    root = tmp_path_factory.mktemp("task")
    return write_task(root / "train.csv", 150, seed=0), write_task(root / "dev.csv", 37, seed=1)


def rows_of(lengths, seed=0):
    rng = np.random.default_rng(seed)
    ids = [[CLS_ID, *rng.integers(10, 60, n).tolist(), SEP_ID] for n in lengths]
    return Encoded(ids, [[0] * len(x) for x in ids])


def test_masked_rows_cover_every_row_once_per_epoch_in_length_buckets_and_are_seeded():
    lengths = np.random.default_rng(1).integers(1, 30, 101)
    data = rows_of(lengths)
    stream = MaskedRows(data, batch_size=8, seed=3, vocab_size=64)
    assert stream.batches_per_epoch() == 13  # 101 rows in batches of 8
    seen = np.concatenate(stream._order)
    assert sorted(seen.tolist()) == list(range(101))
    # sorted by length, so a batch spans a narrow band of lengths (the whole set spans 1-29)
    assert max(np.ptp(lengths[b]) for b in stream._order) <= 4
    again = MaskedRows(data, batch_size=8, seed=3, vocab_size=64)
    for _ in range(15):  # into the second epoch, which reshuffles
        (a, pos_a), (b, pos_b) = stream.next(), again.next()
        assert pos_a == pos_b and all(torch.equal(a[k], b[k]) for k in a)
    assert stream.state_dict() == {"epoch": 2, "index": 2}
    other = MaskedRows(data, batch_size=8, seed=4, vocab_size=64)
    assert any(not np.array_equal(x, y) for x, y in zip(stream._order, other._order, strict=True))


def test_masked_batches_mask_only_ordinary_tokens_at_the_standard_rate():
    data = rows_of([40] * 64)
    stream = MaskedRows(data, batch_size=64, seed=0, vocab_size=64)
    original = torch.tensor(data.input_ids)[stream._order[0]]  # (64, 42): the batch's rows, in its order
    batch, _ = stream.next()
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask", "labels"}  # no NSP label
    assert batch["input_ids"].shape == (64, 48)  # padded to a multiple of 8
    chosen = batch["labels"][:, :42] != IGNORE_INDEX
    assert (chosen.sum(1) == 6).all()  # round(0.15 * 40)
    assert torch.equal(batch["labels"][:, :42][chosen], original[chosen])
    assert not chosen[:, 0].any() and not chosen[:, 41].any()  # never [CLS] or [SEP]
    share_masked = (batch["input_ids"][:, :42][chosen] == MASK_ID).float().mean().item()
    assert 0.7 < share_masked < 0.9  # 80% [MASK]
    assert torch.equal(batch["input_ids"][:, :42][~chosen], original[~chosen])


def test_adapt_encoder_lowers_held_out_mlm_loss_and_hands_over_the_adapted_encoder(
    pretrained, task, tmp_path
):
    tokenizer = load_tokenizer(pretrained)
    spec = TaskSpec(text_col="sentence", label_col="label")
    train, labels = load_split(task[0], spec, tokenizer, 64, None)
    dev, _ = load_split(task[1], spec, tokenizer, 64, labels)
    base, _ = load_pretraining_checkpoint(pretrained)
    model = build_classifier(base, len(labels), "classification", False, seed=0)
    cfg = FinetuneConfig(adapt_epochs=6, adapt_learning_rate=5e-3, adapt_batch_size=16, device="cpu")
    cfg.precision = "fp32"
    before_weights = {k: v.clone() for k, v in base.bert.state_dict().items()}
    summary = adapt_encoder(base, model, tokenizer, train.data, dev.data, cfg, tmp_path, quiet=True)

    assert summary["steps"] == 6 * 10  # 150 rows in batches of 16
    assert summary["held_out_after"]["mlm_loss"] < summary["held_out_before"]["mlm_loss"] - 0.3
    adapted = load_state_dict(tmp_path / "adapt" / "best")
    moved = [k for k, v in before_weights.items() if not torch.equal(v, adapted["bert." + k])]
    assert len(moved) > len(before_weights) // 2
    # the task model now holds the adapted encoder, pooler included
    for k, v in model.bert.state_dict().items():
        assert torch.equal(v, adapted["bert." + k]), k
    records = [json.loads(line) for line in (tmp_path / "adapt" / "metrics.jsonl").read_text().splitlines()]
    held_out = [r for r in records if r["split"] == "held_out"]
    assert [r["step"] for r in held_out] == [0, 60]
    assert held_out[-1]["mlm_loss"] == summary["held_out_after"]["mlm_loss"]
    assert "nsp_accuracy" not in held_out[-1]  # no NSP in adaptation
    loaded, config = load_pretraining_checkpoint(tmp_path / "adapt" / "best")  # the tools read it
    assert config["adapted_with"]["adapt_epochs"] == 6


def test_finetune_with_adapt_epochs_records_the_adaptation(pretrained, task, tmp_path, capsys):
    argv = ["finetune", pretrained, "--train", task[0], "--dev", task[1], "--text-col", "sentence",
            "--label-col", "label", "--epochs", 1, "--adapt-epochs", 2, "--adapt-batch-size", 32,
            "--adapt-learning-rate", 1e-3, "--device", "cpu", "--precision", "fp32",
            "--out", tmp_path / "ft"]  # fmt: skip
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert "adapting the encoder to the task's text first: 2 epochs of masked-LM (10 steps of 32 rows)" in err
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    assert summary["adaptation"]["steps"] == 10 and summary["adaptation"]["learning_rate"] == 1e-3
    assert summary["finetune"]["adapt_epochs"] == 2
    assert (tmp_path / "ft" / "adapt" / "best" / "model.safetensors").is_file()
    assert (tmp_path / "ft" / "best" / "model.safetensors").is_file()


def test_adaptation_of_the_from_scratch_control_or_a_negative_count_is_a_one_line_error(
    pretrained, task, tmp_path, capsys
):
    base = ["finetune", pretrained, "--train", task[0], "--dev", task[1], "--text-col", "sentence",
            "--label-col", "label", "--device", "cpu", "--out", tmp_path / "ft"]  # fmt: skip
    code, _, err = run_cli(capsys, *base, "--adapt-epochs", 1, "--from-scratch")
    assert_one_line_error(code, err, "drop --adapt-epochs or --from-scratch")
    code, _, err = run_cli(capsys, *base, "--adapt-epochs", -1)
    assert_one_line_error(code, err, "adapt_epochs must be 0 (off) or more, got -1")
    assert not (tmp_path / "ft").exists()
    with pytest.raises(NanobertError, match="adapt_learning_rate must be positive"):
        FinetuneConfig(adapt_learning_rate=0)


def test_an_interrupt_during_adaptation_ends_the_job_before_fine_tuning(
    pretrained, task, tmp_path, capsys, monkeypatch
):
    collate = MaskedRows.collate

    def interrupted(self, index):  # Ctrl-C arrives during the first adaptation step
        if self.index == 0 and self.epoch == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return collate(self, index)

    monkeypatch.setattr(MaskedRows, "collate", interrupted)
    argv = ["finetune", pretrained, "--train", task[0], "--dev", task[1], "--text-col", "sentence",
            "--label-col", "label", "--adapt-epochs", 2, "--device", "cpu", "--precision", "fp32",
            "--out", tmp_path / "ft"]  # fmt: skip
    code, _, err = run_cli(capsys, *argv)
    assert code == 130, err
    assert "adaptation stopped at step 1" in err and err.endswith("nanobert: interrupted")
    assert (tmp_path / "ft" / "adapt" / "best" / "model.safetensors").is_file()  # what it adapted is kept
    assert not (tmp_path / "ft" / "best").exists()  # and no fine-tuning started
    adapted = load_state_dict(tmp_path / "ft" / "adapt" / "best")
    code, _, err = run_cli(capsys, *argv)  # the same command again must not replace it unasked
    assert_one_line_error(code, err, "already holds a run", "--overwrite")
    again = load_state_dict(tmp_path / "ft" / "adapt" / "best")
    assert all(torch.equal(adapted[k], again[k]) for k in adapted)


def test_qa_adapts_on_its_training_windows_and_scores_the_dev_windows(tmp_path, capsys):
    small = write_squad_task(tmp_path / "small.json", 12, 5, filler=1)
    argv = ["finetune", qa_checkpoint(tmp_path), "--task", "qa", "--train", small, "--dev", small,
            "--out", tmp_path / "ft", "--epochs", 1, "--max-seq-len", 32, "--doc-stride", 8,
            "--adapt-epochs", 1, "--adapt-batch-size", 8, "--device", "cpu", "--precision", "fp32",
            "--quiet"]  # fmt: skip
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    summary = json.loads((tmp_path / "ft" / "summary.json").read_text())
    adaptation = summary["adaptation"]
    windows = summary["examples"]["train_windows"]
    assert adaptation["steps"] == -(-windows // 8)  # one epoch of the training windows
    assert 0 <= adaptation["held_out_after"]["mlm_accuracy"] <= 1
    assert (tmp_path / "ft" / "adapt" / "best" / "config.json").is_file()


def test_adapted_rows_keep_their_padding_out_of_the_loss():
    data = rows_of([3, 20])
    batch, _ = MaskedRows(data, batch_size=2, seed=0, vocab_size=64).next()
    short = int(np.argmin([len(x) for x in data.input_ids]))
    row = batch["input_ids"][short]
    assert (row[5:] == PAD_ID).all() and (batch["labels"][short][5:] == IGNORE_INDEX).all()
    assert batch["input_ids"].shape[1] % 8 == 0  # padded to a multiple of 8
