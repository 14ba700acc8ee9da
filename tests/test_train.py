import json

import pytest
import torch
from helpers import TINY_MODEL, TINY_SET, write_corpus

from nanobert.cli import main
from nanobert.config import ModelConfig

ARTEFACTS = ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt", "trainer_state.pt")


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


SCHEDULE = ["short_seq_len=16", "short_seq_share=0.6"]


@pytest.mark.parametrize("schedule", [[], SCHEDULE], ids=["", "short-windows-first"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, schedule):
    full, split = tmp_path / "full", tmp_path / "split"
    # dropout draws from the RNG the checkpoint restores; with the schedule the switch to full-length
    # windows comes after the resume, so the resumed run must pick it up from its progress
    set_dropout = ["--set", "hidden_dropout_prob=0.1", *schedule]
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
    # Stopped between evaluations (eval_interval 5): the stop evaluates once more, an evaluation the
    # uninterrupted run never makes, so it is kept in the history but not offered to best/.
    stopped = json.loads((split / "summary.json").read_text())
    assert stopped["steps"] == 6 and stopped["final"]["step"] == 6 and stopped["best"]["step"] == 5

    def shape():
        data = torch.load(split / "last" / "trainer_state.pt", weights_only=False)["data"]
        return data["seq_len"], data["batch_size"]

    assert shape() == ((16, 24) if schedule else (48, 8))  # short windows, 3x the rows: as many tokens
    assert main(["pretrain", "--resume", str(split / "last"), "--quiet"]) == 0

    def losses(run):
        return [(r["step"], r["loss"], r["lr"]) for r in read_metrics(run) if r["split"] == "train"]

    assert losses(split) == losses(full)  # step for step, bit for bit on the CPU

    def final(run):
        return json.loads((run / "summary.json").read_text())["final"]

    assert final(split) == final(full)
    assert shape() == (48, 8)
    best = lambda run: json.loads((run / "summary.json").read_text())["best"]  # noqa: E731
    assert best(split) == best(full)


def test_best_margin_reaches_the_runs_choice_of_best(tmp_path, capsys):
    """A margin as wide as the metric's range lets every evaluation with a lower held-out loss take best/;
    in this short run each has, so best/ is the last one."""
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "12", "--set", "best_margin=0.99") == 0
    summary = json.loads((run / "summary.json").read_text())
    best, last = (json.loads((run / k / "config.json").read_text()) for k in ("best", "last"))
    assert [r["step"] for r in read_metrics(run) if r["split"] == "valid"] == [5, 10, 12]
    assert summary["best"]["step"] == best["step"] == 12
    assert last["train"]["best_margin"] == pytest.approx(0.99)  # a resume keeps the run's rule
    capsys.readouterr()
    assert main(["pretrain", "--train", "x.txt", "--set", "best_margin=-0.1"]) == 2
    assert "best_margin must be in [0, 1), got -0.1" in capsys.readouterr().err
    # A resume under another rule would name a best/ that is not the one on disk: refused, the run untouched.
    for change in ("best_margin=0", "max_seq_len=32", "eval_seed=5"):
        resume = ["pretrain", "--resume", str(run / "last"), "--max-steps", "14", "--set", change]
        assert main(resume) == 2, change
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "cannot change" in err and change.split("=")[0] in err
    assert json.loads((run / "summary.json").read_text()) == summary
    assert main(["pretrain", "--resume", str(run / "last"), "--max-steps", "14", "--quiet",
                 "--set", "best_margin=0.99"]) == 0  # fmt: skip


def test_time_budget_ends_the_run(tmp_path):
    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--time-budget", "3") == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] > 0 and summary["train_time_s"] < 10


@pytest.mark.parametrize("threads", [1, 2])
def test_toy_corpus_is_memorised(tmp_path, capsys, threads):
    """The 30-second demo: `nanobert pretrain --data toy` memorises the built-in corpus, stops there (the
    first evaluation with every held-out accuracy at 1, `stop_at_accuracy`), and best/ holds both heads at it
    whatever the thread count (the summation order moves which evaluation first reaches
    MLM accuracy 1.0; a tie goes to the later, lower-loss one, where NSP has caught up)."""
    run = tmp_path / "toy"
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert main(["pretrain", "--data", "toy", "--out", str(run), "--device", "cpu"]) == 0
    finally:
        torch.set_num_threads(before)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best"]["step"] == json.loads((run / "best" / "config.json").read_text())["step"]
    err = capsys.readouterr().err
    assert summary["best_reason"] and "nanobert: best/ is step" in err and "not learned yet" not in err
    assert main(["evaluate", str(run / "best"), "--device", "cpu"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["mlm_accuracy"] == 1.0 and metrics["nsp_accuracy"] == 1.0, metrics
    # it ends at the first evaluation that finds the corpus memorised, not at a step count
    assert summary["stop_reason"] == "every held-out accuracy reached 1", summary["stop_reason"]
    assert summary["best"]["step"] == summary["steps"] < 2000


def test_the_recipe_keeps_the_pair_by_default_and_another_start_steps_aside(tmp_path, capsys):
    """The recipe pretrains with keep_roles on: its positions' "what" half is still zero after training, the
    run's config says so and the log says what is kept. With three heads the kept rows are the last two
    heads' (what roles_init gives words). A start without roles steps aside with a line in the log instead
    of refusing; asking for keep_roles with such a start is refused in one line."""
    from safetensors.torch import load_file

    from nanobert.initialization import what_rows

    def run(name, *extra):
        out = tmp_path / name
        argv = ["pretrain", "--train", str(write_corpus(tmp_path / "corpus.txt")), "--out", str(out)]
        code = main([*argv, "--device", "cpu", "--max-steps", "3", "--set", *TINY_SET, *extra])
        return code, out, capsys.readouterr().err

    code, out, err = run("kept", "hidden_size=30", "num_attention_heads=3")
    assert code == 0 and "the pair is kept (keep_roles)" in err
    config = json.loads((out / "last" / "config.json").read_text())
    assert config["train"]["keep_roles"] is True and config["model"]["attention_init"] == "roles"
    weights = load_file(out / "last" / "model.safetensors")
    positions = weights["bert.embeddings.position_embeddings.weight"]
    assert positions[:, 15:].abs().max() == 0 and positions[:, :15].abs().max() > 0
    qkv = weights["bert.layers.0.attention.qkv.weight"]
    rows = what_rows(ModelConfig(**config["model"]))
    assert rows == slice(10, 30) and torch.equal(qkv[rows], qkv[30 + rows.start : 30 + rows.stop])

    code, out, err = run("mimetic", "attention_init=mimetic")
    assert code == 0 and "keep_roles steps aside: attention_init 'mimetic'" in err
    assert json.loads((out / "last" / "config.json").read_text())["train"]["keep_roles"] is False
    code, out, err = run("off", "keep_roles=false")
    assert code == 0 and "keep_roles=false" in err and "the pair is kept" not in err
    code, _, err = run("asked", "attention_init=mimetic", "keep_roles=true")
    assert code == 2 and "keep_roles needs the roles start" in err and "Traceback" not in err
    assert not (tmp_path / "asked").exists()  # refused before any work: no folder, no tokenizer


def test_a_weighted_next_sentence_term_scales_its_gradient_and_the_log_says_so(tmp_path, capsys):
    """nsp_loss_weight multiplies the NSP term in the loss that is backpropagated (the logged terms stay
    unweighted), and a run with it says so in its log; BERT's plain sum says nothing."""
    from nanobert.config import TrainConfig
    from nanobert.model import BertForPreTraining
    from nanobert.objectives.mlm_nsp import mlm_nsp_loss, mlm_nsp_sample

    cfg = TrainConfig(batch_size=3, max_seq_len=16, seed=5)
    model = BertForPreTraining(ModelConfig(**TINY_MODEL))
    model.eval()  # no dropout: the two forwards see the same function
    heads = [p for n, p in model.named_parameters() if n.startswith("nsp_head")]
    grads = {}
    for weight in (1.0, 4.0):
        model.zero_grad()
        out = mlm_nsp_loss(model, mlm_nsp_sample(cfg, TINY_MODEL["vocab_size"]), nsp_weight=weight)
        torch.testing.assert_close(out["loss"], out["mlm_loss"] + weight * out["nsp_loss"])
        out["loss"].backward()
        grads[weight] = [p.grad.clone() for p in heads]
    assert heads and all(torch.allclose(4 * a, b) for a, b in zip(grads[1.0], grads[4.0], strict=True))

    argv = ["pretrain", "--train", str(write_corpus(tmp_path / "corpus.txt")), "--device", "cpu"]
    code = main(
        [*argv, "--out", str(tmp_path / "w"), "--max-steps", "2", "--set", *TINY_SET, "nsp_loss_weight=4"]
    )
    err = capsys.readouterr().err
    assert code == 0 and "the loss is MLM + 4 x NSP (nsp_loss_weight" in err
    assert (
        json.loads((tmp_path / "w" / "last" / "config.json").read_text())["train"]["nsp_loss_weight"] == 4.0
    )
    code = main([*argv, "--out", str(tmp_path / "plain"), "--max-steps", "2", "--set", *TINY_SET])
    assert code == 0 and "nsp_loss_weight" not in capsys.readouterr().err


def test_the_log_says_when_next_sentence_is_not_learned_yet():
    """A head that answers one label for every pair scores the majority label's share: the run's last lines
    say so and what to do, instead of leaving a user to read 0.57 as a weak model."""
    from nanobert.objectives.mlm_nsp import nsp_not_learned

    batches = [
        {"next_sentence_label": torch.tensor([0, 0, 1])},
        {"next_sentence_label": torch.tensor([0, 1, 0, 0])},
    ]
    note = nsp_not_learned({"step": 9, "nsp_accuracy": 0.70}, batches)  # 5 of 7 pairs follow: 0.714
    assert note and "0.700" in note and "0.714" in note and "--time-budget" in note
    assert nsp_not_learned({"step": 9, "nsp_accuracy": 0.35}, batches)  # worse than one label: not learned
    assert nsp_not_learned({"step": 9, "nsp_accuracy": 0.75}, batches) is None  # above the share + 0.02
    assert nsp_not_learned({"step": 9, "lm_accuracy": 0.5}, batches) is None  # no NSP figure (causal)
    assert nsp_not_learned(None, batches) is None and nsp_not_learned({"nsp_accuracy": 0.5}, []) is None


# ----------------------------------------------------------------------------------------------------------
# Bugs the shared engine fixed, each with the test that failed before


def test_resume_into_a_new_out_continues_the_run_exactly(tmp_path, capsys):
    """`--resume A/last --out B` used to end in a traceback (B/metrics.jsonl did not exist)."""
    full, first, second = tmp_path / "full", tmp_path / "A", tmp_path / "B"
    set_dropout = ["--set", "hidden_dropout_prob=0.1"]
    assert pretrain(tmp_path, full, "--max-steps", "12", *set_dropout) == 0
    tokenizer = ["--tokenizer", str(full / "last")]
    assert pretrain(tmp_path, first, "--max-steps", "12", "--stop-after", "6", *tokenizer, *set_dropout) == 0
    first_records = (first / "metrics.jsonl").read_text()
    assert main(["pretrain", "--resume", str(first / "last"), "--out", str(second), "--quiet"]) == 0
    assert (first / "metrics.jsonl").read_text() == first_records  # the source run is left as it was

    def losses(run):
        return [(r["step"], r["loss"], r["lr"]) for r in read_metrics(run) if r["split"] == "train"]

    assert losses(second) == losses(full)  # the whole run, steps 1-12, bit for bit
    summary = json.loads((second / "summary.json").read_text())
    assert summary["final"] == json.loads((full / "summary.json").read_text())["final"]
    assert (second / "last" / "config.json").is_file() and (second / "best" / "config.json").is_file()
    # B now holds a run: resuming into it again without --overwrite is refused
    capsys.readouterr()
    assert main(["pretrain", "--resume", str(first / "last"), "--out", str(second), "--quiet"]) == 2
    assert "already holds a run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "kind",
    ["--data FILE", "--train FILE", "--train/--valid", "--data toy", "--prepared", "causal --prepared"],
)
def test_evaluate_reproduces_the_runs_own_final_evaluation(tmp_path, capsys, kind):
    """`nanobert evaluate RUN/last` scores the split the run held out, whatever named the data (it used to
    score the whole file for --data FILE, and to fail for --train FILE alone)."""
    corpus = write_corpus(tmp_path / "corpus.txt")
    valid = write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)
    data = {
        "--data FILE": ["--data", str(corpus)],
        "--train FILE": ["--train", str(corpus)],
        "--train/--valid": ["--train", str(corpus), "--valid", str(valid)],
        "--data toy": ["--data", "toy"],
        "--prepared": ["--prepared", str(tmp_path / "prep")],
        "causal --prepared": ["--prepared", str(tmp_path / "prep"), "--objective", "causal"],
    }[kind]
    if kind.endswith("--prepared"):
        argv = ["prepare", "--data", str(corpus), "--valid", str(valid), "--out", str(tmp_path / "prep")]
        assert main([*argv, "--vocab-size", "120", "--quiet"]) == 0
    run = tmp_path / "run"
    argv = ["pretrain", *data, "--out", str(run), "--max-steps", "3", "--device", "cpu", "--quiet"]
    assert main([*argv, "--set", *[s for s in TINY_SET if kind != "--data toy" or "vocab" not in s]]) == 0
    capsys.readouterr()
    summary = json.loads((run / "summary.json").read_text())
    assert main(["evaluate", str(run / "last"), "--device", "cpu"]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    keys = (
        ("lm_loss", "lm_accuracy")
        if "causal" in kind
        else ("mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy")
    )
    for key in keys:
        assert evaluated[key] == pytest.approx(summary["final"][key], abs=1e-6), key


def test_num_workers_is_gone(capsys):
    """TrainConfig.num_workers was read nowhere; an option that does nothing is an unknown key now."""
    assert main(["pretrain", "--data", "toy", "--set", "num_workers=2"]) == 2
    assert "unknown key 'num_workers'" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------
# The causal objective on the same engine


def test_the_toy_corpus_is_memorised_by_the_causal_objective(tmp_path, capsys):
    """`--data toy --objective causal`, then greedy generation from a toy prompt gives the toy text."""
    run = tmp_path / "toy"
    argv = ["pretrain", "--data", "toy", "--objective", "causal", "--out", str(run), "--device", "cpu"]
    assert main([*argv, "--quiet", "--set", "precision=fp32"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["final"]) == {"step", "lm_loss", "lm_accuracy", "lm_perplexity"}
    assert json.loads((run / "best" / "config.json").read_text())["kind"] == "causal_lm"
    capsys.readouterr()
    assert main(["generate", str(run / "best"), "the cat sleeps", "--temperature", "0", "--json"]) == 0
    generated = json.loads(capsys.readouterr().out)
    assert generated["text"].startswith(
        "the cat sleeps on the warm mat. she wakes when the sun comes in. then the cat drinks her milk."
    ), generated["text"]


def test_a_causal_run_resumes_bit_for_bit(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    causal = ["--objective", "causal", "--set", "hidden_dropout_prob=0.1"]
    assert pretrain(tmp_path, full, "--max-steps", "10", *causal) == 0
    tokenizer = ["--tokenizer", str(full / "last")]
    assert pretrain(tmp_path, split, "--max-steps", "10", "--stop-after", "4", *tokenizer, *causal) == 0
    assert main(["pretrain", "--resume", str(split / "last"), "--quiet"]) == 0

    def losses(run):
        return [
            (r["step"], r["loss"], r["lm_loss"], r["lr"]) for r in read_metrics(run) if r["split"] == "train"
        ]

    assert losses(split) == losses(full) and len(losses(full)) == 10
    final = lambda run: json.loads((run / "summary.json").read_text())["final"]  # noqa: E731
    assert final(split) == final(full)


# ----------------------------------------------------------------------------------------------------------
# Precision chosen by measurement, and the GPU user's path where a CPU can run it


def test_precision_auto_is_measured_recorded_and_evaluated_with(tmp_path, capsys):
    run = tmp_path / "run"
    argv = [
        "pretrain",
        "--train",
        str(write_corpus(tmp_path / "c.txt")),
        "--out",
        str(run),
        "--max-steps",
        "3",
    ]
    assert main([*argv, "--device", "cpu", "--set", *TINY_SET, "precision=auto"]) == 0
    err = capsys.readouterr().err
    chosen = json.loads((run / "last" / "config.json").read_text())["precision"]
    assert chosen in ("fp32", "bf16") and f"nanobert: precision {chosen} (auto: a step took" in err
    assert main(["evaluate", str(run / "last"), "--device", "cpu"]) == 0  # in the precision the run chose
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["mlm_loss"] == pytest.approx(
        json.loads((run / "summary.json").read_text())["final"]["mlm_loss"]
    )


def test_compile_true_trains_and_matches_eager(tmp_path, monkeypatch):
    """`--set compile=true` (the GPU recipe's switch) runs the same steps through torch.compile; here with
    the light aot_eager backend, which traces the model as the GPU's inductor does, in seconds."""
    import functools

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    runs = {}
    for compiled in ("false", "true"):
        runs[compiled] = tmp_path / compiled
        tokenizer = ["--tokenizer", str(runs["false"] / "last")] if compiled == "true" else []
        assert (
            pretrain(tmp_path, runs[compiled], "--max-steps", "4", *tokenizer, "--set", f"compile={compiled}")
            == 0
        )
    eager = [r["loss"] for r in read_metrics(runs["false"]) if r["split"] == "train"]
    compiled = [r["loss"] for r in read_metrics(runs["true"]) if r["split"] == "train"]
    assert len(compiled) == 4 and compiled == pytest.approx(eager, abs=1e-4)
    config = json.loads((runs["true"] / "last" / "config.json").read_text())
    assert config["train"]["compile"] is True  # and the checkpoint holds plain names (no _orig_mod.)
    from nanobert.checkpoints.checkpoint import load_pretraining_checkpoint

    load_pretraining_checkpoint(runs["true"] / "last")


def test_bf16_autocast_trains_and_resumes_exactly(tmp_path):
    full, split = tmp_path / "full", tmp_path / "split"
    bf16 = ["--set", "precision=bf16", "hidden_dropout_prob=0.1"]
    assert pretrain(tmp_path, full, "--max-steps", "8", *bf16) == 0
    tokenizer = ["--tokenizer", str(full / "last")]
    assert pretrain(tmp_path, split, "--max-steps", "8", "--stop-after", "4", *tokenizer, *bf16) == 0
    assert main(["pretrain", "--resume", str(split / "last"), "--quiet"]) == 0
    losses = lambda run: [(r["step"], r["loss"]) for r in read_metrics(run) if r["split"] == "train"]  # noqa: E731
    assert losses(split) == losses(full) and len(losses(full)) == 8
    assert json.loads((full / "last" / "config.json").read_text())["precision"] == "bf16"


def test_resume_refuses_to_rewrite_a_later_run_or_to_train_nothing(tmp_path, capsys):
    """Continuing an earlier checkpoint in its own run folder would replace the later last/ and the records
    after it; a finished run has nothing left to train (resuming it only duplicated the last evaluation)."""
    import shutil

    run = tmp_path / "run"
    assert pretrain(tmp_path, run, "--max-steps", "12", "--stop-after", "6") == 0
    shutil.copytree(run / "last", run / "early")  # a checkpoint at step 6, as best/ may be
    assert main(["pretrain", "--resume", str(run / "last"), "--quiet"]) == 0  # on to step 12
    records, last = (run / "metrics.jsonl").read_text(), (run / "last" / "config.json").read_text()
    capsys.readouterr()
    refused = [
        (["--resume", str(run / "early")], "went on to step 12"),
        (["--resume", str(run / "last")], "at step 12 of a run of 12 steps: nothing is left to train"),
        (["--resume", str(run / "last"), "--max-steps", "4"], "nothing is left to train"),
        (["--resume", str(run / "last"), "--out", str(tmp_path / "never")], "nothing is left to train"),
        (["--resume", str(run / "last"), "--preset", "toy"], "--preset applies to a new run"),
        (["--resume", str(run / "early"), "--out", str(tmp_path / "never"), "--stop-after", "6"], "not past"),
    ]
    for argv, needle in refused:
        assert main(["pretrain", *argv, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert (run / "metrics.jsonl").read_text() == records
    assert (run / "last" / "config.json").read_text() == last and not (tmp_path / "never").exists()
    branch = tmp_path / "branch"  # --out NEW branches off and leaves the run whole
    assert main(["pretrain", "--resume", str(run / "early"), "--out", str(branch), "--quiet"]) == 0
    assert (run / "metrics.jsonl").read_text() == records
    assert json.loads((branch / "last" / "config.json").read_text())["step"] == 12


def test_an_output_that_is_a_file_or_an_endless_length_is_one_line(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt")
    (tmp_path / "one.txt").write_text("one document only . no blank line between its sentences .\n")
    for argv, needle in [
        (["--out", str(tmp_path / "o"), "--valid", str(tmp_path / "one.txt")], "the held-out split has 1"),
        (["--out", str(corpus), "--max-steps", "2"], "is a file; give a directory"),
        (["--out", str(tmp_path / "e"), "--epochs", "inf"], "epochs must be positive and finite"),
    ]:
        assert main(["pretrain", "--train", str(corpus), "--quiet", "--set", *TINY_SET, *argv]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "e").exists()


def test_depth_follows_the_steps_the_plan_gives(tmp_path, capsys, monkeypatch):
    """shallow_below_steps: below the threshold the run trains half the layers, initialised and trained
    exactly as a run asking for that depth; at or above it, the layers asked for. A resume keeps the depth."""
    from safetensors.torch import load_file

    import nanobert.pretraining.size_rule

    def layers(run):
        return json.loads((run / "last" / "config.json").read_text())["model"]["num_hidden_layers"]

    assert pretrain(tmp_path, tmp_path / "auto", "--max-steps", "6", "--set", "shallow_below_steps=1000") == 0
    tokenizer = ["--tokenizer", str(tmp_path / "auto" / "last")]  # WordPiece may break ties differently
    assert (
        pretrain(tmp_path, tmp_path / "asked", "--max-steps", "6", *tokenizer, "--set", "num_hidden_layers=1")
        == 0
    )
    assert layers(tmp_path / "auto") == 1
    auto, asked = (load_file(tmp_path / r / "last" / "model.safetensors") for r in ("auto", "asked"))
    assert auto.keys() == asked.keys() and all(torch.equal(auto[k], asked[k]) for k in auto)
    resumed = ["pretrain", "--resume", str(tmp_path / "auto" / "last"), "--max-steps", "8", "--quiet"]
    assert main(resumed) == 0 and layers(tmp_path / "auto") == 1
    assert pretrain(tmp_path, tmp_path / "deep", "--max-steps", "6", "--set", "shallow_below_steps=1") == 0
    assert layers(tmp_path / "deep") == 2
    # a time budget's steps come from a timed step (here a fixed 0.5 s), and the log says how it chose
    capsys.readouterr()
    monkeypatch.setattr(nanobert.pretraining.size_rule, "step_seconds", lambda *step: 0.5)
    timed = tmp_path / "timed"
    argv = ["pretrain", "--train", str(tmp_path / "corpus.txt"), "--out", str(timed), "--device", "cpu"]
    assert main([*argv, "--time-budget", "2", "--set", *TINY_SET, "shallow_below_steps=1000"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nanobert: depth")]
    assert layers(timed) == 1 and len(said) == 1, said
    assert said[0].startswith("nanobert: depth 1 layers (auto: 2 layers would make ~4 steps in 2 s at 500 ms")
    assert "below 1,000 steps half the layers learn more in the same time" in said[0]


def test_a_halved_run_trains_at_the_short_run_rate_warmed_up_over_its_floor(tmp_path, capsys, monkeypatch):
    """shallow_learning_rate: the run the depth rule halves trains at that rate, warming up over at least
    SHORT_RUN_WARMUP_STEPS (capped at half the run), exactly as a run asking for that depth, rate and warm-up;
    the saved config says what it trained with and the log says why. A deep run keeps its own rate."""
    from safetensors.torch import load_file

    import nanobert.pretraining.size_rule

    def trained(run):
        train = json.loads((run / "last" / "config.json").read_text())["train"]
        return train["learning_rate"], train["warmup_ratio"]

    short = ["--set", "shallow_below_steps=1000", "shallow_learning_rate=3e-3"]
    assert pretrain(tmp_path, tmp_path / "auto", "--max-steps", "6", *short) == 0
    assert trained(tmp_path / "auto") == (3e-3, 0.5)  # 180 warm-up steps of 6, capped at half of them
    asked = [
        "--tokenizer",
        str(tmp_path / "auto" / "last"),
        "--set",
        "num_hidden_layers=1",
        "learning_rate=3e-3",
    ]
    assert pretrain(tmp_path, tmp_path / "asked", "--max-steps", "6", *asked, "warmup_ratio=0.5") == 0
    auto, asked = (load_file(tmp_path / r / "last" / "model.safetensors") for r in ("auto", "asked"))
    assert auto.keys() == asked.keys() and all(torch.equal(auto[k], asked[k]) for k in auto)
    deep = ["--set", "shallow_below_steps=1", "shallow_learning_rate=3e-3", "learning_rate=7e-4"]
    assert pretrain(tmp_path, tmp_path / "deep", "--max-steps", "6", *deep) == 0
    assert trained(tmp_path / "deep") == (7e-4, 0.06)
    # a time budget's floor counts the halved model's own timed steps: 1,000 of 2 ms in 2 s, so 18% warm-up
    # (the two-layer timing, 4 ms, would give 36%)
    capsys.readouterr()

    def two_ms_a_layer(model, *step):
        return 0.002 * model.config.num_hidden_layers

    monkeypatch.setattr(nanobert.pretraining.size_rule, "step_seconds", two_ms_a_layer)
    argv = [
        "pretrain",
        "--train",
        str(tmp_path / "corpus.txt"),
        "--out",
        str(tmp_path / "timed"),
        "--device",
        "cpu",
    ]
    assert main([*argv, "--time-budget", "2", "--set", *TINY_SET, *short[1:]]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nanobert: depth")]
    assert trained(tmp_path / "timed") == (3e-3, 0.18) and len(said) == 1, said
    assert "at a peak rate of 0.003, warming up over ~180 steps (shallow_learning_rate" in said[0]
    # from SHORT_RUN_STEPS of its own steps (here ~10,000 of 0.2 ms) the halved run keeps the configured rate
    monkeypatch.setattr(
        nanobert.pretraining.size_rule,
        "step_seconds",
        lambda model, *step: 0.0002 * 2 ** (model.config.num_hidden_layers - 1),
    )
    capsys.readouterr()
    long = [*argv[:4], str(tmp_path / "long"), "--device", "cpu", "--time-budget", "2", "--set", *TINY_SET]
    assert main([*long, "shallow_below_steps=20000", "shallow_learning_rate=3e-3", "learning_rate=7e-4"]) == 0
    said = [
        line for line in capsys.readouterr().err.splitlines() if line.startswith("nanobert: depth 1 layers")
    ]
    assert trained(tmp_path / "long") == (7e-4, 0.06) and len(said) == 1, said
    assert (
        "~10,000 of their steps at a peak rate of 0.0007 (shallow_learning_rate is for fewer than 5,000)"
        in said[0]
    )


def test_the_short_run_rate_keeps_a_longer_warm_up_and_caps_a_short_one():
    from nanobert.config import TrainConfig
    from nanobert.pretraining.size_rule import short_run_rate

    cfg = TrainConfig(learning_rate=1e-3, warmup_ratio=0.06, shallow_learning_rate=2e-3)
    for steps, warmup_ratio in [(5529, 0.06), (1000, 0.18), (99, 0.5)]:
        chosen = short_run_rate(cfg, steps)
        assert (chosen.learning_rate, chosen.warmup_ratio) == (2e-3, warmup_ratio)


def test_a_gpu_first_run_trains_the_largest_shape_that_makes_its_steps(tmp_path, capsys, monkeypatch):
    """min_planned_steps: each shape of GPU_SHAPES is timed (here: fixed times, largest slowest) and the
    largest that leaves that many steps in the budget trains; the log says which and why."""
    import nanobert.pretraining.size_rule
    from nanobert.pretraining.recipes import GPU_SHAPES, MODEL_PRESETS

    timed = []

    def fake_time(ctx, device, cfg, model):
        timed.append(model.config.num_hidden_layers * model.config.hidden_size)
        return {"medium": 1.0, "small": 0.4, "mini": 0.05}[name_of(model.config)]

    def name_of(config):
        return next(
            n for n in GPU_SHAPES if all(getattr(config, k) == v for k, v in MODEL_PRESETS[n].items())
        )

    monkeypatch.setattr(nanobert.pretraining.size_rule, "time_step", fake_time)
    run = tmp_path / "gpu"
    corpus = write_corpus(tmp_path / "corpus.txt")
    settings = ["vocab_size=120", "max_seq_len=48", "batch_size=4", "precision=fp32", "eval_interval=5"]
    argv = ["pretrain", "--train", str(corpus), "--out", str(run), "--device", "cpu", "--time-budget", "2"]
    argv += [
        "--preset",
        "wikitext2-gpu",
        "--set",
        *settings,
        "min_planned_steps=4",
        "max_position_embeddings=64",
    ]
    assert main(argv) == 0
    assert timed == [8 * 512, 4 * 512]  # medium (2 steps in 2 s), then small (5 steps): enough, stop
    config = json.loads((run / "last" / "config.json").read_text())["model"]
    assert (config["num_hidden_layers"], config["hidden_size"]) == (4, 512)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nanobert: shape")]
    assert said == [
        "nanobert: shape small: 4 layers of 512, 8 heads (auto: medium 1000 ms a step, ~2 steps; small 400 ms"
        " a step, ~5 steps in 2 s; the largest with 4 steps)"
    ]
