"""Is the vocabulary a function of the corpus? Train the tokenizer in fresh processes and compare `vocab.txt`.

Each process has its own hash seeds (Python's and the Rust trainer's), so a vocabulary that depends on
hash-map order shows up as two or more digests. For every corpus the script prints one line per process
(the SHA-1 of `vocab.txt`, its size, the seconds `train_tokenizer` took) and a verdict, and with `--out`
writes the rows as CSV:

    python benchmarks/vocab_repro.py --processes 10 --corpus toy=toy \\
        --corpus wiki300=../shared/data/wikitext-2/wiki.valid.tokens:300 \\
        --corpus train.raw=../shared/data/wiki-squad/train.raw --out vocab.csv

A corpus is `NAME=toy` (the built-in toy corpus, trained as `--data toy` trains it: 200 pieces, pieces
seen once kept) or `NAME=PATH[:LINES]` (a text file, or its first LINES lines, trained as `--train FILE`
trains it: 8,192 pieces, pieces seen twice).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from nanobert.errors import ArgumentParser, run_script

# One process's work: read the corpus, train, save, print the digest and the seconds of the training alone.
CHILD = """
import hashlib, json, sys, time
from pathlib import Path
from nanobert.data.corpus import load_documents
from nanobert.tokenizer import save_tokenizer, train_tokenizer
source, vocab_size, min_frequency, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
documents = load_documents(source)
start = time.perf_counter()
tokenizer = train_tokenizer([s for d in documents for s in d], vocab_size, min_frequency=min_frequency)
seconds = time.perf_counter() - start
save_tokenizer(tokenizer, out)
digest = hashlib.sha1((out / "vocab.txt").read_bytes()).hexdigest()
print(json.dumps({"sha1": digest, "size": tokenizer.get_vocab_size(), "seconds": round(seconds, 2)}))
"""


def corpus_source(spec: str, scratch: Path) -> tuple[str, str, int, int]:
    """(name, the source load_documents reads, vocab size, min frequency) of `NAME=toy|PATH[:LINES]`."""
    name, _, where = spec.partition("=")
    if not name or not where:
        raise SystemExit(f"vocab_repro.py: --corpus {spec!r} is not NAME=toy or NAME=PATH[:LINES]")
    if where == "toy":
        return name, "toy", 200, 1
    path, _, lines = where.partition(":")
    if lines:
        with open(path, encoding="utf-8") as f:
            head = "".join(itertools.islice(f, int(lines)))
        path = str(scratch / f"{name}.txt")
        Path(path).write_text(head, encoding="utf-8")
    return name, path, 8192, 2


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", action="append", required=True, metavar="NAME=toy|PATH[:LINES]")
    p.add_argument("--processes", type=int, default=10)
    p.add_argument("--out", type=Path, help="write the rows here (CSV)")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for spec in args.corpus:
            name, source, vocab_size, min_frequency = corpus_source(spec, scratch)
            for i in range(args.processes):
                out = scratch / f"{name}-{i}"
                child = [sys.executable, "-c", CHILD, source, str(vocab_size), str(min_frequency), str(out)]
                line = subprocess.run(child, check=True, capture_output=True, text=True).stdout
                row = {"corpus": name, "process": i + 1, **json.loads(line.strip().splitlines()[-1])}
                rows.append(row)
                print(f"{name} process {i + 1}: sha1 {row['sha1']} size {row['size']} {row['seconds']} s")
            digests = {r["sha1"] for r in rows if r["corpus"] == name}
            verdict = "one vocabulary" if len(digests) == 1 else f"{len(digests)} different vocabularies"
            print(f"{name}: {verdict} in {args.processes} processes", flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    raise SystemExit(run_script("vocab_repro.py", main))
