"""Pretraining batches as a stream: epoch after epoch of fresh NSP instances, masked, ready for the device
(or, for the causal objective, next-word windows of the corpus).

`BatchStream` walks a source of instance batches (an in-memory tokenized corpus, `CorpusInstances`, or a
prepared corpus read a window at a time, `shards.WindowedInstances`), masks each batch with the collator and
adds the layout the model's last-layer pruning needs. Its position plus the collator's generator is all a
resume needs. Under data parallelism every rank walks the same global batches and keeps its share
(`shard_batch`). `Prefetcher` prepares batches on a thread while a GPU computes; `Synchronous` is the same
interface for the CPU, where a thread would only compete for the same cores.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import torch

from nanobert.config import TrainConfig
from nanobert.data.feeder import Feeder
from nanobert.data.masking import query_layout
from nanobert.data.nsp import Instance, nsp_documents, nsp_epoch_batches
from nanobert.data.windows import causal_batches, causal_stream_tokens, require_causal_window
from nanobert.errors import NanobertError
from nanobert.tokenizer import IGNORE_INDEX

MLM_POSITIONS_MULTIPLE = 64  # masked-position count padded to this, so compiled shapes stay few
QUERY_WIDTH_MULTIPLE = 8  # the last layer's queries per row, likewise ([CLS] + ~15% of 128 = ~20)


def nsp_corpus_batches(
    tokenized: list[list[list[int]]], cfg: TrainConfig, seq_len: int, batch_size: int, epoch: int
) -> list[list[Instance]]:
    """An in-memory corpus's epoch of NSP instances (google's algorithm, `dupe_factor` sets), batched."""
    seed, dupes, short, bucket = cfg.seed, cfg.dupe_factor, cfg.short_seq_prob, cfg.bucket_by_length
    return nsp_epoch_batches(tokenized, seq_len, batch_size, seed, epoch, dupes, short, bucket)


def check_nsp_corpus(tokenized: list[list[list[int]]], cfg: TrainConfig) -> None:
    """NanobertError at once for a corpus that cannot give a next-sentence pair (one document)."""
    nsp_documents(tokenized)


def causal_corpus_batches(
    tokenized: list[list[list[int]]], cfg: TrainConfig, seq_len: int, batch_size: int, epoch: int
) -> list[list[Instance]]:
    """An in-memory corpus's epoch of next-word windows, cut at fresh places, batched."""
    return causal_batches(tokenized, seq_len, batch_size, cfg.seed, epoch)


def check_causal_corpus(tokenized: list[list[list[int]]], cfg: TrainConfig) -> None:
    """NanobertError at once for a corpus too short for one window (its epochs would have no batch)."""
    require_causal_window(causal_stream_tokens(tokenized), cfg.max_seq_len)


def add_query_layout(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """[CLS] and the masked positions of a masked batch, so the model's last layer computes only those
    (model.py); computed after sharding, from the rows this rank keeps."""
    batch["query_positions"], batch["mlm_positions"] = query_layout(
        batch["labels"], MLM_POSITIONS_MULTIPLE, QUERY_WIDTH_MULTIPLE
    )
    return batch


class CorpusInstances:
    """A tokenized corpus held in memory; each epoch is one window holding all of it.

    The in-memory twin of `shards.WindowedInstances` (same interface), for corpora that fit in RAM.
    `corpus_batches` and `check` are the objective's (`objectives.objective.Objective`; by default MLM +
    NSP's): how an epoch is cut into batches of instances, and the NanobertError raised at once for a corpus
    whose epochs would give no batch.
    """

    def __init__(
        self,
        tokenized: list[list[list[int]]],
        cfg: TrainConfig,
        corpus_batches: Callable = nsp_corpus_batches,
        check: Callable | None = None,
    ):
        if check is not None:
            check(tokenized, cfg)
        self.tokenized, self.cfg, self.corpus_batches = tokenized, cfg, corpus_batches

    def num_windows(self, epoch: int) -> int:
        return 1

    def window_fraction(self, epoch: int, window: int) -> float:
        return 1.0

    def batches(self, epoch: int, window: int, shape: tuple[int, int] | None = None) -> list[list[Instance]]:
        seq_len, batch_size = shape or (self.cfg.max_seq_len, self.cfg.batch_size)
        return self.corpus_batches(self.tokenized, self.cfg, seq_len, batch_size, epoch)


def shard_batch(batch: dict[str, torch.Tensor], rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """This rank's rows of a collated global batch, plus `loss_share` (2,): its share of the global loss.

    Rank r takes rows r, r + world_size, ... (strided, so length-bucketed rows spread evenly).
    `loss_share` is (this rank's labelled tokens / the batch's, its rows / the batch's): the rank's mean
    token loss (MLM or next word) and NSP loss times these shares sum over ranks to the global batch's
    means, so with the sum scaled by
    world_size, DDP's averaged gradient is the global batch's gradient. A rank left without rows (a final
    batch smaller than the world) trains on row 0 with share 0, so it still joins the gradient all-reduce.
    A single process gets the whole batch with shares (1, 1).
    """
    if world_size == 1:
        batch["loss_share"] = torch.ones(2)
        return batch
    rows = batch["input_ids"].shape[0]
    mine = torch.arange(rows)[rank::world_size]
    masked = batch["labels"] != IGNORE_INDEX
    if len(mine) == 0:
        mine, share = torch.zeros(1, dtype=torch.long), torch.zeros(2)
    else:
        mlm_share = int(masked[mine].sum()) / max(int(masked.sum()), 1)
        share = torch.tensor([mlm_share, len(mine) / rows])
    out = {k: v.index_select(0, mine) for k, v in batch.items()}
    out["loss_share"] = share
    return out


class BatchStream:
    """Endless pre-collated training batches: epoch after epoch of fresh NSP instances and masks (or, for the
    causal objective, of next-word windows cut at fresh places).

    `source` is a tokenized corpus (a list, see `CorpusInstances`) or a `WindowedInstances` over a prepared
    corpus; an epoch is its windows in turn. With `world_size > 1` every rank walks the same global batches
    and keeps its share (`shard_batch`). Each epoch's window length and batch size are chosen when it starts,
    from the fraction of the run the loop last reported (`set_progress`; `TrainConfig.epoch_shape`), and so is
    whether it masks whole words (`TrainConfig.epoch_whole_words`). Its position (epoch, window, index, that
    shape and masking) plus the collator's generator state is all a resume needs. A source whose whole epoch
    gives no batch is a NanobertError, never an endless search for one.
    """

    def __init__(
        self,
        source: list[list[list[int]]] | Any,
        cfg: TrainConfig,
        collator: Any,
        rank: int = 0,
        world_size: int = 1,
        layout: Callable | None = add_query_layout,
    ):
        self.source = CorpusInstances(source, cfg) if isinstance(source, list) else source
        self.cfg, self.collator, self.rank, self.world_size = cfg, collator, rank, world_size
        self.layout = layout  # the objective's, added to each sharded batch (None: nothing to add)
        self.epoch, self.window, self.index = 0, 0, 0
        self.progress = 0.0  # the fraction of the run done, as the training loop last said
        self.shape = cfg.epoch_shape(self.progress)  # this epoch's (window length, batch size)
        self.whole_words = cfg.epoch_whole_words(self.progress)  # and whether it masks whole words
        self.mask_prob = cfg.epoch_mask_prob(self.progress)  # and at which rate
        self._batches: list | None = None

    def set_progress(self, progress: float) -> None:
        """Called by the loop before each step; the next epoch to start picks its shape from it. (A GPU's
        prefetch thread starts epochs a few batches early; the state it records keeps resumes exact.)"""
        self.progress = progress

    def _load(self) -> list:
        if self._batches is None:
            self._batches = self.source.batches(self.epoch, self.window, self.shape)
        return self._batches

    def batches_per_epoch(self) -> int:
        """Exact for an in-memory corpus; for a prepared one, estimated from the current window's share. Under
        the sequence-length schedule it counts the short epoch's batches (as many tokens each: close)."""
        n = len(self._load())
        if n == 0 and self.source.num_windows(self.epoch) == 1:
            raise self._empty_epoch()
        return max(1, round(n / self.source.window_fraction(self.epoch, self.window)))

    def steps_per_epoch(self) -> int:
        """Optimizer steps in an epoch: its batches over `grad_accum_steps`, at least one."""
        return max(1, self.batches_per_epoch() // self.cfg.grad_accum_steps)

    def _empty_epoch(self) -> NanobertError:
        cfg = self.cfg
        return NanobertError(
            f"epoch {self.epoch} of the training data gives no batch (objective {cfg.objective}, "
            f"windows of {self.shape[0]} tokens); train on more text or pass a smaller --set max_seq_len=..."
        )

    def epochs_done(self, state: dict[str, Any]) -> float:
        """Epochs completed at data position `state` (windows counted as equal parts of an epoch)."""
        windows = self.source.num_windows(state["epoch"])
        within = state["index"] / max(len(self._load()), 1)
        return state["epoch"] + (state.get("window", 0) + within) / windows

    def next(self) -> dict[str, torch.Tensor]:
        """The next batch, ready for the device: collated, masked, with the query layout computed here."""
        empty = self.window == 0 and self.index == 0  # every window of this epoch so far gave no batch
        while self.index >= len(self._load()):
            empty = empty and not self._batches
            self.window, self.index, self._batches = self.window + 1, 0, None
            if self.window >= self.source.num_windows(self.epoch):
                if empty:  # a whole epoch without a batch: looping on would never find one
                    raise self._empty_epoch()
                self.epoch, self.window, empty = self.epoch + 1, 0, True
                self.shape = self.cfg.epoch_shape(self.progress)
                self.whole_words = self.cfg.epoch_whole_words(self.progress)
                self.mask_prob = self.cfg.epoch_mask_prob(self.progress)
        if self.cfg.whole_word_mask:  # the collator masks as the epoch does (whole_word_mask_share)
            self.collator.whole_word_mask = self.whole_words
        if self.cfg.final_mask_prob is not None and hasattr(self.collator, "mask_prob"):  # the epoch's rate
            self.collator.mask_prob = self.mask_prob
        batch = self.collator(self._load()[self.index])
        self.index += 1
        batch = shard_batch(batch, self.rank, self.world_size)
        if self.layout is not None:
            batch = self.layout(batch)
        if bool(batch["attention_mask"].all()):
            # No padding: no mask, which lets SDPA use its fastest (flash) kernel. Decided here, on the host.
            del batch["attention_mask"]
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "window": self.window,
            "index": self.index,
            "seq_len": self.shape[0],
            "batch_size": self.shape[1],
            "whole_words": self.whole_words,
            "mask_prob": self.mask_prob,
            "collator": self.collator.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self.window = int(state.get("window", 0))  # checkpoints from before windows had one per epoch
        full = self.cfg.max_seq_len, self.cfg.batch_size  # and from before the length schedule
        self.shape = int(state.get("seq_len", full[0])), int(state.get("batch_size", full[1]))
        self.whole_words = bool(state.get("whole_words", self.cfg.whole_word_mask))  # older: the whole run
        self.mask_prob = float(state.get("mask_prob", self.cfg.mask_prob))  # older: one rate for the run
        self._batches = None
        self.collator.load_state_dict(state["collator"])


class Prefetcher(Feeder):
    """Prepares batches on a background thread (pinned, ready for non-blocking copies) while the GPU trains.

    Each batch travels with the stream state *after* it, so a checkpoint records the data position of the
    last batch actually trained on, not of the ones waiting in the queue; resume stays exact.
    """

    def __init__(self, stream: BatchStream, depth: int = 4, pin_memory: bool = True):
        self.stream, self.pin_memory = stream, pin_memory
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.stream.next()
                if self.pin_memory:
                    batch = {k: v.pin_memory() for k, v in batch.items()}
                item = (batch, self.stream.state_dict())
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:  # check the stop flag and retry
                        continue
        except BaseException as e:  # surface data errors in the training thread
            self.queue.put((e, None))

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        batch, state = self.queue.get()
        if isinstance(batch, BaseException):
            raise batch
        return batch, state

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


class Synchronous(Feeder):
    """The same interface as Prefetcher, preparing each batch when asked (CPU training: no idle device)."""

    def __init__(self, stream: BatchStream):
        self.stream = stream

    def next(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        batch = self.stream.next()
        return batch, self.stream.state_dict()

    def close(self) -> None:
        pass


def feeder(stream: BatchStream, device: torch.device) -> Prefetcher | Synchronous:
    """On a GPU the next batches are prepared on a thread while it computes; on the CPU that would only
    compete for the same cores."""
    return Prefetcher(stream) if device.type == "cuda" else Synchronous(stream)


__all__ = [
    "BatchStream",
    "CorpusInstances",
    "Prefetcher",
    "Synchronous",
    "add_query_layout",
    "causal_corpus_batches",
    "check_causal_corpus",
    "check_nsp_corpus",
    "feeder",
    "nsp_corpus_batches",
    "shard_batch",
]
