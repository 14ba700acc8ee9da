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
    POST /api/classify    classifier.classify          (nanobert predict)
    POST /api/answer      QAModel.answer               (nanobert answer --json)
    GET  /api/info        what was loaded: the checkpoint's kind, shape and the panels that fit it
    GET  /api/run         a run directory's metrics.jsonl records and summary.json (null while it runs)

A request the model cannot answer (a field of the wrong type, no [MASK], an empty text, a text longer than
the model's window, fill-mask of a causal model) gets HTTP 400 with {"error": "..."}, the CLI's one-line
message, and the server goes on. Every request's work is bounded by the page's limits (limits.py, stated in
docs/page.md), checked before the model runs. The page is for this machine's browser only (guards.py): a
Host header that is not one of this machine's names (DNS rebinding), a cross-origin Origin, or a body that
is not application/json (a form another site can post without asking) is refused before any route runs, and
no answer shows an absolute path. What is served, a checkpoint or a run directory whose checkpoint is loaded
once best/ (else last/) appears and reloaded when a newer one is swapped in, is served.py's `Served`.
"""

import errno
import json
import socket
from pathlib import Path
from typing import Any

from nanobert.errors import NanobertError
from nanobert.serve.guards import allowed_hosts, guard
from nanobert.serve.limits import MAX_BODY_BYTES
from nanobert.serve.served import GET_ROUTES, Served

WEB = Path(__file__).parent / "web"

HEADER_TIMEOUT_S = 10.0  # a connection must finish each request's headers this soon after it opens or idles

KEEP_ALIVE_S = 5  # an idle kept-alive connection closes after this


def create_app(served: Served, hosts: set[str] | None = None):
    """The FastAPI application: the page, its assets and the JSON API; it answers requests for `hosts` (by
    default `allowed_hosts("127.0.0.1")`, this machine's own names) from its own page only."""
    from fastapi import FastAPI, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import FileResponse, JSONResponse
    from starlette.exceptions import HTTPException

    # redirect_slashes off: its 307 built the Location from the Host header, a rebinding page's name
    app = FastAPI(title="nanobert", docs_url=None, redoc_url=None, redirect_slashes=False)
    guard(app, served, hosts if hosts is not None else allowed_hosts("127.0.0.1"))

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


__all__ = ["create_app", "listening_port", "serve", "server_config"]
