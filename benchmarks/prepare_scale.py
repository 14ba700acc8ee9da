"""`nanobert prepare` at WikiText-103 scale (~100M words), then one epoch of training data streamed from it.

The stand-in corpus is `--source` repeated `--repeat` times (wiki.valid.tokens holds ~214k words, so 470
copies are ~100M words, the size of WikiText-103's train split). Two stages, each in a fresh process so that
its peak memory is its own:

  prepare  read and split the corpus as a stream, train the tokenizer on the first --sample-words words,
           tokenize into memory-mapped shards (what `nanobert prepare` does)
  epoch    build one epoch of NSP instances window by window from the shards and mask every batch (the
           data work `nanobert pretrain --prepared` does per epoch, without the model)

Memory is reported two ways, sampled every 50 ms from /proc/self/status: peak RssAnon, the process's own
allocations (what "bounded memory" is about), and VmHWM, the peak resident set, which also counts pages of
the memory-mapped shards the process touched (clean page cache that the kernel reclaims when it needs to).

    python benchmarks/prepare_scale.py --source ../shared/data/wikitext-2/wiki.valid.tokens --repeat 470 \
        --out /tmp/prepare-scale
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.files import check_output_file

# What this script writes under --out; `check_out` refuses an --out that already holds any of them, since the
# run replaces them and (without --keep) deletes the corpus and prepared/ at the end.
WRITES = ("corpus.txt", "prepared", "prepare_scale.json")


class PeakMemory:
    """Peak RssAnon (sampled) and VmHWM (kernel-tracked) of this process, in MiB."""

    def __init__(self, interval: float = 0.05):
        self.peak_anon = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)
        self.thread.start()

    @staticmethod
    def _status() -> dict[str, float]:
        fields = {}
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[key] = int(value.split()[0]) / 1024
        return fields

    def _poll(self, interval: float) -> None:
        while not self.stop.is_set():
            self.peak_anon = max(self.peak_anon, self._status().get("RssAnon", 0.0))
            time.sleep(interval)

    def result(self) -> dict[str, float]:
        self.stop.set()
        self.thread.join()
        status = self._status()
        peak_anon = max(self.peak_anon, status.get("RssAnon", 0.0))
        return {"peak_rss_anon_mib": round(peak_anon, 1), "peak_rss_vmhwm_mib": round(status["VmHWM"], 1)}


def stage_prepare(args) -> dict:
    from nanobert.data.prepare import prepare_corpus

    memory = PeakMemory()
    start = time.perf_counter()
    meta = prepare_corpus(
        str(args.corpus),
        args.prepared,
        vocab_size=args.vocab_size,
        sample_words=args.sample_words,
        overwrite=False,  # the parent made sure it is not there: never replace a user's directory
        quiet=True,
    )
    # Milliseconds kept: a tiny corpus prepares in well under 0.1 s, and the words/s below divide by this.
    return {"seconds": round(time.perf_counter() - start, 3), **memory.result(), "splits": meta["splits"]}


def stage_epoch(args) -> dict:
    import torch

    from nanobert.config import TrainConfig
    from nanobert.data.masking import MaskingCollator, query_layout
    from nanobert.data.shards import PreparedCorpus, WindowedInstances

    # Masking a batch is a few small tensor ops: one thread does them fastest, and more only spin against
    # whatever else runs on the machine (training does the same work on its data thread).
    torch.set_num_threads(1)
    memory = PeakMemory()
    start = time.perf_counter()
    corpus = PreparedCorpus(args.prepared)
    cfg = TrainConfig(max_seq_len=args.max_seq_len, batch_size=args.batch_size, seed=0)
    source = WindowedInstances(corpus.split("train"), cfg)
    collator = MaskingCollator(corpus.meta["vocab_size"], seed=0, pad_to_multiple_of=8)
    n_batches = n_instances = n_tokens = 0
    for window in range(source.num_windows(0)):
        for batch in source.batches(0, window):
            masked = collator(batch)
            query_layout(masked["labels"], 64, 8)
            n_batches += 1
            n_instances += len(batch)
            n_tokens += int(masked["attention_mask"].sum())
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 1),
        **memory.result(),
        "windows": source.num_windows(0),
        "batches": n_batches,
        "instances": n_instances,
        "tokens": n_tokens,
        "tokens_per_s": round(n_tokens / seconds),
    }


def run_stage(stage: str, args) -> dict:
    cmd = [sys.executable, __file__, "--stage", stage, "--corpus", str(args.corpus)]
    cmd += ["--prepared", str(args.prepared), "--vocab-size", str(args.vocab_size)]
    cmd += ["--sample-words", str(args.sample_words), "--max-seq-len", str(args.max_seq_len)]
    cmd += ["--batch-size", str(args.batch_size)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        # The child's own one-line error (or a bug's last traceback line) says why; pass it on as one line.
        lines = out.stderr.strip().splitlines() or [f"exit code {out.returncode}"]
        why = lines[-1].removeprefix("prepare_scale.py: error: ")
        raise NanobertError(f"the {stage} stage failed: {why}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def check_args(args) -> None:
    """Everything the two stages need, checked before the (possibly 100M-word) corpus is written."""
    from nanobert.config import TrainConfig
    from nanobert.data.corpus import documents_from_lines, load_documents
    from nanobert.data.nsp import nsp_documents
    from nanobert.tokenizer import MAX_VOCAB_SIZE, MIN_VOCAB_SIZE

    if not MIN_VOCAB_SIZE <= args.vocab_size <= MAX_VOCAB_SIZE:
        raise NanobertError(
            f"--vocab-size {args.vocab_size} is out of range; use {MIN_VOCAB_SIZE} to {MAX_VOCAB_SIZE:,}"
        )
    TrainConfig(max_seq_len=args.max_seq_len, batch_size=args.batch_size, seed=0)  # the epoch stage's
    check_out(args.out)
    load_documents(args.source)  # a missing, binary, non-UTF-8 or empty file: one line and exit 2
    # NSP needs two documents. Copies are concatenated, so two copies hold two documents if the corpus will.
    text = args.source.read_text(encoding="utf-8")
    nsp_documents(documents_from_lines((text * min(args.repeat, 2)).splitlines()))


def check_out(out: Path) -> None:
    """Refuse an --out that is a file, lies under one, or already holds what this script writes there."""
    check_output_file(out / WRITES[0])  # --out itself or a folder above it is a file
    there = [name for name in WRITES if (out / name).exists()]
    if there:
        raise NanobertError(
            f"--out {out} already holds {', '.join(there)}, which this run would replace (and delete "
            "without --keep); choose another --out or move them away"
        )


def parse_args() -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, help="a WikiText-style text file to repeat")
    parser.add_argument(
        "--repeat", type=positive_int, default=470, help="copies of --source (470: ~100M words)"
    )
    parser.add_argument("--out", type=Path, help="working directory (corpus.txt and prepared/ go here)")
    parser.add_argument("--keep", action="store_true", help="keep the corpus and prepared files afterwards")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument(
        "--sample-words", type=positive_int, default=10_000_000, help="tokenizer training sample"
    )
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=positive_int, default=32)
    # The stage a child process runs, and the files it works on: run_stage's options, not the user's.
    parser.add_argument("--stage", choices=["prepare", "epoch"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prepared", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage is None and (args.source is None or args.out is None):
        parser.error("--source and --out are required")
    return args


def write_corpus(args: argparse.Namespace, text: bytes, words: int) -> None:
    """`text` written --repeat times to the corpus file; its size and the time it took, printed."""
    start = time.perf_counter()
    with open(args.corpus, "wb") as f:
        for _ in range(args.repeat):
            f.write(text)
    print(
        f"corpus: {args.source.name} x {args.repeat} = {words / 1e6:.1f}M words, "
        f"{args.corpus.stat().st_size / 2**20:,.0f} MiB (written in {time.perf_counter() - start:.0f} s)",
        flush=True,
    )


def print_prepare(prep: dict, words: int) -> None:
    """The prepare stage's line: its time, peak memory, what the training split holds, words per second."""
    train = prep["splits"]["train"]
    rate = f"{words / prep['seconds'] / 1e6:.2f}M words/s" if prep["seconds"] > 0 else "too fast to time"
    print(
        f"prepare: {prep['seconds']:,.0f} s, peak RssAnon {prep['peak_rss_anon_mib']:,.0f} MiB, "
        f"VmHWM {prep['peak_rss_vmhwm_mib']:,.0f} MiB; {train['documents']:,} documents, "
        f"{train['sentences']:,} sentences, {train['tokens']:,} tokens "
        f"({rate})",
        flush=True,
    )


def print_epoch(epoch: dict, batch_size: int) -> None:
    """The epoch stage's line: its time, peak memory, windows, instances and batches, tokens per second."""
    print(
        f"epoch:   {epoch['seconds']:,.0f} s, peak RssAnon {epoch['peak_rss_anon_mib']:,.0f} MiB, "
        f"VmHWM {epoch['peak_rss_vmhwm_mib']:,.0f} MiB; {epoch['windows']:,} windows, "
        f"{epoch['instances']:,} instances in {epoch['batches']:,} batches of {batch_size}, "
        f"{epoch['tokens']:,} tokens ({epoch['tokens_per_s']:,} tokens/s)",
        flush=True,
    )


def main() -> None:
    args = parse_args()
    if args.stage is not None:  # a child process: one stage, its result as JSON on the last line
        print(json.dumps((stage_prepare if args.stage == "prepare" else stage_epoch)(args)))
        return
    check_args(args)
    args.out.mkdir(parents=True, exist_ok=True)
    args.corpus, args.prepared = args.out / "corpus.txt", args.out / "prepared"
    text = args.source.read_bytes()
    words = len(text.split()) * args.repeat
    try:  # check_args made sure that corpus.txt and prepared/ are this run's own, so they may be deleted
        write_corpus(args, text, words)
        prep = run_stage("prepare", args)
        print_prepare(prep, words)
        epoch = run_stage("epoch", args)
        print_epoch(epoch, args.batch_size)
        record = {"words": words, "repeat": args.repeat, "prepare": prep, "epoch": epoch}
        record["cpus"] = os.cpu_count()
        (args.out / "prepare_scale.json").write_text(json.dumps(record, indent=2) + "\n")
    finally:
        if not args.keep:
            args.corpus.unlink(missing_ok=True)
            shutil.rmtree(args.prepared, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(run_script("prepare_scale.py", main))
