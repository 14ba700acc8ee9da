"""`nanobert glue` on tiny GLUE folders the tests write in each task's original layout: the nine layouts, the
table and its files, the control, seeds, skipped tasks, the submission (AX.tsv, STS-B's range, the notice
while it is incomplete), resuming (by the checkpoint's contents), the one-line errors, the hub's path offline,
the help, and the figures `nanobert finetune` gives for the same run."""

import csv
import json
import os
import random
import re
import shutil
import statistics
from pathlib import Path

import pytest
from helpers import WORDS, train_tiny_checkpoint
from test_finetune import assert_one_line_error, run_cli

from nanobert.cli import main
from nanobert.data.labelled import read_texts
from nanobert.data.tables import read_table
from nanobert.errors import NanobertError
from nanobert.finetuning import glue as glue_module
from nanobert.finetuning.glue import glue
from nanobert.finetuning.glue_data import check_task, hub_rows, local_tasks
from nanobert.finetuning.glue_options import default_out
from nanobert.finetuning.glue_report import NOTICE, build_report, write_report
from nanobert.finetuning.glue_tasks import GLUE_TASKS, choose_tasks, server_files

pytestmark = pytest.mark.usefixtures("one_thread")  # conftest: tiny models train fastest on one thread

QUICK = ["--epochs", "1", "--batch-size", "8", "--device", "cpu", "--precision", "fp32", "--quiet"]
QUICK_CFG = dict(epochs=1, batch_size=8, device="cpu", precision="fp32")

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


def write_diagnostic(root, n: int = 5) -> list[dict]:
    """GLUE's diagnostic set as glue_data/ holds it: diagnostic/diagnostic.tsv (index, sentence1 and 2)."""
    rng = random.Random(7)
    examples = [example("mnli", rng) for _ in range(n)]
    (root / "diagnostic").mkdir(parents=True, exist_ok=True)
    rows = [["index", "sentence1", "sentence2"]] + [
        [str(i), ex["a"], ex["b"]] for i, ex in enumerate(examples)
    ]
    (root / "diagnostic" / "diagnostic.tsv").write_text("".join("\t".join(r) + "\n" for r in rows))
    return examples


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return train_tiny_checkpoint(tmp_path_factory.mktemp("pre"), steps=3)


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
    if name == "mnli":  # the diagnostic set, beside the tasks' folders: none yet, so no AX.tsv
        assert files.tests[-1] is None and task.server_name(task.tests[-1]) == "AX.tsv"
        written["diagnostic"] = write_diagnostic(tmp_path)
        (files,), _ = local_tasks(tmp_path, [task])
        files = check_task(files)
        assert files.tests[-1] == tmp_path / "diagnostic" / "diagnostic.tsv"
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


# ----------------------------------------------------------------------------------------------------------
# One call with the control and two seeds: the table and its files


@pytest.fixture(scope="module")
def glue_data(tmp_path_factory):
    """CoLA (no header), MRPC (BOM, F1), STS-B (a score) and MNLI (two dev and test files, and the
    diagnostic set), and SST-2 large enough to be capped; the other four tasks missing."""
    root = tmp_path_factory.mktemp("glue_data")
    for name in ("cola", "mrpc", "stsb", "mnli"):
        write_original(root / FOLDERS[name], name)
    write_diagnostic(root)
    write_original(root / "sst2", "sst2", n=40)  # a lowercase folder, as the hub's names spell it
    return root


@pytest.fixture(scope="module")
def table_run(pretrained, glue_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("glue") / "out"
    argv = [
        "glue",
        pretrained,
        "--data",
        glue_data,
        "--control",
        "scratch",
        "--seeds",
        "1",
        "2",
        "--out",
        out,
    ]
    argv += ["--max-train-examples", "30", *QUICK]
    code = main([str(a) for a in argv])
    assert code == 0
    return out


def test_the_table_has_every_metric_the_control_and_the_difference(table_run):
    report = json.loads((table_run / "glue.json").read_text())
    assert report["tasks"] == ["CoLA", "SST-2", "MRPC", "STS-B", "MNLI"]
    assert set(report["skipped"]) == {"QQP", "QNLI", "RTE", "WNLI"}
    runs = {(r["task"], r["init"], r["seed"]): r["metrics"] for r in report["runs"]}
    assert len(runs) == 5 * 2 * 2
    assert set(runs[("mnli", "scratch", 2)]) == {"m_accuracy", "mm_accuracy"}
    assert set(runs[("mrpc", "pretrained", 1)]) == {"f1", "accuracy"}
    for task, by_key in report["metrics"].items():
        name = next(t.name for t in GLUE_TASKS.values() if t.title == task)
        for key, by_init in by_key.items():
            for init in ("pretrained", "scratch"):
                values = [runs[(name, init, seed)][key] for seed in (1, 2)]
                assert by_init[init]["mean"] == pytest.approx(statistics.fmean(values))
                assert by_init[init]["std"] == pytest.approx(statistics.stdev(values))
            diff = by_init["pretrained"]["mean"] - by_init["scratch"]["mean"]
            assert report["difference"]["metrics"][task][key] == pytest.approx(diff)
    for init in ("pretrained", "scratch"):  # each task's metrics averaged first, then the tasks
        scores = [
            statistics.fmean(by_key[k][init]["mean"] for k in by_key) for by_key in report["metrics"].values()
        ]
        assert report["glue_score"][init]["mean"] == pytest.approx(statistics.fmean(scores))
    table = (table_run / "glue.md").read_text()
    assert "| task | metric | pretrained | scratch | difference |" in table
    assert "| MNLI | accuracy (mm) |" in table and "| MRPC | F1 |" in table and "| CoLA | MCC |" in table
    assert report["glue_tasks"] == report["tasks"] and report["glue_name"] == "GLUE score over 5 tasks"
    assert (
        "**GLUE score over 5 tasks** | mean of CoLA, SST-2, MRPC, STS-B, MNLI |" in table and " ± " in table
    )
    assert "**GLUE score** |" not in table  # five tasks are not the benchmark's score
    assert "Not run, their files missing" in table and "QQP (no folder)" in table
    # the control is named for what it is: the checkpoint's config and start from random weights
    config = json.loads((Path(report["checkpoint"]) / "config.json").read_text())["model"]
    assert report["control"].startswith("the checkpoint's config from random weights")
    assert ("roles attention" in report["control"]) == (config["attention_init"] == "roles")
    assert f"- scratch, the control: {report['control']}" in table
    assert "SST-2 30 of 40" in table  # capped, and said so; CoLA (24, not a large task) is not
    notes = " ".join(table.split("**GLUE score")[1].split())
    assert "The submission is incomplete" in notes and "lacks QQP.tsv, QNLI.tsv, RTE.tsv, WNLI.tsv" in notes


def test_csv_png_runs_and_the_files_for_the_glue_server(table_run):
    with open(table_run / "glue.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["task", "init", "seed", "metric", "value", "seconds"]
    assert len(rows) == 2 * 2 * (
        1 + 1 + 2 + 2 + 2
    )  # inits x seeds x metrics of CoLA, SST-2, MRPC, STS-B, MNLI
    assert (table_run / "glue.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((table_run / "mnli" / "scratch-seed2" / "summary.json").read_text())
    assert summary["init"] == "scratch" and summary["finetune"]["seed"] == 2
    cola = json.loads((table_run / "cola" / "pretrained-seed1" / "summary.json").read_text())
    assert cola["metric"] == "mcc"  # CoLA's best epoch is chosen on its GLUE metric
    assert len((table_run / "sst2" / "train-30.tsv").read_text().splitlines()) == 31  # header + 30
    server = sorted(p.name for p in (table_run / "submission").iterdir())
    assert server == sorted(["AX.tsv", "CoLA.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "MRPC.tsv", "SST-2.tsv"] +
                            ["STS-B.tsv", NOTICE])  # fmt: skip
    for name in ("MNLI-mm.tsv", "AX.tsv"):  # the diagnostic set: the MNLI model's labels
        mnli = (table_run / "submission" / name).read_text().splitlines()
        assert mnli[0] == "index\tprediction" and len(mnli) == 6
        assert {line.split("\t")[1] for line in mnli[1:]} <= {"entailment", "neutral", "contradiction"}
    for line in (table_run / "submission" / "STS-B.tsv").read_text().splitlines()[1:]:
        assert 0 <= float(line.split("\t")[1]) <= 5
    notice = " ".join((table_run / "submission" / NOTICE).read_text().split())
    assert notice.startswith("The submission is incomplete: the GLUE server needs all of CoLA, SST-2, MRPC")
    assert "lacks QQP.tsv, QNLI.tsv, RTE.tsv, WNLI.tsv." in notice and "--tasks qqp qnli rte wnli" in notice


# ----------------------------------------------------------------------------------------------------------
# The same figures as `nanobert finetune`


def test_seed_one_equals_nanobert_finetune_to_the_digit(pretrained, glue_data, tmp_path, monkeypatch, capsys):
    common = ["--seed", "1", *QUICK]
    runs = {
        "sst2": ["--text-col", "sentence", "--label-col", "label"],
        "stsb": ["--task", "regression", "--text-col", "sentence1", "--text-pair-col", "sentence2"]
        + ["--label-col", "score"],
    }
    found = {}
    for name, columns in runs.items():
        folder = glue_data / FOLDERS.get(name, name) if name != "sst2" else glue_data / "sst2"
        argv = ["finetune", pretrained, "--train", folder / "train.tsv", "--dev", folder / "dev.tsv"]
        code, out, err = run_cli(capsys, *argv, *columns, *common, "--out", tmp_path / name)
        assert code == 0, err
        found[name] = json.loads(out)["dev"]
    scored, real = [], glue_module.split_outputs
    monkeypatch.setattr(glue_module, "split_outputs", lambda *a, **k: scored.append(a) or real(*a, **k))
    code, out, err = run_cli(capsys, "glue", pretrained, "--data", glue_data, "--tasks", "SST-2", "STS-B",
                             "--out", tmp_path / "glue", *QUICK)  # fmt: skip
    assert code == 0, err
    assert scored == []  # finetune gave every figure: none is computed a second time
    assert not (tmp_path / "glue" / "submission" / "AX.tsv").exists()  # no MNLI run: no AX.tsv
    runs = {
        r["task"]: r["metrics"] for r in json.loads((tmp_path / "glue" / "glue.json").read_text())["runs"]
    }
    assert runs["sst2"]["accuracy"] == found["sst2"]["accuracy"]
    assert runs["stsb"] == {"pearson": found["stsb"]["pearson"], "spearman": found["stsb"]["spearman"]}
    assert f"{found['stsb']['pearson']:.4f}" in out  # the printed table shows the same digits


# ----------------------------------------------------------------------------------------------------------
# Resuming


def counting(monkeypatch, fail_at: int | None = None, signal_at: int | None = None) -> list:
    """Count glue's `finetune` calls; Ctrl-C outside the loop at call `fail_at`, or a run the loop stopped
    for SIGINT at call `signal_at`."""
    calls, real = [], glue_module.finetune

    def wrapped(*args, **kwargs):
        calls.append(args[4])
        if len(calls) == fail_at:
            raise KeyboardInterrupt
        summary = real(*args, **kwargs)
        return {**summary, "stopped_by_signal": 2} if len(calls) == signal_at else summary

    monkeypatch.setattr(glue_module, "finetune", wrapped)
    return calls


def test_an_interrupted_call_resumes_without_redoing_finished_runs(
    pretrained, glue_data, tmp_path, monkeypatch, capsys
):
    argv = ["glue", pretrained, "--data", glue_data, "--tasks", "cola", "mrpc", "--seeds", "1", "2"]
    argv += ["--out", tmp_path / "out", *QUICK]
    calls = counting(monkeypatch, fail_at=3)
    code, _, err = run_cli(capsys, *argv)
    assert code == 130 and err.endswith("nanobert: interrupted")
    table = (tmp_path / "out" / "glue.md").read_text()  # CoLA's two runs finished: its table, whole
    assert "| CoLA | MCC |" in table and "MRPC" not in table.split("**GLUE score")[0]
    assert not list((tmp_path / "out").glob(".glue.md.tmp*"))
    finished = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "cola").glob("*/summary.json")}
    calls = counting(monkeypatch, signal_at=1)  # now SIGINT stops MRPC's first run inside the loop
    code, _, err = run_cli(capsys, *argv)
    assert code == 130 and [c.name for c in calls] == ["pretrained-seed1"]
    assert "Stopped by a signal" in (tmp_path / "out" / "glue.md").read_text()
    calls = counting(monkeypatch)
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    assert [str(c.relative_to(tmp_path / "out")) for c in calls] == [
        "mrpc/pretrained-seed1",
        "mrpc/pretrained-seed2",
    ]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # CoLA's runs were kept, not redone
    assert "| MRPC | F1 |" in out
    calls = counting(monkeypatch)
    code, _, err = run_cli(capsys, *[a for a in argv if a != "--quiet"])
    assert code == 0 and calls == []  # all done: nothing trains, and the progress lines say so
    assert "MRPC pretrained seed 2: dev f1" in err and "(kept from an earlier call); 4 of 4 runs done" in err
    assert "nothing left" in err


def test_other_options_never_replace_earlier_runs_unless_asked(
    pretrained, glue_data, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    argv = ["glue", pretrained, "--data", glue_data, "--tasks", "cola", "--out", out, *QUICK]
    assert run_cli(capsys, *argv)[0] == 0
    before = (out / "cola" / "pretrained-seed1" / "summary.json").read_bytes()
    code, _, err = run_cli(capsys, *argv, "--learning-rate", "1e-3")
    assert_one_line_error(code, err, "other options (finetune.learning_rate)", "--overwrite")
    assert (out / "cola" / "pretrained-seed1" / "summary.json").read_bytes() == before
    calls = counting(monkeypatch)
    assert run_cli(capsys, *argv, "--learning-rate", "1e-3", "--overwrite")[0] == 0 and len(calls) == 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", glue_data, "--out", other, *QUICK)
    assert_one_line_error(code, err, "holds other files")
    assert (other / "notes.txt").read_text() == "mine"


def test_a_moved_or_copied_checkpoint_keeps_its_runs_and_other_weights_do_not(
    pretrained, glue_data, tmp_path, monkeypatch, capsys
):
    from safetensors.torch import load_file, save_file

    monkeypatch.chdir(tmp_path)  # no --out: runs/glue-run, after the checkpoint's run folder run/
    argv = ["--data", glue_data, "--tasks", "cola", *QUICK]
    assert run_cli(capsys, "glue", pretrained, *argv)[0] == 0
    assert (tmp_path / "runs" / "glue-run" / "glue.md").is_file()
    moved = tmp_path / "elsewhere" / "run" / "best"
    shutil.copytree(pretrained, moved)
    for path in moved.iterdir():
        os.utime(path, ns=(10**18, 10**18))  # other times, as a copy that keeps none gives
    calls = counting(monkeypatch)
    code, out, err = run_cli(capsys, "glue", moved, *argv)
    assert code == 0 and calls == [], err  # the same contents: the finished run is kept
    assert "| CoLA | MCC |" in out
    other = tmp_path / "other" / "run" / "best"
    shutil.copytree(pretrained, other)
    weights = load_file(other / "model.safetensors")
    first = sorted(weights)[0]
    weights[first] = weights[first] + 1
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    code, _, err = run_cli(capsys, "glue", other, *argv)
    assert_one_line_error(code, err, "other options (checkpoint_sha1)", "--overwrite")
    assert calls == []


def test_runs_recorded_before_the_digest_are_still_kept(pretrained, glue_data, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    argv = ["glue", pretrained, "--data", glue_data, "--tasks", "cola", "--out", out, *QUICK]
    assert run_cli(capsys, *argv)[0] == 0
    weights = os.stat(pretrained / "model.safetensors")
    old_key = {
        "checkpoint": str(Path(pretrained).resolve()),
        "checkpoint_weights": [weights.st_size, weights.st_mtime_ns],
    }
    for path in (out / "glue-options.json", out / "cola" / "pretrained-seed1" / "glue-result.json"):
        written = json.loads(path.read_text())
        options = written.get("options", written)  # glue-result.json keeps them under "options"
        del options["checkpoint_sha1"]
        options.update(old_key)  # the checkpoint as an older nanobert named it: its path, size and time
        path.write_text(json.dumps(written))
    calls = counting(monkeypatch)
    assert run_cli(capsys, *argv)[0] == 0 and calls == []
    assert "checkpoint_sha1" in json.loads((out / "glue-options.json").read_text())


# ----------------------------------------------------------------------------------------------------------
# Bad input: one line, exit code 2


def test_bad_input_gets_one_line(pretrained, glue_data, table_run, tmp_path, capsys):
    base = ["--out", tmp_path / "out", *QUICK]
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", glue_data, "--tasks", "cola", "sst3", *base)
    assert_one_line_error(code, err, "unknown GLUE task 'sst3'", "cola, sst2, mrpc")
    finetuned = table_run / "cola" / "pretrained-seed1" / "best"
    code, _, err = run_cli(capsys, "glue", finetuned, "--data", glue_data, *base)
    assert_one_line_error(code, err, "sequence_classification checkpoint, not a pretraining checkpoint")
    code, _, err = run_cli(capsys, "glue", pretrained.parent, "--data", glue_data, *base)
    assert_one_line_error(code, err, "not a nanobert checkpoint")
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", tmp_path / "empty", *base)
    assert_one_line_error(code, err, "holds none of the GLUE tasks")
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", tmp_path / "nowhere", *base)
    assert_one_line_error(code, err, "no such folder")
    bad = tmp_path / "bad"
    write_original(bad / "MRPC", "mrpc")
    path = bad / "MRPC" / "train.tsv"
    path.write_text(path.read_text().replace("#2 String", "#2 Sentence"))
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", bad, *base)
    assert_one_line_error(code, err, "MRPC: ", "train.tsv has no column '#2 String'")
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", glue_data, "--control", "random", *base)
    assert_one_line_error(code, err, "invalid choice")
    code, _, err = run_cli(capsys, "glue", pretrained, "--data", glue_data, "--seeds", "1", "1", *base)
    assert_one_line_error(code, err, "different seeds")
    assert not (tmp_path / "out").exists()  # nothing was written by any of them


# ----------------------------------------------------------------------------------------------------------
# The hub's copy, offline


def hub_split(datasets, name: str, split: str, n: int = 12):
    """A tiny `datasets.Dataset` shaped like the hub's GLUE configuration `name` (test labels are -1)."""
    task, rng = GLUE_TASKS["mnli" if name == "ax" else name], random.Random(split)  # ax: MNLI's columns
    text, pair = task.hub
    columns = {text: [sentence(rng) for _ in range(n)], "idx": list(range(n))}
    if pair is not None:
        columns[pair] = [sentence(rng) for _ in range(n)]
    test = split.startswith("test")
    if task.labels is None:
        columns["label"] = [-1.0 if test else rng.uniform(0, 5) for _ in range(n)]
    else:
        columns["label"] = [-1 if test else i % len(task.labels) for i in range(n)]
    return datasets.Dataset.from_dict(columns)


def test_without_data_the_tasks_come_from_the_hub(pretrained, tmp_path, monkeypatch, capsys):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path, name, split):
        calls.append((path, name, split))
        return hub_split(datasets, name, split)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr("nanobert.finetuning.glue_data.hub_reachable", lambda: True)
    out = tmp_path / "out"
    report = glue(
        pretrained,
        out,
        tasks=["rte", "cola", "mnli"],
        cfg=glue_module.FinetuneConfig(**QUICK_CFG),
        quiet=True,
    )
    assert ("nyu-mll/glue", "mnli", "validation_mismatched") in calls and len(calls) == 3 + 3 + 6
    assert ("nyu-mll/glue", "ax", "test") in calls  # the diagnostic set, for AX.tsv
    assert report["tasks"] == ["CoLA", "MNLI", "RTE"] and report["data"] == "the hub's nyu-mll/glue"
    rte = (out / "data" / "rte" / "train.tsv").read_text().splitlines()
    assert rte[0] == "sentence1\tsentence2\tlabel" and rte[1].endswith("\tentailment")  # the hub's id 0
    cola = (out / "data" / "cola" / "train.tsv").read_text().splitlines()
    assert cola[1].split("\t")[:3] == ["", "1", ""]  # headerless, the label where CoLA keeps it
    assert (out / "submission" / "RTE.tsv").read_text().startswith("index\tprediction\n0\t")
    ax = (out / "submission" / "AX.tsv").read_text().splitlines()
    assert len(ax) == 13 and {line.split("\t")[1] for line in ax[1:]} <= set(GLUE_TASKS["mnli"].labels)
    monkeypatch.setattr(datasets, "load_dataset", None)  # a second call reads the files it wrote
    assert glue(pretrained, out, tasks=["rte"], cfg=glue_module.FinetuneConfig(**QUICK_CFG), quiet=True)[
        "tasks"
    ]


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


def test_f1_is_the_positive_class_f1_and_scores_are_named_per_dev_file():
    import numpy as np

    from nanobert.finetuning.glue_tasks import binary_f1

    targets, predicted = np.array([1, 1, 0, 0, 1]), np.array([1, 0, 1, 0, 1])
    assert binary_f1(targets, predicted, 1, 2) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert binary_f1(np.zeros(3, int), np.zeros(3, int), 1, 2) == 0.0
    mnli = GLUE_TASKS["mnli"]
    outputs = np.array([[2.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    assert mnli.scores(outputs, np.array([0, 1]), list(mnli.labels), mnli.devs[1]) == {"mm_accuracy": 0.5}
    mrpc = GLUE_TASKS["mrpc"]
    scores = mrpc.scores(np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([1, 1]), ["0", "1"], mrpc.devs[0])
    assert scores == {"f1": pytest.approx(2 / 3), "accuracy": 0.5}
    assert mnli.prediction(outputs[1], list(mnli.labels)) == "contradiction"
    stsb = GLUE_TASKS["stsb"]
    assert stsb.prediction(np.array([3.14159]), None) == "3.142"
    assert stsb.prediction(np.array([5.7]), None) == "5.000"  # the server's range, 0 to 5
    assert stsb.prediction(np.array([-0.4]), None) == "0.000"


def test_the_cli_lists_the_tasks_of_the_registry():
    from nanobert.cli.finetuning import _GLUE_NAMES

    assert _GLUE_NAMES.split() == list(GLUE_TASKS)


def test_the_default_out_is_named_after_the_checkpoints_run(tmp_path, monkeypatch):
    assert default_out(tmp_path / "first" / "best") == Path("runs/glue-first")
    assert default_out(tmp_path / "imported") == Path("runs/glue-imported")
    assert default_out("runs/x/best") == Path("runs/glue-x")  # a nested best/ or last/: its run's name
    assert default_out("a/b/c/best/") == default_out("a/b/c/last") == Path("runs/glue-c")
    assert default_out("runs/x/checkpoints/step-100") == Path("runs/glue-step-100")  # not best/: its own
    target = tmp_path / "store" / "ckpt-0005397"
    target.mkdir(parents=True)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "best").symlink_to(target)  # a best/ that links elsewhere still names its run
    assert default_out(tmp_path / "x" / "best") == Path("runs/glue-x")
    (tmp_path / "first" / "best").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "first" / "best")
    assert default_out(".") == Path("runs/glue-first")


# ----------------------------------------------------------------------------------------------------------
# The report on its own: what is compared, what the GLUE score is called, the submission's notice


def fake_run(task, init: str, seed: int, value: float) -> dict:
    return {"task": task.name, "init": init, "seed": seed, "metrics": dict.fromkeys(task.keys(), value),
            "seconds": 1.0}  # fmt: skip


def about(present: list[str]) -> dict:
    """What `glue.report` hands `build_report`, with the submission's files `present`."""
    missing = [name for name in server_files() if name not in present]
    return {"checkpoint": "CKPT", "data": "GLUE_DATA", "out": "OUT", "skipped": {}, "capped": {},
            "max_train_examples": None, "submission": present, "submission_needs": server_files(),
            "submission_missing": missing, "stopped_by_signal": None}  # fmt: skip


def test_pretrained_and_control_are_compared_on_the_tasks_both_finished():
    tasks = choose_tasks(["cola", "sst2", "rte"])
    runs = [fake_run(t, "pretrained", 1, 0.5 + 0.1 * n) for n, t in enumerate(tasks)]
    runs += [fake_run(t, "scratch", 1, 0.4) for t in tasks[:2]]  # the control stopped before RTE
    report = build_report(tasks, ("pretrained", "scratch"), (1,), runs, about(["CoLA.tsv"]))
    assert report["glue_tasks"] == ["CoLA", "SST-2"] and report["glue_name"] == "GLUE score over 2 tasks"
    assert report["glue_score"]["pretrained"]["mean"] == pytest.approx(0.55)  # RTE's 0.7 left out
    assert report["difference"]["glue_score"] == pytest.approx(0.15)
    assert report["difference"]["task_scores"]["RTE"] is None
    table = report["table"]
    assert "| **GLUE score over 2 tasks** | mean of CoLA, SST-2 | 0.5500 | 0.4000 | +0.1500 |" in table
    assert "| RTE | accuracy | 0.7000 | – | – |" in table
    assert "**GLUE score** |" not in table and "some of their runs not finished: RTE." in table
    every = choose_tasks(None)
    runs = [fake_run(t, i, 1, 0.5) for t in every for i in ("pretrained", "scratch")]
    full = build_report(every, ("pretrained", "scratch"), (1,), runs, about(server_files()))
    assert (
        full["glue_name"] == "GLUE score"
        and "| **GLUE score** | mean of the 9 task scores |" in full["table"]
    )


def test_the_submission_says_it_is_incomplete_until_every_file_is_there(tmp_path):
    assert server_files() == ["CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv",
                              "MNLI-mm.tsv", "AX.tsv", "QNLI.tsv", "RTE.tsv", "WNLI.tsv"]  # fmt: skip
    (cola,) = choose_tasks(["cola"])
    runs = [fake_run(cola, "pretrained", 1, 0.5)]
    report = build_report([cola], ("pretrained",), (1,), runs, about(["CoLA.tsv"]))
    write_report(tmp_path, report)
    notice = " ".join((tmp_path / "submission" / NOTICE).read_text().split())
    assert notice.startswith("The submission is incomplete: the GLUE server needs all of CoLA, SST-2")
    assert "lacks SST-2.tsv, MRPC.tsv" in notice and "AX.tsv is the MNLI model's labels" in notice
    assert "--tasks sst2 mrpc stsb qqp mnli qnli rte wnli" in notice
    assert "The submission is incomplete" in report["table"]
    report = build_report([cola], ("pretrained",), (1,), runs, about(server_files()))
    write_report(tmp_path, report)
    assert not (tmp_path / "submission" / NOTICE).exists() and "incomplete" not in report["table"]


# ----------------------------------------------------------------------------------------------------------
# What a new user reads: the help and the guide

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "benchmarks" / "records" / "2026-12-05-glue-first-run"
LARGE = {"qqp": 363_846, "mnli": 392_702, "qnli": 104_743}  # GLUE's training sets not measured


def command_help(name: str) -> str:
    import argparse

    from nanobert.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    return " ".join(commands[name].format_help().split())


def time_figures() -> list[str]:
    """The help's and the guide's CPU times, from the record's glue.csv: each measured task's range of
    seconds a run, the large tasks' estimate at SST-2's time per example, and all nine per seed."""
    seconds: dict[str, dict[str, float]] = {}
    with open(RECORD / "glue.csv", newline="") as f:
        for row in csv.DictReader(f):
            seconds.setdefault(row["task"], {})[row["init"]] = float(row["seconds"])
    found = []
    for name, by_init in seconds.items():
        low, high = round(min(by_init.values())), round(max(by_init.values()))
        found.append(
            f"{GLUE_TASKS[name].title} {low}–{high} s" if low != high else f"{GLUE_TASKS[name].title} {low} s"
        )
    per_example = statistics.fmean(seconds["sst2"].values()) / 67_349
    qqp, mnli, qnli = (round(per_example * LARGE[n] / 60) for n in ("qqp", "mnli", "qnli"))
    found.append(f"about {qqp}, {mnli} and {qnli} min a run")
    measured = statistics.fmean(sum(s[i] for s in seconds.values()) for i in ("pretrained", "scratch"))
    found.append(
        f"about {(measured + per_example * sum(LARGE.values())) / 3600:.1f} hours for all nine per seed"
    )
    return found


def test_the_help_of_glue_names_no_qa_default_and_says_how_long_it_takes(monkeypatch):
    monkeypatch.setenv("COLUMNS", "3000")  # one line a paragraph: nothing split at a hyphen
    text = command_help("glue")
    assert not re.search(r"\bqa\b", text), text
    assert "(default: one seed, seed 1)" in text and 'pip install "nanobert[hf]"' in text
    assert "runs/x/best gives runs/glue-x" in text
    finetune = command_help("finetune")
    assert "(qa: 2)" in finetune and "(qa: 384)" in finetune  # finetune, which trains qa, keeps them
    guide = " ".join((ROOT / "docs" / "glue.md").read_text().split())
    for figure in time_figures():
        assert figure in text and figure in guide, figure
    assert "an estimate" in text and "--max-train-examples N" in text


def test_the_guide_says_what_a_new_user_needs():
    guide = " ".join((ROOT / "docs" / "glue.md").read_text().split())
    assert "QQP, MNLI and QNLI download from the GLUE site (or the hub) like the others" in guide
    assert "not at hand" not in guide
    assert "the next call trains it again from step 0" in guide and "finished are kept" in guide
    assert (
        "`AX.tsv`, the diagnostic set labelled by the MNLI model" in guide and "does not write" not in guide
    )
    assert "`INCOMPLETE.txt`" in guide and "*GLUE score over N tasks*" in guide
    assert 'pip install "nanobert[hf]"' in guide


def test_the_submission_holds_only_what_the_note_names(pretrained, glue_data, tmp_path, capsys):
    """Calls into one folder with other tasks, another checkpoint and another first seed: submission/ keeps
    only the files written by this call's checkpoint and first seed, each tied to its run's result in
    submission-sources.json; the others are removed, so the note and the files never part ways."""
    from nanobert.finetuning.glue_submission import SOURCES

    second = train_tiny_checkpoint(tmp_path / "second", steps=4)
    out = tmp_path / "glue"

    def call(checkpoint, *argv):
        code, _, err = run_cli(capsys, "glue", checkpoint, "--data", glue_data, "--out", out, *argv, *QUICK)
        assert code == 0, err
        sources = json.loads((out / SOURCES).read_text())
        files = sorted(p.name for p in (out / "submission").glob("*.tsv"))
        assert sorted(sources) == files
        return files, sources, (out / "glue.md").read_text()

    files, sources, _ = call(pretrained, "--tasks", "cola", "mrpc", "--seeds", "1")
    assert files == ["CoLA.tsv", "MRPC.tsv"] and sources["CoLA.tsv"]["result"].startswith(
        "cola/pretrained-seed1/"
    )
    files, sources, table = call(
        second, "--tasks", "stsb", "--seeds", "1", "--overwrite"
    )  # another checkpoint
    assert files == ["STS-B.tsv"] and "(seed 1, pretrained): submission/ (STS-B.tsv)" in table
    files, sources, table = call(second, "--tasks", "cola", "--seeds", "1")  # the same one, another task
    assert files == ["CoLA.tsv", "STS-B.tsv"]
    assert "submission/ (CoLA.tsv, STS-B.tsv)" in table
    files, sources, table = call(second, "--tasks", "cola", "--seeds", "2")  # another first seed
    assert files == ["CoLA.tsv"] and sources["CoLA.tsv"]["result"].startswith("cola/pretrained-seed2/")
    assert "(seed 2, pretrained): submission/ (CoLA.tsv)" in table
