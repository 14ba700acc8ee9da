"""The GLUE tasks' records on tiny folders the tests write in each task's original layout: the nine
layouts, the names, a malformed line, the hub's rows written in the same layouts."""

import random

import pytest
from helpers import WORDS

from nanobert.data.labelled import read_texts
from nanobert.data.tables import read_table
from nanobert.errors import NanobertError
from nanobert.finetuning.glue_data import check_task, hub_rows, local_tasks
from nanobert.finetuning.glue_tasks import GLUE_TASKS, choose_tasks

# ----------------------------------------------------------------------------------------------------------
# Each task's files as GLUE distributes them: (train/dev header or None, test header, BOM), written here from
# the original files' first lines, independently of the records in glue_tasks.py.

MNLI_HEAD = "index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
MNLI_HEAD += "sentence2_parse sentence1 sentence2"
STSB_HEAD = "index genre filename year old_index source1 source2 sentence1 sentence2"
LAYOUTS = {
    "cola": (None, "index sentence"),
    "sst2": ("sentence label", "index sentence"),
    "mrpc": ("Quality|#1 ID|#2 ID|#1 String|#2 String", "index|#1 ID|#2 ID|#1 String|#2 String"),
    "stsb": (STSB_HEAD + " score", STSB_HEAD),
    "qqp": ("id qid1 qid2 question1 question2 is_duplicate", "id question1 question2"),
    "mnli": (MNLI_HEAD + " label1 gold_label", MNLI_HEAD),
    "qnli": ("index question sentence label", "index question sentence"),
    "rte": ("index sentence1 sentence2 label", "index sentence1 sentence2"),
    "wnli": ("index sentence1 sentence2 label", "index sentence1 sentence2"),
}
FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI"}


def names(header: str) -> list[str]:
    return header.split("|") if "|" in header else header.split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) + " ."


def example(task: str, rng: random.Random) -> dict:
    """One example: its texts and its label as the task's files write it."""
    labels = {"mnli": ["entailment", "neutral", "contradiction"], "qnli": ["entailment", "not_entailment"]}
    labels["rte"] = labels["qnli"]
    label = f"{rng.uniform(0, 5):.3f}" if task == "stsb" else rng.choice(labels.get(task, ["0", "1"]))
    return {"a": sentence(rng), "b": sentence(rng), "label": label}


def original_row(task: str, columns: list[str], ex: dict, i: int) -> list[str]:
    """A row under the original header: the texts and label where the task keeps them, filler elsewhere."""
    if not columns:  # CoLA's train and dev: no header; source, label, original label (* if 0), sentence
        return ["gj04", ex["label"], "*" if ex["label"] == "0" else "", ex["a"]]
    first = {
        "cola": "sentence",
        "sst2": "sentence",
        "mrpc": "#1 String",
        "qqp": "question1",
        "qnli": "question",
    }.get(task, "sentence1")
    second = {"mrpc": "#2 String", "qqp": "question2", "qnli": "sentence"}.get(task, "sentence2")
    label = {"mrpc": "Quality", "stsb": "score", "qqp": "is_duplicate", "mnli": "gold_label"}.get(
        task, "label"
    )
    cells = {first: ex["a"], second: ex["b"], label: ex["label"], "label1": ex["label"], "index": str(i)}
    cells["id"] = str(i)
    return [cells.get(c, f"x{i}") for c in columns]


def write_original(
    folder, task: str, n: int = 24, seed: int = 0, test_rows: int = 5
) -> dict[str, list[dict]]:
    """The task's train, dev(s) and test files in GLUE's layout under `folder`; returns the examples."""
    head, test_head = LAYOUTS[task]
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    devs = ["dev_matched", "dev_mismatched"] if task == "mnli" else ["dev"]
    tests = ["test_matched", "test_mismatched"] if task == "mnli" else ["test"]
    written = {}
    for stem in ["train", *devs, *tests]:
        labelled = stem not in tests
        columns = names(head) if labelled and head else names(test_head) if not labelled else None
        if task == "mnli" and stem.startswith("dev"):
            columns = names(MNLI_HEAD + " label1 label2 label3 label4 label5 gold_label")
        examples = [example(task, rng) for _ in range(n if stem == "train" else max(6, n // 3))]
        examples = examples if labelled else examples[:test_rows]
        rows = [original_row(task, columns or [], ex, i) for i, ex in enumerate(examples)]
        lines = ([columns] if columns else []) + rows
        bom = "\ufeff" if task == "mrpc" and labelled else ""  # MRPC's train and dev files open with one
        (folder / f"{stem}.tsv").write_text(
            bom + "".join("\t".join(r) + "\n" for r in lines), encoding="utf-8"
        )
        written[stem] = examples
    return written


# ----------------------------------------------------------------------------------------------------------
# The nine layouts


@pytest.mark.parametrize("name", list(GLUE_TASKS))
def test_each_task_reads_its_original_layout(tmp_path, name):
    task = GLUE_TASKS[name]
    written = write_original(tmp_path / FOLDERS.get(name, name), name)
    (files,), skipped = local_tasks(tmp_path, [task])
    assert skipped == {}
    files = check_task(files)
    assert files.rows == files.full_rows == 24
    assert [p.name for p in files.devs] == [f"{f.stem}.tsv" for f in task.devs]
    spec = task.spec()
    for stem, path in [
        ("train", files.train),
        *((f.stem, p) for f, p in zip(task.devs, files.devs, strict=True)),
    ]:
        table = read_table(path, "tsv", header=not spec.headerless)
        assert read_texts(table, spec.text_col) == [ex["a"] for ex in written[stem]]
        if spec.text_pair_col is not None:
            assert read_texts(table, spec.text_pair_col) == [ex["b"] for ex in written[stem]]
        assert [v.strip() for v in table.column(spec.label_col)] == [ex["label"] for ex in written[stem]]
    for file, path in zip(task.tests, files.tests, strict=True):
        text, pair, index = task.test
        table = read_table(path, "tsv")
        assert read_texts(table, text) == [ex["a"] for ex in written[file.stem]]
        assert table.column(index) == [str(i) for i in range(5)]
        if pair is not None:
            assert read_texts(table, pair) == [ex["b"] for ex in written[file.stem]]


def test_tasks_are_named_as_glue_spells_them():
    assert [t.name for t in choose_tasks(["SST-2", "sts-b", "CoLA", "sst2"])] == ["cola", "sst2", "stsb"]
    with pytest.raises(NanobertError, match="unknown GLUE task 'sst3'; the tasks are: cola, sst2"):
        choose_tasks(["sst3"])
    assert [t.title for t in choose_tasks(None)] == "CoLA SST-2 MRPC STS-B QQP MNLI QNLI RTE WNLI".split()


def test_a_malformed_line_names_the_task_the_file_and_the_line(tmp_path):
    write_original(tmp_path / "RTE", "rte")
    path = tmp_path / "RTE" / "dev.tsv"
    lines = path.read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0] + "\tentailed"
    path.write_text("\n".join(lines) + "\n")
    (files,), _ = local_tasks(tmp_path, [GLUE_TASKS["rte"]])
    with pytest.raises(NanobertError, match=r"^RTE: line 4 of .*dev.tsv: label 'entailed' is not one of"):
        check_task(files)


def test_hub_rows_are_the_tasks_own_layout():
    rows = [{"sentence": "a b .", "label": 1, "idx": 0}, {"sentence": "c\td .", "label": 0, "idx": 1}]
    assert hub_rows(GLUE_TASKS["sst2"], rows, True) == [["sentence", "label"], ["a b .", "1"], ["c d .", "0"]]
    assert hub_rows(GLUE_TASKS["sst2"], rows, False) == [
        ["index", "sentence"],
        ["0", "a b ."],
        ["1", "c d ."],
    ]
    scores = [{"sentence1": "a", "sentence2": "b", "label": 3.8, "idx": 7}]
    assert hub_rows(GLUE_TASKS["stsb"], scores, True) == [
        ["sentence1", "sentence2", "score"],
        ["a", "b", "3.8"],
    ]
