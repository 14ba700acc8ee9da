"""The `nanobert` command line: each subcommand parses its arguments, calls one library function, prints.

One file per command group (pretraining, finetuning, use, hf, serve), each adding its commands to the
parser; common.py holds what they share. User errors (`NanobertError`, bad arguments) print one line and exit
with code 2; no traceback.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import PackageNotFoundError, version

from nanobert.cli import finetuning, hf, pretraining, serve, use
from nanobert.errors import ArgumentParser, NanobertError, run_script


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="nanobert", description="Pretrain, inspect, fine-tune and export a from-scratch BERT."
    )
    try:
        installed = version("nanobert")  # not nanobert.__version__: __init__ stands above the CLI
    except PackageNotFoundError:  # run from a source tree that was never installed
        installed = "(not installed)"
    parser.add_argument("--version", action="version", version=f"nanobert {installed}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)
    for group in (pretraining, finetuning, use, hf, serve):  # in the order `nanobert --help` lists them
        group.add_commands(sub)
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
