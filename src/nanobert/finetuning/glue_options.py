"""What a `nanobert glue` call's results belong to, and whether its output folder may hold them.

OUT/glue-options.json records the options every kept result was made with: the checkpoint, named by a digest
of its contents (config.json and the weights), so that a moved or copied checkpoint keeps its runs and other
weights never reuse them; the data, the cap and the fine-tuning settings. A later call keeps a run only when
its options are the same, and refuses an OUT made with others unless asked to replace its runs. Options from
before the digest (the checkpoint's path, and its weights' size and time) still count as the same where they
name the same checkpoint, unmoved and untouched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nanobert.checkpoints.checkpoint import CONFIG_NAME, WEIGHTS_NAME
from nanobert.config import FinetuneConfig
from nanobert.errors import NanobertError
from nanobert.files import check_output_folder, within
from nanobert.finetuning.glue_data import HUB

OPTIONS_NAME = "glue-options.json"
# How glue-options.json named the checkpoint before its digest: its path, and its weights' size and time.
LEGACY_KEYS = ("checkpoint", "checkpoint_weights")


def default_out(checkpoint: str | Path) -> Path:
    """runs/glue-NAME: NAME is the run's folder for RUN/best or RUN/last (runs/x/best and a/b/x/last give
    runs/glue-x), else the checkpoint folder's own name (imported/ gives runs/glue-imported); the same for
    the same checkpoint, so that the same command run again finds its earlier runs. The path is made
    absolute without following links, so that a best/ that links elsewhere still names its run."""
    path = Path(os.path.abspath(checkpoint))  # "." and ".." resolved by name; links kept
    name = path.parent.name if path.name in ("best", "last") else path.name
    return Path("runs") / f"glue-{name or 'checkpoint'}"


def checkpoint_digest(checkpoint: Path) -> str:
    """The sha1 of the checkpoint's config.json and weights, each with its name and size: the same for a
    moved or copied checkpoint, another for other weights or settings. Read once per call."""
    digest = hashlib.sha1()
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        path = checkpoint / name
        if path.is_file():
            digest.update(f"{name} {path.stat().st_size}\n".encode())
            with open(path, "rb") as f:
                for block in iter(lambda f=f: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def legacy_key(checkpoint: Path) -> dict[str, Any]:
    """The checkpoint as glue-options.json named it before the digest (`LEGACY_KEYS`), to read old runs."""
    weights = checkpoint / WEIGHTS_NAME
    stat = weights.stat() if weights.is_file() else None
    key = {
        "checkpoint": str(checkpoint.resolve()),
        "checkpoint_weights": [stat.st_size, stat.st_mtime_ns] if stat else None,
    }
    return json.loads(json.dumps(key))


def upgraded(recorded: Any, options: dict[str, Any], legacy: dict[str, Any]) -> Any:
    """Options an earlier call recorded, where their old checkpoint key (`LEGACY_KEYS`) is `legacy` (this
    call's checkpoint, still where it was and unchanged), with the digest of `options` in its place: runs
    made before the digest are kept. Other options as they are."""
    if not isinstance(recorded, dict) or any(recorded.get(k) != legacy.get(k) for k in LEGACY_KEYS):
        return recorded
    rest = {k: v for k, v in recorded.items() if k not in LEGACY_KEYS}
    return {"checkpoint_sha1": options["checkpoint_sha1"], **rest}


def run_options(checkpoint, data, max_train_examples: int | None, cfg: FinetuneConfig) -> dict[str, Any]:
    """What a run's result depends on besides its task, init and seed: the checkpoint (the digest of its
    contents, not its path: a moved or copied checkpoint keeps its runs), the data, the cap and the
    fine-tuning settings. As JSON reads it back."""
    options = {
        "checkpoint_sha1": checkpoint_digest(Path(checkpoint)),
        "data": str(Path(data).resolve()) if data is not None else f"the hub's {HUB}",
        "max_train_examples": max_train_examples,
        "finetune": {k: v for k, v in dataclasses.asdict(cfg).items() if k != "seed"},
    }
    return json.loads(json.dumps(options))


def check_out(out: Path, options: dict, legacy: dict, overwrite: bool, inputs: tuple[Path, ...]) -> None:
    """`out` may hold this call's runs: a new or empty folder, or one that holds a glue call's runs made with
    the same `options` (or, with `overwrite`, with others: they are replaced as their turn comes); never a
    folder of other files, nor one inside an input or holding one. `legacy`: as for `upgraded`."""
    for source in inputs:
        if within(out, source) or within(source, out):
            relation = "lies inside" if within(out, source) else "holds"
            raise NanobertError(f"output {out} {relation} the input {source}; choose another --out")
    check_output_folder(out, OPTIONS_NAME)
    if not out.is_dir() or not any(not p.name.startswith(".") for p in out.iterdir()):
        return
    try:
        earlier = json.loads((out / OPTIONS_NAME).read_text())
    except (OSError, ValueError):
        raise NanobertError(
            f"{out} already exists and holds other files, not the runs of nanobert glue; choose another "
            "--out (a new or empty folder)"
        ) from None
    changed = differences(upgraded(earlier, options, legacy), options)
    if changed and not overwrite:
        raise NanobertError(
            f"{out} holds nanobert glue runs made with other options ({', '.join(changed)}); pass "
            "--overwrite to replace them, or choose another --out"
        )


def differences(earlier: Any, now: dict[str, Any], prefix: str = "") -> list[str]:
    """The options (finetune's fields as finetune.NAME) whose values differ."""
    if not isinstance(earlier, dict):
        return ["all"]
    changed = []
    for key in sorted(set(earlier) | set(now)):
        a, b = earlier.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            changed += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            changed.append(f"{prefix}{key}")
    return changed


__all__ = [
    "OPTIONS_NAME",
    "check_out",
    "checkpoint_digest",
    "default_out",
    "differences",
    "legacy_key",
    "run_options",
    "upgraded",
]
