"""The pretraining commands: `pretrain`, `prepare`, `evaluate`, `presets`."""

from __future__ import annotations

from pathlib import Path

from nanobert.cli.common import (
    command,
    exit_code,
    given,
    job_options,
    print_json,
    run_dir,
)

# --set's parsing (over config) and the recipes are plain Python: no torch at start-up
from nanobert.cli.overrides import parse_overrides
from nanobert.errors import positive_int
from nanobert.pretraining.recipes import DEPTH_STEPS, PRESETS, new_run_configs


def _add_pretrain(sub) -> None:
    help = "train a BERT from scratch (MLM + NSP, the causal next-word objective, or both: hybrid)"
    p = command(sub, "pretrain", _cmd_pretrain, help)
    p.add_argument(  # OBJECTIVES' keys (objectives.registry), checked there; importing it here is slow
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
        f"instead of 4 when the budget allows 4 fewer than {DEPTH_STEPS:,} steps, and small on GPU); "
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
    p.add_argument(
        "--resume",
        metavar="DIR",
        help="continue a checkpoint (RUN/last) or a run (RUN); a run given a longer --max-steps, --epochs or "
        "--time-budget (its new total) goes on as one longer run, from before its decay began",
    )
    p.add_argument(
        "--tokenizer", metavar="DIR", help="reuse the tokenizer saved in DIR instead of training one"
    )
    job_options(p, "replace a run already in --out")


def _cmd_pretrain(args) -> int:
    """Train a BERT from scratch with masked-LM and next-sentence prediction, the same stack with causal
    attention on next-word prediction (--objective causal), or both on one head (--objective hybrid)."""
    from nanobert.pretraining.pretrain import pretrain

    model_over, train_over = parse_overrides(args.set)
    train_over.update(given(args, ("seed", "device", "max_steps", "epochs", "time_budget", "objective")))
    configs = (_resumed if args.resume else _new_run)(args, model_over, train_over)
    model_config, train_config, sources, out, options = configs
    options.update({k: getattr(args, k) for k in ("stop_after", "overwrite", "quiet")})
    summary = pretrain(model_config, train_config, sources, out, tokenizer_dir=args.tokenizer, **options)
    if not summary.get("rank", 0):  # under torchrun, rank 0 alone prints the result
        print_json({"out": str(out), **{key: summary[field] for key, field in _PRETRAIN_RESULT.items()}})
    return exit_code(summary)


def _resumed(args, model_over: dict, train_over: dict) -> tuple:
    """A resume: the checkpoint's own configs and data, with what the command line changes. A run folder
    continues its last/, or, given a longer length, goes on as one longer run (`pretraining.longer`)."""
    from nanobert.data.sources import DataSources
    from nanobert.pretraining.longer import LENGTHS, checkpoint_to_resume
    from nanobert.pretraining.resume import resume_configs

    lengthened = any(train_over.get(name) is not None for name in LENGTHS)
    checkpoint, longer = checkpoint_to_resume(args.resume, lengthened)
    sources = DataSources(args.data, args.train, args.valid, args.prepared)
    configs = resume_configs(checkpoint, model_over, train_over, sources, args.preset, longer=longer)
    out = Path(args.out) if args.out else checkpoint.resolve().parent
    return (*configs, out, {"resume": checkpoint, "longer": longer})


def _new_run(args, model_over: dict, train_over: dict) -> tuple:
    """A new run: the preset asked for, or the one that suits this data and device."""
    from nanobert.data.sources import DataSources
    from nanobert.device import resolve_device

    sources = DataSources.for_new_run(args.data, args.train, args.valid, args.prepared)
    device = resolve_device(train_over.get("device", "auto"))
    model_config, train_config, preset, note = new_run_configs(
        args.preset, sources.data, device.type, model_over, train_over
    )
    out = run_dir(args.out, preset)
    return model_config, train_config, sources, out, {"preset": preset, "announce": note}


# What `nanobert pretrain` prints: key -> summary field.
_PRETRAIN_RESULT = {
    "step": "steps",
    "held_out": "final",
    "best": "best",
    "tokens_per_s": "tokens_per_s",
    "train_time_s": "train_time_s",
}


def _add_prepare(sub) -> None:
    help = "tokenize a corpus once into memory-mapped shards for `pretrain --prepared`"
    p = command(sub, "prepare", _cmd_prepare, help)
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
    job_options(p, "replace DIR if it exists")


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
    print_json({"out": args.out, **meta})
    return 0


def _add_evaluate(sub) -> None:
    help = "held-out metrics of a checkpoint (MLM + NSP, or next word), as JSON"
    p = command(sub, "evaluate", _cmd_evaluate, help)
    p.add_argument("checkpoint", metavar="CKPT")
    p.add_argument("--data", help="corpus whose validation split to use (default: the one it trained with)")
    p.add_argument("--valid", metavar="FILE", help="held-out text file")
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")


def _cmd_evaluate(args) -> int:
    from nanobert.objectives.evaluate import evaluate_checkpoint

    print_json(
        evaluate_checkpoint(
            args.checkpoint,
            data=args.data,
            valid_file=args.valid,
            batch_size=args.batch_size,
            device=args.device,
        )
    )
    return 0


def _add_presets(sub) -> None:
    command(sub, "presets", _cmd_presets, "list the presets and what they set")


def _cmd_presets(args) -> int:

    for name, preset in PRESETS.items():
        fields = {**preset["model"], **preset["train"]}
        print(f"{name:16s} " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


def add_commands(sub) -> None:
    _add_pretrain(sub)
    _add_prepare(sub)
    _add_evaluate(sub)
    _add_presets(sub)
