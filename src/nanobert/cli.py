"""The `nanobert` command line: each subcommand parses its arguments, calls one library function, prints.

User errors (`NanobertError`, bad arguments) print one line and exit with code 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from nanobert.errors import NanobertError


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (its default prints the whole usage block first)."""

    def error(self, message: str):  # type: ignore[override]
        raise NanobertError(f"{message} (see `{self.prog} --help`)")


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2))


# ----------------------------------------------------------------------------------------------------------
# pretrain


def _add_pretrain(sub) -> None:
    p = sub.add_parser(
        "pretrain",
        help="train a BERT from scratch (MLM + NSP)",
        description="Train a BERT from scratch with masked-LM and next-sentence prediction.",
    )
    p.add_argument(
        "--data",
        help="wikitext-2-raw-v1 (default, via Hugging Face datasets), wikitext-2-v1, "
        "toy, a directory of WikiText files, or a text file",
    )
    p.add_argument("--train", help="training text file (overrides --data)")
    p.add_argument("--valid", help="held-out text file for evaluation")
    p.add_argument(
        "--preset",
        help="model/recipe preset (default: toy for --data toy, else mini on CPU and "
        "small on GPU); see `nanobert presets`",
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
        "--stop-after", type=int, metavar="N", help="end after N total steps, keeping the schedule"
    )
    p.add_argument("--resume", metavar="DIR", help="continue from a checkpoint directory (e.g. RUN/last)")
    p.add_argument(
        "--tokenizer", metavar="DIR", help="reuse the tokenizer saved in DIR instead of training one"
    )
    p.add_argument("--overwrite", action="store_true", help="replace a run already in --out")
    p.add_argument("--quiet", action="store_true", help="no progress output")
    p.set_defaults(func=_cmd_pretrain)


# A first run with no options: about 15 minutes on a laptop CPU, about 3 minutes on a GPU.
_DEFAULT_BUDGET = {"cpu": 900.0, "cuda": 180.0}


def _cmd_pretrain(args) -> int:
    from nanobert.config import build_configs, parse_overrides
    from nanobert.train import DEFAULT_DATA, DataSources, pretrain, resolve_device, resume_configs

    model_over, train_over = parse_overrides(args.set)
    for name in ("seed", "device", "max_steps", "epochs", "time_budget"):
        if getattr(args, name) is not None:
            train_over[name] = getattr(args, name)
    announce = None
    if args.resume:
        model_config, train_config, sources = resume_configs(args.resume)
        if model_over:
            raise NanobertError(
                f"--resume continues a model as it is; model fields cannot change ({', '.join(model_over)})"
            )
        if {"max_steps", "epochs", "time_budget"} & set(train_over):
            train_config.max_steps = train_config.epochs = train_config.time_budget = None
        train_config = type(train_config)(**{**train_config.__dict__, **train_over})
        sources = DataSources(
            data=args.data or sources.data,
            train_file=args.train or sources.train_file,
            valid_file=args.valid or sources.valid_file,
        )
        out = Path(args.out) if args.out else Path(args.resume).resolve().parent
        preset = args.preset
    else:
        data = args.data or (None if args.train else DEFAULT_DATA)
        device = resolve_device(train_over.get("device", "auto"))
        preset = args.preset or ("toy" if data == "toy" else "mini" if device.type == "cpu" else "small")
        model_config, train_config = build_configs(preset, model_over, train_over)
        has_length = any(getattr(train_config, n) is not None for n in ("max_steps", "epochs", "time_budget"))
        if not has_length:
            train_config.time_budget = _DEFAULT_BUDGET[device.type]
        if not args.preset or not has_length:  # say what was chosen for the user (after the data loads)
            length = (
                f"{train_config.max_steps} steps"
                if train_config.max_steps
                else f"{train_config.epochs} epochs"
                if train_config.epochs
                else f"{train_config.time_budget:.0f} s"
            )
            announce = (
                f"preset {preset!r} on {device.type} for {length} "
                "(choose with --preset and --max-steps/--epochs/--time-budget)"
            )
        sources = DataSources(data=data, train_file=args.train, valid_file=args.valid)
        out = Path(args.out) if args.out else Path("runs") / f"{preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    summary = pretrain(
        model_config,
        train_config,
        sources,
        out,
        resume=args.resume,
        stop_after=args.stop_after,
        overwrite=args.overwrite,
        preset=preset,
        tokenizer_dir=args.tokenizer,
        announce=announce,
        quiet=args.quiet,
    )
    _print_json(
        {
            "out": str(out),
            "step": summary["steps"],
            "held_out": summary["final"],
            "best": summary["best"],
            "tokens_per_s": round(summary["tokens_per_s"], 1),
            "train_time_s": summary["train_time_s"],
        }
    )
    return 0


# ----------------------------------------------------------------------------------------------------------
# evaluate


def _add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="held-out MLM and NSP metrics of a checkpoint, as JSON")
    p.add_argument("checkpoint", metavar="CKPT")
    p.add_argument("--data", help="corpus whose validation split to use (default: the one it trained with)")
    p.add_argument("--valid", help="held-out text file")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.set_defaults(func=_cmd_evaluate)


def _cmd_evaluate(args) -> int:
    from nanobert.evaluate import evaluate_checkpoint

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
    p = sub.add_parser("presets", help="list the presets and what they set")
    p.set_defaults(func=_cmd_presets)


def _cmd_presets(args) -> int:
    from nanobert.config import PRESETS

    for name, preset in PRESETS.items():
        fields = {**preset["model"], **preset["train"]}
        print(f"{name:16s} " + " ".join(f"{k}={v}" for k, v in fields.items()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nanobert", description="Pretrain, inspect, fine-tune and export a from-scratch BERT."
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_pretrain(sub)
    _add_evaluate(sub)
    _add_presets(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except NanobertError as e:
        print(f"nanobert: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nanobert: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
