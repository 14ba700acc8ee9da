"""What pretraining buys for extractive question answering: fine-tune a checkpoint on SQuAD v1.1, score it on
SQuAD v1.1 dev and on XQuAD-en, against the same architecture trained from scratch with the same budget.

It runs `nanobert.finetuning.qa.finetune_qa` twice, (a) from the pretrained checkpoint and (b) with
`from_scratch=True` (same shape, tokenizer, head initialisation, seeded training sample, data order, epochs,
learning rate), each keeping the epoch with the best dev F1, then prints one table (init, training questions,
epochs, training time, dev EM/F1, XQuAD EM/F1, and the gain of (a) over (b)) and writes OUT/results.json.
Every run keeps its own directory (OUT/INIT/ with best/, metrics.jsonl, summary.json, predictions.json).

EM and F1 are the official SQuAD v1.1 evaluation's (`metrics.squad_scores`, v1.1 rules for v1.1 files). Dev
figures are those of the epoch that dev picked, as SQuAD papers report them (the test set is not public), and
XQuAD-en is 1,190 questions of that same dev set: read it as a second view of dev, not as an unseen test.
The training time is the loop's, which includes the dev evaluation after every epoch.

    DATA=../shared/data/qa
    python benchmarks/squad.py RUN/best --train $DATA/squad-v1.1-train/train-v1.1.json \\
        --dev $DATA/squad-v1.1-dev/dev-v1.1.json --xquad $DATA/xquad-en/xquad.en.json \\
        --epochs 2 --max-train-examples 20000 --out runs/squad
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from nanobert.checkpoints.checkpoint import read_config
from nanobert.config import QAConfig
from nanobert.engine.run_log import prepare_out_dir
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.files import check_input_file, check_output_file
from nanobert.finetuning.qa import finetune_qa

INITS = ("pretrained", "scratch")
SETTINGS = (
    "epochs",
    "learning_rate",
    "batch_size",
    "max_seq_len",
    "doc_stride",
    "max_train_examples",
    "layer_lr_decay",
    "dropout",
    "seed",
)
SETTINGS += ("device", "precision", "threads")  # what results.json records of the command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", metavar="CKPT", help="a pretraining checkpoint (RUN/best)")
    p.add_argument("--train", type=Path, required=True, metavar="FILE", help="SQuAD v1.1 train JSON")
    p.add_argument(
        "--dev", type=Path, required=True, metavar="FILE", help="SQuAD v1.1 dev JSON (picks the epoch)"
    )
    p.add_argument(
        "--xquad", type=Path, metavar="FILE", help="XQuAD English JSON, scored with the best epoch"
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--epochs", type=positive_int, default=QAConfig.epochs)
    p.add_argument("--learning-rate", type=float, default=QAConfig.learning_rate)
    p.add_argument("--batch-size", type=positive_int, default=QAConfig.batch_size)
    p.add_argument("--max-seq-len", type=int, default=QAConfig.max_seq_len)
    p.add_argument("--doc-stride", type=int, default=QAConfig.doc_stride)
    p.add_argument(
        "--max-train-examples", type=int, metavar="N", help="train on a seeded random N of the questions"
    )
    p.add_argument(
        "--layer-lr-decay",
        type=float,
        default=QAConfig.layer_lr_decay,
        help="each encoder layer trains at this times the rate of the one above (1 = one rate)",
    )
    p.add_argument(
        "--dropout", type=float, help="hidden and attention; default: the pretraining checkpoint's"
    )
    p.add_argument("--seed", type=int, default=QAConfig.seed)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument(
        "--precision",
        choices=("auto", "fp32", "bf16"),
        default="auto",
        help="auto: measured per shape on CPU (fp32 or bf16), bf16 on CUDA",
    )
    p.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--inits", nargs="+", choices=INITS, default=list(INITS))
    p.add_argument("--overwrite", action="store_true", help="replace runs already in OUT")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def run(args: argparse.Namespace, init: str) -> dict:
    """Fine-tune one initialisation; its row of the results."""
    # Every setting on the command line is a QAConfig field of the same name, except the thread count.
    cfg = QAConfig(**{k: getattr(args, k) for k in SETTINGS if k != "threads"})
    out = args.out / init
    print(f"== {init} -> {out}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    summary = finetune_qa(
        args.checkpoint,
        args.train,
        args.dev,
        out,
        cfg,
        test_file=args.xquad,
        from_scratch=init == "scratch",
        overwrite=args.overwrite,
        quiet=args.quiet,
    )
    return {
        "init": init,
        "train_examples": summary["examples"]["train"],
        "train_windows": summary["examples"]["train_windows"],
        "epochs": args.epochs,
        "best_epoch": summary["best_epoch"],
        "train_time_s": summary["train_time_s"],
        "wall_time_s": round(time.perf_counter() - start, 1),
        "dev": summary["dev"],
        "xquad": summary["test"],
        "dev_history": summary["dev_history"],
        "out": str(out),
        "hardware": summary["hardware"],
        "precision": json.loads((out / "best" / "config.json").read_text())["precision"],
    }


def table(results: list[dict]) -> str:
    """One row per initialisation and, with both, the gain of pretrained over scratch."""

    def scores(r: dict, split: str) -> list[str]:
        s = r[split]
        return [f"{s['exact_match']:.2f}", f"{s['f1']:.2f}"] if s else ["-", "-"]

    head = ("init", "train ex", "epochs", "train s", "dev EM", "dev F1", "XQuAD EM", "XQuAD F1")
    rows = [head]
    for r in results:
        counts = (r["init"], f"{r['train_examples']:,}", str(r["epochs"]), f"{r['train_time_s']:.0f}")
        rows.append((*counts, *scores(r, "dev"), *scores(r, "xquad")))
    by = {r["init"]: r for r in results}
    if set(by) == set(INITS):
        a, b = by["pretrained"], by["scratch"]
        gains = []
        for split in ("dev", "xquad"):
            for metric in ("exact_match", "f1"):
                ok = a[split] is not None and b[split] is not None
                gains.append(f"{a[split][metric] - b[split][metric]:+.2f}" if ok else "-")
        rows.append(("gain (a-b)", "", "", "", *gains))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = []
    for row in rows:  # the init left-aligned, the numbers right-aligned
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    read_config(args.checkpoint)  # a missing or non-checkpoint CKPT: one line before any work
    # What a later run needs, checked before the first one starts (not when its turn comes, hours later).
    QAConfig(**{k: getattr(args, k) for k in SETTINGS if k != "threads"})
    for option, path in (("--train", args.train), ("--dev", args.dev), ("--xquad", args.xquad)):
        if path is not None:
            check_input_file(path, option)
    if len(set(args.inits)) < len(args.inits):
        raise NanobertError(f"--inits {' '.join(args.inits)} names a run twice; give each init once")
    check_output_file(args.out / "results.json")  # --out is not, and does not lie under, a file
    for init in args.inits:
        check_output_file(args.out / init / "summary.json")
        prepare_out_dir(
            args.out / init, args.overwrite, resumable=False, create=False, inputs=(args.checkpoint,)
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    results = [run(args, init) for init in args.inits]
    by = {r["init"]: r for r in results}
    gain = None
    if set(by) == set(INITS):
        a, b = by["pretrained"], by["scratch"]
        gain = {split: a[split]["f1"] - b[split]["f1"] for split in ("dev", "xquad") if a[split] and b[split]}
    report = {
        "checkpoint": str(args.checkpoint),
        "files": {
            k: str(v) if v else None
            for k, v in (("train", args.train), ("dev", args.dev), ("xquad", args.xquad))
        },
        "settings": {k: getattr(args, k) for k in SETTINGS},
        "results": results,
        "f1_gain_pretrained_over_scratch": gain,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=2) + "\n")
    print(table(results))
    print(f"results: {args.out / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_script("squad.py", main))
