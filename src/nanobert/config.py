"""Typed configuration: the model (Hugging Face `BertConfig` field names), the training run, and presets.

`ModelConfig` uses the field names of transformers' `configuration_bert.py` so a nanobert `config.json` reads
like a BERT one and export is a rename, not a translation. `TrainConfig` holds everything about a run. A
preset is a named pair of overrides for both; `--set key=value` overrides any single field of either, with
the value parsed by the field's declared type (cli/overrides.py: typos and wrong types fail loudly, before
any work).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from nanobert.errors import NanobertError


@dataclass
class ModelConfig:
    """Shape and regularisation of a BERT encoder; defaults are the `mini` preset with an 8,192 vocabulary."""

    vocab_size: int = 8192  # WordPiece 8,192: the size the project compares quality at on WikiText-2
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 1024  # 4x hidden, as in BERT
    # "gelu": exact (erf) GELU, the activation of the original BERT and of transformers. "geglu": the gated
    # feed-forward of Shazeer (2020), GELU(x W) * (x V), with W and V both H -> intermediate_size (so 1.5x the
    # feed-forward's weights and work); transformers' BERT has no such layer, so it cannot be exported. At
    # equal CPU time it tied the plain GELU (record 2026-11-25-geglu-and-no-bias).
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2  # segment A and segment B
    layer_norm_eps: float = 1e-12  # BERT's value; transformers uses it too, which keeps the parity test exact
    initializer_range: float = 0.02
    # "sinusoidal": the learned position table starts as Vaswani et al.'s sines and cosines instead of noise,
    # so "attend to the next word" is a direction attention can find at once; training then changes it like
    # any weight. "normal" is BERT's init.
    position_embedding_init: str = "normal"
    # The position table's initial spread in units of initializer_range. At 3, position outweighs the token
    # in the first LayerNorm, and the CPU recipe left the frequent-words plateau sooner on every seed
    # (record 2026-11-25-position-scale).
    position_embedding_scale: float = 1.0
    # "mimetic": each head's key projection starts as a copy of its query projection (Trockman & Kolter 2023,
    # "Mimetic Initialization of Self-Attention Layers"), so from step 0 a token attends to the tokens most
    # like it: itself and, through the position rows, its neighbours. The frequent-words plateau is the time
    # random attention takes to find the neighbours. "roles": mimetic, with the first half of the heads
    # reading only where a token is (the position and segment rows start in the first half of the
    # dimensions) and the other half only what it is (the token rows' second half): those heads attend to
    # the same word wherever it is, in either segment. "normal" is BERT's init.
    attention_init: str = "normal"
    # mimetic: the attention score (q.k / sqrt(head size)) of a token with itself at step 0, on average
    mimetic_score: float = 8.0
    pad_token_id: int = 0
    pre_layer_norm: bool = False  # False = post-LN as in BERT; True = LayerNorm before each sublayer
    # True = causal self-attention (each token sees itself and the tokens before it): GPT's next-word task on
    # BERT's stack. Set by `pretrain --objective causal`; transformers' name for the same switch.
    is_decoder: bool = False

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise NanobertError(f"model config: {name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise NanobertError(
                f"model config: hidden_size {self.hidden_size} is not divisible by num_attention_heads "
                f"{self.num_attention_heads}; pick a head count that divides it"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise NanobertError(f"model config: {name} must be in [0, 1), got {getattr(self, name)}")
        if self.hidden_act not in ("gelu", "geglu"):
            raise NanobertError(f"model config: hidden_act {self.hidden_act!r} is not one of 'gelu', 'geglu'")
        if self.position_embedding_init not in ("normal", "sinusoidal"):
            raise NanobertError(
                f"model config: position_embedding_init {self.position_embedding_init!r} is not one of "
                "'normal', 'sinusoidal'"
            )
        if self.attention_init not in ("normal", "mimetic", "roles"):
            raise NanobertError(
                f"model config: attention_init {self.attention_init!r} is not one of 'normal', 'mimetic', "
                "'roles'"
            )
        if self.attention_init == "roles" and (self.num_attention_heads < 2 or self.hidden_size % 2):
            raise NanobertError(
                "model config: attention_init 'roles' needs at least two heads and an even hidden_size "
                "(half the heads read positions, half read words)"
            )
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise NanobertError(f"model config: pad_token_id {self.pad_token_id} is outside the vocabulary")
        # written as "not > 0" so that NaN fails too
        positive = (
            self.layer_norm_eps,
            self.initializer_range,
            self.position_embedding_scale,
            self.mimetic_score,
        )
        if not all(value > 0 for value in positive):
            raise NanobertError(
                "model config: layer_norm_eps, initializer_range, position_embedding_scale and mimetic_score "
                "must be positive"
            )


@dataclass
class TrainConfig:
    """One pretraining run. The length is set by exactly one of max_steps, epochs or time_budget."""

    seed: int = 1337
    # mlm_nsp: BERT's masked words + next sentence; causal: GPT's next word (the same stack, causal
    # attention); hybrid: both, on one head (GPT-BERT). A key of `objectives.registry.OBJECTIVES`, which
    # checks it (config stands below the registry and cannot import it).
    objective: str = "mlm_nsp"
    causal_fraction: float = 1 / 16  # hybrid: the share of batches that are next-word (GPT-BERT's 1 in 16)
    # data
    vocab_size: int = 8192  # WordPiece size to train; the model's vocab_size follows the trained tokenizer
    tokenizer_min_frequency: int = 2  # a word piece must occur this often to enter the vocabulary
    max_seq_len: int = 128
    mask_prob: float = 0.15
    max_predictions: int | None = None  # cap on masked positions per sequence (None: no cap)
    short_seq_prob: float = 0.1  # Google's probability of a shorter target length, so short inputs are seen
    whole_word_mask: bool = False
    # attention_init="roles" only: the "what" heads keep their word match while pretraining, so fine-tuning
    # on sentence pairs can read it (initialization.keep_roles). On in the recipes; BERT has no such heads.
    keep_roles: bool = False
    # sequence-length schedule (BERT's was 128 then 512): epochs that start in the first short_seq_share of
    # the run cut windows of short_seq_len tokens, in batches of proportionally more rows so that a step
    # holds as many tokens; later epochs and every evaluation use max_seq_len
    short_seq_len: int | None = None
    short_seq_share: float = 0.0
    dupe_factor: int = 1  # independent NSP instance sets per epoch (Google's dupe_factor), for tiny corpora
    bucket_by_length: bool = True  # length-bucketed batches waste less compute on padding
    pad_to_multiple_of: int = 8  # padded lengths come in few shapes (fewer recompiles, tensor-core sizes)
    # optimisation
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
    # length (at most one set; none set means the preset's choice)
    max_steps: int | None = None
    epochs: float | None = None
    time_budget: float | None = None  # seconds of training; steps are re-planned from the measured speed
    # depth that follows the data a run can cover: a new run whose length (for a time budget, at the step
    # rate measured before it starts) gives the model fewer passes over its corpus than this trains half its
    # layers instead; None: the layers as configured. The first run with no options sets it (DEPTH_PASSES).
    shallow_below_passes: float | None = None
    # size that follows the device: a new run with a time budget times one step of each shape of
    # `recipes.GPU_SHAPES` here and trains the largest that leaves at least this many steps in the budget;
    # None: the shape as configured. The first run with no options on a GPU sets it (GPU_MIN_STEPS).
    min_planned_steps: int | None = None
    # evaluation and logging
    eval_interval: int = 200
    eval_batch_size: int = 64
    eval_seed: int = 0  # fixed masking seed for held-out metrics, so every evaluation masks the same way
    log_interval: int = 20
    checkpoint_interval: int | None = None  # steps between resumable last/ saves; None: at every evaluation
    early_stopping_patience: int | None = None  # evaluations without a new best/ before stopping
    # a later evaluation takes best/ unless its selection metric (mlm_accuracy; lm_loss for causal) trails the
    # best so far by this much or more (0: only a new best); about one standard error of the held-out accuracy
    # keeps best/ from landing early on a plateau by noise alone
    best_margin: float = 0.0
    # hardware
    device: str = "auto"
    precision: str = "auto"  # auto = bf16 on CUDA; on a CPU the faster of fp32 and bf16, timed
    compile: bool = False

    def __post_init__(self) -> None:
        lengths = [n for n in ("max_steps", "epochs", "time_budget") if getattr(self, n) is not None]
        if len(lengths) > 1:
            raise NanobertError(
                f"train config: set only one of max_steps, epochs, time_budget (got {lengths})"
            )
        _check(
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
            ("causal_fraction", 0.0 <= self.causal_fraction <= 1.0, "in [0, 1]"),
            (
                "short_seq_len",
                self.short_seq_len is None or 8 <= self.short_seq_len < self.max_seq_len,
                f"at least 8 and below max_seq_len ({self.max_seq_len}), or None",
            ),
            ("short_seq_share", 0.0 <= self.short_seq_share < 1.0, "in [0, 1)"),
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
            ("max_steps", self.max_steps is None or self.max_steps >= 1, "at least 1"),
            ("epochs", self.epochs is None or 0 < self.epochs < math.inf, "positive and finite"),
            (
                "time_budget",
                self.time_budget is None or 0 < self.time_budget < math.inf,
                "positive and finite",
            ),
            (
                "shallow_below_passes",
                self.shallow_below_passes is None or 0 < self.shallow_below_passes < math.inf,
                "positive and finite, or None",
            ),
            (
                "min_planned_steps",
                self.min_planned_steps is None or self.min_planned_steps >= 1,
                "at least 1, or None",
            ),
            (
                "device",
                self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
                "auto, cpu or cuda",
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


def _check(what: str, cfg: Any, at_least_one: tuple[str, ...], checks: list[tuple[str, bool, str]]) -> None:
    """Raise NanobertError naming the first field whose check failed: `what: name must be want, got value`.

    Besides `checks`, the fields in `at_least_one` must be at least 1, and every config's optimiser
    settings and precision must make sense (each check is written so that NaN fails it).
    """
    checks = [(name, getattr(cfg, name) >= 1, "at least 1") for name in at_least_one] + [
        ("learning_rate", cfg.learning_rate > 0, "positive"),
        ("warmup_ratio", 0.0 <= cfg.warmup_ratio < 1.0, "in [0, 1)"),
        ("weight_decay", cfg.weight_decay >= 0, "0 or more"),
        ("adam_eps", cfg.adam_eps > 0, "positive"),
        ("grad_clip", cfg.grad_clip >= 0, "0 (off) or more"),
        ("seed", 0 <= cfg.seed < 2**63, "in [0, 2**63)"),  # what numpy and torch take
        ("precision", cfg.precision in PRECISIONS, "auto, fp32 or bf16"),
        *checks,
    ]
    for name, ok, want in checks:
        if not ok:
            raise NanobertError(f"{what}: {name} must be {want}, got {getattr(cfg, name)!r}")


PRECISIONS = ("auto", "fp32", "bf16")


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
        _check(
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
        _check(
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


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A plain dict of a config dataclass, for config.json."""
    return dataclasses.asdict(cfg)


def config_from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Rebuild a config dataclass from a checkpoint's JSON, ignoring keys it does not know (older or newer
    checkpoints). A section that is not an object, or a value not of its field's type (an edited or damaged
    config.json), is a NanobertError: a wrong type would otherwise fail deep inside torch."""
    if not isinstance(data, dict):
        raise NanobertError(f"the {cls.__name__} section is {type(data).__name__}, not an object")
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key in fields:
            kwargs[key] = _json_value(value, fields[key], f"{cls.__name__}.{key}")
    return cls(**kwargs)


def _json_value(value: Any, annotation: Any, key: str) -> Any:
    """`value` if JSON gave it the type `annotation` names (an int is a float too), else NanobertError."""
    kinds = {part.strip() for part in str(annotation).split("|")}
    if value is None and "None" in kinds:
        return value
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if ("bool" in kinds and isinstance(value, bool)) or ("str" in kinds and isinstance(value, str)):
        return value
    if "int" in kinds and number and float(value).is_integer():
        return int(value)
    if "float" in kinds and number:
        return float(value)
    raise NanobertError(f"{key} is {value!r}, not {annotation}; the config.json is damaged")


__all__ = [
    "PRECISIONS",
    "FinetuneConfig",
    "QAConfig",
    "ModelConfig",
    "TrainConfig",
    "config_from_dict",
    "config_to_dict",
]
