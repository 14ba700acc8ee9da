"""The fine-tuning commands: `finetune` (a classifier or, --task qa, a question-answering model), `glue`
(every GLUE task, and the from-scratch control), and a fine-tuned model's `predict` and `answer`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nanobert.cli.common import (
    checkpoint_command,
    command,
    emit,
    exit_code,
    given,
    job_options,
    print_json,
    run_dir,
    say_cut,
)
from nanobert.errors import NanobertError, positive_int

_COLUMN_HELP = "a column name, or a 0-based index for a headerless file (every row is data)"


def _add_table_options(p) -> None:
    """The options of the table tasks (classification and regression): columns, and how pairs are read."""
    p.add_argument("--text-col", metavar="COL", help=_COLUMN_HELP + " (classification and regression)")
    p.add_argument("--text-pair-col", metavar="COL", help="second text of a sentence pair (segment B)")
    p.add_argument("--label-col", metavar="COL", help="the label column (classification and regression)")
    p.add_argument(
        "--symmetric-pairs",
        action=argparse.BooleanOptionalAction,
        help="train on every pair both ways (A-B and B-A) and score a pair as the mean of both, for tasks "
        "where the order carries nothing; default: on for sentence-pair regression, off for classification",
    )


def _add_qa_options(p) -> None:
    """The options only `finetune --task qa` reads (SQuAD's windows and answers)."""
    p.add_argument("--doc-stride", type=int, help="qa: word pieces between window starts (default 128)")
    p.add_argument("--max-query-length", type=int, help="qa: question pieces kept at most (default 64)")
    p.add_argument("--max-answer-length", type=int, help="qa: longest answer in word pieces (default 30)")
    p.add_argument(
        "--null-score-threshold",
        type=float,
        help='qa, SQuAD 2.0: answer "" when [CLS] beats the best span by more (default 0; predict uses it)',
    )
    p.add_argument(
        "--max-train-examples", type=int, metavar="N", help="qa: train on a seeded random N of the questions"
    )


def _add_training_options(p, qa: bool = True) -> None:
    """How the fine-tuning trains: epochs, batch, rates, dropout, the pooler, the length; `qa`: whether the
    command also fine-tunes question answering, whose defaults differ (glue's help says nothing of them)."""
    p.add_argument(
        "--epochs",
        type=int,
        help="default 3, or up to 10 on a small training set for at least 1,500 steps" + " (qa: 2)" * qa,
    )
    p.add_argument("--batch-size", type=positive_int, help="default 32")
    p.add_argument("--learning-rate", type=float, help="peak AdamW learning rate, default 3e-4")
    p.add_argument("--warmup-ratio", type=float, help="share of steps warming up linearly, default 0.1")
    p.add_argument("--weight-decay", type=float, help="default 0.01")
    p.add_argument(
        "--dropout",
        type=float,
        help="hidden and attention dropout while fine-tuning; default: the checkpoint's pretraining dropout "
        "(0 for the CPU recipe), 0.1 for classification",
    )
    p.add_argument(
        "--fresh-pooler",
        action=argparse.BooleanOptionalAction,
        help="start the pooler the head reads from fresh weights, not the checkpoint's NSP-trained ones; "
        "default: fresh for regression, the checkpoint's for classification",
    )
    p.add_argument(
        "--pooling",
        choices=["cls", "mean"],
        help="what the pooler reads: cls, BERT's [CLS] final state, or mean, the mean of every token's final "
        "state; default: mean (with cls, one fine-tuning seed in five could stay far behind on STS-B)",
    )
    p.add_argument(
        "--layer-lr-decay",
        type=float,
        help="learning-rate factor per encoder layer going down, embeddings last; default 1 (one rate)",
    )
    p.add_argument(
        "--max-seq-len",
        type=int,
        help="tokens per example incl. [CLS]/[SEP], default 128" + " (qa: 384)" * qa,
    )


def _add_adaptation_options(p) -> None:
    """Task-adaptive pretraining before the labels (--adapt-epochs and its rate and batch)."""
    p.add_argument(
        "--adapt-epochs",
        type=int,
        help="first, epochs of masked-LM on the training file's own text (task-adaptive pretraining); "
        "default 0 (off); 5 lifts SST-2 (benchmarks/records/2026-11-26-task-adaptive-pretraining)",
    )
    p.add_argument(
        "--adapt-learning-rate", type=float, help="peak learning rate of --adapt-epochs, default 5e-4"
    )
    p.add_argument("--adapt-batch-size", type=positive_int, help="rows per --adapt-epochs step, default 128")


def _add_finetune(sub) -> None:
    help = "fine-tune a pretrained checkpoint on a labelled CSV/TSV/JSONL file, or on SQuAD (--task qa)"
    p = command(sub, "finetune", _cmd_finetune, help)
    p.add_argument("checkpoint", metavar="CKPT", help="a pretraining checkpoint, e.g. RUN/best")
    p.add_argument(
        "--train", required=True, metavar="FILE", help="labelled training file (.csv/.tsv/.jsonl/.json)"
    )
    p.add_argument("--dev", required=True, metavar="FILE", help="labelled file that picks the best epoch")
    p.add_argument("--test", metavar="FILE", help="labelled file to score the best epoch on at the end")
    _add_table_options(p)
    p.add_argument("--task", choices=["classification", "regression", "qa"], default="classification")
    p.add_argument(
        "--metric",
        choices=["accuracy", "macro_f1", "mcc", "pearson", "spearman", "f1", "exact_match"],
        help="dev metric that picks the best epoch (default: accuracy; pearson for regression; f1 for qa)",
    )
    _add_qa_options(p)
    _add_training_options(p)
    _add_adaptation_options(p)
    p.add_argument("--seed", type=int, help="default 1337")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default: auto (CUDA when present)")
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        help="default: auto (bf16 on CUDA; on a CPU the faster of the two, timed on a few steps and cached)",
    )
    p.add_argument("--format", choices=["csv", "tsv", "jsonl"], help="default: from the file extension")
    p.add_argument("--encoding", help="text encoding of the files (default UTF-8), e.g. latin-1")
    p.add_argument("--out", help="output directory (default: runs/finetune-TIMESTAMP)")
    p.add_argument(
        "--from-scratch",
        action="store_true",
        help="the control: the checkpoint's config from random weights (same shape, tokenizer, budget, and "
        "its start, e.g. the recipes' roles attention) instead of its trained weights",
    )
    job_options(p, "replace a run already in --out")


# What `nanobert finetune` prints of the summary, besides the output directory.
_FINETUNE_RESULT = ("init", "best_epoch", "dev", "test", "train_time_s")


def _cmd_finetune(args) -> int:
    """Fine-tune the encoder of a pretraining checkpoint for sentence or sentence-pair classification (or
    regression), or for extractive question answering on SQuAD JSON files (--task qa); the epoch with the best
    dev metric is kept in OUT/best."""
    from dataclasses import fields

    from nanobert.config import QAConfig
    from nanobert.data.tables import parse_column
    from nanobert.finetuning.classification import FinetuneConfig, TaskSpec, finetune

    if args.task == "qa":
        return _cmd_finetune_qa(args)
    qa_only = {f.name for f in fields(QAConfig)} - {f.name for f in fields(FinetuneConfig)}
    _refuse_options(args, tuple(sorted(qa_only)), f"--task {args.task}")
    if args.text_col is None or args.label_col is None:
        raise NanobertError("--text-col and --label-col are required for classification and regression")
    spec = TaskSpec(
        text_col=parse_column(args.text_col),
        label_col=parse_column(args.label_col),
        text_pair_col=parse_column(args.text_pair_col) if args.text_pair_col is not None else None,
        task=args.task,
        format=args.format,
        encoding=args.encoding,
    )
    cfg, out = _finetune_config(FinetuneConfig, args), _finetune_out(args)
    options = {k: getattr(args, k) for k in ("from_scratch", "overwrite", "quiet")}
    summary = finetune(args.checkpoint, spec, args.train, args.dev, out, cfg, test_file=args.test, **options)
    print_json({"out": str(out), **{k: summary[k] for k in _FINETUNE_RESULT}})
    return exit_code(summary)


def _finetune_config(config_class, args):
    """A FinetuneConfig (or QAConfig): each flag given sets the field of its name, the rest keep defaults."""
    from dataclasses import fields

    return config_class(**given(args, [f.name for f in fields(config_class)]))


def _finetune_out(args) -> Path:
    return run_dir(args.out, "finetune-scratch" if args.from_scratch else "finetune-pretrained")


def _refuse_options(args, names: tuple[str, ...], what: str) -> None:
    """A one-line error naming the options in `names` that were given, which `what` has no use for."""
    given = [f"--{k.replace('_', '-')}" for k in names if getattr(args, k, None) is not None]
    if given:
        raise NanobertError(f"{' '.join(given)}: not for {what}")


# What question answering ignores: the options that name table columns and formats.
_TABLE_OPTIONS = ("format", "encoding", "text_col", "text_pair_col")


def _cmd_finetune_qa(args) -> int:
    from nanobert.config import QAConfig
    from nanobert.finetuning.qa import finetune_qa

    _refuse_options(args, (*_TABLE_OPTIONS, "label_col"), "--task qa, which reads SQuAD JSON")
    _refuse_options(
        args, ("fresh_pooler", "pooling"), "--task qa, whose head reads every token, not the pooler"
    )
    _refuse_options(args, ("symmetric_pairs",), "--task qa: a question and its passage have an order")
    cfg, out = _finetune_config(QAConfig, args), _finetune_out(args)
    options = {k: getattr(args, k) for k in ("from_scratch", "overwrite", "quiet")}
    summary = finetune_qa(args.checkpoint, args.train, args.dev, out, cfg, test_file=args.test, **options)
    print_json({"out": str(out), **{k: summary[k] for k in _FINETUNE_RESULT}})
    return exit_code(summary)


# The GLUE tasks as --tasks names them (finetuning.glue_tasks.GLUE_TASKS, not imported at start-up).
_GLUE_NAMES = "cola sst2 mrpc stsb qqp mnli qnli rte wnli"


def _add_glue(sub) -> None:
    help = "fine-tune a pretrained checkpoint on every GLUE task, beside its from-scratch control"
    p = command(sub, "glue", _cmd_glue, help)
    p.add_argument("checkpoint", metavar="CKPT", help="a pretraining checkpoint, e.g. RUN/best")
    p.add_argument(
        "--data",
        metavar="DIR",
        help="the GLUE files in glue_data's layout (CoLA/train.tsv, SST-2/dev.tsv, ...; lowercase folders "
        'too); default: the Hugging Face hub\'s nyu-mll/glue (pip install "nanobert[hf]")',
    )
    p.add_argument(
        "--tasks",
        nargs="+",
        metavar="TASK",
        help=f"some of: {_GLUE_NAMES} (default: all; SST-2 spellings too)",
    )
    p.add_argument(
        "--control",
        choices=["scratch"],
        help="also fine-tune the checkpoint's config from random weights, same seeds (finetune "
        "--from-scratch): its own start, e.g. the recipes' roles attention, not BERT's plain noise",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=[1],
        metavar="N",
        help="fine-tuning seeds; the table gives the mean ± std over them (default: one seed, seed 1)",
    )
    p.add_argument(
        "--max-train-examples",
        type=positive_int,
        metavar="N",
        help="train SST-2, QQP, MNLI and QNLI on a seeded random N of their examples, for a quick look",
    )
    p.add_argument(
        "--out",
        help="default: runs/glue-NAME, NAME the checkpoint's run folder (runs/x/best gives runs/glue-x) or, "
        "for a checkpoint folder not named best or last, its own name; the same command again resumes there",
    )
    _add_training_options(p, qa=False)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default: auto (CUDA when present)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], help="default: auto, as for finetune")
    job_options(p, "replace the runs an earlier glue left in --out with other options")


def _cmd_glue(args) -> int:
    """Fine-tune a pretraining checkpoint on each GLUE task with finetune's defaults (each task's columns,
    header, labels and dev files built in) and print the GLUE table; OUT also holds glue.json, glue.csv,
    glue.png, every run, and the test-set predictions for the GLUE server. Run the same command again after an
    interruption: the finished runs are kept (a run cut short starts again from step 0).

    On a CPU all nine take hours. With the first run's model (the CPU recipe) on 2 shared cores of an AMD
    EPYC, one run took CoLA 46–50 s, SST-2 468–625 s, MRPC 102–106 s, STS-B 374–433 s, RTE 89–90 s and WNLI
    20 s (benchmarks/records/2026-12-05-glue-first-run); QQP, MNLI and QNLI were not measured: at SST-2's time
    per training example they would take about 49, 53 and 14 min a run, an estimate (their pairs are longer
    than SST-2's sentences, so likely more), which makes about 2.3 hours for all nine per seed, twice that
    with --control scratch. --max-train-examples N cuts the four large tasks for a quick look."""
    from nanobert.config import FinetuneConfig
    from nanobert.finetuning.glue import glue

    cfg = _finetune_config(FinetuneConfig, args)
    keys = ("data", "tasks", "control", "seeds", "max_train_examples", "overwrite", "quiet")
    report = glue(args.checkpoint, args.out, cfg=cfg, **{k: getattr(args, k) for k in keys})
    print(report["table"], end="")
    return exit_code(report)


def _add_predict(sub) -> None:
    help = "label a CSV/TSV/JSONL file with a fine-tuned model, or answer a SQuAD file's questions"
    p = command(sub, "predict", _cmd_predict, help)
    p.add_argument("model", metavar="FT_DIR", help="a fine-tuned checkpoint (RUN/best) or its run directory")
    p.add_argument("--input", required=True, metavar="FILE")
    p.add_argument("--out", metavar="FILE", help="where to write the labelled rows (default: stdout)")
    p.add_argument("--format", choices=["csv", "tsv", "jsonl"], help="default: from the file extension")
    p.add_argument("--encoding", help="text encoding of the input (default UTF-8); output is UTF-8")
    p.add_argument("--text-col", metavar="COL", help="default: the column the model was trained on")
    p.add_argument("--text-pair-col", metavar="COL", help="default: the one the model was trained on")
    p.add_argument(
        "--batch-size", type=positive_int, default=128, help="rows (qa: windows) per batch (default 128)"
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--null-score-threshold", type=float, help=_THRESHOLD_HELP)


_THRESHOLD_HELP = 'a SQuAD 2.0 qa model: answer "" when [CLS] beats the best span by more (default: its own)'


def _cmd_predict(args) -> int:
    """Add the predicted label and class probabilities (or the score) to every row of a file, written in the
    input's format; with a question-answering model, write the official {question id: answer} JSON of a SQuAD
    file's questions (with EM/F1 when it has answers)."""
    from nanobert.checkpoints.checkpoint import read_config
    from nanobert.checkpoints.kinds import KINDS, checkpoint_kind

    best = Path(args.model) / "best"
    kind = KINDS.get(checkpoint_kind(read_config(best if best.is_dir() else args.model)))
    # what the kind's model reads; another kind is the table reader's to refuse, in its words
    return _PREDICTORS.get(kind.predict_reads if kind else None, _cmd_predict_table)(args)


def _cmd_predict_table(args) -> int:
    from nanobert.data.tables import parse_column
    from nanobert.finetuning.classification import predict

    if args.null_score_threshold is not None:
        raise NanobertError("--null-score-threshold applies only to question-answering models")
    given = {k: getattr(args, k) for k in ("text_col", "text_pair_col")}
    columns = {k: parse_column(v) for k, v in given.items() if v is not None}
    options = {k: getattr(args, k) for k in ("encoding", "batch_size", "device")}
    result = predict(args.model, args.input, args.out, fmt=args.format, **columns, **options)
    if args.out:  # the rows went to a file: stdout carries the result
        print_json(result)
    elif "metrics" in result:  # the rows went to stdout: keep it clean, the scores go to stderr
        print("nanobert: " + json.dumps(result["metrics"]), file=sys.stderr)
    say_cut(result.get("texts_cut", 0), "texts")
    if "metrics_skipped" in result:  # labelled input that could not be scored: say why, wherever rows went
        print(f"nanobert: not scored: {result['metrics_skipped']}", file=sys.stderr)
    return 0


def _cmd_predict_qa(args) -> int:
    from nanobert.finetuning.qa import predict_qa

    _refuse_options(args, _TABLE_OPTIONS, "a question-answering model, which reads SQuAD JSON")
    options = {k: getattr(args, k) for k in ("batch_size", "device", "null_score_threshold")}
    result = predict_qa(args.model, args.input, args.out, **options)
    if args.out:  # the answers went to a file: stdout carries the result
        print_json(result)
    elif "f1" in result:  # the answers went to stdout: keep it clean, the scores go to stderr
        scores = {k: result[k] for k in ("exact_match", "f1", "squad_version")}
        print("nanobert: " + json.dumps(scores), file=sys.stderr)
    return 0


# `predict` by what the checkpoint kind's model reads (kinds.Kind.predict_reads)
_PREDICTORS = {"table": _cmd_predict_table, "squad": _cmd_predict_qa}


def _add_answer(sub) -> None:
    p = checkpoint_command(
        sub, "answer", _cmd_answer, "answer a question about a text with a QA model (finetune --task qa)"
    )
    p.add_argument("--question", required=True)
    p.add_argument("--context", required=True, help="the text that holds the answer")
    p.add_argument("--null-score-threshold", type=float, help=_THRESHOLD_HELP)


def _cmd_answer(args) -> int:
    from dataclasses import asdict

    from nanobert.finetuning.qa import load_qa_model

    model = load_qa_model(args.checkpoint, args.device, args.null_score_threshold)
    a = model.answer(args.question, args.context)
    text = (
        f"{a.text}  (probability {a.probability:.1%}, characters {a.start}-{a.end})"
        if a.text
        else "(no answer)"
    )
    return emit(args, {"question": args.question, **asdict(a)}, text)


def add_commands(sub) -> None:
    _add_finetune(sub)
    _add_glue(sub)
    _add_predict(sub)
    _add_answer(sub)
