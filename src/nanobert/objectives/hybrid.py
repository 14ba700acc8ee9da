"""The hybrid objective: masked and next-word batches on one stack and one head (GPT-BERT).

Charpentier & Samuel 2024, "GPT or BERT: why not both?", won the BabyLM 2024 challenge with one Transformer
trained on both objectives. The masked prediction is shifted by one position, so both predict "the token
after position t" from the output at t and share one vocabulary head: a causal batch reads left to right
and its label at t is the token at t + 1; a masked batch reads both ways and its label at t is the original
token at t + 1 where that position was masked. Batches are one or the other, drawn at random with
`causal_fraction` (GPT-BERT: about 1 in 16) from the run's seed, so a resume replays the same sequence.

Both kinds cut the corpus as the causal objective does (`[CLS]` and a window of the running text, [SEP]
after each document); there is no next-sentence task. The held-out batches are both kinds too, masked at
the standard 15% with the evaluation seed, so `evaluate` prints the masked and the next-word figures, and
best/ is chosen on their summed losses. `BertForHybridLM` (causal_model.py) is the model; `HYBRID`, at the
end, the record that registers all this.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from nanobert.causal_model import BertForHybridLM
from nanobert.checkpoints.kinds import HYBRID_LM
from nanobert.config import TrainConfig
from nanobert.data.masking import MaskingCollator
from nanobert.data.nsp import Instance
from nanobert.data.shards import causal_window_batches, check_causal_windows
from nanobert.data.streams import causal_corpus_batches, check_causal_corpus
from nanobert.data.windows import CausalCollator, causal_windows
from nanobert.errors import NanobertError
from nanobert.objectives.causal import any_segments
from nanobert.objectives.held_out import EVAL_MASK_PROB, Scored, perplexity, tallied
from nanobert.objectives.mlm_nsp import masking_collator
from nanobert.objectives.objective import Objective, random_ids
from nanobert.tokenizer import IGNORE_INDEX

HYBRID_METRIC_KEYS = (
    "loss",  # mlm_loss + lm_loss: what picks best/
    "mlm_loss",
    "mlm_accuracy",
    "mlm_perplexity",
    "lm_loss",
    "lm_accuracy",
    "lm_perplexity",
)


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """(B, T) labels by the position they sit at -> by the output that predicts them: out[:, t] is
    labels[:, t + 1], and the last output predicts nothing."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def as_instances(windows: list[list[int]]) -> list[Instance]:
    """Windows of the running text as the masking collator's instances: one segment, no sentence pair."""
    return [Instance(list(w), [0] * len(w), 0) for w in windows]


def masked_batch(masking: MaskingCollator, windows: list[list[int]]) -> dict[str, torch.Tensor]:
    """`windows` masked by `masking` (its rate and 80/10/10), read both ways, labels shifted."""
    batch = masking(as_instances(windows))
    del batch["next_sentence_label"]
    batch["labels"] = shift_labels(batch["labels"])
    batch["causal"] = torch.zeros(len(windows), dtype=torch.bool)
    return batch


def next_word_batch(collate: CausalCollator, windows: list[list[int]]) -> dict[str, torch.Tensor]:
    """`windows` as they are, read left to right, labels shifted (the next word of each position)."""
    batch = collate(windows)
    batch["labels"] = shift_labels(batch["labels"])
    batch["causal"] = torch.ones(len(windows), dtype=torch.bool)
    return batch


class HybridCollator:
    """Turns each batch of windows into a next-word batch (with probability `causal_fraction`) or a masked
    one. The draw has its own generator, seeded from the run's seed; `state_dict` holds it and the masking
    collator's, so a resumed run draws and masks exactly as the uninterrupted one."""

    def __init__(self, masking: MaskingCollator, causal_fraction: float, seed: int, pad_to_multiple_of=None):
        self.masking, self.causal_fraction = masking, causal_fraction
        self.next_word = CausalCollator(pad_to_multiple_of=pad_to_multiple_of)
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, windows: list[list[int]]) -> dict[str, torch.Tensor]:
        if float(torch.rand((), generator=self.generator)) < self.causal_fraction:
            return next_word_batch(self.next_word, windows)
        return masked_batch(self.masking, windows)

    @property
    def mask_prob(self) -> float:
        """The masking collator's rate (a stream sets it per epoch under final_mask_prob)."""
        return self.masking.mask_prob

    @mask_prob.setter
    def mask_prob(self, rate: float) -> None:
        self.masking.mask_prob = rate

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "masking": self.masking.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.masking.load_state_dict(state["masking"])


def hybrid_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's loss (the batch is masked or next-word, not both)."""
    share = batch.pop("loss_share")
    causal = bool(batch.pop("causal")[0])  # one kind per batch: its direction, a Python bool for SDPA
    # Only the total: a window of steps mixes both kinds, so a per-kind mean over it would be diluted.
    return {"loss": model(**batch, causal=causal, return_logits=False).loss * share[0]}


def hybrid_held_out(
    held_out: list, seq_len: int, batch_size: int, vocab_size: int, eval_seed: int
) -> list[dict[str, torch.Tensor]]:
    """The held-out documents as windows from their start, each batch twice: masked at the standard 15% with
    `eval_seed` (the same masks at every evaluation), and as next-word windows."""
    windows = causal_windows(held_out, seq_len, seed=0, shuffle=False, keep_last=True)
    if not windows:
        raise NanobertError("the held-out split has no tokens; give it more text")
    chunks = [windows[i : i + batch_size] for i in range(0, len(windows), batch_size)]
    masking, reading = MaskingCollator(vocab_size, mask_prob=EVAL_MASK_PROB, seed=eval_seed), CausalCollator()
    return [masked_batch(masking, c) for c in chunks] + [next_word_batch(reading, c) for c in chunks]


def _labelled_outputs(model: BertForHybridLM, batch: dict[str, torch.Tensor]) -> Scored:
    """The logits of every labelled output and their targets, under the batch's tally (masked, next word)."""
    causal = bool(batch["causal"][0])
    logits = model(
        batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), causal=causal
    ).logits
    keep = batch["labels"] != IGNORE_INDEX
    scored, empty = (logits[keep], batch["labels"][keep]), (logits[:0, 0], batch["labels"][:0, 0])
    return [empty, scored] if causal else [scored, empty]


def hybrid_metrics(
    model: BertForHybridLM,
    batches: list[dict[str, torch.Tensor]],
    device: torch.device | str,
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float]:
    """HYBRID_METRIC_KEYS over the held-out batches: the masked figures as BERT's (per masked token), the
    next-word ones as GPT's (per predicted token)."""
    mlm, lm = tallied(model, batches, device, autocast_dtype, _labelled_outputs, 2)
    mlm_loss, lm_loss = mlm.mean_loss(), lm.mean_loss()
    return {
        "loss": mlm_loss + lm_loss,
        "mlm_loss": mlm_loss,
        "mlm_accuracy": mlm.accuracy(),
        "mlm_perplexity": perplexity(mlm_loss),
        "lm_loss": lm_loss,
        "lm_accuracy": lm.accuracy(),
        "lm_perplexity": perplexity(lm_loss),
    }


def hybrid_collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> HybridCollator:
    """The run's masking collator, and the draw of which batches are next-word instead."""
    return HybridCollator(
        masking_collator(cfg, tokenizer, vocab_size), cfg.causal_fraction, cfg.seed, cfg.pad_to_multiple_of
    )


def hybrid_sample(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random windows masked at the run's rate (most batches are masked), as the stream hands one to the
    loss: what the precision choice times."""
    ids, _ = random_ids(cfg, vocab_size)
    batch = masked_batch(MaskingCollator(vocab_size, mask_prob=cfg.mask_prob, seed=0), ids.tolist())
    del batch["attention_mask"]  # no padding: the stream passes no mask either (SDPA's fastest kernel)
    return {**batch, "loss_share": torch.ones(2)}


HYBRID = Objective(
    name="hybrid",
    kind=HYBRID_LM,
    is_decoder=True,  # causal unless a batch (or fill-mask) asks for both ways
    loss=hybrid_loss,
    metric="loss",  # the masked and next-word held-out losses, summed: best/ serves both
    higher_is_better=False,
    tiebreak=None,
    metric_keys=HYBRID_METRIC_KEYS,
    metrics=hybrid_metrics,
    held_out=hybrid_held_out,
    collator=hybrid_collator,
    sample=hybrid_sample,
    corpus_batches=causal_corpus_batches,  # both kinds of batch cut the text as the causal objective does
    check_corpus=check_causal_corpus,
    window_batches=causal_window_batches,
    check_windows=check_causal_windows,
    layout=None,  # a next-word batch needs every position, so the last layer computes them all
    check_model=any_segments,
)


__all__ = [
    "HYBRID",
    "HYBRID_METRIC_KEYS",
    "HybridCollator",
    "hybrid_held_out",
    "hybrid_loss",
    "hybrid_metrics",
    "masked_batch",
    "next_word_batch",
    "shift_labels",
]
