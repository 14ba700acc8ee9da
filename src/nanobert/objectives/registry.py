"""The pretraining objectives on one stack: one record per objective, holding everything that differs.

`mlm_nsp` (Devlin et al. 2019): masked words and next sentence, both sides of every word visible.
`causal` (Radford et al. 2018): the next word, each token seeing only the tokens before it (the model's
`is_decoder` flag makes the attention causal). `hybrid` (Charpentier & Samuel 2024): both, on one head, with
the masked prediction shifted by one (hybrid.py). Everything else, the data sources, tokenizer, training loop,
checkpoints, resume and DDP, is shared. An `Objective` carries what is not: the model class and the checkpoint
kind it writes, how an in-memory corpus (`streams.py`) or a prepared one (`prepare.py`) becomes batches of
instances, the collator, the fixed held-out batches and their metrics (`held_out.py`), the sample batch that
times the precisions, and the loss. `train.py` and `evaluate.py` look an objective up by name (`objective_of`,
which also checks the name: the registry's keys are the valid ones), by the checkpoint kind it writes or by
its model, and ask the record; none spells a name. A new objective is its functions (a module, or a section of
the ones above), one record in `OBJECTIVES`, its tests and its docs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from tokenizers import Tokenizer

from nanobert.checkpoints.kinds import CAUSAL_LM, HYBRID_LM, KINDS, PRETRAINING, wrong_kind
from nanobert.config import ModelConfig, TrainConfig
from nanobert.data.masking import MaskingCollator, query_layout, word_start_table
from nanobert.data.shards import (
    PreparedSplit,
    WindowedInstances,
    causal_window_batches,
    check_causal_windows,
    nsp_window_batches,
)
from nanobert.data.streams import (
    MLM_POSITIONS_MULTIPLE,
    QUERY_WIDTH_MULTIPLE,
    BatchStream,
    CorpusInstances,
    add_query_layout,
    causal_corpus_batches,
    check_causal_corpus,
    check_nsp_corpus,
    nsp_corpus_batches,
)
from nanobert.data.windows import CausalCollator
from nanobert.errors import NanobertError
from nanobert.objectives.held_out import (
    CAUSAL_METRIC_KEYS,
    METRIC_KEYS,
    causal_lm_metrics,
    mlm_nsp_metrics,
    prepare_causal_eval_batches,
    prepare_eval_batches,
)
from nanobert.objectives.hybrid import (
    HYBRID_METRIC_KEYS,
    HybridCollator,
    hybrid_held_out,
    hybrid_loss,
    hybrid_metrics,
    masked_batch,
)
from nanobert.tokenizer import CLS_ID, IGNORE_INDEX, MASK_ID, NUM_SPECIAL_TOKENS


@dataclass(frozen=True)
class Objective:
    """Everything that differs between two pretraining tasks; the rest (data sources, tokenizer, loop,
    checkpoints, resume, DDP) is shared. Each callable's contract is that of the MLM + NSP one below."""

    name: str
    kind: str  # the checkpoint kind it writes: its model class and commands (kinds.KINDS)
    is_decoder: bool  # the model config's flag: causal attention
    loss: Callable[[torch.nn.Module, dict], dict[str, torch.Tensor]]
    metric: str  # the held-out metric that picks best/
    higher_is_better: bool
    tiebreak: Callable[[dict[str, float]], float] | None  # the held-out loss that settles ties of `metric`
    metric_keys: tuple[str, ...]  # what `metrics` returns
    metrics: Callable[..., dict[str, float]]  # (model, held-out batches, device, autocast dtype)
    held_out: Callable[..., list[dict[str, torch.Tensor]]]  # (documents, seq_len, batch, vocab, eval_seed)
    collator: Callable[[TrainConfig, Tokenizer, int], Any]
    sample: Callable[[TrainConfig, int], dict[str, torch.Tensor]]
    corpus_batches: Callable[..., list]  # an in-memory corpus's epoch in batches of instances (streams.py)
    check_corpus: Callable[[list, TrainConfig], None]  # refuses a corpus that gives no batch, at once
    window_batches: Callable[..., list]  # a prepared corpus's window in batches of instances (prepare.py)
    check_windows: Callable[[WindowedInstances], None] | None  # likewise for a prepared split
    layout: Callable[[dict], dict] | None  # added to each sharded batch (the last layer's pruning)
    check_model: Callable[[ModelConfig], None]  # what the objective needs of the model's shape

    @property
    def model(self) -> type:
        """The model class it trains (its checkpoint kind's)."""
        return KINDS[self.kind].model

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands that take the checkpoints it writes."""
        return KINDS[self.kind].commands

    def source(self, data: list | PreparedSplit, cfg: TrainConfig) -> CorpusInstances | WindowedInstances:
        """What a batch stream walks for this objective: a tokenized corpus in memory, or a prepared split."""
        if isinstance(data, list):
            return CorpusInstances(data, cfg, self.corpus_batches, self.check_corpus)
        return WindowedInstances(data, cfg, window_batches=self.window_batches, check=self.check_windows)

    def stream(
        self, data: list | PreparedSplit | Any, cfg: TrainConfig, collator: Any, rank: int = 0, world: int = 1
    ) -> BatchStream:
        """Endless training batches of this objective (`data` as for `source`, or a source already built)."""
        source = self.source(data, cfg) if isinstance(data, list | PreparedSplit) else data
        return BatchStream(source, cfg, collator, rank, world, layout=self.layout)


# ----------------------------------------------------------------------------------------------------------
# MLM + NSP


def mlm_nsp_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's MLM + NSP loss (`streams.shard_batch`'s `loss_share`)."""
    share = batch.pop("loss_share")
    out = model(**batch, return_logits=False)  # the loss in chunks, without the (N, V) logits
    mlm, nsp = out.mlm_loss * share[0], out.nsp_loss * share[1]
    return {"loss": mlm + nsp, "mlm_loss": mlm, "nsp_loss": nsp}


def mlm_nsp_held_out_loss(metrics: dict[str, float]) -> float:
    """Both heads' held-out losses: among evaluations of equal MLM accuracy, the lower has learnt more,
    the next-sentence head included."""
    return metrics["mlm_loss"] + metrics["nsp_loss"]


def mlm_nsp_held_out(
    held_out: list, seq_len: int, batch_size: int, vocab_size: int, eval_seed: int
) -> list[dict[str, torch.Tensor]]:
    """Masked NSP pairs of the held-out documents, the standard protocol (`held_out.prepare_eval_batches`)."""
    return prepare_eval_batches(held_out, seq_len, batch_size, vocab_size, eval_seed)


def masking_collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> MaskingCollator:
    """The run's masking collator (its rate, cap, whole-word masking and seed)."""
    return MaskingCollator(
        vocab_size,
        mask_prob=cfg.mask_prob,
        max_predictions=cfg.max_predictions,
        pad_to_multiple_of=cfg.pad_to_multiple_of,
        seed=cfg.seed,
        whole_word_mask=cfg.whole_word_mask,
        word_start=word_start_table(tokenizer, vocab_size) if cfg.whole_word_mask else None,
    )


def _random_ids(cfg: TrainConfig, vocab_size: int) -> tuple[torch.Tensor, torch.Generator]:
    """A (batch_size, max_seq_len) batch of random tokens after [CLS], and the generator that drew them."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(NUM_SPECIAL_TOKENS, vocab_size, (cfg.batch_size, cfg.max_seq_len), generator=g)
    ids[:, 0] = CLS_ID
    return ids, g


def mlm_nsp_sample(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random tokens masked at the run's rate, as the stream hands a batch to the loss."""
    ids, g = _random_ids(cfg, vocab_size)
    B, T = ids.shape
    labels = torch.where(torch.rand(B, T, generator=g) < cfg.mask_prob, ids, IGNORE_INDEX)
    labels[:, 0] = IGNORE_INDEX
    query_positions, mlm_positions = query_layout(labels, MLM_POSITIONS_MULTIPLE, QUERY_WIDTH_MULTIPLE)
    return {
        "input_ids": torch.where(labels != IGNORE_INDEX, MASK_ID, ids),
        "token_type_ids": (torch.arange(T) >= T // 2).long().expand(B, T).contiguous(),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (B,), generator=g),
        "query_positions": query_positions,
        "mlm_positions": mlm_positions,
        "loss_share": torch.ones(2),
    }


def check_segment_b(model_config: ModelConfig) -> None:
    """Next-sentence pairs need a segment B: NanobertError for a model with one token type."""
    if model_config.type_vocab_size < 2:
        raise NanobertError(
            f"model config: type_vocab_size {model_config.type_vocab_size} leaves no segment B, which "
            "next-sentence pairs need; use 2 (or --objective causal)"
        )


MLM_NSP = Objective(
    name="mlm_nsp",
    kind=PRETRAINING,
    is_decoder=False,
    loss=mlm_nsp_loss,
    metric="mlm_accuracy",
    higher_is_better=True,
    tiebreak=mlm_nsp_held_out_loss,
    metric_keys=METRIC_KEYS,
    metrics=mlm_nsp_metrics,
    held_out=mlm_nsp_held_out,
    collator=masking_collator,
    sample=mlm_nsp_sample,
    corpus_batches=nsp_corpus_batches,
    check_corpus=check_nsp_corpus,
    window_batches=nsp_window_batches,
    check_windows=None,  # WindowedInstances itself refuses a split of fewer than two documents
    layout=add_query_layout,
    check_model=check_segment_b,
)

# ----------------------------------------------------------------------------------------------------------
# Causal (next word)


def causal_lm_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's part of the global batch's next-word loss."""
    share = batch.pop("loss_share")
    lm = model(**batch, return_logits=False).loss * share[0]
    return {"loss": lm, "lm_loss": lm}


def causal_held_out(
    held_out: list, seq_len: int, batch_size: int, vocab_size: int, eval_seed: int
) -> list[dict[str, torch.Tensor]]:
    """Next-word windows of the held-out documents from their start (no masking, so no seed)."""
    return prepare_causal_eval_batches(held_out, seq_len, batch_size)


def causal_collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> CausalCollator:
    """Plain stacking of the windows (padded to the run's multiple)."""
    return CausalCollator(pad_to_multiple_of=cfg.pad_to_multiple_of)


def causal_sample(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random windows, as the stream hands a batch to the loss."""
    ids, _ = _random_ids(cfg, vocab_size)
    return {**CausalCollator()(ids.tolist()), "loss_share": torch.ones(2)}


def _no_check(model_config: ModelConfig) -> None:
    """The causal model reads one segment: any type_vocab_size does."""


CAUSAL = Objective(
    name="causal",
    kind=CAUSAL_LM,
    is_decoder=True,
    loss=causal_lm_loss,
    metric="lm_loss",
    higher_is_better=False,
    tiebreak=None,  # the metric is a loss already
    metric_keys=CAUSAL_METRIC_KEYS,
    metrics=causal_lm_metrics,
    held_out=causal_held_out,
    collator=causal_collator,
    sample=causal_sample,
    corpus_batches=causal_corpus_batches,
    check_corpus=check_causal_corpus,
    window_batches=causal_window_batches,
    check_windows=check_causal_windows,
    layout=None,  # every position is predicted: the last layer computes them all
    check_model=_no_check,
)

# ----------------------------------------------------------------------------------------------------------
# Hybrid (GPT-BERT: masked and next-word batches on one head; its functions are hybrid.py's)


def hybrid_collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> HybridCollator:
    """The run's masking collator, and the draw of which batches are next-word instead."""
    return HybridCollator(
        masking_collator(cfg, tokenizer, vocab_size), cfg.causal_fraction, cfg.seed, cfg.pad_to_multiple_of
    )


def hybrid_sample(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Random windows masked at the run's rate (most batches are masked), as the stream hands one to the
    loss: what the precision choice times."""
    ids, _ = _random_ids(cfg, vocab_size)
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
    check_model=_no_check,
)

# ----------------------------------------------------------------------------------------------------------
# The registry: a new objective is one more record here

OBJECTIVES = {objective.name: objective for objective in (MLM_NSP, CAUSAL, HYBRID)}


def objective_of(cfg: TrainConfig, model_config: ModelConfig | None = None) -> Objective:
    """The run's objective; a one-line NanobertError for a name that is not one of OBJECTIVES' keys, or (given
    the model config of a new run) for a model shape the objective cannot train."""
    if cfg.objective not in OBJECTIVES:
        names = ", ".join(OBJECTIVES)
        raise NanobertError(f"train config: objective must be one of {names}, got {cfg.objective!r}")
    objective = OBJECTIVES[cfg.objective]
    if model_config is not None:
        objective.check_model(model_config)
    return objective


def objective_of_kind(kind: str, directory: Any, wanted: str = "a pretrained language model") -> Objective:
    """The objective whose checkpoints are of `kind`; else `checkpoint.wrong_kind`'s one-line error."""
    for objective in OBJECTIVES.values():
        if objective.kind == kind:
            return objective
    raise wrong_kind(directory, kind, wanted)


def objective_of_model(model: torch.nn.Module) -> Objective:
    """The objective a pretraining model was built for (by its class)."""
    return next(o for o in OBJECTIVES.values() if type(model) is o.model)


# The run-wide helpers train.py calls (kept as names of their own: tests and benchmarks use them).


def eval_batches(cfg: TrainConfig, held_out: list, vocab_size: int) -> list[dict[str, torch.Tensor]]:
    """The run's fixed held-out batches."""
    return objective_of(cfg).held_out(
        held_out, cfg.max_seq_len, cfg.eval_batch_size, vocab_size, cfg.eval_seed
    )


def collator(cfg: TrainConfig, tokenizer: Tokenizer, vocab_size: int) -> Any:
    """What turns the run's training instances into a batch."""
    return objective_of(cfg).collator(cfg, tokenizer, vocab_size)


def sample_batch(cfg: TrainConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """A batch of the run's shape (batch_size x max_seq_len, its masking rate) of random tokens, as the
    stream would hand it to the loss: what `device.choose_precision` times the two precisions on."""
    return objective_of(cfg).sample(cfg, vocab_size)


__all__ = [
    "CAUSAL",
    "HYBRID",
    "MLM_NSP",
    "OBJECTIVES",
    "Objective",
    "causal_lm_loss",
    "collator",
    "eval_batches",
    "mlm_nsp_loss",
    "objective_of",
    "objective_of_kind",
    "objective_of_model",
    "sample_batch",
]
