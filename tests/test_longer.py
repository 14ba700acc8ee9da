"""Train longer (`pretraining/longer.py`): a finished run keeps pre-decay/, the state before its decay began,
and `nanobert pretrain --resume RUN --max-steps N` (or `--time-budget S`, the run's new total) continues it
from there as one longer run, which the tests compare with a fresh run of that length step for step."""

import json
import shlex

import pytest
import torch
from helpers import TINY_SET, write_corpus

from nanobert.cli import main

# The recipes' schedule (the peak held, a decay over the last 30%) with no warmup, so that a run and a longer
# one plan the same rate for every step before the shorter one's decay; dropout draws from the RNG a
# checkpoint restores.
# one masking rate: the recipe's schedule (final_mask_prob) follows the plan of the moment, so a longer run is
# the longer plan's run step for step only without it (test_the_masking_schedule_follows_the_longer_plan)
HOLD = ["--set", "warmup_ratio=0", "decay_ratio=0.3", "hidden_dropout_prob=0.1", "final_mask_prob=none"]


def pretrain(tmp_path, out, *extra, quiet=True):
    corpus = write_corpus(tmp_path / "corpus.txt")
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    argv = ["pretrain", "--train", str(corpus), "--valid", str(valid), "--out", str(out), "--device", "cpu"]
    return main([*argv, *(["--quiet"] if quiet else []), "--set", *TINY_SET, *extra])


def records(run, split="train"):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if split in line]


def losses(run):
    return [(r["step"], r["loss"], r["lr"]) for r in records(run)]


def read(path):
    return json.loads(path.read_text())


def test_a_longer_run_continues_from_before_the_decay_as_one_run_of_its_length(tmp_path):
    """20 steps, then 30 in all, in the run's own folder and into a new one: each is the 30-step run, loss for
    loss to the last digit, with its held-out figures and best/; the 20-step run's best/, last/, records and
    summary are kept in RUN/ended-at-step-20, and a --out branch leaves the run as it was."""
    run, fresh, branch = tmp_path / "run", tmp_path / "fresh", tmp_path / "branch"
    assert pretrain(tmp_path, fresh, "--max-steps", "30", *HOLD) == 0
    tokenizer = ["--tokenizer", str(fresh / "last")]
    assert pretrain(tmp_path, run, "--max-steps", "20", *tokenizer, *HOLD) == 0
    pre_decay = read(run / "pre-decay" / "config.json")  # step 14 of 20 is the last at the peak rate
    assert (pre_decay["step"], pre_decay["in_decay"], pre_decay["pre_decay_step"]) == (14, False, 14)
    assert [r["lr"] for r in records(run)][13:15] == [1e-3, pytest.approx(1e-3 * 5 / 6)]
    shorter = {name: (run / name).read_text() for name in ("metrics.jsonl", "summary.json")}
    shorter_best = (run / "best" / "model.safetensors").read_bytes()

    assert main(["pretrain", "--resume", str(run), "--max-steps", "30", "--out", str(branch), "--quiet"]) == 0
    assert {name: (run / name).read_text() for name in shorter} == shorter  # a branch: the run untouched
    assert main(["pretrain", "--resume", str(run), "--max-steps", "30", "--quiet"]) == 0  # in place

    for longer in (run, branch):
        assert losses(longer) == losses(fresh)  # steps 1-30, bit for bit on the CPU
        assert records(longer, "valid") == records(fresh, "valid")
        summary, fresh_summary = read(longer / "summary.json"), read(fresh / "summary.json")
        assert summary["final"] == fresh_summary["final"] and summary["best"] == fresh_summary["best"]
        assert summary["train"] == fresh_summary["train"]  # the same plan: 30 steps, the decay over 9
        assert read(longer / "best" / "config.json")["step"] == summary["best"]["step"]
        assert read(longer / "pre-decay" / "config.json")["step"] == 21  # the longer run's own: 21 of 30
    kept = run / "ended-at-step-20"
    assert {name: (kept / name).read_text() for name in shorter} == shorter
    assert (kept / "best" / "model.safetensors").read_bytes() == shorter_best
    assert read(kept / "last" / "config.json")["step"] == 20
    assert not (branch / "ended-at-step-20").exists()


def test_the_masking_schedule_follows_the_longer_plan(tmp_path):
    """With the recipe's masking schedule (45% moving to 15%), the epochs of a longer run mask at the rate its
    own plan gives them: the last epoch of 20 then 30 steps at a rate only the 30-step plan reaches."""
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "20") == 0
    assert main(["pretrain", "--resume", str(run), "--max-steps", "30", "--quiet"]) == 0
    data = torch.load(run / "last" / "trainer_state.pt", weights_only=False)["data"]

    def rate(done: float) -> float:  # an epoch that starts when `done` of the run is done
        return 0.45 + (0.15 - 0.45) * done

    assert data["epoch"] >= 3 and data["mask_prob"] < rate(19 / 20)  # below the 20-step plan's last rate
    assert any(data["mask_prob"] == pytest.approx(rate(step / 30)) for step in range(20, 30))


def test_a_longer_run_keeps_the_warmup_it_had(tmp_path):
    """A longer total would stretch a warmup given as a share of the run past the state it continues, and
    the rate would fall back; the longer run keeps the warmup's length (2 of 20 steps, 0.01 of 200)."""
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "20", "--set", "warmup_ratio=0.1", "decay_ratio=0.3") == 0
    argv = ["pretrain", "--resume", str(run), "--max-steps", "200", "--stop-after", "20", "--quiet"]
    assert main(argv) == 0
    train = read(run / "last" / "config.json")["train"]
    assert train["max_steps"] == 200 and train["warmup_ratio"] == pytest.approx(0.01)
    assert [r["lr"] for r in records(run)][14:20] == [1e-3] * 6  # steps 15-20 at the peak, as before 14


def test_a_time_budget_run_goes_on_to_its_new_end(tmp_path):
    """The decay of a time budget begins at 70% of its seconds: pre-decay/ is the state there, and a longer
    budget continues from it at the peak rate until 70% of the new budget. Four seconds, not two: on a
    machine shared with other work a first step can take most of two, and no step would come before the
    decay."""
    run = tmp_path / "run"
    assert (
        pretrain(tmp_path, run, "--time-budget", "4", "--set", "decay_ratio=0.3", "eval_interval=1000") == 0
    )

    def state(name):
        return torch.load(run / name / "trainer_state.pt", weights_only=True)["run"]

    first, ended = state("pre-decay"), read(run / "summary.json")["steps"]
    assert first["train_time"] >= 2.8 and first["step"] == first["pre_decay_step"] < ended
    assert main(["pretrain", "--resume", str(run), "--time-budget", "8", "--quiet"]) == 0
    lr = {r["step"]: r["lr"] for r in records(run)}
    summary, second = read(run / "summary.json"), state("pre-decay")
    assert summary["train"]["time_budget"] == 8 and summary["train_time_s"] >= 8
    assert second["train_time"] >= 5.6 and second["step"] > first["step"]
    assert lr[first["step"] + 1] == lr[second["step"]] == 1e-3 > lr[second["step"] + 1]  # the peak again
    assert read(run / f"ended-at-step-{ended}" / "summary.json")["train"]["time_budget"] == 4


def test_what_a_longer_run_refuses_is_one_line_and_leaves_the_run_as_it_was(tmp_path, capsys):
    run, bert = tmp_path / "run", tmp_path / "bert"
    assert pretrain(tmp_path, run, "--max-steps", "12", "--set", "decay_ratio=0.3") == 0
    assert pretrain(tmp_path, bert, "--max-steps", "12", "--set", "decay_ratio=1") == 0  # BERT's: no hold
    before = {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}
    capsys.readouterr()
    refused = [
        ([str(run), "--max-steps", "12"], "--max-steps 12 is not longer than"),
        ([str(run), "--max-steps", "8"], "so give more than 12"),
        ([str(run), "--time-budget", "60"], "by --max-steps (12); give its longer total as --max-steps"),
        ([str(run), "--max-steps", "40", "--seed", "5"], "own seed (1337)"),
        ([str(run)], f"nothing is left to train; to train longer as one run, give the run its new total: "
                     f"nanobert pretrain --resume {run} --max-steps 48"),
        ([str(bert), "--max-steps", "40"], "keeps no checkpoint from before its decay began (pre-decay/"),
    ]  # fmt: skip
    for argv, needle in refused:
        assert main(["pretrain", "--resume", *argv, "--quiet"]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert {p: p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()} == before


def test_the_run_ends_with_the_command_that_trains_it_longer(tmp_path, capsys):
    """The closing lines name the exact command once (in the next-sentence note when that is said), and that
    command continues the run from pre-decay/."""
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "10", "--set", "decay_ratio=0.3", quiet=False) == 0
    err = capsys.readouterr().err
    command = f"nanobert pretrain --resume {run} --max-steps 40"
    assert err.count(command) == 1 and command in err.strip().splitlines()[-1], err
    assert main([*shlex.split(command)[1:], "--stop-after", "8", "--quiet"]) == 0
    assert read(run / "last" / "config.json")["step"] == 8 and (run / "ended-at-step-10").is_dir()


def test_the_next_sentence_note_names_the_way_to_train_longer():
    from nanobert.objectives.mlm_nsp import nsp_not_learned

    batches = [{"next_sentence_label": torch.tensor([0, 0, 1])}]
    command = "nanobert pretrain --resume runs/x --time-budget 3600"
    assert nsp_not_learned({"nsp_accuracy": 0.6}, batches, command).endswith(f"for them ({command})")
