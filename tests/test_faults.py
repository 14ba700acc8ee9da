"""Faults injected into real runs: signals, kill -9 in the middle of a checkpoint write, a diverging loss,
damaged checkpoints and a malicious pickle. Each must end cleanly and leave a loadable, resumable checkpoint.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from helpers import TINY_SET, train_tiny_checkpoint, write_corpus

import nanobert
from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.checkpoint import (
    load_language_model,
    load_pretraining_checkpoint,
    load_trainer_state,
)
from nanobert.cli import main
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining


@pytest.fixture
def data(tmp_path):
    return write_corpus(tmp_path / "corpus.txt"), write_corpus(tmp_path / "valid.txt", n_docs=3, seed=1)


def pretrain_argv(data, out, *extra):
    corpus, valid = data
    argv = ["pretrain", "--train", str(corpus), "--valid", str(valid), "--out", str(out)]
    return [*argv, "--device", "cpu", "--quiet", *extra]


def start(data, out, *extra, env=None) -> subprocess.Popen:
    """`python -m nanobert pretrain` in a subprocess, its output in files beside the run."""
    src = str(Path(nanobert.__file__).resolve().parents[1])
    full_env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    full_env.update({"OMP_NUM_THREADS": "1", **(env or {})})
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = open(out.parent / f"{out.name}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "nanobert", *pretrain_argv(data, out, *extra)],
        env=full_env,
        stdout=logs,
        stderr=subprocess.STDOUT,
    )


def wait_for(condition, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the run ended early with code {proc.returncode}"
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.05)


def train_steps(run: Path) -> list[int]:
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if r["split"] == "train"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_saves_a_resumable_checkpoint_and_exits_128_plus_it(data, tmp_path, sig):
    """A stopped run is not a finished one: exit 143 for SIGTERM, 130 for SIGINT, not 0
    (docs/scale-and-faults.md)."""
    run = tmp_path / "run"
    proc = start(data, run, "--max-steps", "100000", "--set", *TINY_SET, "eval_interval=100000")
    try:
        wait_for(lambda: len(train_steps(run)) >= 3, proc)
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == 128 + int(sig), (run.parent / "run.log").read_text()
    finally:
        proc.kill()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == f"interrupted by signal {int(sig)}"
    assert summary["stopped_by_signal"] == int(sig)
    step = summary["steps"]
    assert load_trainer_state(run / "last")["run"]["step"] == step
    assert json.loads((run / "last" / "config.json").read_text())["step"] == step
    load_pretraining_checkpoint(run / "last")
    # Resume, now with an end in sight.
    assert main(["pretrain", "--resume", str(run / "last"), "--max-steps", str(step + 3), "--quiet"]) == 0
    assert train_steps(run) == list(range(1, step + 4))
    assert json.loads((run / "summary.json").read_text())["stop_reason"] == "finished"


def test_kill_9_during_a_checkpoint_write_keeps_the_previous_one(data, tmp_path):
    """last/ is saved at steps 4, 8, 12...; the write at step 8 is paused half way (config.json written,
    weights not yet) by the test hook, and the process is killed there with SIGKILL."""
    run = tmp_path / "run"
    tiny = ["--set", *TINY_SET, "eval_interval=4"]
    proc = start(data, run, "--max-steps", "16", *tiny, env={"NANOBERT_TEST_SLOW_SAVE": "last:120"})
    temp = run / f".last.tmp-{proc.pid}"
    try:
        # Both at once only while a write *replaces* last/, which is where the hook pauses.
        wait_for(lambda: (temp / "config.json").is_file() and (run / "last").is_dir(), proc)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
    assert sorted(p.name for p in temp.iterdir()) == ["config.json"]  # the write was cut half way
    # The previous checkpoint is whole and loads.
    assert json.loads((run / "last" / "config.json").read_text())["step"] == 4
    assert load_trainer_state(run / "last")["run"]["step"] == 4
    load_pretraining_checkpoint(run / "last")
    # Resuming continues from step 4, clears the debris, and ends where an uninterrupted run ends.
    assert main(["pretrain", "--resume", str(run / "last"), "--quiet"]) == 0
    assert not temp.exists()
    assert train_steps(run) == list(range(1, 17))
    reference = tmp_path / "reference"
    tokenizer = ["--tokenizer", str(run / "last")]
    assert main(pretrain_argv(data, reference, "--max-steps", "16", *tokenizer, *tiny)) == 0

    def curve(r):
        rows = [json.loads(line) for line in (r / "metrics.jsonl").read_text().splitlines()]
        return [(x["split"], x["step"], x.get("loss", x["mlm_loss"])) for x in rows]

    got, want = curve(run), curve(reference)
    assert [g[:2] for g in got] == [w[:2] for w in want]
    assert [g[2] for g in got] == pytest.approx([w[2] for w in want], abs=1e-4)  # 1 vs 2 threads at steps 1-4


def poison_training_forward(
    monkeypatch, from_call: int, on_poison=None, model=BertForPreTraining, loss="mlm_loss"
):
    """Make the training loss NaN from the `from_call`-th training forward on (so gradients and then the
    weights turn NaN), as a real divergence does. `model` is the class trained and `loss` its output field
    the poison goes into."""
    original = model.forward
    calls = [0]

    def forward(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.training:
            calls[0] += 1
            if calls[0] >= from_call:
                if calls[0] == from_call and on_poison is not None:
                    on_poison()
                setattr(out, loss, getattr(out, loss) * float("nan"))
        return out

    monkeypatch.setattr(model, "forward", forward)


def digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.mark.parametrize(
    "log_interval, poison_at, needle",
    [
        (1, 6, "training diverged at step 6 (loss nan)"),  # caught at the next log line
        (100, 5, "training diverged at step 8 (non-finite weights)"),  # caught before the step-8 save
    ],
)
def test_a_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(
    data, tmp_path, capsys, monkeypatch, log_interval, poison_at, needle
):
    run = tmp_path / "run"
    before = {}
    poison_training_forward(monkeypatch, poison_at, lambda: before.update(digest(run / "last")))
    tiny = ["--set", *TINY_SET, "eval_interval=4", f"log_interval={log_interval}"]
    assert main(pretrain_argv(data, run, "--max-steps", "12", *tiny)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err
    assert f"the last good checkpoint ({run / 'last'}, step 4) is kept" in err
    assert digest(run / "last") == before  # not a byte changed
    model, config = load_pretraining_checkpoint(run / "last")
    assert config["step"] == 4 and all(torch.isfinite(p).all() for p in model.parameters())
    assert not (run / "summary.json").exists()


def test_a_diverging_causal_run_keeps_its_last_good_checkpoint(data, tmp_path, capsys, monkeypatch):
    """The causal objective on the same engine: a NaN next-word loss ends the run the same way."""
    run = tmp_path / "run"
    before = {}
    poison_training_forward(
        monkeypatch, 6, lambda: before.update(digest(run / "last")), BertLMHeadModel, "loss"
    )
    tiny = ["--set", *TINY_SET, "eval_interval=4", "log_interval=1"]
    assert main(pretrain_argv(data, run, "--objective", "causal", "--max-steps", "12", *tiny)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "training diverged at step 6 (loss nan)" in err, err
    assert f"the last good checkpoint ({run / 'last'}, step 4) is kept" in err
    assert digest(run / "last") == before  # not a byte changed
    model, config = load_language_model(run / "last")
    assert isinstance(model, BertLMHeadModel) and config["kind"] == "causal_lm" and config["step"] == 4
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert load_trainer_state(run / "last")["run"]["step"] == 4  # and it resumes from there
    assert not (run / "summary.json").exists()


@pytest.fixture
def finished_run(data, tmp_path):
    run = tmp_path / "run"
    assert main(pretrain_argv(data, run, "--max-steps", "3", "--set", *TINY_SET)) == 0
    return run


def one_line_error(capsys, argv, *needles) -> str:
    """Run the CLI on `argv`: exit 2 and one line `nanobert: error: ...` holding every one of `needles`."""
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("nanobert: error: "), err
    assert all(needle in err for needle in needles), err
    return err


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_model_safetensors_is_a_one_line_error(finished_run, capsys, damage):
    weights = finished_run / "last" / "model.safetensors"
    raw = weights.read_bytes()
    weights.write_bytes(
        {"truncate": raw[: len(raw) // 3], "garbage": os.urandom(len(raw)), "empty": b""}[damage]
    )
    capsys.readouterr()
    last = str(finished_run / "last")
    one_line_error(capsys, ["evaluate", last, "--device", "cpu"], "corrupt or truncated")
    one_line_error(capsys, ["pretrain", "--resume", last], "corrupt or truncated")


class Payload:
    """Unpickling this creates a file: what a malicious checkpoint would do with os.system instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_malicious_trainer_state_is_refused_without_running_it(finished_run, capsys, tmp_path):
    state = finished_run / "last" / "trainer_state.pt"
    marker = tmp_path / "pwned"
    torch.save({"optimizer": Payload(marker)}, state)
    torch.load(state, weights_only=False)  # the payload works when unpickled...
    assert marker.exists()
    marker.unlink()
    with pytest.raises(NanobertError, match="corrupt"):  # ...and nanobert never unpickles it
        load_trainer_state(finished_run / "last")
    capsys.readouterr()
    argv = ["pretrain", "--resume", str(finished_run / "last")]
    one_line_error(capsys, argv, "trainer_state.pt is corrupt")
    assert not marker.exists()


def test_checkpoints_load_without_pickle(finished_run, capsys, monkeypatch):
    """Weights go through safetensors and trainer state through torch's weights-only loader: the pickle
    module is never asked to load anything, whatever the command."""
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used to load a checkpoint")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    original_load = torch.load

    def weights_only_load(*args, **kwargs):
        assert kwargs.get("weights_only") is True
        return original_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", weights_only_load)
    assert main(["evaluate", str(finished_run / "last"), "--device", "cpu"]) == 0
    assert main(["pretrain", "--resume", str(finished_run / "last"), "--max-steps", "4", "--quiet"]) == 0


# ----------------------------------------------------------------------------------------------------------
# Full disks and permissions: one line naming the path and the cause, exit 2, and the earlier output kept.
# Both need root (a tmpfs mount; permissions that bind root once its DAC capabilities are dropped), as CI is.


@contextmanager
def small_disk(path: Path, kib: int):
    """A `kib`-KiB tmpfs mounted at `path` for the test; skipped where mounting is not allowed."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    path.mkdir(parents=True)
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(path)], capture_output=True
    )
    if mount.returncode:
        pytest.skip(f"mount is not permitted here ({mount.stderr.decode().strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> None:
    """Take every free byte of `disk`."""
    with open(disk / "filler", "wb", buffering=0) as f:
        for size in (1 << 16, 1 << 10, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """A tiny pretraining run, a classifier fine-tuned from it, and their inputs."""
    root = tmp_path_factory.mktemp("outputs")
    best = train_tiny_checkpoint(root / "pre", steps=2)
    table = root / "rows.csv"
    table.write_text("text,label\n" + "".join(f"alpha red {i},pos\nbravo blue {i},neg\n" for i in range(8)))
    lines = root / "lines.txt"
    lines.write_text("alpha bravo charlie\n" * 400)
    argv = ["finetune", best, "--train", table, "--dev", table, "--text-col", "text", "--label-col", "label"]
    # fp32, as TINY_SET's pretraining: "auto" timed on a busy CPU without native bf16 now and then chose bf16,
    # and then every `predict` added its note on slow bf16 to the one-line errors these tests read
    argv += ["--precision", "fp32"]
    assert main([str(a) for a in [*argv, "--out", root / "ft", "--epochs", "1", "--quiet"]]) == 0
    return {"best": best, "run": best.parent, "ft": root / "ft", "table": table, "lines": lines, "root": root}


def test_a_full_disk_keeps_the_earlier_output_file(outputs, tmp_path, capsys):
    """predict, embed and attention wrote in place: a full disk left a truncated file instead of the old."""
    o = outputs
    with small_disk(tmp_path / "disk", 1024) as disk:
        targets = {
            "e.npy": ["embed", o["best"], "--input", o["lines"]],
            "a.png": ["attention", o["best"], "alpha bravo charlie"],
            "p.csv": ["predict", o["ft"], "--input", o["table"]],
        }
        for name in targets:
            (disk / name).write_text("earlier output")
        fill(disk)
        for name, argv in targets.items():
            one_line_error(
                capsys, [*argv, "--out", disk / name], f"{disk / name}: no space left", "unchanged"
            )
            assert (disk / name).read_text() == "earlier output"
        assert sorted(p.name for p in disk.iterdir()) == ["a.png", "e.npy", "filler", "p.csv"]  # no debris


def test_jobs_on_a_full_disk_fail_in_one_line_and_keep_the_old_run(outputs, tmp_path, capsys):
    """pretrain (new and resumed), export-hf, prepare and finetune --overwrite were tracebacks; finetune
    --overwrite also deleted the old run's summary.json and rewrote its metrics.jsonl first."""
    o = outputs
    with small_disk(tmp_path / "disk", 3072) as disk:
        shutil.copytree(o["ft"], disk / "ft")
        shutil.copytree(o["run"], disk / "run")
        before = {
            p: p.read_bytes() for p in [*(disk / "ft").rglob("*"), *(disk / "run").rglob("*")] if p.is_file()
        }
        fill(disk)
        finetune = ["finetune", o["best"], "--train", o["table"], "--dev", o["table"], "--text-col", "text"]
        finetune += ["--label-col", "label", "--epochs", "1", "--quiet", "--out", disk / "ft", "--overwrite"]
        one_line_error(capsys, finetune, f"{disk / 'ft'}: only", "MB free", "nothing was changed")
        corpus = o["run"].parent / "corpus.txt"
        tiny = ["--set", *TINY_SET, "device=cpu", "max_steps=2"]
        one_line_error(
            capsys, ["pretrain", "--train", corpus, "--out", disk / "new", "--quiet", *tiny], "MB free"
        )
        resume = ["pretrain", "--resume", disk / "run" / "last", "--max-steps", "6", "--quiet"]
        one_line_error(capsys, resume, "no space left", str(disk / "run"))
        one_line_error(capsys, ["export-hf", o["best"], disk / "hf"], f"{disk / 'hf'}: no space left")
        prepare = ["prepare", "--data", corpus, "--out", disk / "prep", "--vocab-size", "120", "--quiet"]
        one_line_error(capsys, prepare, "prep: no space left")
        after = {p: p.read_bytes() for p in before if p.is_file()}
        assert after == before  # every file of both old runs, byte for byte
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "ft", "run"]
    load_pretraining_checkpoint(o["run"] / "last")


PERMISSION_CASES = {  # what the user typed -> the path the message must name
    "embed --input": (["embed", "ck", "--input", "unreadable.txt", "--out", "e.npy"], "unreadable.txt"),
    "predict --input": (["predict", "ft", "--input", "unreadable.csv", "--out", "p.csv"], "unreadable.csv"),
    "pretrain --train": (
        ["pretrain", "--train", "unreadable.txt", "--out", "r1", "--quiet"],
        "unreadable.txt",
    ),
    "pretrain --valid": (
        ["pretrain", "--train", "corpus.txt", "--valid", "unreadable.txt", "--out", "r2", "--quiet"],
        "unreadable.txt",
    ),
    "config.json": (
        ["embed", "ck_config", "--input", "lines.txt", "--out", "e.npy"],
        "ck_config/config.json",
    ),
    "checkpoint folder": (["embed", "ck_folder", "--input", "lines.txt", "--out", "e.npy"], "ck_folder/"),
    "model.safetensors": (
        ["embed", "ck_weights", "--input", "lines.txt", "--out", "e.npy"],
        "ck_weights/model.safetensors",
    ),
    "embed --out": (["embed", "ck", "--input", "lines.txt", "--out", "ro/e.npy"], "ro/e.npy"),
    "attention --out": (["attention", "ck", "alpha bravo", "--out", "ro/a.png"], "ro/a.png"),
    "predict --out": (["predict", "ft", "--input", "rows.csv", "--out", "ro/p.csv"], "ro/p.csv"),
    "pretrain --out": (["pretrain", "--train", "corpus.txt", "--out", "ro/run", "--quiet"], "ro"),
    "export-hf": (["export-hf", "ck", "ro/hf"], "ro/hf"),
}


def test_permission_errors_are_one_line(outputs, tmp_path):
    """As root, with the capabilities that override file permissions dropped (`setpriv`): they bind."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to drop the capabilities that override permissions (CI has both)")
    o, work = outputs, tmp_path
    shutil.copytree(o["best"], work / "ck")
    shutil.copytree(o["ft"], work / "ft")
    for name in ("ck_config", "ck_folder", "ck_weights"):
        shutil.copytree(o["best"], work / name)
    shutil.copy(o["run"].parent / "corpus.txt", work / "corpus.txt")
    shutil.copy(o["lines"], work / "lines.txt")
    shutil.copy(o["table"], work / "rows.csv")
    (work / "unreadable.txt").write_text("alpha bravo\n")
    shutil.copy(o["table"], work / "unreadable.csv")
    (work / "ro").mkdir()
    (work / "ro" / "p.csv").write_text("earlier output")
    for path in ("unreadable.txt", "unreadable.csv", "ck_config/config.json", "ck_weights/model.safetensors"):
        (work / path).chmod(0)
    (work / "ck_folder").chmod(0)
    (work / "ro").chmod(0o555)
    tiny = ["--set", *TINY_SET, "device=cpu", "max_steps=2"]
    cases = {k: argv + tiny if argv[0] == "pretrain" else argv for k, (argv, _) in PERMISSION_CASES.items()}
    driver = (
        "import contextlib, io, json, sys\nfrom nanobert.cli import main\nresults = {}\n"
        "for name, argv in json.loads(sys.argv[1]).items():\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n            code = main(argv)\n"
        "        except BaseException as e:\n            code = f'{type(e).__name__}: {e}'\n"
        "    results[name] = [code, err.getvalue()]\nprint(json.dumps(results))\n"
    )
    drop = "-dac_override,-dac_read_search"
    src = str(Path(nanobert.__file__).resolve().parents[1])
    done = subprocess.run(
        [
            "setpriv",
            f"--inh-caps={drop}",
            f"--bounding-set={drop}",
            sys.executable,
            "-c",
            driver,
            json.dumps(cases),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name, (code, err) in json.loads(done.stdout).items():
        path = PERMISSION_CASES[name][1]
        assert code == 2 and len(err.strip().splitlines()) == 1, (name, code, err)
        assert path in err and "permission denied" in err, (name, err)
    assert (work / "ro" / "p.csv").read_text() == "earlier output"
