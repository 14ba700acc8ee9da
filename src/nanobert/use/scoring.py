"""How likely is a sentence? Its log-likelihood under a pretrained model, word piece by word piece.

A causal model reads left to right, so a sentence's log-likelihood is exact: the sum over its pieces of
log p(piece | [CLS] and the pieces before it), the `CausalLMOutput` logits at t scoring the piece at t + 1.

A masked model has no left-to-right factorisation; its usual stand-in is the pseudo-log-likelihood (PLL) of
Salazar et al. 2020, "Masked Language Model Scoring": mask each piece in turn and add up log p of the original
piece at the mask. `RULE_ORIGINAL` is that rule. It over-rewards words split into several pieces: with only
"##ing" masked, "play" beside it gives the ending away. Kauf & Ivanova 2023 ("A better way to do masked
language model scoring", their PLL-word-l2r) also mask the *later* pieces of the same word when scoring a
piece, so every piece of a word is predicted from its left part only; `RULE_WITHIN_WORD`, the default.

Speed: every masked copy of every sentence is one row of a batch; sentences of one length share batches, so
no row carries padding (and the attention needs no mask), and the last layer and the vocabulary head run at
the target position of each row only (`BertModel`'s `query_positions`). On BLiMP's sentences this was 5.6x
faster than one forward pass per sentence with the full (T, V) logits, the way the scoring libraries do it
(`benchmarks/score_speed.py`, 2-core AMD EPYC, fp32).
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from nanobert.causal_model import BertLMHeadModel
from nanobert.device import choose_precision
from nanobert.errors import NanobertError
from nanobert.model import BertForPreTraining
from nanobert.tokenizer import CLS_ID, MASK_ID, PAD_ID, SEP_ID

RULE_WITHIN_WORD = "within_word"  # PLL with the later pieces of the word masked too (Kauf & Ivanova 2023)
RULE_ORIGINAL = "original"  # PLL, one piece masked at a time (Salazar et al. 2020)
RULE_CAUSAL = "causal"  # the exact left-to-right log-likelihood of a causal model
MASKED_RULES = (RULE_WITHIN_WORD, RULE_ORIGINAL)
RULE_NAMES = {
    RULE_WITHIN_WORD: "pseudo-log-likelihood, later pieces of the same word masked too (Kauf & Ivanova 2023)",
    RULE_ORIGINAL: "pseudo-log-likelihood, one piece masked at a time (Salazar et al. 2020)",
    RULE_CAUSAL: "log-likelihood, each piece given [CLS] and the pieces before it",
}

# Rows x tokens of one batch. Big enough that the matrix multiplies run at full speed on a CPU, small enough
# that the float32 scores over an 8,192-piece vocabulary (one row per masked copy, or one per position of a
# causal batch) stay near 256 MB. One sentence's copies always share a batch, so a sentence of n pieces
# takes n x (n + 2) tokens whatever this says.
DEFAULT_BATCH_TOKENS = 8192
_TYPED_SPECIALS = {
    PAD_ID,
    CLS_ID,
    SEP_ID,
    MASK_ID,
}  # [UNK] is how a sentence spells what the vocabulary lacks


@dataclass
class SentenceScore:
    """One sentence's score: its pieces, each piece's log-probability, and their sum (natural log)."""

    text: str
    tokens: list[str]  # the sentence's word pieces, without [CLS]/[SEP]
    logprobs: list[float]  # log p of each piece under `rule`, same order
    total: float  # sum of logprobs: the (pseudo-)log-likelihood
    rule: str

    def __repr__(self) -> str:
        return f"SentenceScore({self.text!r}, total={self.total:.3f}, {len(self.tokens)} pieces, {self.rule})"


@dataclass
class Comparison:
    """Which of two sentences a model prefers: the one with the higher total; equal totals are a tie."""

    a: SentenceScore
    b: SentenceScore

    @property
    def preferred(self) -> str:
        return "A" if self.a.total > self.b.total else "B" if self.b.total > self.a.total else "tie"

    @property
    def margin(self) -> float:
        """How much more likely the preferred sentence is, in nats: |total A - total B|."""
        return abs(self.a.total - self.b.total)


def rules_for(model: torch.nn.Module) -> tuple[str, ...]:
    """The scoring rules that fit a model's kind, its default first."""
    return (RULE_CAUSAL,) if isinstance(model, BertLMHeadModel) else MASKED_RULES


def default_rule(model: torch.nn.Module) -> str:
    """The rule a model is scored with when none is asked for: causal for a causal model, else within_word."""
    return rules_for(model)[0]


def check_rule(model: torch.nn.Module, rule: str | None) -> str:
    """`rule`, or the model's default when None; NanobertError when it does not fit the model's kind."""
    rule = rule or default_rule(model)
    allowed = rules_for(model)
    if rule not in allowed:
        kind = "a causal" if allowed == (RULE_CAUSAL,) else "a masked"
        raise NanobertError(f"{kind} model scores with {' or '.join(allowed)}, not {rule!r}")
    return rule


def word_ends(word_ids: Sequence[int | None]) -> list[int]:
    """For each piece i, the index one past the last piece of its word (pieces share a word id); a piece
    with no word id (a special token) is a word of its own."""
    ends = list(range(1, len(word_ids) + 1))
    for i in range(len(word_ids) - 2, -1, -1):
        if word_ids[i] is not None and word_ids[i] == word_ids[i + 1]:
            ends[i] = ends[i + 1]
    return ends


def masked_spans(word_ids: Sequence[int | None], rule: str) -> list[tuple[int, int]]:
    """The positions to mask for each piece of a sentence, as half-open spans [target, end) into its pieces:
    the piece alone (`RULE_ORIGINAL`), or the piece and the later pieces of its word (`RULE_WITHIN_WORD`)."""
    if rule == RULE_ORIGINAL:
        return [(i, i + 1) for i in range(len(word_ids))]
    if rule == RULE_WITHIN_WORD:
        return list(enumerate(word_ends(word_ids)))
    raise ValueError(f"no masking rule {rule!r}")


def encode_for_scoring(tokenizer, texts: Sequence[str], max_length: int) -> list[tuple[list[int], list]]:
    """(piece ids, word ids) of each text, without specials; NanobertError for a text with no pieces or one
    longer than the model's positions hold with [CLS] and [SEP]."""
    encodings = tokenizer.encode_batch(list(texts), add_special_tokens=False)
    out = []
    for text, encoding in zip(texts, encodings, strict=True):
        if not encoding.ids:
            raise NanobertError(f"{text[:60]!r} has no word pieces to score; type a sentence")
        special = {t for t in encoding.ids if t in _TYPED_SPECIALS}
        if special:  # a typed [MASK] or [SEP] would be scored as a word of the sentence
            names = ", ".join(tokenizer.id_to_token(t) for t in sorted(special))
            raise NanobertError(f"{text[:60]!r} holds {names}; score plain text, without special tokens")
        if len(encoding.ids) + 2 > max_length:
            raise NanobertError(
                f"{text[:60]!r} has {len(encoding.ids)} word pieces, more than the model's {max_length} "
                "positions hold with [CLS] and [SEP]; shorten it"
            )
        out.append((encoding.ids, encoding.word_ids))
    return out


def _batches_by_length(lengths: Sequence[int], rows_per_item: Sequence[int], batch_tokens: int) -> Iterator:
    """Lists of item indices: items of one length together (no padding), each list at most `batch_tokens`
    rows x length (at least one item), longest lengths first."""
    by_length: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(lengths):
        by_length[n].append(i)
    for n in sorted(by_length, reverse=True):
        chunk, rows = [], 0
        for i in by_length[n]:
            if chunk and (rows + rows_per_item[i]) * n > batch_tokens:
                yield chunk
                chunk, rows = [], 0
            chunk.append(i)
            rows += rows_per_item[i]
        yield chunk


@torch.no_grad()
def _masked_logprobs(
    model: BertForPreTraining,
    encoded: list[tuple[list[int], list]],
    rule: str,
    batch_tokens: int,
    progress: Callable[[int], None] | None,
) -> list[list[float]]:
    """Each sentence's piece log-probabilities under a masked rule (one list per sentence, in order): one
    row per masked copy, the rows of one sentence consecutive in its batch."""
    device = next(model.parameters()).device
    lengths = [len(ids) + 2 for ids, _ in encoded]
    out: list[list[float]] = [[] for _ in encoded]
    for chunk in _batches_by_length(lengths, [len(ids) for ids, _ in encoded], batch_tokens):
        rows, spans = [], []
        for i in chunk:
            ids, word_ids = encoded[i]
            seq = [CLS_ID, *ids, SEP_ID]
            for target, end in masked_spans(word_ids, rule):
                rows.append(seq)
                spans.append((target + 1, end + 1))  # + 1: [CLS] comes first
        input_ids = torch.tensor(rows, device=device)  # (N, T), one row per masked copy
        span = torch.tensor(spans, device=device)  # (N, 2)
        target = span[:, 0]
        original = input_ids.gather(1, target[:, None]).squeeze(1)  # (N,)
        positions = torch.arange(input_ids.size(1), device=device)
        masked = (positions >= span[:, :1]) & (positions < span[:, 1:])  # (N, T)
        input_ids = input_ids.masked_fill(masked, MASK_ID)
        # Only the target leaves the last layer (the pooler then reads it instead of [CLS]; unused here).
        h = model.bert(input_ids, query_positions=target[:, None]).last_hidden_state[:, 0]  # (N, H)
        logits = model.mlm_head(h, model.bert.embeddings.word_embeddings.weight).float()  # (N, V)
        # log p(original) = its logit - logsumexp: no (N, V) log-probabilities written out
        logprobs = (logits.gather(1, original[:, None]).squeeze(1) - logits.logsumexp(-1)).tolist()
        row = 0
        for i in chunk:
            n = lengths[i] - 2
            out[i] = logprobs[row : row + n]
            row += n
        if progress is not None:
            progress(len(chunk))
    return out


@torch.no_grad()
def _causal_logprobs(
    model: BertLMHeadModel,
    encoded: list[tuple[list[int], list]],
    rule: str,
    batch_tokens: int,
    progress: Callable[[int], None] | None,
) -> list[list[float]]:
    """Each sentence's piece log-probabilities given [CLS] and the pieces before (one list per sentence, in
    order): one row per sentence."""
    device = next(model.parameters()).device
    lengths = [len(ids) + 1 for ids, _ in encoded]
    out: list[list[float]] = [[] for _ in encoded]
    for chunk in _batches_by_length(lengths, [1] * len(encoded), batch_tokens):
        input_ids = torch.tensor([[CLS_ID, *encoded[i][0]] for i in chunk], device=device)  # (S, T)
        h = model.bert(input_ids).last_hidden_state[:, :-1]  # (S, T - 1, H): position t predicts t + 1
        logits = model.lm_head(h, model.bert.embeddings.word_embeddings.weight).float()  # (S, T - 1, V)
        logprobs = logits.gather(2, input_ids[:, 1:, None]).squeeze(2) - logits.logsumexp(-1)  # (S, T - 1)
        for i, row in zip(chunk, logprobs.tolist(), strict=True):
            out[i] = row
        if progress is not None:
            progress(len(chunk))
    return out


# Each rule's scorer, called as f(model, encoded, rule, batch_tokens, progress).
_LOGPROBS = {
    RULE_WITHIN_WORD: _masked_logprobs,
    RULE_ORIGINAL: _masked_logprobs,
    RULE_CAUSAL: _causal_logprobs,
}


def score_sentences(
    model: BertForPreTraining | BertLMHeadModel,
    tokenizer,
    texts: Sequence[str],
    rule: str | None = None,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    progress: Callable[[int], None] | None = None,
    dtype: torch.dtype | None = None,
) -> list[SentenceScore]:
    """Score each text alone (`[CLS] text [SEP]` for a masked model, `[CLS] text` for a causal one).

    rule: `RULE_WITHIN_WORD` (default) or `RULE_ORIGINAL` for a masked model, `RULE_CAUSAL` (its only rule,
    the default) for a causal one. Runs the model in eval mode without gradients; the caller's mode is put
    back. `progress`, when given, is called with the number of texts each batch finished. `dtype`: None for
    fp32 (the default), or torch.bfloat16 to score with a bf16 copy of the model (faster on CPUs with native
    bf16; a sentence's total moves by up to ~0.2 nats; `scoring_precision` chooses). Returns one
    `SentenceScore` per text, in order. NanobertError for a text with no pieces, one too long for the model,
    or a rule that does not fit.
    """
    rule = check_rule(model, rule)
    if batch_tokens < 1:
        raise NanobertError(f"batch_tokens must be at least 1, got {batch_tokens}")
    encoded = encode_for_scoring(tokenizer, texts, model.config.max_position_embeddings)
    logprobs = _logprobs(model, encoded, rule, batch_tokens, progress, dtype)
    return [
        SentenceScore(text, [tokenizer.id_to_token(t) for t in ids], lp, float(sum(lp)), rule)
        for text, (ids, _), lp in zip(texts, encoded, logprobs, strict=True)
    ]


def _logprobs(model, encoded, rule: str, batch_tokens: int, progress, dtype) -> list[list[float]]:
    """Each encoded sentence's piece log-probabilities, in eval mode (the caller's mode put back). With a
    `dtype`, a copy of the model in that dtype runs instead: weights and activations alike, which scored
    BLiMP 1.3x faster than autocast on a 2-core AVX512-BF16 EPYC (autocast casts every activation back and
    forth between the matrix multiplies and the fp32 LayerNorms)."""
    was_training = model.training
    model.eval()
    try:
        scorer = copy.deepcopy(model).to(dtype) if dtype is not None else model
        return _LOGPROBS[rule](scorer, encoded, rule, batch_tokens, progress)
    finally:
        model.train(was_training)


def scoring_precision(model: torch.nn.Module, precision: str = "auto") -> tuple[torch.dtype | None, str]:
    """The dtype to score in (None = fp32) and why: fp32 or bf16 as asked, or for "auto" the
    faster of the two on this machine, timed on one batch of this model's shape (`device.choose_precision`,
    cached per CPU and shape as training's choice is)."""
    config = model.config
    pieces = 13  # a BLiMP sentence's mean length in word pieces with an 8,192-piece vocabulary
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (pieces,), generator=generator).tolist()
    encoded = [(ids, list(range(pieces)))] * max(1, DEFAULT_BATCH_TOKENS // (pieces * (pieces + 2)))
    rule = default_rule(model)

    def step(dtype: torch.dtype | None) -> None:
        _logprobs(model, encoded, rule, DEFAULT_BATCH_TOKENS, None, dtype)

    shape = f"score {rule} L{config.num_hidden_layers} H{config.hidden_size} V{config.vocab_size}"
    return choose_precision(precision, next(model.parameters()).device, step, shape)


def score_report(scores: Sequence[SentenceScore]) -> dict:
    """`nanobert score --json` and the page's answer: the rule, each sentence's pieces and log-probabilities,
    and for two sentences the one preferred ("A", "B" or "tie") and the margin in nats."""
    report: dict = {
        "rule": scores[0].rule,
        "rule_description": RULE_NAMES[scores[0].rule],
        "sentences": [
            {"text": s.text, "tokens": s.tokens, "logprobs": s.logprobs, "total": s.total} for s in scores
        ],
    }
    if len(scores) == 2:
        comparison = Comparison(*scores)
        report |= {"preferred": comparison.preferred, "margin": comparison.margin}
    return report


def _piece_table(score: SentenceScore, width: int = 30) -> list[str]:
    """One line per piece: the piece, its log-probability, and a bar as long as its surprise (-log p)."""
    worst = max(-lp for lp in score.logprobs) or 1.0
    name_width = max(len(t) for t in score.tokens)
    lines = []
    for token, lp in zip(score.tokens, score.logprobs, strict=True):
        bar = "#" * max(1, round(width * -lp / worst)) if lp < 0 else ""
        lines.append(f"  {token:<{name_width}s} {lp:8.2f}  {bar}")
    return lines


def format_scores(scores: Sequence[SentenceScore]) -> str:
    """`nanobert score`'s text: each sentence's total and pieces (the longest bar is the piece that surprised
    the model most), and for two sentences which one the model prefers and by how much."""
    lines = [f"rule: {RULE_NAMES[scores[0].rule]}"]
    for i, score in enumerate(scores):
        label = f"{chr(ord('A') + i)}: " if len(scores) > 1 else ""
        lines += [
            "",
            f"{label}{score.text}",
            f"log-likelihood {score.total:.2f} over {len(score.tokens)} pieces",
        ]
        lines += _piece_table(score)
    if len(scores) == 2:
        comparison = Comparison(*scores)
        if comparison.preferred == "tie":
            lines += ["", "a tie: the model scores both sentences alike and cannot tell them apart"]
        else:
            ratio = f"{math.exp(comparison.margin):.3g}x" if comparison.margin < 700 else "astronomically"
            lines += [
                "",
                f"the model prefers {comparison.preferred} by {comparison.margin:.2f} nats "
                f"({ratio} more likely)",
            ]
    return "\n".join(lines)


__all__ = [
    "DEFAULT_BATCH_TOKENS",
    "MASKED_RULES",
    "RULE_CAUSAL",
    "RULE_NAMES",
    "RULE_ORIGINAL",
    "RULE_WITHIN_WORD",
    "Comparison",
    "SentenceScore",
    "check_rule",
    "default_rule",
    "rules_for",
    "encode_for_scoring",
    "format_scores",
    "masked_spans",
    "score_report",
    "score_sentences",
    "scoring_precision",
    "word_ends",
]
