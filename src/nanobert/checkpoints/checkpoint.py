"""A checkpoint is a directory: config.json, model.safetensors, the tokenizer files, and trainer_state.pt.

Writes are atomic at the directory level (`files.write_atomically`): everything goes to a sibling temporary
directory, which is then renamed into place, and an interrupted replacement is recovered by the next save or
load, so an interrupted save never destroys the previous good checkpoint. Weights are read through
safetensors and trainer state with `torch.load(weights_only=True)`: nothing in a checkpoint is unpickled.
config.json names the checkpoint's kind (kinds.py), which decides the model class its weights rebuild.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from nanobert.causal_model import BertLMHeadModel
from nanobert.checkpoints.kinds import (
    CAUSAL_LM,
    KINDS,
    LANGUAGE_MODELS,
    PRETRAINING,
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    Kind,
    checkpoint_kind,
    wrong_kind,
)
from nanobert.config import ModelConfig, TrainConfig, config_from_dict, config_to_dict
from nanobert.errors import NanobertError, raise_user_os_error
from nanobert.files import recover, write_atomically
from nanobert.model import BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification
from nanobert.tokenizer import load_tokenizer, save_tokenizer

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
TRAINER_STATE_NAME = "trainer_state.pt"


def _test_pause(directory: Path) -> None:
    """Fault-injection hook for the tests: NANOBERT_TEST_SLOW_SAVE=NAME:SECONDS sleeps half way through
    writing a checkpoint named NAME that replaces an existing one, so a test can kill -9 the writer there."""
    spec = os.environ.get("NANOBERT_TEST_SLOW_SAVE")
    if spec:
        name, _, seconds = spec.rpartition(":")
        if name == directory.name and directory.exists():
            time.sleep(float(seconds))


def save_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    train_config: TrainConfig | None,
    tokenizer: Any | None,
    trainer_state: dict | None = None,
    extra: dict | None = None,
    kind: str = PRETRAINING,
) -> Path:
    """Save an (unwrapped) model with its configs, tokenizer and optional trainer state.

    `extra` lands in config.json (e.g. the data sources, the label mapping of a fine-tuned model).
    """
    config = {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "model": config_to_dict(model.config),
        "train": config_to_dict(train_config) if train_config is not None else None,
        **(extra or {}),
    }
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}

    def write(tmp: Path) -> None:
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
        _test_pause(Path(directory))
        save_file(state, str(tmp / WEIGHTS_NAME), metadata={"format": "pt"})
        if tokenizer is not None:
            save_tokenizer(tokenizer, tmp)
        if trainer_state is not None:  # through a Python file, so that a full disk raises its OSError
            with open(tmp / TRAINER_STATE_NAME, "wb") as f:
                torch.save(trainer_state, f)

    return write_atomically(directory, write)


def read_config(directory: str | Path) -> dict:
    """config.json of a checkpoint directory, with one-line errors for anything that is not a checkpoint."""
    directory = Path(directory)
    recover(directory)
    if directory.is_file():
        raise NanobertError(f"checkpoint {directory} is a file; pass a checkpoint directory such as RUN/best")
    if not directory.is_dir():
        raise NanobertError(f"checkpoint {directory} does not exist (expected a directory such as RUN/best)")
    path = directory / CONFIG_NAME
    if not path.is_file():
        inside = [n for n in ("best", "last") if (directory / n / CONFIG_NAME).is_file()]
        hint = (
            f" (it is a run directory: pass {' or '.join(f'{directory}/{n}' for n in inside)})"
            if inside
            else ""
        )
        raise NanobertError(f"{directory} is not a nanobert checkpoint: it has no {CONFIG_NAME}{hint}")
    try:
        config = json.loads(path.read_text())
        config["model"]
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        raise NanobertError(
            f"{path} is not a nanobert checkpoint config (corrupt or from another tool)"
        ) from None
    return config


def load_state_dict(directory: str | Path) -> dict[str, torch.Tensor]:
    """The weights of a checkpoint, through safetensors; a truncated or corrupt file is a one-line error."""
    path = Path(directory) / WEIGHTS_NAME
    if not path.is_file():
        raise NanobertError(f"checkpoint {directory} has no {WEIGHTS_NAME}")
    try:
        with open(path, "rb"):  # unreadable is not corrupt: say which (safetensors calls it "No such file")
            pass
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise_user_os_error(e, path)
        raise NanobertError(
            f"{path} is corrupt or truncated ({str(e).splitlines()[0]}); "
            "use another checkpoint (e.g. best/ instead of last/)"
        ) from None


def _model_config(directory: Path | str, config: dict) -> ModelConfig:
    try:
        return config_from_dict(ModelConfig, config["model"])
    except (TypeError, ValueError) as e:
        raise NanobertError(f"{directory}/{CONFIG_NAME}: invalid model config ({e})") from None


def _fill(model: torch.nn.Module, directory: Path | str) -> torch.nn.Module:
    """Load the checkpoint's weights into `model`; weights that do not fit are a one-line error."""
    state = load_state_dict(directory)
    expected = model.state_dict()
    problems = [f"missing {k}" for k in expected if k not in state]
    problems += [f"unexpected {k}" for k in state if k not in expected]
    problems += [
        f"{k} is {tuple(v.shape)}, the config needs {tuple(expected[k].shape)}"
        for k, v in state.items()
        if k in expected and v.shape != expected[k].shape
    ]
    if problems:  # torch's own message puts the details on later lines; name the first few on one
        more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise NanobertError(
            f"{directory}: weights do not match its config.json ({'; '.join(problems[:3])}{more})"
        )
    model.load_state_dict(state)
    return model


def _load(directory: str | Path, map_location, kind: Kind) -> tuple[Any, dict]:
    """A checkpoint of `kind` rebuilt as its model class (eval mode), with its config; else a one-line
    error."""
    config = read_config(directory)
    found = checkpoint_kind(config)
    if found != kind.name:
        raise wrong_kind(directory, found, kind.what)
    model = _fill(kind.model(_model_config(directory, config)), directory)
    return model.to(map_location).eval(), config


def load_pretraining_checkpoint(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[BertForPreTraining, dict]:
    """Rebuild BertForPreTraining from a checkpoint directory. Returns (model in eval mode, config dict)."""
    return _load(directory, map_location, KINDS[PRETRAINING])


def load_causal_lm(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[BertLMHeadModel, dict]:
    """Rebuild a causal BertLMHeadModel from a checkpoint directory. Returns (model in eval mode, config)."""
    return _load(directory, map_location, KINDS[CAUSAL_LM])


def load_language_model(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[BertForPreTraining | BertLMHeadModel, dict]:
    """A pretrained language model of any objective (the MLM + NSP model, the causal one), by its kind; any
    other kind is refused as not being a pretraining checkpoint."""
    kind = checkpoint_kind(read_config(directory))
    return _load(directory, map_location, KINDS[kind if kind in LANGUAGE_MODELS else PRETRAINING])


def load_qa(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[BertForQuestionAnswering, Any, dict]:
    """A fine-tuned question-answering model (eval mode), its tokenizer and its config.json.

    `directory` is a checkpoint (RUN/best) or a fine-tuning run directory holding best/.
    """
    directory = _best_of_run(Path(directory))
    model, config = _load(directory, map_location, KINDS[QUESTION_ANSWERING])
    return model, checkpoint_tokenizer(directory, model, config), config


def checkpoint_tokenizer(directory: str | Path, model: torch.nn.Module, config: dict) -> Any:
    """The tokenizer saved with a checkpoint, refused unless its vocabulary is the model's: a larger one has
    ids the model lacks, a smaller one (a tokenizer.json copied from another run) numbers the words another
    way, and both give wrong answers. Only an imported transformers model may have more rows than its
    tokenizer has words (some pad their vocabulary)."""
    tokenizer = load_tokenizer(directory)
    words, rows = tokenizer.get_vocab_size(), model.config.vocab_size
    if words > rows or (words < rows and "imported_from" not in config):
        raise NanobertError(
            f"{Path(directory) / 'tokenizer.json'} has {words} tokens but the model has {rows}: it belongs "
            "to another model (copied from another run?); use the checkpoint's own tokenizer files"
        )
    return tokenizer


def _best_of_run(directory: Path) -> Path:
    """A run directory stands for its best/ checkpoint."""
    if not (directory / CONFIG_NAME).is_file() and (directory / "best" / CONFIG_NAME).is_file():
        return directory / "best"
    return directory


def load_finetuned(
    directory: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[BertForSequenceClassification, Any, dict]:
    """A fine-tuned classifier (eval mode), its tokenizer and its config.json (labels, task, columns).

    `directory` is a checkpoint (RUN/best) or a fine-tuning run directory holding best/.
    """
    directory = _best_of_run(Path(directory))
    config = read_config(directory)
    kind = checkpoint_kind(config)
    if kind != SEQUENCE_CLASSIFICATION:
        raise wrong_kind(directory, kind, KINDS[SEQUENCE_CLASSIFICATION].what)
    try:
        num_labels, task = int(config["num_labels"]), config["task"]
        pooling = config.get("pooling") or "cls"  # models fine-tuned before the choice existed read [CLS]
        model = BertForSequenceClassification(_model_config(directory, config), num_labels, task, pooling)
        problem = _finetuned_problem(config, num_labels, model.config.max_position_embeddings)
    except (KeyError, TypeError, ValueError) as e:
        problem = str(e)
    if problem:
        raise NanobertError(f"{directory}/{CONFIG_NAME}: invalid fine-tuned model config ({problem})")
    model = _fill(model, directory)
    return model.to(map_location).eval(), checkpoint_tokenizer(directory, model, config), config


def _finetuned_problem(config: dict, num_labels: int, positions: int) -> str | None:
    """What is wrong with the fields `predict` reads from a fine-tuned config.json, if anything."""
    labels, columns, length = config.get("labels"), config.get("columns"), config.get("max_seq_len", 128)
    named = isinstance(labels, list) and len(labels) == num_labels
    named = named and all(isinstance(x, str | int | float) for x in labels)
    if config.get("task") != "regression" and not named:  # regression predicts a score, no names
        return f"labels must list {num_labels} names, got {labels!r}"
    if not isinstance(columns, dict) or not isinstance(columns.get("text"), str | int):
        return f"columns must name the text column, got {columns!r}"
    if type(length) is not int or not 3 <= length <= positions:
        return f"max_seq_len must be a whole number from 3 to {positions}, got {length!r}"
    return None


def load_train_config(config: dict) -> TrainConfig:
    return config_from_dict(TrainConfig, config.get("train") or {})


def load_trainer_state(directory: str | Path) -> dict:
    """trainer_state.pt, loaded without unpickling arbitrary objects (weights_only=True)."""
    path = Path(directory) / TRAINER_STATE_NAME
    if not path.is_file():
        raise NanobertError(
            f"{directory} has no {TRAINER_STATE_NAME}, so it cannot be resumed "
            "(resume from RUN/last, which always has one)"
        )
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the same thing to the user
        raise NanobertError(
            f"{path} is corrupt ({type(e).__name__}); resume from another checkpoint"
        ) from None


def refuse_going_back(resume: Path, last: Path) -> None:
    """Continuing an earlier checkpoint (best/) in its run's folder would replace the later last/: refused."""
    if resume.resolve() == last.resolve() or not (last / CONFIG_NAME).is_file():
        return
    step, later = read_config(resume).get("step", 0), read_config(last).get("step", 0)
    if later > step:
        raise NanobertError(
            f"{resume} is step {step} of a run that went on to step {later} ({last}); continuing it there "
            "would replace last/ and the later records; pass --out NEW to branch off, or --overwrite to do so"
        )


__all__ = [
    "refuse_going_back",
    "checkpoint_tokenizer",
    "load_causal_lm",
    "load_finetuned",
    "load_language_model",
    "load_pretraining_checkpoint",
    "load_qa",
    "load_state_dict",
    "load_train_config",
    "load_trainer_state",
    "read_config",
    "save_checkpoint",
]
