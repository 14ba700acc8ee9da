"""The prepared device check of issue 42: what a lent GPU measures first, in one script that always brings
back what it finished.

Items, in order, each in its own process under its own time cap, so that one slow compile cannot starve
the rest:

  1 base-eager      throughput.py --shape base --batch-size 256 --seq-len 128, bf16, eager, both models
  2 base-compiled   the same with torch.compile on both sides, every batch of one shape (one compile each);
                    compile time apart from the steady rate
  3 mini-graphs     --shape mini: nanobert in CUDA graphs (mode="reduce-overhead", static shapes) against
                    compiled transformers
  4 pretrain-base   `nanobert pretrain --preset base` for 180 s on a WikiText file (--data): tokens/s, MFU
                    and peak memory from the run's own summary.json
  5 cuda-tests      the tests marked `cuda` (pytest -m cuda)

After every item, gpu_check.json (every figure, each item's command and status) and gpu_check.md (the table)
are rewritten under --out ($OUT by default), with each item's log beside them (item1.log ...), so a call
stopped at its limit still returns all that finished. The table is printed last. `--items` picks some: a
device command runs at most 600 s, so the check is two calls (items 1-3, then 4-5; benchmarks/README.md
gives both). An item's cap shrinks to what is left of --budget; an item with too little left is skipped.

MFU: useful FLOPs per token (throughput.py's count) times tokens/s, over the GPU's dense bf16 peak looked up
by its name (`PEAK_BF16_TFLOPS`; an unknown GPU gets no MFU, and the report says so).

--device cpu is the dry run: the same items, code paths and outputs at tiny shapes (seconds each), fp32,
torch.compile through dynamo's eager backend (no code generation; no CUDA graphs on a CPU), dropout off (the
CPU's dropout draws its mask on the host, a path CUDA never takes, which the sync check would report).

    python benchmarks/gpu_check.py --device cuda --items 1,2,3 --out $OUT
    python benchmarks/gpu_check.py --device cuda --items 4,5 --data .gpu-data/wiki.valid.tokens --out $OUT
    python benchmarks/gpu_check.py --device cpu --data $D/wiki.valid.tokens --out /tmp/gpu-dry
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from nanobert.config import ModelConfig, build_configs, config_from_dict, parse_overrides
from nanobert.device import cpu_name
from nanobert.errors import ArgumentParser, NanobertError, check_input_file, run_script

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
PRETRAIN_SECONDS = 180.0  # the issue's 3 minutes of training
PRETRAIN_SETUP_S = 45.0  # imports, tokenizer, instances, final evaluation and saving a base checkpoint


@dataclass
class Context:
    """What every item's command and figures need: the checked arguments and where things go."""

    device: str  # "cuda" or "cpu"
    gpu: str | None  # the GPU's name
    peak_tflops: float | None  # its dense bf16 peak; None: unknown (or the CPU)
    data: Path | None
    out: Path
    work: Path  # scratch: throughput's JSON files, the pretraining run (checkpoints stay off --out)
    pretrain_set: tuple[str, ...] = ()  # --pretrain-set: KEY=VALUE settings for item 4 on a GPU
    python: str = sys.executable


@dataclass(frozen=True)
class Item:
    """One check: its command (given the seconds it may run) and the figures read from what it wrote."""

    number: int
    name: str
    title: str
    cap_s: float  # on a GPU
    dry_cap_s: float  # on the CPU
    command: Callable[[Context, float], list[str]]
    figures: Callable[[Context, str], dict]  # (ctx, the item's log) -> figures
    needs_data: bool = False
    needs_transformers: bool = False


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

    return Item(number, name, title, cap_s, DRY_CAP_S, command, figures, needs_transformers=True)


def pretrain_command(ctx: Context, cap: float) -> list[str]:
    run = ctx.work / "pretrain-run"
    cmd = [ctx.python, "-m", "nanobert", "pretrain", "--train", str(ctx.data), "--device", ctx.device]
    cmd += ["--out", str(run), "--overwrite"]
    if ctx.device == "cuda":
        seconds = max(min(PRETRAIN_SECONDS, cap - PRETRAIN_SETUP_S), 10.0)
        cmd += ["--preset", "base", "--time-budget", f"{seconds:g}"]
        return cmd + (["--set", *ctx.pretrain_set] if ctx.pretrain_set else [])
    # dry run: the tiny shape, a few seconds, no timing of precisions
    settings = ["precision=fp32", "vocab_size=300", "batch_size=8", "max_seq_len=32", "eval_interval=20"]
    return cmd + ["--preset", "tiny", "--time-budget", "4", "--set", *settings]


def pretrain_figures(ctx: Context, log: str) -> dict:
    """tokens/s, MFU and peak memory from the run's summary.json (absent when the run did not get there)."""
    try:
        summary = json.loads((ctx.work / "pretrain-run" / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    config = config_from_dict(ModelConfig, summary["model"])
    seq_len, mask_prob = summary["train"]["max_seq_len"], summary["train"]["mask_prob"]
    # per token of a full-length sequence: attention counted at max_seq_len (an upper bound for shorter ones)
    flops_per_token = throughput_module().useful_flops(config, 1, seq_len, mask_prob * seq_len) / seq_len
    rate = summary["tokens_per_s"]
    steady = steady_tokens_per_s(ctx.work / "pretrain-run" / "metrics.jsonl")
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
    throughput_item(1, "base-eager", "BERT-base, bf16, eager", 60, "base"),
    throughput_item(
        2, "base-compiled", "BERT-base, bf16, torch.compile", 210, "base", "--compile", "--static-shapes"
    ),
    throughput_item(
        3, "mini-graphs", "mini: nanobert in CUDA graphs, transformers compiled", 120, "mini", "--cuda-graphs"
    ),
    Item(4, "pretrain-base", "nanobert pretrain --preset base, 180 s", 225, DRY_CAP_S, pretrain_command,
         pretrain_figures, needs_data=True),
    Item(5, "cuda-tests", "pytest -m cuda", 75, DRY_CAP_S, pytest_command, pytest_figures),
)  # fmt: skip
BY_NUMBER = {item.number: item for item in ITEMS}
MIN_CAP_S = {"cuda": 20.0, "cpu": 5.0}  # an item with less time left than this is skipped


# --- running an item under its cap --------------------------------------------------------------------------


def run_capped(cmd: list[str], cap: float, log: Path, env: dict) -> tuple[str, float, int | None]:
    """Run `cmd` in its own process group for at most `cap` seconds, output to `log`: (status, seconds, exit
    code). At the cap the group gets SIGTERM (a training run then saves and writes its summary), and SIGKILL
    a few seconds later; status is "ok", "failed" (non-zero exit) or "timeout". The group stays in this
    session (no setsid), so whatever ends this script's session ends the item too: the device tool spares
    only processes that started a session of their own."""
    grace = min(15.0, 0.1 * cap)
    start = time.perf_counter()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT, process_group=0)
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
    elif "tokens_per_s" in f:  # the pretraining run
        final = f.get("final") or {}
        notes = f"{f.get('steps')} steps in {f.get('train_time_s')} s, {f.get('stop_reason')}"
        if "mlm_accuracy" in final:
            notes += f"; final MLM accuracy {final['mlm_accuracy']:.3f}"
        if f.get("steady_tokens_per_s"):
            notes += f"; second half's log windows {_num(f['steady_tokens_per_s'])} tokens/s"
            notes += f" ({_pct(f.get('steady_mfu'))} MFU)"
        mem = _gib(f.get("peak_gpu_memory_gib"))
        cells += [_num(f["tokens_per_s"]), "-", "-", _pct(f.get("mfu")), "-", "-", mem, notes]
    else:  # the tests, or an item that left no figures
        counts = ", ".join(f"{n} {word}" for word, n in f.items()) or item.get("note", "")
        cells += ["-"] * 7 + [counts]
    return "| " + " | ".join(cells) + " |"


def _num(x) -> str:
    return f"{x:,.0f}" if isinstance(x, int | float) else "-"


def _pct(x) -> str:
    return f"{x:.1%}" if isinstance(x, int | float) else "n/a"


def _sec(x) -> str:
    return f"{x:.1f}" if isinstance(x, int | float) else "-"


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
    p.add_argument("--device", choices=["cuda", "cpu"], required=True, help="cpu: the dry run at tiny shapes")
    p.add_argument(
        "--items", type=parse_items, default=list(ITEMS), help="e.g. 1,2,3 (default: all, in order)"
    )
    p.add_argument("--data", type=Path, help="WikiText file for item 4 (e.g. .gpu-data/wiki.valid.tokens)")
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
        help="settings for item 4 on a GPU (`nanobert pretrain --set`), e.g. batch_size=256",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a report already in --out")
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
    data = None
    if any(item.needs_data for item in args.items):
        if args.data is None:
            raise NanobertError(
                "item 4 trains on a text file: give --data (e.g. .gpu-data/wiki.valid.tokens)"
            )
        data = check_input_file(args.data, "--data").resolve()
    if (
        any(item.needs_transformers for item in args.items)
        and importlib.util.find_spec("transformers") is None
    ):
        raise NanobertError("items 1-3 compare with transformers, which is not installed here")
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
    return Context(args.device, gpu, peak, data, args.out.resolve(), work, tuple(args.pretrain_set))


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
                run_item(item, record, ctx, cap, env)
            print(table_row(record), flush=True)
            report.write()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print()
    print(report.markdown(), end="")


def run_item(item: Item, record: dict, ctx: Context, cap: float, env: dict) -> None:
    """Run one item under `cap` and put its command, status, time and figures in `record`. A bug in the
    item's command or figures is that item's failure alone: the next items still run."""
    try:
        cmd = item.command(ctx, cap)
        log = ctx.out / f"item{item.number}.log"
        print(f"gpu_check: item {item.number} ({item.name}), cap {cap:.0f} s: {' '.join(cmd)}", flush=True)
        status, seconds, code = run_capped(cmd, cap, log, env)
        record.update(command=cmd, status=status, seconds=seconds, exit_code=code, log=log.name)
        record["figures"] = item.figures(ctx, trim_log(log))
    except Exception as e:  # noqa: BLE001
        if record["status"] == "pending":  # it broke before its command ran
            record["status"] = "failed"
        record.update(figures=record.get("figures") or {}, note=f"gpu_check: {type(e).__name__}: {e}")


if __name__ == "__main__":
    raise SystemExit(run_script("gpu_check.py", main))
