"""The suite's own machinery (conftest.py, databases.py): a migrated copy is the database
a queue would have made, and the tests that start processes are found and marked."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import databases
import django_venv
import heavy
import pytest
import sqlalchemy as sa
from databases import migrated_sqlite_file, queue_options

import sqlq


def _schema(path: Path) -> dict[str, Any]:
    """What a file holds but its task rows: its objects, header fields and records."""
    pragmas = ("application_id", "user_version", "journal_mode")
    records = "SELECT version, name, checksum FROM sqlq_migrations"
    with sqlite3.connect(path) as conn:
        return {
            "objects": sorted(conn.execute("SELECT type, name, sql FROM sqlite_master")),
            "header": [conn.execute(f"PRAGMA {p}").fetchone() for p in pragmas],
            "migrations": sorted(conn.execute(records)),
            "tasks": conn.execute("SELECT count(*) FROM sqlq_tasks").fetchone(),
        }


def test_a_copy_of_the_migrated_file_is_the_database_a_queue_makes(tmp_path: Path) -> None:
    made = tmp_path / "made.db"
    url = f"sqlite:///{made}"
    sqlq.Queue(url, lease_seconds=1, max_attempts=1, **queue_options(url)).close()
    assert _schema(migrated_sqlite_file()) == _schema(made)


def _starts(path: str) -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def _starts_nothing() -> int:
    return len("nothing")


def _item(function: Any, fixtures: tuple[str, ...] = ()) -> Any:
    """A stand-in for a test item of a module (this one's name) holding the helpers."""
    module = types.ModuleType(__name__)
    module.__dict__.update(_starts=_starts, _starts_nothing=_starts_nothing)
    module.__dict__["fixture_that_starts"] = _starts
    return types.SimpleNamespace(function=function, module=module, fixturenames=fixtures)


def test_a_test_that_starts_a_process_through_a_helper_or_fixture_is_found() -> None:
    def through_a_helper() -> None:
        _starts("x")

    def through_a_lambda() -> None:
        (lambda: _starts("x"))()

    def plain() -> None:
        assert _starts_nothing() == 7

    assert heavy.spawns(_item(through_a_helper))
    assert heavy.spawns(_item(through_a_lambda))
    assert heavy.spawns(_item(plain, ("fixture_that_starts",)))
    assert not heavy.spawns(_item(plain))


def test_a_test_of_the_command_line_is_marked_by_conftest() -> None:
    """A test that runs `sqlq` in a subprocess, marked by nobody but conftest:
    -m 'not processes' leaves it out, and pytest-xdist takes it among the first."""
    tests = Path(__file__).resolve().parent
    found = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
         "-p", "no:cacheprovider", "-m", "processes", str(tests / "test_limits.py")],
        capture_output=True, text=True, check=False, cwd=tests.parent,
    )  # fmt: skip
    name = "test_the_cli_adds_grouped_tasks_and_sets_shows_and_removes_limits"
    assert f"test_limits.py::{name}[sqlite]" in found.stdout, found.stdout[-2000:]


def test_slow_then_heavy_tests_go_first_and_fault_tests_spread_among_the_light_ones() -> None:
    """... and the tests of the Django venv, built in the background from the start of
    the run, after the other heavy ones: the build has those minutes to finish."""

    def item(name: str, *marks: str, fixtures: tuple[str, ...] = ()) -> Any:
        return types.SimpleNamespace(
            name=name, get_closest_marker=lambda m: m in marks or None, fixturenames=fixtures
        )

    django = ("tmp_path", django_venv.FIXTURE)
    items = [
        item("d1", "processes", fixtures=django), item("p1", "processes"), item("l1"),
        item("f1", "faults"), item("l2"), item("s1", "slow"), item("l3"),
        item("f2", "faults", "processes"), item("l4"), item("d2", "processes", fixtures=django),
    ]  # fmt: skip
    ordered = [i.name for i in heavy.heavy_first(items)]
    assert ordered == ["s1", "p1", "d1", "d2", "f1", "l1", "l2", "f2", "l3", "l4"]


def _waiters(path: Path) -> int:
    """How many flock requests wait for ``path`` (the kernel's list: /proc/locks)."""
    inode = f":{path.stat().st_ino} "
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if " -> FLOCK " in line and inode in line)


def _until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs /proc/locks")
def test_a_waiting_fault_test_holds_back_the_heavy_tests_after_it(tmp_path: Path) -> None:
    """heavy.turn: a fault test (alone) that waits for a running heavy test runs next,
    before a heavy test that asks after it, which a shared lock alone would let in."""
    events: list[str] = []
    leave = {name: threading.Event() for name in ("heavy", "fault", "next")}

    def test(name: str, alone: bool) -> threading.Thread:
        def run() -> None:
            with heavy.turn(tmp_path, alone=alone):
                events.append(f"{name} in")
                leave[name].wait(10)
                events.append(f"{name} out")

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    threads = [test("heavy", alone=False)]
    _until(lambda: events == ["heavy in"], "the heavy test to start")
    threads.append(test("fault", alone=True))
    _until(lambda: _waiters(tmp_path / heavy.LOCK_NAME) == 1, "the fault test to wait")
    threads.append(test("next", alone=False))
    _until(
        lambda: _waiters(tmp_path / heavy.TURNSTILE_NAME) == 1 or "next in" in events,
        "the next one to wait or start",
    )
    assert events == ["heavy in"]  # the next one waits
    for name in leave:
        leave[name].set()
        _until(lambda name=name: f"{name} out" in events, f"the {name} test to end")  # type: ignore[misc]
    for thread in threads:
        thread.join(10)
    assert events == ["heavy in", "heavy out", "fault in", "fault out", "next in", "next out"]


def _contents(url: str) -> dict[str, Any]:
    """Every row of every table of the schema ``url`` uses, and its sequences' states."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as connection:
            run = connection.exec_driver_sql
            tables = run(
                "SELECT relname FROM pg_class WHERE relkind = 'r' "
                "AND relnamespace = current_schema()::regnamespace ORDER BY relname"
            ).scalars()
            found: dict[str, Any] = {
                t: sorted(map(repr, run(f"SELECT * FROM {t}"))) for t in tables
            }
            # when each migration ran differs between schemas; what ran does not
            found["sqlq_migrations"] = list(
                run("SELECT version, name, checksum FROM sqlq_migrations ORDER BY version")
            )
            found["sequences"] = list(
                run(
                    "SELECT sequencename, last_value FROM pg_sequences "
                    "WHERE schemaname = current_schema() ORDER BY 1"
                )
            )
            found["columns"] = run(
                "SELECT count(*) FROM information_schema.columns "
                "WHERE table_schema = current_schema()"
            ).scalar()
            return found
    finally:
        engine.dispose()


def test_a_pooled_schema_comes_back_as_the_migrations_left_it(postgres_url: str) -> None:
    """databases.migrated_schema: the schema a test wrote into is the next test's, holding
    what a new migrated schema holds (no task, the same seeded rows and sequences); one
    whose definition a test changed is dropped, and the next test gets another."""
    with databases.fresh_schema(postgres_url) as url:
        sqlq.Queue(url, lease_seconds=1, max_attempts=1).close()
        new = _contents(url)
    with databases.migrated_schema(postgres_url) as first:
        assert _contents(first) == new
        with sqlq.Queue(first, lease_seconds=1, max_attempts=1) as queue:
            queue.add_many([f"t{i}" for i in range(5)])
            assert queue.reserve() is not None
            queue.configure(lease_seconds=7)
        assert _contents(first) != new
    with databases.migrated_schema(postgres_url) as again:
        assert again == first
        assert _contents(again) == new
        engine = sa.create_engine(again, poolclass=sa.pool.NullPool)
        with engine.begin() as connection:
            connection.exec_driver_sql("ALTER TABLE sqlq_tasks ADD COLUMN extra INTEGER")
        engine.dispose()
    with databases.migrated_schema(postgres_url) as other:
        assert other != first
        assert _contents(other) == new
