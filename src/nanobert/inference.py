"""Use a trained checkpoint: fill in [MASK]s, score sentence pairs, embed texts, read attention maps.

`load(checkpoint)` returns an `InferenceModel`, whose methods mirror the CLI: `fill_mask`, `next_sentence`,
`embed`, `similarity`, `attention` and `explain`. Each one tokenizes with the checkpoint's own tokenizer and
runs `BertForPreTraining` in eval mode without gradients; the model itself is untouched. Texts longer than
the model's position table are truncated (the longer side of a pair first, as in pretraining). Results are
small dataclasses of plain Python values or NumPy arrays; nothing here prints. `plots.plot_attention` draws
the maps with matplotlib.

The two heads are read the way they were trained (Devlin et al. 2019, section 3.1): the masked-LM head gives
a distribution over the vocabulary at every position, and the next-sentence head's class 0 is "B follows A".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.checkpoint import load_pretraining_checkpoint
from nanobert.device import resolve_device
from nanobert.errors import NanobertError
from nanobert.explain import Trace, explain
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import (
    CLS_ID,
    MASK_ID,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    SEP_ID,
    encode_pair,
    load_tokenizer,
    pad,
)

# "[mask]" typed in lower case would otherwise be split into "[", "mask", "]" and silently mean nothing.
_MASK_ANY_CASE = re.compile(r"\[mask\]", re.IGNORECASE)


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


@dataclass
class NextSentence:
    is_next: float  # P(B follows A)
    not_next: float  # P(B is a random sentence) = 1 - is_next


@dataclass
class AttentionMaps:
    tokens: list[str]  # T word pieces, [CLS] A [SEP] (B [SEP])
    token_type_ids: list[int]
    probs: np.ndarray = field(repr=False)  # (L, nh, T, T): layer, head, query position, key position


class InferenceModel:
    """A pretrained BERT with its tokenizer, ready to answer questions. Build it with `load(checkpoint)`."""

    def __init__(self, model: BertForPreTraining, tokenizer: Any, config: dict | None = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config or {}
        self.device = next(model.parameters()).device

    @property
    def max_length(self) -> int:
        return self.model.config.max_position_embeddings

    def encode(self, text_a: str, text_b: str | None = None) -> dict[str, list[int]]:
        """`[CLS] A [SEP] (B [SEP])` ids, token types and mask, truncated to the model's position table."""
        return encode_pair(self.tokenizer, text_a, text_b, max_length=self.max_length)

    def tokens(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.id_to_token(i) for i in ids]

    def pad_batch(self, encodings: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        """Right-pad encodings into (B, T) tensors on the model's device."""
        input_ids, mask = pad([e["input_ids"] for e in encodings], PAD_ID)
        token_type_ids, _ = pad([e["token_type_ids"] for e in encodings], 0)
        batch = {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": mask.long()}
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.no_grad()
    def forward(self, text_a: str, text_b: str | None = None, **kwargs: Any):
        """Run BertForPreTraining on one text or pair; returns (encoding, PreTrainingOutput)."""
        enc = self.encode(text_a, text_b)
        batch = self.pad_batch([enc])
        return enc, self.model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], **kwargs)

    def _decode(self, ids: list[int]) -> str:
        """Word pieces joined back into text ("play ##ing" -> "playing"), [CLS]/[SEP]/[PAD] dropped."""
        pieces = [i for i in ids if i not in (CLS_ID, SEP_ID, PAD_ID)]
        return self.tokenizer.decode(pieces, skip_special_tokens=False)

    def fill_mask(self, text: str, top_k: int = 5) -> FillMaskResult:
        """The `top_k` most probable word pieces at each [MASK] in `text` (several masks allowed).

        Special tokens are never offered as candidates; probabilities are still the model's, a softmax over
        the whole vocabulary. Raises NanobertError when `text` has no [MASK].
        """
        if top_k < 1:
            raise NanobertError(f"top_k must be at least 1, got {top_k}")
        text = _MASK_ANY_CASE.sub("[MASK]", text)
        if "[MASK]" not in text:
            raise NanobertError(f"the text has no [MASK] to fill; write one in, e.g. {_EXAMPLE_MASK!r}")
        enc, out = self.forward(text)
        ids = enc["input_ids"]
        positions = [i for i, t in enumerate(ids) if t == MASK_ID]
        if not positions:
            raise NanobertError(
                f"every [MASK] fell beyond the model's {self.max_length} positions; shorten the text"
            )
        logits = out.prediction_logits[0, positions].float()  # (M, V)
        probs = logits.softmax(dim=-1)
        probs_ranked = probs.clone()
        probs_ranked[:, :NUM_SPECIAL_TOKENS] = -1.0  # rank ordinary word pieces only
        k = min(top_k, probs.size(-1) - NUM_SPECIAL_TOKENS)
        top = probs_ranked.topk(k, dim=-1).indices.tolist()  # (M, k)
        masks = []
        for m, pos in enumerate(positions):
            candidates = []
            for token_id in top[m]:
                filled = list(ids)
                filled[pos] = token_id
                candidates.append(
                    Candidate(
                        token=self.tokenizer.id_to_token(token_id),
                        token_id=token_id,
                        probability=probs[m, token_id].item(),
                        sequence=self._decode(filled),
                    )
                )
            masks.append(MaskPrediction(position=pos, candidates=candidates))
        best = list(ids)
        for m in masks:
            best[m.position] = m.candidates[0].token_id
        return FillMaskResult(tokens=self.tokens(ids), masks=masks, filled=self._decode(best))

    def next_sentence(self, text_a: str, text_b: str) -> NextSentence:
        """The next-sentence head's probability that `text_b` follows `text_a`."""
        _, out = self.forward(text_a, text_b)
        p = out.seq_relationship_logits[0].float().softmax(dim=-1).tolist()
        return NextSentence(is_next=p[0], not_next=p[1])

    @torch.no_grad()
    def embed(self, texts: str | list[str], batch_size: int = 32) -> np.ndarray:
        """Mean of the last layer's hidden states over each text's tokens ([CLS] and [SEP] included).

        One text gives an (H,) array, a list of N texts an (N, H) float32 array in the same order. Texts are
        batched by length, so little compute goes on padding; padding never enters a mean.
        """
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        if batch_size < 1:
            raise NanobertError(f"batch_size must be at least 1, got {batch_size}")
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        encodings = [self.encode(t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i]["input_ids"]))
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            batch = self.pad_batch([encodings[i] for i in idx])
            h = self.model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
            mask = batch["attention_mask"].unsqueeze(-1).to(h.last_hidden_state.dtype)  # (B, T, 1)
            mean = (h.last_hidden_state * mask).sum(1) / mask.sum(1)  # (B, H)
            out[idx] = mean.float().cpu().numpy()
        return out[0] if single else out

    def explain(self, text_a: str, text_b: str | None = None, **kwargs: Any) -> Trace:
        """A step-by-step trace of one forward pass; see `nanobert.explain.explain` (same keywords)."""
        return explain(self, text_a, text_b, **kwargs)

    def similarity(self, text_a: str, text_b: str) -> float:
        """Cosine similarity of the two texts' mean-pooled embeddings, in [-1, 1]."""
        a, b = self.embed([text_a, text_b])
        return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-12))

    def attention(self, text: str, pair: str | None = None) -> AttentionMaps:
        """Attention probabilities of every layer and head for one text or pair: (L, nh, T, T)."""
        enc, out = self.forward(text, pair, output_attentions=True)
        probs = torch.stack(out.attentions, dim=0)[:, 0]  # L x (1, nh, T, T) -> (L, nh, T, T)
        return AttentionMaps(
            tokens=self.tokens(enc["input_ids"]),
            token_type_ids=enc["token_type_ids"],
            probs=probs.float().cpu().numpy(),
        )


_EXAMPLE_MASK = "the cat sat on the [MASK] ."


def load(checkpoint: str | Path, device: str = "cpu") -> InferenceModel:
    """Load a pretraining checkpoint directory (e.g. RUN/best) with its tokenizer, for inference.

    `device` is "cpu", "cuda", "cuda:N" or "auto". Raises NanobertError for a missing or corrupt checkpoint.
    """
    dev = resolve_device(device)
    model, config = load_pretraining_checkpoint(checkpoint, map_location=dev)
    tokenizer = load_tokenizer(checkpoint)
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise NanobertError(
            f"{checkpoint}: its tokenizer has {tokenizer.get_vocab_size()} tokens but the model only "
            f"{model.config.vocab_size}; the checkpoint is inconsistent, use another one"
        )
    return InferenceModel(model, tokenizer, config)


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (line i is text i; blank lines are kept so rows stay aligned)."""
    path = Path(path)
    if not path.is_file():
        raise NanobertError(f"input file {path} does not exist; give a text file with one text per line")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise NanobertError(f"{path} is not UTF-8 text; re-encode it as UTF-8") from None
    if not lines:
        raise NanobertError(f"{path} is empty; give it one text per line")
    return lines


def embed_file(
    model: InferenceModel, input_path: str | Path, out_path: str | Path, batch_size: int = 32
) -> tuple[Path, tuple[int, ...]]:
    """Embed every line of a text file and save the (N, H) float32 matrix with `np.save`.

    Returns the path written and the matrix's shape. Row i is line i of the input.
    """
    out_path = Path(out_path)
    if out_path.suffix != ".npy":
        raise NanobertError(f"output {out_path} should end in .npy (it is written with np.save)")
    vectors = model.embed(read_lines(input_path), batch_size=batch_size)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    np.save(out_path, vectors)
    return out_path, tuple(vectors.shape)


__all__ = [
    "AttentionMaps",
    "Candidate",
    "FillMaskResult",
    "InferenceModel",
    "MaskPrediction",
    "NextSentence",
    "embed_file",
    "load",
    "read_lines",
]
