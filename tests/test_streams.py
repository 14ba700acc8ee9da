"""Pretraining batch streams: the same batches with or without a prefetch thread, exact positions, shards."""

import pytest
import torch

from nanobert.config import TrainConfig
from nanobert.data.masking import MaskingCollator
from nanobert.data.streams import BatchStream, Prefetcher, Synchronous
from nanobert.data.windows import CausalCollator
from nanobert.errors import NanobertError
from nanobert.objectives.registry import OBJECTIVES

CAUSAL = OBJECTIVES["causal"]  # its stream: next-word windows, no pruning layout

DOCS = [[[5 + (d * 7 + s) % 40] * (3 + s) for s in range(6)] for d in range(5)]


def test_prefetcher_yields_the_same_batches_and_states(tmp_path):
    """The GPU path prepares batches on a thread; it must feed exactly what the synchronous path does."""
    docs = [[[5 + (d * 7 + s) % 40] * (3 + s) for s in range(6)] for d in range(5)]
    cfg = TrainConfig(max_seq_len=24, batch_size=4)
    sync = Synchronous(BatchStream(docs, cfg, MaskingCollator(50, seed=3)))
    pre = Prefetcher(BatchStream(docs, cfg, MaskingCollator(50, seed=3)), depth=2, pin_memory=False)
    try:
        for _ in range(12):  # crosses epoch boundaries
            (a, sa), (b, sb) = sync.next(), pre.next()
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
            assert (sa["epoch"], sa["index"]) == (sb["epoch"], sb["index"])
            assert torch.equal(sa["collator"]["generator"], sb["collator"]["generator"])
    finally:
        pre.close()


def test_a_restored_stream_continues_with_the_same_batches():
    cfg = TrainConfig(max_seq_len=24, batch_size=4)
    stream = BatchStream(DOCS, cfg, MaskingCollator(50, seed=3))
    for _ in range(5):
        stream.next()
    state = stream.state_dict()
    ahead = [stream.next() for _ in range(7)]  # crosses an epoch boundary
    again = BatchStream(DOCS, cfg, MaskingCollator(50, seed=99))  # another seed: the state must win
    again.load_state_dict(state)
    for want in ahead:
        got = again.next()
        assert all(torch.equal(want[k], got[k]) for k in want)
    assert stream.epochs_done(stream.state_dict()) > 1.0
    # every batch carries the layout of the model's last-layer pruning: [CLS] first in every row
    assert (ahead[0]["query_positions"][:, 0] == 0).all()


def test_the_length_schedule_switches_at_an_epoch_boundary_and_resumes():
    """Short windows (in batches of as many tokens) while the run is young, full length from the first epoch
    that starts after short_seq_share; the length in use travels with the stream state."""
    docs = [[[5 + (d * 7 + s) % 40] * (3 + s % 4) for s in range(30)] for d in range(6)]
    cfg = TrainConfig(max_seq_len=24, batch_size=4, short_seq_len=12, short_seq_share=0.5)
    stream = BatchStream(docs, cfg, MaskingCollator(50, seed=3))
    shapes = [stream.next()["input_ids"].shape]
    stream.set_progress(0.7)  # past the share: the epoch under way keeps its length
    while stream.epoch == 0:
        shapes.append(stream.next()["input_ids"].shape)
    short, first_full = shapes[:-1], shapes[-1]
    assert max(rows for rows, _ in short) == 8 and max(width for _, width in short) == 12
    assert stream.shape == (24, 4) and first_full[0] <= 4 and first_full[1] > 12
    state = stream.state_dict()
    ahead = [stream.next() for _ in range(3)]
    again = BatchStream(docs, cfg, MaskingCollator(50, seed=99))  # still at progress 0: the state must win
    again.load_state_dict(state)
    for want in ahead:
        got = again.next()
        assert all(torch.equal(want[k], got[k]) for k in want)


def test_whole_words_are_masked_while_the_run_is_young_and_the_mode_resumes():
    """With whole_word_mask_share, epochs that start before that share of the run mask whole words, later
    ones single pieces; the mode in use travels with the stream state."""
    word_start = torch.ones(50, dtype=torch.bool)
    word_start[30:] = False  # ids 30-49 are "##" pieces: each word here is a start and two of them
    docs = [[[5 + (d + s) % 20, 30 + s % 20, 31 + s % 19] * 3 for s in range(20)] for d in range(6)]
    cfg = TrainConfig(
        max_seq_len=24, batch_size=4, mask_prob=0.3, whole_word_mask=True, whole_word_mask_share=0.5
    )

    def split_words(batch) -> int:  # words left partly masked
        ids, masked = batch["input_ids"], batch["labels"] != -100
        tokens = torch.where(masked, batch["labels"], ids)
        after_special = torch.nn.functional.pad(tokens[:, :-1] < 5, (1, 0), value=True)
        start = word_start[tokens] | after_special  # a piece after [CLS] / [SEP] starts a word, as in masking
        word = torch.cumsum(start.long(), dim=1)
        split = 0
        for row in range(ids.size(0)):
            for w in word[row].unique():
                inside = masked[row][word[row] == w]
                split += int(bool(inside.any()) and not bool(inside.all()))
        return split

    stream = BatchStream(docs, cfg, whole_word_collator(cfg, word_start))
    assert stream.whole_words and split_words(stream.next()) == 0
    stream.set_progress(0.7)  # past the share: the epoch under way keeps masking whole words
    batches = []
    while stream.epoch == 0:
        batches.append(stream.next())  # the last is the next epoch's first
    assert sum(split_words(b) for b in batches[:-1]) == 0 and not stream.whole_words
    later = batches[-1:] + [stream.next() for _ in range(3)]
    assert sum(split_words(b) for b in later) > 0  # single pieces: some words are masked in part
    state = stream.state_dict()
    ahead = [stream.next() for _ in range(3)]
    again = BatchStream(docs, cfg, whole_word_collator(cfg, word_start, seed=99))  # the state wins
    again.load_state_dict(state)
    assert not again.whole_words
    for want in ahead:
        got = again.next()
        assert all(torch.equal(want[k], got[k]) for k in want)


def test_the_masking_rate_moves_toward_final_mask_prob_by_epoch_and_resumes():
    """With final_mask_prob, each epoch masks at the rate its start gives (mask_prob moved linearly by the
    share of the run done); the epoch under way keeps its rate, and the rate travels with the stream state."""
    docs = [[[5 + (d * 7 + s) % 40] * (3 + s % 4) for s in range(30)] for d in range(6)]
    cfg = TrainConfig(max_seq_len=24, batch_size=4, mask_prob=0.6, final_mask_prob=0.2)
    assert cfg.epoch_mask_prob(0.0) == 0.6 and cfg.epoch_mask_prob(0.5) == pytest.approx(0.4)
    assert cfg.epoch_mask_prob(1.5) == pytest.approx(0.2)  # a run trained on past its plan stays at the end

    def share(batches) -> float:  # masked over maskable (not [CLS], [SEP] or padding) tokens
        masked = sum(int((b["labels"] != -100).sum()) for b in batches)
        return masked / sum(int(((b["labels"] != -100) | (b["input_ids"] >= 5)).sum()) for b in batches)

    stream = BatchStream(docs, cfg, MaskingCollator(50, mask_prob=cfg.mask_prob, seed=3))
    stream.set_progress(0.75)  # the epoch under way keeps its rate
    first = []
    while stream.epoch == 0:
        first.append(stream.next())  # the last is the next epoch's first
    assert stream.mask_prob == pytest.approx(0.3)
    later = first[-1:] + [stream.next() for _ in range(len(first) - 2)]
    assert share(first[:-1]) == pytest.approx(0.6, abs=0.05) and share(later) == pytest.approx(0.3, abs=0.05)
    state = stream.state_dict()
    ahead = [stream.next() for _ in range(3)]
    again = BatchStream(docs, cfg, MaskingCollator(50, mask_prob=cfg.mask_prob, seed=99))  # the state wins
    again.load_state_dict(state)
    for want in ahead:
        got = again.next()
        assert all(torch.equal(want[k], got[k]) for k in want)
    with pytest.raises(NanobertError, match="final_mask_prob"):
        TrainConfig(final_mask_prob=1.0)


def whole_word_collator(cfg: TrainConfig, word_start: torch.Tensor, seed: int = 3) -> MaskingCollator:
    return MaskingCollator(
        50, mask_prob=cfg.mask_prob, seed=seed, whole_word_mask=True, word_start=word_start
    )


# ----------------------------------------------------------------------------------------------------------
# Data too small for a batch: a one-line error, never an endless search for one


def test_a_causal_text_shorter_than_one_window_is_refused_at_once():
    """It used to give epochs of no batch, on which `next` spun forever (and "1 steps/epoch")."""
    docs = [[[7, 8, 9], [10, 11]], [[12, 13, 14, 15]]]  # a stream of 9 + 2 [SEP] = 11 tokens
    fits = TrainConfig(objective="causal", max_seq_len=12, batch_size=2)
    stream = CAUSAL.stream(docs, fits, CausalCollator())
    assert stream.batches_per_epoch() == 1 and stream.next()["input_ids"].shape == (1, 12)
    short = TrainConfig(objective="causal", max_seq_len=13, batch_size=2)
    with pytest.raises(NanobertError, match="too short for one window of max_seq_len=13 tokens: it has 11"):
        CAUSAL.stream(docs, short, CausalCollator())


class EmptyWindows:
    """A prepared-corpus-like source: `windows` windows an epoch, only those in `full` give a batch. Fails
    instead of hanging when asked for windows endlessly."""

    def __init__(self, windows: int, full: tuple[int, ...] = ()):
        self.windows, self.full, self.loads = windows, full, 0

    def num_windows(self, epoch: int) -> int:
        return self.windows

    def window_fraction(self, epoch: int, window: int) -> float:
        return 1 / self.windows

    def batches(self, epoch: int, window: int, shape: tuple[int, int] | None = None) -> list:
        self.loads += 1
        assert self.loads < 1000, "the stream keeps looking for a batch"
        return [[[2, 5 + epoch, 6 + window]]] if window in self.full else []


@pytest.mark.parametrize("windows", [1, 3])
def test_an_epoch_without_a_batch_is_an_error_not_an_endless_loop(windows):
    cfg = TrainConfig(objective="causal", max_seq_len=8, batch_size=1)
    stream = CAUSAL.stream(EmptyWindows(windows), cfg, CausalCollator())
    with pytest.raises(NanobertError, match="epoch 0 of the training data gives no batch"):
        stream.next()
    if windows == 1:  # the start-up line's steps/epoch used to round 0 up to 1
        with pytest.raises(NanobertError, match="gives no batch"):
            CAUSAL.stream(EmptyWindows(windows), cfg, CausalCollator()).batches_per_epoch()


def test_empty_windows_between_full_ones_are_skipped():
    cfg = TrainConfig(objective="causal", max_seq_len=8, batch_size=1)
    stream = CAUSAL.stream(EmptyWindows(4, full=(2,)), cfg, CausalCollator())
    got = [stream.next()["input_ids"][0].tolist() for _ in range(3)]
    assert got == [[2, 5, 8], [2, 6, 8], [2, 7, 8]]  # window 2 of epochs 0, 1, 2
    state = stream.state_dict()  # resumed at the end of a window: the rest of the epoch is empty, not lost
    again = CAUSAL.stream(EmptyWindows(4, full=(2,)), cfg, CausalCollator())
    again.load_state_dict(state)
    assert again.next()["input_ids"][0].tolist() == [2, 8, 8]
