"""What every config shares: the range checks behind each config's one-line errors, and config.json's
round trip (a plain dict out, the typed dataclass back, a damaged value refused)."""

from __future__ import annotations

import dataclasses
from typing import Any

from nanobert.errors import NanobertError


def check_fields(
    what: str, cfg: Any, at_least_one: tuple[str, ...], checks: list[tuple[str, bool, str]]
) -> None:
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


__all__ = ["PRECISIONS", "check_fields", "config_from_dict", "config_to_dict"]
