"""The nine GLUE tasks, one record each: the layout of each task's files, the hub's names for its columns,
what it is scored on, and what the GLUE server calls its predictions.

GLUE is Wang et al. (2019), "GLUE: A Multi-Task Benchmark and Analysis Platform for Natural Language
Understanding". The file layouts are those of the original `glue_data/` download (the columns that
google-research/bert `run_classifier.py` and transformers' GLUE processors read): CoLA's files have no header
row, MRPC's open with a byte-order mark (`data.tables` drops it), RTE, QNLI and MNLI write their labels as
words, STS-B is a 0-5 score, MNLI has a matched and a mismatched dev (and test) file. GLUE's diagnostic set
(`diagnostic/diagnostic.tsv`, the server's AX) is a test file of MNLI's: the MNLI model labels it. The hub's
column names and label ids are those of the `nyu-mll/glue` dataset's configurations, whose names are the
records' `name`s (the diagnostic set's is `ax`).

`nanobert glue` (`glue.py`) asks a record for all of this and never tests a task's name; a new task is one
more line in `GLUE_TASKS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nanobert.data.labelled import TaskSpec
from nanobert.data.tables import Column
from nanobert.errors import NanobertError
from nanobert.use.metrics import accuracy, confusion_matrix, matthews_corrcoef, pearson, spearman


@dataclass(frozen=True)
class GlueFile:
    """One dev or test file of a task: its name in `glue_data/TASK/` (without .tsv), the hub's split, and a
    `tag` where a task has two ("m" and "mm": MNLI's matched and mismatched), which names its metrics
    (`m_accuracy`) and its GLUE server file (`MNLI-m.tsv`). A file that GLUE keeps apart from its task's own
    (the diagnostic set, which the MNLI model labels) names its own folder, hub configuration and server
    file."""

    stem: str
    hub: str
    tag: str = ""
    folder: str = ""  # its folder in glue_data/ where it is not the task's (diagnostic)
    config: str = ""  # the hub's configuration where it is not the task's (ax)
    server: str = ""  # the server's name for its predictions where it is not the task's (AX.tsv)

    def path(self, data: Path, task_folder: Path) -> Path:
        """Where the file is in a `glue_data/`-style folder `data` whose task folder is `task_folder`."""
        return (data / self.folder if self.folder else task_folder) / f"{self.stem}.tsv"


DEV = (GlueFile("dev", "validation"),)
TEST = (GlueFile("test", "test"),)


@dataclass(frozen=True)
class GlueTask:
    """One GLUE task: where its files are, how they are laid out, how it is scored."""

    name: str  # the hub configuration's name (sst2), and the task's folder under --out
    title: str  # GLUE's own spelling (SST-2): glue_data/'s folder, the table's row, the server file
    text: Column  # the columns of the train and dev files: the first text, the second, the label
    pair: Column | None
    label: Column
    test: tuple[Column, Column | None, Column]  # the test file's columns: text, second text, index
    hub: tuple[str, str | None]  # the hub's names for the text columns (its label column is `label`)
    labels: tuple[str, ...] | None  # the labels as the files write them, in the hub's id order; None: a score
    metrics: tuple[str, ...]  # the dev metrics GLUE reports for the task, in GLUE's order
    select: str | None = None  # the dev metric that picks the best epoch (None: finetune's default)
    positive: str | None = None  # the label whose F1 GLUE reports (paraphrase, duplicate)
    devs: tuple[GlueFile, ...] = DEV  # the first picks the best epoch
    tests: tuple[GlueFile, ...] = TEST
    large: bool = False  # capped by --max-train-examples
    bounds: tuple[float, float] | None = None  # the range the GLUE server takes a score in (STS-B's 0-5)

    def spec(self) -> TaskSpec:
        """The columns `finetune` reads from the train and dev files."""
        task = "regression" if self.labels is None else "classification"
        return TaskSpec(self.text, self.label, self.pair, task=task, format="tsv")

    def key(self, metric: str, file: GlueFile) -> str:
        """A metric's name in the results: `accuracy`, or `m_accuracy` for a tagged file."""
        return f"{file.tag}_{metric}" if file.tag else metric

    def keys(self) -> list[str]:
        """Every metric the task reports, each dev file's in turn."""
        return [self.key(metric, file) for file in self.devs for metric in self.metrics]

    def server_name(self, file: GlueFile) -> str:
        """The GLUE server's name for a test file's predictions: `SST-2.tsv`, `MNLI-mm.tsv`, `AX.tsv`."""
        if file.server:
            return file.server
        return f"{self.title}-{file.tag}.tsv" if file.tag else f"{self.title}.tsv"

    def file_names(self) -> list[str]:
        """The files a task needs in its folder: train and every dev file."""
        return ["train.tsv", *(f"{file.stem}.tsv" for file in self.devs)]

    def label_problem(self, value: str | None) -> str | None:
        """What is wrong with a label cell as read from the task's file, if anything."""
        value = (value or "").strip()
        if self.labels is not None:
            return None if value in self.labels else f"is not one of {', '.join(self.labels)}"
        try:
            score = float(value)
        except ValueError:
            return "is not a number"
        return None if math.isfinite(score) else "is not a finite number"

    def hub_label(self, value: int | float) -> str:
        """A hub label (a class id, or a score) as the task's files write it."""
        return str(float(value)) if self.labels is None else self.labels[int(value)]

    def scores(
        self,
        outputs: np.ndarray,
        targets: np.ndarray,
        labels: list[str] | None,
        file: GlueFile,
        metrics: tuple[str, ...] | list[str] | None = None,
    ) -> dict[str, float]:
        """The task's `metrics` (default: all of them) on one dev file, from a model's outputs (N, labels) and
        the targets (class ids under the model's `labels`, or scores), named by `key`. Each is computed only
        when asked for: a metric `finetune` already gave is never computed a second time."""
        if self.labels is None:
            score = outputs[:, 0]
            how = {"pearson": lambda: pearson(score, targets), "spearman": lambda: spearman(score, targets)}
        else:
            predicted = outputs.argmax(axis=1)
            how = {
                "accuracy": lambda: accuracy(targets, predicted),
                "mcc": lambda: matthews_corrcoef(targets, predicted),
                "f1": lambda: binary_f1(targets, predicted, labels.index(self.positive), len(labels)),
            }
        return {
            self.key(metric, file): how[metric]() for metric in (self.metrics if metrics is None else metrics)
        }

    def prediction(self, output: np.ndarray, labels: list[str] | None) -> str:
        """One test example's prediction as the GLUE server takes it: the label, or the score, clipped to the
        server's range (a regression head can overshoot 0-5)."""
        if labels is not None:
            return labels[int(output.argmax())]
        score = float(output[0])
        if self.bounds is not None:
            score = min(max(score, self.bounds[0]), self.bounds[1])
        return f"{score:.3f}"


def binary_f1(targets: np.ndarray, predicted: np.ndarray, positive: int, classes: int) -> float:
    """F1 of the `positive` class (GLUE's F1 for MRPC and QQP); 0 when it is never true nor predicted."""
    matrix = confusion_matrix(targets, predicted, classes)
    hits = matrix[positive, positive]
    wrong = matrix[:, positive].sum() + matrix[positive, :].sum() - 2 * hits
    return float(2 * hits / (2 * hits + wrong)) if hits + wrong else 0.0


PAIR_TEST = ("sentence1", "sentence2", "index")
ENTAILMENT = ("entailment", "not_entailment")
MNLI_DEVS = (
    GlueFile("dev_matched", "validation_matched", "m"),
    GlueFile("dev_mismatched", "validation_mismatched", "mm"),
)
# The diagnostic set: glue_data/diagnostic/diagnostic.tsv (index, sentence1, sentence2), the hub's `ax` test
# split; MNLI's labels, so the MNLI model labels it for the server's AX.tsv.
DIAGNOSTIC = GlueFile("diagnostic", "test", folder="diagnostic", config="ax", server="AX.tsv")
MNLI_TESTS = (
    GlueFile("test_matched", "test_matched", "m"),
    GlueFile("test_mismatched", "test_mismatched", "mm"),
    DIAGNOSTIC,
)

# The tasks in GLUE's order. CoLA's files have no header: source, label, original label, sentence.
GLUE_TASKS = {
    task.name: task
    for task in (
        GlueTask("cola", "CoLA", 3, None, 1, ("sentence", None, "index"), ("sentence", None), ("0", "1"),
                 ("mcc",), select="mcc"),
        GlueTask("sst2", "SST-2", "sentence", None, "label", ("sentence", None, "index"), ("sentence", None),
                 ("0", "1"), ("accuracy",), large=True),
        GlueTask("mrpc", "MRPC", "#1 String", "#2 String", "Quality", ("#1 String", "#2 String", "index"),
                 ("sentence1", "sentence2"), ("0", "1"), ("f1", "accuracy"), positive="1"),
        GlueTask("stsb", "STS-B", "sentence1", "sentence2", "score", PAIR_TEST, ("sentence1", "sentence2"),
                 None, ("pearson", "spearman"), bounds=(0.0, 5.0)),
        GlueTask("qqp", "QQP", "question1", "question2", "is_duplicate", ("question1", "question2", "id"),
                 ("question1", "question2"), ("0", "1"), ("f1", "accuracy"), positive="1", large=True),
        GlueTask("mnli", "MNLI", "sentence1", "sentence2", "gold_label", PAIR_TEST, ("premise", "hypothesis"),
                 ("entailment", "neutral", "contradiction"), ("accuracy",), devs=MNLI_DEVS, tests=MNLI_TESTS,
                 large=True),
        GlueTask("qnli", "QNLI", "question", "sentence", "label", ("question", "sentence", "index"),
                 ("question", "sentence"), ENTAILMENT, ("accuracy",), large=True),
        GlueTask("rte", "RTE", "sentence1", "sentence2", "label", PAIR_TEST, ("sentence1", "sentence2"),
                 ENTAILMENT, ("accuracy",)),
        GlueTask("wnli", "WNLI", "sentence1", "sentence2", "label", PAIR_TEST, ("sentence1", "sentence2"),
                 ("0", "1"), ("accuracy",)),
    )
}  # fmt: skip


def server_files() -> list[str]:
    """Every file the GLUE server needs in a submission, in GLUE's order (CoLA.tsv ... AX.tsv)."""
    return [task.server_name(file) for task in GLUE_TASKS.values() for file in task.tests]


def normal(name: str) -> str:
    """A task's name as it is looked up: lowercase, without hyphens (SST-2, sst-2 and sst2 are one)."""
    return name.strip().lower().replace("-", "")


def choose_tasks(names: list[str] | None) -> list[GlueTask]:
    """The tasks `names` asks for (all nine for None), in GLUE's order; an unknown name is a NanobertError
    that lists the known ones."""
    if names is None:
        return list(GLUE_TASKS.values())
    unknown = [name for name in names if normal(name) not in GLUE_TASKS]
    if unknown or not names:
        known = ", ".join(GLUE_TASKS)
        what = f"unknown GLUE task {unknown[0]!r}" if unknown else "no GLUE task given"
        raise NanobertError(f"{what}; the tasks are: {known} (GLUE's spellings such as SST-2 work too)")
    asked = {normal(name) for name in names}
    return [task for name, task in GLUE_TASKS.items() if name in asked]


def task_folder(data: Path, task: GlueTask) -> Path | None:
    """The task's folder in a `glue_data/`-style folder (CoLA/, SST-2/, or cola/, sst2/ ...), or None; two
    spellings of one task side by side are a NanobertError."""
    found = sorted(p for p in data.iterdir() if p.is_dir() and normal(p.name) == task.name)
    if len(found) > 1:
        raise NanobertError(
            f"{data} holds {task.title} twice ({', '.join(p.name for p in found)}); keep one of them"
        )
    return found[0] if found else None


__all__ = [
    "GLUE_TASKS",
    "GlueFile",
    "GlueTask",
    "binary_f1",
    "choose_tasks",
    "normal",
    "server_files",
    "task_folder",
]
