"""The masking: 80/10/10 dynamic masking of a batch of NSP pairs, and the positions the last layer decodes.

`MaskingCollator` pads a batch of `nsp.Instance`s and masks it afresh on every call (the dynamic masking of
RoBERTa, Liu et al. 2019), with google's exact count of predictions per sequence and its 80/10/10 rule:
[MASK] for 80% of the chosen tokens, a random token for 10%, the token itself for 10%; labels are
`IGNORE_INDEX` everywhere else. It owns one `torch.Generator` whose state is saved and restored, so a resumed
run masks exactly as the original. `masked_positions` and `query_layout` compute on the host which positions
the model decodes, so that it needs no device-to-host synchronisation.
"""

from __future__ import annotations

from typing import Any

import torch

from nanobert.data.nsp import Instance
from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, IGNORE_INDEX, MASK_ID, NUM_SPECIAL_TOKENS, PAD_ID, SEP_ID, UNK_ID, pad


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


__all__ = ["MaskingCollator", "masked_positions", "query_layout", "word_start_table"]
