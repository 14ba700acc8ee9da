"""The page is for this machine's browser only: the refusals made before any route runs, and every error as
one {"error": ...} line with no absolute path in it.

A Host header that is not one of this machine's names (a DNS-rebinding page reaches 127.0.0.1 under its own
name), a cross-origin Origin, or a POST body that is not application/json (a form another site can post
without asking) is refused.
"""

from nanobert.errors import NanobertError
from nanobert.serve.limits import Busy
from nanobert.serve.served import GET_ROUTES, ROUTES, Served

# Names of this machine a browser may use in its Host header; --allow-host adds others.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


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


def guard(app, served: Served, hosts: set[str]) -> None:
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


__all__ = ["LOCAL_HOSTS", "allowed_hosts", "guard", "refusal"]
