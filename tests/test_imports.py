"""What importing sqlq and running `sqlq --help` load: each command imports what it
needs when it needs it (issue 23 item 11). SQLAlchemy alone took ~0.4 s of every
CLI call; `import sqlq` and the parser of the `sqlq` command load neither it nor a
storage backend. Each check runs in a fresh interpreter and reads its sys.modules
(timings are bench/startup.py's, not a test's).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sqlq

#: Modules that only opening a database may load: the engine and the backends.
HEAVY = ("sqlalchemy", "sqlq.sqlite", "sqlq.postgresql", "sqlq.durable", "psycopg", "pysqlite3")
#: And what only a command's work needs, not its parser: the records of the answers
#: (dataclasses), cron expressions and zones, the checks of a server's address.
WORK = ("sqlq.records", "sqlq.schedule", "sqlq.access", "cronsim", "zoneinfo", "socket")

pytestmark = pytest.mark.processes


def _loaded(code: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules of ``heavy`` (and their submodules) that ``code`` leaves loaded."""
    probe = f"""
import json, sys
{code}
heavy = {heavy!r}
json.dump(sorted(m for m in sys.modules if m.startswith(heavy)), sys.stdout)
"""
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    loaded: list[str] = json.loads(run.stdout.splitlines()[-1])
    return loaded


def test_import_sqlq_loads_neither_sqlalchemy_nor_a_backend() -> None:
    assert _loaded("import sqlq") == []


def test_naming_the_queue_and_defining_tasks_load_no_sqlalchemy_until_a_database_opens() -> None:
    """A module that defines tasks (imported by producers, workers, web apps) loads
    SQLAlchemy only when a queue opens its database."""
    code = """
import sqlq
tasks = sqlq.Tasks()
@tasks.task(name="resize")
def resize(width: int) -> None: ...
assert sqlq.Queue.__name__ == "Queue"
"""
    assert _loaded(code) == ["sqlq.durable"]


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], ["stats", "--help"], ["worker", "--help"]]
)
def test_help_loads_no_sqlalchemy_no_backend_nor_what_commands_do(argv: list[str]) -> None:
    code = f"""
import contextlib, io
from sqlq.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    assert main({argv!r}) == 0
assert "usage: sqlq" in out.getvalue() or "sqlq " in out.getvalue()
"""
    assert _loaded(code, HEAVY + WORK) == []


def test_every_public_name_is_there_when_asked_for() -> None:
    """The names of sqlq.__all__ load on first use, as the modules that define them
    give them, and dir() lists them."""
    from sqlq import aio, contract, durable, memory, tasks, worker

    assert sqlq.Queue is durable.Queue
    assert sqlq.AsyncQueue is aio.AsyncQueue
    assert sqlq.WorkQueue is memory.WorkQueue
    assert sqlq.State is contract.State
    assert (sqlq.Task, sqlq.Worker) == (tasks.Task, worker.Worker)
    for name in sqlq.__all__:
        assert getattr(sqlq, name) is not None, name
    assert set(sqlq.__all__) <= set(dir(sqlq))
    with pytest.raises(AttributeError, match="no_such_name"):
        sqlq.no_such_name  # noqa: B018


def test_a_command_that_opens_a_database_still_works(tmp_path: Path) -> None:
    code = f"""
import contextlib, io, json, sqlq
from sqlq.cli import main
with sqlq.Queue({str(tmp_path) + "/q.db"!r}, lease_seconds=30, max_attempts=3) as q:
    q.add("t1")
with contextlib.redirect_stdout(io.StringIO()) as out:
    assert main(["stats", {str(tmp_path) + "/q.db"!r}, "--json"]) == 0
assert json.loads(out.getvalue())["queues"]["default"]["AVAILABLE"] == 1, out.getvalue()
"""
    assert "sqlalchemy" in _loaded(code)
