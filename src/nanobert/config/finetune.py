"""A fine-tuning run's settings: `FinetuneConfig` for classification and regression, `QAConfig` for
extractive question answering."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nanobert.config.fields import check_fields


@dataclass
class FinetuneConfig:
    """One fine-tuning run; defaults are the ones behind the SST-2 and TREC-6 numbers in benchmarks/."""

    # None: 3 epochs (BERT's GLUE recipe), or more for a small training set, so that fine-tuning makes at
    # least `min_steps` steps (at most `max_default_epochs` epochs): STS-B's 5,749 pairs were still climbing
    # after 3 epochs (record 2026-11-27-sts-b-epochs-and-dropout); SST-2's 67k sentences keep their 3.
    epochs: int | None = None
    min_steps: int = 1500
    max_default_epochs: int = 10
    batch_size: int = 32
    # BERT's paper searched 2e-5..5e-5 for BERT-base; Google's small-BERT release (BERT-Mini and friends)
    # searched {3e-4, 1e-4, 5e-5, 3e-5}; small encoders favour the upper end, and 3e-4 beat 1e-4 and 1e-3 on
    # SST-2 and TREC-6 for the shapes we ship (record 2026-11-23-sst2-and-trec).
    learning_rate: float = 3e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01  # not applied to biases and LayerNorm weights
    # Layer-wise learning-rate decay (ELECTRA's fine-tuning recipe): the pooler and head train at
    # learning_rate, each encoder layer below at `layer_lr_decay` times the one above, the embeddings last.
    # Below 1 it keeps more of what pretraining put in the lower layers; 1.0 = one learning rate. From the
    # CPU preset's checkpoints 0.8 lifts SST-2 (record 2026-11-26-sst2-fine-tuning-settings), but a barely
    # pretrained checkpoint's embeddings then learn too slowly (tests/test_finetune.py), so it stays 1.0.
    layer_lr_decay: float = 1.0
    # Hidden and attention dropout while fine-tuning. None: the task's measured default (`Task.dropout`):
    # what the checkpoint was pretrained with (the CPU recipe: none) for regression and question answering,
    # BERT's 0.1 for sentence classification, which loses without it (records
    # 2026-11-27-sts-b-epochs-and-dropout, 2026-11-26-sst2-fine-tuning-settings).
    dropout: float | None = None
    # Start the pooler (tanh(dense([CLS])), which the head reads) from fresh weights instead of the
    # checkpoint's. None: the task's measured default (`Task.fresh_pooler`): fresh for regression, the
    # checkpoint's for classification. Pretraining trains the pooler for NSP only: with it one STS-B seed in
    # four stalled, and SST-2 lost with a fresh one (record 2026-11-27-sts-b-head-and-pooler).
    fresh_pooler: bool | None = None
    # Read every training pair both ways (A-B and B-A, twice the rows) and score each dev, test or predicted
    # pair as the mean of the two readings: for a symmetric task, where the order of the two texts carries
    # nothing (similarity, paraphrase). None: the task's default (`Task.symmetric_pairs`): on for
    # sentence-pair regression, off otherwise: STS-B rose on every fine-tuning seed (record
    # 2026-11-27-sts-b-pairs-both-ways).
    symmetric_pairs: bool | None = None
    # What the pooler (so the head) reads: "cls", BERT's [CLS] final state, or "mean", every token's final
    # state averaged, padding left out (ModernBERT's `classifier_pooling`). None: the task's default, mean: on
    # [CLS] one STS-B seed in five fit its training pairs without learning the task, its top layer hardly
    # moving (record 2026-12-06-fine-tuning-that-never-stalls; `Task.pooling`).
    pooling: str | None = None
    adam_eps: float = 1e-6  # BERT's value
    grad_clip: float = 1.0
    max_seq_len: int = 128  # tokens including [CLS]/[SEP]; longer inputs lose tokens from the longer side
    metric: str | None = None  # the dev metric that picks the best epoch; None = accuracy / pearson
    # Task-adaptive pretraining (Gururangan et al. 2020, `finetuning/adapt.py`): before fine-tuning, this many
    # epochs of masked-LM (15%, 80/10/10) on the training file's own text, labels unused, from the checkpoint.
    # 0 = off.
    adapt_epochs: int = 0
    adapt_learning_rate: float = 5e-4  # the CPU pretraining preset's peak is 1e-3; half of it, one group
    adapt_batch_size: int = 128  # rows per step; batches are length-bucketed, so short rows are cheap
    seed: int = 1337
    device: str = "auto"
    precision: str = "auto"  # auto = bf16 on CUDA; on a CPU the faster of fp32 and bf16, timed
    eval_batch_size: int = 128
    log_interval: int = 50

    def __post_init__(self) -> None:
        check_fields(
            "finetune",
            self,
            ("batch_size", "eval_batch_size", "log_interval", "max_default_epochs"),
            [
                ("epochs", self.epochs is None or self.epochs >= 1, "at least 1"),
                ("min_steps", self.min_steps >= 0, "0 or more"),
                ("layer_lr_decay", 0.0 < self.layer_lr_decay <= 1.0, "in (0, 1]"),
                ("dropout", self.dropout is None or 0.0 <= self.dropout < 1.0, "in [0, 1)"),
                ("pooling", self.pooling in (None, "cls", "mean"), "cls or mean"),
                ("adapt_epochs", self.adapt_epochs >= 0, "0 (off) or more"),
                ("adapt_learning_rate", self.adapt_learning_rate > 0, "positive"),
                ("adapt_batch_size", self.adapt_batch_size >= 1, "at least 1"),
                ("max_seq_len", self.max_seq_len >= 3, "at least 3 ([CLS], a token, [SEP])"),
            ],
        )


@dataclass
class QAConfig(FinetuneConfig):
    """Fine-tuning for extractive question answering (`finetune --task qa`): google-research/bert
    `run_squad.py`'s window settings, and 2 epochs as in Devlin et al. (2019) for SQuAD."""

    epochs: int = 2
    max_seq_len: int = 384  # question + context window, in word pieces with [CLS] and two [SEP]
    doc_stride: int = 128  # word pieces between the starts of two windows of one long context
    max_query_length: int = 64  # longer questions are cut
    max_answer_length: int = 30  # the longest answer decoding considers, in word pieces
    n_best_size: int = 20  # starts and ends per window that decoding pairs up
    null_score_threshold: float = 0.0  # SQuAD 2.0: answer "" when [CLS] beats the best span by more
    max_train_examples: int | None = None  # a seeded random sample of the training questions (CPU budgets)
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields(
            "finetune --task qa",
            self,
            ("doc_stride", "max_query_length", "max_answer_length", "n_best_size"),
            [
                (
                    "max_train_examples",
                    self.max_train_examples is None or self.max_train_examples >= 1,
                    "at least 1",
                ),
                ("null_score_threshold", math.isfinite(self.null_score_threshold), "a finite number"),
            ],
        )


__all__ = ["FinetuneConfig", "QAConfig"]
