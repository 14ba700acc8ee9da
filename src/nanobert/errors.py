"""The one exception type for problems with the user's input, and the machine's errors a user can fix.

Library functions raise `NanobertError` for anything a user can fix (a missing file, an empty corpus, an
unknown preset, a corrupt checkpoint). The CLI catches it, prints its message as one line and exits with 2,
so users never see a traceback for their own mistakes; an OSError the user can act on (no space, no
permission, a read-only folder) becomes one such line too (`user_os_error`). Bugs stay ordinary exceptions.
The checks of the paths a job reads and writes, which raise it, are in files.py.
"""

import argparse
import errno
import os
import re
import shutil
import sys
from collections.abc import Callable
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


# What the user can do about an OSError their machine caused, by errno. Any other errno is a bug's.
_CAUSES = {
    errno.ENOSPC: "no space left on the device; free some space or choose another place",
    errno.EDQUOT: "disk quota exceeded; free some space or choose another place",
    errno.EFBIG: "the file is too large for this file system; choose another place",
    errno.EACCES: "permission denied; check its permissions or choose another place",
    errno.EPERM: "operation not permitted; check its permissions or choose another place",
    errno.EROFS: "the file system is read-only; choose another place",
    errno.EISDIR: "it is a directory, where a file is expected",
    errno.ENOTDIR: "a part of the path is a file, where a folder is expected",
    errno.ENOENT: "no such file or directory",
    errno.ENAMETOOLONG: "the name is too long",
    errno.ELOOP: "too many levels of symbolic links",
}


def os_cause(error: BaseException) -> OSError | None:
    """The OSError behind `error`: itself, one it was raised from or during (torch.save's RuntimeError while
    writing to a file object), or the one a Rust library names as "(os error N)" (safetensors, tokenizers)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"\(os error (\d+)\)", str(error))
    return OSError(int(found.group(1)), os.strerror(int(found.group(1)))) if found else None


def user_os_error(
    error: BaseException, path: str | Path | None = None, own: bool = False
) -> NanobertError | None:
    """A one-line NanobertError naming the path and the cause, for an OSError a user can fix (no space, no
    permission, a read-only folder, a folder where a file goes, a missing file) behind `error`; else None
    (a bug keeps its traceback). `path` is the file the caller worked on, named when the error names none,
    or always with `own` (the error names a temporary file the user never asked for)."""
    cause = os_cause(error)
    if cause is None or cause.errno not in _CAUSES:
        return None
    named = path if own or cause.filename is None else cause.filename
    where = f"{os.fsdecode(named)}: " if named is not None else ""
    return NanobertError(f"{where}{_CAUSES[cause.errno]}")


def raise_user_os_error(error: BaseException, path: str | Path, kept: str = "", own: bool = False) -> None:
    """Raise `user_os_error(error, path, own)` from None, with `kept` (what is unchanged) added, if it is
    one. A short write that names no errno (NumPy's "N requested and M written") on a full file system is
    the full disk's."""
    if isinstance(error, OSError) and error.errno is None and _full(Path(path)):
        error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    user = user_os_error(error, path, own)
    if user is not None:
        raise NanobertError(f"{user}{f' ({kept})' if kept else ''}") from None


def _full(path: Path) -> bool:
    """Whether the file system that holds `path` (or its nearest existing folder) has no room left."""
    folder = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    try:
        return shutil.disk_usage(folder).free < (1 << 16)
    except OSError:
        return False


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
    except OSError as e:  # no space, no permission, ... wherever it happened; a bug's errno keeps its trace
        user = user_os_error(e)
        if user is None:
            raise
        print(f"{prog}: error: {user}", file=sys.stderr)
        return 2
