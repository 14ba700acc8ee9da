"""What pretraining buys on TREC-6 question classification: fine-tune a checkpoint against the same
architecture trained from scratch with the same budget, over a grid of learning rates.

For each learning rate it runs `nanobert.finetuning.classification.finetune` twice, (a) from the
pretrained checkpoint and (b) with `from_scratch=True` (same shape, tokenizer, head initialisation, data
order, epochs), then prints a table and writes OUT/results.json. Every run keeps its own directory
(OUT/trec6-INIT-lrLR/ with best/, metrics.jsonl, summary.json).

TREC-6 (`trec-6/train_5500.label`, `TREC_10.label`, lines `COARSE:fine question`, the train file Latin-1) is
converted to UTF-8 TSV in OUT/data/trec-6/; a seeded 10% of the training questions is the dev split that picks
the epoch, and the 500 TREC-10 questions give the test accuracy.

GLUE's tasks (SST-2 among them) have a command of their own, with the same from-scratch control:
`nanobert glue RUN/best --tasks sst2 --control scratch`.

With several `--learning-rate` values, compare them on dev only (the `dev` column); TREC test numbers of a
learning rate chosen on test would be optimistic.

    python benchmarks/finetune_trec.py RUN/best --trec-dir ../shared/data/trec-6 --epochs 10 \
        --learning-rate 1e-4 3e-4 1e-3 --out runs/finetune-trec
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from nanobert.checkpoints.checkpoint import read_config
from nanobert.config import FinetuneConfig
from nanobert.data.labelled import TaskSpec
from nanobert.engine.run_log import prepare_out_dir
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.files import check_output_file
from nanobert.finetuning.classification import finetune

INITS = ("pretrained", "scratch")

TREC_FILES = ("train_5500.label", "TREC_10.label")  # train, test
# The columns of the TSV files prepare_trec writes.
SPECS = {"trec6": TaskSpec(text_col="text", label_col="label")}


def prepare_trec(trec_dir: Path, out: Path, seed: int) -> dict[str, Path]:
    """TREC-6 as UTF-8 TSV files (text, label = the coarse class): train / dev (10% of train) / test."""

    def read(name: str) -> list[tuple[str, str]]:
        rows = []
        # The train file is Latin-1; TREC_10 is ASCII, which Latin-1 decodes identically.
        for line in (trec_dir / name).read_text(encoding="latin-1").splitlines():
            if line.strip():
                label, _, question = line.partition(" ")
                rows.append((" ".join(question.split()), label.split(":")[0]))
        return rows

    train = read(TREC_FILES[0])
    random.Random(seed).shuffle(train)
    n_dev = len(train) // 10
    splits = {"train": train[n_dev:], "dev": train[:n_dev], "test": read(TREC_FILES[1])}
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, rows in splits.items():
        paths[name] = out / f"{name}.tsv"
        paths[name].write_text("text\tlabel\n" + "".join(f"{t}\t{y}\n" for t, y in rows), encoding="utf-8")
    return paths


def run_dir(out: Path, task: str, init: str, lr: float) -> Path:
    """Where one run of the grid goes."""
    return out / f"{task}-{init}-lr{lr:g}"


def check_run_dirs(args, tasks: list[str]) -> None:
    """Every run directory of the grid, checked before the first run starts (not when its turn comes, hours
    later): no run named twice, none already there without --overwrite, no file where one goes."""
    for option, values in (
        ("--learning-rate", [f"{lr:g}" for lr in args.learning_rate]),
        ("--inits", args.inits),
    ):
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            raise NanobertError(f"{option} gives {', '.join(twice)} more than once; give each value once")
    check_output_file(args.out / "results.json")  # --out is not, and does not lie under, a file
    for task in tasks:
        for lr in args.learning_rate:
            for init in args.inits:
                out = run_dir(args.out, task, init, lr)
                check_output_file(out / "summary.json")
                prepare_out_dir(out, args.overwrite, resumable=False, create=False, inputs=(args.checkpoint,))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", metavar="CKPT", help="a pretraining checkpoint (RUN/best)")
    p.add_argument(
        "--trec-dir", type=Path, required=True, help="directory with train_5500.label and TREC_10.label"
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--epochs", type=positive_int, default=3)
    p.add_argument("--learning-rate", type=float, nargs="+", default=[FinetuneConfig.learning_rate])
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument(
        "--layer-lr-decay",
        type=float,
        default=FinetuneConfig.layer_lr_decay,
        help="learning-rate factor per encoder layer going down (1 = one learning rate)",
    )
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument(
        "--dropout", type=float, help="hidden and attention; default: the task's (FinetuneConfig.dropout)"
    )
    p.add_argument(
        "--adapt-epochs",
        type=int,
        default=FinetuneConfig.adapt_epochs,
        help="pretrained init only: epochs of masked-LM on the training text first (task-adaptive "
        "pretraining)",
    )
    p.add_argument("--adapt-learning-rate", type=float, default=FinetuneConfig.adapt_learning_rate)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="auto: bf16 on CUDA; on a CPU the faster of the two, timed on a few steps and cached",
    )
    p.add_argument("--inits", nargs="+", choices=INITS, default=list(INITS))
    p.add_argument("--limit", type=positive_int, help="use only the first N training rows (quick checks)")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """The user's mistakes, each as one line before any work starts (the CLI's rule)."""
    missing = [n for n in TREC_FILES if not (args.trec_dir / n).is_file()]
    if missing:
        lacks, need = " or ".join(missing), " and ".join(TREC_FILES)
        raise NanobertError(f"--trec-dir {args.trec_dir} has no {lacks}; give the directory of {need}")
    read_config(args.checkpoint)
    for lr in args.learning_rate:  # the whole grid's settings, not only the first run's
        FinetuneConfig(learning_rate=lr, layer_lr_decay=args.layer_lr_decay, dropout=args.dropout)
    check_run_dirs(args, list(SPECS))


def prepare_tasks(args: argparse.Namespace) -> dict[str, tuple[dict[str, Path], str]]:
    """{task: (its files by split, the split its accuracy is reported on)}; with --limit, the training file
    is a copy of its first N rows in OUT/data/."""
    tasks = {"trec6": (prepare_trec(args.trec_dir, args.out / "data" / "trec-6", args.seed), "test")}
    if args.limit:
        for name, (files, _) in tasks.items():
            lines = files["train"].read_text(encoding="utf-8").splitlines(keepends=True)
            files["train"] = args.out / "data" / f"{name}-train-{args.limit}.tsv"
            files["train"].parent.mkdir(parents=True, exist_ok=True)
            files["train"].write_text("".join(lines[: args.limit + 1]), encoding="utf-8")
    return tasks


def run_config(args: argparse.Namespace, init: str, lr: float) -> FinetuneConfig:
    """The fine-tuning settings of one run of the grid."""
    return FinetuneConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        learning_rate=lr,
        layer_lr_decay=args.layer_lr_decay,
        dropout=args.dropout,
        # the scratch control has no pretrained encoder to adapt
        adapt_epochs=args.adapt_epochs if init == "pretrained" else 0,
        adapt_learning_rate=args.adapt_learning_rate,
        max_seq_len=args.max_seq_len,
        seed=args.seed,
        device=args.device,
        precision=args.precision,
    )


def run_grid(args: argparse.Namespace, tasks: dict) -> tuple[list[dict], dict]:
    """Every task x learning rate x init fine-tuned in turn: (one row each, the last run's hardware)."""
    results = []
    for name, (files, report) in tasks.items():
        for lr in args.learning_rate:
            for init in args.inits:
                cfg = run_config(args, init, lr)
                out = run_dir(args.out, name, init, lr)
                print(f"== {name} {init} lr {lr:g} -> {out}", file=sys.stderr, flush=True)
                start = time.perf_counter()
                summary = finetune(
                    args.checkpoint,
                    SPECS[name],
                    files["train"],
                    files["dev"],
                    out,
                    cfg,
                    test_file=files.get("test"),
                    from_scratch=init == "scratch",
                    overwrite=args.overwrite,
                    quiet=args.quiet,
                )
                results.append(
                    {
                        "task": name,
                        "init": init,
                        "learning_rate": lr,
                        "report_split": report,
                        "accuracy": (summary["test"] if report == "test" else summary["dev"])["accuracy"],
                        "dev": summary["dev"],
                        "test": summary["test"],
                        "best_epoch": summary["best_epoch"],
                        "adaptation": summary["adaptation"],
                        "train_time_s": summary["train_time_s"],
                        "wall_time_s": round(time.perf_counter() - start, 1),
                        "out": str(out),
                    }
                )
    return results, summary["hardware"]


def write_results(args: argparse.Namespace, results: list[dict], hardware: dict) -> None:
    """OUT/results.json: the grid's settings and every run's row."""
    report = {
        "checkpoint": str(args.checkpoint),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "layer_lr_decay": args.layer_lr_decay,
        "dropout": args.dropout,
        "adapt_epochs": args.adapt_epochs,
        "adapt_learning_rate": args.adapt_learning_rate,
        "max_seq_len": args.max_seq_len,
        "seed": args.seed,
        "limit": args.limit,
        "results": results,
        "hardware": hardware,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")


def print_table(args: argparse.Namespace, tasks: dict, results: list[dict]) -> None:
    """One row per task and learning rate: pretrained vs scratch on the reported split, dev alongside."""

    def acc(r: dict | None, split: str) -> str:
        return f"{r[split]['accuracy']:.4f}" if r else "-"

    header = ("task", "lr", "split", "pretrained", "scratch", "gain", "dev pretrained/scratch")
    print("{:7s} {:>7s} {:5s} {:>10s} {:>8s} {:>7s}  {}".format(*header))
    for name, (_, split) in tasks.items():
        for lr in args.learning_rate:
            by = {r["init"]: r for r in results if r["task"] == name and r["learning_rate"] == lr}
            a, b = by.get("pretrained"), by.get("scratch")
            gain = f"{a['accuracy'] - b['accuracy']:+.4f}" if a and b else "-"
            row = f"{name:7s} {lr:7.0e} {split:5s} {acc(a, split):>10s} {acc(b, split):>8s} {gain:>7s}"
            print(f"{row}  {acc(a, 'dev')}/{acc(b, 'dev')}")
    print(f"results: {args.out / 'results.json'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    check_args(args)
    tasks = prepare_tasks(args)
    results, hardware = run_grid(args, tasks)
    write_results(args, results, hardware)
    print_table(args, tasks, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script("finetune_trec.py", main))
