"""BLiMP: which of two sentences is English? A grammar yardstick shared by the field, for BERT and GPT alike.

BLiMP (Warstadt et al. 2020, "BLiMP: The Benchmark of Linguistic Minimal Pairs for English") holds 67
paradigms of 1,000 minimal pairs each ("The cats sleep." / "The cats sleeps."), grouped into 13 phenomena
(the release's `linguistics_term`; the paper's table counts 12, with the two s-selection paradigms under
argument structure) and four fields. A model passes a pair when it scores the grammatical sentence higher,
with no fine-tuning (`scoring.score_sentences`: pseudo-log-likelihood for a masked model, log-likelihood for a
causal one); a tie fails, since a model that scores both alike has not told them apart. Accuracies are means
over paradigms, the paper's convention (on the full suite, the same as over pairs), for the whole suite, each
field and each phenomenon.

BabyLM's filter (`--vocab-from CORPUS`) keeps only the pairs whose words all occur at least twice in the
training text, so that a small model is not judged on words it never saw; its figure is reported beside the
full one, never instead of it.

Sources: a directory of the release's JSONL files (one per paradigm, github.com/alexwarstadt/blimp `data/`),
one such file, or the Hugging Face copy `nyu-mll/blimp` (downloaded with `datasets`, like WikiText).
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from nanobert.data.corpus import check_text_file, hub_reachable, load_documents, load_hf_dataset, utf8_lines
from nanobert.errors import NanobertError
from nanobert.use.plots import plot_blimp
from nanobert.use.scoring import DEFAULT_BATCH_TOKENS, RULE_NAMES, check_rule, score_sentences

BLIMP_HUB = "nyu-mll/blimp"
# The 67 paradigms: the release's file names and the hub's configuration names.
PARADIGMS = tuple(
    """adjunct_island anaphor_gender_agreement anaphor_number_agreement animate_subject_passive
    animate_subject_trans causative complex_NP_island coordinate_structure_constraint_complex_left_branch
    coordinate_structure_constraint_object_extraction determiner_noun_agreement_1 determiner_noun_agreement_2
    determiner_noun_agreement_irregular_1 determiner_noun_agreement_irregular_2
    determiner_noun_agreement_with_adj_2 determiner_noun_agreement_with_adj_irregular_1
    determiner_noun_agreement_with_adj_irregular_2 determiner_noun_agreement_with_adjective_1
    distractor_agreement_relational_noun distractor_agreement_relative_clause drop_argument ellipsis_n_bar_1
    ellipsis_n_bar_2 existential_there_object_raising existential_there_quantifiers_1
    existential_there_quantifiers_2 existential_there_subject_raising expletive_it_object_raising inchoative
    intransitive irregular_past_participle_adjectives irregular_past_participle_verbs
    irregular_plural_subject_verb_agreement_1 irregular_plural_subject_verb_agreement_2
    left_branch_island_echo_question left_branch_island_simple_question matrix_question_npi_licensor_present
    npi_present_1 npi_present_2 only_npi_licensor_present only_npi_scope passive_1 passive_2
    principle_A_c_command principle_A_case_1 principle_A_case_2 principle_A_domain_1 principle_A_domain_2
    principle_A_domain_3 principle_A_reconstruction regular_plural_subject_verb_agreement_1
    regular_plural_subject_verb_agreement_2 sentential_negation_npi_licensor_present
    sentential_negation_npi_scope sentential_subject_island superlative_quantifiers_1
    superlative_quantifiers_2 tough_vs_raising_1 tough_vs_raising_2 transitive wh_island
    wh_questions_object_gap wh_questions_subject_gap wh_questions_subject_gap_long_distance wh_vs_that_no_gap
    wh_vs_that_no_gap_long_distance wh_vs_that_with_gap wh_vs_that_with_gap_long_distance""".split()
)
# Mean accuracy over the 67 paradigms, from the BLiMP repository's raw_results/summary/models_summary.jsonl
# (the 5-gram, LSTM and Transformer-XL trained on WikiText-103; GPT-2 on WebText). Chance is 50.
PUBLISHED = {"5-gram": 61.2, "LSTM": 69.8, "Transformer-XL": 69.6, "GPT-2": 83.0}
REQUIRED_FIELDS = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID")
MIN_WORD_COUNT = 2  # BabyLM's filter: every word of a pair seen at least twice in the training text
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    paradigm: str  # UID, e.g. "adjunct_island"
    field: str  # morphology, syntax, semantics or syntax_semantics
    phenomenon: str  # linguistics_term, e.g. "island_effects"


@dataclass
class Accuracies:
    """Accuracy (0..1) of one set of pairs: overall, by field, by phenomenon and by paradigm; means over
    paradigms (each paradigm's share of pairs passed)."""

    pairs: int
    overall: float
    fields: dict[str, float]
    phenomena: dict[str, float]
    paradigms: dict[str, float]
    ties: int  # pairs scored exactly alike, counted as failures


@dataclass
class BlimpReport:
    rule: str  # the scoring rule (scoring.RULE_*)
    full: Accuracies
    filtered: Accuracies | None = None  # the pairs whose words the training corpus holds (--vocab-from)
    dropped_paradigms: list[str] = field(default_factory=list)  # paradigms with no pair left by the filter
    seconds: float = 0.0  # time spent scoring

    def __repr__(self) -> str:
        extra = f", filtered {self.filtered.overall:.1%}" if self.filtered else ""
        return f"BlimpReport({self.full.overall:.1%} on {self.full.pairs:,} pairs{extra}, {self.rule})"


def _pair_from_row(row: object, where: str) -> MinimalPair:
    if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in REQUIRED_FIELDS):
        raise NanobertError(
            f"{where} is not a BLiMP pair (a JSON object with the text fields {', '.join(REQUIRED_FIELDS)}); "
            "pass the release's data/ folder or one of its .jsonl files"
        )
    if not row["sentence_good"].strip() or not row["sentence_bad"].strip():
        raise NanobertError(f"{where} has an empty sentence; every pair needs two sentences")
    # One paradigm of the release writes its field "syntax/semantics", the others "syntax_semantics".
    field_name = row["field"].replace("/", "_")
    return MinimalPair(
        row["sentence_good"], row["sentence_bad"], row["UID"], field_name, row["linguistics_term"]
    )


def read_blimp_file(path: str | Path, limit: int | None = None) -> list[MinimalPair]:
    """The pairs of one paradigm's JSONL file (the first `limit` of them); NanobertError for a file that is
    not BLiMP JSONL or holds no pair."""
    path = check_text_file(path)
    pairs = []
    for number, line in enumerate(utf8_lines(path), 1):
        if limit is not None and len(pairs) >= limit:
            break
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, an integer over Python's digit limit, deep nesting
            raise NanobertError(f"{path} line {number} is not JSON; pass a BLiMP .jsonl file") from None
        pairs.append(_pair_from_row(row, f"{path} line {number}"))
    if not pairs:
        raise NanobertError(f"{path} holds no BLiMP pair; pass a BLiMP .jsonl file")
    return pairs


def _from_hub(limit: int | None) -> list[MinimalPair]:
    advice = "pass the release's data/ folder (github.com/alexwarstadt/blimp) with --data DIR"
    online = hub_reachable()  # once, not 67 times
    pairs = []
    for paradigm in PARADIGMS:
        rows = load_hf_dataset(BLIMP_HUB, paradigm, "train", advice, online)
        rows = rows.select(range(min(limit, len(rows)))) if limit is not None else rows
        pairs += [_pair_from_row(row, f"{BLIMP_HUB} {paradigm} row {i}") for i, row in enumerate(rows)]
    return pairs


def load_blimp(source: str | Path = BLIMP_HUB, limit: int | None = None) -> list[MinimalPair]:
    """Minimal pairs from a directory of BLiMP JSONL files (every `*.jsonl` in it), one such file, or the
    hub copy (`BLIMP_HUB`); with `limit`, the first `limit` pairs of each paradigm (of each file: the
    release keeps one paradigm a file)."""
    if limit is not None and limit < 1:
        raise NanobertError(f"the limit is pairs per paradigm, at least 1, not {limit}")
    if str(source) == BLIMP_HUB and not Path(source).exists():
        return _from_hub(limit)
    path = Path(source)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise NanobertError(f"{path} has no .jsonl files; pass BLiMP's data/ folder or one of its files")
        return [pair for f in files for pair in read_blimp_file(f, limit)]
    if not path.exists():
        raise NanobertError(
            f"no such BLiMP data: {path} (a folder of .jsonl files, one file, or {BLIMP_HUB})"
        )
    return read_blimp_file(path, limit)


def words(text: str) -> list[str]:
    """The lowercase words of a text (runs of letters, digits and underscores), as the filter counts them."""
    return _WORD.findall(text.lower())


def corpus_word_counts(corpus: str | Path) -> Counter:
    """How often each word occurs in a corpus (any source `nanobert pretrain --data` takes)."""
    counts: Counter = Counter()
    for document in load_documents(corpus):
        for sentence in document:
            counts.update(words(sentence))
    return counts


def known_pairs(pairs: Iterable[MinimalPair], counts: Counter, min_count: int = MIN_WORD_COUNT) -> list:
    """The pairs whose every word (in both sentences) occurs at least `min_count` times in `counts`."""
    return [p for p in pairs if all(counts[w] >= min_count for w in words(f"{p.good} {p.bad}"))]


def accuracies(pairs: list[MinimalPair], passed: list[bool], tied: list[bool]) -> Accuracies:
    """Means over paradigms of the share of pairs passed, overall and within each field and phenomenon."""
    by_paradigm: dict[str, list[bool]] = defaultdict(list)
    for pair, ok in zip(pairs, passed, strict=True):
        by_paradigm[pair.paradigm].append(ok)
    paradigm_acc = {name: sum(oks) / len(oks) for name, oks in sorted(by_paradigm.items())}
    group_of = {p.paradigm: (p.field, p.phenomenon) for p in pairs}
    fields, phenomena = defaultdict(list), defaultdict(list)
    for name, acc in paradigm_acc.items():
        fields[group_of[name][0]].append(acc)
        phenomena[group_of[name][1]].append(acc)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    return Accuracies(
        pairs=len(pairs),
        overall=mean(list(paradigm_acc.values())),
        fields={k: mean(v) for k, v in sorted(fields.items())},
        phenomena={k: mean(v) for k, v in sorted(phenomena.items())},
        paradigms=paradigm_acc,
        ties=sum(tied),
    )


def score_pairs(
    model,
    tokenizer,
    pairs: list[MinimalPair],
    rule: str | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: Callable[[int], None] | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[list[bool], list[bool]]:
    """(whether each pair's good sentence scored strictly higher, whether the two scored exactly alike).
    Each distinct sentence is scored once, however many pairs share it."""
    texts = list(dict.fromkeys(s for p in pairs for s in (p.good, p.bad)))
    scores = score_sentences(model, tokenizer, texts, rule, batch_tokens, progress, dtype)
    total = {text: s.total for text, s in zip(texts, scores, strict=True)}
    passed = [total[p.good] > total[p.bad] for p in pairs]
    tied = [total[p.good] == total[p.bad] for p in pairs]
    return passed, tied


def evaluate_blimp(
    model,
    tokenizer,
    pairs: list[MinimalPair],
    rule: str | None = None,
    vocab_counts: Counter | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: bool = False,
    dtype: torch.dtype | None = None,
) -> BlimpReport:
    """Score every pair; with `vocab_counts` (`corpus_word_counts`), also the pairs BabyLM's filter keeps.
    `progress` shows a bar on stderr; `dtype` is the dtype to score in (None: fp32; `scoring_precision`).
    NanobertError when the filter leaves no pair at all."""
    rule = check_rule(model, rule)
    if not pairs:
        raise NanobertError("no BLiMP pairs to score")
    keep = None
    if vocab_counts is not None:  # before the scoring, which the filter does not depend on
        keep = [i for i, p in enumerate(pairs) if known_pairs([p], vocab_counts)]
        if not keep:
            raise NanobertError(
                "no BLiMP pair has all its words at least twice in --vocab-from's corpus; "
                "give the corpus the model was trained on, or leave --vocab-from out"
            )
    start = time.perf_counter()
    sentences = len({s for p in pairs for s in (p.good, p.bad)})
    with tqdm(total=sentences, unit="sentence", disable=not progress, file=sys.stderr) as bar:
        passed, tied = score_pairs(model, tokenizer, pairs, rule, batch_tokens, bar.update, dtype)
    report = BlimpReport(rule, accuracies(pairs, passed, tied), seconds=time.perf_counter() - start)
    if keep is not None:
        report.filtered = accuracies(
            [pairs[i] for i in keep], [passed[i] for i in keep], [tied[i] for i in keep]
        )
        report.dropped_paradigms = sorted({p.paradigm for p in pairs} - set(report.filtered.paradigms))
    return report


def format_report(report: BlimpReport) -> str:
    """`nanobert blimp`'s text: overall, by field and by phenomenon, with the filtered column when there is
    one, and the published figures to compare with."""
    full, kept = report.full, report.filtered
    paradigms = len(full.paradigms)
    lines = [
        f"BLiMP: {full.pairs:,} pairs in {paradigms} paradigms, scored in {report.seconds:.0f} s",
        f"rule: {RULE_NAMES[report.rule]}",
        "accuracy = mean over paradigms of the share of pairs whose good sentence scores higher (ties fail)",
        "",
    ]
    header = f"{'':34s} {'all pairs':>10s}"
    if kept is not None:
        header += f"  {'known words':>11s}"
    lines.append(header)

    def row(name: str, value: float, kept_value: float | None) -> str:
        text = f"{name:34s} {value:10.1%}"
        if kept is not None:
            text += f"  {kept_value:11.1%}" if kept_value is not None else f"  {'-':>11s}"
        return text

    lines.append(row("overall", full.overall, kept.overall if kept else None))
    for title, full_groups, kept_groups in (
        ("field", full.fields, kept.fields if kept else {}),
        ("phenomenon", full.phenomena, kept.phenomena if kept else {}),
    ):
        lines.append(title)
        lines += [row(f"  {k}", v, kept_groups.get(k)) for k, v in full_groups.items()]
    if kept is not None:
        lines.append(
            f"known words: the {kept.pairs:,} pairs whose words all occur at least twice in the corpus"
        )
        if report.dropped_paradigms:
            lines.append(f"  (no pair left in: {', '.join(report.dropped_paradigms)})")
    if full.ties:
        lines.append(f"ties: {full.ties:,} pairs scored exactly alike, counted as failures")
    others = ", ".join(f"{k} {v:.1f}" for k, v in PUBLISHED.items())
    lines.append(f"published (full suite): {others}; chance 50.0")
    return "\n".join(lines)


def plot_report(report: BlimpReport, out_path: str | Path) -> Path:
    """The bar chart of `format_report`: one bar per phenomenon, the published figures as lines."""
    filtered = None
    if report.filtered is not None:
        filtered = {"overall": report.filtered.overall, **report.filtered.phenomena}
    return plot_blimp(
        report.full.phenomena,
        report.full.overall,
        out_path,
        PUBLISHED,
        filtered,
        title=RULE_NAMES[report.rule],
    )


__all__ = [
    "BLIMP_HUB",
    "PARADIGMS",
    "PUBLISHED",
    "Accuracies",
    "BlimpReport",
    "MinimalPair",
    "accuracies",
    "corpus_word_counts",
    "evaluate_blimp",
    "format_report",
    "known_pairs",
    "load_blimp",
    "plot_report",
    "read_blimp_file",
    "score_pairs",
    "words",
]
