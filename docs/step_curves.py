"""Draw docs/step-curves.png: held-out MLM and NSP accuracy against the step, before the CPU recipe left the
frequent-words plateau and today's recipe (its first run and 12,000 steps), from the evaluations kept in
benchmarks/records (no run is needed).

    python docs/step_curves.py [--out docs/step-curves.png]

Each curve is a run's held-out evaluations on `dev.raw` (the default-scale protocol), as its metrics.jsonl
wrote them; a record's `dev-curves.jsonl` holds several runs, told apart by their `screen` or `run` field.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RECORDS = Path(__file__).resolve().parents[1] / "benchmarks" / "records"

# (label, record, the run's name in its dev-curves.jsonl or a metrics.jsonl of the record, colour, style)
CURVES = (
    ("before: BERT's start and decay", "2026-11-29-plateau-screens", "base", "tab:gray", "--"),
    (
        "today's recipe: the first run (15 min, 2 AVX2 cores)",
        "2026-12-05-pair-kept-by-default",
        "first-run-s1337-metrics.jsonl",
        "tab:blue",
        "--",
    ),
    (
        "today's recipe, 12,000 steps",
        "2026-12-05-an-hour-on-a-laptop",
        "steps12000-metrics.jsonl",
        "tab:blue",
        "-",
    ),
)


def evaluations(record: str, run: str) -> list[dict]:
    """The held-out evaluations of `run` in `record`: the rows of its dev-curves.jsonl that name it, or, for
    a file name, that metrics.jsonl's held-out (`valid`) records; in step order."""
    path = RECORDS / record / (run if run.endswith(".jsonl") else "dev-curves.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if run.endswith(".jsonl"):
        picked = [r for r in rows if r.get("split") == "valid"]
    else:
        picked = [r for r in rows if run in (r.get("screen"), r.get("run"))]
    if not picked:
        raise SystemExit(f"step_curves.py: no run {run!r} in {path}")
    return sorted(picked, key=lambda r: r["step"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "step-curves.png")
    args = p.parse_args()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, record, run, colour, style in CURVES:
        rows = evaluations(record, run)
        steps = [r["step"] for r in rows]
        for ax, key in zip(axes, ("mlm_accuracy", "nsp_accuracy"), strict=True):
            ax.plot(steps, [r[key] for r in rows], style, color=colour, marker=".", label=label)
    axes[0].set_title("masked-word accuracy on held-out articles")
    axes[1].set_title("next-sentence accuracy on held-out articles")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"step_curves.py: {args.out}")


if __name__ == "__main__":
    main()
