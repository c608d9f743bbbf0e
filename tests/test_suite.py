"""The suite's own machinery (conftest.py, databases.py): a migrated copy is the database
a queue would have made, and the tests that start processes are found and marked."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import heavy
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


def test_heavy_tests_go_first_and_fault_tests_spread_among_the_light_ones() -> None:
    def item(name: str, *marks: str) -> Any:
        return types.SimpleNamespace(name=name, get_closest_marker=lambda m: m in marks or None)

    items = [
        item("p1", "processes"), item("l1"), item("f1", "faults"), item("l2"),
        item("s1", "slow"), item("l3"), item("f2", "faults", "processes"), item("l4"),
    ]  # fmt: skip
    ordered = [i.name for i in heavy.heavy_first(items)]
    assert ordered == ["p1", "s1", "f1", "l1", "l2", "f2", "l3", "l4"]
