import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

from nanobert.checkpoints.checkpoint import (
    load_pretraining_checkpoint,
    load_train_config,
    load_trainer_state,
    read_config,
    save_checkpoint,
)
from nanobert.config import TrainConfig, config_from_dict
from nanobert.errors import NanobertError
from nanobert.files import being_replaced, write_atomically
from nanobert.model import BertForPreTraining


def test_round_trip(tmp_path, tiny_config):
    model = BertForPreTraining(tiny_config)
    save_checkpoint(
        tmp_path / "ck",
        model,
        TrainConfig(),
        None,
        trainer_state={"step": 3, "t": torch.ones(2)},
        extra={"data": {"data": "toy"}},
    )
    loaded, config = load_pretraining_checkpoint(tmp_path / "ck")
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)
    assert config["data"] == {"data": "toy"} and config["train"]["seed"] == 1337
    assert load_trainer_state(tmp_path / "ck")["step"] == 3


def test_interrupted_write_keeps_previous(tmp_path, tiny_config):
    model = BertForPreTraining(tiny_config)
    save_checkpoint(tmp_path / "ck", model, None, None)

    def crash(tmp):
        (tmp / "config.json").write_text("{}")
        raise KeyboardInterrupt  # dies half way through writing

    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "ck", crash)
    load_pretraining_checkpoint(tmp_path / "ck")  # the previous one is intact


def dead_pid() -> int:
    """The PID of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_crash_between_renames_is_recovered(tmp_path, tiny_config):
    model = BertForPreTraining(tiny_config)
    save_checkpoint(tmp_path / "ck", model, None, None)
    old = tmp_path / f".ck.old-{dead_pid()}"
    (tmp_path / "ck").rename(old)  # as if killed after the first rename
    load_pretraining_checkpoint(tmp_path / "ck")
    assert not old.exists()


def test_crash_after_both_renames_leaves_the_new_checkpoint(tmp_path, tiny_config):
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), None, None)
    old = tmp_path / f".ck.old-{dead_pid()}"
    shutil.copytree(tmp_path / "ck", old)  # killed before deleting the old one
    assert not being_replaced(tmp_path / "ck")  # a dead writer's leftover: readers need not wait for it
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), TrainConfig(), None)
    assert not old.exists() and read_config(tmp_path / "ck")["train"] is not None


def test_a_users_dot_old_directory_is_never_touched(tmp_path, tiny_config):
    """`NAME.old` may be the user's own copy: neither reading nor saving NAME may rename or delete it."""
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), None, None)
    shutil.copytree(tmp_path / "ck", tmp_path / "ck.old")
    (tmp_path / "ck.old" / "notes.txt").write_text("mine")
    load_pretraining_checkpoint(tmp_path / "ck")
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), TrainConfig(), None)
    assert (tmp_path / "ck.old" / "notes.txt").read_text() == "mine"
    shutil.copytree(tmp_path / "ck.old", tmp_path / "lone.old")  # only NAME.old: no checkpoint NAME appears
    with pytest.raises(NanobertError, match="does not exist"):
        read_config(tmp_path / "lone")
    assert (tmp_path / "lone.old").is_dir() and not (tmp_path / "lone").exists()


def test_corrupt_and_missing(tmp_path, tiny_config):
    with pytest.raises(NanobertError, match="does not exist"):
        read_config(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NanobertError, match="not a nanobert checkpoint"):
        read_config(tmp_path / "empty")
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), None, None)
    weights = tmp_path / "ck" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    with pytest.raises(NanobertError, match="corrupt or truncated"):
        load_pretraining_checkpoint(tmp_path / "ck")
    (tmp_path / "ck" / "config.json").write_text("{not json")
    with pytest.raises(NanobertError, match="not a nanobert checkpoint config"):
        read_config(tmp_path / "ck")
    with pytest.raises(NanobertError, match="trainer_state"):
        load_trainer_state(tmp_path / "ck")


def test_config_json_is_readable(tmp_path, tiny_config):
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), TrainConfig(), None)
    config = json.loads((tmp_path / "ck" / "config.json").read_text())
    assert config["model"]["hidden_size"] == 32 and config["kind"] == "pretraining"


def test_one_loader_per_kind_refuses_the_other_kinds(tmp_path, tiny_config):
    from nanobert.checkpoints.checkpoint import load_finetuned
    from nanobert.checkpoints.kinds import SEQUENCE_CLASSIFICATION
    from nanobert.model import BertForSequenceClassification

    save_checkpoint(tmp_path / "pre", BertForPreTraining(tiny_config), TrainConfig(), None)
    classifier = BertForSequenceClassification(tiny_config, 3)
    extra = {"num_labels": 3, "task": "classification", "labels": ["a", "b", "c"]}
    save_checkpoint(
        tmp_path / "ft" / "best", classifier, None, None, extra=extra, kind=SEQUENCE_CLASSIFICATION
    )
    with pytest.raises(NanobertError, match="holds a sequence_classification checkpoint.*nanobert predict"):
        load_pretraining_checkpoint(tmp_path / "ft" / "best")
    with pytest.raises(NanobertError, match="holds a pretraining checkpoint, not a fine-tuned model"):
        load_finetuned(tmp_path / "pre")


def test_a_reader_leaves_a_live_writers_swap_alone(tmp_path, tiny_config):
    """Between the writer's two renames only its .NAME.old-PID exists; a reader (`nanobert serve` watching a
    run) must not rename it back while the writer still runs, or the writer's second rename fails."""
    ck = tmp_path / "ck"
    save_checkpoint(ck, BertForPreTraining(tiny_config), TrainConfig(), None)
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    old = tmp_path / f".ck.old-{writer.pid}"
    try:
        ck.rename(old)  # the writer's first rename
        assert being_replaced(ck)
        with pytest.raises(NanobertError):
            read_config(ck)
        assert old.is_dir() and not ck.exists()
    finally:
        writer.kill()
        writer.wait()
    read_config(ck)  # the writer died mid-swap: now the reader puts the old checkpoint back
    assert ck.is_dir() and not old.exists() and not being_replaced(ck)


def test_a_run_directory_given_as_a_checkpoint_names_its_checkpoints(tmp_path, tiny_config):
    """A fine-tuning run has only best/; the error must point to it, not just say config.json is missing."""
    save_checkpoint(tmp_path / "run" / "best", BertForPreTraining(tiny_config), None, None)
    with pytest.raises(NanobertError, match=r"run directory: pass .*run/best\)"):
        read_config(tmp_path / "run")


@pytest.mark.parametrize(
    "edit, needle",
    [
        (lambda c: c["model"].update(hidden_size="128"), "ModelConfig.hidden_size is '128', not int"),
        (lambda c: c["model"].update(num_hidden_layers=2.5), "ModelConfig.num_hidden_layers is 2.5"),
        (lambda c: c.update(model=None), "section is NoneType, not an object"),
        (lambda c: c.update(kind=["x"]), "kind is a name"),
    ],
)
def test_a_damaged_config_json_is_one_error_not_a_traceback(tmp_path, tiny_config, edit, needle):
    """Values of the wrong type (an edited config.json) are named before torch or a dataclass check meets
    them; a whole number written as 128.0 still reads as 128."""
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), TrainConfig(), None)
    path = tmp_path / "ck" / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    with pytest.raises(NanobertError, match=re.escape(needle)):
        load_pretraining_checkpoint(tmp_path / "ck")


def test_damaged_train_and_data_sections(tmp_path, tiny_config):
    from nanobert.data.sources import DataSources

    with pytest.raises(NanobertError, match="TrainConfig.batch_size is '32', not int"):
        load_train_config({"train": {"batch_size": "32"}})
    with pytest.raises(NanobertError, match="section is list"):
        load_train_config({"train": [1]})
    with pytest.raises(NanobertError, match="section is str"):
        config_from_dict(DataSources, "toy")
    assert load_train_config({"train": {"batch_size": 32.0, "max_steps": None}}).batch_size == 32


def test_weights_that_do_not_fit_are_named(tmp_path, tiny_config):
    save_checkpoint(tmp_path / "ck", BertForPreTraining(tiny_config), None, None)
    path = tmp_path / "ck" / "config.json"
    config = json.loads(path.read_text())
    config["model"]["intermediate_size"] += 4
    path.write_text(json.dumps(config))
    with pytest.raises(
        NanobertError, match=r"feed_forward\.intermediate\.weight is \(\d+, \d+\), the config needs"
    ):
        load_pretraining_checkpoint(tmp_path / "ck")


def test_a_tokenizer_json_of_another_model_is_refused_smaller_or_larger(tmp_path, tiny_config):
    """A tokenizer.json copied from another run numbers the words another way; a larger one was refused, a
    smaller one loaded silently and gave wrong answers."""
    import dataclasses

    from nanobert.tokenizer import save_tokenizer, train_tokenizer
    from nanobert.use.inference import load

    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
    texts = [" ".join(words[i:] + words[:i]) for i in range(len(words))] * 3
    own = train_tokenizer(texts, vocab_size=80, min_frequency=1)
    config = dataclasses.replace(tiny_config, vocab_size=own.get_vocab_size())
    checkpoint = save_checkpoint(tmp_path / "ck", BertForPreTraining(config), None, own)
    load(checkpoint)  # its own tokenizer fits
    for size in (40, 150):
        other = train_tokenizer(texts + ["november oscar papa quebec romeo sierra tango"] * 3, size, 1)
        assert other.get_vocab_size() != own.get_vocab_size()
        save_tokenizer(other, checkpoint)
        with pytest.raises(
            NanobertError, match=r"tokenizer.json has \d+ tokens but the model has \d+: it belongs"
        ):
            load(checkpoint)
