"""Run a preset on the WikiText-2 protocol and append its held-out quality to a results table.

The small protocol (so numbers stay comparable): train on `wiki.valid.tokens`; choose best/ on a split of it
(its last 10% of documents, nanobert's held-out rule for a single file), never on the test file; then evaluate
best/ once on `wiki.test.tokens` with nanobert's fixed held-out masking (15% of tokens, 80/10/10, seed 0),
WordPiece vocabulary 8,192 unless the preset says otherwise; last/ is evaluated the same way. One row per
seed goes to `--results` (CSV), and the mean and spread over the seeds run are printed.

    python benchmarks/quality.py --preset mini --time-budget 600 --seeds 1 2 3 \\
        --train ../shared/data/wikitext-2/wiki.valid.tokens --test ../shared/data/wikitext-2/wiki.test.tokens

The default-scale protocol (the size `nanobert pretrain` trains on by default): train on
`wiki-squad/train.raw` (2.2M words), choose best/ on `--valid wiki-squad/dev.raw`, evaluate on
`wikitext-2/wiki.test.raw`; `--blimp DIR` adds best/'s full BLiMP accuracy (`nanobert blimp`) to each row:

    python benchmarks/quality.py --preset wikitext2-cpu --seeds 1 2 3 \\
        --train $S/train.raw --valid $S/dev.raw \\
        --test ../shared/data/wikitext-2/wiki.test.raw --blimp ../shared/data/blimp
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

from nanobert.cli.overrides import parse_overrides
from nanobert.config import FinetuneConfig
from nanobert.data.corpus import load_documents
from nanobert.data.labelled import TaskSpec
from nanobert.data.sources import DataSources
from nanobert.data.tables import read_table
from nanobert.device import resolve_device
from nanobert.errors import ArgumentParser, NanobertError, run_script
from nanobert.files import check_input_file, check_output_file
from nanobert.finetuning.classification import finetune
from nanobert.objectives.evaluate import evaluate_checkpoint
from nanobert.pretraining.pretrain import pretrain
from nanobert.pretraining.recipes import build_configs
from nanobert.use.blimp import evaluate_blimp, load_blimp
from nanobert.use.inference import load
from nanobert.use.scoring import scoring_precision

FIELDS = (
    "date",
    "preset",
    "overrides",
    "seed",
    "mlm_accuracy",
    "mlm_perplexity",
    "nsp_accuracy",
    "mlm_loss",
    "nsp_loss",
    "blimp",
    "sst2",
    "stsb",
    "best_step",
    "last_mlm_accuracy",
    "last_mlm_perplexity",
    "last_nsp_accuracy",
    "steps",
    "train_time_s",
    "wall_time_s",
    "tokens_per_s",
    "hardware",
)


def check_results_columns(results: Path) -> None:
    """A one-line error when an existing results table has other columns (an older version's): appending
    would put figures under the wrong names."""
    if results.is_file():
        with open(results, newline="") as f:
            header = next(csv.reader(f), None)
        if header is not None and tuple(header) != FIELDS:
            raise NanobertError(
                f"--results {results} has other columns than this version writes; give a new file"
            )


def blimp_accuracy(checkpoint: Path, pairs: list) -> float:
    """BLiMP accuracy (mean over paradigms) of a checkpoint, in the precision `auto` picks."""
    model = load(checkpoint)
    dtype, _ = scoring_precision(model.model)
    return evaluate_blimp(model.model, model.tokenizer, pairs, dtype=dtype).full.overall


# The GLUE tasks `--glue` fine-tunes on: GLUE's folder and column names, and the dev figure reported.
GLUE = {
    "sst2": (TaskSpec(text_col="sentence", label_col="label"), "accuracy"),
    "stsb": (
        TaskSpec(text_col="sentence1", text_pair_col="sentence2", label_col="score", task="regression"),
        "pearson",
    ),
}
GLUE_FILES = ("train.tsv", "dev.tsv")


def check_glue(glue: Path | None, tasks: list[str]) -> None:
    """A one-line error now, not after the pretraining, when a task's GLUE file is missing, is no table or
    lacks one of the task's columns."""
    for name in tasks if glue else ():
        spec = GLUE[name][0]
        for file in GLUE_FILES:
            table = read_table(check_input_file(glue / name / file, "--glue"), None, None, header=True)
            for col in spec.columns().values():
                if col is not None:
                    table.column(col)


def glue_scores(checkpoint: Path, glue: Path, tasks: list[str], seeds: list[int], device: str) -> dict:
    """Each task's dev figure (SST-2 accuracy, STS-B Pearson) after the CLI's default fine-tuning of
    `checkpoint` (no options but the seed), as the mean over `seeds`; the runs are kept beside it in
    RUN/finetune/TASK-seedN."""
    scores = {}
    for name in tasks:
        spec, metric = GLUE[name]
        values = []
        for seed in seeds:
            out = checkpoint.parent / "finetune" / f"{name}-seed{seed}"
            summary = finetune(
                checkpoint,
                spec,
                *(glue / name / file for file in GLUE_FILES),
                out,
                FinetuneConfig(seed=seed, device=device),
                overwrite=True,
                quiet=True,
            )
            values.append(summary["dev"][metric])
            print(f"quality.py: {name} fine-tuning seed {seed}: dev {metric} {values[-1]:.4f}", flush=True)
        scores[name] = round(statistics.mean(values), 4)
    return scores


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", required=True)
    p.add_argument("--train", required=True, help="e.g. ../shared/data/wikitext-2/wiki.valid.tokens")
    p.add_argument("--test", required=True, help="e.g. ../shared/data/wikitext-2/wiki.test.tokens")
    p.add_argument("--seeds", type=int, nargs="+", default=[1337])
    length = p.add_mutually_exclusive_group()
    length.add_argument("--time-budget", type=float)
    length.add_argument("--max-steps", type=int)
    p.add_argument("--device", default="auto")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE")
    p.add_argument("--results", default="benchmarks/results.csv")
    p.add_argument("--keep", help="directory to keep the runs in (default: a temporary one)")
    p.add_argument("--tokenizer", help="reuse this saved tokenizer (runs then differ only by their recipe)")
    p.add_argument("--name", help="a name for the recipe in the results table (default: the overrides)")
    p.add_argument("--valid", help="choose best/ on this file (default: the training file's last 10%%)")
    p.add_argument(
        "--blimp", metavar="DIR", help="also score best/ on BLiMP (its data/ folder of .jsonl files)"
    )
    p.add_argument(
        "--blimp-limit",
        type=int,
        metavar="N",
        help="only the first N pairs of each paradigm (ablations; the full suite is the reported figure)",
    )
    p.add_argument(
        "--glue",
        type=Path,
        metavar="DIR",
        help="also fine-tune best/ on GLUE (DIR/sst2, DIR/stsb: train.tsv, dev.tsv) with the CLI's defaults",
    )
    p.add_argument("--glue-tasks", nargs="+", choices=tuple(GLUE), default=list(GLUE))
    p.add_argument(
        "--finetune-seeds", type=int, nargs="+", default=[1, 2, 3], help="the GLUE figures are their mean"
    )
    return p.parse_args()


def overrides(args: argparse.Namespace) -> tuple[dict, dict]:
    """(model, training) overrides: --set's, with --device, --time-budget and --max-steps added."""
    model_over, train_over = parse_overrides(args.set)
    train_over["device"] = args.device
    if args.time_budget is not None:
        train_over["time_budget"] = args.time_budget
    if args.max_steps is not None:
        train_over["max_steps"] = args.max_steps
    return model_over, train_over


def check_args(args: argparse.Namespace, model_over: dict, train_over: dict) -> list | None:
    """Everything a seed reads or writes after training, checked now, not after the first 30 minutes;
    returns the BLiMP pairs (None without --blimp)."""
    check_input_file(args.train, "--train")
    check_input_file(args.test, "--test")
    # Read both as text now: a binary, non-UTF-8, empty or one-document file fails here, not after training.
    load_documents(args.train)
    if len(load_documents(args.test)) < 2:
        raise NanobertError(
            f"--test {args.test} holds one document; the held-out NSP pairs need at least two"
        )
    if args.valid:
        load_documents(check_input_file(args.valid, "--valid"))
    # BLiMP's JSONL before the training
    pairs = load_blimp(args.blimp, args.blimp_limit) if args.blimp else None
    check_glue(args.glue, args.glue_tasks)
    check_output_file(args.results)
    check_results_columns(Path(args.results))
    for seed in args.seeds if args.keep else ():  # no file where a seed's run directory goes
        check_output_file(Path(args.keep) / f"{args.name or args.preset}-seed{seed}" / "summary.json")
    build_configs(args.preset, model_over, train_over)
    return pairs


def pretrain_seed(args: argparse.Namespace, seed: int, out: Path, model_over: dict, train_over: dict) -> dict:
    """One seed's pretraining run in `out`; its summary."""
    model_config, train_config = build_configs(args.preset, model_over, {**train_over, "seed": seed})
    # Without --valid, best/ is chosen on the training file's last 10% of documents (the held-out rule); the
    # test file is read only once, in evaluate_seed.
    return pretrain(
        model_config,
        train_config,
        DataSources(None, args.train, args.valid),
        out,
        overwrite=True,
        preset=args.preset,
        tokenizer_dir=args.tokenizer,
    )


def evaluate_seed(args: argparse.Namespace, seed: int, summary: dict, out: Path, device, pairs) -> dict:
    """One seed's row of the results table: best/ (and last/) on the test file, BLiMP and GLUE if asked."""
    metrics = evaluate_checkpoint(str(out / "best"), valid_file=args.test, device=str(device))
    # The last step too: when best/ is an earlier step, the table shows what selection cost or saved.
    # When best/ is the last step it is the same checkpoint, so its figures are reused.
    best_step = (summary["best"] or {}).get("step")
    last = (
        metrics
        if best_step == summary["steps"]
        else evaluate_checkpoint(str(out / "last"), valid_file=args.test, device=str(device))
    )
    glue = (
        glue_scores(out / "best", args.glue, args.glue_tasks, args.finetune_seeds, str(device))
        if args.glue
        else {}
    )
    return {
        "date": time.strftime("%Y-%m-%d"),
        "preset": args.preset,
        "overrides": args.name or " ".join(args.set),
        "seed": seed,
        **{k: round(v, 4) for k, v in metrics.items()},
        "blimp": round(blimp_accuracy(out / "best", pairs), 4) if pairs else None,
        **{name: glue.get(name) for name in GLUE},
        "best_step": best_step,
        **{f"last_{k}": round(last[k], 4) for k in ("mlm_accuracy", "mlm_perplexity", "nsp_accuracy")},
        "steps": summary["steps"],
        "train_time_s": summary["train_time_s"],
        "wall_time_s": summary["wall_time_s"],
        "tokens_per_s": round(summary["tokens_per_s"]),
        "hardware": summary["hardware"].get("gpu", f"cpu x{summary['hardware']['torch_threads']}"),
    }


def append_rows(results: Path, rows: list[dict]) -> None:
    """The rows at the end of the results table, its header first if the table is new."""
    new = not results.exists()
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def print_summary(rows: list[dict], seeds: list[int]) -> None:
    """Mean and spread over the seeds run of each figure the rows have."""
    for key in (
        "mlm_accuracy",
        "mlm_perplexity",
        "nsp_accuracy",
        "last_mlm_accuracy",
        "last_nsp_accuracy",
        "blimp",
        *GLUE,
    ):
        values = [r[key] for r in rows if r[key] is not None]
        if not values:
            continue
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        print(f"{key}: mean {statistics.mean(values):.4f}  std {spread:.4f}  over seeds {seeds}")


def main() -> None:
    args = parse_args()
    model_over, train_over = overrides(args)
    pairs = check_args(args, model_over, train_over)
    device = resolve_device(args.device)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.keep or tmp)
        for seed in args.seeds:
            out = root / f"{args.name or args.preset}-seed{seed}"
            summary = pretrain_seed(args, seed, out, model_over, train_over)
            if summary["stop_reason"].startswith("interrupted"):
                # A signal (Ctrl-C, kill) stops the whole benchmark, not just this seed: a cut-short run is
                # not a row of the table, and the seeds after it should not start. Finished seeds are kept.
                print(f"quality.py: seed {seed} was {summary['stop_reason']}; stopping (finished seeds kept)")
                break
            rows.append(evaluate_seed(args, seed, summary, out, device, pairs))
            print(json.dumps(rows[-1]), flush=True)
    if not rows:
        raise SystemExit("quality.py: no seed finished; nothing written")
    append_rows(Path(args.results), rows)
    print_summary(rows, args.seeds)


if __name__ == "__main__":
    raise SystemExit(run_script("quality.py", main))
