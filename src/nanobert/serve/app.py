"""`nanobert serve`: a local page to play with a trained model and watch a run, over a small JSON API.

FastAPI and uvicorn (the `serve` extra) serve one page, `web/index.html` with its script and style, shipped in
the package (no CDN: it works offline). Every panel asks the API, and every API route is one library call,
the same one the CLI command makes, so the page shows the CLI's numbers:

    POST /api/fill-mask   InferenceModel.fill_mask     (nanobert fill-mask --json)
    POST /api/nsp         InferenceModel.next_sentence (nanobert nsp --json)
    POST /api/similarity  InferenceModel.similarity    (nanobert similarity --json)
    POST /api/attention   InferenceModel.attention     (nanobert attention --json)
    POST /api/explain     InferenceModel.explain       (nanobert explain --json)
    POST /api/score       InferenceModel.score         (nanobert score --json)
    POST /api/generate    InferenceModel.generate      (nanobert generate --json)
    POST /api/classify    task_inference.classify      (nanobert predict)
    POST /api/answer      QAModel.answer               (nanobert answer --json)
    GET  /api/info        what was loaded: the checkpoint's kind, shape and the panels that fit it
    GET  /api/run         a run directory's metrics.jsonl records and summary.json (null while it runs)

A request the model cannot answer (a field of the wrong type, no [MASK], an empty text, a text longer than
the model's window, fill-mask of a causal model) gets HTTP 400 with {"error": "..."}, the CLI's one-line
message, and the server goes on. Every request's work is bounded by the limits below (MAX_*, WHOLE_FIELDS;
stated in the README), checked before the model runs. The page is for this machine's browser only: a Host
header that is not one of this machine's names (DNS rebinding), a cross-origin Origin, or a body that is not
application/json (a form another site can post without asking) is refused before any route runs, and no
answer shows an absolute path. A run directory served while it trains has its checkpoint loaded once best/
(else last/) appears, and reloaded when a newer one is swapped in (checkpoint.py renames it into place).
"""

import errno
import json
import math
import socket
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
from nanobert.tokenizer import encode_pairs
from nanobert.use.answers import load_qa_model
from nanobert.use.classifier import classify
from nanobert.use.explain import format_trace
from nanobert.use.inference import InferenceModel, load, require_words
from nanobert.use.scoring import score_report

WEB = Path(__file__).parent / "web"
PANELS = {name: list(kind.panels) for name, kind in KINDS.items()}  # the panels that fit each kind
# What loads a checkpoint for the page, by the interface that answers its kind (kinds.Kind.answered_by)
LOADERS = {"language_model": load, "classifier": load_finetuned, "qa": load_qa_model}
ROUTES = {route for panels in PANELS.values() for route in panels}  # POST /api/ROUTE
GET_ROUTES = ("info", "run")  # GET /api/ROUTE: what the page shows besides the model's answers
# Routes whose question has a sentence B; attention and explain take one if given, the others none.
NEEDS_PAIR = {"nsp", "similarity"}
TAKES_PAIR = NEEDS_PAIR | {"attention", "explain", "score"}
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
# Names of this machine a browser may use in its Host header; --allow-host adds others.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
HEADER_TIMEOUT_S = 10.0  # a connection must finish each request's headers this soon after it opens or idles
KEEP_ALIVE_S = 5  # an idle kept-alive connection closes after this


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


class Busy(NanobertError):
    """Too many model requests at once: HTTP 503, try again."""


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
            _check_attention_size(model, a, b)
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


def _host_name(host: str) -> str:
    """The name in a Host header or an --allow-host value, without its port: [::1]:8000 -> ::1."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


def allowed_hosts(host: str, extra: tuple[str, ...] = ()) -> set[str]:
    """The Host names the page answers: this machine's own (LOCAL_HOSTS), the address it listens on when
    that is one (not 0.0.0.0 or ::), and those `--allow-host` adds."""
    names = {*LOCAL_HOSTS, *(_host_name(h) for h in extra)}
    if _host_name(host) not in ("0.0.0.0", "::", ""):
        names.add(_host_name(host))
    return names


def refusal(method: str, headers: dict[str, str], hosts: set[str]) -> tuple[int, str] | None:
    """Why the page refuses a request before any route runs, as (HTTP status, message), or None.

    Host must be one of `hosts` (a DNS-rebinding page reaches 127.0.0.1 under its own name); an Origin, which
    a browser sends with a cross-site request, must be this page's own; a POST body must be application/json
    (a form or text/plain body is one that any site may post without the browser asking first)."""
    host = headers.get("host", "")
    if _host_name(host) not in hosts:
        return (
            403,
            f"the Host {host!r} is not a name of this machine; start serve with --allow-host to add it",
        )
    origin = headers.get("origin")
    if origin is not None and origin.lower() not in (f"http://{host.lower()}", f"https://{host.lower()}"):
        return 403, f"a request from another site ({origin}) is refused; open the page itself"
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    if method == "POST" and media != "application/json":
        return 415, f"the body must be JSON sent as application/json, not {media or 'without a type'}"
    return None


def _guard(app, served: Served, hosts: set[str]) -> None:
    """What `app` answers before and instead of its routes: the refusals of requests from elsewhere
    (`refusal`), and every error as one {"error": ...} line with no absolute path in it."""
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    @app.middleware("http")
    async def own_page_only(request: Request, call_next):
        refused = refusal(request.method, dict(request.headers), hosts)
        if refused is not None:
            return JSONResponse({"error": refused[1]}, status_code=refused[0])
        return await call_next(request)

    @app.exception_handler(NanobertError)
    async def user_error(request: Request, error: NanobertError) -> JSONResponse:
        status = 503 if isinstance(error, Busy) else 400
        return JSONResponse({"error": served.public(str(error))}, status_code=status)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        """Unknown paths and methods, in the API's own {"error": ...} form."""
        path = request.url.path
        route = path.removeprefix("/api/") if path.startswith("/api/") else None
        if error.status_code == 405 and (route is None or route in ROUTES or route in GET_ROUTES):
            use = "POST" if route in ROUTES else "GET"  # the page and its assets take GET only
            return JSONResponse({"error": f"{path} takes {use}, not {request.method}"}, status_code=405)
        if error.status_code in (404, 405):  # /api/{route} catches every name for POST only
            return JSONResponse({"error": f"no such path: {path}"}, status_code=404)
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code)

    @app.exception_handler(Exception)
    async def bug(request: Request, error: Exception) -> JSONResponse:  # still JSON, for the page to show
        message = served.public(f"the server failed: {type(error).__name__}: {error}")
        return JSONResponse({"error": message}, status_code=500)


def _check_attention_size(model: InferenceModel, a: str, b: str | None) -> None:
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


def create_app(served: Served, hosts: set[str] | None = None):
    """The FastAPI application: the page, its assets and the JSON API; it answers requests for `hosts` (by
    default `allowed_hosts("127.0.0.1")`, this machine's own names) from its own page only."""
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import FileResponse, JSONResponse
    from starlette.exceptions import HTTPException

    # redirect_slashes off: its 307 built the Location from the Host header, a rebinding page's name
    app = FastAPI(title="nanobert", docs_url=None, redoc_url=None, redirect_slashes=False)
    _guard(app, served, hosts if hosts is not None else allowed_hosts("127.0.0.1"))

    @app.get("/")
    def page() -> FileResponse:
        return FileResponse(WEB / "index.html")

    @app.get("/static/{name}")
    def asset(name: str) -> FileResponse:
        path = WEB / name
        if path.parent != WEB or not path.is_file():
            raise HTTPException(404)
        return FileResponse(path)

    @app.get("/api/info")
    def info() -> dict:
        return served.info()

    @app.get("/api/run")
    def run() -> dict:
        return served.run()

    @app.post("/api/{route}")
    async def ask(route: str, request: Request) -> Any:
        if route in GET_ROUTES:  # their GET routes come first; this one catches every other method
            return JSONResponse({"error": f"/api/{route} takes GET, not POST"}, status_code=405)
        raw, size = b"", 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= MAX_BODY_BYTES:
                raw += chunk
            elif size > 64 * MAX_BODY_BYTES:  # stop listening; the client sees the connection close
                break
            # else read on and drop: answering before the client has sent it all breaks its pipe instead
        if size > MAX_BODY_BYTES:
            return JSONResponse({"error": f"the request is over {MAX_BODY_BYTES} bytes"}, status_code=413)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
            raise NanobertError("the request body is not JSON") from None
        # In the thread pool, as info and run are: a long model request must not hold up the event loop.
        return await run_in_threadpool(served.answer, route, body)

    return app


def listening_port(host: str, port: int) -> int:
    """The port `serve` will listen on at `host`, checked before anything loads: `port`, or a free one for 0.

    NanobertError (one line) for a port outside 0-65535, a host this machine cannot listen on (unknown name,
    not one of its addresses), or a port in use or not allowed.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise NanobertError(f"--port {port} is not a port number; pass 1-65535 (or 0 for any free port)")
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e)
        raise NanobertError(f"--host {host!r} is no address to listen on ({reason}); try 127.0.0.1") from None
    try:
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(address)
            return probe.getsockname()[1]
    except OSError as e:
        if e.errno in (errno.EADDRINUSE, errno.EACCES):  # the port is taken, or below 1024 without root
            raise NanobertError(f"cannot listen on port {port} ({e.strerror}); pass another --port") from None
        raise NanobertError(
            f"cannot listen on --host {host} ({e.strerror}); pass an address of this machine, such as "
            "127.0.0.1 (this machine only) or 0.0.0.0 (every network)"
        ) from None


def _timed_protocol():
    """uvicorn's h11 protocol with a deadline on each request's head: a connection that sends nothing, or
    its request line and headers too slowly, closes HEADER_TIMEOUT_S after it opened or its last answer.
    (uvicorn's own keep-alive timer starts only after an answer, and any byte stops it: an idle or dribbling
    connection stayed open for ever.) A request whose headers arrived is not cut: its body is bounded."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        head_deadline = None

        def _arm(self) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
            self.head_deadline = self.loop.call_later(HEADER_TIMEOUT_S, self._head_too_slow)

        def _head_too_slow(self) -> None:
            if self.cycle is None or self.cycle.response_complete:  # no request is being answered
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
            super().connection_lost(exc)

    return TimedH11Protocol


def server_config(app, host: str, port: int, log_level: str = "warning"):
    """The uvicorn configuration `serve` runs `app` with: idle and slow connections time out."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=_timed_protocol(),
        timeout_keep_alive=KEEP_ALIVE_S,
        server_header=False,
    )


def serve(
    path: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    device: str = "cpu",
    allow_hosts: tuple[str, ...] = (),
) -> None:
    """Serve PATH until Ctrl-C; prints the address to open. Port 0 picks a free port. The page answers
    requests that name this machine (localhost, 127.0.0.1, ::1, the --host address) or one of `allow_hosts`
    in their Host header."""
    try:
        import uvicorn
    except ImportError:
        raise NanobertError('`nanobert serve` needs the serve extra: pip install -e ".[serve]"') from None
    port = listening_port(host, port)  # before loading a model: a wrong port or host fails fast
    served = Served(path, device)
    what = served.kind or "a run"
    shown = f"[{host}]" if ":" in host else host
    print(f"nanobert: serving {what} from {served.path} at http://{shown}:{port}/ (Ctrl-C stops)", flush=True)
    app = create_app(served, allowed_hosts(host, allow_hosts))
    uvicorn.Server(server_config(app, host, port)).run()


__all__ = [
    "PANELS",
    "Served",
    "allowed_hosts",
    "checked_body",
    "create_app",
    "listening_port",
    "refusal",
    "serve",
    "server_config",
]
