"""Pretraining data: next-sentence-prediction instances from documents, and the dynamic masking collator.

`create_instances` follows `create_instances_from_document` in google-research/bert
`create_pretraining_data.py`: per document a target length (sometimes shorter), sentences accumulated into a
chunk, a random split point, a random B from a *different* document half of the time with the unused
sentences put back, and the longer side truncated at a random end. Masking is not done there but per batch in
`MaskingCollator` (the dynamic masking of RoBERTa, Liu et al. 2019), with google's exact count of predictions
per sequence and its 80/10/10 rule. `batches` shuffles and groups instances, optionally length-bucketed.

The causal objective (GPT, Radford et al. 2018) needs neither pairs nor masks: `causal_windows` reads the
corpus as one stream of tokens, documents separated by [SEP], and cuts it into windows that each start with
[CLS]; `CausalCollator` stacks them with labels equal to the inputs (the model shifts them by one).

Everything except the collator is a pure function of its arguments and `(seed, epoch)`; the collator owns one
`torch.Generator` whose state can be saved and restored so a resumed run masks exactly as the original.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from nanobert.errors import NanobertError
from nanobert.tokenizer import (
    CLS_ID,
    IGNORE_INDEX,
    MASK_ID,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    SEP_ID,
    UNK_ID,
    pad,
)

__all__ = [
    "CausalCollator",
    "Documents",
    "Instance",
    "MaskingCollator",
    "batches",
    "causal_batches",
    "causal_stream_tokens",
    "causal_windows",
    "create_instances",
    "masked_positions",
    "nsp_documents",
    "nsp_epoch_batches",
    "query_layout",
    "require_causal_window",
    "word_start_table",
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


def _rng(*parts: object) -> random.Random:
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
            tokens_b: list[int] = []
            if len(chunk) == 1 or rng.random() < random_next_prob:
                label = NOT_NEXT
                target_b = target - len(tokens_a)
                # google retries up to 10 times and may still land on the same document; drawing from the
                # other n-1 indices is one draw and always different.
                other = rng.randrange(len(docs) - 1)
                if other >= doc_index:
                    other += 1
                random_doc = docs[other]
                for sentence in random_doc[rng.randrange(len(random_doc)) :]:
                    tokens_b.extend(sentence)
                    if len(tokens_b) >= target_b:
                        break
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
    rng = _rng("instances", seed, epoch)
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
    rng = _rng("batches", seed, epoch)
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


def masked_positions(labels: torch.Tensor, multiple: int = 1) -> torch.Tensor:
    """Flat indices (into B*T) of the labelled positions, padded with index 0 to a multiple of `multiple`.

    Computed on the host before a batch moves to the GPU, so the model can decode only these positions
    without a device-to-host synchronisation; the padding points at position 0 of the first row ([CLS],
    label -100), which the loss ignores, and keeps the number of distinct shapes small for torch.compile.
    """
    return _pad_with_zeros((labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1), multiple)


def _pad_with_zeros(positions: torch.Tensor, multiple: int) -> torch.Tensor:
    """positions followed by zeros up to a multiple of `multiple` (index 0 is a [CLS] slot, label -100)."""
    pad = -len(positions) % multiple
    return torch.cat([positions, positions.new_zeros(pad)]) if pad else positions


def query_layout(
    labels: torch.Tensor, multiple: int = 1, width_multiple: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs of the model's last-layer pruning: `query_positions` (B, M) and `mlm_positions` (N,).

    Row b of query_positions is [CLS] (position 0), then the labelled positions of row b in order, padded
    with 0 to a common width M (rounded up to `width_multiple`, to keep compiled shapes few). mlm_positions
    are the flat indices into B*M of the labelled slots, in the same row-major order as `masked_positions`,
    padded with 0 (a [CLS] slot, label -100) to a multiple of `multiple`. Computed on the host, like
    `masked_positions`, so the model needs no device-to-host synchronisation.
    """
    B = labels.size(0)
    labelled = labels != IGNORE_INDEX  # (B, T)
    width = 1 + int(labelled.sum(1).max()) if B else 1
    width += -width % width_multiple
    slot = labelled.cumsum(1)  # the j-th labelled position of a row goes to slot j (slot 0 is [CLS])
    rows, cols = labelled.nonzero(as_tuple=True)  # row-major, the order of masked_positions
    query_positions = torch.zeros(B, width, dtype=torch.long)
    query_positions[rows, slot[rows, cols]] = cols
    return query_positions, _pad_with_zeros(rows * width + slot[rows, cols], multiple)


class MaskingCollator:
    """Pads a list of `Instance`s into tensors and masks them for MLM, differently on every call.

    Per sequence, exactly `k = max(1, round(n * mask_prob))` of its `n` candidate tokens are chosen (google's
    rule, capped at `max_predictions`); candidates are all tokens except [PAD], [CLS], [SEP], [MASK] and [UNK]
    ([UNK] is excluded because predicting it teaches nothing). Each chosen token becomes [MASK] with
    probability 0.8, a uniformly random ordinary token (id in `[num_special_tokens, vocab_size)`) with 0.1,
    and stays unchanged with 0.1.

    With `whole_word_mask=True`, `word_start[id]` says whether token `id` begins a word (does not start with
    "##"); whole words are chosen in random order while their pieces fit in `k`, so at most `k` tokens are
    chosen (a row whose every word is longer than `k` gets none, as in google's code). Unlike google, the
    80/10/10 decision is made once per word, so a word is never left half visible.

    The collator owns a `torch.Generator` (seeded from `seed`, or from `torch.initial_seed()` when None);
    `state_dict()` / `load_state_dict()` save and restore it. DataLoader workers each get a copy with the same
    state, so call the collator in the main process (or give each worker its own seed).
    """

    def __init__(
        self,
        vocab_size: int,
        mask_prob: float = 0.15,
        max_predictions: int | None = None,
        pad_to: int | None = None,
        seed: int | None = None,
        pad_to_multiple_of: int | None = None,
        whole_word_mask: bool = False,
        word_start: torch.Tensor | None = None,
        pad_id: int = PAD_ID,
        unk_id: int = UNK_ID,
        cls_id: int = CLS_ID,
        sep_id: int = SEP_ID,
        mask_id: int = MASK_ID,
        num_special_tokens: int = NUM_SPECIAL_TOKENS,
    ) -> None:
        if vocab_size <= num_special_tokens:
            raise NanobertError(
                f"vocab_size={vocab_size} leaves no ordinary tokens; it must exceed {num_special_tokens}"
            )
        if not 0.0 < mask_prob <= 1.0:
            raise NanobertError(f"mask_prob={mask_prob} must be in (0, 1]; BERT uses 0.15")
        if max_predictions is not None and max_predictions < 1:
            raise NanobertError(f"max_predictions={max_predictions} must be at least 1 (or None for no cap)")
        if pad_to is not None and pad_to < 1:
            raise NanobertError(f"pad_to={pad_to} must be at least 1 (or None to pad to the longest)")
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise NanobertError(f"pad_to_multiple_of={pad_to_multiple_of} must be at least 1 (or None)")
        if whole_word_mask:
            if word_start is None:
                raise NanobertError("whole_word_mask needs word_start (a bool per vocabulary id); pass it")
            if word_start.dtype != torch.bool or tuple(word_start.shape) != (vocab_size,):
                raise NanobertError(
                    f"word_start must be a bool tensor of shape ({vocab_size},), got "
                    f"{word_start.dtype} {tuple(word_start.shape)}; build it from the tokenizer vocabulary"
                )
        self.vocab_size = vocab_size
        self.mask_prob = mask_prob
        self.max_predictions = max_predictions
        self.pad_to = pad_to
        # Rounding the padded length up to a multiple keeps the set of batch shapes small (fewer
        # torch.compile recompilations, tensor-core friendly sizes) while length bucketing keeps waste low.
        self.pad_to_multiple_of = pad_to_multiple_of
        self.whole_word_mask = whole_word_mask
        self.word_start = word_start
        self.pad_id, self.mask_id, self.num_special_tokens = pad_id, mask_id, num_special_tokens
        self.never_chosen = torch.tensor([pad_id, unk_id, cls_id, sep_id, mask_id])
        self.generator = torch.Generator()
        self.generator.manual_seed(torch.initial_seed() if seed is None else seed)

    def state_dict(self) -> dict[str, Any]:
        """The generator state; restoring it makes the next batches mask exactly as they would have."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state from `state_dict()`."""
        self.generator.set_state(state["generator"])

    def _pad(self, instances: list[Instance]) -> dict[str, torch.Tensor]:
        input_ids, attention_mask = pad(
            [x.input_ids for x in instances], self.pad_id, self.pad_to, self.pad_to_multiple_of
        )
        token_type_ids, _ = pad([x.token_type_ids for x in instances], 0, input_ids.size(1))
        return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}

    def __call__(self, instances: list[Instance]) -> dict[str, torch.Tensor]:
        """Pad and mask a batch. Returns long tensors `input_ids`, `token_type_ids`, `attention_mask`,
        `labels` (all (B, T), T = `pad_to` or the longest instance) and `next_sentence_label` (B,).

        `labels` holds the original id at chosen positions and -100 elsewhere; `input_ids` differs from the
        original only at chosen positions.
        """
        if not instances:
            raise NanobertError("cannot collate an empty batch; check batch_size and the number of instances")
        batch = self._pad(instances)
        ids, attention_mask = batch["input_ids"], batch["attention_mask"]
        if int(ids.max()) >= self.vocab_size:
            raise NanobertError(
                f"token id {int(ids.max())} >= vocab_size={self.vocab_size}; the collator and the tokenizer "
                "must use the same vocabulary"
            )
        chosen, u = self._choose(ids, attention_mask)

        # 80% [MASK], 10% random ordinary token, 10% unchanged; u is drawn per word (or per token).
        random_ids = torch.randint(
            self.num_special_tokens, self.vocab_size, ids.shape, generator=self.generator
        )
        labels = torch.where(chosen, ids, IGNORE_INDEX)
        masked = torch.where(chosen & (u < 0.8), self.mask_id, ids)
        masked = torch.where(chosen & (u >= 0.8) & (u < 0.9), random_ids, masked)
        return {
            "input_ids": masked,
            "token_type_ids": batch["token_type_ids"],
            "attention_mask": attention_mask.long(),
            "labels": labels,
            "next_sentence_label": torch.tensor([x.next_sentence_label for x in instances], dtype=torch.long),
        }

    def _choose(self, ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Which positions to predict, (B, T) bool, and a uniform draw per position shared within a word.

        Token-level masking is the special case where every candidate is its own one-piece word, so both modes
        share one path: words get random scores, are sorted by score, and are taken while the running count of
        their pieces stays <= k. With one-piece words that takes exactly k tokens.
        """
        B, T = ids.shape
        cand = attention_mask & ~torch.isin(ids, self.never_chosen)  # (B, T)
        n = cand.sum(dim=1)  # (B,)
        # In float64 and rounding half to even, this is exactly google's Python int(round(n * p)).
        k = torch.clamp(torch.round(n.double() * self.mask_prob).long(), min=1)
        if self.max_predictions is not None:
            k = torch.clamp(k, max=self.max_predictions)
        k = torch.minimum(k, n)  # (B,)

        if self.whole_word_mask:
            prev_cand = torch.nn.functional.pad(cand[:, :-1], (1, 0), value=False)
            # A "##" piece right after [CLS]/[SEP]/[UNK] has no word to join, so it starts its own.
            starts = cand & (self.word_start[ids] | ~prev_cand)
        else:
            starts = cand
        # Word w of a row (1-based) for candidate positions; 0 collects all non-candidates.
        word = torch.where(cand, torch.cumsum(starts.long(), dim=1), 0)  # (B, T)
        word_len = torch.zeros(B, T + 1, dtype=torch.long).scatter_add_(1, word, cand.long())  # (B, T+1)

        score = torch.rand(B, T + 1, generator=self.generator)
        # Slot 0 and unused word slots have length 0; words longer than k can never fit. Both sort last.
        usable = (word_len > 0) & (word_len <= k[:, None])
        score = torch.where(usable, score, 2.0)
        order = score.argsort(dim=1)  # (B, T+1)
        fits = torch.cumsum(word_len.gather(1, order), dim=1) <= k[:, None]
        take_sorted = fits & usable.gather(1, order)
        word_taken = torch.zeros_like(take_sorted).scatter_(1, order, take_sorted)  # (B, T+1)
        chosen = word_taken.gather(1, word) & cand

        u = torch.rand(B, T + 1, generator=self.generator).gather(1, word)  # (B, T)
        return chosen, u


def word_start_table(tokenizer: Any, vocab_size: int) -> torch.Tensor:
    """For whole-word masking: True for ids that begin a word (no '##' continuation prefix)."""
    table = torch.ones(vocab_size, dtype=torch.bool)
    for token, idx in tokenizer.get_vocab().items():
        if token.startswith("##") and idx < vocab_size:
            table[idx] = False
    return table


def causal_windows(
    documents: Documents,
    seq_len: int,
    seed: int,
    epoch: int = 0,
    shuffle: bool = True,
    keep_last: bool = False,
) -> list[list[int]]:
    """Windows of the corpus for next-token training: `[CLS]` and then `seq_len - 1` tokens of the stream.

    The stream is every document's sentences in order, each document followed by [SEP] (so the model also
    learns where a document ends). With `shuffle` (training) the first window starts at an offset drawn from
    (seed, epoch), so each epoch cuts the text at other places, and the windows come out in a shuffled order;
    without it (held-out data) the cut starts at 0 and the order is the text's. The last, shorter window is
    kept only with `keep_last`. A stream of at least `seq_len - 1` tokens (`causal_stream_tokens`) gives at
    least one full window in every epoch: the offset never leaves less than a window after it. A pure
    function of its arguments.
    """
    if seq_len < 2:
        raise NanobertError(f"seq_len={seq_len} is too small; a window needs [CLS] and at least one token")
    stream = [t for doc in documents for t in [*(t for sentence in doc for t in sentence), SEP_ID]]
    span = seq_len - 1
    rng = _rng("causal", seed, epoch)
    # Any offset below span on a long stream; on one shorter than two windows, one that leaves a full window.
    start = rng.randrange(max(1, min(span, len(stream) - span + 1))) if shuffle else 0
    windows = [[CLS_ID, *stream[i : i + span]] for i in range(start, len(stream), span)]
    if windows and len(windows[-1]) < seq_len and not keep_last:
        windows.pop()
    if shuffle:
        rng.shuffle(windows)
    return windows


def causal_stream_tokens(documents: Documents) -> int:
    """Tokens in the stream `causal_windows` cuts: every sentence's, plus one [SEP] per document."""
    return sum(len(sentence) for doc in documents for sentence in doc) + len(documents)


def require_causal_window(stream_tokens: int, seq_len: int) -> None:
    """NanobertError unless a training stream of `stream_tokens` tokens fills one window of `seq_len`
    ([CLS] and `seq_len - 1` tokens): with less, every epoch would have no batch at all."""
    if stream_tokens >= seq_len - 1:
        return
    smaller = f" (at most {stream_tokens + 1})" if stream_tokens + 1 >= 8 else ""  # TrainConfig's minimum
    raise NanobertError(
        f"the training text is too short for one window of max_seq_len={seq_len} tokens: it has "
        f"{stream_tokens}; pass a smaller --set max_seq_len=...{smaller} or train on more text"
    )


def causal_batches(
    documents: Documents, seq_len: int, batch_size: int, seed: int, epoch: int
) -> list[list[list[int]]]:
    """One epoch of shuffled training windows (`causal_windows`), `batch_size` to a batch."""
    windows = causal_windows(documents, seq_len, seed, epoch)
    return [windows[i : i + batch_size] for i in range(0, len(windows), batch_size)]


class CausalCollator:
    """Stacks causal windows (lists of ids) into a batch: `input_ids`, `token_type_ids` (all 0),
    `attention_mask` and `labels` = the inputs with -100 at padding and at [CLS], which nothing predicts.

    Nothing here is random; `state_dict` exists so a batch stream can treat it like `MaskingCollator`.
    """

    def __init__(self, pad_to_multiple_of: int | None = None, pad_id: int = PAD_ID):
        self.pad_to_multiple_of, self.pad_id = pad_to_multiple_of, pad_id

    def __call__(self, windows: list[list[int]]) -> dict[str, torch.Tensor]:
        if not windows:
            raise NanobertError("cannot collate an empty batch; check batch_size and the corpus size")
        input_ids, mask = pad(windows, self.pad_id, multiple_of=self.pad_to_multiple_of)  # (B, T)
        labels = input_ids.masked_fill(~mask, IGNORE_INDEX)
        labels[:, 0] = IGNORE_INDEX  # position 0 has no left context to predict it from
        return {
            "input_ids": input_ids,
            "token_type_ids": torch.zeros_like(input_ids),
            "attention_mask": mask.long(),
            "labels": labels,
        }

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
