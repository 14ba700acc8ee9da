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


def train_tiny_checkpoint(root: Path, steps: int = 3, objective: str = "mlm_nsp") -> Path:
    """A tiny post-LN model trained for a few steps on a generated corpus; returns its best/ checkpoint.
    `objective="causal"` trains the causal next-word model instead.

    Built as `nanobert pretrain --train corpus.txt --max-steps N --set TINY_SET` builds it, through the
    library functions behind that command.
    """
    from nanobert.config import new_run_configs, parse_overrides
    from nanobert.sources import DataSources
    from nanobert.train import pretrain

    root.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus.txt")
    settings = [*TINY_SET, "device=cpu", f"max_steps={steps}", f"objective={objective}"]
    model_over, train_over = parse_overrides(settings)
    model_config, train_config, preset, _ = new_run_configs(None, None, "cpu", model_over, train_over)
    sources = DataSources.for_new_run(train_file=str(corpus))
    pretrain(model_config, train_config, sources, root / "run", preset=preset, quiet=True)
    return root / "run" / "best"
