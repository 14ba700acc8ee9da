"""The tables build_results.py builds: one per protocol on RESULTS.md, in the page's order, and the README's
"What you get"; each a title, what its figures measure, and its columns with how each is shown.

A record's `results` rows name a table by its key and give its cells (benchmarks/records/README.md).
Only the standard library, as build_results.py.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    key: str  # the name a row's `cells` (or, for a label, the row itself) uses
    header: str
    fmt: str  # "label": text the row gives; otherwise how a raw value is shown (see `show`)


@dataclass(frozen=True)
class Table:
    title: str
    about: str  # what the figures measure, in words, above the table
    columns: tuple[Column, ...]


def label(key: str, header: str) -> Column:
    return Column(key, header, "label")


RUN, MACHINE = label("run", "run"), label("machine", "machine")
# One table per protocol on RESULTS.md, in this order. A record's `results` rows name one by its key.
TABLES: dict[str, Table] = {
    "default-scale": Table(
        "Pretraining at the default size",
        "The size `nanobert pretrain` trains on by default. Offline, the training text is 2.2M words of "
        "Wikipedia (SQuAD v1.1's paragraphs in WikiText's raw layout, a stand-in for WikiText-2's train "
        "split); `best/` is chosen on 48 other articles; the test figures are on WikiText-2's test split "
        "(`wiki.test.raw`) with the fixed held-out masking (15%, 80/10/10, seed 0) and NSP pairs; BLiMP is "
        "the full suite of 67,000 pairs; SST-2 and STS-B are dev figures after fine-tuning with the CLI's "
        "defaults (mean of three fine-tuning seeds).",
        (
            RUN,
            MACHINE,
            Column("steps", "steps", "int"),
            Column("mlm_accuracy", "MLM accuracy", "dec3"),
            Column("mlm_perplexity", "perplexity", "text"),
            Column("nsp_accuracy", "NSP", "dec3"),
            Column("blimp", "BLiMP", "pct1"),
            Column("stsb", "STS-B", "dec3"),
            Column("sst2", "SST-2", "dec3"),
        ),
    ),
    "small": Table(
        "Pretraining on WikiText-2's validation split (the small protocol)",
        "Train on `wiki.valid.tokens` (217k words), choose `best/` on its last 10% of documents, test on "
        "`wiki.test.tokens` with the fixed held-out masking and NSP pairs. Small enough to compare recipes "
        "in minutes; the `wikitext2-cpu` preset was tuned here.",
        (
            RUN,
            MACHINE,
            Column("steps", "steps", "int"),
            Column("mlm_accuracy", "MLM accuracy", "text"),
            Column("mlm_perplexity", "perplexity", "text"),
            Column("nsp_accuracy", "NSP", "text"),
        ),
    ),
    "throughput": Table(
        "Training speed",
        "Tokens per second of one training step (forward, backward, AdamW), nanobert against transformers' "
        "`BertForPreTraining` with the same config, batches, precision and optimizer, taking turns in one "
        "process (`benchmarks/throughput.py`). The share of peak is useful FLOPs per second over the "
        "machine's measured matrix-multiply peak (a CPU) or its dense bf16 peak (a GPU).",
        (
            RUN,
            MACHINE,
            Column("nanobert_tokens_per_s", "nanobert tokens/s", "int"),
            Column("transformers_tokens_per_s", "transformers tokens/s", "int"),
            Column("ratio", "ratio", "x2"),
            Column("peak_share", "nanobert's share of peak", "pct1"),
        ),
    ),
    "scoring": Table(
        "Sentence scoring speed",
        "BLiMP sentences scored by pseudo-log-likelihood from one checkpoint, nanobert's batched scorer "
        "against transformers' `BertForMaskedLM` one sentence at a time, as the usual scoring libraries do "
        "(`benchmarks/score_speed.py`).",
        (
            RUN,
            MACHINE,
            Column("seconds", "seconds", "text"),
            Column("sentences_per_s", "sentences/s", "int"),
            Column("speedup", "speed-up", "x1"),
        ),
    ),
    "data": Table(
        "Data preparation",
        "Time and memory to turn text into training batches (`benchmarks/data_pipeline.py`, "
        "`benchmarks/prepare_scale.py`).",
        (
            RUN,
            MACHINE,
            Column("words", "words", "text"),
            Column("seconds", "seconds", "text"),
            Column("peak_memory_mib", "peak memory (MiB)", "int"),
        ),
    ),
    "fine-tuning": Table(
        "Fine-tuning",
        "Dev figures (TREC-6: its 500 test questions), the mean of three fine-tuning seeds unless the row "
        "says otherwise, against the same architecture and tokenizer trained from random weights with the "
        "same budget.",
        (
            label("task", "task"),
            RUN,
            MACHINE,
            Column("pretrained", "pretrained", "dec3"),
            Column("random", "from random weights", "dec3"),
        ),
    ),
    "qa": Table(
        "Question answering",
        "SQuAD v1.1: fine-tune on its training questions, score on its 10,570 dev questions and on XQuAD-en "
        "(1,190 of them, with their original offsets); the pretrained encoder against the same architecture "
        "from random weights with the same budget (`benchmarks/squad.py`).",
        (
            RUN,
            MACHINE,
            Column("dev_f1", "dev F1", "text"),
            Column("dev_f1_random", "from random weights", "text"),
            Column("xquad_f1", "XQuAD-en F1", "text"),
            Column("xquad_f1_random", "from random weights", "text"),
        ),
    ),
    "objectives": Table(
        "BERT, GPT and the hybrid",
        "The three objectives with the same shape, recipe, tokenizer and CPU time on the small protocol, "
        "scored on the same held-out positions of `wiki.test.tokens` (the ones the fixed 15% masking "
        "chooses); next-word perplexity on the same windows (`benchmarks/bert_vs_gpt.py`).",
        (
            RUN,
            MACHINE,
            Column("accuracy", "masked-word accuracy", "dec3"),
            Column("first_word", "first word", "dec3"),
            Column("last_word", "last word", "dec3"),
            Column("next_word_perplexity", "next-word perplexity", "text"),
            Column("blimp", "BLiMP", "pct1"),
        ),
    ),
    "published": Table(
        "Published yardsticks",
        "Figures others published, for scale; not measured here.",
        (RUN, Column("where", "source", "text"), Column("value", "figure", "text")),
    ),
}
WHAT_YOU_GET = Table(
    "What you get",
    "",
    (
        RUN,
        MACHINE,
        Column("budget_s", "minutes", "min"),
        Column("steps", "steps", "int"),
        Column("mlm_accuracy", "MLM accuracy", "dec3"),
        Column("nsp_accuracy", "NSP", "dec3"),
        Column("stsb", "STS-B", "dec3"),
        Column("stsb_scratch", "STS-B, untrained start", "dec3"),
        Column("blimp", "BLiMP", "pct1"),
        Column("sst2", "SST-2", "dec3"),
    ),
)


__all__ = ["TABLES", "WHAT_YOU_GET", "Column", "Table", "label"]
