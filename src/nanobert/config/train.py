"""A pretraining run's settings: `TrainConfig`, in sections by what each setting is for (`SECTIONS`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from nanobert.config.fields import check_fields
from nanobert.errors import NanobertError


@dataclass
class TrainConfig:
    """One pretraining run. The length is set by exactly one of max_steps, epochs or time_budget.

    The fields come in sections by what they are for, in `SECTIONS`' order, each opened by a comment that
    names it (tests/test_config.py holds both)."""

    # what is learned
    # mlm_nsp: BERT's masked words + next sentence; causal: GPT's next word (the same stack, causal
    # attention); hybrid: both, on one head (GPT-BERT). A key of `objectives.registry.OBJECTIVES`, which
    # checks it (config stands below the registry and cannot import it).
    objective: str = "mlm_nsp"
    causal_fraction: float = 1 / 16  # hybrid: the share of batches that are next-word (GPT-BERT's 1 in 16)
    # mlm_nsp: the NSP term's weight in the loss (BERT's plain sum: 1); the log says when it is not 1
    nsp_loss_weight: float = 1.0
    seed: int = 1337
    # the data
    vocab_size: int = 8192  # WordPiece size to train; the model's vocab_size follows the trained tokenizer
    tokenizer_min_frequency: int = 2  # a word piece must occur this often to enter the vocabulary
    max_seq_len: int = 128
    mask_prob: float = 0.15
    # masking-rate schedule: an epoch masks at mask_prob moved linearly toward final_mask_prob by the share of
    # the run done when it starts (None: mask_prob throughout), so a run can learn from many masked words
    # early and end reading as much context as scoring one masked word gives it
    final_mask_prob: float | None = None
    max_predictions: int | None = None  # cap on masked positions per sequence (None: no cap)
    short_seq_prob: float = 0.1  # Google's probability of a shorter target length, so short inputs are seen
    whole_word_mask: bool = False
    # with whole_word_mask: epochs that start in the first whole_word_mask_share of the run mask whole words,
    # later epochs single pieces (1.0: the whole run)
    whole_word_mask_share: float = 1.0
    # sequence-length schedule (BERT's was 128 then 512): epochs that start in the first short_seq_share of
    # the run cut windows of short_seq_len tokens, in batches of proportionally more rows so that a step
    # holds as many tokens; later epochs and every evaluation use max_seq_len
    short_seq_len: int | None = None
    short_seq_share: float = 0.0
    dupe_factor: int = 1  # independent NSP instance sets per epoch (Google's dupe_factor), for tiny corpora
    bucket_by_length: bool = True  # length-bucketed batches waste less compute on padding
    pad_to_multiple_of: int = 8  # padded lengths come in few shapes (fewer recompiles, tensor-core sizes)
    # the start the recipe keeps
    # attention_init="roles" only: the "what" heads keep their word match while pretraining, so fine-tuning
    # on sentence pairs can read it (initialization.keep_roles). On in the recipes; BERT has no such heads.
    keep_roles: bool = False
    # the optimiser
    batch_size: int = 32
    grad_accum_steps: int = 1
    learning_rate: float = 5e-4
    weight_decay: float = 0.01  # not applied to biases and LayerNorm weights
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-6
    warmup_ratio: float = 0.06  # share of the planned steps spent warming up linearly
    min_lr_ratio: float = 0.0  # the linear decay ends at learning_rate * min_lr_ratio
    # the share of the run the linear decay spans, at its end (1: all of it after the warmup, BERT's); before
    # it the rate holds at its peak (a warmup-stable-decay schedule)
    decay_ratio: float = 1.0
    grad_clip: float = 1.0
    # the length (at most one set; none set means the preset's choice)
    max_steps: int | None = None
    epochs: float | None = None
    time_budget: float | None = None  # seconds of training; steps are re-planned from the measured speed
    # the size rules
    # depth that follows the steps a run can make: a new run whose length (for a time budget, at the step
    # rate of the configured depth measured before it starts) gives fewer steps than this trains half its
    # layers instead; None: the layers as configured. The first run with no options sets it (DEPTH_STEPS).
    shallow_below_steps: int | None = None
    # the short run's rate: a run that rule halves, making fewer than `recipes.SHORT_RUN_STEPS` steps, trains
    # at this peak rate instead of learning_rate, warming up over at least `recipes.SHORT_RUN_WARMUP_STEPS`
    # (`size_rule.short_run_rate`); None: learning_rate. The first run with no options sets it
    # (SHORT_RUN_RATE) unless a rate or warm-up is set.
    shallow_learning_rate: float | None = None
    # size that follows the device: a new run with a time budget times one step of each shape of
    # `recipes.GPU_SHAPES` here and trains the largest that leaves at least this many steps in the budget;
    # None: the shape as configured. The first run with no options on a GPU sets it (GPU_MIN_STEPS).
    min_planned_steps: int | None = None
    # evaluation and saving
    eval_interval: int = 200
    eval_batch_size: int = 64
    eval_seed: int = 0  # fixed masking seed for held-out metrics, so every evaluation masks the same way
    log_interval: int = 20
    checkpoint_interval: int | None = None  # steps between resumable last/ saves; None: at every evaluation
    early_stopping_patience: int | None = None  # evaluations without a new best/ before stopping
    # stop at the first evaluation that reaches this on every held-out accuracy (a corpus memorised); the toy
    # demo's end, so that how many steps memorising takes on this machine is not left to its step count
    stop_at_accuracy: float | None = None
    # a later evaluation takes best/ unless its selection metric (mlm_accuracy; lm_loss for causal) trails the
    # best so far by this much or more (0: only a new best); about one standard error of the held-out accuracy
    # keeps best/ from landing early on a plateau by noise alone
    best_margin: float = 0.0
    # the hardware
    device: str = "auto"
    precision: str = "auto"  # auto = bf16 on CUDA; on a CPU the faster of fp32 and bf16, timed
    # torch.compile: off, since on a CPU at the first run's size it gave 1.04x (bf16) and 0.98x (fp32) after
    # ~54 s of compiling (record 2026-12-06-bf16-step), and 0.85-0.88x at the four layers an AMX Xeon's first
    # run trains (2026-12-07-what-bounds-the-step)
    compile: bool = False

    def __post_init__(self) -> None:
        lengths = [n for n in ("max_steps", "epochs", "time_budget") if getattr(self, n) is not None]
        if len(lengths) > 1:
            raise NanobertError(
                f"train config: set only one of max_steps, epochs, time_budget (got {lengths})"
            )
        if self.nsp_loss_weight != 1.0 and self.objective != "mlm_nsp":
            raise NanobertError(
                f"train config: nsp_loss_weight weighs the next-sentence term, which objective "
                f"{self.objective!r} has not; leave it at 1 or use objective mlm_nsp"
            )
        check_fields(
            "train config",
            self,
            (
                "batch_size",
                "grad_accum_steps",
                "dupe_factor",
                "eval_interval",
                "eval_batch_size",
                "log_interval",
            ),
            self._ranges(),
        )

    def _ranges(self) -> list[tuple[str, bool, str]]:
        """Each field with a range: (its name, whether its value is in it, the range as the error says it)."""
        return [
            ("max_seq_len", self.max_seq_len >= 8, "at least 8"),
            ("mask_prob", 0.0 < self.mask_prob < 1.0, "in (0, 1)"),
            (
                "final_mask_prob",
                self.final_mask_prob is None or 0.0 < self.final_mask_prob < 1.0,
                "in (0, 1), or None",
            ),
            ("causal_fraction", 0.0 <= self.causal_fraction <= 1.0, "in [0, 1]"),
            ("nsp_loss_weight", 0.0 < self.nsp_loss_weight < math.inf, "positive and finite"),
            (
                "short_seq_len",
                self.short_seq_len is None or 8 <= self.short_seq_len < self.max_seq_len,
                f"at least 8 and below max_seq_len ({self.max_seq_len}), or None",
            ),
            ("short_seq_share", 0.0 <= self.short_seq_share < 1.0, "in [0, 1)"),
            ("whole_word_mask_share", 0.0 < self.whole_word_mask_share <= 1.0, "in (0, 1]"),
            (
                "checkpoint_interval",
                self.checkpoint_interval is None or self.checkpoint_interval >= 1,
                "at least 1 (or None)",
            ),
            ("vocab_size", self.vocab_size > 5, "larger than the 5 special tokens"),
            ("tokenizer_min_frequency", self.tokenizer_min_frequency >= 0, "0 or more"),
            ("adam_beta1", 0.0 <= self.adam_beta1 < 1.0, "in [0, 1)"),
            ("adam_beta2", 0.0 <= self.adam_beta2 < 1.0, "in [0, 1)"),
            ("min_lr_ratio", 0.0 <= self.min_lr_ratio <= 1.0, "in [0, 1]"),
            ("decay_ratio", 0.0 < self.decay_ratio <= 1.0, "in (0, 1]"),
            (
                "early_stopping_patience",
                self.early_stopping_patience is None or self.early_stopping_patience >= 1,
                "at least 1 (or None)",
            ),
            ("best_margin", 0.0 <= self.best_margin < 1.0, "in [0, 1)"),
            (
                "stop_at_accuracy",
                self.stop_at_accuracy is None or 0.0 < self.stop_at_accuracy <= 1.0,
                "in (0, 1], or None",
            ),
            ("max_steps", self.max_steps is None or self.max_steps >= 1, "at least 1"),
            ("epochs", self.epochs is None or 0 < self.epochs < math.inf, "positive and finite"),
            (
                "time_budget",
                self.time_budget is None or 0 < self.time_budget < math.inf,
                "positive and finite",
            ),
            (
                "device",
                self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
                "auto, cpu or cuda",
            ),
            *self._size_rule_ranges(),
        ]

    def _size_rule_ranges(self) -> list[tuple[str, bool, str]]:
        """The size rules' fields with their ranges, as `_ranges`."""
        return [
            (
                "shallow_below_steps",
                self.shallow_below_steps is None or self.shallow_below_steps >= 1,
                "at least 1, or None",
            ),
            (
                "shallow_learning_rate",
                self.shallow_learning_rate is None or 0 < self.shallow_learning_rate < math.inf,
                "positive and finite, or None",
            ),
            (
                "min_planned_steps",
                self.min_planned_steps is None or self.min_planned_steps >= 1,
                "at least 1, or None",
            ),
        ]

    def epoch_shape(self, progress: float) -> tuple[int, int]:
        """(window length, rows per batch) of an epoch that starts when `progress` of the run is done.

        Full length and batch_size unless the sequence-length schedule says otherwise; short windows come in
        proportionally more rows, so that a step holds as many tokens."""
        seq_len = self.max_seq_len
        if self.short_seq_len is not None and progress < self.short_seq_share:
            seq_len = self.short_seq_len
        return seq_len, self.batch_size * self.max_seq_len // seq_len

    def epoch_mask_prob(self, progress: float) -> float:
        """The masking rate of an epoch that starts when `progress` of the run is done."""
        if self.final_mask_prob is None:
            return self.mask_prob
        return self.mask_prob + (self.final_mask_prob - self.mask_prob) * min(max(progress, 0.0), 1.0)

    def epoch_whole_words(self, progress: float) -> bool:
        """Whether an epoch that starts when `progress` of the run is done masks whole words."""
        return self.whole_word_mask and progress < self.whole_word_mask_share


# TrainConfig's sections, in order: a reader finds a setting by what it is for.
SECTIONS: dict[str, tuple[str, ...]] = {
    "what is learned": ("objective", "causal_fraction", "nsp_loss_weight", "seed"),
    "the data": (
        "vocab_size", "tokenizer_min_frequency", "max_seq_len", "mask_prob", "final_mask_prob",
        "max_predictions", "short_seq_prob", "whole_word_mask", "whole_word_mask_share", "short_seq_len",
        "short_seq_share", "dupe_factor", "bucket_by_length", "pad_to_multiple_of",
    ),
    "the start the recipe keeps": ("keep_roles",),
    "the optimiser": (
        "batch_size", "grad_accum_steps", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2",
        "adam_eps", "warmup_ratio", "min_lr_ratio", "decay_ratio", "grad_clip",
    ),
    "the length": ("max_steps", "epochs", "time_budget"),
    "the size rules": ("shallow_below_steps", "shallow_learning_rate", "min_planned_steps"),
    "evaluation and saving": (
        "eval_interval", "eval_batch_size", "eval_seed", "log_interval", "checkpoint_interval",
        "early_stopping_patience", "stop_at_accuracy", "best_margin",
    ),
    "the hardware": ("device", "precision", "compile"),
}  # fmt: skip


__all__ = ["SECTIONS", "TrainConfig"]
