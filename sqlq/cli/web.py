"""The command that serves the dashboard: `sqlq web` (sqlq.web; the `web` extra)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import InvalidConfig
from .common import EXIT_OK, CliError, UsageError, add_database, positive_int, sqlq_database

#: The extra that the command needs, as pip is asked for it.
EXTRA = "pip install 'sqlq[web]'"
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
    add_database(web, "it must exist and be a sqlq database at the current schema")
    web.add_argument(
        "--host",
        default="127.0.0.1",
        help=(
            "the address to serve on (default: %(default)s, this machine only); any other "
            "needs --token"
        ),
    )
    web.add_argument(
        "--port", type=positive_int(1, 65535), default=8470, help="default: %(default)s"
    )
    web.add_argument(
        "--read-only", action="store_true", help="no actions: the dashboard only shows"
    )
    web.add_argument(
        "--token",
        default=None,
        help=(
            "an access token (16 characters or more) that every request must carry: "
            "'Authorization: Bearer TOKEN', or basic auth with TOKEN as the password (a "
            f"browser asks for it). Default: the {TOKEN_VARIABLE} environment variable"
        ),
    )
    web.set_defaults(handler=_web)


def _web(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=False, creates="web does not create databases")
    token = args.token if args.token is not None else os.environ.get(TOKEN_VARIABLE) or None
    server = _server()
    from ..web.security import check_bind

    try:
        check_bind(args.host, token)
    except InvalidConfig as exc:
        raise UsageError(str(exc)) from None
    from ..web import create_app

    app = create_app(db.target, read_only=args.read_only, token=token)
    where = f"[{args.host}]" if ":" in args.host else args.host
    print(f"sqlq web: {db.name} on http://{where}:{args.port}/", flush=True)
    server.run(app, host=args.host, port=args.port, log_level="warning")
    return EXIT_OK


def _server() -> Any:
    """uvicorn, or a CliError saying how to install the web extra."""
    try:
        import uvicorn

        import sqlq.web  # noqa: F401  (Starlette, Jinja2: the rest of the extra)
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs the web extra ({exc.name} is missing): {EXTRA}"
        ) from None
    return uvicorn
