"""A checkpoint written before the package moved into role folders still serves every command.

tests/fixtures/checkpoint-v0 holds step 6 of a 12-step toy run written at commit cbe7310, with what that code
answered about it (expected.json, see the fixture's README). Today's code must load it and give the same
fill-mask probabilities, held-out metrics and sentence scores, export it to transformers with the same
numbers, and resume it to the same step-12 metrics, each through the CLI that users run.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from nanobert.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint-v0"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
TOLERANCE = dict(rel=1e-4, abs=1e-5)  # other CPUs round a little differently; a wrong weight moves far more

pytestmark = pytest.mark.usefixtures("one_thread")


def cli_json(capsys, *argv) -> dict:
    code = main([*argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.fixture
def run_copy(tmp_path) -> Path:
    """The fixture's run in a scratch folder, so that nothing a test writes lands in the repository."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "checkpoint-v0"))


def test_fill_mask(capsys):
    expected = EXPECTED["fill_mask"]
    got = cli_json(capsys, "fill-mask", str(FIXTURE / "last"), expected["text"], "--json", "--top-k", "3")
    assert got["tokens"] == expected["tokens"]
    candidates = got["masks"][0]["candidates"]
    assert [c["token"] for c in candidates] == [token for token, _ in expected["candidates"]]
    assert [c["probability"] for c in candidates] == pytest.approx(
        [p for _, p in expected["candidates"]], **TOLERANCE
    )


def test_evaluate(capsys):
    got = cli_json(capsys, "evaluate", str(FIXTURE / "last"), "--data", "toy")
    assert got == pytest.approx(EXPECTED["evaluate"], **TOLERANCE)


def test_score(capsys):
    expected = EXPECTED["score"]
    got = cli_json(capsys, "score", str(FIXTURE / "last"), *expected["sentences"], "--json")
    assert [s["total"] for s in got["sentences"]] == pytest.approx(expected["totals"], **TOLERANCE)
    assert got["preferred"] == expected["preferred"]


def test_export_hf_gives_the_same_masked_word_probabilities(capsys, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    cli_json(capsys, "export-hf", str(FIXTURE / "last"), str(out), "--json")
    expected = EXPECTED["fill_mask"]
    tokenizer = transformers.BertTokenizerFast.from_pretrained(out)
    model = transformers.BertForPreTraining.from_pretrained(out).eval()
    batch = tokenizer(expected["text"], return_tensors="pt")
    assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0]) == expected["tokens"]
    with torch.no_grad():
        logits = model(**batch).prediction_logits[0, expected["tokens"].index("[MASK]")]
    top = torch.softmax(logits, dim=-1).topk(3)
    assert tokenizer.convert_ids_to_tokens(top.indices) == [token for token, _ in expected["candidates"]]
    assert top.values.tolist() == pytest.approx([p for _, p in expected["candidates"]], **TOLERANCE)


def test_resume_reaches_the_same_step_12(capsys, run_copy, tmp_path):
    out = tmp_path / "resumed"
    code = main(["pretrain", "--resume", str(run_copy / "last"), "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == EXPECTED["resume"]["max_steps"]
    assert summary["final"] == pytest.approx(EXPECTED["resume"]["final"], **TOLERANCE)
    earlier = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in earlier if r["split"] == "valid"] == [
        3,
        6,
        9,
        12,
    ]  # the run's records came along


@pytest.mark.parametrize("objective", ["causal", "hybrid"])
def test_a_causal_or_hybrid_checkpoint_from_before_the_move_evaluates_the_same(capsys, objective):
    """The causal and hybrid models moved from model.py to causal_model.py; a checkpoint of either kind
    written before the move (tests/fixtures/OBJECTIVE-v1, see its README) loads by its kind and gives the
    held-out metrics that code gave."""
    fixture = Path(__file__).parent / "fixtures" / f"{objective}-v1"
    expected = json.loads((fixture / "expected.json").read_text())
    got = cli_json(capsys, "evaluate", str(fixture), "--device", "cpu")
    assert got == pytest.approx(expected, **TOLERANCE)
