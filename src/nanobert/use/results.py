"""What a loaded model's calls return: small dataclasses of plain Python values or NumPy arrays, which print
as the CLI shows them and turn into the CLI's and the page's JSON with `dataclasses.asdict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Candidate:
    token: str  # the word piece as in the vocabulary ("##s" for a continuation piece)
    token_id: int
    probability: float  # softmax over the whole vocabulary at this position
    sequence: str  # the text with this candidate in place, word pieces joined; other masks stay [MASK]


@dataclass
class MaskPrediction:
    position: int  # index in the token sequence ([CLS] is 0)
    candidates: list[Candidate]  # most probable first


@dataclass
class FillMaskResult:
    tokens: list[str]  # the input as word pieces, [CLS] ... [SEP]
    masks: list[MaskPrediction]  # one per [MASK], left to right
    filled: str  # every mask replaced by its top candidate, word pieces joined

    def __str__(self) -> str:
        """What `nanobert fill-mask` prints: each [MASK]'s candidates with their probabilities."""
        lines = []
        for n, mask in enumerate(self.masks, 1):
            lines.append(f"[MASK] {n} of {len(self.masks)} (token position {mask.position}):")
            width = max(len(c.token) for c in mask.candidates)
            lines += [f"  {c.probability:6.1%}  {c.token:<{width}s}  {c.sequence}" for c in mask.candidates]
        if len(self.masks) > 1:
            lines.append(f"top guesses together: {self.filled}")
        return "\n".join(lines)


@dataclass
class NextSentence:
    is_next: float  # P(B follows A)
    not_next: float  # P(B is a random sentence) = 1 - is_next

    def __str__(self) -> str:
        """What `nanobert nsp` prints."""
        return f"IsNext {self.is_next:.1%}  NotNext {self.not_next:.1%}"


@dataclass
class AttentionMaps:
    tokens: list[str]  # T word pieces, [CLS] A [SEP] (B [SEP])
    token_type_ids: list[int]
    probs: np.ndarray = field(repr=False)  # (L, nh, T, T): layer, head, query position, key position


@dataclass
class Generation:
    prompt: str
    continuation: str  # the new text, word pieces joined back into words
    text: str  # prompt and continuation as one text
    tokens: list[str]  # the new word pieces, in order
    probabilities: list[float]  # the model's probability of each new piece (before temperature and top-k)
    stop_reason: str  # "max_new_tokens", "end of document" ([SEP]) or "max length" (the position table)


__all__ = ["AttentionMaps", "Candidate", "FillMaskResult", "Generation", "MaskPrediction", "NextSentence"]
