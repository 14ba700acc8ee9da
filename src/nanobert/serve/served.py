"""What `nanobert serve PATH` serves: a checkpoint, or a run directory and its newest checkpoint, answering
the page's requests with the library calls the CLI makes.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from nanobert.checkpoints.checkpoint import CONFIG_NAME, load_finetuned, read_config
from nanobert.checkpoints.kinds import KINDS, checkpoint_kind, wrong_kind
from nanobert.checkpoints.run_files import METRICS_NAME, SUMMARY_NAME, read_summary, scan_records
from nanobert.errors import NanobertError
from nanobert.files import being_replaced
from nanobert.serve.limits import MAX_WAITING, Busy, check_attention_size, checked_body
from nanobert.tokenizer import encode_pairs
from nanobert.use.answers import load_qa_model
from nanobert.use.classifier import classify
from nanobert.use.explain import format_trace
from nanobert.use.inference import InferenceModel, load, require_words
from nanobert.use.scoring import score_report

PANELS = {name: list(kind.panels) for name, kind in KINDS.items()}  # the panels that fit each kind

# What loads a checkpoint for the page, by the interface that answers its kind (kinds.Kind.answered_by)
LOADERS = {"language_model": load, "classifier": load_finetuned, "qa": load_qa_model}

ROUTES = {route for panels in PANELS.values() for route in panels}  # POST /api/ROUTE

GET_ROUTES = ("info", "run")  # GET /api/ROUTE: what the page shows besides the model's answers

# Routes whose question has a sentence B; attention and explain take one if given, the others none.
NEEDS_PAIR = {"nsp", "similarity"}

TAKES_PAIR = NEEDS_PAIR | {"attention", "explain", "score"}


def _stamp(checkpoint: Path) -> tuple[str, int, int] | None:
    """Which version of a checkpoint is on disk (its config.json's inode and time), None while it has none or
    is being swapped (the writer's `.NAME.old-PID` exists until its second rename and clean-up are done:
    reading then would race checkpoint.py's recovery of an interrupted save)."""
    if being_replaced(checkpoint):
        return None
    try:
        stat = (checkpoint / CONFIG_NAME).stat()
    except OSError:
        return None
    return str(checkpoint), stat.st_ino, stat.st_mtime_ns


class Served:
    """What `nanobert serve PATH` serves: a checkpoint, a run directory, or a run directory with a model.

    PATH is a checkpoint (it has config.json) or a run directory (metrics.jsonl, best/ or last/): then the
    run view shows its curves and the model panels use best/ (else last/) once it exists. `refresh` loads the
    checkpoint when it appears or a newer one replaces it; `info` and every model request call it.
    """

    def __init__(self, path: str | Path, device: str = "cpu"):
        self.path, self.device = Path(path), device
        if (self.path / CONFIG_NAME).is_file():
            self.run_dir = None
        elif (self.path / METRICS_NAME).is_file() or any((self.path / n).is_dir() for n in ("best", "last")):
            self.run_dir = self.path
        else:
            raise NanobertError(
                f"{self.path} is neither a checkpoint (no config.json) nor a run directory (no "
                "metrics.jsonl, best/ or last/); pass RUN or RUN/best"
            )
        self.checkpoint, self.kind, self.model, self.classifier, self.qa = None, None, None, None, None
        self.stamp: tuple[str, int, int] | None = None
        # why the newest version failed to load, while an older one goes on serving
        self.reload_error: str | None = None
        self.lock = threading.Lock()  # requests are answered from a thread pool: one load at a time
        self.model_lock = threading.Lock()  # and one model request at a time (info and run do not wait)
        self.admitted = threading.BoundedSemaphore(1 + MAX_WAITING)  # the one answered and those waiting
        self.refresh()

    def refresh(self) -> None:
        """Load the checkpoint to show if it appeared or was rewritten since the last look: PATH itself, or
        the run's best/, else last/. A stat or two when nothing changed; a checkpoint being swapped in is
        picked up by a later call. NanobertError if loading fails with nothing loaded yet; once a model is
        loaded it keeps serving, `reload_error` says why the newer version failed, and that version is not
        tried again until its files change."""
        candidates = [self.path] if self.run_dir is None else [self.path / "best", self.path / "last"]
        found = next(((c, s) for c in candidates if (s := _stamp(c)) is not None), None)
        if found is None or found[1] == self.stamp:
            return
        with self.lock:
            if found[1] != self.stamp:
                try:
                    self._load(found[0])
                    self.reload_error = None
                except NanobertError as e:
                    if self.kind is None:  # nothing to show yet: a run's last/ will do while best/ is broken
                        self._load_another(candidates[candidates.index(found[0]) + 1 :], e)
                        self.reload_error = f"{e}; showing {self.checkpoint} instead"
                    else:
                        self.reload_error = f"{e}; still showing the version loaded before"
                self.stamp = found[1]

    def _load_another(self, candidates: list[Path], error: NanobertError) -> None:
        """Load the first of `candidates` that loads; else raise `error`, the first candidate's failure."""
        for candidate in candidates:
            if _stamp(candidate) is not None:
                try:
                    return self._load(candidate)
                except NanobertError:
                    continue
        raise error

    def _load(self, checkpoint: Path) -> None:
        """Replace what is loaded with `checkpoint`, all or nothing (a failed load keeps the previous one)."""
        held = dict.fromkeys(LOADERS)
        try:
            kind = checkpoint_kind(read_config(checkpoint))
            answered_by = KINDS[kind].answered_by if kind in KINDS else None
            if answered_by not in LOADERS:
                raise NanobertError(f"{checkpoint} holds a {kind} checkpoint, which the page cannot show")
            held[answered_by] = LOADERS[answered_by](checkpoint, self.device)
        except OSError as e:  # replaced while being read: the next look loads the new one
            raise NanobertError(f"could not read {checkpoint} ({e.strerror or e}); try again") from None
        self.checkpoint, self.kind = checkpoint, kind
        self.model, self.classifier, self.qa = held["language_model"], held["classifier"], held["qa"]

    def info(self) -> dict[str, Any]:
        """What is loaded (after loading a checkpoint that has appeared since the last look, if none was)."""
        error = None
        if self.kind is None:  # a newer version of a loaded checkpoint waits for the next model request
            try:
                self.refresh()
            except NanobertError as e:
                error = str(e)
        error = error or self.reload_error
        config = {}
        if self.model is not None:
            config = asdict(self.model.model.config)
        elif self.classifier is not None:
            config = asdict(self.classifier[0].config)
        elif self.qa is not None:
            config = asdict(self.qa.model.config)
        return {
            "path": self.path.resolve().name,  # the page shows names, never where they lie on this machine
            "checkpoint": self.shown(self.checkpoint) if self.checkpoint else None,
            "kind": self.kind,
            "panels": PANELS.get(self.kind, []) + (["run"] if self.run_dir else []),
            "model": config,
            "labels": self.classifier[2].get("labels") if self.classifier else None,
            "text_pair": bool(self.classifier and self.classifier[2]["columns"].get("text_pair") is not None),
            "error": self.public(error) if error else None,
        }

    def shown(self, path: Path) -> str:
        """`path` as the page names it: from the served folder's own name on (RUN/best), not from /."""
        name = self.path.resolve().name
        return str(Path(name) / path.relative_to(self.path)) if path != self.path else name

    def public(self, message: str) -> str:
        """An error message with the folders above the served path left out (the page shows no absolute
        path: a page that got one would learn the user's name and file layout)."""
        for above in {str(self.path.resolve().parent), str(self.path.parent)} - {"", ".", "/"}:
            message = message.replace(above.rstrip("/") + "/", "")
        return message

    def run(self) -> dict[str, Any]:
        """metrics.jsonl's records and summary.json, as far as they are written (see run_log.scan_records)."""
        if self.run_dir is None:
            raise NanobertError(
                f"{self.path} is a checkpoint, not a run directory; serve the run to see curves"
            )
        records, damaged = scan_records(self.run_dir / METRICS_NAME)
        summary = read_summary(self.run_dir / SUMMARY_NAME)
        return {"records": records, "summary": summary, "damaged_lines": damaged}

    def language_model(self) -> InferenceModel:
        if self.model is None:
            if self.kind is None:
                raise NanobertError(f"{self.path} has no checkpoint yet (no best/ or last/); wait a little")
            raise wrong_kind(self.checkpoint, self.kind, "a pretrained language model")
        return self.model

    def answer(self, route: str, body: Any) -> dict[str, Any]:
        """One API request: the library call behind the CLI command of the same name, as JSON."""
        if route not in ROUTES:
            raise NanobertError(f"unknown request {route!r}")
        body = checked_body(body)
        if not self.admitted.acquire(blocking=False):
            raise Busy(f"busy: {MAX_WAITING} requests are already waiting for the model; try again shortly")
        try:
            self.refresh()
            with self.model_lock:
                return self._answer(route, body)
        finally:
            self.admitted.release()

    def _answer(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        if route == "classify":
            return self._classify(body)
        if route == "answer":
            if self.qa is None:
                raise wrong_kind(self.checkpoint or self.path, self.kind, "a question-answering model")
            return asdict(self.qa.answer(body.get("question", ""), body.get("context", "")))
        model = self.language_model()
        a, b = body.get("text_a", body.get("text", body.get("prompt", ""))), body.get("text_b", "")
        if route not in NEEDS_PAIR and (route not in TAKES_PAIR or not b.strip()):
            b = None  # optional and left empty, or not used by the route
        if route == "score":  # two sentences scored apart: each must fit on its own
            texts = [t for t in (a, b) if t is not None]
            for text in texts:
                model.check_text(text)
            return score_report([model.score(t, body.get("rule")) for t in texts])
        model.check_text(a, b)
        if route == "fill-mask":
            return asdict(model.fill_mask(a, top_k=body.get("top_k", 5)))
        if route == "nsp":
            result = model.next_sentence(a, b)
            return {"IsNext": result.is_next, "NotNext": result.not_next}
        if route == "similarity":
            return {"cosine_similarity": model.similarity(a, b)}
        if route == "attention":
            check_attention_size(model, a, b)
            maps = model.attention(a, b)
            return {"tokens": maps.tokens, "attentions": maps.probs.round(4).tolist()}
        if route == "explain":
            trace = model.explain(a, b, top_k=body.get("top_k", 5))
            return {**asdict(trace), "text": format_trace(trace)}
        options = {k: body[k] for k in ("max_new_tokens", "temperature", "top_k", "seed") if k in body}
        return asdict(model.generate(a, **options))

    def _classify(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.classifier is None:
            raise NanobertError(f"{self.path} is not a fine-tuned classifier; the label panel needs one")
        model, tokenizer, config = self.classifier
        text, pair = body.get("text", ""), body.get("text_pair", "")
        if config["columns"].get("text_pair") is None:
            if pair.strip():
                raise NanobertError("this classifier reads single texts, not pairs; leave text_pair out")
            pair = None
        require_words(text, pair)
        limit = int(config.get("max_seq_len", 128))  # classify cuts longer texts there, as it was trained
        n = len(encode_pairs(tokenizer, [text], None if pair is None else [pair])[0][0])
        if n > limit:
            raise NanobertError(
                f"the text has {n} word pieces with its special tokens, more than the {limit} the "
                "classifier reads (its max_seq_len); shorten it"
            )
        outputs = classify(model, tokenizer, config, [text], None if pair is None else [pair])
        if config["task"] == "regression":
            return {"score": float(outputs[0, 0])}
        logits = outputs[0].astype(np.float64)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        labels = config["labels"]
        return {
            "label": labels[int(probs.argmax())],
            "probabilities": {label: float(p) for label, p in zip(labels, probs, strict=True)},
        }


__all__ = ["GET_ROUTES", "PANELS", "ROUTES", "Served"]
