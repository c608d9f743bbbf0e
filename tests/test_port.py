"""The storage port is real: Queue reaches its database only through sqlq.backend.

* Nothing above the port imports a backend or a driver (read from the source with
  ``ast``): the command line and the demo included.
* The backend is chosen by the URL's scheme (sqlq.backends); a kind sqlq does not
  have yet, or does not know, is refused with InvalidConfig before anything opens.
* A Queue (and a Worker over it) works when its backend offers nothing but the
  members of the Backend protocol.
"""

from __future__ import annotations

import ast
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import sqlq
from sqlq import backends
from sqlq.backend import Backend
from sqlq.errors import ClockSkew, InvalidConfig, Unavailable
from sqlq.worker import Worker

PACKAGE = Path(sqlq.__file__).resolve().parent

#: Driver modules and the SQLite backend's package: only backends import them.
FORBIDDEN = ("sqlite3", "pysqlite3", "sqlq.sqlite")

#: Modules allowed for good: the SQLite backend itself, and the registry that names it.
BACKEND_SIDE = ("sqlite/", "backends.py")


def imported_modules(source: str, module: str) -> set[str]:
    """Every module the source of ``module`` (a dotted name) imports, anywhere in it,
    relative imports resolved; ``from a import b`` counts as both a and a.b."""
    package = module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package[: len(package) - node.level + 1] + (
                    [node.module] if node.module else []
                )
                base = ".".join(parts)
            else:
                base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def forbidden_imports(source: str, module: str) -> set[str]:
    return {
        name
        for name in imported_modules(source, module)
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN)
    }


def module_name(path: Path) -> str:
    """The dotted name of a file of sqlq, ``__init__`` kept: relative imports start
    from the package that holds the file."""
    return ".".join(("sqlq", *path.relative_to(PACKAGE).with_suffix("").parts))


def test_the_import_check_sees_every_form_of_import() -> None:
    source = (
        "import sqlite3\n"
        "def f():\n"
        "    from .sqlite.backend import SqliteBackend\n"
        "    from . import sqlite\n"
        "    import pysqlite3.dbapi2 as dbapi\n"
        "from .backend import Backend\n"
        "from ..sqlite import driver\n"
    )
    assert forbidden_imports(source, "sqlq.durable") == {
        "sqlite3",
        "sqlq.sqlite.backend",
        "sqlq.sqlite.backend.SqliteBackend",
        "sqlq.sqlite",
        "pysqlite3.dbapi2",
    }
    assert forbidden_imports(source, "sqlq.cli.common") >= {"sqlq.sqlite", "sqlq.sqlite.driver"}
    assert forbidden_imports("from .backend import Backend\nimport sqlalchemy\n", "sqlq.x") == set()


def test_nothing_above_the_port_imports_sqlite() -> None:
    offenders: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(BACKEND_SIDE):
            continue
        found = forbidden_imports(path.read_text(encoding="utf-8"), module_name(path))
        if found:
            offenders[relative] = found
    assert offenders == {}


# --- choosing the backend by URL ------------------------------------------------------


def _queue(location: str | os.PathLike[str], **options: Any) -> sqlq.Queue:
    return sqlq.Queue(location, lease_seconds=30, max_attempts=3, **options)


@pytest.mark.parametrize("spell", [str, Path, lambda path: f"sqlite:///{path}"])
def test_a_path_or_sqlite_url_opens_sqlite(tmp_path: Path, spell: Any) -> None:
    db = tmp_path / "q.db"
    with _queue(spell(db)) as q:
        assert q.add("t", 1) and q.reserve(2) == "t"
        assert q.engine.dialect.name == "sqlite"
        assert Path(q.engine.url.database or "") == db
    assert db.is_file()
    with _queue(db) as again:  # the same database, however it was named
        assert again.counts()["RESERVED"] == 1


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://user@/db?host=/nonexistent-sqlq-socket-dir",
        "postgresql+psycopg://user:secret@/db?host=/nonexistent-sqlq-socket-dir",
    ],
)
def test_a_postgresql_server_that_cannot_be_reached_is_unavailable(url: str) -> None:
    with pytest.raises(Unavailable) as caught:
        _queue(url)
    assert "secret" not in str(caught.value)
    assert isinstance(caught.value.__cause__, Exception)


@pytest.mark.parametrize("url", ["postgresql+psycopg2://u@h/db", "postgresql+asyncpg://u@h/db"])
def test_postgresql_drivers_other_than_psycopg_are_refused_without_connecting(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sa, "create_engine", _no_engine)
    with pytest.raises(InvalidConfig, match="psycopg 3"):
        _queue(url)


def _no_engine(*args: object, **kwargs: object) -> Any:
    raise AssertionError("no engine may be made for a refused URL")


@pytest.mark.parametrize("url", ["mysql://user@localhost/db", "oracle+oracledb://u@h/db"])
def test_an_unknown_scheme_is_refused_naming_the_known_ones(url: str) -> None:
    with pytest.raises(InvalidConfig, match="not supported") as caught:
        _queue(url)
    assert "sqlite:///" in str(caught.value) and "postgresql://" in str(caught.value)


def test_a_url_that_does_not_parse_is_refused() -> None:
    with pytest.raises(InvalidConfig, match="not a database URL"):
        _queue("://nowhere")


def test_an_option_the_backend_does_not_take_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidConfig,
        match=r"'synchronus'.*sqlite.*busy_timeout, file_mode, force_migration, migrate, synchr",
    ):
        _queue(tmp_path / "q.db", synchronus="normal")
    assert not (tmp_path / "q.db").exists()


def test_backend_options_pass_through_and_are_checked_there(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="synchronous must be 'full' or 'normal'"):
        _queue(tmp_path / "q.db", synchronous="off")
    with _queue(tmp_path / "q.db", synchronous="normal", busy_timeout=1, file_mode=0o640) as q:
        assert q.add("t", 1)
    assert (tmp_path / "q.db").stat().st_mode & 0o777 == 0o640


# --- Queue needs nothing but the port -------------------------------------------------

PORT = frozenset(name for name in vars(Backend) if not name.startswith("_"))


class PortOnly:
    """A backend showing nothing but the Backend protocol's members: anything else
    a Queue asked of it would raise AttributeError."""

    def __init__(self, inner: Backend) -> None:
        self._inner = inner
        self.asked: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name not in PORT:
            raise AttributeError(f"Queue reached past the port for {name!r}")
        self.asked.add(name)
        return getattr(self._inner, name)


@pytest.fixture
def port_only(monkeypatch: pytest.MonkeyPatch) -> list[PortOnly]:
    opened: list[PortOnly] = []
    sqlite = backends.KINDS["sqlite"]
    assert sqlite.open is not None
    real_open = sqlite.open

    def wrapped(location: Any, **options: Any) -> Any:
        opened.append(PortOnly(real_open(location, **options)))
        return opened[-1]

    monkeypatch.setitem(backends.KINDS, "sqlite", sqlite._replace(open=wrapped))
    return opened


def test_a_queue_uses_its_backend_through_the_port_alone(
    tmp_path: Path, port_only: list[PortOnly], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "q.db"
    q = _queue(db, synchronous="normal")
    [backend] = port_only
    with q.engine.begin() as conn:
        assert q.add("in-tx", conn=conn)
    assert q.add("t") and q.add_many(["u", "v"]) == [True, True]
    lease = q.claim()
    assert lease is not None and q.complete(lease.task_id, token=lease.token)
    assert q.ready() and q.snapshot().counts["AVAILABLE"] == 3 == q.counts()["AVAILABLE"]
    stats = q.stats()
    assert stats.counts["COMPLETED"] == 1 and stats.wal_bytes  # the -wal file's size
    assert not q.checkpoint().busy
    q.interrupt_waits(5)
    q.interrupt_waits(None)
    assert Worker(q, lambda payload: None).run(stop_when_idle=True).completed == 3
    q.close()
    # A system clock far off the backend's reference clock: refused, naming the database.
    other = _queue(db)
    monkeypatch.setattr(port_only[1]._inner, "clock_reference", lambda: time.time() - 3600)
    with pytest.raises(ClockSkew, match=re.escape(str(db.resolve()))):
        other.add("late")
    other.close()
    assert backend.asked | port_only[1].asked >= {
        "engine",
        "transaction",
        "ready",
        "counts",
        "snapshot",
        "storage_facts",
        "checkpoint",
        "interrupt_waits",
        "clock_reference",
        "name",
        "close",
    }
