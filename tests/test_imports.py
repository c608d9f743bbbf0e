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
    # sqlq.durable is a package: it and its parts, nothing heavier
    assert {".".join(m.split(".")[:2]) for m in _loaded(code)} == {"sqlq.durable"}


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


def _filled(tmp_path: Path) -> str:
    """A SQLite file with a task, a worker's row and stored settings."""
    path = str(tmp_path / "q.db")
    with sqlq.Queue(path, lease_seconds=30, max_attempts=3) as q:
        q.add("t1")
        q.configure(lease_seconds=20)
    return path


@pytest.mark.parametrize("command", [["stats", "--json"], ["list"], ["workers"], ["schedules"]])
def test_reading_commands_on_a_sqlite_file_load_no_sqlalchemy(
    tmp_path: Path, command: list[str]
) -> None:
    """The SQLite backend opens its connections with the DB-API module itself (issue 23
    item 11: importing SQLAlchemy alone cost 0.29 s of `sqlq stats`'s 0.36 s)."""
    path = _filled(tmp_path)
    code = f"""
import contextlib, io, json
from sqlq.cli import main
argv = {command!r}
with contextlib.redirect_stdout(io.StringIO()) as out:
    assert main(argv[:1] + [{path!r}] + argv[1:]) == 0
if "--json" in argv:
    assert json.loads(out.getvalue())["queues"]["default"]["AVAILABLE"] == 1, out.getvalue()
"""
    assert "sqlalchemy" not in " ".join(_loaded(code))


def test_a_worker_on_a_sqlite_file_loads_no_sqlalchemy(tmp_path: Path) -> None:
    path = _filled(tmp_path)
    code = f"""
import sqlq
done = []
with sqlq.Queue({path!r}) as q:
    q.add("t2", payload="x")
    stats = sqlq.Worker(q, done.append).run(stop_when_idle=True, install_signal_handlers=False)
assert sorted(map(str, done)) == ["None", "x"], done
"""
    loaded = _loaded(code)
    assert "sqlq.sqlite" in loaded
    assert "sqlalchemy" not in loaded


def test_queue_engine_and_a_sqlite_url_bring_sqlalchemy_when_asked_for(tmp_path: Path) -> None:
    """queue.engine is made on first use, with the queue's SQLite library, and runs a
    transactional add; a sqlite:/// URL is read by SQLAlchemy."""
    path = _filled(tmp_path)
    code = f"""
import sys, sqlq
with sqlq.Queue({path!r}) as q:
    assert "sqlalchemy" not in sys.modules
    engine = q.engine
    assert engine is q.engine
    with engine.begin() as conn:
        q.add("t3", conn=conn)
    from sqlq.sqlite import driver
    assert engine.dialect.dbapi is driver.dbapi
    assert q.status("t3") == "AVAILABLE"
"""
    assert "sqlalchemy" in _loaded(code)
    url = f"sqlite:///{path}"
    assert "sqlalchemy" in _loaded(f"import sqlq\nsqlq.Queue({url!r}).close()")
