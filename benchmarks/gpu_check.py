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

MFU: useful FLOPs per token (flops.py's count) times tokens/s, over the GPU's dense bf16 peak looked up
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
import os
import platform
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch

# gpu_check's parts, beside it in benchmarks/ (the folder a script runs from is on its import path)
from gpu_items import (
    BLIMP_PAIRS,
    BY_NUMBER,
    ITEMS,
    MIN_CAP_S,
    ROOT,
    STEP_HEADER,
    Context,
    Item,
    Step,
)
from gpu_report import JSON_NAME, Report, table_row
from gpu_staging import check_staged, stage_data

from nanobert.cli.overrides import parse_overrides
from nanobert.device import cpu_name
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.files import check_input_file
from nanobert.pretraining.recipes import build_configs

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
