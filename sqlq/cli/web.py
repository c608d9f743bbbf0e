"""The commands that serve over HTTP (sqlq.web; the `web` extra): `sqlq web`, the dashboard,
and `sqlq metrics`, its /metrics alone."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidConfig
from ..install import pip_install
from .common import EXIT_OK, CliError, UsageError, add_database, positive_int, sqlq_database

if TYPE_CHECKING:
    import socket

#: The extra that the command needs, as pip is asked for it.
EXTRA = pip_install("web")
#: Where the token may come from instead of the command line (which others may read).
TOKEN_VARIABLE = "SQLQ_WEB_TOKEN"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    web = commands.add_parser(
        "web",
        help="serve a dashboard of the database in a browser, and a JSON API",
        description=(
            "Serve a web dashboard of every queue in the database: tasks per state, the "
            "task list with filters, each task's details, the dead letters, the leases; "
            "and actions (redrive, purge, cancel, pause, resume, add) unless --read-only. "
            "Its JSON API (/api/...) gives what `sqlq stats/show/list --json` give. It "
            "reads without the write lock, so workers are not held up while it is open. "
            f"Needs the web extra ({EXTRA})."
        ),
    )
    _add_serving(web, 8470)
    web.add_argument(
        "--read-only", action="store_true", help="no actions: the dashboard only shows"
    )
    web.set_defaults(handler=_web)

    metrics = commands.add_parser(
        "metrics",
        help="serve /metrics for Prometheus, without the dashboard",
        description=(
            "Serve the database's metrics at /metrics in the Prometheus text format, as "
            "`sqlq web` does, without the dashboard: tasks per queue and state, the age of "
            "the oldest waiting task, how overdue the most overdue lease is, paused queues, "
            "the size of the -wal file. Each scrape reads one snapshot without the write "
            f"lock. Needs the web extra ({EXTRA})."
        ),
    )
    _add_serving(metrics, 9470)
    metrics.set_defaults(handler=_metrics)


def _add_serving(parser: argparse.ArgumentParser, port: int) -> None:
    """The arguments of a command that serves a database over HTTP."""
    add_database(parser, "it must exist and be a sqlq database at the current schema")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help=(
            "the address to serve on (default: %(default)s, this machine only); any other "
            "needs --token"
        ),
    )
    parser.add_argument(
        "--port",
        type=positive_int(0, 65535),
        default=port,
        help="default: %(default)s; 0: a free port (the address printed says which)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=(
            "an access token (16 characters or more) that every request must carry: "
            "'Authorization: Bearer TOKEN', or basic auth with TOKEN as the password (a "
            f"browser asks for it). Default: the {TOKEN_VARIABLE} environment variable"
        ),
    )


def _web(args: argparse.Namespace) -> int:
    return _serve(
        args,
        lambda web, target, token: web.create_app(target, read_only=args.read_only, token=token),
    )


def _metrics(args: argparse.Namespace) -> int:
    return _serve(args, lambda web, target, token: web.metrics_app(target, token=token))


def _serve(args: argparse.Namespace, make: Callable[[Any, str, str | None], Any]) -> int:
    """Serve the app ``make(sqlq.web, database, token)`` until SIGTERM or Ctrl-C (exit
    0); its address is printed once the socket listens, so a client may connect then."""
    creates = f"{args.command} does not create databases"
    db = sqlq_database(args.db, allow_older=False, creates=creates)
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE) or None
    uvicorn, web = _extra()
    from ..access import check_bind

    try:
        check_bind(args.host, token)
        app = make(web, db.target, token)  # (it checks the token)
    except InvalidConfig as exc:
        raise UsageError(str(exc)) from None
    listening = _listen(args.host, args.port)
    where = f"[{args.host}]" if ":" in args.host else args.host
    port = listening.getsockname()[1]
    print(f"sqlq {args.command}: {db.name} on http://{where}:{port}/", flush=True)
    # (uvicorn's proxy headers: X-Forwarded-Proto and -For are believed from the addresses
    # in FORWARDED_ALLOW_IPS, by default 127.0.0.1: a reverse proxy on this machine.)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    # uvicorn stops on SIGTERM and SIGINT, then raises the signal again for the handler
    # it found, so that the process ends by the signal (exit -15): the handler found
    # here asks the server to stop instead (as uvicorn's own does: a signal that comes
    # before the server has started stops it too), and the command exits 0.
    import signal

    stop = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in stop}
    try:
        server.run(sockets=[listening])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        listening.close()
    return EXIT_OK


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``; CliError if it cannot be had."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        raise CliError(f"cannot serve on {host} port {port}: {exc.strerror or exc}") from None


def _extra() -> tuple[Any, Any]:
    """(uvicorn, sqlq.web), or a CliError saying how to install the web extra."""
    try:
        import uvicorn

        from .. import web
    except ImportError as exc:
        raise CliError(f"this needs the web extra ({exc.name} is missing): {EXTRA}") from None
    return uvicorn, web
