"""Next-sentence-prediction instances from documents: google's pairs, an epoch of them in batches.

`create_instances` follows `create_instances_from_document` in google-research/bert
`create_pretraining_data.py`: per document a target length (sometimes shorter), sentences accumulated into a
chunk, a random split point, a random B from a *different* document half of the time with the unused
sentences put back, and the longer side truncated at a random end. Masking is not done here but per batch
(masking.py, the dynamic masking of RoBERTa). `batches` shuffles and groups instances, optionally
length-bucketed. Everything here is a pure function of its arguments and `(seed, epoch)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, SEP_ID

__all__ = [
    "Documents",
    "Instance",
    "batches",
    "create_instances",
    "nsp_documents",
    "nsp_epoch_batches",
    "seeded_rng",
]

NOT_NEXT, IS_NEXT = 1, 0  # Hugging Face convention: label 0 means B really follows A

# A tokenized corpus: `documents[d][s]` is the list of token ids (no specials) of sentence s of document d.
Documents = list[list[list[int]]]


@dataclass(frozen=True)
class Instance:
    """One NSP example, unpadded and unmasked.

    `input_ids` is `[CLS] A [SEP] B [SEP]`; `token_type_ids` is 0 over `[CLS] A [SEP]` and 1 over `B [SEP]`;
    `next_sentence_label` is 0 when B follows A in the same document (IsNext), 1 when B is random (NotNext).
    """

    input_ids: list[int]
    token_type_ids: list[int]
    next_sentence_label: int


def seeded_rng(*parts: object) -> random.Random:
    # A str seed goes through SHA-512 inside random.seed, so it is stable across runs (unlike salted hash()).
    return random.Random(":".join(str(p) for p in parts))


def _truncated_bounds(len_a: int, len_b: int, max_num_tokens: int, rng: random.Random) -> tuple[int, ...]:
    """google's `truncate_seq_pair`, computed as slice bounds instead of repeated `del tokens[0]`.

    Draws from `rng` exactly as google does (one draw per removed token), but deleting from the front of a
    list is O(n) per token, which turns a very long sentence into quadratic work. Returns
    `(a_start, a_stop, b_start, b_stop)`.
    """
    a_start, a_stop, b_start, b_stop = 0, len_a, 0, len_b
    while (a_stop - a_start) + (b_stop - b_start) > max_num_tokens:
        front = rng.random() < 0.5
        if a_stop - a_start > b_stop - b_start:
            a_start, a_stop = (a_start + 1, a_stop) if front else (a_start, a_stop - 1)
        else:
            b_start, b_stop = (b_start + 1, b_stop) if front else (b_start, b_stop - 1)
    return a_start, a_stop, b_start, b_stop


def _random_b(docs: Documents, doc_index: int, target_b: int, rng: random.Random) -> list[int]:
    """Sentence B of a NotNext pair: from a random sentence of another document on, to `target_b` tokens."""
    # google retries up to 10 times and may still land on the same document; drawing from the other n-1
    # indices is one draw and always different.
    other = rng.randrange(len(docs) - 1)
    if other >= doc_index:
        other += 1
    random_doc = docs[other]
    tokens_b: list[int] = []
    for sentence in random_doc[rng.randrange(len(random_doc)) :]:
        tokens_b.extend(sentence)
        if len(tokens_b) >= target_b:
            break
    return tokens_b


def _instances_from_document(
    docs: Documents,
    doc_index: int,
    max_num_tokens: int,
    short_seq_prob: float,
    random_next_prob: float,
    rng: random.Random,
    cls_id: int,
    sep_id: int,
) -> list[Instance]:
    """All instances of one document (google's `create_instances_from_document`); `docs` has no empties."""
    document = docs[doc_index]
    # Mostly fill the sequence (compute is spent on long inputs anyway), but sometimes go short so the model
    # also sees the short sequences of fine-tuning tasks.
    target = max_num_tokens
    if rng.random() < short_seq_prob:
        target = rng.randint(2, max_num_tokens)

    instances: list[Instance] = []
    chunk: list[list[int]] = []
    chunk_len = 0
    i = 0
    while i < len(document):
        chunk.append(document[i])
        chunk_len += len(document[i])
        if i == len(document) - 1 or chunk_len >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
            if len(chunk) == 1 or rng.random() < random_next_prob:
                label = NOT_NEXT
                tokens_b = _random_b(docs, doc_index, target - len(tokens_a), rng)
                # The sentences after A were not used; put them back so they can start the next chunk.
                i -= len(chunk) - a_end
            else:
                label = IS_NEXT
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            a0, a1, b0, b1 = _truncated_bounds(len(tokens_a), len(tokens_b), max_num_tokens, rng)
            # Cannot happen with non-empty sentences and max_num_tokens >= 2; google asserts, we skip.
            if a1 > a0 and b1 > b0:
                len_a, len_b = a1 - a0, b1 - b0
                instances.append(
                    Instance(
                        input_ids=[cls_id, *tokens_a[a0:a1], sep_id, *tokens_b[b0:b1], sep_id],
                        token_type_ids=[0] * (len_a + 2) + [1] * (len_b + 1),
                        next_sentence_label=label,
                    )
                )
            chunk, chunk_len = [], 0
        i += 1
    return instances


def nsp_documents(documents: Documents) -> Documents:
    """The non-empty documents with their non-empty sentences; NanobertError if fewer than two (NotNext
    needs another document). Filtering copies references only, never token lists."""
    docs = [d for d in ([s for s in doc if s] for doc in documents) if d]
    if len(docs) < 2:
        raise NanobertError(
            f"NSP needs at least two documents; this corpus has {len(docs)} — add documents separated by a "
            "blank line or a ' = Title = ' heading"
        )
    return docs


def create_instances(
    documents: Documents,
    max_seq_len: int,
    seed: int,
    epoch: int = 0,
    short_seq_prob: float = 0.1,
    random_next_prob: float = 0.5,
    cls_id: int = CLS_ID,
    sep_id: int = SEP_ID,
) -> list[Instance]:
    """Build one epoch of NSP instances, shuffled; a pure function of its arguments.

    `documents[d][s]` is the list of token ids (no specials) of sentence `s` of document `d`; empty sentences
    and documents are ignored. Every instance has `len(input_ids) <= max_seq_len`, at least one token in A
    and in B, and is IsNext (label 0) with probability about `1 - random_next_prob` (a one-sentence chunk is
    always NotNext, as in google's code). A different `epoch` gives different split points, partners and
    order.

    Raises `NanobertError` if fewer than two documents are non-empty (NotNext needs another document) or if
    `max_seq_len < 5` (three specials plus one token each for A and B).
    """
    if max_seq_len < 5:
        raise NanobertError(
            f"max_seq_len={max_seq_len} is too small; it must be at least 5 ([CLS] A [SEP] B [SEP])"
        )
    for name, p in (("short_seq_prob", short_seq_prob), ("random_next_prob", random_next_prob)):
        if not 0.0 <= p <= 1.0:
            raise NanobertError(f"{name}={p} is not a probability; use a value between 0 and 1")
    docs = nsp_documents(documents)
    rng = seeded_rng("instances", seed, epoch)
    max_num_tokens = max_seq_len - 3
    instances: list[Instance] = []
    for d in range(len(docs)):
        instances.extend(
            _instances_from_document(
                docs, d, max_num_tokens, short_seq_prob, random_next_prob, rng, cls_id, sep_id
            )
        )
    rng.shuffle(instances)
    return instances


def batches(
    instances: list[Instance],
    batch_size: int,
    seed: int,
    epoch: int,
    drop_last: bool = False,
    bucket: bool = False,
) -> list[list[Instance]]:
    """Shuffle `instances` (seeded by `(seed, epoch)`) and group them into batches of `batch_size`.

    Every instance appears exactly once, except the last incomplete batch is left out when `drop_last`. With
    `bucket=True`, instances are sorted by length inside windows of 100 batches before grouping, so a batch
    holds similar lengths and little padding; the batch order is then shuffled so lengths do not trend
    through the epoch.
    """
    if batch_size < 1:
        raise NanobertError(f"batch_size={batch_size} must be at least 1")
    rng = seeded_rng("batches", seed, epoch)
    order = list(range(len(instances)))
    rng.shuffle(order)
    if bucket:
        # Windows (not a global sort) keep the randomness of which instances meet in a batch.
        window = 100 * batch_size
        for start in range(0, len(order), window):
            order[start : start + window] = sorted(
                order[start : start + window], key=lambda j: len(instances[j].input_ids)
            )
    groups = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    if drop_last and groups and len(groups[-1]) < batch_size:
        groups.pop()
    if bucket:
        rng.shuffle(groups)
    return [[instances[j] for j in group] for group in groups]


def nsp_epoch_batches(
    documents: Documents,
    max_seq_len: int,
    batch_size: int,
    seed: int,
    epoch: int,
    dupe_factor: int = 1,
    short_seq_prob: float = 0.1,
    bucket: bool = False,
) -> list[list[Instance]]:
    """Epoch `epoch` of NSP training batches: `dupe_factor` instance sets (google's dupe_factor: each pairs
    and splits the documents afresh; set d of epoch e is `create_instances`' epoch e * dupe_factor + d), then
    shuffled and grouped by `batches`. A pure function of its arguments; what a training run walks."""
    instances = [
        instance
        for dupe in range(dupe_factor)
        for instance in create_instances(
            documents, max_seq_len, seed, epoch * dupe_factor + dupe, short_seq_prob=short_seq_prob
        )
    ]
    return batches(instances, batch_size, seed, epoch, bucket=bucket)
