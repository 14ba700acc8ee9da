"""The `nanobert` command line: each subcommand parses its arguments, calls one library function, prints.

User errors (`NanobertError`, bad arguments) print one line and exit with code 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from nanobert.config import parse_overrides  # config and recipes are plain Python: no torch at start-up
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.pretraining.recipes import PRESETS, new_run_configs


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2))


def _given(args, names) -> dict:
    """The options among `names` that the command line gives (argparse leaves the others None)."""
    return {k: v for k in names if (v := getattr(args, k, None)) is not None}


def _exit_code(summary: dict) -> int:
    """0 for a run that ended as planned; 128 + N for one a signal N stopped (130 for Ctrl-C, 143 for
    SIGTERM), as a shell reports a process the signal killed, so that a script or scheduler sees that the
    run did not finish (its last/ is resumable)."""
    number = summary.get("stopped_by_signal")
    return 128 + number if number else 0


def _run_dir(out: str | None, name: str) -> Path:
    """Where a new run goes: --out, else runs/NAME-TIMESTAMP."""
    return Path(out) if out else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _command(sub, name: str, func, help: str):
    """The parser of subcommand `name`, which runs `func(args)`. `help` is its line in `nanobert --help`; its
    own --help opens with the docstring of `func`, or with `help` as a sentence where `func` has none."""
    p = sub.add_parser(name, help=help, description=func.__doc__ or help[0].upper() + help[1:] + ".")
    p.set_defaults(func=func)
    return p


def _job_options(p, overwrite_help: str) -> None:
    """--overwrite and --quiet, which every command that writes a run takes."""
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    p.add_argument("--quiet", action="store_true", help="no progress output")


# ----------------------------------------------------------------------------------------------------------
# pretrain


def _add_pretrain(sub) -> None:
    help = "train a BERT from scratch (MLM + NSP, the causal next-word objective, or both: hybrid)"
    p = _command(sub, "pretrain", _cmd_pretrain, help)
    p.add_argument(  # the names are objectives.OBJECTIVES' keys, checked there (importing it here is slow)
        "--objective",
        help="mlm_nsp (default): BERT's masked words + next sentence; causal: GPT's next word; "
        "hybrid: both on one head (GPT-BERT; --set causal_fraction=...)",
    )
    p.add_argument(
        "--data",
        help="wikitext-2-raw-v1 (default, via Hugging Face datasets), wikitext-2-v1, "
        "toy, a directory of WikiText files, or a text file",
    )
    p.add_argument("--train", metavar="FILE", help="training text file (overrides --data)")
    p.add_argument("--valid", metavar="FILE", help="held-out text file for evaluation")
    p.add_argument(
        "--prepared",
        metavar="DIR",
        help="stream a corpus tokenized by `nanobert prepare` (instead of --data/--train)",
    )
    p.add_argument(
        "--preset",
        help="model/recipe preset (default: toy for --data toy, else wikitext2-cpu on CPU, with 2 layers "
        "instead of 4 when the budget allows 4 fewer than 100 passes, and small on GPU); "
        "see `nanobert presets`",
    )
    p.add_argument("--out", help="output directory (default: runs/PRESET-TIMESTAMP)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--max-steps", type=int, help="optimizer steps in total (a resumed run counts all)")
    length.add_argument("--epochs", type=float, help="passes over the training instances")
    length.add_argument("--time-budget", type=float, metavar="SECONDS", help="train for this many seconds")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="default: auto (CUDA when present)")
    p.add_argument("--seed", type=int)
    p.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="override any model or training field, e.g. --set learning_rate=3e-4 hidden_size=192",
    )
    p.add_argument(
        "--stop-after", type=positive_int, metavar="N", help="end after N total steps, keeping the schedule"
    )
    p.add_argument("--resume", metavar="DIR", help="continue from a checkpoint directory (e.g. RUN/last)")
    p.add_argument(
        "--tokenizer", metavar="DIR", help="reuse the tokenizer saved in DIR instead of training one"
    )
    _job_options(p, "replace a run already in --out")


def _cmd_pretrain(args) -> int:
    """Train a BERT from scratch with masked-LM and next-sentence prediction, the same stack with causal
    attention on next-word prediction (--objective causal), or both on one head (--objective hybrid)."""
    from nanobert.data.sources import DataSources
    from nanobert.device import resolve_device
    from nanobert.pretraining.pretrain import pretrain, resume_configs

    model_over, train_over = parse_overrides(args.set)
    train_over.update(_given(args, ("seed", "device", "max_steps", "epochs", "time_budget", "objective")))
    named = (args.data, args.train, args.valid, args.prepared)
    note, preset = None, args.preset
    if args.resume:  # the checkpoint's own configs and data, with what the command line changes
        model_config, train_config, sources = resume_configs(
            args.resume, model_over, train_over, DataSources(*named), preset
        )
        out = Path(args.out) if args.out else Path(args.resume).resolve().parent
    else:  # the preset asked for, or the one that suits this data and device
        sources = DataSources.for_new_run(*named)
        device = resolve_device(train_over.get("device", "auto"))
        model_config, train_config, preset, note = new_run_configs(
            args.preset, sources.data, device.type, model_over, train_over
        )
        out = _run_dir(args.out, preset)
    options = {k: getattr(args, k) for k in ("resume", "stop_after", "overwrite", "quiet")}
    options.update(preset=preset, tokenizer_dir=args.tokenizer, announce=note)
    summary = pretrain(model_config, train_config, sources, out, **options)
    if not summary.get("rank", 0):  # under torchrun, rank 0 alone prints the result
        _print_json({"out": str(out), **{key: summary[field] for key, field in _PRETRAIN_RESULT.items()}})
    return _exit_code(summary)


# What `nanobert pretrain` prints: key -> summary field.
_PRETRAIN_RESULT = {
    "step": "steps",
    "held_out": "final",
    "best": "best",
    "tokens_per_s": "tokens_per_s",
    "train_time_s": "train_time_s",
}


# ----------------------------------------------------------------------------------------------------------
# prepare


def _add_prepare(sub) -> None:
    help = "tokenize a corpus once into memory-mapped shards for `pretrain --prepared`"
    p = _command(sub, "prepare", _cmd_prepare, help)
    p.add_argument(
        "--data",
        required=True,
        help="a text file, a directory of WikiText files (its valid split comes along), toy, or a "
        "WikiText name on the Hugging Face hub",
    )
    p.add_argument("--valid", metavar="FILE", help="held-out text file, stored as the valid split")
    p.add_argument("--out", required=True, metavar="DIR")
    p.add_argument("--tokenizer", metavar="DIR", help="use the tokenizer saved in DIR instead of training")
    p.add_argument("--vocab-size", type=int, default=8192, help="WordPiece size to train (default 8192)")
    p.add_argument("--min-frequency", type=int, default=2, help="occurrences a piece needs (default 2)")
    p.add_argument(
        "--tokenizer-sample-words",
        type=int,
        default=10_000_000,
        metavar="N",
        help="train the tokenizer on the documents holding the first N words (default 10M)",
    )
    _job_options(p, "replace DIR if it exists")


def _cmd_prepare(args) -> int:
    """Tokenize a corpus of any size once into memory-mapped token and boundary files, which `nanobert
    pretrain --prepared DIR` streams with bounded memory."""
    from nanobert.data.prepare import prepare_corpus

    meta = prepare_corpus(
        args.data,
        args.out,
        valid=args.valid,
        tokenizer_dir=args.tokenizer,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        sample_words=args.tokenizer_sample_words,
        overwrite=args.overwrite,
        quiet=args.quiet,
    )
    _print_json({"out": args.out, **meta})
    return 0


# ----------------------------------------------------------------------------------------------------------
# evaluate


def _add_evaluate(sub) -> None:
    help = "held-out metrics of a checkpoint (MLM + NSP, or next word), as JSON"
    p = _command(sub, "evaluate", _cmd_evaluate, help)
    p.add_argument("checkpoint", metavar="CKPT")
    p.add_argument("--data", help="corpus whose validation split to use (default: the one it trained with)")
    p.add_argument("--valid", metavar="FILE", help="held-out text file")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")


def _cmd_evaluate(args) -> int:
    from nanobert.objectives.evaluate import evaluate_checkpoint

    _print_json(
        evaluate_checkpoint(
            args.checkpoint,
            data=args.data,
            valid_file=args.valid,
            batch_size=args.batch_size,
            device=args.device,
        )
    )
    return 0


# ----------------------------------------------------------------------------------------------------------
# presets


def _add_presets(sub) -> None:
    _command(sub, "presets", _cmd_presets, "list the presets and what they set")


def _cmd_presets(args) -> int:

    for name, preset in PRESETS.items():
        fields = {**preset["model"], **preset["train"]}
        print(f"{name:16s} " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


# ----------------------------------------------------------------------------------------------------------
# finetune


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


def _add_finetune(sub) -> None:
    help = "fine-tune a pretrained checkpoint on a labelled CSV/TSV/JSONL file, or on SQuAD (--task qa)"
    p = _command(sub, "finetune", _cmd_finetune, help)
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
    p.add_argument(
        "--epochs",
        type=int,
        help="default 3, or up to 10 on a small training set for at least 1,500 steps (qa: 2)",
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
        "--layer-lr-decay",
        type=float,
        help="learning-rate factor per encoder layer going down, embeddings last; default 1 (one rate)",
    )
    p.add_argument(
        "--max-seq-len", type=int, help="tokens per example incl. [CLS]/[SEP], default 128 (qa: 384)"
    )
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
        help="BERT's random init instead of the checkpoint's weights (same shape, tokenizer, budget)",
    )
    _job_options(p, "replace a run already in --out")


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
    _print_json({"out": str(out), **{k: summary[k] for k in _FINETUNE_RESULT}})
    return _exit_code(summary)


def _finetune_config(config_class, args):
    """A FinetuneConfig (or QAConfig): each flag given sets the field of its name, the rest keep defaults."""
    from dataclasses import fields

    return config_class(**_given(args, [f.name for f in fields(config_class)]))


def _finetune_out(args) -> Path:
    return _run_dir(args.out, "finetune-scratch" if args.from_scratch else "finetune-pretrained")


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
    _refuse_options(args, ("fresh_pooler",), "--task qa, whose head reads every token, not the pooler")
    _refuse_options(args, ("symmetric_pairs",), "--task qa: a question and its passage have an order")
    cfg, out = _finetune_config(QAConfig, args), _finetune_out(args)
    options = {k: getattr(args, k) for k in ("from_scratch", "overwrite", "quiet")}
    summary = finetune_qa(args.checkpoint, args.train, args.dev, out, cfg, test_file=args.test, **options)
    _print_json({"out": str(out), **{k: summary[k] for k in _FINETUNE_RESULT}})
    return _exit_code(summary)


# ----------------------------------------------------------------------------------------------------------
# predict


def _add_predict(sub) -> None:
    help = "label a CSV/TSV/JSONL file with a fine-tuned model, or answer a SQuAD file's questions"
    p = _command(sub, "predict", _cmd_predict, help)
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
        _print_json(result)
    elif "metrics" in result:  # the rows went to stdout: keep it clean, the scores go to stderr
        print("nanobert: " + json.dumps(result["metrics"]), file=sys.stderr)
    _say_cut(result.get("texts_cut", 0), "texts")
    if "metrics_skipped" in result:  # labelled input that could not be scored: say why, wherever rows went
        print(f"nanobert: not scored: {result['metrics_skipped']}", file=sys.stderr)
    return 0


def _cmd_predict_qa(args) -> int:
    from nanobert.finetuning.qa import predict_qa

    _refuse_options(args, _TABLE_OPTIONS, "a question-answering model, which reads SQuAD JSON")
    options = {k: getattr(args, k) for k in ("batch_size", "device", "null_score_threshold")}
    result = predict_qa(args.model, args.input, args.out, **options)
    if args.out:  # the answers went to a file: stdout carries the result
        _print_json(result)
    elif "f1" in result:  # the answers went to stdout: keep it clean, the scores go to stderr
        scores = {k: result[k] for k in ("exact_match", "f1", "squad_version")}
        print("nanobert: " + json.dumps(scores), file=sys.stderr)
    return 0


# `predict` by what the checkpoint kind's model reads (kinds.Kind.predict_reads)
_PREDICTORS = {"table": _cmd_predict_table, "squad": _cmd_predict_qa}


def _add_answer(sub) -> None:
    p = _checkpoint_command(
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
    return _emit(args, {"question": args.question, **asdict(a)}, text)


# ----------------------------------------------------------------------------------------------------------
# use and inspect a pretrained checkpoint: fill-mask, nsp, similarity, embed, attention, explain


def _checkpoint_command(sub, name: str, func, help: str, json_help: str = "print the result as JSON"):
    """A command's parser with the arguments every inference command shares: CKPT, --device, --json."""
    p = _command(sub, name, func, help)
    p.add_argument("checkpoint", metavar="CKPT", help="a checkpoint directory, e.g. RUN/best")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--json", action="store_true", help=json_help)
    return p


def _emit(args, data: dict, text: str) -> int:
    """Print a command's result: `data` as JSON with --json, else `text` for a person."""
    if args.json:
        _print_json(data)
    else:
        print(text)
    return 0


def _load_for_inference(args):
    from nanobert.use.inference import load

    return load(args.checkpoint, device=args.device)


def _add_fill_mask(sub) -> None:
    p = _checkpoint_command(
        sub, "fill-mask", _cmd_fill_mask, "the most probable word pieces at each [MASK] in a text"
    )
    p.add_argument("text", help='a text with one or more [MASK], e.g. "the cat sat on the [MASK] ."')
    p.add_argument("--top-k", type=int, default=5, help="candidates per [MASK] (default 5)")


def _cmd_fill_mask(args) -> int:
    from dataclasses import asdict

    result = _load_for_inference(args).fill_mask(args.text, top_k=args.top_k)
    return _emit(args, asdict(result), str(result))


def _add_nsp(sub) -> None:
    p = _checkpoint_command(sub, "nsp", _cmd_nsp, "the probability that sentence B follows sentence A")
    p.add_argument("text_a", metavar="A")
    p.add_argument("text_b", metavar="B")


def _cmd_nsp(args) -> int:
    r = _load_for_inference(args).next_sentence(args.text_a, args.text_b)
    return _emit(args, {"IsNext": r.is_next, "NotNext": r.not_next}, str(r))


def _add_generate(sub) -> None:
    p = _checkpoint_command(
        sub, "generate", _cmd_generate, "continue a text with a causal checkpoint (--objective causal)"
    )
    p.add_argument("prompt", help='the start of the text, e.g. "the cat sat on"')
    p.add_argument("--max-new-tokens", type=int, default=30, help="word pieces to add at most (default 30)")
    p.add_argument("--temperature", type=float, default=1.0, help="0 = always the most probable (default 1)")
    p.add_argument("--top-k", type=int, help="sample among the k most probable pieces only")
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the sampling (default 0): same seed, same text"
    )


def _cmd_generate(args) -> int:
    from dataclasses import asdict

    options = {k: getattr(args, k) for k in ("max_new_tokens", "temperature", "top_k", "seed")}
    result = _load_for_inference(args).generate(args.prompt, **options)
    return _emit(args, asdict(result), result.text)


def _add_similarity(sub) -> None:
    p = _checkpoint_command(
        sub, "similarity", _cmd_similarity, "cosine similarity of two texts' mean-pooled embeddings"
    )
    p.add_argument("text_a", metavar="A")
    p.add_argument("text_b", metavar="B")


def _cmd_similarity(args) -> int:
    value = _load_for_inference(args).similarity(args.text_a, args.text_b)
    return _emit(args, {"cosine_similarity": value}, f"cosine similarity {value:.4f}")


def _add_embed(sub) -> None:
    p = _checkpoint_command(
        sub, "embed", _cmd_embed, "one mean-pooled embedding per line of a text file, saved as .npy"
    )
    p.add_argument("--input", required=True, metavar="FILE", help="UTF-8 text, one text per line")
    p.add_argument("--out", required=True, metavar="FILE.npy", help="where to np.save the (lines, H) matrix")
    p.add_argument("--batch-size", type=positive_int, default=64)


def _cmd_embed(args) -> int:
    from nanobert.use.inference import embed_file

    path, shape, cut = embed_file(_load_for_inference(args), args.input, args.out, batch_size=args.batch_size)
    _say_cut(cut, "lines")
    text = f"wrote {path}: {shape[0]} embeddings of size {shape[1]} (float32)"
    return _emit(args, {"out": str(path), "shape": list(shape), "dtype": "float32"}, text)


def _say_cut(cut: int, what: str) -> None:
    """The one note for texts cut before tokenizing (the model reads only the start of each)."""
    if cut:
        from nanobert.tokenizer import CHARS_PER_POSITION

        print(
            f"nanobert: {cut} {what} longer than {CHARS_PER_POSITION} characters per model position were cut "
            "there before tokenizing; the model reads only the start of each anyway",
            file=sys.stderr,
        )


def _add_attention(sub) -> None:
    json_help = "print what was drawn as JSON, with the attention probabilities"
    help = "draw attention maps (tokens on both axes) as a PNG"
    p = _checkpoint_command(sub, "attention", _cmd_attention, help, json_help)
    p.add_argument("text")
    p.add_argument("--pair", metavar="B", help="a second sentence, encoded as [CLS] A [SEP] B [SEP]")
    p.add_argument("--layer", type=int, help="one layer, counted from 0 (default: every layer)")
    p.add_argument("--head", type=int, help="one head, counted from 0 (default: every head)")
    p.add_argument("--out", required=True, metavar="PNG")


def _cmd_attention(args) -> int:
    from nanobert.use.plots import plot_attention

    maps = _load_for_inference(args).attention(args.text, args.pair)
    path = plot_attention(maps, args.out, layer=args.layer, head=args.head)
    L, nh, T, _ = maps.probs.shape
    layers = [args.layer] if args.layer is not None else list(range(L))
    heads = [args.head] if args.head is not None else list(range(nh))
    probs = [[maps.probs[li, hi].round(4).tolist() for hi in heads] for li in layers]
    data = {"out": str(path), "tokens": maps.tokens, "layers": layers, "heads": heads, "attentions": probs}
    return _emit(args, data, f"wrote {path}: {len(layers)} layer(s) x {len(heads)} head(s) over {T} tokens")


def _add_explain(sub) -> None:
    p = _checkpoint_command(
        sub, "explain", _cmd_explain, "a step-by-step trace of one forward pass, for learners"
    )
    p.add_argument("text_a", metavar="A")
    p.add_argument("text_b", metavar="B", nargs="?", help="optional second sentence")
    p.add_argument("--top-k", type=int, default=5, help="predictions shown at each [MASK]")
    p.add_argument("--preview", type=int, default=6, help="numbers shown of each vector (default 6)")


def _cmd_explain(args) -> int:
    from dataclasses import asdict

    from nanobert.use.explain import format_trace

    model = _load_for_inference(args)
    trace = model.explain(args.text_a, args.text_b, top_k=args.top_k, preview=args.preview)
    return _emit(args, asdict(trace), format_trace(trace))


# ----------------------------------------------------------------------------------------------------------
# score / blimp

_RULE_HELP = (
    "a masked model's rule: within_word (default: the later pieces of a word masked too, Kauf & Ivanova "
    "2023) or original (one piece at a time, Salazar et al. 2020); a causal model has one rule"
)


def _add_score(sub) -> None:
    help = "how likely a sentence is, piece by piece; for two, which one the model prefers"
    p = _checkpoint_command(sub, "score", _cmd_score, help)
    p.add_argument("text_a", metavar="SENTENCE")
    p.add_argument("text_b", metavar="OTHER", nargs="?", help="a second sentence to compare with the first")
    p.add_argument("--rule", choices=["within_word", "original"], help=_RULE_HELP)


def _cmd_score(args) -> int:
    """Score a sentence: its log-likelihood under the model (a masked model: pseudo-log-likelihood, each piece
    masked in turn), each word piece's share, and for two sentences which one the model prefers."""
    from nanobert.use.scoring import format_scores, score_report

    model = _load_for_inference(args)
    texts = [args.text_a] if args.text_b is None else [args.text_a, args.text_b]
    scores = [model.score(t, args.rule) for t in texts]
    return _emit(args, score_report(scores), format_scores(scores))


def _add_blimp(sub) -> None:
    help = "BLiMP: accuracy on 67,000 grammatical/ungrammatical sentence pairs, by field and phenomenon"
    p = _checkpoint_command(sub, "blimp", _cmd_blimp, help)
    p.add_argument(
        "--data",
        default="nyu-mll/blimp",
        metavar="DIR|FILE",
        help="BLiMP's data/ folder of .jsonl files, one such file, or nyu-mll/blimp (the hub; the default)",
    )
    p.add_argument("--limit", type=positive_int, metavar="N", help="the first N pairs of each paradigm")
    p.add_argument(
        "--vocab-from",
        metavar="CORPUS",
        help="also report the pairs whose words all occur at least twice in CORPUS (BabyLM's filter)",
    )
    p.add_argument("--rule", choices=["within_word", "original"], help=_RULE_HELP)
    p.add_argument("--plot", metavar="PNG", help="draw the accuracies by phenomenon to this picture")
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16"],
        default="fp32",
        help="fp32 (default: the same figure on every machine), bf16 (a bf16 copy of the model: faster on "
        "CPUs with native bf16, each score off by up to ~0.2 nats), or auto (the faster here, timed)",
    )
    p.add_argument("--batch-tokens", type=positive_int, default=8192, help="tokens per batch (default 8192)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _cmd_blimp(args) -> int:
    """Score BLiMP's minimal pairs (Warstadt et al. 2020): a pair passes when the model gives its grammatical
    sentence the higher score. Prints the accuracy overall, by field and by phenomenon, beside the published
    figures (5-gram 61.2, LSTM 69.8, Transformer-XL 69.6, GPT-2 83.0; chance 50)."""
    from dataclasses import asdict

    from nanobert.use.blimp import corpus_word_counts, evaluate_blimp, format_report, load_blimp, plot_report
    from nanobert.use.plots import image_path
    from nanobert.use.scoring import scoring_precision

    plot = image_path(args.plot) if args.plot else None  # a bad picture path fails before the work
    pairs = load_blimp(args.data, args.limit)
    counts = corpus_word_counts(args.vocab_from) if args.vocab_from else None
    model = _load_for_inference(args)
    dtype, why = scoring_precision(model.model, args.precision)
    if not args.quiet:
        print(f"nanobert: precision {why}", file=sys.stderr)
    report = evaluate_blimp(
        model.model, model.tokenizer, pairs, args.rule, counts, args.batch_tokens, not args.quiet, dtype
    )
    text = format_report(report)
    if plot:
        text += f"\nwrote {plot_report(report, plot)}"
    data = asdict(report) | {"precision": "bf16" if dtype else "fp32", "plot": str(plot) if plot else None}
    return _emit(args, data, text)


# ----------------------------------------------------------------------------------------------------------
# export-hf / import-hf


def _add_export_hf(sub) -> None:
    help = "write a checkpoint as a transformers BertForPreTraining (or, causal, BertLMHeadModel) directory"
    p = _command(sub, "export-hf", _cmd_export_hf, help)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("checkpoint", metavar="CKPT")
    p.add_argument("out", metavar="OUT")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it is not empty")


def _cmd_export_hf(args) -> int:
    from nanobert.checkpoints.checkpoint import read_config
    from nanobert.checkpoints.kinds import KINDS, checkpoint_kind
    from nanobert.hf.export_hf import export_hf

    out = export_hf(args.checkpoint, args.out, overwrite=args.overwrite)
    files = sorted(f.name for f in out.iterdir())
    text = f"wrote {out}: {', '.join(files)}\n"
    architecture = json.loads((out / "config.json").read_text())["architectures"][0]
    text += f"load it with transformers.{architecture}.from_pretrained({str(out)!r})"
    leaves_out = KINDS[checkpoint_kind(read_config(args.checkpoint))].hf_leaves_out
    if leaves_out:  # said plainly: what the checkpoint does that the exported class cannot
        text += f"\nnot exported: {leaves_out}"
    return _emit(args, {"out": str(out), "files": files, "not_exported": leaves_out}, text)


def _add_import_hf(sub) -> None:
    help = "convert a transformers BERT directory into a nanobert checkpoint"
    p = _command(sub, "import-hf", _cmd_import_hf, help)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "hf_dir", metavar="DIR", help="BertForPreTraining or BertModel weights with their tokenizer"
    )
    p.add_argument("out", metavar="OUT")
    p.add_argument("--seed", type=int, default=0, help="seed for any head initialised freshly")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it is not empty")


def _cmd_import_hf(args) -> int:
    from dataclasses import asdict

    from nanobert.hf.import_hf import import_hf

    result = import_hf(args.hf_dir, args.out, overwrite=args.overwrite, seed=args.seed)
    lines = [f"wrote {result.out}"]
    if result.fresh_heads:
        lines.append(
            f"initialised freshly (absent from {args.hf_dir}): {', '.join(result.fresh_heads)}; "
            "their outputs mean nothing until trained"
        )
    else:
        lines.append("every weight came from the source; nothing was initialised freshly")
    if result.vocab_remapped:
        lines.append(
            "vocabulary renumbered so that [PAD] [UNK] [CLS] [SEP] [MASK] are ids 0..4 "
            "(the model computes the same as before)"
        )
    return _emit(args, {**asdict(result), "out": str(result.out)}, "\n".join(lines))


# ----------------------------------------------------------------------------------------------------------
# serve


def _add_serve(sub) -> None:
    help = "a local page to play with a checkpoint and watch a run"
    p = _command(sub, "serve", _cmd_serve, help)
    p.add_argument("path", metavar="PATH", help="a checkpoint (RUN/best) or a run directory (RUN)")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    p.add_argument("--port", type=int, default=8000, help="default 8000; 0 picks a free port")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (default: localhost, 127.0.0.1, ::1 and --host)",
    )


def _cmd_serve(args) -> int:
    """Serve a page for a checkpoint (fill-mask, NSP, attention, explain, generate, labels) or a run directory
    (its curves, refreshed while it trains). Ctrl-C stops it."""
    from nanobert.serve.app import serve

    serve(args.path, host=args.host, port=args.port, device=args.device, allow_hosts=tuple(args.allow_host))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="nanobert", description="Pretrain, inspect, fine-tune and export a from-scratch BERT."
    )
    try:
        installed = version("nanobert")  # the package's own __init__ sits above the CLI's floor
    except PackageNotFoundError:  # run from a source tree that was never installed
        installed = "(not installed)"
    parser.add_argument("--version", action="version", version=f"nanobert {installed}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    _add_pretrain(sub)
    _add_prepare(sub)
    _add_evaluate(sub)
    _add_presets(sub)
    _add_finetune(sub)
    _add_predict(sub)
    _add_answer(sub)
    _add_fill_mask(sub)
    _add_nsp(sub)
    _add_generate(sub)
    _add_similarity(sub)
    _add_embed(sub)
    _add_attention(sub)
    _add_explain(sub)
    _add_score(sub)
    _add_blimp(sub)
    _add_export_hf(sub)
    _add_import_hf(sub)
    _add_serve(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    def run() -> int:
        args, unknown = build_parser().parse_known_args(argv)
        if unknown:  # argparse's own message would point to `nanobert --help`, not the command's help
            raise NanobertError(
                f"unrecognized arguments: {' '.join(unknown)} (see `nanobert {args.command} --help`)"
            )
        return args.func(args)

    try:
        return run_script("nanobert", run)  # a NanobertError: one line `nanobert: error: ...`, exit 2
    except KeyboardInterrupt:
        print("nanobert: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
