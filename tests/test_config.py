import dataclasses

import pytest

from nanobert.cli.overrides import parse_overrides
from nanobert.config import FinetuneConfig
from nanobert.errors import NanobertError
from nanobert.pretraining.recipes import PRESETS, build_configs, masking_note, preset_configs, training_notes


def test_overrides_are_typed_and_routed():
    model, train = parse_overrides(
        ["hidden_size=64", "learning_rate=3e-4", "max_steps=none", "whole_word_mask=true", "pre_layer_norm=0"]
    )
    assert model == {"hidden_size": 64, "pre_layer_norm": False}
    assert train == {"learning_rate": 3e-4, "max_steps": None, "whole_word_mask": True}


@pytest.mark.parametrize(
    "pair, message",
    [
        ("nonsense=1", "unknown key"),
        ("hidden_size=big", "expected int"),
        ("learning_rate", "key=value"),
        ("compile=maybe", "expected bool"),
    ],
)
def test_bad_overrides(pair, message):
    with pytest.raises(NanobertError, match=message):
        parse_overrides([pair])


def test_presets_build_and_unknown_preset():
    for name in PRESETS:
        build_configs(name)
    with pytest.raises(NanobertError, match="unknown preset"):
        build_configs("gigantic")


def test_explicit_length_replaces_preset_length():
    _, train = build_configs("toy", train_overrides={"time_budget": 5.0})
    assert train.max_steps is None and train.time_budget == 5.0
    with pytest.raises(NanobertError, match="only one"):
        build_configs("mini", train_overrides={"max_steps": 5, "epochs": 1.0})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"short_seq_len": 128}, "short_seq_len must be at least 8 and below max_seq_len"),
        ({"short_seq_len": 4}, "short_seq_len must be at least 8"),
        ({"short_seq_len": 64, "short_seq_share": 1.0}, r"short_seq_share must be in \[0, 1\)"),
    ],
)
def test_a_length_schedule_must_shorten(overrides, message):
    with pytest.raises(NanobertError, match=message):
        build_configs("wikitext2-cpu", train_overrides=overrides)


def test_the_length_schedule_keeps_tokens_per_step():
    _, train = build_configs("wikitext2-cpu", train_overrides={"short_seq_len": 64, "short_seq_share": 0.5})
    assert [train.epoch_shape(p) for p in (0.0, 0.49, 0.5, 0.9)] == [(64, 64), (64, 64), (128, 32), (128, 32)]
    _, train = build_configs("wikitext2-cpu")
    assert {train.epoch_shape(p) for p in (0.0, 0.5, 0.99)} == {(128, 32)}  # no schedule: one shape


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("adam_beta1", 1.5, r"adam_beta1 must be in \[0, 1\)"),
        ("adam_beta2", -0.1, r"adam_beta2 must be in \[0, 1\)"),
        ("adam_eps", -1.0, "adam_eps must be positive"),
        ("adam_eps", float("nan"), "adam_eps must be positive"),
        ("eval_batch_size", 0, "eval_batch_size must be at least 1"),
        ("tokenizer_min_frequency", -3, "tokenizer_min_frequency must be 0 or more"),
        ("weight_decay", -1.0, "weight_decay must be 0 or more"),
        ("min_lr_ratio", 5.0, r"min_lr_ratio must be in \[0, 1\]"),
        ("grad_clip", -1.0, "grad_clip must be 0"),
        ("early_stopping_patience", 0, "early_stopping_patience must be at least 1"),
        ("learning_rate", float("nan"), "learning_rate must be positive"),
        ("seed", -1, r"seed must be in \[0, 2\*\*63\)"),
        ("seed", 2**64, r"seed must be in \[0, 2\*\*63\)"),
        ("nsp_loss_weight", 0.0, "nsp_loss_weight must be positive and finite"),
        ("nsp_loss_weight", float("inf"), "nsp_loss_weight must be positive and finite"),
    ],
)
def test_optimiser_and_data_settings_are_range_checked(field, value, message):
    """Each would otherwise fail later, inside torch or tokenizers, with a traceback (or train silently
    wrong): AdamW's own checks, range(0, n, 0), a negative count handed to Rust."""
    with pytest.raises(NanobertError, match=message):
        build_configs("toy", train_overrides={field: value})


def test_only_the_objective_with_a_next_sentence_term_weighs_it():
    _, train = build_configs("toy", train_overrides={"nsp_loss_weight": 4.0})
    assert train.nsp_loss_weight == 4.0
    with pytest.raises(NanobertError, match="nsp_loss_weight weighs the next-sentence term"):
        build_configs("toy", train_overrides={"nsp_loss_weight": 4.0, "objective": "causal"})


def test_the_recipes_mask_fewer_words_as_the_run_goes_and_the_log_says_so():
    for preset in ("wikitext2-cpu", "wikitext2-gpu"):
        _, train = build_configs(preset)
        assert (train.mask_prob, train.final_mask_prob) == (0.45, 0.15)
        assert "masking 45% of the words in the first epoch, moving to 15%" in masking_note(train)
        assert masking_note(train) in training_notes(train, "roles", preset)
    _, one_rate = build_configs("wikitext2-cpu", train_overrides={"final_mask_prob": None})
    assert masking_note(one_rate) is None and one_rate.epoch_mask_prob(0.9) == 0.45
    assert masking_note(dataclasses.replace(one_rate, final_mask_prob=0.45)) is None
    assert parse_overrides(["final_mask_prob=none"])[1] == {"final_mask_prob": None}


def test_a_nan_model_setting_is_refused():
    with pytest.raises(NanobertError, match="initializer_range"):
        build_configs("toy", model_overrides={"initializer_range": float("nan")})


def test_a_fine_tuning_seed_is_range_checked():
    with pytest.raises(NanobertError, match="seed must be in"):
        FinetuneConfig(seed=-1)


def test_preset_configs_sets_fields_of_either_config_by_keyword():
    model, train = preset_configs("toy", max_steps=12, hidden_size=64, num_attention_heads=4, vocab_size=150)
    assert (model.hidden_size, model.num_attention_heads, model.num_hidden_layers) == (64, 4, 2)
    assert (train.max_steps, train.vocab_size, train.batch_size) == (12, 150, 32)  # the rest: the preset's
    _, train = preset_configs("toy", time_budget=5.0)  # a length replaces the preset's 1,000 steps
    assert train.time_budget == 5.0 and train.max_steps is None
    with pytest.raises(NanobertError, match="unknown config field.*hidden_sise"):
        preset_configs("toy", hidden_sise=64)


def test_the_first_run_on_a_gpu_leaves_its_shape_to_the_steps_the_device_makes():
    from nanobert.pretraining.recipes import DEFAULT_BUDGET, GPU_MIN_STEPS, GPU_SHAPES, new_run_configs

    model, train, chosen, note = new_run_configs(None, None, "cuda", {}, {})
    assert (chosen, train.min_planned_steps, train.time_budget) == ("wikitext2-gpu", GPU_MIN_STEPS, 180.0)
    assert train.time_budget == DEFAULT_BUDGET["cuda"] and train.batch_size == 128
    assert f"the largest shape of {' / '.join(GPU_SHAPES)} that makes {GPU_MIN_STEPS:,} steps" in note
    assert model.position_embedding_init == "sinusoidal" and model.hidden_dropout_prob == 0.0
    # a shape field, the threshold, a preset by name, or a CPU: the shape is what they say
    for preset, device, model_over, train_over in [
        (None, "cuda", {"hidden_size": 256}, {}),
        (None, "cuda", {"num_hidden_layers": 2}, {}),
        ("wikitext2-gpu", "cuda", {}, {}),
        (None, "cpu", {}, {}),
    ]:
        _, train, _, note = new_run_configs(preset, None, device, model_over, train_over)
        assert train.min_planned_steps is None and "largest shape" not in (note or "")
    _, train, _, _ = new_run_configs(None, None, "cuda", {}, {"min_planned_steps": 50})
    assert train.min_planned_steps == 50
    with pytest.raises(NanobertError, match="min_planned_steps must be at least 1"):
        build_configs("wikitext2-gpu", train_overrides={"min_planned_steps": 0})


def test_the_first_run_leaves_its_depth_to_the_steps_it_can_make():
    from nanobert.pretraining.recipes import DEPTH_STEPS, new_run_configs

    model, train, chosen, note = new_run_configs(None, None, "cpu", {}, {})
    assert (chosen, model.num_hidden_layers, train.shallow_below_steps) == ("wikitext2-cpu", 4, DEPTH_STEPS)
    assert "4 layers or 2 by the steps it allows" in note
    _, train, _, _ = new_run_configs(None, None, "cpu", {}, {"time_budget": 1800.0})
    assert train.shallow_below_steps == DEPTH_STEPS  # a longer first run still chooses
    # the preset asked for by name, a depth or a threshold set, the toy corpus and a GPU keep what they say
    for preset, data, device, model_over, train_over in [
        ("wikitext2-cpu", None, "cpu", {}, {}),
        (None, None, "cpu", {"num_hidden_layers": 4}, {}),
        (None, "toy", "cpu", {}, {}),
        (None, None, "cuda", {}, {}),
    ]:
        _, train, _, note = new_run_configs(preset, data, device, model_over, train_over)
        assert train.shallow_below_steps is None and "by the steps" not in (note or "")
    _, train, _, _ = new_run_configs(None, None, "cpu", {}, {"shallow_below_steps": 700})
    assert train.shallow_below_steps == 700
    with pytest.raises(NanobertError, match="shallow_below_steps must be at least 1"):
        build_configs("wikitext2-cpu", train_overrides={"shallow_below_steps": 0})


def test_the_first_run_trains_a_halved_depth_at_the_short_run_rate_unless_a_rate_is_set():
    from nanobert.pretraining.recipes import SHORT_RUN_RATE, new_run_configs

    _, train, _, note = new_run_configs(None, None, "cpu", {}, {"max_steps": 1000})
    assert (train.shallow_learning_rate, train.learning_rate) == (SHORT_RUN_RATE, 1e-3)
    assert f"(those at a rate of {SHORT_RUN_RATE:g})" in note
    # a rate or a warm-up set, or the rate set for the halved depth, is what the run trains at
    for given, expected in [
        ({"learning_rate": 5e-4}, None),
        ({"warmup_ratio": 0.1}, None),
        ({"shallow_learning_rate": 3e-3}, 3e-3),
    ]:
        _, train, _, note = new_run_configs(None, None, "cpu", {}, given)
        assert train.shallow_learning_rate == expected and ("those at a rate" in note) == (
            expected is not None
        )
    _, train, _, _ = new_run_configs("wikitext2-cpu", None, "cpu", {}, {})
    assert train.shallow_learning_rate is None
    for bad in (0.0, -1e-3, float("nan"), float("inf")):
        with pytest.raises(NanobertError, match="shallow_learning_rate must be positive and finite, or None"):
            build_configs("wikitext2-cpu", train_overrides={"shallow_learning_rate": bad})


def test_the_toy_corpus_holds_the_peak_rate_except_for_the_hybrid():
    from nanobert.pretraining.recipes import new_run_configs

    for preset, objective, decay_ratio in [
        (None, "mlm_nsp", 0.3),
        (None, "causal", 0.3),
        (None, "hybrid", 1.0),
        ("toy", "hybrid", 1.0),
    ]:
        _, train, chosen, _ = new_run_configs(preset, "toy", "cpu", {}, {"objective": objective})
        assert (chosen, train.objective, train.decay_ratio) == ("toy", objective, decay_ratio)
    _, train, _, _ = new_run_configs(None, "toy", "cpu", {}, {"objective": "hybrid", "decay_ratio": 0.5})
    assert train.decay_ratio == 0.5  # what the user sets wins
    _, train, _, _ = new_run_configs(None, None, "cpu", {}, {"objective": "hybrid"})
    assert train.decay_ratio == 0.3  # the recipes hold it for every objective


def test_train_config_comes_in_sections_by_purpose():
    """TrainConfig's fields are SECTIONS' fields in SECTIONS' order, each section opened in the source by a
    comment naming it, so a reader finds a setting by what it is for; every field keeps its --set name."""
    import dataclasses
    import inspect

    from nanobert.config import SECTIONS, TrainConfig
    from nanobert.config import train as train_module

    names = [f.name for f in dataclasses.fields(TrainConfig)]
    assert names == [name for fields in SECTIONS.values() for name in fields]
    source = inspect.getsource(train_module.TrainConfig).splitlines()
    for section, fields in SECTIONS.items():
        opening = next(i for i, line in enumerate(source) if line.strip().startswith(f"{fields[0]}:"))
        above = [line.strip() for line in source[:opening] if line.strip().startswith("# ")]
        assert any(line.startswith(f"# {section}") for line in above[-4:]), section
