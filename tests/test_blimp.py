"""BLiMP: reading the release's JSONL (and the hub copy), accuracies by field and phenomenon with ties as
failures, BabyLM's vocabulary filter, the `blimp` and `score` commands, and agreement with transformers."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from helpers import train_tiny_checkpoint

from nanobert.cli import main
from nanobert.errors import NanobertError
from nanobert.use.blimp import (
    BLIMP_HUB,
    PARADIGMS,
    MinimalPair,
    accuracies,
    corpus_word_counts,
    evaluate_blimp,
    known_pairs,
    load_blimp,
    words,
)
from nanobert.use.inference import load
from nanobert.use.scoring import RULE_ORIGINAL, RULE_WITHIN_WORD, score_sentences

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def row(good: str, bad: str, uid: str, field: str = "syntax", term: str = "agreement") -> dict:
    return {"sentence_good": good, "sentence_bad": bad, "field": field, "linguistics_term": term, "UID": uid}


def write_paradigm(folder: Path, uid: str, rows: list[dict]) -> Path:
    path = folder / f"{uid}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def blimp_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("blimp")
    write_paradigm(
        folder,
        "agreement_1",
        [row("Alpha bravo charlie .", "Alpha bravos charlie .", "agreement_1") for _ in range(2)]
        + [row("Delta echo .", "Echo delta .", "agreement_1")],
    )
    write_paradigm(
        folder,
        "island_1",
        [row("Golf hotel india .", "Golf india hotel .", "island_1", "syntax/semantics", "island")] * 3,
    )
    return folder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return train_tiny_checkpoint(tmp_path_factory.mktemp("blimp-bert"), steps=3)


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def test_reads_a_folder_a_file_and_a_limit(blimp_dir):
    pairs = load_blimp(blimp_dir)
    assert len(pairs) == 6 and {p.paradigm for p in pairs} == {"agreement_1", "island_1"}
    assert pairs[0] == MinimalPair(
        "Alpha bravo charlie .", "Alpha bravos charlie .", "agreement_1", "syntax", "agreement"
    )
    assert {p.field for p in pairs if p.paradigm == "island_1"} == {"syntax_semantics"}  # "/" written "_"
    assert len(load_blimp(blimp_dir, limit=1)) == 2
    assert len(load_blimp(blimp_dir / "island_1.jsonl")) == 3


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json\n", "line 1 is not JSON"),
        ('{"sentence_good": "a ."}\n', "not a BLiMP pair"),
        ('["a", "b"]\n', "not a BLiMP pair"),
        (json.dumps(row("", "b .", "x")) + "\n", "empty sentence"),
        ("\n\n", "holds no BLiMP pair"),
        ("[" * 100_000 + "\n", "line 1 is not JSON"),  # nesting past Python's recursion limit
        ("1" * 5000 + "\n", "line 1 is not JSON"),  # an integer past Python's digit limit
    ],
)
def test_a_file_that_is_not_blimp_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(NanobertError, match=message):
        load_blimp(path)


def test_missing_and_empty_sources(tmp_path):
    with pytest.raises(NanobertError, match="no such BLiMP data"):
        load_blimp(tmp_path / "missing")
    with pytest.raises(NanobertError, match="no .jsonl files"):
        load_blimp(tmp_path)
    with pytest.raises(NanobertError, match="at least 1"):
        load_blimp(tmp_path, limit=0)


def test_the_hub_copy_is_read_paradigm_by_paradigm(monkeypatch):
    datasets = pytest.importorskip("datasets")
    calls = []

    def fake_load_dataset(path, name, split):
        calls.append((path, name, split))
        return datasets.Dataset.from_dict({k: [v] * 3 for k, v in row("A b .", "B a .", name).items()})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setattr("nanobert.use.blimp.hub_reachable", lambda: True)
    pairs = load_blimp(BLIMP_HUB, limit=2)
    assert calls == [(BLIMP_HUB, name, "train") for name in PARADIGMS] and len(PARADIGMS) == 67
    assert len(pairs) == 2 * 67 and pairs[0].paradigm == PARADIGMS[0]


def pair(uid: str, field: str, term: str) -> MinimalPair:
    return MinimalPair("good .", "bad .", uid, field, term)


def test_accuracies_are_means_over_paradigms_and_ties_fail():
    pairs = (
        [pair("p1", "syntax", "t1")] * 4 + [pair("p2", "syntax", "t2")] * 2 + [pair("p3", "semantics", "t2")]
    )
    passed = [True, True, True, False, True, False, False]
    tied = [False, False, False, True, False, False, True]  # a tie is not a pass
    acc = accuracies(pairs, passed, tied)
    assert acc.paradigms == {"p1": 0.75, "p2": 0.5, "p3": 0.0}
    assert acc.overall == pytest.approx((0.75 + 0.5 + 0.0) / 3)  # not 4/7, the share of pairs
    assert acc.fields == {"semantics": 0.0, "syntax": pytest.approx(0.625)}
    assert acc.phenomena == {"t1": 0.75, "t2": 0.25}
    assert acc.pairs == 7 and acc.ties == 2


def test_a_pair_scored_alike_counts_as_a_failure(checkpoint, blimp_dir):
    m = load(checkpoint)
    same = [MinimalPair("Alpha bravo .", "Alpha bravo .", "p", "syntax", "t")]
    report = evaluate_blimp(m.model, m.tokenizer, same)
    assert report.full.overall == 0.0 and report.full.ties == 1


def test_no_pairs_is_an_error_not_a_division_by_zero(checkpoint):
    m = load(checkpoint)
    with pytest.raises(NanobertError, match="no BLiMP pairs"):
        evaluate_blimp(m.model, m.tokenizer, [])


def test_the_vocabulary_filter_keeps_pairs_whose_words_occur_twice(tmp_path):
    assert words("The cat's 2 mats.") == ["the", "cat", "s", "2", "mats"]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" = T = \n\n the cat sat . the cat sat on a mat . a dog .\n")
    counts = corpus_word_counts(corpus)
    assert counts["cat"] == 2 and counts["mat"] == 1
    kept = MinimalPair("The cat sat.", "The cat sat the.", "p", "f", "t")
    seen_once = MinimalPair("The cat sat.", "The mat sat.", "p", "f", "t")
    assert known_pairs([kept, seen_once], counts) == [kept]


def test_a_filter_that_leaves_nothing_is_one_line(checkpoint, blimp_dir, tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "other.txt"
    corpus.write_text("zulu yankee xray . zulu yankee xray .\n")

    def tripwire(*args, **kwargs):
        raise AssertionError("scored before finding that the filter keeps nothing")

    monkeypatch.setattr("nanobert.use.blimp.score_pairs", tripwire)
    code, out, err = run_cli(
        capsys, "blimp", checkpoint, "--data", blimp_dir, "--vocab-from", corpus, "--quiet"
    )
    assert code == 2 and out == "" and err.startswith("nanobert: error: no BLiMP pair has all its words")
    assert len(err.splitlines()) == 1


def test_the_blimp_command(checkpoint, blimp_dir, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("alpha bravo charlie delta echo . alpha bravo charlie delta echo .\n")
    plot = tmp_path / "blimp.png"
    argv = ["blimp", checkpoint, "--data", blimp_dir, "--vocab-from", corpus, "--plot", plot, "--quiet"]
    code, out, _ = run_cli(capsys, *argv, "--json")
    assert code == 0
    report = json.loads(out)
    assert report["rule"] == RULE_WITHIN_WORD and report["full"]["pairs"] == 6
    assert set(report["full"]["fields"]) == {"syntax", "syntax_semantics"}
    assert set(report["full"]["phenomena"]) == {"agreement", "island"}
    # "bravos" (a bad sentence's word) and golf, hotel, india are not in the corpus: one pair is left
    assert report["filtered"]["pairs"] == 1 and report["dropped_paradigms"] == ["island_1"]
    assert plot.stat().st_size > 1000
    code, out, _ = run_cli(capsys, *argv[:-3], "--rule", "original")  # the text, without the filter
    assert code == 0 and "phenomenon" in out and "published (full suite): 5-gram 61.2" in out
    assert "pseudo-log-likelihood, one piece masked at a time" in out


def test_blimp_bad_input_is_one_line(checkpoint, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"x": 1}\n')
    for argv in (
        ["blimp", checkpoint, "--data", bad],
        ["blimp", checkpoint, "--data", tmp_path / "missing"],
        ["blimp", checkpoint, "--data", bad, "--limit", "0"],
        ["blimp", tmp_path, "--data", bad],
    ):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("nanobert: error:")


def test_the_score_command(checkpoint, capsys):
    code, out, _ = run_cli(capsys, "score", checkpoint, "Alpha bravo .", "Bravo alpha .", "--json")
    assert code == 0
    data = json.loads(out)
    comparison = load(checkpoint).compare("Alpha bravo .", "Bravo alpha .")
    # the command scores each sentence on its own, compare() both in one batch: the same to float rounding
    assert data["preferred"] == comparison.preferred
    assert data["margin"] == pytest.approx(comparison.margin, abs=1e-5)
    totals = [s["total"] for s in data["sentences"]]
    assert totals == pytest.approx([comparison.a.total, comparison.b.total], abs=1e-5)
    code, out, _ = run_cli(capsys, "score", checkpoint, "Alpha bravo .")
    assert code == 0 and "log-likelihood" in out and "prefers" not in out
    code, out, _ = run_cli(capsys, "score", checkpoint, "Alpha bravo .", "Bravo alpha .")
    assert f"the model prefers {comparison.preferred} by {data['margin']:.2f} nats" in out
    for argv in (["   "], ["Alpha .", ""], ["Alpha .", "--rule", "causal"], ["Alpha [MASK] bravo ."]):
        code, out, err = run_cli(capsys, "score", checkpoint, *argv)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, err


@pytest.fixture(scope="module")
def bench():
    """benchmarks/score_speed.py, whose transformers scorer is the way the usual libraries score."""
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("score_speed", BENCHMARKS / "score_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_exported_transformers_model_gives_the_same_scores(checkpoint, blimp_dir, tmp_path, bench):
    m = load(checkpoint)
    hf, tokenizer = bench.transformers_model(checkpoint, causal=False, out=tmp_path / "hf")
    texts = [s for p in load_blimp(blimp_dir) for s in (p.good, p.bad)]
    for rule in (RULE_WITHIN_WORD, RULE_ORIGINAL):
        ours = [s.total for s in score_sentences(m.model, m.tokenizer, texts, rule)]
        assert bench.library_scores(hf, tokenizer, texts, rule) == pytest.approx(ours, abs=1e-4)


def test_the_exported_causal_model_gives_the_same_scores(tmp_path, blimp_dir, bench):
    checkpoint = train_tiny_checkpoint(tmp_path / "gpt", steps=2, objective="causal")
    m = load(checkpoint)
    hf, tokenizer = bench.transformers_model(checkpoint, causal=True, out=tmp_path / "hf")
    texts = [s for p in load_blimp(blimp_dir) for s in (p.good, p.bad)]
    ours = [s.total for s in score_sentences(m.model, m.tokenizer, texts)]
    with torch.no_grad():
        assert bench.library_scores(hf, tokenizer, texts, "causal") == pytest.approx(ours, abs=1e-4)


def test_the_cli_spells_the_library_constants():
    """cli/use.py writes them out (it imports the library only when a command runs): they must not drift."""
    from nanobert.cli import build_parser
    from nanobert.use.scoring import DEFAULT_BATCH_TOKENS, MASKED_RULES

    parser = build_parser()
    args = parser.parse_args(["blimp", "CKPT"])
    assert args.data == BLIMP_HUB and args.batch_tokens == DEFAULT_BATCH_TOKENS and args.precision == "fp32"
    commands = parser._subparsers._group_actions[0].choices
    for name in ("score", "blimp"):
        (rule,) = [a for a in commands[name]._actions if a.dest == "rule"]
        assert tuple(rule.choices) == MASKED_RULES
