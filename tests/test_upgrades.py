"""A migration under running processes (issue 23, item 3): it is refused while the
worker registry shows live workers of an older schema (WorkersRunning, naming them),
unless forced; once the schema has changed, every process of this sqlq notices it
at its next call (SchemaChanged) and a worker stops, saying so.

A later sqlq's migration is simulated as it would run: this sqlq's migrations plus
one more (a new table), applied by the real migration runner in the test process,
which then knows version latest + 1, while the worker processes run this sqlq's code
unchanged.  Real worker processes (`sqlq worker`), on every durable backend."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from databases import kind, sqlite_only, sqlite_path

import sqlq
from sqlq.errors import SchemaChanged, WorkersRunning
from sqlq.migration_files import Migration
from sqlq.postgresql import migrate as pg_migrate
from sqlq.sqlite import migrate as sqlite_migrate
from sqlq.sqlite.driver import dbapi

TESTS = str(Path(__file__).resolve().parent)  # runner_handlers, for the worker processes
WAIT = 60.0  # seconds: the bound of every wait for an observable event


def _until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT:g}s for {what}")
        time.sleep(0.05)


@contextmanager
def _later_sqlq(url: str) -> Iterator[int]:
    """This process as a later sqlq would be: its migrations and one more; yields the
    version that one makes."""
    module = sqlite_migrate if kind(url) == "sqlite" else pg_migrate
    current = module.migrations()
    later = len(current) + 1
    sql = "CREATE TABLE sqlq_later (x integer);\n"
    extra = (
        sqlite_migrate.Migration(later, "later", sql)
        if kind(url) == "sqlite"
        else Migration(later, "later", sql)
    )
    with pytest.MonkeyPatch.context() as m:
        m.setattr(module, "migrations", lambda: (*current, extra))
        yield later


def _worker(url: str, handler: str, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "sqlq", "worker", url, f"runner_handlers:{handler}",
         "--summary-every", "0", *options],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": TESTS},
    )  # fmt: skip


def _ended(worker: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, stderr = worker.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        worker.kill()
        _, stderr = worker.communicate()
        raise AssertionError(f"the worker did not stop:\n{stderr}") from None
    return worker.returncode, stderr


def test_a_migration_under_a_live_worker_is_refused_then_forced_and_the_worker_stops(
    queue_url: str,
) -> None:
    with sqlq.Queue(queue_url) as q:
        q.add("slow", payload=3)  # runner_handlers.nap: 3 seconds
        worker = _worker(queue_url, "nap")
        try:
            _until(
                "the worker's claim and registry row",
                lambda: q.status("slow") == "RESERVED" and len(q.workers()) == 1,
            )
            (me,) = q.workers()
            assert me.pid == worker.pid and me.host == socket.gethostname()
        except BaseException:
            worker.kill()
            worker.communicate()
            raise
    with _later_sqlq(queue_url) as later:
        with pytest.raises(WorkersRunning) as refused:
            sqlq.Queue(queue_url)
        assert f"{me.host} pid {worker.pid} (sqlq {sqlq.__version__}, schema" in str(refused.value)
        assert refused.value.workers == [(me.host, worker.pid, sqlq.__version__, later - 1)]
        with sqlq.Queue(queue_url, force_migration=True) as q:  # migrated to `later`
            versions = q._backend.schema_versions()
            assert (versions.found, versions.current) == (later - 1, later)
    code, stderr = _ended(worker)
    assert code == 1, stderr
    assert f"the database was migrated to schema version {later} while this process" in stderr
    assert "stopping" in stderr
    assert "sqlq worker: error:" in stderr.splitlines()[-1]
    # its lease was reported: the task's outcome could not be stored, and the log says so
    assert "'slow'" in stderr and "lease runs out" in stderr


def test_a_queue_open_in_this_process_raises_schema_changed_at_its_next_call(
    queue_url: str,
) -> None:
    with sqlq.Queue(queue_url) as q:
        q.add("a")
        with _later_sqlq(queue_url) as later:
            sqlq.Queue(queue_url).close()  # migrates: no worker runs
        for call in (lambda: q.add("b"), q.reserve, lambda: q.status("a")):
            with pytest.raises(SchemaChanged, match=f"migrated to schema version {later}"):
                call()


def test_an_idle_worker_stops_at_its_next_heartbeat(queue_url: str) -> None:
    worker = _worker(queue_url, "fast", "--lease", "3")  # a heartbeat every second
    try:
        with sqlq.Queue(queue_url) as q:
            _until("the worker's registry row", lambda: len(q.workers()) == 1)
        with _later_sqlq(queue_url):
            sqlq.Queue(queue_url, force_migration=True).close()
    except BaseException:
        worker.kill()
        worker.communicate()
        raise
    code, stderr = _ended(worker)
    assert code == 1 and "the database was migrated to schema version" in stderr, stderr


def test_sqlq_migrate_refuses_under_live_workers_and_force_migrates(queue_url: str) -> None:
    worker = _worker(queue_url, "fast", "--lease", "3")  # a heartbeat every second
    try:
        with sqlq.Queue(queue_url) as q:
            _until("the worker's registry row", lambda: len(q.workers()) == 1)
        script = (
            "import sys, pytest, test_upgrades\n"
            "from sqlq.cli import main\n"
            "with test_upgrades._later_sqlq(sys.argv[1]):\n"
            "    sys.exit(main(['migrate', *sys.argv[1:]]))\n"
        )
        env = {**os.environ, "PYTHONPATH": TESTS}

        def migrate(*options: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-c", script, queue_url, *options],
                capture_output=True, text=True, timeout=WAIT, env=env,
            )  # fmt: skip

        refused = migrate()
        assert refused.returncode == 1, refused.stderr
        assert "live worker(s) of an older sqlq" in refused.stderr
        assert f"pid {worker.pid}" in refused.stderr and "--force" in refused.stderr
        forced = migrate("--force")
        assert forced.returncode == 0, forced.stderr
    except BaseException:
        worker.send_signal(signal.SIGTERM)
        worker.communicate()
        raise
    code, stderr = _ended(worker)
    assert code == 1 and "the database was migrated to schema version" in stderr, stderr


@sqlite_only
def test_workers_of_a_sqlq_before_the_registry_said_versions_stop_a_migration(
    queue_url: str,
) -> None:
    """A file at version 14, whose registry rows say no version: every live worker is
    of an older sqlq; a stale one is not counted."""
    path = sqlite_path(queue_url)
    with pytest.MonkeyPatch.context() as m:
        older = sqlite_migrate.migrations()[:14]
        m.setattr(sqlite_migrate, "migrations", lambda: older)
        sqlq.Queue(path).close()
    conn = dbapi.connect(path, isolation_level=None)
    far = time.time() + 3600
    conn.execute(
        "INSERT INTO sqlq_workers VALUES ('w1', 'default', 'old-host', 4242, 1, 0, 0, ?, '[]'),"
        " ('w2', 'default', 'gone-host', 17, 1, 0, 0, 1, '[]')",
        (far,),
    )
    conn.close()
    with pytest.raises(WorkersRunning) as refused:
        sqlq.Queue(path)
    assert refused.value.workers == [("old-host", 4242, "", 0)]
    assert "old-host pid 4242 (an older sqlq)" in str(refused.value)
    with sqlq.Queue(path, force_migration=True) as q:
        assert q._backend.schema_versions().found == 14
        assert q.add("t")


def test_opening_a_database_is_one_straight_path(new_url: Callable[[], str]) -> None:
    """Issue 26: a backend drives its opening (SQLite: resolve the path, check the
    files, connect, create or migrate or check the schema, keep the connection;
    PostgreSQL: connect, migrate or check) by calls into the modules below it, which
    return what the next step needs; none of them (migrate.py, files.py, driver.py,
    ...) calls back into the backend object.  A new database, an existing one, and
    one opened as it is (migrate=False)."""
    from types import FrameType
    from typing import Any

    from sqlq.backends import open_backend
    from sqlq.postgresql.backend import PostgresBackend
    from sqlq.sqlite.backend import SqliteBackend

    classes = (SqliteBackend, PostgresBackend)
    # Their own layers, and the registry above them that opens them.
    own = {cls.__module__ for backend in classes for cls in backend.__mro__} | {"sqlq.backends"}
    back: list[tuple[str, str]] = []

    def watch(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and isinstance(frame.f_locals.get("self"), classes):
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            if caller.startswith("sqlq.") and caller not in own:
                back.append((caller, frame.f_code.co_name))

    url = new_url()
    for options in ({}, {}, {"migrate": False}):
        sys.setprofile(watch)
        try:
            backend = open_backend(url, **options)
        finally:
            sys.setprofile(None)
        backend.close()
    assert back == []
