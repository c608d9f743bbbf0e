"""The `sqlq` command line: help, `sqlq stats`, the demo's guards, README coverage."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import sqlq
from sqlq import cli, demo
from sqlq.sqlite import driver

README = Path(__file__).resolve().parent.parent / "README.md"
SUBCOMMANDS = sorted(cli.subcommands())


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def _fill(path: Path) -> None:
    """Two queues with tasks in every state (leases long enough not to run out)."""
    with sqlq.Queue(path, lease_seconds=3600, max_attempts=1) as q:
        for i in range(7):
            q.add(f"d{i}")
        for _ in range(4):
            q.reserve()
        assert q.complete("d0") and q.complete("d1")
        assert q.fail("d2") == "DEAD"
    with sqlq.Queue(path, lease_seconds=3600, max_attempts=2, queue="emails") as q:
        for i in range(3):
            q.add(f"e{i}")
        q.reserve()


# --- help ---------------------------------------------------------------------------


def test_subcommands_are_demo_and_stats() -> None:
    assert SUBCOMMANDS == ["demo", "stats"]


def test_help_via_python_m() -> None:
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: sqlq")
    for name in SUBCOMMANDS:
        assert name in proc.stdout


def test_help_via_console_script() -> None:
    script = shutil.which("sqlq", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the sqlq console script is not installed next to this Python")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: sqlq")


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sqlq {name}")
    help_text = cli.build_parser().format_help()
    summary = cli.subcommands()[name].description
    assert summary and summary.split()[0] in out
    assert name in help_text  # listed, with its help line, in `sqlq --help`


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: sqlq" in capsys.readouterr().err


def test_readme_mentions_every_subcommand() -> None:
    text = README.read_text("utf-8")
    missing = [name for name in SUBCOMMANDS if f"sqlq {name}" not in text]
    assert not missing, f"README.md does not mention: {', '.join('sqlq ' + m for m in missing)}"


# --- sqlq stats ---------------------------------------------------------------------


def test_stats_prints_counts_per_queue_and_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "q.db"
    _fill(db)
    assert cli.main(["stats", str(db)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert f"database: {db}" in lines
    assert driver.describe() in out
    header = next(line for line in lines if line.startswith("queue"))
    assert header.split() == [
        "queue",
        "WAITING",
        "AVAILABLE",
        "RESERVED",
        "COMPLETED",
        "DEAD",
        "total",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines[lines.index(header) + 1 :]}
    assert rows == {
        "default": ["3", "1", "2", "1", "7"],
        "emails": ["2", "1", "0", "0", "3"],
    }


def test_stats_json_matches_queue_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "q.db"
    _fill(db)
    assert cli.main(["stats", str(db), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["database"] == str(db)
    assert document["sqlite"] == driver.describe()
    assert set(document["queues"]) == {"default", "emails"}
    for name, counts in document["queues"].items():
        with sqlq.Queue(db, lease_seconds=3600, max_attempts=1, queue=name) as q:
            assert counts == q.counts()


def test_stats_of_a_database_without_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "q.db"
    sqlq.Queue(db, lease_seconds=1, max_attempts=1).close()
    assert cli.main(["stats", str(db)]) == 0
    assert "no tasks" in capsys.readouterr().out
    assert cli.main(["stats", "--json", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["queues"] == {}


def test_stats_of_a_missing_file_is_exit_2_and_creates_nothing(tmp_path: Path) -> None:
    db = tmp_path / "missing.db"
    proc = _run("stats", str(db))
    assert proc.returncode == 2
    assert "no such file" in proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_stats_of_a_directory_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stats", str(tmp_path)]) == 2
    assert "directory" in capsys.readouterr().err


def test_stats_of_an_empty_file_is_refused_and_left_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    assert cli.main(["stats", str(db)]) == 1
    assert "empty" in capsys.readouterr().err
    assert db.stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


@pytest.mark.parametrize("kind", ["text", "foreign sqlite"])
def test_stats_of_a_file_that_is_not_a_sqlq_database_is_exit_1(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "other.db"
    if kind == "text":
        db.write_text("hello, I am not a database\n" * 100)
    else:
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
        sqlite3.connect(db).close()
    before = db.read_bytes()
    assert cli.main(["stats", str(db)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("sqlq stats: error:")
    assert "Traceback" not in captured.err
    assert db.read_bytes() == before


# --- sqlq demo (its guards; the demo itself runs in test_processes.py) ---------------


@pytest.mark.parametrize(
    "args",
    [["--tasks", "0"], ["--workers", "1"], ["--lease", "0"], ["--tasks", "many"]],
)
def test_demo_rejects_bad_arguments(
    args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.db"
    assert cli.main(["demo", "--db", str(db), *args]) == 2
    assert "usage: sqlq demo" in capsys.readouterr().err
    assert not db.exists()


def test_demo_does_not_delete_other_databases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "precious.db"
    _fill(db)
    assert cli.main(["demo", "--db", str(db)]) == 2
    assert "not deleting it" in capsys.readouterr().err
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=1) as q:
        assert q.counts()["AVAILABLE"] == 3


def test_demo_does_not_delete_other_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me\n" * 200)
    assert cli.main(["demo", "--db", str(path)]) == 2
    assert "not deleting it" in capsys.readouterr().err
    assert path.read_text() == "keep me\n" * 200


def test_remove_old_demo_deletes_the_demo_database_and_its_side_files(tmp_path: Path) -> None:
    db = tmp_path / "sqlq-demo.db"
    keep = tmp_path / "sqlq-demo.db.bak"
    keep.write_text("not a side file")
    with sqlq.Queue(db, lease_seconds=1, max_attempts=3, queue=demo.QUEUE) as q:
        q.add("task-001")
    (tmp_path / "sqlq-demo.db-wal").write_bytes(b"")
    (tmp_path / "sqlq-demo.db-shm").write_bytes(b"")
    assert demo.remove_old_demo(db)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sqlq-demo.db.bak"]
    assert not demo.remove_old_demo(db)  # nothing left to delete
