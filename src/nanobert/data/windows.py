"""Next-word windows: the causal objective's data (GPT, Radford et al. 2018), which needs neither pairs nor
masks.

`causal_windows` reads the corpus as one stream of tokens, documents separated by [SEP], and cuts it into
windows that each start with [CLS]; `CausalCollator` stacks them with labels equal to the inputs (the model
shifts them by one). A pure function of its arguments and `(seed, epoch)`, as the NSP pairs are.
"""

from __future__ import annotations

from typing import Any

import torch

from nanobert.data.nsp import Documents, seeded_rng
from nanobert.errors import NanobertError
from nanobert.tokenizer import CLS_ID, IGNORE_INDEX, PAD_ID, SEP_ID, pad


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
    rng = seeded_rng("causal", seed, epoch)
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


__all__ = [
    "CausalCollator",
    "causal_batches",
    "causal_stream_tokens",
    "causal_windows",
    "require_causal_window",
]
