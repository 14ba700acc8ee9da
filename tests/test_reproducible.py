"""The same command, the same model: a seed reproduces a run in any process.

Every test here trains in fresh processes, each with its own hash seeds (Python's and the Rust tokenizer
trainer's), because that is where a run once went astray: Hugging Face's WordPiece trainer numbered its `##`
pieces in hash-map order and broke ties between equally frequent merges by those numbers, so on a small
corpus two processes trained two vocabularies from one command.
"""

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

from helpers import write_corpus

# One child: train the tokenizer as `nanobert pretrain --train FILE` does, print vocab.txt's SHA-1.
TRAIN_VOCAB = """
import sys
from nanobert.data.corpus import load_documents
from nanobert.tokenizer import tokenizer_digest, train_tokenizer
documents = load_documents(sys.argv[1])
tokenizer = train_tokenizer([s for d in documents for s in d], int(sys.argv[2]), int(sys.argv[3]))
print(tokenizer_digest(tokenizer))
"""


def in_fresh_processes(n: int, *args: str) -> list[str]:
    """The last stdout line of `n` fresh Python processes running `args`."""
    outputs = []
    for _ in range(n):
        result = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout.strip().splitlines()[-1])
    return outputs


def write_prose(path: Path, lines: int = 300, seed: int = 0) -> Path:
    """A few hundred lines of made-up words with a long tail, so that the trainer runs out of merges before
    8,192 pieces and meets many equally frequent pairs on the way, as a user's small file does."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(3000)]
    weights = [1 / (rank + 1) for rank in range(len(words))]  # Zipf: a few words often, most once or twice
    text = []
    for i in range(lines):
        if i % 40 == 0:
            text += [f" = Section {i // 40} = ", ""]
        sentence = " ".join(rng.choices(words, weights, k=rng.randint(6, 20)))
        text.append(f" {sentence.capitalize()} , {rng.choice(words)} . ")
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    return path


def test_the_toy_corpus_trains_one_vocabulary_in_any_process():
    digests = in_fresh_processes(4, "-c", TRAIN_VOCAB, "toy", "200", "1")
    assert len(set(digests)) == 1, digests


def test_a_small_file_trains_one_vocabulary_in_any_process(tmp_path):
    corpus = write_prose(tmp_path / "small.txt")
    digests = in_fresh_processes(4, "-c", TRAIN_VOCAB, str(corpus), "8192", "2")
    assert len(set(digests)) == 1, digests


def pretrain(out: Path, *extra: str) -> dict:
    """`nanobert pretrain` in a fresh process on a generated file; its summary.json."""
    out.parent.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(out.parent / "corpus.txt", n_docs=12, sentences=8)
    command = [
        *("-m", "nanobert", "pretrain", "--train", str(corpus), "--device", "cpu", "--seed", "7"),
        *("--preset", "tiny", "--max-steps", "12", "--out", str(out), "--quiet"),
        *("--set", "precision=fp32", "eval_interval=6", "log_interval=1", "vocab_size=300", "max_seq_len=64"),
        *extra,
    ]
    in_fresh_processes(1, *command)
    return json.loads((out / "summary.json").read_text())


def losses(run: Path) -> dict[int, float]:
    """The training loss logged at each step (every step: log_interval=1)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row["loss"] for row in rows if row.get("split") == "train"}


def test_a_run_is_a_function_of_its_command(tmp_path):
    """Two fresh processes of one command: the same vocabulary, losses, held-out figures and weights."""
    first, second = (pretrain(tmp_path / name / "run") for name in ("one", "two"))
    runs = [tmp_path / name / "run" for name in ("one", "two")]
    assert len({(run / "last" / "vocab.txt").read_bytes() for run in runs}) == 1
    assert losses(runs[0]) == losses(runs[1])
    assert first["final"] == second["final"]
    assert len({(run / "last" / "model.safetensors").read_bytes() for run in runs}) == 1


def test_a_stopped_and_resumed_run_is_the_uninterrupted_one(tmp_path):
    full = pretrain(tmp_path / "full" / "run")
    pretrain(tmp_path / "split" / "run", "--stop-after", "5")
    resume = str(tmp_path / "split" / "run" / "last")
    in_fresh_processes(1, "-m", "nanobert", "pretrain", "--resume", resume, "--quiet")
    resumed = json.loads((tmp_path / "split" / "run" / "summary.json").read_text())
    split_losses = losses(tmp_path / "split" / "run")
    assert split_losses == losses(tmp_path / "full" / "run") and sorted(split_losses) == list(range(1, 13))
    assert resumed["final"] == full["final"] and resumed["tokenizer_sha1"] == full["tokenizer_sha1"]


def test_the_summary_says_what_a_rerun_must_match(tmp_path):
    summary = pretrain(tmp_path / "run")
    assert summary["precision"] == {"chosen": "fp32", "why": "fp32, as asked"}
    vocab = (tmp_path / "run" / "best" / "vocab.txt").read_bytes()
    assert summary["tokenizer_sha1"] == hashlib.sha1(vocab).hexdigest()
    versions = summary["hardware"]["versions"]
    assert set(versions) == {"python", "nanobert", "torch", "tokenizers", "numpy"}
    assert summary["hardware"]["torch_threads"] >= 1
