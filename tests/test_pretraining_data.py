"""Tests for pretraining_data: NSP pairing invariants, the masking collator, and batching.

Synthetic corpora give every token a unique id, so each id maps back to (document, sentence, position) and
an instance's provenance can be checked exactly.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nanobert.data.masking import MaskingCollator, masked_positions, query_layout
from nanobert.data.nsp import Instance, batches, create_instances, nsp_epoch_batches
from nanobert.errors import NanobertError

PAD, UNK, CLS, SEP, MASK, FIRST = 0, 1, 2, 3, 4, 5
FAST = settings(max_examples=60, deadline=None)


def make_corpus(sentence_counts: list[int], lengths: tuple[int, int], seed: int):
    """Documents of unique token ids, and `where[id] = (doc, sentence, index in the doc's token stream)`."""
    rng = random.Random(seed)
    documents, where, next_id = [], {}, FIRST
    for d, n_sentences in enumerate(sentence_counts):
        doc, flat = [], 0
        for s in range(n_sentences):
            sentence = list(range(next_id, next_id + rng.randint(*lengths)))
            next_id += len(sentence)
            for t in sentence:
                where[t] = (d, s, flat)
                flat += 1
            doc.append(sentence)
        documents.append(doc)
    return documents, where


def split(instance: Instance) -> tuple[list[int], list[int]]:
    """A and B of `[CLS] A [SEP] B [SEP]`, after checking the layout."""
    ids, types = instance.input_ids, instance.token_type_ids
    assert ids[0] == CLS and ids[-1] == SEP
    seps = [j for j, t in enumerate(ids) if t == SEP]
    assert len(seps) == 2
    first_sep = seps[0]
    assert types == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
    return ids[1:first_sep], ids[first_sep + 1 : -1]


def assert_contiguous(tokens: list[int], where) -> tuple[int, int, int]:
    """Tokens form one run of one document; returns (doc, first index, last index)."""
    docs = {where[t][0] for t in tokens}
    assert len(docs) == 1
    idx = [where[t][2] for t in tokens]
    assert idx == list(range(idx[0], idx[0] + len(idx)))
    return docs.pop(), idx[0], idx[-1]


def check_instance(instance: Instance, where, max_seq_len: int) -> None:
    assert len(instance.input_ids) <= max_seq_len
    a, b = split(instance)
    assert a and b
    doc_a, _, a_last = assert_contiguous(a, where)
    doc_b, b_first, _ = assert_contiguous(b, where)
    if instance.next_sentence_label == 0:
        # B follows A in the same document, starting at a later sentence than the one A ends in.
        assert doc_a == doc_b and b_first > a_last
        assert where[b[0]][1] > where[a[-1]][1]
        # A gap between them can only come from truncating A's back or B's front, which fills the sequence.
        if b_first != a_last + 1:
            assert len(a) + len(b) == max_seq_len - 3
    else:
        assert instance.next_sentence_label == 1
        assert doc_b != doc_a


# --- create_instances ---------------------------------------------------------------------------------


@FAST
@given(
    counts=st.lists(st.integers(1, 12), min_size=2, max_size=6),
    lengths=st.sampled_from([(1, 3), (1, 9), (5, 30)]),
    max_seq_len=st.integers(5, 41),
    short_seq_prob=st.sampled_from([0.0, 0.1, 1.0]),
    seed=st.integers(0, 10**6),
)
def test_instances_are_well_formed_and_paired_correctly(counts, lengths, max_seq_len, short_seq_prob, seed):
    documents, where = make_corpus(counts, lengths, seed)
    instances = create_instances(documents, max_seq_len, seed=seed, short_seq_prob=short_seq_prob)
    assert instances
    for instance in instances:
        check_instance(instance, where, max_seq_len)


def test_labels_are_about_half_and_half():
    documents, where = make_corpus([600] * 20, (3, 8), seed=0)
    instances = create_instances(documents, max_seq_len=32, seed=1, short_seq_prob=0.0)
    n = len(instances)
    assert n > 2000
    is_next = sum(x.next_sentence_label == 0 for x in instances)
    # A one-sentence chunk is always NotNext; here that happens at most once per document (its end).
    sigma = math.sqrt(n * 0.25)
    assert n / 2 - 4 * sigma - len(documents) <= is_next <= n / 2 + 4 * sigma
    for instance in instances[:300]:
        check_instance(instance, where, 32)


def test_random_next_prob_controls_the_label_rate():
    documents, _ = make_corpus([100] * 10, (2, 5), seed=3)
    instances = create_instances(documents, max_seq_len=24, seed=0, short_seq_prob=0.0, random_next_prob=0.0)
    not_next = sum(x.next_sentence_label for x in instances)
    assert not_next <= len(documents)  # only the forced one-sentence chunks


def test_deterministic_per_seed_and_epoch():
    documents, _ = make_corpus([30] * 5, (2, 9), seed=5)
    first = create_instances(documents, 20, seed=7, epoch=0)
    assert first == create_instances(documents, 20, seed=7, epoch=0)
    assert first != create_instances(documents, 20, seed=7, epoch=1)
    assert first != create_instances(documents, 20, seed=8, epoch=0)


def test_inputs_are_not_modified():
    documents, _ = make_corpus([8, 8, 8], (1, 30), seed=2)
    before = [[list(s) for s in d] for d in documents]
    create_instances(documents, 9, seed=0)
    assert documents == before


def test_a_sentence_longer_than_the_sequence_is_truncated():
    documents = [[list(range(5, 1005))], [list(range(2000, 2010)), list(range(3000, 3003))]]
    instances = create_instances(documents, max_seq_len=16, seed=0)
    assert instances
    assert all(len(x.input_ids) <= 16 for x in instances)
    assert any(len(x.input_ids) == 16 for x in instances)


def test_empty_sentences_and_documents_are_ignored():
    documents, where = make_corpus([4, 5], (2, 6), seed=1)
    noisy = [[], [[]], [[], *documents[0], []], documents[1], [[], []]]
    instances = create_instances(noisy, 12, seed=0)
    assert instances
    for instance in instances:
        assert_contiguous(split(instance)[0], where)


@pytest.mark.parametrize("documents", [[[[5, 6, 7], [8, 9]]], [[[5, 6]], [[]], []], []])
def test_one_document_is_an_error(documents):
    with pytest.raises(NanobertError, match="at least two documents"):
        create_instances(documents, 16, seed=0)


def test_bad_arguments_are_errors():
    documents, _ = make_corpus([3, 3], (2, 4), seed=0)
    with pytest.raises(NanobertError, match="max_seq_len"):
        create_instances(documents, 4, seed=0)
    with pytest.raises(NanobertError, match="random_next_prob"):
        create_instances(documents, 16, seed=0, random_next_prob=1.5)


# --- MaskingCollator ----------------------------------------------------------------------------------


def random_instances(rng: random.Random, n: int, max_len: int, vocab_size: int) -> list[Instance]:
    """Instances whose bodies mix ordinary ids with [UNK], [MASK] and stray specials (never chosen)."""
    out = []
    for _ in range(n):
        len_a, len_b = rng.randint(1, max(1, max_len // 2 - 2)), rng.randint(1, max(1, max_len // 2 - 2))
        body = [
            rng.randint(1, vocab_size - 1) if rng.random() < 0.1 else rng.randint(FIRST, vocab_size - 1)
            for _ in range(len_a + len_b)
        ]
        ids = [CLS, *body[:len_a], SEP, *body[len_a:], SEP]
        types = [0] * (len_a + 2) + [1] * (len_b + 1)
        out.append(Instance(ids, types, rng.randint(0, 1)))
    return out


def padded(instances: list[Instance], width: int) -> torch.Tensor:
    return torch.tensor([x.input_ids + [PAD] * (width - len(x.input_ids)) for x in instances])


@FAST
@given(
    n=st.integers(1, 9),
    max_len=st.integers(5, 40),
    vocab_size=st.integers(6, 200),
    mask_prob=st.sampled_from([0.15, 0.3, 0.5, 1.0]),
    max_predictions=st.one_of(st.none(), st.integers(1, 6)),
    extra_pad=st.one_of(st.none(), st.integers(0, 5)),
    seed=st.integers(0, 2**31),
)
def test_masking_invariants(n, max_len, vocab_size, mask_prob, max_predictions, extra_pad, seed):
    rng = random.Random(seed)
    instances = random_instances(rng, n, max_len, vocab_size)
    longest = max(len(x.input_ids) for x in instances)
    pad_to = None if extra_pad is None else longest + extra_pad
    collate = MaskingCollator(vocab_size, mask_prob, max_predictions, pad_to=pad_to, seed=seed)
    out = collate(instances)

    width = pad_to or longest
    assert set(out) == {"input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"}
    assert all(v.dtype == torch.long for v in out.values())
    original = padded(instances, width)
    assert out["input_ids"].shape == out["labels"].shape == (n, width)
    lengths = torch.tensor([len(x.input_ids) for x in instances])
    assert torch.equal(out["attention_mask"], (torch.arange(width) < lengths[:, None]).long())
    types = torch.tensor([x.token_type_ids + [0] * (width - len(x.token_type_ids)) for x in instances])
    assert torch.equal(out["token_type_ids"], types)
    assert out["next_sentence_label"].tolist() == [x.next_sentence_label for x in instances]

    chosen = out["labels"] != -100
    # Labels carry the original ids, only where chosen; everything else is untouched.
    assert torch.equal(out["labels"][chosen], original[chosen])
    assert torch.equal(out["input_ids"][~chosen], original[~chosen])
    # Only ordinary tokens are ever chosen; a changed one is [MASK] or an ordinary id.
    assert bool((original[chosen] >= FIRST).all())
    changed = out["input_ids"][chosen]
    assert bool(((changed == MASK) | ((changed >= FIRST) & (changed < vocab_size))).all())
    # google's count: exactly max(1, round(n * p)) per sequence, capped, never more than there are.
    for row, x in enumerate(instances):
        candidates = sum(t >= FIRST for t in x.input_ids)
        k = max(1, round(candidates * mask_prob))
        k = min(k, max_predictions or k, candidates)
        assert int(chosen[row].sum()) == k


def test_masking_rate_and_80_10_10_split():
    rng = random.Random(0)
    vocab_size = 5000
    instances = random_instances(rng, 200, 128, vocab_size)
    out = MaskingCollator(vocab_size, seed=0)(instances)
    original = padded(instances, out["input_ids"].shape[1])
    chosen = out["labels"] != -100
    candidates = int(((original >= FIRST) & out["attention_mask"].bool()).sum())
    total = int(chosen.sum())
    assert abs(total / candidates - 0.15) < 0.01  # exact per row up to rounding
    new = out["input_ids"][chosen]
    old = original[chosen]
    # A random replacement equal to the original (1 in ~5000) counts as "unchanged"; far inside the bounds.
    for observed, p in ((new == MASK, 0.8), ((new != MASK) & (new != old), 0.1), (new == old, 0.1)):
        sigma = math.sqrt(total * p * (1 - p))
        assert abs(int(observed.sum()) - total * p) < 4 * sigma


def test_seeded_collators_agree_and_calls_differ():
    instances = random_instances(random.Random(1), 16, 30, 99)
    a, b = MaskingCollator(99, seed=3), MaskingCollator(99, seed=3)
    first, again = a(instances), b(instances)
    assert all(torch.equal(first[key], again[key]) for key in first)
    second = a(instances)
    assert not torch.equal(first["labels"], second["labels"])  # dynamic masking: new choice every call


def test_state_dict_round_trip_reproduces_the_next_batch():
    instances = random_instances(random.Random(2), 16, 30, 99)
    collate = MaskingCollator(99, seed=4)
    collate(instances)
    state = collate.state_dict()
    expected = collate(instances)
    resumed = MaskingCollator(99, seed=12345)
    resumed.load_state_dict(state)
    got = resumed(instances)
    assert all(torch.equal(expected[key], got[key]) for key in expected)


def test_unseeded_collator_follows_torch_seed():
    instances = random_instances(random.Random(3), 8, 20, 99)
    torch.manual_seed(11)
    first = MaskingCollator(99)(instances)
    torch.manual_seed(11)
    assert torch.equal(first["input_ids"], MaskingCollator(99)(instances)["input_ids"])


def word_spans(ids: list[int], word_start: torch.Tensor) -> list[list[int]]:
    """Reference segmentation: a word is an ordinary token plus the "##" ordinary tokens right after it."""
    spans: list[list[int]] = []
    previous_ordinary = False
    for j, t in enumerate(ids):
        ordinary = t >= FIRST
        if ordinary and (bool(word_start[t]) or not previous_ordinary):
            spans.append([j])
        elif ordinary:
            spans[-1].append(j)
        previous_ordinary = ordinary
    return spans


@FAST
@given(
    n=st.integers(1, 8),
    max_len=st.integers(5, 48),
    mask_prob=st.sampled_from([0.15, 0.4]),
    max_predictions=st.one_of(st.none(), st.integers(1, 5)),
    seed=st.integers(0, 2**31),
)
def test_whole_word_masking_takes_all_pieces(n, max_len, mask_prob, max_predictions, seed):
    vocab_size = 97
    word_start = torch.ones(vocab_size, dtype=torch.bool)
    word_start[FIRST + 1 :: 2] = False  # odd-looking vocabulary: every other id is a "##" piece
    rng = random.Random(seed)
    instances = random_instances(rng, n, max_len, vocab_size)
    collate = MaskingCollator(
        vocab_size, mask_prob, max_predictions, seed=seed, whole_word_mask=True, word_start=word_start
    )
    out = collate(instances)
    chosen = out["labels"] != -100
    for row, x in enumerate(instances):
        spans = word_spans(x.input_ids, word_start)
        candidates = sum(len(s) for s in spans)
        k = min(max(1, round(candidates * mask_prob)), max_predictions or candidates, candidates)
        picked = [s for s in spans if bool(chosen[row, s[0]])]
        for span in spans:
            assert len({bool(chosen[row, j]) for j in span}) == 1  # all pieces or none
        for span in picked:
            # One 80/10/10 decision per word: either every piece is [MASK] or none is.
            assert len({int(out["input_ids"][row, j]) == MASK for j in span}) == 1
        count = int(chosen[row].sum())
        assert count == sum(len(s) for s in picked) <= k
        assert int(chosen[row, len(x.input_ids) :].sum()) == 0
        if any(len(s) <= k for s in spans):
            assert count >= 1


def test_whole_word_masking_rate_is_close():
    vocab_size = 301
    word_start = torch.ones(vocab_size, dtype=torch.bool)
    word_start[FIRST::3] = False
    instances = random_instances(random.Random(4), 200, 128, vocab_size)
    out = MaskingCollator(vocab_size, seed=0, whole_word_mask=True, word_start=word_start)(instances)
    chosen = int((out["labels"] != -100).sum())
    candidates = int((padded(instances, out["input_ids"].shape[1]) >= FIRST).sum())
    assert 0.13 < chosen / candidates <= 0.151


def test_collator_errors():
    with pytest.raises(NanobertError, match="vocab_size"):
        MaskingCollator(5)
    with pytest.raises(NanobertError, match="word_start"):
        MaskingCollator(99, whole_word_mask=True)
    with pytest.raises(NanobertError, match="word_start"):
        MaskingCollator(99, whole_word_mask=True, word_start=torch.ones(98, dtype=torch.bool))
    instances = random_instances(random.Random(0), 4, 20, 99)
    with pytest.raises(NanobertError, match="pad_to"):
        MaskingCollator(99, pad_to=3)(instances)
    with pytest.raises(NanobertError, match="vocab_size"):
        MaskingCollator(50)(instances + [Instance([CLS, 98, SEP, 7, SEP], [0, 0, 0, 1, 1], 0)])


# --- batches ------------------------------------------------------------------------------------------


def padded_tokens(groups: list[list[Instance]]) -> int:
    return sum(len(g) * max(len(x.input_ids) for x in g) for g in groups)


@pytest.mark.parametrize("bucket", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_cover_every_instance_once(bucket, drop_last):
    documents, _ = make_corpus([40] * 6, (1, 12), seed=0)
    instances = create_instances(documents, 40, seed=0, short_seq_prob=0.5)
    size = 7
    groups = batches(instances, size, seed=1, epoch=0, drop_last=drop_last, bucket=bucket)
    ids = [id(x) for g in groups for x in g]
    assert len(ids) == len(set(ids))
    if drop_last:
        assert all(len(g) == size for g in groups)
        assert len(ids) == len(instances) // size * size
    else:
        assert sorted(ids) == sorted(id(x) for x in instances)
        assert sum(len(g) < size for g in groups) <= 1
    assert groups == batches(instances, size, seed=1, epoch=0, drop_last=drop_last, bucket=bucket)
    assert groups != batches(instances, size, seed=1, epoch=1, drop_last=drop_last, bucket=bucket)


def test_bucketing_reduces_padding():
    documents, _ = make_corpus([60] * 8, (1, 12), seed=0)
    instances = create_instances(documents, 64, seed=0, short_seq_prob=0.5)
    plain = batches(instances, 8, seed=0, epoch=0)
    bucketed = batches(instances, 8, seed=0, epoch=0, bucket=True)
    assert padded_tokens(bucketed) < 0.9 * padded_tokens(plain)


@pytest.mark.parametrize("bucket", [False, True])
def test_an_epoch_holds_each_of_its_dupe_factor_instance_sets_once(bucket):
    """Epoch e of dupe_factor d: `create_instances`' epochs e*d .. e*d + d - 1, every instance once, batched;
    the same arguments give the same batches, another epoch other ones."""
    documents, _ = make_corpus([5] * 4, (1, 6), seed=2)
    groups = nsp_epoch_batches(
        documents, 24, 5, seed=3, epoch=2, dupe_factor=3, short_seq_prob=0.3, bucket=bucket
    )
    sets = [create_instances(documents, 24, seed=3, epoch=e, short_seq_prob=0.3) for e in (6, 7, 8)]
    key = lambda x: (x.input_ids, x.token_type_ids, x.next_sentence_label)  # noqa: E731
    assert sorted(key(x) for g in groups for x in g) == sorted(key(x) for s in sets for x in s)
    sizes = sorted(map(len, groups), reverse=True)  # bucketed batches come in shuffled order
    assert sizes[:-1] == [5] * (len(sizes) - 1) and 0 < sizes[-1] <= 5
    assert groups == nsp_epoch_batches(documents, 24, 5, 3, 2, 3, 0.3, bucket)
    assert groups != nsp_epoch_batches(documents, 24, 5, 3, 1, 3, 0.3, bucket)


def test_batch_size_must_be_positive():
    with pytest.raises(NanobertError, match="batch_size"):
        batches([], 0, seed=0, epoch=0)


def test_query_layout_lists_cls_then_the_masked_positions_of_each_row():
    labels = torch.full((3, 10), -100)
    labels[0, 2], labels[0, 7], labels[2, 1] = 5, 6, 9
    query_positions, mlm_positions = query_layout(labels, multiple=4, width_multiple=2)
    # Width: [CLS] + at most 2 masked = 3, rounded up to 4; padding slots point at [CLS] (label -100).
    assert query_positions.tolist() == [[0, 2, 7, 0], [0, 0, 0, 0], [0, 1, 0, 0]]
    # Flat slots into B*M in the order of masked_positions, padded with slot 0 to a multiple of 4.
    assert mlm_positions.tolist() == [1, 2, 9, 0]
    picked = labels.gather(1, query_positions).reshape(-1)[mlm_positions]
    assert picked.tolist() == [5, 6, 9, -100]
    assert torch.equal(picked[:3], labels.reshape(-1)[masked_positions(labels)])


# ----------------------------------------------------------------------------------------------------------
# Causal windows: the corpus as one stream, cut into [CLS]-led windows


def test_causal_windows_cover_the_stream_and_move_between_epochs():
    from nanobert.data.windows import causal_windows

    docs = [[[FIRST + i for i in range(d * 10, d * 10 + 3 + d)] for _ in range(1)] for d in range(5)]
    stream = [t for doc in docs for t in [*(t for s in doc for t in s), SEP]]
    held = causal_windows(docs, seq_len=6, seed=0, shuffle=False, keep_last=True)
    assert all(w[0] == CLS and len(w) <= 6 for w in held)
    assert [t for w in held for t in w[1:]] == stream  # every token once, in order, documents end in [SEP]
    epoch0 = causal_windows(docs, seq_len=6, seed=3, epoch=0)
    epoch1 = causal_windows(docs, seq_len=6, seed=3, epoch=1)
    assert all(len(w) == 6 for w in epoch0 + epoch1)  # training drops the short tail
    assert epoch0 != epoch1 and epoch0 == causal_windows(docs, seq_len=6, seed=3, epoch=0)  # pure
    for w in epoch0:  # each window is a contiguous run of the stream
        body = w[1:]
        assert any(stream[i : i + 5] == body for i in range(len(stream) - 4))


@pytest.mark.parametrize("extra", [0, 1, 7, 8])
def test_a_causal_stream_of_one_to_two_windows_gives_a_full_window_every_epoch(extra):
    """The random offset used to be any of seq_len - 1 places, so a stream shorter than two windows lost
    its only full window in most epochs (and every epoch of a --data toy run of max_seq_len 64 or more)."""
    from nanobert.data.windows import causal_stream_tokens, causal_windows, require_causal_window

    seq_len = 10
    docs = [[[FIRST + i for i in range(seq_len - 2 + extra)]]]  # and its [SEP]: (seq_len - 1) + extra tokens
    assert causal_stream_tokens(docs) == seq_len - 1 + extra
    require_causal_window(causal_stream_tokens(docs), seq_len)
    stream = [*docs[0][0], SEP]
    for epoch in range(30):
        windows = causal_windows(docs, seq_len, seed=1, epoch=epoch)
        assert [len(w) for w in windows] == [seq_len], (epoch, windows)
        assert any(windows[0][1:] == stream[i : i + seq_len - 1] for i in range(extra + 1))
    too_long = (
        f"too short for one window of max_seq_len={seq_len + extra + 1} tokens: it has {seq_len + extra - 1}"
    )
    with pytest.raises(NanobertError, match=too_long):
        require_causal_window(causal_stream_tokens(docs), seq_len + extra + 1)


def test_causal_collator_labels_are_the_inputs():
    from nanobert.data.windows import CausalCollator

    batch = CausalCollator(pad_to_multiple_of=4)([[CLS, 7, 8, 9, 10], [CLS, 11, SEP]])
    assert batch["input_ids"].tolist() == [[CLS, 7, 8, 9, 10, 0, 0, 0], [CLS, 11, SEP, 0, 0, 0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 7, 8, 9, 10, -100, -100, -100], [-100, 11, SEP] + [-100] * 5]
    assert batch["attention_mask"].sum().item() == 8 and batch["token_type_ids"].abs().sum() == 0
