"""Recipes: the presets, and what `nanobert pretrain` chooses when nobody chose.

A preset names a model shape plus the training settings that suit it; `--preset NAME --set key=value`
builds a run's configs from one (`build_configs`). The first run with no options (`new_run_configs`) makes
every other choice in one place, and its log says each one:

- **the recipe**: `toy` for the toy corpus; on a CPU `wikitext2-cpu`, the measured recipe for few cores;
  on a GPU `wikitext2-gpu`, its start at a batch that keeps a GPU busy;
- **the length**: `DEFAULT_BUDGET` seconds (about 15 minutes on a laptop CPU, 3 on a GPU);
- **the depth** (CPU recipe): half the layers where the plan gives four fewer than `DEPTH_STEPS` steps, a
  step timed on this machine (`size_rule.choose_depth`), and fewer than `SHORT_RUN_STEPS` of those at
  twice the rate (`SHORT_RUN_RATE`, warmed up over at least `SHORT_RUN_WARMUP_STEPS`);
- **the shape** (GPU recipe): the largest of `GPU_SHAPES` whose step, timed on the device, leaves
  `GPU_MIN_STEPS` steps in the budget (`size_rule.choose_shape`);
- **the precision**: fp32 or bf16 autocast, whichever a timed step says is faster here
  (`device.choose_precision`; bf16 on a GPU).

Each figure behind a choice lives in a record under benchmarks/records/, named where the choice is made.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nanobert.config import ModelConfig, TrainConfig
from nanobert.errors import NanobertError
from nanobert.initialization import check_keep_roles

# Model shapes. Intermediate size is 4x hidden; names follow Google's small-BERT release where they overlap.
MODEL_PRESETS: dict[str, dict[str, int]] = {
    "tiny": dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=2),
    "mini": dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4),
    "small": dict(num_hidden_layers=4, hidden_size=512, num_attention_heads=8),
    "medium": dict(num_hidden_layers=8, hidden_size=512, num_attention_heads=8),
    "base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12),
}
for _shape in MODEL_PRESETS.values():
    _shape["intermediate_size"] = 4 * _shape["hidden_size"]


# The recipes' start: no dropout, sinusoidal position rows at 3x the token rows' spread, mimetic attention
# with a role per head (half the heads read where a token is, half what it is: 2026-12-03-nsp-diagnosis).
RECIPE_START = dict(
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    position_embedding_init="sinusoidal",
    position_embedding_scale=3.0,
    attention_init="roles",
)
# ... and their training: 45% masking in the first epoch, moving by epoch to 15% at the end (more masked
# words and grammar at an hour of one core, 2026-12-06-grammar-levers); the peak rate held, then a decay
# over the last 30% of the run (2026-11-29-step-protocol); a log line every 50 steps; best_margin about one
# standard error; the pair kept: the "what" heads keep their word match while pretraining, which fine-tuning
# on sentence pairs reads (keep_roles: STS-B 0.82 against 0.55 without it, 2026-12-04-pair-kept;
# 2026-12-05-pair-kept-by-default).
RECIPE_TRAINING = dict(
    mask_prob=0.45, final_mask_prob=0.15, decay_ratio=0.3, log_interval=50, best_margin=0.006, keep_roles=True
)

PRESETS: dict[str, dict[str, Any]] = {
    **{name: {"model": dict(shape), "train": {}} for name, shape in MODEL_PRESETS.items()},
    # The CPU recipe (each reason's record is a folder of benchmarks/records/): the tiny width at four layers
    # (2026-11-25-four-layer-preset; the first run halves them on a large corpus, 2026-11-27-depth-rule); 45%
    # training masking, held-out figures still masking 15% (2026-11-25-masking-rate-and-batch); no dropout,
    # which only slowed a model this small (2026-11-24-preset-dropout-off); sinusoidal position rows at 3x the
    # token rows' spread, so attention finds word order sooner (2026-11-25-preset-position-scale-3), and keys
    # that start as copies of the queries, so attention reads the neighbours from step 0 and leaves the
    # frequent-words plateau within ~500 steps instead of ~2,000 (2026-11-29-plateau-screens), half the
    # heads reading where a token is and half what it is, which lifts STS-B fine-tuned from the first run
    # (2026-12-03-nsp-diagnosis); lr 1e-3
    # (2026-11-23-tiny-leaves-the-plateau); an evaluation every 500 steps keeps it under 5% of the budget;
    # best_margin about one standard error of the held-out accuracy (2026-11-26-best-margin).
    "wikitext2-cpu": {
        "model": dict(MODEL_PRESETS["tiny"], num_hidden_layers=4, **RECIPE_START),
        "train": dict(learning_rate=1e-3, time_budget=1800.0, eval_interval=500, **RECIPE_TRAINING),
    },
    # The first run on a GPU: the CPU recipe's start, masking and schedule at a batch that keeps a GPU busy
    # (128 rows of 128 tokens) and BERT-small's rate; the shape is the one `GPU_SHAPES` timing picks. Not yet
    # measured on a GPU: gpu_check.py's first item measures exactly this run.
    "wikitext2-gpu": {
        "model": dict(MODEL_PRESETS["small"], **RECIPE_START),
        "train": dict(
            batch_size=128, learning_rate=5e-4, time_budget=180.0, eval_interval=250, **RECIPE_TRAINING
        ),
    },
    # Memorises the built-in toy corpus in seconds: no dropout; pre-LN tolerates the high learning rate that
    # makes it quick; the corpus yields ~8 instances an epoch, so dupe_factor builds several sets per batch.
    # 1,000 steps: at 800 one seed of five ended with a next-sentence pair wrong, with one thread and two
    # (2026-11-29-toy-demo); the peak rate held and a decay over the last 30%, as the recipes: with BERT's
    # linear decay a seed now and then still ended with a next-sentence pair wrong (2026-11-29-toy-hold);
    # fp32, not a timed choice: in bf16 autocast best/ held 2 of 22 masked words wrong on the default seed.
    "toy": {
        "model": dict(
            MODEL_PRESETS["tiny"],
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pre_layer_norm=True,
        ),
        "train": dict(
            vocab_size=200,
            tokenizer_min_frequency=1,
            max_seq_len=64,
            batch_size=32,
            dupe_factor=4,
            learning_rate=3e-3,
            # until memorised: the first evaluation with every held-out accuracy at 1 ends the run, at most
            # 2,000 steps; in 1,000 the default seed ended one masked word short under two threads on the
            # bf16 CPUs (AVX512-BF16, AMX-BF16); on AMX it reached 1 at step 1,600 (the warmup keeps 50 steps)
            max_steps=2000,
            stop_at_accuracy=1.0,
            eval_interval=200,
            log_interval=50,
            warmup_ratio=0.025,
            decay_ratio=0.3,
            bucket_by_length=False,
            precision="fp32",
        ),
    },
}


# The toy run of the next-word objectives (causal, hybrid): a fixed length, no stop once memorised.
TOY_NEXT_WORD = dict(max_steps=1000, warmup_ratio=0.05, stop_at_accuracy=None)


def _toy_next_word(train_overrides: dict[str, Any]) -> None:
    """The toy run of a next-word objective, in `train_overrides` where the user set nothing else. It never
    reaches accuracy 1 (the next word is not always one word), so it keeps the fixed 1,000 steps it had
    before the toy preset stopped once memorised (`TOY_NEXT_WORD`). The hybrid also keeps BERT's decay: with
    the hold, its best/ (the lowest held-out loss, which memorising raises across the documents' ends) came
    before the corpus was learnt (2026-11-29-toy-hold)."""
    objective = train_overrides.get("objective", "mlm_nsp")
    if objective == "hybrid":
        train_overrides.setdefault("decay_ratio", 1.0)
    if objective != "mlm_nsp":
        for key, value in TOY_NEXT_WORD.items():
            if key not in LENGTH_FIELDS or not set(LENGTH_FIELDS) & set(train_overrides):
                train_overrides.setdefault(key, value)


def build_configs(
    preset: str, model_overrides: dict[str, Any] | None = None, train_overrides: dict[str, Any] | None = None
) -> tuple[ModelConfig, TrainConfig]:
    """The preset's configs with overrides applied (overrides win); NanobertError for an unknown preset."""
    if preset not in PRESETS:
        raise NanobertError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    model_kw = {**PRESETS[preset]["model"], **(model_overrides or {})}
    train_kw = {**PRESETS[preset]["train"], **(train_overrides or {})}
    # The recipe keeps the pair only where the start has roles: another start steps aside, unless asked.
    if model_kw.get("attention_init") != "roles" and "keep_roles" not in (train_overrides or {}):
        train_kw.pop("keep_roles", None)
    # An explicit length replaces the preset's length rather than conflicting with it.
    if set(LENGTH_FIELDS) & set(train_overrides or {}):
        for name in LENGTH_FIELDS:
            if name not in (train_overrides or {}):
                train_kw.pop(name, None)
    model_config, train_config = ModelConfig(**model_kw), TrainConfig(**train_kw)
    if train_config.keep_roles:  # refused here, before a tokenizer is trained or a folder touched
        check_keep_roles(model_config)
    return model_config, train_config


def preset_configs(preset: str, **fields: Any) -> tuple[ModelConfig, TrainConfig]:
    """(ModelConfig, TrainConfig) of `preset` with any field of either set by keyword, as `--preset NAME
    --set key=value ...` does on the command line: `preset_configs("toy", max_steps=400, hidden_size=64)`.

    A keyword goes to the config with a field of its name (`vocab_size` is the tokenizer's size to train, a
    TrainConfig field; the model takes the trained tokenizer's size). A length (`max_steps`, `epochs`,
    `time_budget`) replaces the preset's. An unknown name is a NanobertError; a value out of range is
    refused by the config it goes to.
    """
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(fields) - model_fields - train_fields)
    if unknown:
        known = ", ".join(sorted(model_fields | train_fields))
        raise NanobertError(f"unknown config field(s) {', '.join(unknown)}; known fields: {known}")
    train = {k: v for k, v in fields.items() if k in train_fields}
    model = {k: v for k, v in fields.items() if k not in train_fields}
    return build_configs(preset, model, train)


LENGTH_FIELDS = ("max_steps", "epochs", "time_budget")
# A first run with no options: about 15 minutes on a laptop CPU, about 3 minutes on a GPU.
DEFAULT_BUDGET = {"cpu": 900.0, "cuda": 180.0}
# The CPU recipe's four layers pay for their slower steps (1.6x two layers') once a run makes several
# thousand of them: in the time of the AVX2 first run's 3,338 two-layer steps two layers learned more masked
# words, in the time of 12,000 four did (8,000 steps), on two seeds each (record 2026-12-06-first-run-depth).
# The threshold is on the timed estimate, which evaluations and the optimizer trim by about 15% in a run.
DEPTH_STEPS = 5000
# ... and the two layers it then trains, where they make fewer than SHORT_RUN_STEPS, learn more at twice the
# recipe's rate, warmed up over at least 180 steps: at 1,000, 3,000 and the AVX2 first run's 3,338 steps
# more masked words, next sentence no later, STS-B no lower; at the AVX512-BF16 first run's 5,529 mixed
# (2026-12-06-short-run-rate), and at 12,000 next sentence came later (2026-12-06-nsp-onset-by-seed).
SHORT_RUN_RATE = 2e-3
SHORT_RUN_STEPS = 5000
SHORT_RUN_WARMUP_STEPS = 180
# The GPU first run's shapes, largest first: it trains the largest whose step, timed on the device, leaves
# GPU_MIN_STEPS steps in its budget (on the CPU the recipe leaves the frequent-words plateau within ~500
# steps and keeps climbing to a few thousand: records 2026-11-29-plateau-screens, 2026-11-29-step-protocol).
GPU_SHAPES = ("medium", "small", "mini")
GPU_MIN_STEPS = 3000


def new_run_configs(
    preset: str | None,
    data: str | None,
    device_type: str,
    model_overrides: dict[str, Any],
    train_overrides: dict[str, Any],
) -> tuple[ModelConfig, TrainConfig, str, str | None]:
    """The configs of a new run: (model config, train config, preset name, a note for the user or None).

    With no preset: `toy` for the toy corpus, the measured CPU recipe on a CPU (its tiny shape makes the
    most of few cores), its GPU counterpart on a GPU, and a first-run length of `DEFAULT_BUDGET` seconds.
    A run whose length nobody chose gets that budget too. The CPU recipe without `--preset` leaves its depth
    to the steps the run can make (`shallow_below_steps=DEPTH_STEPS`) unless the layers or that threshold
    are set, and a halved depth's short run at `SHORT_RUN_RATE` unless a rate or warm-up is set; the GPU
    recipe leaves its shape to the steps the device makes (`min_planned_steps=GPU_MIN_STEPS`) unless a
    shape field or that threshold is set. The note says what was chosen when the user did not.
    """
    recipe = "wikitext2-cpu" if device_type == "cpu" else "wikitext2-gpu"
    chosen = preset or ("toy" if data == "toy" else recipe)
    train_overrides = dict(train_overrides)
    if not preset and chosen != "toy" and not set(LENGTH_FIELDS) & set(train_overrides):
        train_overrides["time_budget"] = DEFAULT_BUDGET[device_type]
    if chosen == "toy":
        _toy_next_word(train_overrides)
    given = {*model_overrides, *train_overrides}
    if not preset and chosen == "wikitext2-cpu" and not {"num_hidden_layers", "shallow_below_steps"} & given:
        train_overrides["shallow_below_steps"] = DEPTH_STEPS
        if not {"learning_rate", "warmup_ratio"} & given:
            train_overrides.setdefault("shallow_learning_rate", SHORT_RUN_RATE)
    shape_fields = {"num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size"}
    if not preset and chosen == "wikitext2-gpu" and not {*shape_fields, "min_planned_steps"} & given:
        train_overrides["min_planned_steps"] = GPU_MIN_STEPS
    model_config, train_config = build_configs(chosen, model_overrides, train_overrides)
    has_length = any(getattr(train_config, n) is not None for n in LENGTH_FIELDS)
    if not has_length:
        train_config.time_budget = DEFAULT_BUDGET[device_type]
    if preset and has_length:
        return model_config, train_config, chosen, None
    length = (
        f"{train_config.max_steps} steps"
        if train_config.max_steps
        else f"{train_config.epochs} epochs"
        if train_config.epochs
        else f"{train_config.time_budget:.0f} s"
    )
    depth = ""
    if train_config.shallow_below_steps is not None:
        layers = model_config.num_hidden_layers
        depth = f", {layers} layers or {max(1, layers // 2)} by the steps it allows"
        if train_config.shallow_learning_rate is not None:
            depth += f" (those at a rate of {train_config.shallow_learning_rate:g})"
    if train_config.min_planned_steps is not None:
        shapes = " / ".join(GPU_SHAPES)
        depth = f", the largest shape of {shapes} that makes {train_config.min_planned_steps:,} steps in it"
    note = (
        f"preset {chosen!r} on {device_type} for {length}{depth} "
        "(choose with --preset and --max-steps/--epochs/--time-budget)"
    )
    return model_config, train_config, chosen, note


def pair_note(train_config: TrainConfig, attention_init: str, preset: str | None) -> str | None:
    """The log's line on whether the run keeps the pair (`initialization.keep_roles`), or None where
    neither the run nor its recipe speaks of it."""
    if train_config.keep_roles:
        return (
            "the pair is kept (keep_roles): the \"what\" heads' query and key rows and the positions' and "
            'segments\' "what" half get no gradient while pretraining, so those heads keep matching a word '
            "with its copy in the other sentence, what fine-tuning on sentence pairs reads "
            "(--set keep_roles=false trains them)"
        )
    if not PRESETS.get(preset or "", {}).get("train", {}).get("keep_roles"):
        return None
    if attention_init != "roles":
        return f'keep_roles steps aside: attention_init {attention_init!r} has no "what" heads to keep'
    return 'keep_roles=false: the "what" heads train freely and may lose the word match'


def loss_note(train_config: TrainConfig) -> str | None:
    """The log's line on a weighted loss term, or None for BERT's plain MLM + NSP sum."""
    if train_config.nsp_loss_weight == 1.0:
        return None
    return f"the loss is MLM + {train_config.nsp_loss_weight:g} x NSP (nsp_loss_weight; BERT's sum: 1)"


def masking_note(train_config: TrainConfig) -> str | None:
    """The log's line on a masking rate that moves over the run (`final_mask_prob`), or None for one rate."""
    start, end = train_config.mask_prob, train_config.final_mask_prob
    if end is None or end == start:
        return None
    return (
        f"masking {start:.0%} of the words in the first epoch, moving to {end:.0%} by the end of the run "
        "(final_mask_prob: many masked words to learn from early, then the context a single masked word "
        "leaves, which learns more masked words and grammar; --set final_mask_prob=none keeps one rate)"
    )


def training_notes(train_config: TrainConfig, attention_init: str, preset: str | None) -> list[str]:
    """The log's lines on what the run learns beyond BERT's recipe: the pair kept, the loss, the masking."""
    pair = pair_note(train_config, attention_init, preset)
    return [note for note in (pair, loss_note(train_config), masking_note(train_config)) if note]


__all__ = [
    "DEFAULT_BUDGET",
    "DEPTH_STEPS",
    "GPU_MIN_STEPS",
    "GPU_SHAPES",
    "LENGTH_FIELDS",
    "MODEL_PRESETS",
    "PRESETS",
    "SHORT_RUN_RATE",
    "SHORT_RUN_STEPS",
    "SHORT_RUN_WARMUP_STEPS",
    "build_configs",
    "loss_note",
    "masking_note",
    "new_run_configs",
    "pair_note",
    "preset_configs",
    "training_notes",
]
