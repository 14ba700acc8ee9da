"""What bounds the first run's four-layer bf16 step on a CPU: three upper bounds timed side by side in one
process (median of alternating rounds), and the step's operation count against one operation's dispatch cost.

- the trainer's step: fp32 weights, bf16 autocast (`cpu_step.Step`);
- bf16 activations: the same, with every LayerNorm reading and returning bf16, so the residual stream is
  bf16 and no activation is cast before a matmul (the casts autocast adds around LayerNorm's fp32 input);
- bf16 everything: the model's weights, gradients and AdamW state in bf16, no autocast: no cast at all (an
  upper bound only: training so would round every update to bf16).

Run from the repository root with nothing else running: python benchmarks/records/<this>/bounds.py
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
import cpu_step  # noqa: E402

LAYERS, ROUNDS, STEPS = 4, 9, 6


class BF16LayerNorm(torch.nn.Module):
    """A LayerNorm that reads and returns the autocast dtype (its statistics in fp32 inside, as torch's)."""

    def __init__(self, ln: torch.nn.LayerNorm):
        super().__init__()
        self.ln = ln

    def forward(self, x):
        dt = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype
        with torch.autocast("cpu", enabled=False):
            w, b = self.ln.weight.to(dt), self.ln.bias.to(dt)
            return F.layer_norm(x.to(dt), self.ln.normalized_shape, w, b, self.ln.eps)


def swap_layer_norms(module: torch.nn.Module) -> None:
    for name, child in module.named_children():
        if isinstance(child, torch.nn.LayerNorm):
            setattr(module, name, BF16LayerNorm(child))
        else:
            swap_layer_norms(child)


def ms_per_step(step, batches) -> float:
    cpu_step.seconds_per_step(step, batches, 2)  # warm-up
    return cpu_step.seconds_per_step(step, batches, STEPS) * 1e3


def dispatch_us(f, n=20000) -> float:
    for _ in range(200):
        f()
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    torch.set_num_threads(2)
    here = cpu_step.load_nanobert(ROOT / "src")
    here.device.keep_freed_memory()  # what every nanobert job does on a CPU
    batches = cpu_step.make_inputs(4, 0.45)
    sides = {
        "trainer (autocast)": cpu_step.Step(here, torch.bfloat16, LAYERS),
        "bf16 activations": cpu_step.Step(here, torch.bfloat16, LAYERS),
        "bf16 everything": cpu_step.Step(here, None, LAYERS),
    }
    swap_layer_norms(sides["bf16 activations"].model)
    pure = sides["bf16 everything"]
    pure.model.to(torch.bfloat16)
    pure.opt = torch.optim.AdamW(pure.model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    times = {name: [] for name in sides}
    for _ in range(ROUNDS):
        for name, step in sides.items():
            times[name].append(ms_per_step(step, batches))
    base = statistics.median(times["trainer (autocast)"])
    report = {"layers": LAYERS, "mask_prob": 0.45, "threads": torch.get_num_threads(), "rounds": ROUNDS}
    report["ms_per_step"] = {name: [round(t, 2) for t in ts] for name, ts in times.items()}
    report["ratio_vs_trainer"] = {name: round(base / statistics.median(ts), 4) for name, ts in times.items()}
    for name, ts in times.items():
        print(f"{name:20s} {statistics.median(ts):6.1f} ms/step  {base / statistics.median(ts):.3f}x")
    # the step's operations: aten calls made directly by Python/autograd (not inside another aten op)
    from torch.profiler import ProfilerActivity, profile

    step = sides["trainer (autocast)"]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step.run(batches[0])
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e for e in aten if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    a, w = torch.randn(8, 8), torch.randn(8, 8, requires_grad=True)
    report["aten_calls"] = len(aten)
    report["top_level_aten_calls"] = len(top)
    report["dispatch_us_tiny_add"] = round(dispatch_us(lambda: a + 1), 2)
    report["autograd_us_tiny_mul_sum_fwd_bwd"] = round(dispatch_us(lambda: (w * 2).sum().backward(), 5000), 2)
    print(json.dumps(report, indent=2))
    out = Path(__file__).with_name(sys.argv[1] if len(sys.argv) > 1 else "bounds.json")
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
