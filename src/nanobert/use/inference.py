"""Use a trained checkpoint: fill in [MASK]s, score sentence pairs, continue a text, embed texts, read
attention maps.

`load(checkpoint)` returns an `InferenceModel` for either pretraining objective, whose methods mirror the CLI:
`fill_mask` and `next_sentence` (BERT's two heads), `generate` (the causal model's next-word head), `embed`,
`similarity`, `attention`, `explain`, `score` and `compare` (both). Asking a model for what its objective did
not train (fill-mask of a causal model, generate from BERT) is a one-line error naming the command that fits.
Each method tokenizes with the checkpoint's own tokenizer and runs the model in eval mode without gradients;
the model itself is untouched. Texts longer than the model's position table are truncated (the longer side of
a pair first, as in pretraining; `score` refuses them instead). Results are small dataclasses of plain Python
values or NumPy arrays (results.py); nothing here prints. `plots.plot_attention` draws the maps with
matplotlib.

The two heads are read the way they were trained (Devlin et al. 2019, section 3.1): the masked-LM head gives
a distribution over the vocabulary at every position, and the next-sentence head's class 0 is "B follows A".
"""

from __future__ import annotations

import math
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.checkpoint import checkpoint_tokenizer, load_language_model
from nanobert.checkpoints.kinds import KINDS, kind_of_model
from nanobert.data.corpus import check_text_file, utf8_lines
from nanobert.device import resolve_device
from nanobert.errors import NanobertError
from nanobert.files import atomic_file, check_output_file
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import (
    CHARS_PER_POSITION,
    CLS_ID,
    MASK_ID,
    NUM_SPECIAL_TOKENS,
    PAD_ID,
    SEP_ID,
    UNK_ID,
    count_cut,
    cut_to_window,
    encode_pair,
    encode_sentences,
    pad,
)
from nanobert.use.explain import Trace, explain
from nanobert.use.results import (
    AttentionMaps,
    Candidate,
    FillMaskResult,
    Generation,
    MaskPrediction,
    NextSentence,
)
from nanobert.use.scoring import Comparison, SentenceScore, score_sentences

# "[mask]" typed in lower case would otherwise be split into "[", "mask", "]" and silently mean nothing.
_MASK_ANY_CASE = re.compile(r"\[mask\]", re.IGNORECASE)


class InferenceModel:
    """A pretrained model with its tokenizer, ready to answer questions. Build it with `load(checkpoint)`.

    `model` is a BertForPreTraining (MLM + NSP) or a causal BertLMHeadModel; `kind` says which.
    """

    def __init__(
        self, model: BertForPreTraining | BertLMHeadModel, tokenizer: Any, config: dict | None = None
    ):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config or {}
        self.device = next(model.parameters()).device
        self.kind = kind_of_model(model).name
        self.name = str(self.config.get("path", "this checkpoint"))

    @property
    def max_length(self) -> int:
        return self.model.config.max_position_embeddings

    def _require(self, command: str, shown: str | None = None) -> None:
        """A one-line error when this model's objective did not train it for `command` (one of its kind's
        commands, kinds.KINDS), named `shown` (default: the command)."""
        if command in KINDS[self.kind].commands:
            return
        command = shown or command
        if self.model.config.is_decoder:  # the causal and hybrid kinds: trained on the next word
            kind = KINDS[self.kind]
            others = ", ".join(c for c in kind.commands if c != "generate")
            raise NanobertError(
                f"{self.name} is {kind.what}: its objective did not train it for {command}; use "
                f"`nanobert generate` (it also fits: {others})"
            )
        raise NanobertError(
            f"{self.name} is a masked language model (BERT): it fills in [MASK]s and does not continue a "
            f"text, so {command} does not apply; use `nanobert fill-mask`, or pretrain --objective causal"
        )

    def check_text(self, text_a: str, text_b: str | None = None) -> None:
        """NanobertError for an empty text, or one longer than the model's position table (which the other
        methods would truncate; the browser page says so instead)."""
        require_words(text_a, text_b)
        # Every whitespace-separated word is at least one piece: a text far too long fails here, before the
        # tokenizer spends seconds on megabytes (the server holds its model lock meanwhile).
        words = len(text_a.split()) + (len(text_b.split()) if text_b is not None else 0)
        if words >= self.max_length:
            raise NanobertError(
                f"the text has {words} words, more than the model's {self.max_length} positions hold with "
                "its special tokens; shorten it"
            )
        chars = len(text_a) + len(text_b or "")
        if chars > self.max_length * CHARS_PER_POSITION:  # one endless word: as long, in one piece of text
            raise NanobertError(
                f"the text has {chars} characters, more than the model's {self.max_length} positions hold; "
                "shorten it"
            )
        if self.model.config.is_decoder:  # `[CLS] text`, as `encode` reads it
            text = text_a if text_b is None else f"{text_a} {text_b}"
            n = 1 + len(encode_sentences(self.tokenizer, [text])[0])
        else:
            n = len(encode_pair(self.tokenizer, text_a, text_b)["input_ids"])
        if n > self.max_length:
            raise NanobertError(
                f"the text has {n} word pieces with its special tokens, more than the model's "
                f"{self.max_length} positions; shorten it"
            )

    def encode(self, text_a: str, text_b: str | None = None) -> dict[str, list[int]]:
        """The model's input for one text or pair, truncated to its position table: `[CLS] A [SEP] B [SEP]`
        for BERT; for a causal model `[CLS]` and the text (B appended), all segment A, as it read its corpus.
        """
        if self.model.config.is_decoder:
            text = cut_to_window(text_a if text_b is None else f"{text_a} {text_b}", self.max_length)
            ids = [CLS_ID, *encode_sentences(self.tokenizer, [text])[0]][: self.max_length]
            return {"input_ids": ids, "token_type_ids": [0] * len(ids), "attention_mask": [1] * len(ids)}
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
        """Run BertForPreTraining on one text or pair; returns (encoding, PreTrainingOutput). NanobertError
        for an empty text (the commands built on this read one text or pair each; `embed` keeps blanks)."""
        require_words(text_a, text_b)
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
        self._require("fill-mask")
        require_words(text)
        if top_k < 1:
            raise NanobertError(f"top_k must be at least 1, got {top_k}")
        text = _MASK_ANY_CASE.sub("[MASK]", text)
        if "[MASK]" not in text:
            raise NanobertError(f"the text has no [MASK] to fill; write one in, e.g. {_EXAMPLE_MASK!r}")
        enc, out = self.forward(text, **dict(KINDS[self.kind].fill_mask_call))
        ids = enc["input_ids"]
        positions = [i for i, t in enumerate(ids) if t == MASK_ID]
        if not positions:
            raise NanobertError(
                f"every [MASK] fell beyond the model's {self.max_length} positions; shorten the text"
            )
        written = text.count("[MASK]")
        if len(positions) < written:  # filling only some would hide the others' loss
            raise NanobertError(
                f"{written - len(positions)} of the text's {written} [MASK]s fall beyond the model's "
                f"{self.max_length} positions; shorten the text"
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
        self._require("nsp", "nsp (next sentence prediction)")
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

    def score(self, text: str, rule: str | None = None) -> SentenceScore:
        """How likely the model finds `text`: each word piece's log-probability and their sum. A masked
        model gives its pseudo-log-likelihood (`rule` "within_word", the default, or "original"), a causal
        one its log-likelihood; see `nanobert.use.scoring`."""
        require_words(text)
        return score_sentences(self.model, self.tokenizer, [text], rule)[0]

    def compare(self, text_a: str, text_b: str, rule: str | None = None) -> Comparison:
        """Which of two texts the model finds more likely (`Comparison.preferred`: "A", "B" or "tie"), and
        by how much."""
        require_words(text_a, text_b)
        return Comparison(*score_sentences(self.model, self.tokenizer, [text_a, text_b], rule))

    def explain(self, text_a: str, text_b: str | None = None, **kwargs: Any) -> Trace:
        """A step-by-step trace of one forward pass; see `nanobert.use.explain.explain` (same keywords)."""
        require_words(text_a, text_b)
        return explain(self, text_a, text_b, **kwargs)

    def similarity(self, text_a: str, text_b: str) -> float:
        """Cosine similarity of the two texts' mean-pooled embeddings, in [-1, 1]."""
        require_words(text_a, text_b)
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

    @torch.no_grad()
    def generate(
        self,
        prompt: str,
        max_new_tokens: int = 30,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
    ) -> Generation:
        """Continue `prompt` one word piece at a time, each chosen from the next-word distribution.

        temperature 0 takes the most probable piece (greedy); above 0 samples from the distribution sharpened
        (below 1) or flattened (above 1), restricted to the `top_k` most probable pieces when given. The
        sampling generator is seeded, so a seed gives the same text every time. Stops at `max_new_tokens`,
        at [SEP] (the end of a document in the training stream), or at the end of the position table.
        An empty or all-whitespace prompt is a NanobertError ("the text is empty"), as for every command.
        """
        self._require("generate")
        require_words(prompt)  # an empty prompt would continue nothing but [CLS]
        if max_new_tokens < 1 or not 0 <= temperature < math.inf or (top_k is not None and top_k < 1):
            raise NanobertError(
                "generate needs max_new_tokens >= 1, a finite temperature >= 0 and top_k >= 1 (or none)"
            )
        if not 0 <= seed < 2**63:  # what torch's generator takes
            raise NanobertError(f"the seed must be in [0, 2**63), not {seed}")
        ids = self.encode(prompt)["input_ids"]
        if len(ids) >= self.max_length:
            raise NanobertError(f"the prompt fills all {self.max_length} positions; shorten it")
        n_prompt = len(ids)
        generator = torch.Generator().manual_seed(seed)
        new: list[int] = []
        probabilities: list[float] = []
        stop = "max_new_tokens"
        for _ in range(max_new_tokens):
            if len(ids) >= self.max_length:
                stop = "max length"
                break
            logits = self.model(torch.tensor([ids], device=self.device)).logits[0, -1].float().cpu()
            model_probs = logits.softmax(-1)  # the model's own, over the whole vocabulary, as explain shows
            logits[[PAD_ID, UNK_ID, CLS_ID, MASK_ID]] = float("-inf")  # never emitted; [SEP] ends the text
            token_id = _pick(logits, temperature, top_k, generator)
            if token_id == SEP_ID:
                stop = "end of document"
                break
            probabilities.append(model_probs[token_id].item())
            ids.append(token_id)
            new.append(token_id)
        # The new pieces decoded after the prompt's, so a first piece that continues the prompt's last word
        # ("##s") joins it; the text keeps the prompt as typed (decoding it would lowercase it and turn what
        # the vocabulary lacks into [UNK]).
        prompt_text, whole = self._decode(ids[:n_prompt]), self._decode(ids)
        tail = whole[len(prompt_text) :] if whole.startswith(prompt_text) else " " + self._decode(new)
        text = prompt.rstrip() + tail if new else prompt
        return Generation(prompt, tail.strip(), text, self.tokens(new), probabilities, stop)


def has_words(text: str) -> bool:
    """Whether `text` holds anything but whitespace and invisible format characters (zero-width spaces and
    joiners, which the tokenizer drops, so such a text would encode as [CLS] [SEP] alone)."""
    return any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in text)


def require_words(*texts: str | None) -> None:
    """NanobertError when a given text is empty, only whitespace or only invisible characters (None means no
    text was asked for), or not valid Unicode: a lone surrogate, which is what Python makes of a command-line
    byte that is not UTF-8 (and JSON's "\\ud800" escape), and which the tokenizer cannot take."""
    given = [t for t in texts if t is not None]
    if not all(has_words(t) for t in given):
        raise NanobertError("the text is empty; type a sentence")
    for text in given:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise NanobertError(
                "the text is not valid Unicode (a byte that is not UTF-8, or a lone surrogate); type it "
                "again or convert it to UTF-8"
            ) from None


def _pick(logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator) -> int:
    """The next token id from logits (V,): the argmax at temperature 0, else a seeded sample."""
    finfo = torch.finfo(logits.dtype)
    if temperature < finfo.tiny:  # 0, or so small that it would round to 0 in the division
        return int(logits.argmax())
    # From the top score down, so a tiny temperature sends the others to -inf, never the top one to inf; and
    # at most the dtype's largest, which a huge one would round up to inf (-inf / inf is NaN).
    scores = (logits - logits.max()) / min(temperature, finfo.max)
    if top_k is not None and top_k < scores.numel():
        kth = scores.topk(top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    return int(torch.multinomial(scores.softmax(-1), 1, generator=generator))


_EXAMPLE_MASK = "the cat sat on the [MASK] ."


def load(checkpoint: str | Path, device: str = "cpu") -> InferenceModel:
    """Load a pretrained checkpoint directory (e.g. RUN/best) of either objective with its tokenizer.

    `device` is "cpu", "cuda", "cuda:N" or "auto". Raises NanobertError for a missing or corrupt checkpoint,
    or one of another kind (a fine-tuned classifier).
    """
    dev = resolve_device(device)
    model, config = load_language_model(checkpoint, map_location=dev)
    config = {**config, "path": str(checkpoint)}
    tokenizer = checkpoint_tokenizer(checkpoint, model, config)
    return InferenceModel(model, tokenizer, config)


def read_lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 text file (line i is text i; blank lines are kept so rows stay aligned)."""
    path = check_text_file(path)
    # Lines end at "\n" only (and "\r\n"): str.splitlines() would also split at a form feed, U+0085 or
    # U+2028 inside a text, and row i of an output would no longer be line i.
    lines = [line.removesuffix("\n").removesuffix("\r") for line in utf8_lines(path)]
    if not any(has_words(line) for line in lines):
        raise NanobertError(f"{path} has no text; give it one text per line")
    return lines


def embed_file(
    model: InferenceModel, input_path: str | Path, out_path: str | Path, batch_size: int = 32
) -> tuple[Path, tuple[int, ...], int]:
    """Embed every line of a text file and save the (N, H) float32 matrix with `np.save`.

    Returns the path written, the matrix's shape and how many lines were cut before tokenizing (longer than
    any window holds: `cut_to_window`). Row i is line i of the input.
    """
    out_path = check_output_file(out_path, inputs=(check_text_file(input_path),))
    if out_path.suffix != ".npy":
        raise NanobertError(f"output {out_path} should end in .npy (it is written with np.save)")
    lines = read_lines(input_path)
    vectors = model.embed(lines, batch_size=batch_size)
    with atomic_file(out_path, "wb") as f:  # a failed write keeps the old file
        np.save(f, vectors)
    return out_path, tuple(vectors.shape), count_cut(lines, model.max_length)


__all__ = [
    "AttentionMaps",
    "Candidate",
    "FillMaskResult",
    "Generation",
    "InferenceModel",
    "MaskPrediction",
    "NextSentence",
    "embed_file",
    "load",
    "read_lines",
    "require_words",
]
