"""`nanobert serve`: a local page to play with a trained model and watch a run, over a small JSON API.

FastAPI and uvicorn (the `serve` extra) serve one page, `web/index.html` with its script and style, shipped in
the package (no CDN: it works offline). Every panel asks the API, and every API route is one library call,
the same one the CLI command makes, so the page shows the CLI's numbers:

    POST /api/fill-mask   InferenceModel.fill_mask     (nanobert fill-mask --json)
    POST /api/nsp         InferenceModel.next_sentence (nanobert nsp --json)
    POST /api/similarity  InferenceModel.similarity    (nanobert similarity --json)
    POST /api/attention   InferenceModel.attention     (nanobert attention --json)
    POST /api/explain     InferenceModel.explain       (nanobert explain --json)
    POST /api/generate    InferenceModel.generate      (nanobert generate --json)
    POST /api/classify    finetune.classify            (nanobert predict)
    POST /api/answer      QAModel.answer               (nanobert answer --json)
    GET  /api/info        what was loaded: the checkpoint's kind, shape and the panels that fit it
    GET  /api/run         a run directory's metrics.jsonl records and summary.json (null while it runs)

A request the model cannot answer (no [MASK], an empty text, a text longer than the model's window, fill-mask
of a causal model) gets HTTP 400 with {"error": "..."}, the CLI's one-line message, and the server goes on.
"""

import json
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from nanobert.checkpoint import (
    CAUSAL_LM,
    CONFIG_NAME,
    PRETRAINING,
    QUESTION_ANSWERING,
    SEQUENCE_CLASSIFICATION,
    checkpoint_kind,
    load_finetuned,
    read_config,
    wrong_kind,
)
from nanobert.errors import NanobertError
from nanobert.explain import format_trace
from nanobert.finetune import classify
from nanobert.inference import InferenceModel, load
from nanobert.qa import load_qa_model
from nanobert.run_log import METRICS_NAME, SUMMARY_NAME, read_records

WEB = Path(__file__).parent / "web"
PANELS = {
    PRETRAINING: ["fill-mask", "nsp", "similarity", "attention", "explain"],
    CAUSAL_LM: ["generate", "similarity", "attention", "explain"],
    SEQUENCE_CLASSIFICATION: ["classify"],
    QUESTION_ANSWERING: ["answer"],
}


class Served:
    """What `nanobert serve PATH` serves: a checkpoint, a run directory, or a run directory with a model.

    PATH is a checkpoint (it has config.json) or a run directory (metrics.jsonl, best/ or last/): then the
    run view shows its curves and the model panels use best/ (else last/) once it exists.
    """

    def __init__(self, path: str | Path, device: str = "cpu"):
        self.path = Path(path)
        if (self.path / CONFIG_NAME).is_file():
            self.run_dir, checkpoint = None, self.path
        elif (self.path / METRICS_NAME).is_file() or any((self.path / n).is_dir() for n in ("best", "last")):
            self.run_dir = self.path
            checkpoint = next(
                (self.path / n for n in ("best", "last") if (self.path / n / CONFIG_NAME).is_file()), None
            )
        else:
            raise NanobertError(
                f"{self.path} is neither a checkpoint (no config.json) nor a run directory (no "
                "metrics.jsonl, best/ or last/); pass RUN or RUN/best"
            )
        self.checkpoint, self.kind, self.model, self.classifier, self.qa = checkpoint, None, None, None, None
        if checkpoint is not None:
            self.kind = checkpoint_kind(read_config(checkpoint))
            if self.kind == SEQUENCE_CLASSIFICATION:
                self.classifier = load_finetuned(checkpoint, device)
            elif self.kind == QUESTION_ANSWERING:
                self.qa = load_qa_model(checkpoint, device)
            elif self.kind in (PRETRAINING, CAUSAL_LM):
                self.model = load(checkpoint, device)
            else:
                raise NanobertError(
                    f"{checkpoint} holds a {self.kind} checkpoint, which the page cannot show"
                )

    def info(self) -> dict[str, Any]:
        config = {}
        if self.model is not None:
            config = asdict(self.model.model.config)
        elif self.classifier is not None:
            config = asdict(self.classifier[0].config)
        elif self.qa is not None:
            config = asdict(self.qa.model.config)
        return {
            "path": str(self.path),
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "kind": self.kind,
            "panels": PANELS.get(self.kind, []) + (["run"] if self.run_dir else []),
            "model": config,
            "labels": self.classifier[2].get("labels") if self.classifier else None,
            "text_pair": bool(self.classifier and self.classifier[2]["columns"].get("text_pair") is not None),
        }

    def run(self) -> dict[str, Any]:
        if self.run_dir is None:
            raise NanobertError(
                f"{self.path} is a checkpoint, not a run directory; serve the run to see curves"
            )
        summary = self.run_dir / SUMMARY_NAME
        return {
            "records": read_records(self.run_dir / METRICS_NAME),
            "summary": json.loads(summary.read_text()) if summary.is_file() else None,
        }

    def language_model(self) -> InferenceModel:
        if self.model is None:
            if self.kind is None:
                raise NanobertError(f"{self.path} has no checkpoint yet (no best/ or last/); wait a little")
            raise wrong_kind(self.checkpoint, self.kind, "a pretrained language model")
        return self.model

    def answer(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """One API request: the library call behind the CLI command of the same name, as JSON."""
        if route == "classify":
            return self._classify(body)
        if route == "answer":
            if self.qa is None:
                raise wrong_kind(self.checkpoint or self.path, self.kind, "a question-answering model")
            return asdict(self.qa.answer(str(body.get("question", "")), str(body.get("context", ""))))
        model = self.language_model()
        a, b = body.get("text_a", body.get("text", body.get("prompt", ""))), body.get("text_b") or None
        model.check_text(a, b)
        if route == "fill-mask":
            return asdict(model.fill_mask(a, top_k=int(body.get("top_k", 5))))
        if route == "nsp":
            result = model.next_sentence(a, b or "")
            return {"IsNext": result.is_next, "NotNext": result.not_next}
        if route == "similarity":
            return {"cosine_similarity": model.similarity(a, b or "")}
        if route == "attention":
            maps = model.attention(a, b)
            return {"tokens": maps.tokens, "attentions": maps.probs.round(4).tolist()}
        if route == "explain":
            trace = model.explain(a, b, top_k=int(body.get("top_k", 5)))
            return {**asdict(trace), "text": format_trace(trace)}
        if route == "generate":
            options = {
                k: body[k]
                for k in ("max_new_tokens", "temperature", "top_k", "seed")
                if body.get(k) is not None
            }
            return asdict(model.generate(a, **options))
        raise NanobertError(f"unknown request {route!r}")

    def _classify(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.classifier is None:
            raise NanobertError(f"{self.path} is not a fine-tuned classifier; the label panel needs one")
        model, tokenizer, config = self.classifier
        text, pair = body.get("text", ""), body.get("text_pair") or None
        outputs = classify(model, tokenizer, config, [text], [pair] if pair is not None else None)
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


def create_app(served: Served):
    """The FastAPI application: the page, its assets and the JSON API."""
    from fastapi import FastAPI, Request
    from fastapi.responses import FileResponse, JSONResponse

    app = FastAPI(title="nanobert", docs_url=None, redoc_url=None)

    @app.exception_handler(NanobertError)
    async def user_error(request: Request, error: NanobertError) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=400)

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(WEB / "index.html")

    @app.get("/static/{name}")
    def asset(name: str) -> FileResponse:
        path = WEB / name
        if path.parent != WEB or not path.is_file():
            raise NanobertError(f"no such file: {name}")
        return FileResponse(path)

    @app.get("/api/info")
    def info() -> dict:
        return served.info()

    @app.get("/api/run")
    def run() -> dict:
        return served.run()

    @app.post("/api/{route}")
    async def ask(route: str, request: Request) -> dict:
        try:
            body = await request.json()
        except ValueError:
            raise NanobertError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise NanobertError("the request body must be a JSON object")
        return served.answer(route, body)

    return app


def serve(path: str | Path, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu") -> None:
    """Serve PATH until Ctrl-C; prints the address to open."""
    try:
        import uvicorn
    except ImportError:
        raise NanobertError('`nanobert serve` needs the serve extra: pip install -e ".[serve]"') from None
    served = Served(path, device)
    try:  # a port in use is the user's to change, not a traceback
        with socket.socket() as probe:
            probe.bind((host, port))
    except OSError as e:
        raise NanobertError(f"cannot listen on {host}:{port} ({e.strerror}); pass another --port") from None
    what = served.kind or "a run"
    print(f"nanobert: serving {what} from {served.path} at http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    uvicorn.run(create_app(served), host=host, port=port, log_level="warning")


__all__ = ["PANELS", "Served", "create_app", "serve"]
