"""The GPU check's items (benchmarks/gpu_check.py runs them): each item's steps, the commands they run,
and the figures read from what they wrote; the caps and shapes on a GPU and in the CPU dry run.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flops import useful_flops

from nanobert.config import ModelConfig, config_from_dict
from nanobert.pretraining.recipes import DEFAULT_BUDGET

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT = ROOT / "benchmarks" / "throughput.py"
# The data folder item 1 reads (--data-dir), written by gpu_check.py --stage-data
STAGED_TRAIN, STAGED_TEST, STAGED_BLIMP = "train.raw", "wiki.test.raw", "blimp"

GPU_SHAPES = {
    "base": ["--shape", "base", "--batch-size", "256", "--seq-len", "128"],
    # the shape of the 1.09x measured in stop 33; more steps, since a step takes milliseconds
    "mini": ["--shape", "mini", "--batch-size", "32", "--seq-len", "128", "--steps", "50", "--rounds", "5"],
}
# The dry run: tiny odd sizes, one short round, one thread (the test machine's cores are shared)
CPU_SHAPE = ["--shape", "tiny", "--batch-size", "3", "--seq-len", "24", "--vocab-size", "99"]
CPU_SHAPE += ["--steps", "2", "--rounds", "1", "--warmup", "1", "--dropout", "0", "--threads", "1"]
DRY_CAP_S = 90.0  # each item of the CPU dry run (seconds of work at tiny shapes, on a busy 2-core machine)
# The dry run's pretraining: the tiny preset for a few seconds, no timing of precisions
DRY_PRETRAIN = ["--device", "cpu", "--preset", "tiny", "--time-budget", "4", "--set", "precision=fp32"]
DRY_PRETRAIN += ["vocab_size=300", "batch_size=8", "max_seq_len=32", "eval_interval=20"]
PRETRAIN_SECONDS = 180.0  # the 3 minutes of training
PRETRAIN_SETUP_S = 45.0  # imports, tokenizer, instances, final evaluation and saving a base checkpoint

# Item 1, the first run. Its training has the CUDA first run's own budget; around it: imports, CUDA's start,
# a tokenizer and NSP instances from 2.2M words (about 100 s on a busy 2-core CPU, mostly single-threaded
# Python), the precision and depth timing, the evaluations during training, the final one and the saving.
# (Not measured on a GPU yet: at this cap's end the run is stopped, and saves what it trained.)
FIRST_RUN_SETUP_S = 100.0
# The steps after training, each with its seconds (kept back from the steps before it; what a step leaves
# goes to the next): `evaluate` reads and pairs 245k held-out words; BLiMP scores 6,700 pairs.
FIRST_RUN_TAIL_S = {"cuda": {"evaluate": 35.0, "blimp": 45.0}, "cpu": {"evaluate": 40.0, "blimp": 30.0}}
FIRST_RUN_CAP_S = DEFAULT_BUDGET["cuda"] + FIRST_RUN_SETUP_S + sum(FIRST_RUN_TAIL_S["cuda"].values())
FIRST_RUN_DRY_CAP_S = 150.0  # the tiny preset's 4 s, with the setup, evaluation and BLiMP at CPU speed
BLIMP_PAIRS = {"cuda": 100, "cpu": 2}  # per paradigm


@dataclass
class Context:
    """What every item's command and figures need: the checked arguments and where things go."""

    device: str  # "cuda" or "cpu"
    gpu: str | None  # the GPU's name
    peak_tflops: float | None  # its dense bf16 peak; None: unknown (or the CPU)
    data: Path | None
    out: Path
    work: Path  # scratch: throughput's JSON files, the pretraining runs (checkpoints stay off --out)
    data_dir: Path | None = None  # --data-dir: item 1's staged data
    pretrain_set: tuple[str, ...] = ()  # --pretrain-set: KEY=VALUE settings for item 5 on a GPU
    python: str = sys.executable


@dataclass(frozen=True)
class Step:
    """One command of an item. `stdout`: a file in the work folder for its standard output (the JSON its
    figures read), else the output goes to the item's log with the standard error; `keep_s`: the seconds of
    the item's cap kept back for the steps after this one."""

    name: str
    command: list[str]
    stdout: str | None = None
    keep_s: float = 0.0


@dataclass(frozen=True)
class Item:
    """One check: its steps (given the seconds the item may run), run in order, and the figures read from what
    they wrote."""

    number: int
    name: str
    title: str
    cap_s: float  # on a GPU
    dry_cap_s: float  # on the CPU
    steps: Callable[[Context, float], list[Step]]
    figures: Callable[[Context, str], dict]  # (ctx, the item's log) -> figures
    needs_data: bool = False  # --data
    needs_data_dir: bool = False  # --data-dir
    needs_transformers: bool = False


def one_step(name: str, command: Callable[[Context, float], list[str]]) -> Callable:
    """The steps of an item that runs one command."""
    return lambda ctx, cap: [Step(name, command(ctx, cap))]


STEP_HEADER = "== gpu_check step "  # the line in an item's log before each step's output


def step_output(log: str, name: str) -> str:
    """What the step `name` wrote to the item's log: from its header line to the next step's."""
    parts = re.split(rf"^{re.escape(STEP_HEADER)}([^\s:]+).*$", log, flags=re.MULTILINE)
    return "".join(text for step, text in zip(parts[1::2], parts[2::2], strict=True) if step == name)


# --- the items ----------------------------------------------------------------------------------------------


def throughput_item(number: int, name: str, title: str, cap_s: float, shape: str, *flags: str) -> Item:
    """An item that runs throughput.py at `shape` (the GPU's, or the dry run's tiny one) with `flags`; its
    figures are throughput.py's --json file, as far as it got."""
    json_name = f"{name}.json"

    def command(ctx: Context, cap: float) -> list[str]:
        cmd = [ctx.python, str(THROUGHPUT), "--device", ctx.device, "--check-syncs", "--profile-steps", "3"]
        cmd += ["--json", str(ctx.work / json_name)]
        if ctx.device == "cuda":
            cmd += [*GPU_SHAPES[shape], "--precision", "bf16", *flags]
            return cmd + (["--peak-tflops", str(ctx.peak_tflops)] if ctx.peak_tflops else [])
        return cmd + [*CPU_SHAPE, "--precision", "fp32", *flags, "--compile-backend", "eager"]

    def figures(ctx: Context, log: str) -> dict:
        try:
            report = json.loads((ctx.work / json_name).read_text())
        except (OSError, ValueError):
            return {}
        if ctx.device == "cuda" and not ctx.peak_tflops:  # throughput.py's default peak is not this GPU's
            for side in report.get("sides", {}).values():
                side["mfu"] = None
        return report

    steps = one_step("throughput", command)
    return Item(number, name, title, cap_s, DRY_CAP_S, steps, figures, needs_transformers=True)


def pretrain_command(ctx: Context, cap: float) -> list[str]:
    run = ctx.work / "pretrain-run"
    cmd = [ctx.python, "-m", "nanobert", "pretrain", "--train", str(ctx.data), "--out", str(run)]
    cmd += ["--overwrite"]
    if ctx.device == "cuda":
        seconds = max(min(PRETRAIN_SECONDS, cap - PRETRAIN_SETUP_S), 10.0)
        cmd += ["--device", "cuda", "--preset", "base", "--time-budget", f"{seconds:g}"]
        return cmd + (["--set", *ctx.pretrain_set] if ctx.pretrain_set else [])
    return cmd + DRY_PRETRAIN


def pretrain_figures(ctx: Context, log: str) -> dict:
    return run_figures(ctx, ctx.work / "pretrain-run")


def read_json(path: Path) -> dict | None:
    """The JSON object in `path`, or None where a step did not get to write it (or wrote something else)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_figures(ctx: Context, run: Path) -> dict:
    """tokens/s, MFU and peak memory from a pretraining run's summary.json (absent when the run did not get
    there)."""
    summary = read_json(run / "summary.json")
    if summary is None:
        return {}
    config = config_from_dict(ModelConfig, summary["model"])
    seq_len, mask_prob = summary["train"]["max_seq_len"], summary["train"]["mask_prob"]
    # per token of a full-length sequence: attention counted at max_seq_len (an upper bound for shorter ones)
    flops_per_token = useful_flops(config, 1, seq_len, mask_prob * seq_len) / seq_len
    rate = summary["tokens_per_s"]
    steady = steady_tokens_per_s(run / "metrics.jsonl")
    keep = ("tokens_per_s", "steps", "train_time_s", "wall_time_s", "stop_reason", "peak_gpu_memory_gib")
    return {
        **{k: summary.get(k) for k in keep},
        "flops_per_token": flops_per_token,
        "mfu": rate * flops_per_token / (ctx.peak_tflops * 1e12) if ctx.peak_tflops else None,
        "steady_tokens_per_s": steady,
        "steady_mfu": steady * flops_per_token / (ctx.peak_tflops * 1e12)
        if steady and ctx.peak_tflops
        else None,
        "final": summary.get("final"),
        "parameters": summary.get("parameters"),
    }


def steady_tokens_per_s(metrics: Path) -> float | None:
    """The median tokens/s of the training log windows in the run's second half (summary.json's rate counts
    the first steps too, when the data pipeline and kernels start up); None without such windows."""
    try:
        records = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return None
    rates = [r["tokens_per_s"] for r in records if r.get("split") == "train" and "tokens_per_s" in r]
    return statistics.median(rates[len(rates) // 2 :]) if rates else None


def first_run_steps(ctx: Context, cap: float) -> list[Step]:
    """Item 1: the first run as a GPU user starts it (no option but the file and the output: the run chooses
    its preset, precision, depth, batch and budget), then its best/ scored on the held-out file and BLiMP.
    The dry run gives the first run the tiny shape for a few seconds instead."""
    data, run, tail = ctx.data_dir, ctx.work / "first-run", FIRST_RUN_TAIL_S[ctx.device]
    nanobert = [ctx.python, "-m", "nanobert"]
    pretrain = [*nanobert, "pretrain", "--train", str(data / STAGED_TRAIN), "--out", str(run)]
    if ctx.device == "cpu":
        pretrain += DRY_PRETRAIN
    evaluate = [*nanobert, "evaluate", str(run / "best"), "--valid", str(data / STAGED_TEST)]
    blimp = [*nanobert, "blimp", str(run / "best"), "--data", str(data / STAGED_BLIMP)]
    blimp += ["--limit", str(BLIMP_PAIRS[ctx.device]), "--json", "--quiet"]
    return [
        Step("pretrain", pretrain, keep_s=tail["evaluate"] + tail["blimp"]),
        Step("evaluate", [*evaluate, "--device", ctx.device], "first-run-evaluate.json", tail["blimp"]),
        Step("blimp", [*blimp, "--device", ctx.device], "first-run-blimp.json"),
    ]


# What the first run chose, from its summary.json: (figure, the config it is in, its field there)
CHOICES = (
    ("layers", "model", "num_hidden_layers"),
    ("hidden_size", "model", "hidden_size"),
    ("heads", "model", "num_attention_heads"),
    ("intermediate_size", "model", "intermediate_size"),
    ("vocab_size", "model", "vocab_size"),
    ("batch_size", "train", "batch_size"),
    ("grad_accum_steps", "train", "grad_accum_steps"),
    ("learning_rate", "train", "learning_rate"),
    ("max_seq_len", "train", "max_seq_len"),
    ("time_budget", "train", "time_budget"),
    ("compile", "train", "compile"),
)


def first_run_figures(ctx: Context, log: str) -> dict:
    """Whatever item 1's steps got to: the run's figures (as item 5's) with what it chose (its configs and
    its `nanobert:` lines), the held-out figures of `evaluate`, BLiMP's overall and per-field accuracy."""
    run = ctx.work / "first-run"
    figures = run_figures(ctx, run)
    summary = read_json(run / "summary.json")
    if summary is not None:
        chose = {name: summary.get(part, {}).get(key) for name, part, key in CHOICES}
        figures["chose"] = {"preset": summary.get("preset"), **chose}
    said = [line.strip() for line in step_output(log, "pretrain").splitlines()]
    if said := [line for line in said if line.startswith("nanobert: ")]:
        figures["said"] = said
    if (held_out := read_json(ctx.work / "first-run-evaluate.json")) is not None:
        figures["held_out"] = held_out
    if (blimp := read_json(ctx.work / "first-run-blimp.json")) is not None:
        full = blimp.get("full", {})
        keep = ("overall", "pairs", "ties", "fields", "phenomena")
        figures["blimp"] = {**{k: full.get(k) for k in keep}, "rule": blimp.get("rule")}
        figures["blimp"]["precision"] = blimp.get("precision")
    return figures


def pytest_command(ctx: Context, cap: float) -> list[str]:
    """pytest -m cuda on the test files that mark tests `cuda` (collecting only those: quicker, and a module
    whose optional dependency the device lacks cannot stop the run at collection)."""
    tests = ROOT / "tests"
    files = [str(p) for p in sorted(tests.glob("test_*.py")) if "pytest.mark.cuda" in p.read_text()]
    return [
        ctx.python,
        "-m",
        "pytest",
        "-m",
        "cuda",
        "-p",
        "no:cacheprovider",
        "-rs",
        *(files or [str(tests)]),
    ]


def pytest_figures(ctx: Context, log: str) -> dict:
    """The counts of pytest's last summary line ("3 passed, 1 skipped, 950 deselected in 12.3s")."""
    lines = [line for line in log.splitlines() if re.search(r"\b(passed|failed|skipped|error)", line)]
    if not lines:
        return {}
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", lines[-1])}


ITEMS = (
    Item(1, "first-run", "first run: pretrain with no options, evaluate, BLiMP",
         FIRST_RUN_CAP_S, FIRST_RUN_DRY_CAP_S, first_run_steps, first_run_figures, needs_data_dir=True),
    throughput_item(
        2, "base-compiled", "BERT-base, bf16, torch.compile", 210, "base", "--compile", "--static-shapes"
    ),
    throughput_item(3, "base-eager", "BERT-base, bf16, eager", 60, "base"),
    throughput_item(
        4, "mini-graphs", "mini: nanobert in CUDA graphs, transformers compiled", 120, "mini", "--cuda-graphs"
    ),
    Item(5, "pretrain-base", "nanobert pretrain --preset base, 180 s", 225, DRY_CAP_S,
         one_step("pretrain", pretrain_command), pretrain_figures, needs_data=True),
    Item(6, "cuda-tests", "pytest -m cuda", 75, DRY_CAP_S, one_step("pytest", pytest_command),
         pytest_figures),
)  # fmt: skip
BY_NUMBER = {item.number: item for item in ITEMS}
MIN_CAP_S = {"cuda": 20.0, "cpu": 5.0}  # an item with less time left than this is skipped


__all__ = ["BY_NUMBER", "ITEMS", "MIN_CAP_S", "Context", "Item", "Step"]
