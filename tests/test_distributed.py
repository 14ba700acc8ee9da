"""Data-parallel training: the global-batch arithmetic, and 2 gloo processes against 1 process on the CPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import TINY_SET, write_corpus

import nanobert
from nanobert.cli import main
from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import Instance
from nanobert.data.streams import shard_batch
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import IGNORE_INDEX

NO_DROPOUT = ["hidden_dropout_prob=0", "attention_probs_dropout_prob=0"]


def global_batch(rows: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    instances = []
    for r in range(rows):
        n_a, n_b = 2 + r % 5, 3 + (r * 7) % 4
        ids = torch.randint(5, 99, (n_a + n_b,), generator=g).tolist()
        instances.append(
            Instance([2, *ids[:n_a], 3, *ids[n_a:], 3], [0] * (n_a + 2) + [1] * (n_b + 1), r % 2)
        )
    return MaskingCollator(99, seed=seed)(instances)


@pytest.mark.parametrize("rows, world", [(8, 2), (7, 3), (2, 3), (5, 1)])
def test_shards_partition_the_batch_and_shares_sum_to_one(rows, world):
    batch = global_batch(rows)
    shards = [shard_batch(dict(batch), r, world) for r in range(world)]
    shares = torch.stack([s["loss_share"] for s in shards])
    assert torch.allclose(shares.sum(0), torch.ones(2))
    real = [s for s in shards if s["loss_share"][1] > 0]
    assert sum(len(s["input_ids"]) for s in real) == rows
    # Every global row lands on exactly one rank (strided), unchanged.
    for r, s in enumerate(real):
        assert torch.equal(s["input_ids"], batch["input_ids"][r::world])
        assert torch.equal(s["labels"], batch["labels"][r::world])
    for s in shards:  # a rank without rows still gets a (zero-weight) row, so it joins the all-reduce
        assert len(s["input_ids"]) >= 1


def test_weighted_rank_losses_give_the_global_gradient(tiny_config):
    """What DDP computes (the mean over ranks of world_size x each rank's weighted loss) is exactly the
    gradient of the single-process loss on the global batch."""
    model = BertForPreTraining(tiny_config).eval()  # no dropout: the two computations must match
    batch = global_batch(7)
    model.zero_grad()
    model(**batch).loss.backward()
    reference = [p.grad.clone() for p in model.parameters()]

    world = 3
    summed = [torch.zeros_like(p) for p in model.parameters()]
    for r in range(world):
        shard = shard_batch(dict(batch), r, world)
        share = shard.pop("loss_share")
        model.zero_grad()
        out = model(**shard)
        (world * (out.mlm_loss * share[0] + out.nsp_loss * share[1])).backward()
        for acc, p in zip(summed, model.parameters(), strict=True):
            acc += p.grad / world  # DDP's average
    for ref, got in zip(reference, summed, strict=True):
        assert torch.allclose(ref, got, atol=1e-6, rtol=1e-4)
    assert int((batch["labels"] != IGNORE_INDEX).sum()) > 0


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def torchrun(tmp_path: Path, nproc: int, *argv: str) -> subprocess.CompletedProcess:
    src = str(Path(nanobert.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd += ["-m", "nanobert", *argv]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)


def test_two_gloo_processes_match_one_process_and_resume_across_ranks(tmp_path):
    """torchrun, 2 CPU processes (gloo), global batch 8 = 2 x 4, against 1 process with batch 8: the same
    train loss at every step and the same held-out metrics; the 2-process run is stopped at step 5 and
    resumed (by 2 processes) from its checkpoint."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    common = ["--train", str(corpus), "--valid", str(valid), "--device", "cpu", "--quiet"]
    common += ["--max-steps", "10"]
    tiny = ["--set", *TINY_SET, *NO_DROPOUT]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["pretrain", *common, "--out", str(one), *tiny]) == 0
    tok = ["--tokenizer", str(one / "last")]  # WordPiece training is not bit-reproducible across processes
    first = torchrun(tmp_path, 2, "pretrain", *common, "--out", str(two), "--stop-after", "5", *tok, *tiny)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count('"held_out"') == 1  # only rank 0 prints its result
    state = torch.load(two / "last" / "trainer_state.pt", weights_only=True)
    assert state["run"]["step"] == 5 and len(state["rng"]["ranks"]) == 2
    second = torchrun(tmp_path, 2, "pretrain", "--resume", str(two / "last"), "--quiet")
    assert second.returncode == 0, second.stderr[-3000:]

    a, b = read_metrics(one), read_metrics(two)
    assert [(r["split"], r["step"]) for r in a] == [(r["split"], r["step"]) for r in b]  # rank 0 wrote once
    diffs = [abs(x["loss"] - y["loss"]) for x, y in zip(a, b, strict=True) if x["split"] == "train"]
    valid_diffs = [
        abs(x[k] - y[k])
        for x, y in zip(a, b, strict=True)
        if x["split"] == "valid"
        for k in ("mlm_loss", "nsp_loss")
    ]
    print(
        f"\nDDP 2 x gloo vs 1 process: {len(diffs)} steps, max |train loss diff| {max(diffs):.2e}, "
        f"max |held-out loss diff| {max(valid_diffs):.2e}"
    )
    assert len(diffs) == 10 and max(diffs) < 1e-4 and max(valid_diffs) < 1e-4
    assert [r["lr"] for r in a if r["split"] == "train"] == [r["lr"] for r in b if r["split"] == "train"]
    summary = json.loads((two / "summary.json").read_text())
    assert summary["hardware"]["world_size"] == 2 and summary["steps"] == 10


def test_the_causal_objective_trains_the_same_on_two_processes(tmp_path):
    """The next-word objective shares the data-parallel path: 2 gloo processes, global batch 8, the same
    train and held-out losses as 1 process."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    common = [
        "--train",
        str(corpus),
        "--device",
        "cpu",
        "--quiet",
        "--max-steps",
        "4",
        "--objective",
        "causal",
    ]
    tiny = ["--set", *TINY_SET, *NO_DROPOUT]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["pretrain", *common, "--out", str(one), *tiny]) == 0
    tok = ["--tokenizer", str(one / "last")]
    result = torchrun(tmp_path, 2, "pretrain", *common, "--out", str(two), *tok, *tiny)
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = read_metrics(one), read_metrics(two)
    assert [(r["split"], r["step"]) for r in a] == [(r["split"], r["step"]) for r in b]
    for x, y in zip(a, b, strict=True):
        key = "loss" if x["split"] == "train" else "lm_loss"
        assert abs(x[key] - y[key]) < 1e-4, (x, y)
