"""The one exception type for problems with the user's input.

Library functions raise `NanobertError` for anything a user can fix (a missing file, an empty corpus, an
unknown preset, a corrupt checkpoint). The CLI catches it, prints its message as one line and exits with 2,
so users never see a traceback for their own mistakes. Bugs stay ordinary exceptions.
"""

import argparse
import errno
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO


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


@contextmanager
def atomic_file(path: str | Path, mode: str = "w", **open_args) -> Iterator[IO]:
    """Open a hidden temporary file beside `path` for writing; when the block ends, make it durable and
    rename it onto `path` (os.replace), so that `path` holds the old content or the new, never a part.

    The file counterpart of checkpoint.write_atomically's directories. If the block fails, the temporary
    file goes and the old `path` stays; an OSError the user can fix becomes a one-line NanobertError.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    kept = f"{path} is unchanged" if path.exists() else ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, mode, **open_args) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:  # the cause first: a full disk is told by the space the part still takes
            raise_user_os_error(e, path, kept, own=True)
        finally:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)
        raise


def check_room(folder: str | Path, need: int, what: str) -> None:
    """NanobertError unless `folder` (or, before it exists, the nearest folder above it) takes a new file and
    has about `need` bytes free for `what`: checked before a job deletes or replaces anything, so that a
    read-only or full place fails at the start, not after hours of work with the old output gone."""
    folder = Path(folder)
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), Path("."))
    probe = existing / f".nanobert-probe-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise_user_os_error(e, existing, own=True)
        raise
    free = shutil.disk_usage(existing).free
    if free < need:
        raise NanobertError(
            f"{existing}: only {free / 1e6:.1f} MB free, and the {what} needs about {need / 1e6:.1f} MB; "
            "free some space or choose another place (nothing was changed)"
        )


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
