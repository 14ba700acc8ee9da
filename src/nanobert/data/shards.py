"""Prepared corpora read back: the memory-mapped shards `nanobert prepare` writes, and NSP instances (or
next-word windows) streamed from them a window of documents at a time.

The layout (prepare.py writes it):

    DIR/meta.json                 format, version, token dtype, vocabulary size, counts per split
    DIR/tokenizer.json, vocab.txt the tokenizer (the files `save_tokenizer` writes)
    DIR/SPLIT/tokens.bin          every sentence's token ids, concatenated (uint16, or uint32 past 65,536)
    DIR/SPLIT/sentence_offsets.bin  int64, S + 1 entries: sentence s is tokens[off[s]:off[s + 1]]
    DIR/SPLIT/document_offsets.bin  int64, D + 1 entries: document d is sentences doc[d] .. doc[d + 1] - 1

SPLIT is `train`, plus `valid` when the source has one (a WikiText directory) or `--valid FILE` is given.
Empty sentences and documents are dropped while writing, so every stored document has a token.

Reading streams too: `WindowedInstances` builds each epoch's instances a window of documents at a time (a
seeded random set of documents holding about `WINDOW_TOKENS` tokens), with google's algorithm unchanged; the
random B of a NotNext pair comes from any document of the split, read through the offsets.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nanobert.config import TrainConfig
from nanobert.data.nsp import (
    Instance,
    _instances_from_document,  # google's per-document algorithm, here fed documents read from the memmap
    batches,
)
from nanobert.data.windows import causal_batches, require_causal_window
from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, SEP_ID, load_tokenizer

FORMAT = "nanobert-prepared"
VERSION = 1
META_NAME = "meta.json"
WINDOW_TOKENS = 1_000_000  # tokens of documents per instance window (~8k instances of 128, ~100 MB)
_FILES = ("tokens.bin", "sentence_offsets.bin", "document_offsets.bin")


class PreparedSplit(Sequence):
    """One split of a prepared corpus: a read-only sequence of documents, each a list of sentences' ids.

    `split[d]` reads document `d` from the memory map (a list of lists of ints, as `create_instances`
    takes); nothing else is held in memory but the offsets, 8 bytes per sentence and per document.
    """

    def __init__(self, directory: Path, dtype: np.dtype, counts: dict[str, int]):
        self.directory = directory
        for name in _FILES:
            if not (directory / name).is_file():
                raise NanobertError(f"{directory / name} is missing; prepare the corpus again")
        expected = {
            "tokens.bin": counts["tokens"] * dtype.itemsize,
            "sentence_offsets.bin": (counts["sentences"] + 1) * 8,
            "document_offsets.bin": (counts["documents"] + 1) * 8,
        }
        for name, size in expected.items():
            actual = (directory / name).stat().st_size
            if actual != size:
                raise NanobertError(
                    f"{directory / name} has {actual} bytes, meta.json promises {size}: the prepared corpus "
                    "is truncated or corrupt; prepare it again"
                )
        self.tokens = np.memmap(directory / "tokens.bin", dtype=dtype, mode="r")
        self.sentence_offsets = np.memmap(directory / "sentence_offsets.bin", dtype=np.int64, mode="r")
        self.document_offsets = np.memmap(directory / "document_offsets.bin", dtype=np.int64, mode="r")
        # Sizes can match while the contents do not (an edited file): every read below trusts the offsets.
        for name, offsets, end in (
            ("sentence_offsets.bin", self.sentence_offsets, counts["tokens"]),
            ("document_offsets.bin", self.document_offsets, counts["sentences"]),
        ):
            if offsets[0] != 0 or offsets[-1] != end or bool((np.diff(offsets) < 0).any()):
                raise NanobertError(
                    f"{directory / name} is corrupt (its offsets do not rise from 0 to {end}); prepare the "
                    "corpus again"
                )

    def __len__(self) -> int:
        return len(self.document_offsets) - 1

    def __getitem__(self, d: int) -> list[list[int]]:  # type: ignore[override]
        s0, s1 = int(self.document_offsets[d]), int(self.document_offsets[d + 1])
        offsets = self.sentence_offsets[s0 : s1 + 1].tolist()
        base = offsets[0]
        flat = self.tokens[base : offsets[-1]].tolist()
        return [flat[a - base : b - base] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]

    def document_tokens(self) -> np.ndarray:
        """Tokens per document, (D,) int64."""
        return np.diff(self.sentence_offsets[np.asarray(self.document_offsets)])

    def num_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    def num_tokens(self) -> int:
        return len(self.tokens)


def holds_prepared_corpus(directory: Path) -> bool:
    """Whether `directory`'s meta.json is a prepared corpus's (a meta.json alone is no proof: --overwrite
    must not wipe a folder that merely has one)."""
    try:
        meta = json.loads((directory / META_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(meta, dict) and _valid_meta(meta)


def _valid_meta(meta: Any) -> bool:
    """Whether meta.json has the fields, types and ranges that reading the splits relies on."""
    counts = ("documents", "sentences", "tokens")
    splits = meta.get("splits")
    return (
        meta.get("format") == FORMAT
        and type(meta.get("version", 0)) is int
        and meta.get("dtype") in ("uint16", "uint32")
        and isinstance(splits, dict)
        and "train" in splits
        and all(
            isinstance(c, dict) and all(type(c.get(k)) is int and c[k] >= 1 for k in counts)
            for c in splits.values()
        )
    )


class PreparedCorpus:
    """A directory written by `prepare_corpus`: its meta.json, tokenizer and splits."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        path = self.directory / META_NAME
        if not path.is_file():
            raise NanobertError(
                f"{self.directory} is not a prepared corpus (no {META_NAME}); run `nanobert prepare` first"
            )
        try:
            self.meta = json.loads(path.read_text())
            ok = _valid_meta(self.meta)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            ok = False
        if not ok:
            raise NanobertError(f"{path} is not a nanobert prepared-corpus description (corrupt or foreign)")
        if self.meta.get("version", 0) > VERSION:
            raise NanobertError(f"{self.directory} was prepared by a newer nanobert; update nanobert")
        self.dtype = np.dtype(self.meta["dtype"])

    def has_split(self, name: str) -> bool:
        return name in self.meta["splits"]

    def split(self, name: str) -> PreparedSplit:
        if not self.has_split(name):
            raise NanobertError(
                f"{self.directory} has no {name} split (it has {', '.join(self.meta['splits'])})"
            )
        return PreparedSplit(self.directory / name, self.dtype, self.meta["splits"][name])

    def tokenizer(self) -> Any:
        return load_tokenizer(self.directory)


class WindowedInstances:
    """Each epoch's NSP instances, built a window of documents at a time: memory bounded by the window.

    Epoch `e` shuffles the documents (seeded by `(seed, e)`) and cuts the order into windows of about
    `window_tokens` tokens; `batches(e, w)` builds window `w`'s instances with google's per-document algorithm
    (the random B may come from any document of the split), then shuffles and batches them with `nsp.batches`.
    Everything is a pure function of `(seed, epoch, window)`, so a resumed run rebuilds exactly the window it
    stopped in. The same interface as `streams.CorpusInstances`. `window_batches` and `check` are the
    objective's (`objectives.objective.Objective`; by default MLM + NSP's): how a window becomes batches, and
    the NanobertError raised at once for a split whose epochs give no batch.
    """

    def __init__(
        self,
        split: PreparedSplit,
        cfg: TrainConfig,
        window_tokens: int | None = None,
        window_batches: Callable[..., list[list[Instance]]] | None = None,
        check: Callable[[WindowedInstances], None] | None = None,
    ):
        if len(split) < 2:
            raise NanobertError("NSP needs at least two documents; the prepared split has fewer")
        if cfg.max_seq_len < 5:
            raise NanobertError(f"max_seq_len={cfg.max_seq_len} is too small; it must be at least 5")
        self.split, self.cfg = split, cfg
        self.window_tokens = window_tokens or WINDOW_TOKENS
        self.doc_tokens = split.document_tokens()
        self.window_batches = window_batches or nsp_window_batches
        if check is not None:
            check(self)
        self._windows: tuple[int, list[np.ndarray]] | None = None

    def _epoch_windows(self, epoch: int) -> list[np.ndarray]:
        if self._windows is None or self._windows[0] != epoch:
            seed = random.Random(f"prepared-windows:{self.cfg.seed}:{epoch}").getrandbits(64)
            order = np.random.default_rng(seed).permutation(len(self.split))
            ends = np.cumsum(self.doc_tokens[order])
            cuts = np.searchsorted(ends, np.arange(self.window_tokens, ends[-1], self.window_tokens), "right")
            windows = [w for w in np.split(order, np.unique(cuts)) if len(w)]
            self._windows = (epoch, windows)
        return self._windows[1]

    def num_windows(self, epoch: int) -> int:
        return len(self._epoch_windows(epoch))

    def window_fraction(self, epoch: int, window: int) -> float:
        """The share of the split's tokens in this window (to estimate batches per epoch)."""
        docs = self._epoch_windows(epoch)[window]
        return float(self.doc_tokens[docs].sum()) / max(float(self.doc_tokens.sum()), 1.0)

    def instances(self, epoch: int, window: int, seq_len: int | None = None) -> list[Instance]:
        cfg, seq_len = self.cfg, seq_len or self.cfg.max_seq_len
        out: list[Instance] = []
        for dupe in range(cfg.dupe_factor):
            rng = random.Random(f"prepared-instances:{cfg.seed}:{epoch}:{window}:{dupe}")
            for d in self._epoch_windows(epoch)[window].tolist():
                out.extend(
                    _instances_from_document(
                        self.split, d, seq_len - 3, cfg.short_seq_prob, 0.5, rng, CLS_ID, SEP_ID
                    )
                )
        return out

    def batches(self, epoch: int, window: int, shape: tuple[int, int] | None = None) -> list[list[Instance]]:
        """Window `window` of epoch `epoch` in batches; `shape` = (window length, rows per batch), by
        default (max_seq_len, batch_size)."""
        # `batches` is seeded by (seed, an int): windows of one epoch get distinct ints.
        key = epoch * 1_000_003 + window
        seq_len, batch_size = shape or (self.cfg.max_seq_len, self.cfg.batch_size)
        return self.window_batches(self, epoch, window, seq_len, batch_size, key)

    def documents(self, epoch: int, window: int) -> list[list[list[int]]]:
        """The documents of window `window` of epoch `epoch`, in the epoch's order."""
        return [self.split[d] for d in self._epoch_windows(epoch)[window].tolist()]


def nsp_window_batches(
    source: WindowedInstances, epoch: int, window: int, seq_len: int, batch_size: int, key: int
) -> list[list[Instance]]:
    """A prepared window's NSP instances (`WindowedInstances.instances`), shuffled and batched by `key`."""
    cfg = source.cfg
    instances = source.instances(epoch, window, seq_len)
    return batches(instances, batch_size, cfg.seed, key, bucket=cfg.bucket_by_length)


def causal_window_batches(
    source: WindowedInstances, epoch: int, window: int, seq_len: int, batch_size: int, key: int
) -> list[list[Instance]]:
    """Next-word windows of a prepared window's group of documents, batched."""
    return causal_batches(source.documents(epoch, window), seq_len, batch_size, source.cfg.seed, key)


def check_causal_windows(source: WindowedInstances) -> None:
    """NanobertError at once for a split too short for one next-word window: its stream is every document's
    tokens and a [SEP] after each."""
    require_causal_window(int(source.doc_tokens.sum()) + len(source.split), source.cfg.max_seq_len)


__all__ = [
    "FORMAT",
    "META_NAME",
    "VERSION",
    "PreparedCorpus",
    "PreparedSplit",
    "WindowedInstances",
    "causal_window_batches",
    "check_causal_windows",
    "holds_prepared_corpus",
    "nsp_window_batches",
]
