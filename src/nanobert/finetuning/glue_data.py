"""Where `nanobert glue` finds each task's files, and the checks they pass before any fine-tuning starts.

`local_tasks` finds the tasks in a `glue_data/`-style folder (the files as GLUE distributes them) and names
those whose files are missing; `hub_tasks` writes the Hugging Face hub's `nyu-mll/glue` configurations into
files of the same layouts, so that both sources reach `finetune` as the same files. `check_task` reads every
file of a task first (columns, texts, labels), so that a malformed line stops the command at once, naming
the task, the file and the line, not after hours of the other tasks. `cap_train` keeps a seeded random part
of a large training set (`--max-train-examples`).
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nanobert.data.corpus import hub_reachable, load_hf_dataset
from nanobert.data.labelled import read_texts
from nanobert.data.tables import Column, Table, read_table, write_table
from nanobert.errors import NanobertError
from nanobert.files import atomic_file
from nanobert.finetuning.glue_tasks import GlueTask, task_folder

HUB = "nyu-mll/glue"
CAP_SEED = 0  # the sample of a capped training set, the same for every seed and init: their runs compare


@dataclass(frozen=True)
class TaskFiles:
    """A task's files as `finetune` reads them, and the size of its training set."""

    task: GlueTask
    train: Path
    devs: tuple[Path, ...]  # one per `task.devs`
    tests: tuple[Path | None, ...]  # one per `task.tests`; None where the file is missing (no predictions)
    rows: int = 0  # training examples used
    full_rows: int = 0  # training examples in the task's own file


def local_tasks(data: str | Path, tasks: list[GlueTask]) -> tuple[list[TaskFiles], dict[str, str]]:
    """The `tasks` whose train and dev files `data` holds, and {title: why} for those skipped. A folder
    that holds none of them is a NanobertError."""
    data = Path(data)
    if not data.is_dir():
        raise NanobertError(
            f"--data {data}: no such folder; give a folder of GLUE tasks such as glue_data/ (CoLA/train.tsv, "
            "SST-2/dev.tsv, ...), or leave --data out to take them from the Hugging Face hub"
        )
    found, skipped = [], {}
    for task in tasks:
        folder = task_folder(data, task)
        missing = [] if folder is None else [n for n in task.file_names() if not (folder / n).is_file()]
        if folder is None or missing:
            skipped[task.title] = f"no {', '.join(missing)} in {folder.name}/" if missing else "no folder"
            continue
        devs = tuple(folder / f"{f.stem}.tsv" for f in task.devs)
        tests = tuple(p if p.is_file() else None for p in (f.path(data, folder) for f in task.tests))
        found.append(TaskFiles(task, folder / "train.tsv", devs, tests))
    if not found:
        asked = ", ".join(task.title for task in tasks)
        raise NanobertError(
            f"{data} holds none of the GLUE tasks asked for ({asked}): each needs a folder such as "
            f"{tasks[0].title}/ or {tasks[0].name}/ with {' and '.join(tasks[0].file_names())}"
        )
    return found, skipped


def check_task(files: TaskFiles) -> TaskFiles:
    """Read every file of a task and check its columns, texts and labels; `files` with its training rows
    counted. A problem is a NanobertError that names the task, and the file and line where it is."""
    try:
        rows = _check_labelled(files.task, files.train)
        for path in files.devs:
            _check_labelled(files.task, path)
        for path in files.tests:
            if path is not None:
                _check_test(files.task, path)
    except NanobertError as e:
        raise NanobertError(f"{files.task.title}: {e}") from None
    return dataclasses.replace(files, rows=rows, full_rows=rows)


def _read(path: Path, columns: list[Column], header: bool) -> Table:
    """The table, with every named column present and every text column filled."""
    table = read_table(path, "tsv", header=header)
    for col in columns:
        table.column(col)
    return table


def _check_labelled(task: GlueTask, path: Path) -> int:
    spec = task.spec()
    texts = [c for c in (spec.text_col, spec.text_pair_col) if c is not None]
    table = _read(path, [*texts, spec.label_col], header=not spec.headerless)
    for col in texts:
        read_texts(table, col)
    for value, line in zip(table.column(spec.label_col), table.line_numbers, strict=True):
        problem = task.label_problem(value)
        if problem:
            raise NanobertError(f"line {line} of {path}: label {value!r} {problem}")
    return len(table)


def _check_test(task: GlueTask, path: Path) -> None:
    text, pair, index = task.test
    table = _read(path, [c for c in (text, pair, index) if c is not None], header=True)
    for col in (text, pair, index):
        if col is not None:
            read_texts(table, col)


def cap_train(files: TaskFiles, cap: int | None, folder: Path) -> TaskFiles:
    """A large task's training set cut to a seeded random `cap` of its rows (in their order), written to
    FOLDER/train-CAP.tsv; other tasks, and sets no larger than `cap`, as they are."""
    if cap is None or not files.task.large or files.rows <= cap:
        return files
    table = read_table(files.train, "tsv", header=not files.task.spec().headerless)
    keep = sorted(random.Random(CAP_SEED).sample(range(len(table)), cap))
    part = Table(
        table.path,
        table.format,
        table.header,
        [table.rows[i] for i in keep],
        [table.line_numbers[i] for i in keep],
    )
    path = folder / f"train-{cap}.tsv"
    write_table(part, {}, path)
    return dataclasses.replace(files, train=path, rows=cap)


# ----------------------------------------------------------------------------------------------------------
# The hub's copy, written in the tasks' own layouts


def hub_tasks(tasks: list[GlueTask], folder: Path, say: Callable[[str], None]) -> list[TaskFiles]:
    """Each task's splits from the hub's `nyu-mll/glue` (or the local `datasets` cache when the hub does not
    answer), written once to FOLDER/TASK/ in the task's GLUE layout; a later call reads them from there. A
    file of another configuration (the diagnostic set `ax`, in MNLI's) is written in the task's folder too."""
    online = None
    found = []
    for task in tasks:
        task_dir = folder / task.name
        files = [("train", task.name, "train", True), *((f.stem, task.name, f.hub, True) for f in task.devs)]
        files += [(f.stem, f.config or task.name, f.hub, False) for f in task.tests]
        for stem, config, split, labelled in files:
            path = task_dir / f"{stem}.tsv"
            if path.is_file():
                continue
            if online is None:
                online = hub_reachable()  # once, not once a split
            what = task.title if config == task.name else config
            say(f"nanobert: glue: {what} {split} from the hub's {HUB}")
            advice = "pass --data DIR with the GLUE files (glue_data/: CoLA/train.tsv, SST-2/dev.tsv, ...)"
            rows = load_hf_dataset(HUB, config, split, advice, online)
            _write_lines(path, hub_rows(task, rows, labelled))
        paths = [task_dir / f"{stem}.tsv" for stem, _, _, _ in files]
        found.append(
            TaskFiles(
                task, paths[0], tuple(paths[1 : 1 + len(task.devs)]), tuple(paths[1 + len(task.devs) :])
            )
        )
    return found


def hub_rows(task: GlueTask, rows, labelled: bool) -> list[list[str]]:
    """A hub split (a `datasets.Dataset`, or a list of dicts) as the rows of the task's GLUE file: the train
    and dev layout with labels as the files write them, or the test layout with the hub's `idx`."""
    column = (
        (lambda name: rows[name]) if hasattr(rows, "column_names") else (lambda name: [r[name] for r in rows])
    )
    hub_text, hub_pair = task.hub
    text, pair, index = (task.text, task.pair, None) if labelled else task.test
    cells = {} if labelled else {index: column("idx")}
    cells[text] = column(hub_text)
    if pair is not None:
        cells[pair] = column(hub_pair)
    if labelled:
        cells[task.label] = [task.hub_label(v) for v in column("label")]
    return _layout({col: [_cell(v) for v in values] for col, values in cells.items()})


def _cell(value) -> str:
    """A value as a TSV cell: GLUE's TSV has no quoting, so tabs and line breaks become spaces."""
    return re.sub(r"[\t\r\n]", " ", str(value))


def _layout(cells: dict[Column, list[str]]) -> list[list[str]]:
    """Columns as rows: under a header of their names, or (0-based indexes: a headerless file) each cell at
    its index, the columns between left empty."""
    columns = list(cells)
    count = len(cells[columns[0]])
    if all(isinstance(c, str) for c in columns):
        return [columns] + [[cells[c][i] for c in columns] for i in range(count)]
    width = max(columns) + 1
    rows = [[""] * width for _ in range(count)]
    for col, values in cells.items():
        for row, value in zip(rows, values, strict=True):
            row[col] = value
    return rows


def _write_lines(path: Path, rows: list[list[str]]) -> None:
    with atomic_file(path, "w", encoding="utf-8", newline="") as f:  # whole, or not at all
        f.writelines("\t".join(row) + "\n" for row in rows)


__all__ = ["HUB", "TaskFiles", "cap_train", "check_task", "hub_rows", "hub_tasks", "local_tasks"]
