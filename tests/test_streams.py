"""Pretraining batch streams: the same batches with or without a prefetch thread, exact positions, shards."""

import torch

from nanobert.config import TrainConfig
from nanobert.pretraining_data import MaskingCollator
from nanobert.streams import BatchStream, Prefetcher, Synchronous

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
