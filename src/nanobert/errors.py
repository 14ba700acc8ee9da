"""The one exception type for problems with the user's input.

Library functions raise `NanobertError` for anything a user can fix (a missing file, an empty corpus, an
unknown preset, a corrupt checkpoint). The CLI catches it, prints its message as one line and exits with 2,
so users never see a traceback for their own mistakes. Bugs stay ordinary exceptions.
"""

import sys
from collections.abc import Callable
from pathlib import Path


class NanobertError(Exception):
    """A problem with the user's input; the message says what is wrong and what to do."""


def check_output_file(path: str | Path) -> Path:
    """`path` as a Path if a file can be written there: not a directory, no file where its folder goes."""
    path = Path(path)
    if path.is_dir():
        raise NanobertError(f"output {path} is a directory; give a file name")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NanobertError(f"output {path}: {parent} is a file, not a folder")
            break
    return path


def run_script(prog: str, main: Callable[[], int | None]) -> int:
    """The exit code of `main()` for the `nanobert` CLI and the benchmark scripts: a NanobertError prints as
    one line, `prog: error: ...`, and gives 2; anything else (a bug) keeps its traceback."""
    try:
        return main() or 0
    except NanobertError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
