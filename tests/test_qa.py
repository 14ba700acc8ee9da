"""Question answering end to end on a generated SQuAD-format task: learned, predicted, answered, exported."""

import json
import shutil

import pytest
import torch
from helpers import qa_checkpoint, squad_task, train_tiny_checkpoint, write_squad_task

from nanobert.checkpoints.checkpoint import load_pretraining_checkpoint, save_checkpoint
from nanobert.cli import main
from nanobert.config import QAConfig, TrainConfig
from nanobert.errors import NanobertError
from nanobert.finetuning.qa import finetune_qa, load_qa_model
from nanobert.tokenizer import load_tokenizer


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """SQuAD 2.0-style files (every third question unanswerable), contexts long enough for 2+ windows."""
    root = tmp_path_factory.mktemp("qa")
    train = write_squad_task(root / "train.json", 300, 0, no_answer=True, filler=2)
    dev = write_squad_task(root / "dev.json", 40, 1, no_answer=True, filler=2)
    return root, train, dev


@pytest.fixture(scope="module")
def tuned(task):
    root, train, dev = task
    cfg = QAConfig(epochs=5, learning_rate=3e-3, batch_size=16, max_seq_len=32, doc_stride=8, device="cpu",
                   precision="fp32")  # fmt: skip
    summary = finetune_qa(qa_checkpoint(root), train, dev, root / "ft", cfg, test_file=dev, quiet=True)
    return root / "ft", summary


def test_a_generated_task_is_learned(tuned, task):
    out, summary = tuned
    assert summary["dev"]["exact_match"] >= 90.0, summary["dev_history"]
    assert summary["examples"]["train_windows"] > summary["examples"]["train"]  # contexts did need windows
    assert summary["test"] == pytest.approx(summary["dev"])  # the test file is the dev file here
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records if r["split"] == "dev"] == [1, 2, 3, 4, 5]
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["kind"] == "question_answering" and config["version_2_with_negative"] is True
    predictions = json.loads((out / "predictions.json").read_text())
    dev = squad_task(40, 1, no_answer=True, filler=2)
    questions = {q["id"]: q for a in dev["data"] for p in a["paragraphs"] for q in p["qas"]}
    assert set(predictions) == set(questions)
    unanswerable = [qid for qid, q in questions.items() if q.get("is_impossible")]
    assert sum(predictions[q] == "" for q in unanswerable) >= 0.9 * len(unanswerable)  # SQuAD 2.0's no-answer


def test_predict_writes_the_official_prediction_file(tuned, task, capsys):
    out, _ = tuned
    root, _, dev = task
    code, stdout, err = run_cli(capsys, "predict", out, "--input", dev, "--out", root / "pred.json")
    assert code == 0, err
    result = json.loads(stdout)
    predictions = json.loads((root / "pred.json").read_text())
    assert result["questions"] == len(predictions) == 120 and result["exact_match"] >= 90.0
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in predictions.items())
    assert predictions == json.loads((out / "predictions.json").read_text())
    code, _, err = run_cli(capsys, "predict", out, "--input", dev, "--out", root)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is a directory" in err


def test_predict_honours_device_and_batch_size_and_scores_by_the_files_version(
    tuned, task, tmp_path, capsys, monkeypatch
):
    import nanobert.use.answers as inference  # where predict_qa loads and runs the model

    out, _ = tuned
    root, _, dev = task
    devices, sizes = [], []
    resolve, batches = inference.resolve_device, inference.length_sorted_batches
    monkeypatch.setattr(inference, "resolve_device", lambda d: devices.append(d) or resolve(d))
    monkeypatch.setattr(
        inference, "length_sorted_batches", lambda data, n: sizes.append(n) or batches(data, n)
    )
    argv = ["predict", out, "--input", dev, "--out", tmp_path / "p.json", "--device", "cpu"]
    code, stdout, err = run_cli(capsys, *argv, "--batch-size", 7)
    assert code == 0, err
    assert devices == ["cpu"] and sizes == [7]
    assert json.loads(stdout)["squad_version"] == "2.0"  # a file with unanswerable questions: 2.0's rules
    assert json.loads((tmp_path / "p.json").read_text()) == json.loads((out / "predictions.json").read_text())
    v1 = write_squad_task(tmp_path / "v1.json", 5, 3)  # no unanswerable questions, version 1.1
    code, stdout, err = run_cli(capsys, "predict", out, "--input", v1)  # answers to stdout, scores to stderr
    assert code == 0 and set(json.loads(stdout)) == {
        f"q{a}-{k}" for a in range(5) for k in ("where", "colour")
    }
    assert json.loads(err.removeprefix("nanobert: "))["squad_version"] == "1.1"
    if not torch.cuda.is_available():  # --device is not ignored: asking for a GPU that is not there says so
        code, _, err = run_cli(capsys, "predict", out, "--input", dev, "--device", "cuda")
        assert code == 2 and "no CUDA GPU" in err


def test_the_null_score_threshold_is_the_models_unless_overridden(tuned, tmp_path, capsys):
    out, _ = tuned
    context = "Juliet went to the ocean with a purple hat. kilo lima mike november oscar."
    ask = ["answer", out, "--context", context]
    code, stdout, _ = run_cli(
        capsys, *ask, "--question", "Where did juliet go?", "--null-score-threshold", -1e9
    )
    assert code == 0 and stdout.strip() == "(no answer)"  # [CLS] always wins
    code, stdout, _ = run_cli(
        capsys, *ask, "--question", "When did juliet go?", "--null-score-threshold", 1e9
    )
    assert code == 0 and stdout.strip() != "(no answer)"  # [CLS] never wins
    for bad in ("nan", "inf"):  # NaN silently answered every question; neither is a threshold
        code, _, err = run_cli(capsys, *ask, "--question", "Where?", "--null-score-threshold", bad)
        assert code == 2 and "must be a finite number" in err, err
    with pytest.raises(NanobertError, match="null_score_threshold must be a finite number"):
        QAConfig(null_score_threshold=float("nan"))
    # the threshold recorded with the model is the one predict and answer use
    shutil.copytree(out / "best", tmp_path / "strict")
    config = json.loads((tmp_path / "strict" / "config.json").read_text())
    config["finetune"]["null_score_threshold"] = -1e9
    (tmp_path / "strict" / "config.json").write_text(json.dumps(config))
    assert load_qa_model(tmp_path / "strict").answer("Where did juliet go?", context).text == ""
    assert (
        load_qa_model(tmp_path / "strict", null_score_threshold=0.0)
        .answer("Where did juliet go?", context)
        .text
        == "ocean"
    )
    # a v1.1 model always answers a span: a threshold does not apply to it
    config["version_2_with_negative"] = False
    (tmp_path / "strict" / "config.json").write_text(json.dumps(config))
    assert load_qa_model(tmp_path / "strict").answer("When did juliet go?", context).text != ""
    ask = ["answer", tmp_path / "strict", "--question", "Where?", "--context", context]
    code, _, err = run_cli(capsys, *ask, "--null-score-threshold", 1)
    assert code == 2 and "applies only to a SQuAD 2.0 model" in err


def test_finetune_takes_the_query_length_and_null_threshold_and_records_them(task, tmp_path, capsys):
    root, train, dev = task
    small = write_squad_task(tmp_path / "small.json", 12, 5, no_answer=True, filler=1)
    argv = ["finetune", qa_checkpoint(tmp_path), "--task", "qa", "--train", small, "--dev", small,
            "--out", tmp_path / "ft", "--epochs", 1, "--max-seq-len", 32, "--doc-stride", 8,
            "--max-query-length", 3, "--null-score-threshold", 2.5, "--device", "cpu",
            "--precision", "fp32", "--quiet"]  # fmt: skip
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    settings = json.loads((tmp_path / "ft" / "best" / "config.json").read_text())["finetune"]
    assert settings["max_query_length"] == 3 and settings["null_score_threshold"] == 2.5
    model = load_qa_model(tmp_path / "ft")
    assert model.null_threshold == 2.5 and model.settings.max_query_length == 3


def test_windows_longer_than_the_pretraining_ones_get_a_note(tmp_path, capsys):
    model, _ = load_pretraining_checkpoint(qa_checkpoint(tmp_path))
    short = save_checkpoint(
        tmp_path / "short", model, TrainConfig(max_seq_len=16), load_tokenizer(tmp_path / "pre")
    )
    small = write_squad_task(tmp_path / "small.json", 6, 5, filler=1)
    argv = ["finetune", short, "--task", "qa", "--train", small, "--dev", small, "--epochs", 1,
            "--doc-stride", 8, "--device", "cpu", "--precision", "fp32"]  # fmt: skip
    torch.manual_seed(0)
    code, _, err = run_cli(capsys, *argv, "--max-seq-len", 32, "--out", tmp_path / "long")
    assert code == 0, err
    assert "pretrained on windows of 16 tokens, so positions 16-31 start untrained" in err
    assert "--max-seq-len 16 --doc-stride 8" in err
    code, _, err = run_cli(capsys, *argv, "--max-seq-len", 16, "--out", tmp_path / "fits")
    assert code == 0 and "start untrained" not in err, err


def test_answer_prints_the_answer_its_probability_and_span(tuned, capsys):
    out, _ = tuned
    context = "Juliet went to the ocean with a purple hat. kilo lima mike november oscar."
    code, stdout, err = run_cli(
        capsys, "answer", out, "--question", "Where did juliet go?", "--context", context, "--json"
    )
    assert code == 0, err
    answer = json.loads(stdout)
    assert (
        answer["text"] == "ocean" == context[answer["start"] : answer["end"]]
        and 0 < answer["probability"] <= 1
    )
    code, stdout, _ = run_cli(
        capsys, "answer", out, "--question", "What colour was the hat of juliet?", "--context", context
    )
    assert code == 0 and stdout.startswith("purple  (probability ")
    model = load_qa_model(out)
    assert model.answer("When did juliet go?", context).text == ""  # unanswerable: no answer
    with pytest.raises(NanobertError, match="both hold some text"):
        model.answer("Where?", "   ")
    # a question longer than the model's window (32 pieces) is cut to half of it, not refused
    assert isinstance(model.answer("where did juliet go ? " * 20, context).text, str)
    with pytest.raises(NanobertError, match="not valid Unicode"):
        model.answer("Where did \udce9 go?", context)


def test_a_run_never_writes_over_its_dev_file_or_into_its_checkpoint(task, tmp_path, capsys):
    """The run's predictions.json is one of its outputs: a dev file of that name in --out, or an --out inside
    the checkpoint, is refused before anything is written."""
    root, train, dev = task
    work = tmp_path / "work"
    work.mkdir()
    dev_copy = work / "predictions.json"
    dev_copy.write_bytes(dev.read_bytes())
    cfg = QAConfig(epochs=1, batch_size=16, max_seq_len=32, doc_stride=8, device="cpu", precision="fp32")
    checkpoint = qa_checkpoint(tmp_path)
    with pytest.raises(NanobertError, match="belongs to the run in"):
        finetune_qa(checkpoint, train, dev_copy, work, cfg, quiet=True)
    assert dev_copy.read_bytes() == dev.read_bytes()
    with pytest.raises(NanobertError, match="lies inside the input"):
        finetune_qa(checkpoint, train, dev, checkpoint / "ft", cfg, quiet=True)
    assert not (checkpoint / "ft").exists()


def test_the_qa_checkpoint_exports_as_bert_for_question_answering(tuned, tmp_path):
    transformers = pytest.importorskip("transformers")
    from nanobert.checkpoints.checkpoint import load_qa
    from nanobert.hf.export_hf import export_hf

    out, _ = tuned
    exported = export_hf(out / "best", tmp_path / "hf")
    hf, info = transformers.BertForQuestionAnswering.from_pretrained(exported, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    ours, tokenizer, _ = load_qa(out / "best")
    enc = tokenizer.encode("Where did alpha go?", "Alpha went to the river with a red hat.")
    ids, types = torch.tensor([enc.ids]), torch.tensor([enc.type_ids])
    hf.eval()
    with torch.no_grad():
        a = ours(ids, types)
        b = hf(input_ids=ids, token_type_ids=types)
    assert (a.start_logits - b.start_logits).abs().max() < 1e-4
    assert (a.end_logits - b.end_logits).abs().max() < 1e-4


def test_bad_input_is_one_line(tuned, task, tmp_path, capsys):
    out, _ = tuned
    root, train, dev = task
    pretrained = train_tiny_checkpoint(tmp_path / "mlm")
    not_squad = tmp_path / "x.json"
    not_squad.write_text('{"rows": []}')
    no_answer_text = tmp_path / "y.json"
    question = {"id": "1", "question": "Where?", "answers": [{"text": "the moon", "answer_start": 0}]}
    no_answer_text.write_text(
        json.dumps({"data": [{"paragraphs": [{"context": "Alpha went home.", "qas": [question]}]}]})
    )
    empty_context = tmp_path / "z.json"
    empty_context.write_text(json.dumps({"data": [{"paragraphs": [{"context": "", "qas": []}]}]}))
    paragraphs_a_number = tmp_path / "w.json"
    paragraphs_a_number.write_text('{"data": [{"paragraphs": 5}]}')
    qa = ["finetune", pretrained, "--task", "qa", "--dev", dev, "--out", tmp_path / "o", "--quiet"]
    predict = ["predict", out, "--input", dev]
    for argv, needle in [
        ([*qa, "--train", paragraphs_a_number], "article 0 has 'paragraphs' a number, not a list"),
        (["predict", out, "--input", paragraphs_a_number], "article 0 has 'paragraphs' a number"),
        ([*predict, "--batch-size", "0"], "--batch-size: '0' is not a whole number of at least 1"),
        ([*predict, "--text-col", "question"], "--text-col: not for a question-answering model"),
        ([*qa, "--train", train, "--max-query-length", "0"], "max_query_length"),
        ([*qa, "--train", not_squad], "not SQuAD JSON"),
        ([*qa, "--train", no_answer_text], "does not occur in its context"),
        ([*qa, "--train", empty_context], "empty context"),
        ([*qa, "--train", train, "--max-seq-len", "1000"], "exceeds the model's 512 positions"),
        ([*qa, "--train", train, "--metric", "accuracy"], "does not apply to qa"),
        (["fill-mask", out / "best", "a [MASK]"], "question_answering checkpoint"),
        (["answer", pretrained, "--question", "q", "--context", "c"], "not a question-answering model"),
        (["finetune", out / "best", "--task", "qa", "--train", train, "--dev", dev], "not a pretraining"),
        (["finetune", pretrained, "--train", train, "--dev", dev], "--text-col and --label-col are required"),
    ]:
        code, _, err = run_cli(capsys, *argv)
        assert code == 2 and len(err.splitlines()) == 1 and needle in err, (argv, err)
    assert not (tmp_path / "o").exists()  # no error left a half-made run behind


def test_qa_refuses_to_read_its_pairs_both_ways():
    """A question and its passage have an order: the library refuses `symmetric_pairs` as the CLI does."""
    from nanobert.finetuning.qa import QATask

    with pytest.raises(NanobertError, match="a question and its passage have an order"):
        QATask().check(QAConfig(symmetric_pairs=True), from_scratch=False)
    QATask().check(QAConfig(symmetric_pairs=False), from_scratch=False)
