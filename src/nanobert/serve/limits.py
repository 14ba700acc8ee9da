"""The page's size limits: what one request may ask of `nanobert serve`, checked before the model runs.

A question fits in 512 word pieces, a few kilobytes; each limit keeps one request's work and its answer small
(a fill-mask answer grows with masks x top_k x text length: 80 masks with an unbounded top_k once took
gigabytes), and MAX_WAITING bounds how many wait for the model at once. docs/page.md states them.
"""

from __future__ import annotations

import json
import math
from typing import Any

from nanobert.errors import NanobertError
from nanobert.use.inference import InferenceModel

# The fields the page sends, by type; anything else in a body is ignored. Whole numbers: (least, most).
TEXT_FIELDS = ("text", "text_a", "text_b", "prompt", "question", "context", "text_pair", "rule")

# A question fits in 512 word pieces, a few kilobytes; a bigger body is refused before it is read or parsed.
MAX_BODY_BYTES = 1 << 20

# What one request may ask for, so that its work and its answer stay small (a fill-mask answer grows with
# masks x top_k x text length; 80 masks with an unbounded top_k once took gigabytes). In the README.
MAX_TEXT_CHARS = 20_000  # per text field; the model reads at most 512 word pieces of it anyway

MAX_MASKS = 16  # [MASK]s in one text

WHOLE_FIELDS = {"top_k": (1, 20), "max_new_tokens": (1, 200), "seed": (0, 2**63 - 1)}

MAX_ATTENTION_CELLS = 4_000_000  # layers x heads x tokens^2 of one attention answer (some 30 MB of JSON)

MAX_WAITING = 4  # model requests queued behind the one being answered; more are told the page is busy


class Busy(NanobertError):
    """Too many model requests at once: HTTP 503, try again."""


def _shown(value: Any) -> str:
    """A request value as the error message quotes it: JSON, cut short."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def checked_body(body: Any) -> dict[str, Any]:
    """A request body with the fields the routes read type-checked and within the page's limits (texts are
    strings of at most MAX_TEXT_CHARS with at most MAX_MASKS [MASK]s; top_k, max_new_tokens and seed whole
    numbers in range; temperature a finite number >= 0); null counts as absent.
    NanobertError names the first wrong field, so the page can show it."""
    if not isinstance(body, dict):
        raise NanobertError("the request body must be a JSON object")
    body = {k: v for k, v in body.items() if v is not None}
    for key in TEXT_FIELDS:
        if key in body and not isinstance(body[key], str):
            raise NanobertError(f"{key} must be a text (a JSON string), not {_shown(body[key])}")
        if len(body.get(key, "")) > MAX_TEXT_CHARS:
            raise NanobertError(
                f"{key} has {len(body[key])} characters; the page takes {MAX_TEXT_CHARS} at most"
            )
        if body.get(key, "").upper().count("[MASK]") > MAX_MASKS:
            raise NanobertError(
                f"{key} has more than {MAX_MASKS} [MASK]s; the page fills {MAX_MASKS} at most"
            )
    for key, (least, most) in WHOLE_FIELDS.items():
        value = body.get(key)
        if value is None:
            continue
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or value < least or (most is not None and value > most):
            within = f"from {least} to {most}"
            raise NanobertError(f"{key} must be a whole number {within}, not {_shown(value)}")
    temperature = body.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise NanobertError(f"temperature must be a number of at least 0, not {_shown(temperature)}")
    return body


def check_attention_size(model: InferenceModel, a: str, b: str | None) -> None:
    """NanobertError when the attention maps of `a` (and `b`) would be more than MAX_ATTENTION_CELLS numbers
    (they grow with layers x heads x tokens^2: a long text through a base-sized model is hundreds of MB)."""
    config, n = model.model.config, len(model.encode(a, b)["input_ids"])
    cells = config.num_hidden_layers * config.num_attention_heads * n * n
    if cells > MAX_ATTENTION_CELLS:
        most = int((MAX_ATTENTION_CELLS / (config.num_hidden_layers * config.num_attention_heads)) ** 0.5)
        raise NanobertError(
            f"the attention maps of {n} word pieces are {cells:,} numbers, more than the page sends "
            f"({MAX_ATTENTION_CELLS:,}); shorten the text to about {most} word pieces"
        )


__all__ = [
    "MAX_ATTENTION_CELLS",
    "MAX_BODY_BYTES",
    "MAX_MASKS",
    "MAX_TEXT_CHARS",
    "MAX_WAITING",
    "WHOLE_FIELDS",
    "Busy",
    "check_attention_size",
    "checked_body",
]
