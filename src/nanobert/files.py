"""Every file and folder a job writes: checked before the work starts, written whole.

A path the user names is checked before a job spends time on it (`check_input_file`, `check_output_file`,
`check_output_dir`: no input overwritten, no folder wiped by a mistyped --out, `check_room`: space and
permission), and what a job writes lands whole or not at all: a file through a temporary beside it and a
rename (`atomic_file`), a folder (a checkpoint, a prepared corpus) through a temporary folder swapped in by
two renames (`write_atomically`). Replacing an existing folder renames the old one to `.NAME.old-PID`
first; if the process dies between the two renames, the next save or read finds the writer's `.NAME.old-PID`
and restores it (`recover`), so an interrupted save never destroys the previous good one. The hidden,
PID-stamped names are the writer's own: a user's `NAME.old` is never touched, and a temporary folder left by
a process killed mid-write is removed by the next save of the same folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from nanobert.errors import NanobertError, raise_user_os_error


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


@contextmanager
def atomic_file(path: str | Path, mode: str = "w", **open_args) -> Iterator[IO]:
    """Open a hidden temporary file beside `path` for writing; when the block ends, make it durable and
    rename it onto `path` (os.replace), so that `path` holds the old content or the new, never a part.

    The file counterpart of `write_atomically`'s folders. If the block fails, the temporary
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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _stamped(directory: Path, tag: str) -> list[tuple[Path, int]]:
    """The `.NAME.TAG-PID` siblings of `directory` (temporaries, set-aside old checkpoints), each with its
    writer's PID, newest first. Callers leave those of live writers, this process included, alone."""
    found = []
    for path in directory.parent.glob(f".{directory.name}.{tag}-*"):
        pid = path.name.rsplit("-", 1)[-1]
        try:  # another reader may recover it between the listing and here
            if pid.isdigit():
                found.append((path.stat().st_mtime_ns, path, int(pid)))
        except FileNotFoundError:
            continue
    return [(path, pid) for _, path, pid in sorted(found, reverse=True)]


def being_replaced(directory: Path) -> bool:
    """Whether a live save is between its two renames at `directory` (a dead one's leftover is recovered by
    the next read instead, so it must not make a reader wait forever)."""
    return any(_pid_alive(pid) for _, pid in _stamped(directory, "old"))


def recover(directory: Path, landed: str = "config.json") -> None:
    """Finish or undo a replacement that was interrupted between its two renames: the dead writer's
    `.NAME.old-PID` goes back to NAME if NAME is missing, and is deleted if the new NAME landed (it holds
    `landed`, a checkpoint's config.json). Nothing while its writer still runs (a reader, such as `nanobert
    serve` watching a run, must not race it)."""
    for old, pid in _stamped(directory, "old"):
        if _pid_alive(pid):
            continue
        if (directory / landed).is_file():
            shutil.rmtree(old, ignore_errors=True)  # the new one landed; the old one only awaited deletion
        elif not directory.exists():
            try:
                os.replace(old, directory)
            except OSError:  # another reader put it back first
                pass
        # NAME exists but is no checkpoint: not ours to delete; reading it says so


def remove_stale_temporaries(directory: Path) -> None:
    """Delete `.NAME.tmp-PID` directories whose writer no longer runs (it was killed mid-write)."""
    for stale, pid in _stamped(directory, "tmp"):
        if not _pid_alive(pid):
            shutil.rmtree(stale, ignore_errors=True)


def write_atomically(directory: str | Path, write: Any) -> Path:
    """Call `write(tmp_dir)` to fill a fresh temporary directory, then swap it in at `directory`."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    recover(directory)
    remove_stale_temporaries(directory)
    tmp = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        tmp.mkdir()
        write(tmp)
        for f in tmp.rglob("*"):  # make the bytes durable before the rename publishes them
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
    except BaseException as e:  # a full disk, no permission, an interrupt: the old one stays, the part goes
        kept = f"{directory} is unchanged" if directory.exists() else f"nothing was written to {directory}"
        try:
            raise_user_os_error(e, directory, kept, own=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if directory.exists():
        old = directory.with_name(f".{directory.name}.old-{os.getpid()}")
        if old.exists():  # left by an earlier process that had this PID
            shutil.rmtree(old)
        os.replace(directory, old)
        os.replace(tmp, directory)
        shutil.rmtree(old, ignore_errors=True)  # a reader may have finished the clean-up (`recover`)
    else:
        os.replace(tmp, directory)
    return directory
