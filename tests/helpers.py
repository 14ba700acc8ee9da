"""Small corpora the tests write themselves (no network, no ../shared)."""

import random
from pathlib import Path

WORDS = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
    "quebec romeo sierra tango uniform victor whiskey xray yankee zulu red green blue amber olive "
    "silver stone river cloud field forest ocean desert valley mountain"
).split()


def write_corpus(path: Path, n_docs: int = 8, sentences: int = 6, seed: int = 0) -> Path:
    """A WikiText-style file: ` = Title = ` headings, one paragraph of short sentences per document."""
    rng = random.Random(seed)
    lines = []
    for d in range(n_docs):
        lines += [f" = Document {d} = ", ""]
        words = rng.sample(WORDS, 12)  # each document leans on its own words, so NSP is learnable
        sents = [
            " ".join(rng.choice(words) for _ in range(rng.randint(4, 9))).capitalize() + " ."
            for _ in range(sentences)
        ]
        lines += [" " + " ".join(sents), ""]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# Tiny odd-sized model and a short run, for CLI --set.
TINY_SET = [
    "hidden_size=32",
    "num_hidden_layers=2",
    "num_attention_heads=4",
    "intermediate_size=37",
    "vocab_size=120",
    "max_seq_len=48",
    "batch_size=8",
    "eval_interval=5",
    "log_interval=1",
    "eval_batch_size=16",
    # fp32 whatever the CPU: precision auto picks bf16 on CPUs with native bf16, and the tests that compare
    # runs across thread counts or processes need fp32's rounding to stay within their tolerances.
    "precision=fp32",
]


# The deliberately odd tiny model (vocab 99, hidden 32, 4 heads, intermediate 37): no two sizes coincide, so
# shape bugs cannot hide.
TINY_MODEL = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=64,
)


def train_tiny_checkpoint(
    root: Path, steps: int = 3, objective: str = "mlm_nsp", settings: tuple = ()
) -> Path:
    """A tiny post-LN model trained for a few steps on a generated corpus; returns its best/ checkpoint.
    `objective="causal"` trains the causal next-word model instead.

    Built as `nanobert pretrain --train corpus.txt --max-steps N --set TINY_SET` builds it, through the
    library functions behind that command.
    """
    from nanobert.cli.overrides import parse_overrides
    from nanobert.data.sources import DataSources
    from nanobert.pretraining.pretrain import pretrain
    from nanobert.pretraining.recipes import new_run_configs

    root.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus.txt")
    settings = [*TINY_SET, "device=cpu", f"max_steps={steps}", f"objective={objective}", *settings]
    model_over, train_over = parse_overrides(settings)
    model_config, train_config, preset, _ = new_run_configs(None, None, "cpu", model_over, train_over)
    sources = DataSources.for_new_run(train_file=str(corpus))
    pretrain(model_config, train_config, sources, root / "run", preset=preset, quiet=True)
    return root / "run" / "best"


# A generated SQuAD-format task: "NAME went to the PLACE with a COLOR hat ." Questions ask where NAME went
# (PLACE) or what colour the hat was (COLOR); with `no_answer`, "when did NAME go ?" has no answer (2.0).
# `filler` sentences of other words make contexts long enough to need several windows.
QA_NAMES = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()
QA_PLACES = "river forest ocean desert valley mountain field cloud stone harbour".split()
QA_COLORS = "red green blue amber olive silver yellow purple orange black".split()
QA_FILLER = "kilo lima mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray".split()


def squad_task(n: int, seed: int, no_answer: bool = False, filler: int = 0) -> dict:
    rng = random.Random(seed)
    articles = []
    for a in range(n):
        name, place, color = rng.choice(QA_NAMES), rng.choice(QA_PLACES), rng.choice(QA_COLORS)
        sentences = [f"{name.capitalize()} went to the {place} with a {color} hat."]
        for _ in range(filler):
            sentences.insert(rng.randrange(len(sentences) + 1), " ".join(rng.sample(QA_FILLER, 5)) + ".")
        context = " ".join(sentences)
        qas = [
            {"id": f"q{a}-where", "question": f"Where did {name} go?",
             "answers": [{"text": place, "answer_start": context.index(f"the {place} with") + 4}]},
            {"id": f"q{a}-colour", "question": f"What colour was the hat of {name}?",
             "answers": [{"text": color, "answer_start": context.index(f"a {color} hat") + 2}]},
        ]  # fmt: skip
        if no_answer:
            qas.append(
                {"id": f"q{a}-when", "question": f"When did {name} go?", "answers": [], "is_impossible": True}
            )
        articles.append({"title": f"t{a}", "paragraphs": [{"context": context, "qas": qas}]})
    return {"version": "2.0" if no_answer else "1.1", "data": articles}


def write_squad_task(path: Path, n: int, seed: int, **kw) -> Path:
    import json

    path.write_text(json.dumps(squad_task(n, seed, **kw)))
    return path


def qa_checkpoint(root: Path) -> Path:
    """A tiny randomly initialised post-LN checkpoint whose tokenizer knows the QA task's words."""
    import torch

    from nanobert.checkpoints.checkpoint import save_checkpoint
    from nanobert.config import ModelConfig
    from nanobert.model import BertForPreTraining
    from nanobert.tokenizer import train_tokenizer

    texts = [p["context"] for a in squad_task(50, 9, filler=2)["data"] for p in a["paragraphs"]]
    texts += ["Where did go? What colour was the hat of When"] * 5
    tokenizer = train_tokenizer(texts, vocab_size=200, min_frequency=1)
    torch.manual_seed(0)
    config = ModelConfig(**{**TINY_MODEL, "vocab_size": tokenizer.get_vocab_size()})
    return save_checkpoint(root / "pre", BertForPreTraining(config), None, tokenizer)
