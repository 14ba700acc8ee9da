"""`nanobert serve`: the page."""

from __future__ import annotations

from nanobert.cli.common import (
    command,
)


def _add_serve(sub) -> None:
    help = "a local page to play with a checkpoint and watch a run"
    p = command(sub, "serve", _cmd_serve, help)
    p.add_argument("path", metavar="PATH", help="a checkpoint (RUN/best) or a run directory (RUN)")
    p.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (this machine only)")
    p.add_argument("--port", type=int, default=8000, help="default 8000; 0 picks a free port")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (default: localhost, 127.0.0.1, ::1 and --host)",
    )


def _cmd_serve(args) -> int:
    """Serve a page for a checkpoint (fill-mask, NSP, attention, explain, generate, labels) or a run directory
    (its curves, refreshed while it trains). Ctrl-C stops it."""
    from nanobert.serve.app import serve

    serve(args.path, host=args.host, port=args.port, device=args.device, allow_hosts=tuple(args.allow_host))
    return 0


def add_commands(sub) -> None:
    _add_serve(sub)
