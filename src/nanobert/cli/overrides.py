"""`--set key=value`: any field of ModelConfig or TrainConfig, the value parsed by the field's declared
type, so that an unknown key or a wrong type fails in one line before any work.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from nanobert.config import ModelConfig, TrainConfig
from nanobert.errors import NanobertError


def _parse_value(raw: str, annotation: Any, key: str) -> Any:
    """Parse `raw` as a value of the field type `annotation` (int, float, bool, str, or X | None)."""
    if isinstance(annotation, str):  # postponed annotations: resolve the few types used above
        annotation = eval(annotation, {"Any": Any}, {})  # noqa: S307 - our own annotations only
    args = typing.get_args(annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        if raw.lower() in ("none", "null"):
            return None
        inner = [a for a in args if a is not type(None)]
        return _parse_value(raw, inner[0], key)
    try:
        if annotation is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if annotation is int:
            return int(raw)
        if annotation is float:
            return float(raw)
    except ValueError:
        raise NanobertError(f"--set {key}={raw}: expected {annotation.__name__}, got {raw!r}") from None
    return raw


def parse_overrides(pairs: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse `key=value` strings into (model overrides, train overrides), typed by the fields they name."""
    model_fields = {f.name: f.type for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name: f.type for f in dataclasses.fields(TrainConfig)}
    model_over: dict[str, Any] = {}
    train_over: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise NanobertError(f"--set {pair!r}: expected key=value, e.g. --set learning_rate=3e-4")
        # vocab_size is both a tokenizer (train) setting and a model field: it means the tokenizer size,
        # and the model follows the trained tokenizer.
        if key in train_fields:
            train_over[key] = _parse_value(raw, train_fields[key], key)
        elif key in model_fields:
            model_over[key] = _parse_value(raw, model_fields[key], key)
        else:
            known = ", ".join(sorted(set(model_fields) | set(train_fields)))
            raise NanobertError(f"--set: unknown key {key!r}; known keys: {known}")
    return model_over, train_over


__all__ = ["parse_overrides"]
