"""Item 1's data, staged for the device (`gpu_check.py --stage-data DIR`): the training and held-out texts and
BLiMP cut to a few pairs per paradigm, in one folder the call carries, checked against what a call carries.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from gpu_items import STAGED_BLIMP, STAGED_TEST, STAGED_TRAIN

from nanobert.errors import NanobertError
from nanobert.files import check_input_file
from nanobert.use.blimp import read_blimp_file

# The device cannot see ../shared, so the data travels in the call's `carry`, which takes 64 MiB with the
# working tree (about 2.5 MiB today).
CARRY_ROOM_MIB = 56.0


def check_staged(folder: Path) -> Path:
    """`folder` if it holds what --stage-data writes, else a one-line NanobertError naming what is missing."""
    for name in (STAGED_TRAIN, STAGED_TEST):
        if not (folder / name).is_file():
            raise NanobertError(f"--data-dir {folder}: no {name} there; build the folder with --stage-data")
    if not any((folder / STAGED_BLIMP).glob("*.jsonl")):
        raise NanobertError(
            f"--data-dir {folder}: no {STAGED_BLIMP}/*.jsonl there; build it with --stage-data"
        )
    return folder


def stage_data(folder: Path, train: Path, test: Path, blimp: Path, pairs: int) -> str:
    """Write item 1's data into `folder`: `train` and `test` as train.raw and wiki.test.raw, and each BLiMP
    paradigm of the folder `blimp` cut to its first `pairs` pairs (blimp/*.jsonl; any other .jsonl there is
    removed). Everything is read and checked, and its size against the call's carry, before anything is
    written. Returns the line that says what was written."""
    train, test = check_input_file(train, "--train"), check_input_file(test, "--test")
    paradigms = sorted(blimp.glob("*.jsonl")) if blimp.is_dir() else []
    if not paradigms:
        raise NanobertError(f"--blimp {blimp}: no .jsonl files there; give BLiMP's data/ folder")
    cut = {}
    for path in paradigms:
        read_blimp_file(path, pairs)  # a file that is not BLiMP fails here, before anything is written
        lines = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
        cut[path.name] = "".join(line if line.endswith("\n") else line + "\n" for line in lines[:pairs])
    sizes = {
        STAGED_TRAIN: train.stat().st_size,
        STAGED_TEST: test.stat().st_size,
        STAGED_BLIMP: sum(len(text.encode("utf-8")) for text in cut.values()),
    }
    total = sum(sizes.values()) / 2**20
    if total > CARRY_ROOM_MIB:
        raise NanobertError(
            f"the staged data would be {total:.1f} MiB, over the {CARRY_ROOM_MIB:g} MiB a call carries"
        )
    (folder / STAGED_BLIMP).mkdir(parents=True, exist_ok=True)
    for stale in (folder / STAGED_BLIMP).glob("*.jsonl"):
        stale.unlink()
    shutil.copyfile(train, folder / STAGED_TRAIN)
    shutil.copyfile(test, folder / STAGED_TEST)
    for name, text in cut.items():
        (folder / STAGED_BLIMP / name).write_text(text, encoding="utf-8")
    parts = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in sizes.items())
    return (
        f"gpu_check: staged {folder}: {parts} ({len(cut)} paradigms, at most {pairs} pairs each); "
        f"{total:.1f} MiB to carry (name {folder} in the call's carry)"
    )


__all__ = ["CARRY_ROOM_MIB", "check_staged", "stage_data"]
