"""The one exception type for problems with the user's input.

Library functions raise `NanobertError` for anything a user can fix (a missing file, an empty corpus, an
unknown preset, a corrupt checkpoint). The CLI catches it, prints its message as one line and exits with 2,
so users never see a traceback for their own mistakes. Bugs stay ordinary exceptions.
"""

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


class NanobertError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors (its default prints the whole usage block first), for the CLI and the
    benchmark scripts."""

    def error(self, message: str):  # type: ignore[override]
        raise NanobertError(f"{message} (see `{self.prog} --help`)")


def positive_int(text: str) -> int:
    """argparse type of counts such as --batch-size: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def within(path: str | Path, folder: str | Path) -> bool:
    """Whether `path` is `folder` or lies inside it (both resolved, so links and `..` count as they point)."""
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def check_input_file(path: str | Path, option: str) -> Path:
    """`path` as a Path if it is a file to read, else a NanobertError naming the option that gave it; for
    scripts that read a file only after a long run, so that a mistyped path fails at the start instead."""
    path = Path(path)
    if not path.is_file():
        raise NanobertError(f"{option} {path}: no such file")
    return path


def check_output_file(path: str | Path, inputs: Iterable[str | Path] = ()) -> Path:
    """`path` as a Path if a file can be written there: not a directory, no file where its folder goes, and
    neither one of `inputs` nor inside one (an input file, a model directory) that writing would destroy."""
    path = Path(path)
    for source in inputs:
        if within(path, source):
            relation = "is" if within(source, path) else "lies inside"
            raise NanobertError(f"output {path} {relation} the input {source}; choose another output file")
    if path.is_dir():
        raise NanobertError(f"output {path} is a directory; give a file name")
    if path.name == "":  # "." or "/": no name to write under
        raise NanobertError(f"output {path} names no file")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NanobertError(f"output {path}: {parent} is a file, not a folder")
            break
    return path


def check_output_folder(out: Path, holds: str) -> None:
    """NanobertError when `out` is a file or lies under one (a folder that will hold the file `holds`)."""
    if out.exists() and not out.is_dir():
        raise NanobertError(f"output {out} is a file; give a directory")
    check_output_file(out / holds)  # no file where one of its folders goes


def check_output_dir(
    out: str | Path,
    overwrite: bool,
    inputs: Iterable[str | Path],
    holds: str,
    kind: str,
    is_kind: Callable[[Path], bool] | None = None,
) -> Path:
    """`out` as a Path if a directory may be written (or, with `overwrite`, replaced) there.

    Never the directory of one of `inputs` or one that holds one (replacing it would delete the input),
    never a file; an existing non-empty directory only with `overwrite`, and then only if it holds a
    previous output (the file `holds`, e.g. meta.json, and `is_kind(out)` where the file alone does not
    tell, as config.json does not), so that a mistyped --out cannot wipe a folder. `kind` names such an
    output in the messages.
    """
    out = Path(out)
    for source in inputs:
        if within(source, out):
            relation = "is" if within(out, source) else "holds"
            raise NanobertError(
                f"output {out} {relation} the input {source}; choose another output directory"
            )
    check_output_folder(out, holds)
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise NanobertError(
                f"{out} already exists and is not empty; choose another one or pass --overwrite"
            )
        if not (out / holds).is_file():
            raise NanobertError(
                f"{out} holds other files, not a {kind} (no {holds}); --overwrite replaces only a {kind}, so "
                "choose another directory"
            )
        if is_kind is not None and not is_kind(out):
            raise NanobertError(
                f"{out} holds something other than a {kind} (its {holds} is not one's); --overwrite replaces "
                f"only a {kind}, so choose another directory"
            )
    return out


def run_script(prog: str, main: Callable[[], int | None]) -> int:
    """The exit code of `main()` for the `nanobert` CLI and the benchmark scripts: a NanobertError prints as
    one line, `prog: error: ...`, and gives 2; anything else (a bug) keeps its traceback."""
    try:
        return main() or 0
    except NanobertError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # stdout's reader left (`nanobert predict ... | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush cannot fail
        return 141  # 128 + SIGPIPE, what a shell reports for a writer whose pipe closed
