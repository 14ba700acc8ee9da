"""What the command groups share: a subcommand's parser, the options every job or inference command takes,
and how a result is printed.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2))


def given(args, names) -> dict:
    """The options among `names` that the command line gives (argparse leaves the others None)."""
    return {k: v for k in names if (v := getattr(args, k, None)) is not None}


def exit_code(summary: dict) -> int:
    """0 for a run that ended as planned; 128 + N for one a signal N stopped (130 for Ctrl-C, 143 for
    SIGTERM), as a shell reports a process the signal killed, so that a script or scheduler sees that the
    run did not finish (its last/ is resumable)."""
    number = summary.get("stopped_by_signal")
    return 128 + number if number else 0


def run_dir(out: str | None, name: str) -> Path:
    """Where a new run goes: --out, else runs/NAME-TIMESTAMP."""
    return Path(out) if out else Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def command(sub, name: str, func, help: str):
    """The parser of subcommand `name`, which runs `func(args)`. `help` is its line in `nanobert --help`; its
    own --help opens with the docstring of `func`, or with `help` as a sentence where `func` has none."""
    p = sub.add_parser(name, help=help, description=func.__doc__ or help[0].upper() + help[1:] + ".")
    p.set_defaults(func=func)
    return p


def job_options(p, overwrite_help: str) -> None:
    """--overwrite and --quiet, which every command that writes a run takes."""
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    p.add_argument("--quiet", action="store_true", help="no progress output")


def checkpoint_command(sub, name: str, func, help: str, json_help: str = "print the result as JSON"):
    """A command's parser with the arguments every inference command shares: CKPT, --device, --json."""
    p = command(sub, name, func, help)
    p.add_argument("checkpoint", metavar="CKPT", help="a checkpoint directory, e.g. RUN/best")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--json", action="store_true", help=json_help)
    return p


def emit(args, data: dict, text: str) -> int:
    """Print a command's result: `data` as JSON with --json, else `text` for a person."""
    if args.json:
        print_json(data)
    else:
        print(text)
    return 0


def load_for_inference(args):
    from nanobert.use.inference import load

    return load(args.checkpoint, device=args.device)


def say_cut(cut: int, what: str) -> None:
    """The one note for texts cut before tokenizing (the model reads only the start of each)."""
    if cut:
        from nanobert.tokenizer import CHARS_PER_POSITION

        print(
            f"nanobert: {cut} {what} longer than {CHARS_PER_POSITION} characters per model position were cut "
            "there before tokenizing; the model reads only the start of each anyway",
            file=sys.stderr,
        )


__all__ = [
    "checkpoint_command",
    "command",
    "emit",
    "exit_code",
    "given",
    "job_options",
    "load_for_inference",
    "print_json",
    "run_dir",
    "say_cut",
]
