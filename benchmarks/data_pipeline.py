"""Time and memory to prepare WikiText-2-scale pretraining data, against what training consumes.

Stages, as `nanobert pretrain` runs them: read and split the corpus into documents and sentences, train the
WordPiece tokenizer, tokenize, build one epoch of NSP instances, and mask every batch of that epoch. The
stand-in corpus is a file repeated `--repeat` times (wiki.valid.tokens x 10 is about 2M words, the size of
WikiText-2's train split).

"Prepared tokens/s" is the per-epoch work (instances + masking) that recurs every epoch, over its time;
"consumed tokens/s" is training speed, measured here on the chosen device for a model shape (or given).

    python benchmarks/data_pipeline.py --source ../shared/data/wikitext-2/wiki.valid.tokens --repeat 10
    python benchmarks/data_pipeline.py --source .../wiki.valid.tokens --measure-train cuda --shape mini
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import torch

from nanobert.config import ModelConfig
from nanobert.data.corpus import documents_from_lines, load_documents, read_text_file
from nanobert.data.masking import MaskingCollator, query_layout
from nanobert.data.nsp import batches, create_instances, nsp_documents
from nanobert.device import autocast_dtype, resolve_device
from nanobert.engine.optimizer import build_optimizer
from nanobert.errors import ArgumentParser, NanobertError, positive_int, run_script
from nanobert.model import BertForPreTraining
from nanobert.pretraining.recipes import MODEL_PRESETS
from nanobert.tokenizer import MAX_VOCAB_SIZE, MIN_VOCAB_SIZE, encode_documents, train_tokenizer

MIN_SEQ_LEN = 5  # [CLS] A [SEP] B [SEP], what an NSP instance needs at least


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure_train_tokens_per_s(device: str, shape: str, vocab: int, batch_size: int, seq_len: int) -> float:
    """Tokens/s of nanobert training steps on random full-length batches, at the trainer's precision."""
    dev = resolve_device(device)  # with the trainer's CPU allocator setting
    model = BertForPreTraining(ModelConfig(vocab_size=vocab, **MODEL_PRESETS[shape])).to(dev)
    opt = build_optimizer(model, 1e-4, 0.0)  # the trainer's optimizer
    ids = torch.randint(5, vocab, (batch_size, seq_len), device=dev)
    labels = torch.where(torch.rand(batch_size, seq_len, device=dev) < 0.15, ids, -100)
    query_positions, positions = (t.to(dev) for t in query_layout(labels.cpu(), 64, 8))
    nsp = torch.randint(0, 2, (batch_size,), device=dev)
    amp_dtype = autocast_dtype("auto", dev)  # the trainer's default precision on this device
    amp = torch.autocast(dev.type, dtype=amp_dtype) if amp_dtype else torch.autocast("cpu", enabled=False)
    times = []
    for i in range(13):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with amp:
            loss = model(
                ids,
                labels=labels,
                next_sentence_label=nsp,
                mlm_positions=positions,
                query_positions=query_positions,
            ).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    return batch_size * seq_len / sorted(times)[len(times) // 2]


def check_args(args: argparse.Namespace) -> str:
    """What each stage needs, checked before the pipeline runs (minutes at scale); returns --source's text."""
    if not MIN_VOCAB_SIZE <= args.vocab_size <= MAX_VOCAB_SIZE:
        raise NanobertError(
            f"--vocab-size {args.vocab_size} is out of range; use {MIN_VOCAB_SIZE} to {MAX_VOCAB_SIZE:,}"
        )
    if args.seq_len < MIN_SEQ_LEN:
        raise NanobertError(
            f"--seq-len {args.seq_len} is too short; NSP instances need at least {MIN_SEQ_LEN}"
        )
    if args.measure_train:
        try:
            resolve_device(args.measure_train)
        except NanobertError:  # its advice names --device, which this script does not have
            raise NanobertError(
                f"--measure-train {args.measure_train}: no CUDA GPU is available; use --measure-train cpu, "
                "or --train-tokens-per-s N to compare against a speed measured elsewhere"
            ) from None
        positions = ModelConfig(**MODEL_PRESETS[args.shape]).max_position_embeddings
        if args.seq_len > positions:
            raise NanobertError(
                f"--seq-len {args.seq_len} exceeds the {args.shape} model's {positions} positions, which "
                f"--measure-train trains; use --seq-len {positions} or less"
            )
    load_documents(args.source)  # a missing, binary, non-UTF-8 or empty file: one line and exit 2
    text = Path(args.source).read_text(encoding="utf-8")
    # NSP needs two documents. Copies are concatenated, so two copies hold two documents if the corpus will.
    nsp_documents(documents_from_lines((text * min(args.repeat, 2)).splitlines()))
    return text


def parse_args() -> argparse.Namespace:
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--source", required=True, help="a WikiText file, e.g. ../shared/data/wikitext-2/wiki.valid.tokens"
    )
    p.add_argument("--repeat", type=positive_int, default=10)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--seq-len", type=positive_int, default=128)
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--train-tokens-per-s", type=float, help="training speed to compare against")
    p.add_argument("--measure-train", choices=["cpu", "cuda"], help="measure training speed on this device")
    p.add_argument("--shape", default="mini", choices=list(MODEL_PRESETS))
    return p.parse_args()


def one_time_stages(corpus: Path, vocab_size: int, stages: list[tuple[str, float]]):
    """The work done once per corpus (read and split, train WordPiece, tokenize), each stage's seconds
    appended to `stages`; returns (documents, tokenizer, tokenized documents)."""
    t = time.perf_counter()
    documents = read_text_file(corpus)
    stages.append(("read + split sentences", time.perf_counter() - t))
    t = time.perf_counter()
    tokenizer = train_tokenizer((s for d in documents for s in d), vocab_size=vocab_size)
    stages.append(("train WordPiece", time.perf_counter() - t))
    t = time.perf_counter()
    tokenized = encode_documents(tokenizer, documents)
    stages.append(("tokenize", time.perf_counter() - t))
    return documents, tokenizer, tokenized


def epoch_stages(tokenized, vocab: int, args: argparse.Namespace, stages: list[tuple[str, float]]):
    """The work that recurs every epoch (NSP instances, masking every batch), each stage's seconds appended
    to `stages`; returns (the instances, the real tokens of the epoch's batches)."""
    t = time.perf_counter()
    instances = create_instances(tokenized, args.seq_len, seed=0, epoch=0)
    stages.append(("NSP instances (1 epoch)", time.perf_counter() - t))
    t = time.perf_counter()
    collator = MaskingCollator(vocab, seed=0, pad_to_multiple_of=8)
    n_tokens = 0
    for group in batches(instances, args.batch_size, seed=0, epoch=0, bucket=True):
        batch = collator(group)
        query_layout(batch["labels"], 64, 8)
        n_tokens += int(batch["attention_mask"].sum())
    stages.append(("mask every batch (1 epoch)", time.perf_counter() - t))
    return instances, n_tokens


def print_report(
    args: argparse.Namespace, words: int, documents, instances, n_tokens: int, stages, vocab: int
) -> None:
    """The corpus, each stage's seconds, peak memory, and prepared against consumed tokens/s."""
    one_time = sum(s for _, s in stages[:3])  # read, WordPiece, tokenize
    per_epoch = stages[-1][1] + stages[-2][1]  # instances + masking
    print(
        f"corpus: {args.source} x {args.repeat} = {words:,} words, {len(documents):,} documents, "
        f"{sum(map(len, documents)):,} sentences; {len(instances):,} instances, {n_tokens:,} tokens/epoch"
    )
    print(f"{'stage':30s} {'seconds':>8s}")
    for name, secs in stages:
        print(f"{name:30s} {secs:8.2f}")
    print(f"{'total (one-time + 1 epoch)':30s} {one_time + per_epoch:8.2f}")
    print(f"peak RSS: {peak_rss_mib():,.0f} MiB")
    prepared = n_tokens / per_epoch
    print(f"prepared tokens/s (instances + masking, per epoch): {prepared:,.0f}")
    consumed = args.train_tokens_per_s
    if args.measure_train:
        consumed = measure_train_tokens_per_s(
            args.measure_train, args.shape, vocab, args.batch_size, args.seq_len
        )
        print(f"consumed tokens/s (training {args.shape} on {args.measure_train}): {consumed:,.0f}")
    if consumed:
        print(f"prepared/consumed: {prepared / consumed:.1f}x")


def main() -> None:
    args = parse_args()
    text = check_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text(text * args.repeat, encoding="utf-8")
        words = len(text.split()) * args.repeat
        stages: list[tuple[str, float]] = []
        documents, tokenizer, tokenized = one_time_stages(corpus, args.vocab_size, stages)
        instances, n_tokens = epoch_stages(tokenized, tokenizer.get_vocab_size(), args, stages)
    print_report(args, words, documents, instances, n_tokens, stages, tokenizer.get_vocab_size())


if __name__ == "__main__":
    raise SystemExit(run_script("data_pipeline.py", main))
