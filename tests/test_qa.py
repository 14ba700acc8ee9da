"""Question answering end to end on a generated SQuAD-format task: learned, predicted, answered, exported."""

import json

import pytest
import torch
from helpers import qa_checkpoint, squad_task, train_tiny_checkpoint, write_squad_task

from nanobert.cli import main
from nanobert.config import QAConfig
from nanobert.errors import NanobertError
from nanobert.qa import finetune_qa, load_qa_model


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


def test_the_qa_checkpoint_exports_as_bert_for_question_answering(tuned, tmp_path):
    transformers = pytest.importorskip("transformers")
    from nanobert.checkpoint import load_qa
    from nanobert.hf_export import export_hf

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
    qa = ["finetune", pretrained, "--task", "qa", "--dev", dev, "--out", tmp_path / "o", "--quiet"]
    for argv, needle in [
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
