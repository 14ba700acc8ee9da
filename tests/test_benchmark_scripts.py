"""The benchmark scripts refuse bad input in one line with exit code 2 before any long work starts, and never
replace or delete a user's files. Most tests run a script's `main` in this process (benchmarks/ is not a
package, so each script is loaded from its file) with the long work replaced by a tripwire."""

import csv
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from nanobert.errors import run_script

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
CORPUS = " = One = \n\nthe cat sat on the mat . it was warm .\n\n = Two = \n\nthe dog ran in the park .\n"


def load(script: str):
    """The benchmark script as a module (its `if __name__ == "__main__"` block does not run)."""
    spec = importlib.util.spec_from_file_location(f"benchmark_{Path(script).stem}", BENCHMARKS / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tripwire(*args, **kwargs):
    raise AssertionError("the long work started before the arguments were checked")


def run_main(module, script: str, args: list, monkeypatch, capsys) -> tuple[int, str]:
    """(exit code, the one line on stderr) of `script ARGS`, run as its `__main__` block runs it."""
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / script), *map(str, args)])
    code = run_script(script, module.main)
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()  # one line, and nothing before it
    assert line.startswith(f"{script}: error: "), err
    return code, line


@pytest.fixture
def corpus(tmp_path) -> Path:
    path = tmp_path / "small.txt"
    path.write_text(CORPUS)
    return path


@pytest.fixture
def bad_files(tmp_path) -> dict[str, Path]:
    """Files that exist but are no text corpus: binary, Latin-1, empty, one document."""
    files = {
        "binary": (tmp_path / "model.bin", b"PK\x03\x04\0\0\0 weights"),
        "UTF-8": (tmp_path / "latin1.txt", "caf\xe9 au lait .\n".encode("latin-1")),
        "empty": (tmp_path / "empty.txt", b""),
        "one document": (tmp_path / "one-doc.txt", b"the cat sat . the dog ran .\n"),
    }
    for path, data in files.values():
        path.write_bytes(data)
    return {needle: path for needle, (path, _) in files.items()}


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a folder\n")
    return path


# --- prepare_scale.py -------------------------------------------------------------------------------------


@pytest.fixture
def prepare_scale():
    return load("prepare_scale.py")


def users_data(tmp_path) -> Path:
    """A folder holding the user's own corpus.txt and prepared/, which a run there would replace."""
    out = tmp_path / "mydata"
    (out / "prepared").mkdir(parents=True)
    (out / "corpus.txt").write_text("the user's corpus\n")
    (out / "prepared" / "meta.json").write_text("{}\n")
    return out


def assert_untouched(out: Path) -> None:
    assert (out / "corpus.txt").read_text() == "the user's corpus\n"
    assert (out / "prepared" / "meta.json").read_text() == "{}\n"


def test_prepare_scale_bad_argument_leaves_the_users_files_alone(tmp_path, corpus):
    """The reviewer's command, as a user runs it: a bad --vocab-size used to overwrite, then delete, them."""
    out = users_data(tmp_path)
    cmd = [sys.executable, str(BENCHMARKS / "prepare_scale.py"), "--source", str(corpus), "--out", str(out)]
    result = subprocess.run([*cmd, "--repeat", "1", "--vocab-size", "5"], capture_output=True, text=True)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("prepare_scale.py: error: --vocab-size 5") and result.stdout == ""
    assert_untouched(out)


def test_prepare_scale_refuses_an_out_holding_corpus_or_prepared(
    tmp_path, corpus, prepare_scale, monkeypatch, capsys
):
    monkeypatch.setattr(prepare_scale, "run_stage", tripwire)
    out = users_data(tmp_path)
    args = ["--source", corpus, "--out", out, "--repeat", "1", "--vocab-size", "64"]
    code, line = run_main(prepare_scale, "prepare_scale.py", args, monkeypatch, capsys)
    assert code == 2 and "already holds corpus.txt, prepared" in line
    assert_untouched(out)
    (out / "corpus.txt").unlink()  # prepared/ alone is refused too
    code, line = run_main(prepare_scale, "prepare_scale.py", args, monkeypatch, capsys)
    assert code == 2 and "already holds prepared" in line
    assert (out / "prepared" / "meta.json").is_file() and not (out / "corpus.txt").exists()


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["--repeat", "0"], "--repeat"),
        (["--vocab-size", "5"], "--vocab-size 5"),
        (["--sample-words", "0"], "--sample-words"),
        (["--max-seq-len", "4"], "max_seq_len"),
        (["--source", "ONE_DOC"], "NSP needs at least two documents"),
        (["--out", "UNDER_A_FILE"], "is a file, not a folder"),
    ],
)
def test_prepare_scale_checks_every_argument_before_writing_the_corpus(
    bad, needle, tmp_path, corpus, bad_files, a_file, prepare_scale, monkeypatch, capsys
):
    monkeypatch.setattr(prepare_scale, "run_stage", tripwire)
    out = tmp_path / "out"
    stand_in = {"ONE_DOC": bad_files["one document"], "UNDER_A_FILE": a_file / "out"}
    bad = [stand_in.get(a, a) for a in bad]
    args = ["--source", corpus, "--out", out, "--repeat", "1", "--vocab-size", "64", *bad]
    code, line = run_main(prepare_scale, "prepare_scale.py", args, monkeypatch, capsys)
    assert code == 2 and needle in line
    assert not out.exists()  # not even the folder: nothing was written


def test_prepare_scale_a_failing_stage_is_one_line_and_removes_only_its_own_files(
    tmp_path, corpus, prepare_scale, monkeypatch, capsys
):
    def failing_child(cmd, **kwargs):
        error = "prepare_scale.py: error: the train split has 1 non-empty documents; NSP needs at least two\n"
        return subprocess.CompletedProcess(cmd, 2, stdout="", stderr=error)

    monkeypatch.setattr(prepare_scale.subprocess, "run", failing_child)
    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)
    args = ["--source", corpus, "--out", out, "--repeat", "2", "--vocab-size", "64"]
    code, line = run_main(prepare_scale, "prepare_scale.py", args, monkeypatch, capsys)
    assert code == 2
    assert line == (
        "prepare_scale.py: error: the prepare stage failed: the train split has 1 non-empty documents; NSP "
        "needs at least two"
    )
    assert sorted(p.name for p in out.iterdir()) == ["mine"]  # its corpus.txt is gone, the user's folder not


def test_prepare_scale_a_stage_too_fast_to_time_is_no_division_by_zero(
    tmp_path, corpus, prepare_scale, monkeypatch, capsys
):
    memory = {"seconds": 0.0, "peak_rss_anon_mib": 1.0, "peak_rss_vmhwm_mib": 1.0}
    splits = {"train": {"documents": 4, "sentences": 8, "tokens": 32}}
    epoch = {"windows": 1, "batches": 1, "instances": 2, "tokens": 30, "tokens_per_s": 0}
    results = {"prepare": {**memory, "splits": splits}, "epoch": {**memory, **epoch}}
    monkeypatch.setattr(prepare_scale, "run_stage", lambda stage, args: results[stage])
    monkeypatch.setattr(
        sys, "argv", ["prepare_scale.py", "--source", str(corpus), "--out", str(tmp_path / "o")]
    )
    assert run_script("prepare_scale.py", prepare_scale.main) == 0
    assert "too fast to time" in capsys.readouterr().out
    assert (tmp_path / "o" / "prepare_scale.json").is_file() and not (tmp_path / "o" / "corpus.txt").exists()


# --- quality.py and bert_vs_gpt.py --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, needle",
    [(option, needle) for option in ("--train", "--test") for needle in ("binary", "UTF-8", "empty")]
    # a one-document training file is pretrain's to judge, before it trains (--set objective=causal takes one)
    + [("--test", "one document")],
)
def test_quality_reads_train_and_test_as_text_before_training(
    option, needle, corpus, bad_files, monkeypatch, capsys
):
    quality = load("quality.py")
    monkeypatch.setattr(quality, "pretrain", tripwire)
    files = {"--train": corpus, "--test": corpus, option: bad_files[needle]}
    args = ["--preset", "toy", "--max-steps", "2", *(x for kv in files.items() for x in kv)]
    code, line = run_main(quality, "quality.py", args, monkeypatch, capsys)
    assert code == 2 and needle in line and bad_files[needle].name in line


def test_quality_keep_under_a_file_is_one_line(corpus, a_file, monkeypatch, capsys):
    quality = load("quality.py")
    monkeypatch.setattr(quality, "pretrain", tripwire)
    args = ["--preset", "toy", "--train", corpus, "--test", corpus, "--max-steps", "2", "--device", "cpu"]
    for keep in (a_file, a_file / "runs"):
        code, line = run_main(quality, "quality.py", [*args, "--keep", keep], monkeypatch, capsys)
        assert code == 2 and f"{a_file} is a file, not a folder" in line


def test_quality_reads_valid_blimp_and_results_before_training(
    corpus, bad_files, tmp_path, monkeypatch, capsys
):
    quality = load("quality.py")
    monkeypatch.setattr(quality, "pretrain", tripwire)
    not_blimp = tmp_path / "not_blimp.jsonl"
    not_blimp.write_text('{"text": "a sentence ."}\n')
    old_table = tmp_path / "old.csv"
    old_table.write_text("date,preset,seed,mlm_accuracy\n")
    args = ["--preset", "toy", "--train", corpus, "--test", corpus, "--max-steps", "2"]
    for extra, needle in (
        (["--valid", bad_files["binary"]], "binary"),
        (["--blimp", not_blimp], "not a BLiMP pair"),
        (["--results", old_table], "has other columns"),
    ):
        code, line = run_main(quality, "quality.py", [*args, *extra], monkeypatch, capsys)
        assert code == 2 and needle in line


def write_glue(root: Path) -> Path:
    """A tiny GLUE folder: SST-2 (sentence, label) and STS-B (sentence1, sentence2, score), GLUE's columns."""
    words = ["the cat sat", "a dog ran", "it was warm", "the mat", "in the park", "one two", "sat on it"]
    for name, header, row in (
        ("sst2", "sentence\tlabel", lambda i: f"{words[i % 7]}\t{i % 2}"),
        ("stsb", "sentence1\tsentence2\tscore", lambda i: f"{words[i % 7]}\t{words[(i * 3) % 7]}\t{i % 5}.0"),
    ):
        (root / name).mkdir(parents=True)
        for file, n in (("train.tsv", 11), ("dev.tsv", 7)):
            (root / name / file).write_text("\n".join([header, *(row(i) for i in range(n))]) + "\n")
    return root


def test_quality_checks_the_glue_files_before_training(corpus, tmp_path, monkeypatch, capsys):
    quality = load("quality.py")
    monkeypatch.setattr(quality, "pretrain", tripwire)
    glue = write_glue(tmp_path / "glue")
    (glue / "stsb" / "dev.tsv").write_text("sentence1\tscore\na b\t1.0\n")  # no sentence2
    args = ["--preset", "toy", "--train", corpus, "--test", corpus, "--max-steps", "2"]
    for extra, needle in (
        (["--glue", tmp_path / "missing"], "sst2/train.tsv: no such file"),
        (["--glue", glue], "sentence2"),
    ):
        code, line = run_main(quality, "quality.py", [*args, *extra], monkeypatch, capsys)
        assert code == 2 and needle in line, line
    # without the broken task it goes on to the training (the tripwire)
    with pytest.raises(AssertionError, match="the long work started"):
        run_main(quality, "quality.py", [*args, "--glue", glue, "--glue-tasks", "sst2"], monkeypatch, capsys)


def test_quality_reports_the_mean_glue_figures_of_best(corpus, tmp_path, monkeypatch, capsys):
    """--glue fine-tunes best/ once per fine-tuning seed with the CLI's defaults and writes each task's mean
    dev figure into the row, keeping the runs under RUN/finetune/."""
    quality = load("quality.py")
    results, keep = tmp_path / "results.csv", tmp_path / "runs"
    args = ["--preset", "toy", "--train", corpus, "--test", corpus, "--max-steps", "2", "--device", "cpu"]
    args += ["--seeds", "1", "--set", "precision=fp32"]
    args += ["--glue", write_glue(tmp_path / "glue"), "--finetune-seeds", "1", "2"]
    monkeypatch.setattr(sys, "argv", ["quality.py", *map(str, [*args, "--results", results, "--keep", keep])])
    assert run_script("quality.py", quality.main) == 0
    (row,) = csv.DictReader(results.open())
    for task, metric in (("sst2", "accuracy"), ("stsb", "pearson")):
        runs = [keep / "toy-seed1" / "finetune" / f"{task}-seed{seed}" for seed in (1, 2)]
        figures = [json.loads((run / "summary.json").read_text())["dev"][metric] for run in runs]
        assert float(row[task]) == pytest.approx(sum(figures) / 2, abs=1e-4)
        summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
        assert [s["finetune"]["seed"] for s in summaries] == [1, 2]
    assert "sst2: mean" in capsys.readouterr().out


@pytest.fixture
def bert_vs_gpt(monkeypatch):
    module = load("bert_vs_gpt.py")
    monkeypatch.setattr(module, "train_all", tripwire)
    return module


@pytest.mark.parametrize("budget", ["-1", "0", "nan", "inf"])
def test_bert_vs_gpt_time_budget_is_checked_up_front(
    budget, tmp_path, corpus, bert_vs_gpt, monkeypatch, capsys
):
    args = ["--train", corpus, "--test", corpus, "--out", tmp_path / "out", "--time-budget", budget]
    code, line = run_main(bert_vs_gpt, "bert_vs_gpt.py", args, monkeypatch, capsys)
    assert code == 2 and "--time-budget must be a positive number of seconds" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("needle", ["binary", "UTF-8", "empty", "one document"])
@pytest.mark.parametrize("option", ["--train", "--test"])
def test_bert_vs_gpt_reads_train_and_test_as_text_before_training(
    option, needle, tmp_path, corpus, bad_files, bert_vs_gpt, monkeypatch, capsys
):
    files = {"--train": corpus, "--test": corpus, option: bad_files[needle]}
    args = ["--time-budget", "1", "--out", tmp_path / "out", *(x for kv in files.items() for x in kv)]
    code, line = run_main(bert_vs_gpt, "bert_vs_gpt.py", args, monkeypatch, capsys)
    assert code == 2 and needle in line
    assert not (tmp_path / "out").exists()


def test_bert_vs_gpt_out_at_or_under_a_file_is_one_line(corpus, a_file, bert_vs_gpt, monkeypatch, capsys):
    for out in (a_file, a_file / "runs"):
        args = ["--train", corpus, "--test", corpus, "--time-budget", "1", "--out", out]
        code, line = run_main(bert_vs_gpt, "bert_vs_gpt.py", args, monkeypatch, capsys)
        assert code == 2 and f"{a_file} is a file, not a folder" in line


def test_bert_vs_gpt_reads_blimp_before_training(corpus, tmp_path, bert_vs_gpt, monkeypatch, capsys):
    not_blimp = tmp_path / "not_blimp.jsonl"
    not_blimp.write_text('{"text": "a sentence ."}\n')
    late = tmp_path / "late.jsonl"  # a bad line after good ones is found before the training too
    good = {
        "sentence_good": "A b .",
        "sentence_bad": "B a .",
        "field": "f",
        "linguistics_term": "t",
        "UID": "u",
    }
    late.write_text(json.dumps(good) + "\n" + '{"text": 1}\n')
    args = ["--train", corpus, "--test", corpus, "--time-budget", "1", "--out", tmp_path / "out"]
    for extra, needle in (
        (["--blimp", not_blimp], "not a BLiMP pair"),
        (["--blimp", tmp_path / "missing"], "no such BLiMP data"),
        (["--blimp", late], "line 2"),
        (["--blimp-limit", "3"], "--blimp-limit needs --blimp"),
    ):
        code, line = run_main(bert_vs_gpt, "bert_vs_gpt.py", [*args, *extra], monkeypatch, capsys)
        assert code == 2 and needle in line


# --- finetune_trec.py and squad.py -------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """Enough of a checkpoint for the scripts' up-front `read_config` (the runs never start)."""
    path = tmp_path / "run" / "best"
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model": {}}\n')
    return path


def earlier_run(directory: Path) -> None:
    directory.mkdir(parents=True)
    (directory / "summary.json").write_text("{}\n")


@pytest.fixture
def trec(tmp_path, checkpoint, monkeypatch):
    module = load("finetune_trec.py")
    monkeypatch.setattr(module, "finetune", tripwire)
    folder = tmp_path / "trec-6"
    folder.mkdir()
    for name in ("train_5500.label", "TREC_10.label"):
        (folder / name).write_text("DESC:def What is a fine film ?\nHUM:ind Who made it ?\n")
    return module, [checkpoint, "--trec-dir", folder]


def test_finetune_trec_refuses_a_learning_rate_or_init_given_twice(trec, tmp_path, monkeypatch, capsys):
    module, args = trec
    for extra, needle in (
        (["--learning-rate", "1e-4", "0.0001"], "--learning-rate gives 0.0001 more than once"),
        (["--inits", "scratch", "scratch"], "--inits gives scratch more than once"),
    ):
        code, line = run_main(
            module, "finetune_trec.py", [*args, "--out", tmp_path / "o", *extra], monkeypatch, capsys
        )
        assert code == 2 and needle in line


def test_finetune_trec_checks_a_later_runs_folder_before_the_first_run(trec, tmp_path, monkeypatch, capsys):
    module, args = trec
    out = tmp_path / "o"
    earlier_run(out / "trec6-scratch-lr0.0003")  # the last run of the grid
    extra = ["--out", out, "--learning-rate", "1e-4", "3e-4"]
    code, line = run_main(module, "finetune_trec.py", [*args, *extra], monkeypatch, capsys)
    assert code == 2 and "trec6-scratch-lr0.0003 already holds a run" in line
    assert sorted(p.name for p in out.iterdir()) == ["trec6-scratch-lr0.0003"]


def test_finetune_trec_out_under_a_file_is_one_line(trec, a_file, monkeypatch, capsys):
    module, args = trec
    code, line = run_main(module, "finetune_trec.py", [*args, "--out", a_file / "o"], monkeypatch, capsys)
    assert code == 2 and f"{a_file} is a file, not a folder" in line


@pytest.fixture
def squad(tmp_path, checkpoint, monkeypatch):
    module = load("squad.py")
    monkeypatch.setattr(module, "finetune_qa", tripwire)
    data = tmp_path / "train.json"
    data.write_text('{"data": []}\n')
    return module, [checkpoint, "--train", data, "--dev", data]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--inits", "pretrained", "pretrained"], "names a run twice"),
        (["--xquad", "/nonexistent/xquad.json"], "--xquad /nonexistent/xquad.json: no such file"),
        (["--doc-stride", "0"], "doc_stride"),
    ],
)
def test_squad_checks_every_run_up_front(extra, needle, squad, tmp_path, monkeypatch, capsys):
    module, args = squad
    code, line = run_main(module, "squad.py", [*args, "--out", tmp_path / "o", *extra], monkeypatch, capsys)
    assert code == 2 and needle in line


def test_squad_checks_the_scratch_folder_before_the_pretrained_run(squad, tmp_path, monkeypatch, capsys):
    module, args = squad
    earlier_run(tmp_path / "o" / "scratch")
    code, line = run_main(module, "squad.py", [*args, "--out", tmp_path / "o"], monkeypatch, capsys)
    assert code == 2 and "scratch already holds a run" in line
    assert not (tmp_path / "o" / "pretrained").exists()


def test_squad_out_under_a_file_is_one_line(squad, a_file, monkeypatch, capsys):
    module, args = squad
    code, line = run_main(module, "squad.py", [*args, "--out", a_file / "o"], monkeypatch, capsys)
    assert code == 2 and f"{a_file} is a file, not a folder" in line


# --- throughput.py and data_pipeline.py --------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["--vocab-size", "3"], "--vocab-size 3 leaves no room"),
        (["--vocab-size", "5"], "--vocab-size 5 leaves no room"),
        (["--steps", "0"], "argument --steps"),
        (["--rounds", "0"], "argument --rounds"),
        (["--warmup", "-1"], "argument --warmup"),
        (["--mask-prob", "2"], "--mask-prob must be in (0, 1]"),
        (["--mask-prob", "0"], "--mask-prob must be in (0, 1]"),
        (["--dropout", "1.5"], "hidden_dropout_prob"),
    ],
)
def test_throughput_checks_its_arguments_before_building_the_models(bad, needle, monkeypatch, capsys):
    throughput = load("throughput.py")
    monkeypatch.setattr(throughput, "BertForPreTraining", tripwire)
    monkeypatch.setattr(throughput, "matmul_peak", tripwire)
    code, line = run_main(throughput, "throughput.py", ["--device", "cpu", *bad], monkeypatch, capsys)
    assert code == 2 and needle in line


@pytest.fixture
def data_pipeline(monkeypatch):
    module = load("data_pipeline.py")
    monkeypatch.setattr(module, "read_text_file", tripwire)  # the pipeline's first stage
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same answer on a GPU machine
    return module


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["--measure-train", "cuda"], "use --measure-train cpu"),
        (
            ["--measure-train", "cpu", "--seq-len", "600"],
            "--seq-len 600 exceeds the mini model's 512 positions",
        ),
        (["--seq-len", "4"], "--seq-len 4 is too short"),
        (["--vocab-size", "5"], "--vocab-size 5 is out of range"),
        (["--repeat", "0"], "argument --repeat"),
        (["--source", "ONE_DOC"], "NSP needs at least two documents"),
    ],
)
def test_data_pipeline_checks_its_arguments_before_the_pipeline(
    bad, needle, corpus, bad_files, data_pipeline, monkeypatch, capsys
):
    bad = [bad_files["one document"] if a == "ONE_DOC" else a for a in bad]
    code, line = run_main(data_pipeline, "data_pipeline.py", ["--source", corpus, *bad], monkeypatch, capsys)
    assert code == 2 and needle in line
    assert "--device" not in line  # an option this script does not have


@pytest.mark.parametrize(
    "bad, needle",
    [
        (["--before", "no-such-revision"], "--before no-such-revision: git finds no src/nanobert/model.py"),
        (["--mask-prob", "0"], "--mask-prob must be in (0, 1]"),
        (["--profile", "0"], "argument --profile"),
        (["--layers", "0"], "argument --layers"),
    ],
)
def test_cpu_step_checks_its_arguments_before_building_a_step(bad, needle, monkeypatch, capsys):
    cpu_step = load("cpu_step.py")
    monkeypatch.setattr(cpu_step, "Step", tripwire)
    monkeypatch.setattr(cpu_step, "load_nanobert", tripwire)
    code, line = run_main(cpu_step, "cpu_step.py", bad, monkeypatch, capsys)
    assert code == 2 and needle in line


def test_cpu_step_times_and_profiles_this_trees_step(tmp_path):
    """One round of one step and a profile of one, in a process of its own (it reloads nanobert)."""
    out = tmp_path / "step.json"
    # fp32: bf16 is emulated, and slow, on CPUs without it
    args = [
        "--precision",
        "fp32",
        "--rounds",
        "1",
        "--steps",
        "1",
        "--profile",
        "1",
        "--threads",
        "1",
        "--layers",
        "3",
        "--json",
        out,
    ]
    done = subprocess.run([sys.executable, BENCHMARKS / "cpu_step.py", *map(str, args)], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(out.read_text())
    assert report["layers"] == 3  # the step's depth, as asked (an AMX Xeon's first run trains four)
    profile = report["profiles"]["this tree"]
    assert report["sides"]["this tree"]["tokens_per_s"] > 0 and profile["ceiling_ms"] > 0
    kinds = profile["ms_by_kind"]
    assert {"MLM decoder and loss", "matrix multiplies", "optimizer"} <= set(kinds)


def test_the_benchmarks_page_lists_every_script():
    """benchmarks/README.md names every script in benchmarks/, so a reader finds what each measures."""
    page = (BENCHMARKS / "README.md").read_text()
    missing = [p.name for p in sorted(BENCHMARKS.glob("*.py")) if f"`{p.name}`" not in page]
    assert not missing, f"benchmarks/README.md does not list {', '.join(missing)}"


# --- nsp_diagnosis.py -------------------------------------------------------------------------------------


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_nsp_diagnosis_trains_as_the_trainer_and_screens_the_head(pooling, tmp_path, monkeypatch):
    """A few steps of the flat loop on a tiny corpus: a JSON line per snapshot with the held-out figures; the
    roles start's kept entries stay as they were (keep_roles, weight decay on); with `--nsp-pooling mean` the
    NSP head reads the mean of the tokens (the pooled states differ from [CLS]'s)."""
    from helpers import write_corpus

    from nanobert.initialization import kept_entries
    from nanobert.tokenizer import load_tokenizer, save_tokenizer, train_tokenizer

    nsp = load("nsp_diagnosis.py")
    train, valid = (
        write_corpus(tmp_path / "train.txt", n_docs=9),
        write_corpus(tmp_path / "valid.txt", seed=1),
    )
    save_tokenizer(train_tokenizer(train.read_text().splitlines(), vocab_size=97), tmp_path / "tok")
    kept, keep_roles = [], nsp.keep_roles

    def keep_and_remember(model, optimizer):  # the model the loop trains, and its kept entries at the start
        kept.extend((model, p, i, p.detach()[i].clone()) for p, i in kept_entries(model))
        return keep_roles(model, optimizer)

    monkeypatch.setattr(nsp, "keep_roles", keep_and_remember)
    out = tmp_path / "diag.jsonl"
    args = [
        "--train",
        train,
        "--valid",
        valid,
        "--tokenizer",
        tmp_path / "tok",
        "--steps",
        "5",
        "--every",
        "2",
    ]
    args += ["--held-out-pairs", "8", "--probe-pairs", "4", "--nsp-pooling", pooling, "--out", out]
    args += ["--set", "hidden_size=24", "num_attention_heads=2", "intermediate_size=40", "weight_decay=0.1"]
    nsp.train(nsp.parse_args([str(a) for a in args]))
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 2, 4]
    assert all(0 <= line["held_out"]["nsp_accuracy"] <= 1 for line in lines)
    for line in lines:  # the probes score accuracies; per layer, a share per head that sums to the layer's
        assert all(0 <= v <= 1 for v in line["probe"].values())
        for layer in line["cls_attention"]:
            per_head = [sum(head.values()) for head in layer["heads"]]
            assert all(abs(total - 1) < 1e-4 for total in per_head), per_head
            assert all(0.5 <= a <= 1 for a in layer["b_reads_a_rule"])
    assert kept and all(torch.equal(p.detach()[i], start) for _, p, i, start in kept)
    model = kept[0][0]
    docs = nsp.encode_documents(load_tokenizer(tmp_path / "tok"), nsp.load_documents(valid))
    batch = nsp.MaskingCollator(model.config.vocab_size, mask_prob=0.15, seed=0)(nsp.eval_instances(docs, 32))
    with torch.no_grad():
        out = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
        cls = torch.tanh(model.bert.pooler(out.last_hidden_state[:, 0]))
    assert torch.allclose(out.pooler_output, cls) == (pooling == "cls")


def test_nsp_diagnosis_best_cut_splits_between_values_only():
    """The one-feature rule's accuracy: a perfect split either way is 1.0; a constant feature, whose ties
    cannot be cut, scores the majority label, not a split that separates equal values."""
    best_cut = load("nsp_diagnosis.py").best_cut_accuracy
    f, y = torch.tensor([0.1, 0.2, 0.3, 0.9, 0.8, 0.7]), torch.tensor([0, 0, 0, 1, 1, 1])
    assert best_cut(f, y) == best_cut(-f, y) == 1.0
    assert best_cut(torch.zeros(5), torch.tensor([0, 0, 0, 1, 1])) == pytest.approx(0.6)
    assert best_cut(torch.tensor([1.0, 1.0, 2.0, 2.0]), torch.tensor([0, 1, 1, 1])) == pytest.approx(0.75)
