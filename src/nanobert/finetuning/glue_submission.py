"""The GLUE server's files: the test sets labelled by one fine-tuned model per task, and what ties each file
to the model that wrote it.

`nanobert glue` labels each task's test files with the first seed's pretrained run (OUT/submission/TASK.tsv:
index and prediction; the MNLI model's also AX.tsv, the diagnostic set; STS-B's scores within the server's
range). Several calls may write into one folder, with other tasks, seeds or (with --overwrite) another
checkpoint, so OUT/submission-sources.json names, for each file, the run result (glue-result.json) whose
model labelled it and a digest of that result: a file counts as part of the submission only while its result
is still there, unchanged, and belongs to the call at hand (`current_files`); any other is removed, so the
folder never holds a prediction the report's note does not name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from nanobert.checkpoints.checkpoint import load_finetuned
from nanobert.data.labelled import read_texts
from nanobert.data.tables import read_table
from nanobert.device import resolve_device
from nanobert.files import atomic_file
from nanobert.finetuning.glue_data import TaskFiles
from nanobert.use.classifier import classify

SUBMISSION = "submission"  # OUT/submission/: the files the GLUE server takes
SOURCES = "submission-sources.json"  # OUT/: which run's model wrote each of them


def digest(path: Path) -> str | None:
    """The sha1 of a file's bytes, or None when it cannot be read."""
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()
    except OSError:
        return None


def read_sources(out: Path) -> dict[str, dict]:
    """OUT/submission-sources.json: a file's name -> {"result": its run's result, relative to OUT, "sha1"}."""
    try:
        sources = json.loads((out / SOURCES).read_text())
    except (OSError, ValueError):
        return {}
    return sources if isinstance(sources, dict) else {}


def write_sources(out: Path, sources: dict[str, dict]) -> None:
    with atomic_file(out / SOURCES, "w", encoding="utf-8") as f:
        f.write(json.dumps(sources, indent=1, sort_keys=True) + "\n")


def write_predictions(files: TaskFiles, result: Path, out: Path, device: str, batch_size: int) -> None:
    """The task's test files labelled by the model of the run whose `result` (glue-result.json) is given,
    into OUT/submission/; a file already written from this very result is kept. A test file that is missing
    writes nothing (the report's notice names what the server still needs)."""
    task, sources = files.task, read_sources(out)
    made_from = {"result": str(result.relative_to(out)), "sha1": digest(result)}
    loaded = None
    for file, path in zip(task.tests, files.tests, strict=True):
        name = task.server_name(file)
        target = out / SUBMISSION / name
        if path is None or made_from["sha1"] is None:
            continue
        if target.is_file() and sources.get(name) == made_from:
            continue
        loaded = loaded or load_finetuned(result.parent, resolve_device(device))
        model, tokenizer, config = loaded
        text, pair, index = task.test
        table = read_table(path, "tsv")
        pairs = read_texts(table, pair) if pair is not None else None
        outputs = classify(model, tokenizer, config, read_texts(table, text), pairs, batch_size)
        lines = [
            f"{i}\t{task.prediction(o, config['labels'])}\n"
            for i, o in zip(table.column(index), outputs, strict=True)
        ]
        with atomic_file(target, "w", encoding="utf-8") as f:
            f.writelines(["index\tprediction\n", *lines])
        sources[name] = made_from
        write_sources(out, sources)


def current_files(out: Path, belongs: Callable[[Path], bool]) -> list[str]:
    """The names of OUT/submission/'s .tsv files that belong to the call at hand: each written from a result
    that is still there, unchanged, and that `belongs` to the call (its checkpoint, options and first seed).
    The others (another checkpoint's or seed's, a result trained again since, a file of unknown origin) are
    removed, with their entries."""
    sources, present = read_sources(out), []
    for path in sorted((out / SUBMISSION).glob("*.tsv")):
        source = sources.get(path.name)
        result = out / source["result"] if isinstance(source, dict) and "result" in source else None
        if result is not None and digest(result) == source.get("sha1") and belongs(result):
            present.append(path.name)
            continue
        path.unlink()
        sources.pop(path.name, None)
    if set(sources) != set(present):
        write_sources(out, {name: sources[name] for name in present})
    return present


__all__ = ["SOURCES", "SUBMISSION", "current_files", "read_sources", "write_predictions"]
