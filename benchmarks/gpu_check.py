r"""The prepared device check of issues 42 and 59: what a lent GPU measures first, in one script that always
brings back what it finished.

Items, in order, each in its own process group under its own time cap, so that one slow compile cannot
starve the rest:

  1 first-run       what a GPU user's first run gives: `nanobert pretrain --train DATA/train.raw --out RUN`
                    with no other option (the CUDA first run's own 180 s budget, config.DEFAULT_BUDGET), then
                    `nanobert evaluate RUN/best --valid DATA/wiki.test.raw` and `nanobert blimp` on 100 pairs
                    per paradigm: steps, tokens/s, MFU, peak memory, the held-out figures, BLiMP, and what the
                    run chose (its `nanobert:` lines; layers, hidden size, batch, learning rate)
  2 base-compiled   throughput.py --shape base --batch-size 256 --seq-len 128, bf16, torch.compile on
                    both sides, every batch of one shape (one compile each); compile time apart from the
                    steady rate
  3 base-eager      the same, eager
  4 mini-graphs     --shape mini: nanobert in CUDA graphs (mode="reduce-overhead", static shapes) against
                    compiled transformers
  5 pretrain-base   `nanobert pretrain --preset base` for 180 s on a WikiText file (--data): tokens/s, MFU
                    and peak memory from the run's own summary.json
  6 cuda-tests      the tests marked `cuda` (pytest -m cuda)

After every item (and every step of item 1: training, evaluation, BLiMP), gpu_check.json (every figure, each
step's command and status) and gpu_check.md (the table) are rewritten under --out ($OUT by default), with each
item's log beside them (item1.log ...), so a call stopped at its limit still returns all that finished. The
table is printed last. `--items` picks some; an item's cap shrinks to what is left of --budget, and an item
with too little left is skipped.

MFU: useful FLOPs per token (throughput.py's count) times tokens/s, over the GPU's dense bf16 peak looked up
by its name (`PEAK_BF16_TFLOPS`; an unknown GPU gets no MFU, and the report says so).

Item 1's data travels with the call, since the device cannot see ../shared: stage it once into the ignored
folder .gpu-data (train.raw 13.4 MiB, wiki.test.raw 1.2 MiB, BLiMP cut to 100 pairs per paradigm 2.8 MiB):

    python benchmarks/gpu_check.py --stage-data .gpu-data --train ../shared/data/wiki-squad/train.raw \
        --test ../shared/data/wikitext-2/wiki.test.raw --blimp ../shared/data/blimp

The two-call plan for 15 minutes of device time, start-up included: call 1 runs items 1 and 2 (at most 575 s:
the sum of their caps plus 5 s) with .gpu-data carried; call 2, issued at once (a machine stays warm 30 s),
runs items 3 and 6 (at most 140 s); then give the machine back. That leaves about 3 minutes for the start and
the transfers. Items 4 and 5 wait for a longer loan (item 1 is the pretraining run a first user meets):

    call 1, carry [".gpu-data"], timeout_s 600:
      PYTHONPATH=src PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --device cuda --items 1,2 \
          --data-dir .gpu-data --out $OUT
    call 2, no carry, timeout_s 180:
      PYTHONPATH=src PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --device cuda --items 3,6 --out $OUT

--device cpu is the dry run: the same items, code paths and outputs at tiny shapes (seconds each), fp32,
torch.compile through dynamo's eager backend (no code generation; no CUDA graphs on a CPU), dropout off (the
CPU's dropout draws its mask on the host, a path CUDA never takes, which the sync check would report); item 1
trains the tiny preset for 4 s and scores 2 BLiMP pairs per paradigm. The tokenizer and the instances of
.gpu-data's 2.2M words alone take a busy 2-core CPU about 100 s, so the dry run reads a folder staged from a
smaller --train (all six items: about 2 minutes there; D=../shared/data):

    python benchmarks/gpu_check.py --stage-data /tmp/dry-data --train $D/wikitext-2/wiki.valid.tokens \
        --test $D/wikitext-2/wiki.test.raw --blimp $D/blimp
    python benchmarks/gpu_check.py --device cpu --data-dir /tmp/dry-data \
        --data $D/wikitext-2/wiki.valid.tokens --out /tmp/gpu-dry
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nanobert.cli.overrides import parse_overrides
from nanobert.config import ModelConfig, config_from_dict
from nanobert.device import cpu_name
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.files import check_input_file
from nanobert.pretraining.recipes import DEFAULT_BUDGET, build_configs
from nanobert.use.blimp import read_blimp_file

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT = ROOT / "benchmarks" / "throughput.py"
JSON_NAME, TABLE_NAME = "gpu_check.json", "gpu_check.md"
LOG_TAIL_BYTES = 1 << 20  # an item's log keeps its last MiB: the device returns files of at most 16 MiB

# Dense bf16 peaks (TFLOP/s, no sparsity) by the vendor's datasheets, matched in this order against the
# GPU's name: H100 SXM and H200 share the Hopper rate; the PCIe and NVL parts run lower clocks.
PEAK_BF16_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("H200", 989.0),
    ("A100", 312.0),
)

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
PRETRAIN_SECONDS = 180.0  # the issue's 3 minutes of training
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

# The data folder item 1 reads (--data-dir), built by --stage-data: the device cannot see ../shared, so it
# travels in the call's `carry`, which takes 64 MiB with the working tree (about 2.5 MiB today).
STAGED_TRAIN, STAGED_TEST, STAGED_BLIMP = "train.raw", "wiki.test.raw", "blimp"
CARRY_ROOM_MIB = 56.0


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
    flops_per_token = throughput_module().useful_flops(config, 1, seq_len, mask_prob * seq_len) / seq_len
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


def throughput_module():
    """benchmarks/throughput.py as a module (benchmarks/ is no package): its count of useful FLOPs."""
    spec = importlib.util.spec_from_file_location("gpu_check_throughput", THROUGHPUT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


# --- running an item under its cap --------------------------------------------------------------------------


def run_capped(
    cmd: list[str], cap: float, log: Path, env: dict, stdout: Path | None = None
) -> tuple[str, float, int | None]:
    """Run `cmd` in its own process group for at most `cap` seconds, its output added to `log` (its standard
    output to `stdout` instead, where given): (status, seconds, exit code). At the cap the group gets SIGTERM
    (a training run then saves and writes its summary), and SIGKILL a few seconds later; status is "ok",
    "failed" (non-zero exit) or "timeout". The group stays in this session (no setsid), so whatever ends this
    script's session ends the item too: the device tool spares only processes that started a session of
    their own."""
    grace = min(15.0, 0.1 * cap)
    start = time.perf_counter()
    with log.open("ab") as err, stdout.open("wb") if stdout else nullcontext() as out:
        to = {"stdout": out, "stderr": err} if out else {"stdout": err, "stderr": subprocess.STDOUT}
        proc = subprocess.Popen(cmd, **to, env=env, cwd=ROOT, process_group=0)
        RUNNING.add(proc.pid)
        try:
            code = proc.wait(timeout=max(cap - grace, 0.1))
            _signal_group(proc.pid, signal.SIGKILL)  # compile workers it may have left behind
            return ("ok" if code == 0 else "failed"), time.perf_counter() - start, code
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            _signal_group(proc.pid, signal.SIGKILL)  # compile workers it left behind
            return "timeout", time.perf_counter() - start, proc.returncode
        finally:
            RUNNING.discard(proc.pid)


RUNNING: set[int] = set()  # the process group of the item running now


def _stop_items(signum, frame) -> None:
    """SIGTERM/SIGINT to this script: end the running item's group too, then exit (the report on disk holds
    every finished item)."""
    for pid in list(RUNNING):
        _signal_group(pid, signal.SIGKILL)
    raise SystemExit(128 + signum)


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


STEP_HEADER = "== gpu_check step "  # the line in an item's log before each step's output


def step_output(log: str, name: str) -> str:
    """What the step `name` wrote to the item's log: from its header line to the next step's."""
    parts = re.split(rf"^{re.escape(STEP_HEADER)}([^\s:]+).*$", log, flags=re.MULTILINE)
    return "".join(text for step, text in zip(parts[1::2], parts[2::2], strict=True) if step == name)


def trim_log(log: Path) -> str:
    """The log's text, cut to its last LOG_TAIL_BYTES on disk as well (what the device sends back)."""
    data = log.read_bytes()
    if len(data) > LOG_TAIL_BYTES:
        data = b"[... cut: the log's last MiB follows]\n" + data[-LOG_TAIL_BYTES:]
        log.write_bytes(data)
    return data.decode("utf-8", "replace")


def child_env() -> dict:
    """The environment of every item: this checkout's src/ first on the path, output unbuffered."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    return env


# --- the report ---------------------------------------------------------------------------------------------


@dataclass
class Report:
    """gpu_check.json and gpu_check.md, both rewritten whole at every `write`."""

    out: Path
    header: dict
    items: list[dict] = field(default_factory=list)

    def write(self) -> None:
        data = {**self.header, "items": self.items}
        for name, text in ((JSON_NAME, json.dumps(data, indent=1) + "\n"), (TABLE_NAME, self.markdown())):
            part = self.out / (name + ".part")
            part.write_text(text)
            part.replace(self.out / name)

    def markdown(self) -> str:
        h = self.header
        peak = f"{h['peak_tflops']:g} TFLOP/s dense bf16" if h["peak_tflops"] else h["peak_note"]
        lines = [
            f"Device: {h['device_name']} ({h['device']}); torch {h['torch']}, "
            f"transformers {h['transformers']}; MFU against {peak}. Started {h['started']}.",
            "",
            "| # | item | status | s (cap) | nanobert tokens/s | transformers tokens/s | ratio "
            "| nanobert MFU | transformers MFU | compile s (ours / theirs) | peak GiB (ours / theirs) "
            "| notes |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        lines += [table_row(item) for item in self.items]
        profiles = [line for item in self.items for line in profile_lines(item)]
        if profiles:
            lines += [
                "",
                "Where a step's time goes (torch.profiler, self time per step, after the timed rounds):",
                "",
            ]
            lines += profiles
        for item in self.items:
            if said := (item.get("figures") or {}).get("said"):
                lines += ["", f"What item {item['number']}'s run chose and said (its `nanobert:` lines):", ""]
                lines += [f"- `{line}`" for line in said]
        return "\n".join(lines) + "\n"


def profile_lines(item: dict) -> list[str]:
    """One line per side of a profiled throughput item: busy time against the step, the top operations."""
    lines = []
    for side, p in ((item.get("figures") or {}).get("profile") or {}).items():
        top = ", ".join(f"`{op['name']}` {op['ms_per_step']:.2f}" for op in p["top"][:6])
        lines.append(
            f"- item {item['number']}, {side}: {p['clock']} busy {p['busy_ms_per_step']:.1f} ms of a "
            f"{p['wall_ms_per_step']:.1f} ms step; top ms: {top}"
        )
    return lines


def table_row(item: dict) -> str:
    f = item.get("figures") or {}
    cells = [
        str(item["number"]),
        item["title"],
        item["status"],
        f"{item.get('seconds', 0):.0f} ({item['cap_s']:.0f})",
    ]
    if "sides" in f:  # a throughput item
        ours, theirs = f["sides"].get("nanobert", {}), f["sides"].get("transformers", {})
        syncs = f.get("host_syncs")
        notes = [f"{f.get('precision', '?')}", "CUDA graphs" if f.get("cuda_graphs") else ""]
        if ours.get("round_ms"):
            notes.append(f"nanobert's rounds {min(ours['round_ms']):.1f}-{max(ours['round_ms']):.1f} ms")
        if syncs is not None:
            notes.append("host syncs: " + (", ".join(f"{k} {v}" for k, v in syncs.items() if v) or "none"))
        cells += [
            _num(ours.get("tokens_per_s")),
            _num(theirs.get("tokens_per_s")),
            f"**{f['ratio']:.2f}x**" if f.get("ratio") else "-",
            _pct(ours.get("mfu")),
            _pct(theirs.get("mfu")),
            f"{_sec(ours.get('compile_s'))} / {_sec(theirs.get('compile_s'))}",
            f"{_gib(ours.get('peak_mem_gib'))} / {_gib(theirs.get('peak_mem_gib'))}",
            "; ".join(n for n in notes if n),
        ]
    elif RUN_FIGURES & f.keys():  # a pretraining run, and what was measured on its checkpoint
        mem = _gib(f.get("peak_gpu_memory_gib"))
        cells += [_num(f.get("tokens_per_s")), "-", "-", _pct(f.get("mfu")), "-", "-", mem, run_notes(f)]
    else:  # the tests, or an item that left no figures
        counts = ", ".join(f"{n} {word}" for word, n in f.items()) or item.get("note", "")
        cells += ["-"] * 7 + [counts]
    if len(item.get("steps") or []) > 1:
        steps = ", ".join(f"{s['name']} {s['status']} {s['seconds']:.0f} s" for s in item["steps"])
        cells[-1] += f"; steps: {steps}"
    return "| " + " | ".join(cells) + " |"


RUN_FIGURES = {"tokens_per_s", "held_out", "blimp", "chose"}


def run_notes(f: dict) -> str:
    """The notes cell of a pretraining run: its length, the held-out figures, BLiMP and what it chose."""
    notes = []
    if "tokens_per_s" in f:
        notes.append(f"{f.get('steps')} steps in {f.get('train_time_s')} s, {f.get('stop_reason')}")
        final = f.get("final") or {}
        if "mlm_accuracy" in final:
            notes.append(f"final MLM accuracy {final['mlm_accuracy']:.3f}")
        if f.get("steady_tokens_per_s"):
            notes.append(
                f"second half's log windows {_num(f['steady_tokens_per_s'])} tokens/s "
                f"({_pct(f.get('steady_mfu'))} MFU)"
            )
    if held := f.get("held_out"):
        notes.append(
            f"wiki.test.raw: MLM accuracy {_frac(held.get('mlm_accuracy'))}, perplexity "
            f"{_sec(held.get('mlm_perplexity'))}, NSP accuracy {_frac(held.get('nsp_accuracy'))}"
        )
    if blimp := f.get("blimp"):
        notes.append(f"BLiMP {_pct(blimp.get('overall'))} of {_num(blimp.get('pairs'))} pairs")
    if c := f.get("chose"):
        notes.append(
            f"chose: preset {c['preset']}, {c['layers']} layers x {c['hidden_size']}, batch {c['batch_size']}"
            f" x {c['max_seq_len']}, learning rate {c['learning_rate']}"
        )
    return "; ".join(notes)


def _num(x) -> str:
    return f"{x:,.0f}" if isinstance(x, int | float) else "-"


def _pct(x) -> str:
    return f"{x:.1%}" if isinstance(x, int | float) else "n/a"


def _sec(x) -> str:
    return f"{x:.1f}" if isinstance(x, int | float) else "-"


def _frac(x) -> str:
    return f"{x:.3f}" if isinstance(x, int | float) else "-"


def _gib(x) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) else "n/a"


# --- arguments and the run ----------------------------------------------------------------------------------


def peak_bf16_tflops(gpu_name: str) -> float | None:
    """The dense bf16 peak of the GPU called `gpu_name`, or None for one not in PEAK_BF16_TFLOPS."""
    return next((peak for key, peak in PEAK_BF16_TFLOPS if key.lower() in gpu_name.lower()), None)


def parse_items(text: str) -> list[Item]:
    """argparse type of --items: "1,2,3" -> those items, in the given order, each once."""
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        numbers = []
    if not numbers or any(n not in BY_NUMBER for n in numbers) or len(set(numbers)) != len(numbers):
        raise argparse.ArgumentTypeError(f"{text!r}: give item numbers from {sorted(BY_NUMBER)}, each once")
    return [BY_NUMBER[n] for n in numbers]


def parse_args(argv=None) -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--device", choices=["cuda", "cpu"], help="cpu: the dry run at tiny shapes")
    mode.add_argument(
        "--stage-data", type=Path, metavar="DIR", help="write item 1's data into DIR (then carry DIR)"
    )
    p.add_argument(
        "--items", type=parse_items, default=list(ITEMS), help="e.g. 1,2,3 (default: all, in order)"
    )
    p.add_argument(
        "--data-dir", type=Path, metavar="DIR", help="item 1's data, as --stage-data wrote it (.gpu-data)"
    )
    p.add_argument("--data", type=Path, help="WikiText file for item 5 (e.g. .gpu-data/wiki.valid.tokens)")
    p.add_argument(
        "--out", type=Path, default=os.environ.get("OUT"), help="where the report goes (default: $OUT)"
    )
    p.add_argument(
        "--budget", type=float, help="seconds for all the chosen items (default: the sum of their caps)"
    )
    p.add_argument("--cap", action="append", default=[], metavar="N=SECONDS", help="another cap for item N")
    p.add_argument(
        "--pretrain-set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="settings for item 5 on a GPU (`nanobert pretrain --set`), e.g. batch_size=256",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a report already in --out")
    staging = p.add_argument_group("--stage-data DIR takes")
    staging.add_argument("--train", type=Path, help="the training text (wiki-squad/train.raw)")
    staging.add_argument("--test", type=Path, help="the held-out text (wikitext-2/wiki.test.raw)")
    staging.add_argument("--blimp", type=Path, metavar="DIR", help="BLiMP's folder of .jsonl files")
    staging.add_argument(
        "--blimp-pairs", type=positive_int, default=BLIMP_PAIRS["cuda"], help="pairs kept per paradigm"
    )
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> Context:
    """Everything that can fail fast, before any item runs; the Context the items need."""
    if args.out is None:
        raise NanobertError("--out is needed where $OUT is not set")
    if (args.out / JSON_NAME).exists() and not args.overwrite:
        raise NanobertError(f"{args.out / JSON_NAME} exists; choose another --out or pass --overwrite")
    caps = {}
    for text in args.cap:
        number, _, seconds = text.partition("=")
        try:
            caps[int(number)] = float(seconds)
        except ValueError:
            raise NanobertError(f"--cap {text!r}: expected N=SECONDS, e.g. --cap 2=240") from None
        if int(number) not in BY_NUMBER or not caps[int(number)] > 0:
            raise NanobertError(
                f"--cap {text!r}: item {number} is not one of {sorted(BY_NUMBER)}, or seconds <= 0"
            )
    args.caps = caps
    if args.budget is not None and not args.budget > 0:
        raise NanobertError(f"--budget must be positive, got {args.budget:g}")
    if args.train or args.test or args.blimp:
        raise NanobertError("--train, --test and --blimp go with --stage-data; the items read --data-dir")
    data = data_dir = None
    if wanting := numbers(args.items, "needs_data"):
        if args.data is None:
            raise NanobertError(f"item {wanting} trains on a text file: give --data (a WikiText file)")
        data = check_input_file(args.data, "--data").resolve()
    if wanting := numbers(args.items, "needs_data_dir"):
        if args.data_dir is None:
            raise NanobertError(
                f"item {wanting} reads staged data: give --data-dir (written by --stage-data)"
            )
        data_dir = check_staged(args.data_dir).resolve()
    wanting = numbers(args.items, "needs_transformers")
    if wanting and importlib.util.find_spec("transformers") is None:
        raise NanobertError(f"items {wanting} compare with transformers, which is not installed here")
    gpu = peak = None
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise NanobertError("--device cuda but torch sees no CUDA GPU here; --device cpu is the dry run")
        gpu = torch.cuda.get_device_name(0)
        peak = peak_bf16_tflops(gpu)
    if args.pretrain_set:  # checked now, not after minutes of other items
        build_configs("base", *parse_overrides(args.pretrain_set))
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    return Context(args.device, gpu, peak, data, args.out.resolve(), work, data_dir, tuple(args.pretrain_set))


def numbers(items: list[Item], need: str) -> str:
    """The numbers of the items with the need `need` ("1" or "2,3,4"); "" for none."""
    return ",".join(str(item.number) for item in items if getattr(item, need))


# --- item 1's data, staged for the device -------------------------------------------------------------------


def check_staged(folder: Path) -> Path:
    """`folder` if it holds what --stage-data writes, else a one-line NanobertError naming what is missing."""
    for name in (STAGED_TRAIN, STAGED_TEST):
        if not (folder / name).is_file():
            raise NanobertError(f"--data-dir {folder}: no {name} there; build the folder with --stage-data")
    if not any((folder / STAGED_BLIMP).glob("*.jsonl")):
        raise NanobertError(
            f"--data-dir {folder}: no {STAGED_BLIMP}/*.jsonl there; build it with --stage-data"
        )
    return folder


def stage_data(folder: Path, train: Path, test: Path, blimp: Path, pairs: int) -> str:
    """Write item 1's data into `folder`: `train` and `test` as train.raw and wiki.test.raw, and each BLiMP
    paradigm of the folder `blimp` cut to its first `pairs` pairs (blimp/*.jsonl; any other .jsonl there is
    removed). Everything is read and checked, and its size against the call's carry, before anything is
    written. Returns the line that says what was written."""
    train, test = check_input_file(train, "--train"), check_input_file(test, "--test")
    paradigms = sorted(blimp.glob("*.jsonl")) if blimp.is_dir() else []
    if not paradigms:
        raise NanobertError(f"--blimp {blimp}: no .jsonl files there; give BLiMP's data/ folder")
    cut = {}
    for path in paradigms:
        read_blimp_file(path, pairs)  # a file that is not BLiMP fails here, before anything is written
        lines = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
        cut[path.name] = "".join(line if line.endswith("\n") else line + "\n" for line in lines[:pairs])
    sizes = {
        STAGED_TRAIN: train.stat().st_size,
        STAGED_TEST: test.stat().st_size,
        STAGED_BLIMP: sum(len(text.encode("utf-8")) for text in cut.values()),
    }
    total = sum(sizes.values()) / 2**20
    if total > CARRY_ROOM_MIB:
        raise NanobertError(
            f"the staged data would be {total:.1f} MiB, over the {CARRY_ROOM_MIB:g} MiB a call carries"
        )
    (folder / STAGED_BLIMP).mkdir(parents=True, exist_ok=True)
    for stale in (folder / STAGED_BLIMP).glob("*.jsonl"):
        stale.unlink()
    shutil.copyfile(train, folder / STAGED_TRAIN)
    shutil.copyfile(test, folder / STAGED_TEST)
    for name, text in cut.items():
        (folder / STAGED_BLIMP / name).write_text(text, encoding="utf-8")
    parts = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in sizes.items())
    return (
        f"gpu_check: staged {folder}: {parts} ({len(cut)} paradigms, at most {pairs} pairs each); "
        f"{total:.1f} MiB to carry (name {folder} in the call's carry)"
    )


def item_cap(item: Item, args, ctx: Context) -> float:
    return args.caps.get(item.number, item.cap_s if ctx.device == "cuda" else item.dry_cap_s)


def header(ctx: Context) -> dict:
    try:
        from importlib.metadata import version

        transformers = version("transformers")
    except Exception:  # noqa: BLE001 (the report says so; items 4-5 do not need it)
        transformers = "not installed"
    if ctx.device == "cuda":
        note = None if ctx.peak_tflops else f"no known dense bf16 peak for {ctx.gpu!r}: MFU not given"
    else:
        note = "the CPU's matmul peak measured by throughput.py (dry run); none for pretraining"
    return {
        "device": ctx.device,
        "device_name": ctx.gpu or cpu_name(),
        "peak_tflops": ctx.peak_tflops,
        "peak_note": note,
        "torch": torch.__version__,
        "transformers": transformers,
        "python": platform.python_version(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "work": str(ctx.work),
    }


def main() -> None:
    args = parse_args()
    if args.stage_data is not None:
        print(stage_data(args.stage_data, args.train, args.test, args.blimp, args.blimp_pairs))
        return
    ctx = check_args(args)
    caps = [item_cap(item, args, ctx) for item in args.items]
    budget = args.budget if args.budget is not None else sum(caps) + 5
    deadline = time.perf_counter() + budget
    report = Report(ctx.out, {**header(ctx), "budget_s": budget})
    for item, cap in zip(args.items, caps, strict=True):
        record = {
            "number": item.number,
            "name": item.name,
            "title": item.title if ctx.device == "cuda" else f"dry run of: {item.title}",
            "cap_s": cap,
            "status": "pending",
        }
        report.items.append(record)
    report.write()
    env = child_env()
    # the item's process group is not in a terminal's foreground: a stop of this script must end it too
    previous = {signum: signal.signal(signum, _stop_items) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        for item, record in zip(args.items, report.items, strict=True):
            record["cap_s"] = cap = min(record["cap_s"], deadline - time.perf_counter() - 2)
            if cap < MIN_CAP_S[ctx.device]:
                record.update(status="skipped", note=f"{max(cap, 0):.0f} s left of the budget")
            else:
                run_item(item, record, ctx, cap, env, on_step=report.write)
            print(table_row(record), flush=True)
            report.write()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print()
    print(report.markdown(), end="")


def run_item(item: Item, record: dict, ctx: Context, cap: float, env: dict, on_step: Callable) -> None:
    """Run one item's steps in order under `cap`; put each step's command, status, seconds and exit code, the
    item's status (the first step's that is not "ok"; "running" while steps remain) and its figures so far
    in `record`, and call `on_step` after every step (the report goes to disk). A step may run what is left
    of the cap less the seconds kept for the steps after it, and is skipped with too little. A bug in the
    item's steps or figures is that item's failure alone: the next items still run."""
    end = time.perf_counter() + cap
    try:
        steps = item.steps(ctx, cap)
        log = ctx.out / f"item{item.number}.log"
        log.write_bytes(b"")
        record.update(log=log.name, seconds=0.0, steps=[])
        for number, step in enumerate(steps, 1):
            shown = f"item {item.number} ({item.name}) step {step.name}"
            done = run_step(step, shown, end - time.perf_counter() - step.keep_s, ctx, log, env)
            record["steps"].append(done)
            record["seconds"] += done["seconds"]
            statuses = [s["status"] for s in record["steps"]]
            record["status"] = next(
                (s for s in statuses if s != "ok"), "ok" if number == len(steps) else "running"
            )
            read_figures(item, record, ctx, log)
            on_step()
    except Exception as e:  # noqa: BLE001
        if record["status"] in ("pending", "running"):  # it broke before or between its steps
            record["status"] = "failed"
        record.update(figures=record.get("figures") or {}, note=f"gpu_check: {type(e).__name__}: {e}")


def run_step(step: Step, shown: str, cap: float, ctx: Context, log: Path, env: dict) -> dict:
    """Run `step` for at most `cap` seconds, its output after a header line in `log` (what `step_output`
    finds), unless `cap` is too short; its name, command, status, seconds and exit code."""
    done = {"name": step.name, "command": step.command, "seconds": 0.0, "exit_code": None}
    if cap < MIN_CAP_S[ctx.device]:
        return {**done, "status": "skipped", "note": f"{max(cap, 0):.0f} s left of the item's cap"}
    print(f"gpu_check: {shown}, cap {cap:.0f} s: {' '.join(step.command)}", flush=True)
    with log.open("a") as out:
        out.write(f"{STEP_HEADER}{step.name}: {' '.join(step.command)}\n")
    stdout = ctx.work / step.stdout if step.stdout else None
    status, seconds, code = run_capped(step.command, cap, log, env, stdout)
    return {**done, "status": status, "seconds": seconds, "exit_code": code}


def read_figures(item: Item, record: dict, ctx: Context, log: Path) -> None:
    """The item's figures from what its steps wrote so far; a bug reading them is a note, and the steps go
    on."""
    try:
        record["figures"] = item.figures(ctx, trim_log(log))
    except Exception as e:  # noqa: BLE001
        record.update(figures=record.get("figures") or {}, note=f"gpu_check: {type(e).__name__}: {e}")


if __name__ == "__main__":
    raise SystemExit(run_script("gpu_check.py", main))
