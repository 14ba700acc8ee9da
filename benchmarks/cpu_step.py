"""The first run's training step on a CPU: where its time goes, beside the ceiling of its matrix multiplies,
and side by side with the same step of another revision of nanobert, in one process.

The step is the trainer's (`engine.loop.Loop.train_step`) at the first run's shape (the `wikitext2-cpu`
recipe at the two layers its depth rule picks on the default-scale corpus on AVX2 and AVX512-BF16 CPUs, or
the four an AMX Xeon's first run trains with `--layers 4`: H 128, V 8,192, batch 32 x 128,
45% of tokens masked, no dropout, roles attention kept by `keep_roles`): forward under the precision's
autocast with the query layout the trainer feeds, backward, the gradient norm clipped, torch's fused AdamW.
Batches are random token ids (throughput.py's `make_batches`); speed does not depend on the words.

- **Time by kind** (`--profile N`): torch.profiler's self time of every operation over N steps, summed by
  kind: each matrix multiply, attention, LayerNorm, GELU, other elementwise work, dtype casts, the
  embedding gather and its gradient, the MLM decoder and its loss (everything inside the chunked
  vocabulary loss), NSP and the pooler, the gradient clip and the optimizer.
- **The ceiling**: every matrix multiply the profiled step ran, at its shape and dtype, timed alone in this
  process (best of a few): the step if it were nothing but its matmuls.
- **Before and after** (`--before REV`): REV's `src/nanobert` (from git) loaded beside this tree's in the
  same process, both models given the same weights, timed in alternating rounds; the ratio is after/before
  in tokens/s.
- **Compiled** (`--compile`): this tree's step once more with the model under `torch.compile`, as
  `--set compile=true` trains it (default mode; forward and backward compiled, the optimizer eager), timed
  in the same rounds after its compilation, which is timed apart: whether compiling pays back within a
  first run.

    python benchmarks/cpu_step.py --precision bf16 --profile 10 --before HEAD~4 --json step.json
    python benchmarks/cpu_step.py --precision bf16 --compile --rounds 7

Utilisation is against the best of a few large square matmuls in the same dtype, measured here
(flops.matmul_peak), and the useful work is flops.useful_flops (the MLM head at masked positions only).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch
from flops import matmul_peak, useful_flops

from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script

ROOT = Path(__file__).resolve().parents[1]
MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
KINDS = [  # (kind, operation names or prefixes), first match wins; the ancestors' scopes are checked first
    ("attention", ("aten::_scaled_dot_product", "aten::_softmax", "aten::softmax")),
    ("LayerNorm", ("aten::native_layer_norm",)),
    ("GELU", ("aten::gelu",)),
    ("dtype casts", ("aten::_to_copy", "aten::to", "aten::copy_")),
    ("embedding gather and gradient", ("aten::embedding", "aten::index_select", "aten::index_add")),
    ("keep_roles' gradient mask", ("aten::masked_fill",)),  # the step's only masked_fill: no padding here
]
SCOPES = [  # operations under these ancestors belong to one part of the step, whatever they are
    ("MLM decoder and loss", "_LinearCrossEntropy"),
    ("gradient clip", "clip"),
    ("optimizer", "Optimizer.step"),
]


def load_nanobert(src: Path):
    """The `nanobert` package under `src` (a folder holding nanobert/), imported fresh: the modules a step
    needs, returned as a namespace. Earlier imports of nanobert are dropped from sys.modules first, so two
    trees can be loaded one after the other and their classes used side by side."""
    for name in [n for n in sys.modules if n == "nanobert" or n.startswith("nanobert.")]:
        del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        mods = {n: importlib.import_module(f"nanobert.{n}") for n in ("config", "model", "initialization")}
        mods["recipes"] = importlib.import_module("nanobert.pretraining.recipes")
        mods["masking"] = importlib.import_module("nanobert.data.masking")
        mods["device"] = importlib.import_module("nanobert.device")
    finally:
        sys.path.remove(str(src))
    return type("Tree", (), mods)


def tree_at(rev: str, into: Path) -> Path:
    """`src/nanobert` of git revision `rev`, extracted under `into`; returns the folder holding nanobert/."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src/nanobert"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


class Step:
    """The trainer's step for one tree: model, fused AdamW, keep_roles, clip; `run(batch)` is one step."""

    def __init__(self, tree, amp_dtype, layers: int = 2, seed: int = 0, compile: bool = False):
        preset = tree.recipes.PRESETS["wikitext2-cpu"]["model"]
        self.config = tree.config.ModelConfig(**{**preset, "num_hidden_layers": layers, "vocab_size": 8192})
        torch.manual_seed(seed)
        self.model = tree.model.BertForPreTraining(self.config).train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
        tree.initialization.keep_roles(self.model, self.opt)
        self.amp_dtype = amp_dtype
        # as the trainer does: keep_roles' hooks first, then compile; `model` stays unwrapped for its weights
        self.train_model = torch.compile(self.model) if compile else self.model

    def run(self, batch) -> None:
        with torch.autocast("cpu", dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            out = self.train_model(**batch, return_logits=False)
        out.loss.backward()
        with torch.profiler.record_function("clip"):
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)


def make_inputs(n: int, mask_prob: float):
    """n random batches of the first run's shape, fed as the trainer feeds them (query layout, no padding)."""
    from throughput import TRAINER_KEYS, make_batches

    return [{k: b[k] for k in TRAINER_KEYS} for b in make_batches(n, 32, 128, 8192, mask_prob, seed=0)]


def seconds_per_step(step: Step, batches, n: int) -> float:
    start = time.perf_counter()
    for i in range(n):
        step.run(batches[i % len(batches)])
    return (time.perf_counter() - start) / n


def decoder_seconds(step: Step, n_masked: int, n: int = 10) -> float:
    """Seconds of the MLM decoder and its loss alone (transform, tied vocabulary projection, chunked
    cross-entropy; forward and backward) at the step's masked rows: a direct timing, because the profiler
    slows the earlier loss's many large copies several times over (the whole old bf16 step 3.7x)."""
    head, weight = step.model.mlm_head, step.model.bert.embeddings.word_embeddings.weight
    torch.manual_seed(1)
    h = torch.randn(n_masked, weight.size(1), requires_grad=True)
    target = torch.randint(5, weight.size(0), (n_masked,))

    def once() -> None:
        with torch.autocast("cpu", dtype=step.amp_dtype, enabled=step.amp_dtype is not None):
            loss = head.loss(h, weight, target)
        loss.backward()

    once()
    start = time.perf_counter()
    for _ in range(n):
        once()
    step.model.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / n


def kind_of(event) -> str:
    """The kind an operation's self time counts to: its scope's (an ancestor's name), else its own name's."""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name.removeprefix("autograd::engine::evaluate_function: ")  # a backward's scope
        for kind, scope in SCOPES:
            if name.startswith(scope):
                return kind
        parent = parent.cpu_parent
    if event.name in MATMULS:
        return "matrix multiplies"
    for kind, prefixes in KINDS:
        if event.name.startswith(prefixes):
            return kind
    return "other elementwise and overhead"


def profile(step: Step, batches, n: int) -> tuple[dict[str, float], list]:
    """ms per step by kind over n profiled steps, and the matmuls' (name, shapes) for the ceiling."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(n):
            step.run(batches[i % len(batches)])
    kinds: dict[str, dict[str, float]] = {}  # kind -> operation -> ms per step
    matmuls = []
    for event in prof.events():
        ops = kinds.setdefault(kind_of(event), {})
        ops[event.name] = ops.get(event.name, 0.0) + event.self_cpu_time_total / 1e3 / n
        if event.name in MATMULS:
            matmuls.append((event.name, [list(s) for s in event.input_shapes if s]))
    by_kind = {
        kind: {"ms": sum(ops.values()), "top": dict(sorted(ops.items(), key=lambda kv: -kv[1])[:4])}
        for kind, ops in kinds.items()
    }
    return dict(sorted(by_kind.items(), key=lambda kv: -kv[1]["ms"])), matmuls


def profile_report(name: str, step: Step, batches, n: int, dtype, flops: float, peak: float) -> dict:
    """Time by kind over n profiled steps and the ceiling of the step's matmuls, printed and returned."""
    kinds, matmuls = profile(step, batches, n)
    counts = Counter((op, json.dumps(shapes)) for op, shapes in matmuls)  # the same shapes recur every step
    ceiling = sum(k * matmul_seconds(op, json.loads(shapes), dtype) for (op, shapes), k in counts.items()) / n
    step_ms = seconds_per_step(step, batches, 10) * 1e3
    print(f"{name}: {sum(k['ms'] for k in kinds.values()):.1f} ms/step under the profiler; by kind:")
    for kind, figures in kinds.items():
        top = ", ".join(f"{op} {ms:.1f}" for op, ms in list(figures["top"].items())[:3])
        print(f"  {figures['ms']:7.2f} ms  {kind}  ({top})")
    print(
        f"  ceiling (its {len(matmuls) / n:.0f} matmuls alone): {ceiling * 1e3:.1f} ms; the step is at ",
        end="",
    )
    print(f"{ceiling * 1e3 / step_ms:.0%} of it; {flops / ceiling / peak:.0%} of peak at the ceiling")
    return {"ms_by_kind": kinds, "ceiling_ms": ceiling * 1e3, "step_ms": step_ms, "matmuls": len(matmuls) / n}


def matmul_seconds(name: str, shapes: list, dtype: torch.dtype, repeats: int = 20) -> float:
    """Best time of one matmul of `name` at `shapes` (addmm: bias, a, b) in `dtype`, alone."""
    a, b = (shapes[1], shapes[2]) if name in ("aten::addmm", "aten::baddbmm") else (shapes[0], shapes[1])
    x, y = torch.randn(a, dtype=dtype), torch.randn(b, dtype=dtype)
    fn = torch.bmm if len(a) == 3 else torch.mm
    fn(x, y)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(x, y)
        best = min(best, time.perf_counter() - start)
    return best


def parse_args(argv=None):
    """The options, each checked before any model is built: a --before that git cannot read is one line."""
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--profile", type=positive_int, help="profile this many steps: time by kind, the ceiling")
    p.add_argument("--before", help="a git revision whose step is timed beside this tree's")
    p.add_argument("--compile", action="store_true", help="time this tree's step under torch.compile too")
    p.add_argument("--steps", type=positive_int, default=10, help="timed steps per side per round")
    p.add_argument("--rounds", type=positive_int, default=5)
    p.add_argument("--threads", type=positive_int, help="torch threads (default: torch's choice)")
    p.add_argument("--mask-prob", type=float, default=0.45, help="the first run's training masking")
    # two layers: the first run's depth on AVX2 and AVX512-BF16 CPUs; an AMX Xeon's first run trains four
    p.add_argument("--layers", type=positive_int, default=2, help="encoder layers (the first run's depth)")
    p.add_argument("--json", type=Path, help="write every figure to this JSON file")
    args = p.parse_args(argv)
    if not 0 < args.mask_prob <= 1:
        raise NanobertError(f"--mask-prob must be in (0, 1], got {args.mask_prob:g}")
    if args.before is not None:
        found = subprocess.run(
            ["git", "-C", str(ROOT), "cat-file", "-e", f"{args.before}:src/nanobert/model.py"],
            capture_output=True,
        )
        if found.returncode != 0:
            raise NanobertError(
                f"--before {args.before}: git finds no src/nanobert/model.py at that revision"
            )
    return args


def build_sides(args, amp_dtype) -> dict[str, Step]:
    """The steps timed side by side (REV, this tree, this tree compiled), all given this tree's weights."""
    with tempfile.TemporaryDirectory() as tmp:
        sides = {}
        if args.before:
            before = load_nanobert(tree_at(args.before, Path(tmp)))
            sides[f"before ({args.before})"] = Step(before, amp_dtype, args.layers)
        here = load_nanobert(ROOT / "src")
        here.device.keep_freed_memory()  # what every nanobert job does on a CPU
        sides["this tree"] = Step(here, amp_dtype, args.layers)
        if args.compile:
            sides["this tree, compiled"] = Step(here, amp_dtype, args.layers, compile=True)
    state = sides["this tree"].model.state_dict()
    for step in sides.values():
        step.model.load_state_dict(state)
    return sides


def compile_payback(times: dict[str, list[float]], report: dict) -> None:
    """Compiled against eager: the ratio, compilation's own seconds (the warm-up less its 3 steps), and the
    steps after which the compiled run has made as many as the eager one would have (n * (eager - compiled)
    = those seconds)."""
    eager, compiled = (statistics.median(times[n]) for n in ("this tree", "this tree, compiled"))
    report["compiled_ratio"] = eager / compiled
    cost = report["compile_warmup_s"] - 3 * compiled
    even = cost / (eager - compiled) if eager > compiled else None
    report["compile_pays_back_after_steps"] = even
    print(
        f"compiled / eager: {eager / compiled:.2f}x tokens/s; compiling took {cost:.1f} s, "
        + (f"paid back after {even:,.0f} steps" if even else "never paid back")
    )


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    amp_dtype = torch.bfloat16 if args.precision == "bf16" else None
    dtype = amp_dtype or torch.float32
    batches = make_inputs(4, args.mask_prob)
    n_masked = statistics.mean(float((b["labels"] != -100).sum()) for b in batches)
    sides = build_sides(args, amp_dtype)
    flops = useful_flops(sides["this tree"].config, 32, 128, n_masked)
    peak = matmul_peak(amp_dtype)
    report = {"precision": args.precision, "layers": args.layers, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "peak_tflops": peak / 1e12,
              "useful_gflop_per_step": flops / 1e9, "sides": {}}  # fmt: skip
    for name, step in sides.items():
        start = time.perf_counter()
        seconds_per_step(step, batches, 3)  # warm-up, and compilation
        if step.train_model is not step.model:
            report["compile_warmup_s"] = time.perf_counter() - start
            print(f"{name}: compiled and ran 3 steps in {report['compile_warmup_s']:.1f} s")
    times = {name: [] for name in sides}
    eager_sides = {name: step for name, step in sides.items() if step.train_model is step.model}
    for _ in range(args.rounds):
        for name, step in sides.items():
            times[name].append(seconds_per_step(step, batches, args.steps))
    for name, ts in times.items():
        t = statistics.median(ts)
        report["sides"][name] = {
            "ms_per_step": t * 1e3,
            "tokens_per_s": 32 * 128 / t,
            "share_of_peak": flops / t / peak,
            "round_ms": [x * 1e3 for x in ts],
        }
        print(
            f"{name:24s} {32 * 128 / t:9,.0f} tokens/s {t * 1e3:7.1f} ms/step {flops / t / peak:6.1%} of peak"
        )
    for name, step in eager_sides.items():
        ms = decoder_seconds(step, round(n_masked)) * 1e3
        report["sides"][name]["decoder_and_loss_ms"] = ms
        print(f"{name:24s} the MLM decoder and its loss alone: {ms:.1f} ms")
    if args.before:
        ratio = statistics.median(times[f"before ({args.before})"]) / statistics.median(times["this tree"])
        report["ratio"] = ratio
        print(f"this tree / before: {ratio:.2f}x tokens/s")
    if args.compile:
        compile_payback(times, report)
    if args.profile:
        report["profiles"] = {}
        for name, step in reversed(eager_sides.items()):  # a compiled step's kernels have no kinds here
            report["profiles"][name] = profile_report(name, step, batches, args.profile, dtype, flops, peak)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(run_script("cpu_step.py", main))
