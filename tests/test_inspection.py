"""Inspection and maintenance through the port: the last section of the Backend protocol.

What sqlq's commands ask of a database (its schema versions, an overview of every
queue, compacting, a backup), asked through sqlq.backends.open_backend and the
protocol alone, so that every backend can run these tests: ``database`` names a
new database of each kind that has a backend.  What only a database kept in a file
has (a backup into a file, sizes on disk) is tested where the kind keeps one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import databases
import pytest

import sqlq
from sqlq.backend import Backend
from sqlq.backends import database_file, open_backend
from sqlq.errors import Busy, InvalidArgument, InvalidConfig, NotASqlqDatabase, SchemaError
from sqlq.records import QueueOverview, SchemaVersions


@pytest.fixture
def database(new_url: Callable[[], str]) -> str:
    """A database of each kind that sqlq has a backend for, not created yet."""
    return new_url()


@contextmanager
def _opened(database: str, **options: object) -> Iterator[Backend]:
    backend = open_backend(database, **options)
    try:
        yield backend
    finally:
        backend.close()


def _queue(database: str, name: str = "default", **options: object) -> sqlq.Queue:
    return sqlq.Queue(database, lease_seconds=30, max_attempts=1, queue=name, **options)


HOLD_THE_WRITE_LOCK = """
import sys
import sqlq

with sqlq.Queue(sys.argv[1], lease_seconds=30, max_attempts=1) as q, q.engine.begin():
    print("locked", flush=True)
    sys.stdin.readline()
"""


@contextmanager
def _write_lock_held_by_another_process(database: str) -> Iterator[None]:
    """A process that holds the database's write lock (a transaction of its own on the
    queue's engine) until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_WRITE_LOCK, database],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "locked\n"
        if database_file(database) is not None:  # it holds it: a writer here gives up
            with pytest.raises(Busy), _queue(database, busy_timeout=0.05) as other:
                other.add("blocked")
        yield
    finally:
        holder.stdin.close()  # its readline returns: it commits nothing and exits
        assert holder.wait(60) == 0


# --- opening as it is, and the schema versions -------------------------------------------


def test_schema_versions_say_what_an_opening_found_and_left(database: str) -> None:
    with _opened(database) as backend:  # creates it
        versions = backend.schema_versions()
    assert versions.found == 0 and versions.current == versions.latest > 0
    with _opened(database) as backend:
        assert backend.schema_versions() == SchemaVersions(*[versions.latest] * 3)
    with _opened(database, migrate=False) as backend:
        assert backend.schema_versions() == SchemaVersions(*[versions.latest] * 3)


def test_the_migrate_option_is_a_bool(database: str) -> None:
    with pytest.raises(InvalidConfig, match="migrate must be True or False"):
        open_backend(database, migrate="no")


# SQLite's own: a database of an older schema.


def test_an_older_schema_opens_as_it_is_and_then_migrates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opened with migrate=False, a database of an older schema is left as it is and
    says so (a backup copies it so; the commands that need the current schema refuse
    it); opened to migrate, it says what it was."""
    from sqlq.sqlite import migrate

    db = tmp_path / "old.db"
    with monkeypatch.context() as m:
        first = migrate.migrations()[:1]
        m.setattr(migrate, "migrations", lambda: first)
        _queue(str(db)).close()
    latest = migrate.latest_version()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with _opened(str(db), migrate=False) as backend:
        assert backend.schema_versions() == SchemaVersions(1, 1, latest)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    with _opened(str(db)) as backend:
        assert backend.schema_versions() == SchemaVersions(1, latest, latest)


# --- the overview --------------------------------------------------------------------------


def _fill(database: str) -> None:
    """default: 'done' COMPLETED, 'held' RESERVED until 142, 'next' AVAILABLE since 102,
    'later' WAITING until 500 ('done' and 'next' named "mail"); other: 'x' DEAD
    (named "resize")."""
    with _queue(database) as q:
        q.add("done", 100, name="mail")
        q.add("held", 101)
        q.add("next", 102, name="mail")
        q.add("later", 103, run_at=500)
        lease = q.claim(110)
        assert lease is not None and q.complete("done", 111, token=lease.token)
        assert q.reserve(112) == "held"
    with _queue(database, "other") as q:
        q.add("x", 120, name="resize")
        assert q.reserve(121) == "x" and q.fail("x", 122) == "DEAD"


def test_overview_reads_every_queue_as_last_written_without_the_write_lock(
    database: str,
) -> None:
    _fill(database)
    with _opened(database, migrate=False) as backend, _write_lock_held_by_another_process(database):
        named = backend.overview(with_names=True)
        plain = backend.overview(with_names=False)
    assert named == {
        "default": QueueOverview(
            counts={"AVAILABLE": 1, "RESERVED": 1, "COMPLETED": 1, "WAITING": 1},
            available_since=102,
            next_deadline=142,  # long past by the wall clock: still RESERVED, as written
            next_run_at=500,
            names={"mail": {"AVAILABLE": 1, "COMPLETED": 1}},
        ),
        "other": QueueOverview({"DEAD": 1}, None, None, None, names={"resize": {"DEAD": 1}}),
    }
    assert plain == {queue: dataclasses.replace(o, names={}) for queue, o in named.items()}


def test_overview_of_a_database_without_tasks(database: str) -> None:
    _queue(database).close()
    with _opened(database, migrate=False) as backend:
        assert backend.overview(with_names=True) == {}


# --- maintenance -------------------------------------------------------------------------


def test_describe_names_the_database_software(database: str) -> None:
    with _opened(database) as backend:
        text = backend.describe()
    assert text and text.isprintable()
    if database_file(database) is not None:
        from sqlq.sqlite.driver import dbapi

        assert f"SQLite {dbapi.sqlite_version} " in text


def test_compact_gives_the_space_of_deleted_tasks_back(database: str) -> None:
    with _queue(database, synchronous="normal") as q:
        q.add_many([(f"t{i}", {"pad": "x" * 500}) for i in range(3000)])
        q.complete_many([(lease.task_id, lease.token) for lease in q.claim_many(3000)])
        q.add("keep")
        assert q.purge() == 3000
    with _opened(database, migrate=False) as backend:
        sizes = backend.compact()
        assert backend.overview(with_names=False)["default"].counts == {"AVAILABLE": 1}
    assert sizes.after < sizes.before / 10
    file = database_file(database)
    if file is not None:  # the sizes are the files': the database and its -wal
        assert sizes.after == os.path.getsize(file) and not os.path.exists(file + "-wal")


# --- backup (a copy into a file) -----------------------------------------------------------


@pytest.fixture
def filed(tmp_path: Path) -> str:
    """A database kept in a file (SQLite), for what only such a database has."""
    return str(tmp_path / "q.db")


def test_a_database_on_a_server_refuses_a_backup_into_a_file_naming_its_tools(
    postgres_url: str, tmp_path: Path
) -> None:
    with databases.fresh_schema(postgres_url) as url:
        _refuses_a_backup(url, tmp_path)


def _refuses_a_backup(url: str, tmp_path: Path) -> None:
    _fill(url)
    with _opened(url, migrate=False) as backend, pytest.raises(InvalidConfig, match="pg_dump"):
        backend.backup(str(tmp_path / "copy.db"))
    assert not (tmp_path / "copy.db").exists()


def test_a_backup_is_taken_while_another_process_holds_the_write_lock(
    filed: str, tmp_path: Path
) -> None:
    _fill(filed)
    dest = tmp_path / "copy.db"
    with _opened(filed, migrate=False) as backend, _write_lock_held_by_another_process(filed):
        size = backend.backup(str(dest))
        expected = backend.overview(with_names=True)
    assert size == dest.stat().st_size
    assert [p for p in os.listdir(tmp_path) if p.startswith("copy")] == ["copy.db"]  # no -wal
    with _opened(str(dest), migrate=False) as copy:
        assert copy.overview(with_names=True) == expected
    assert dest.stat().st_mode & 0o777 == Path(filed).stat().st_mode & 0o777


def test_a_backup_of_an_older_schema_is_a_copy_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlq.sqlite import migrate

    db, dest = tmp_path / "old.db", tmp_path / "copy.db"
    with monkeypatch.context() as m:
        first = migrate.migrations()[:1]
        m.setattr(migrate, "migrations", lambda: first)
        _queue(str(db)).close()
    with _opened(str(db), migrate=False) as backend:
        backend.backup(str(dest))
    with _opened(str(dest), migrate=False) as copy:
        assert copy.schema_versions().current == 1


@pytest.mark.parametrize("target", ["itself", "open", "foreign", "text"])
def test_a_backup_replaces_nothing_it_must_not(filed: str, tmp_path: Path, target: str) -> None:
    _fill(filed)
    dest = {
        "itself": Path(filed),
        "open": tmp_path / "open.db",
        "foreign": tmp_path / "other.db",
        "text": tmp_path / "notes.txt",
    }[target]
    if target == "open":  # a sqlq database with a -wal beside it: open as a queue
        _queue(str(dest)).close()
        Path(f"{dest}-wal").write_bytes(b"")
    elif target == "foreign":
        import sqlite3

        with sqlite3.connect(dest) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
        conn.close()
    elif target == "text":
        dest.write_text("keep me\n" * 100)
    with _opened(filed, migrate=False) as backend:
        files = _files(tmp_path)
        with pytest.raises(InvalidArgument if target in ("itself", "open") else NotASqlqDatabase):
            backend.backup(str(dest))
        assert _files(tmp_path) == files


def _files(folder: Path) -> dict[str, bytes]:
    """The files in ``folder`` and their bytes (but SQLite's shared-memory index, which
    readers write)."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.endswith("-shm")}


def test_a_queue_refuses_a_database_opened_as_it_is_at_an_older_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """migrate=False passes through Queue to the backend: the calls need the current
    tables, so an older schema is refused (unchanged) rather than used."""
    from sqlq.sqlite import migrate

    db = tmp_path / "old.db"
    with monkeypatch.context() as m:
        first = migrate.migrations()[:1]
        m.setattr(migrate, "migrations", lambda: first)
        _queue(str(db)).close()
    with pytest.raises(SchemaError, match="schema version 1, older"):
        _queue(str(db), migrate=False)
    with _opened(str(db), migrate=False) as backend:
        assert backend.schema_versions().current == 1
    with _queue(str(db)) as q:  # opened to migrate: brought up to date
        assert q.add("t")
