"""The `sqlq` command line: every subcommand against real databases made with sqlq.Queue.

Outputs are checked against what the Queue API says; --json output is parsed.
Files that are missing, empty, foreign or of another schema must come out of
every command exactly as they went in.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from needs import need

import sqlq
from sqlq import backends, cli, demo, humanize
from sqlq.cli import common, reading
from sqlq.sqlite import driver, migrate
from sqlq.sqlite.driver import dbapi

#: The how-to page of the command line (the reference is generated from the parsers).
COMMAND_LINE_PAGE = Path(__file__).resolve().parent.parent / "docs" / "how-to" / "command-line.md"
SUBCOMMANDS = sorted(cli.subcommands())
STATES = ["WAITING", "AVAILABLE", "RESERVED", "COMPLETED", "DEAD", "CANCELLED"]
LONG_ERROR = "ValueError: " + "x" * 100 + "\nsecond line of the error"


def _run(
    *args: str, cwd: Path | None = None, input: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        input=input,
        env=env,
    )


def _cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys: pytest.CaptureFixture[str], *args: object) -> Any:
    code, out, err = _cli(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def _fill(path: Path, clock: Callable[[], float] = time.time) -> None:
    """Two queues with tasks in every state (leases long enough not to run out), at
    the times ``clock`` gives.

    default: d0 d1 COMPLETED, d2 DEAD (with a long error), d3 RESERVED, d4 d5 d6
    AVAILABLE (d4 has a JSON payload and the name "resize", d5 a bytes payload).
    emails: e0 RESERVED, e1 e2 AVAILABLE (e1 and e2 named "mail"), e3 WAITING for
    an hour.
    """
    with sqlq.Queue(path, lease_seconds=3600, max_attempts=1, clock=clock) as q:
        for i in range(7):
            payload: Any = {"n": i, "tags": ["a", "b"]} if i == 4 else None
            name = "resize" if i == 4 else None
            q.add(f"d{i}", payload=b"\x00\x01binary" if i == 5 else payload, name=name)
        for _ in range(4):
            q.reserve()
        assert q.complete("d0") and q.complete("d1")
        assert q.fail("d2", error=LONG_ERROR) == "DEAD"
    with sqlq.Queue(path, lease_seconds=3600, max_attempts=2, queue="emails", clock=clock) as q:
        for i in range(3):
            q.add(f"e{i}", name=None if i == 0 else "mail")
        q.reserve()
        q.add("e3", delay=3600)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "q.db"
    _fill(path)
    return path


def _queue(path: Path, name: str = "default") -> sqlq.Queue:
    return sqlq.Queue(path, lease_seconds=3600, max_attempts=1, queue=name)


def _task_json(info: sqlq.TaskInfo, queue: str = "default") -> dict[str, Any]:
    """What --json must print for a task: every TaskInfo field, bytes as base64."""
    expected: dict[str, Any] = {"queue": queue, **dataclasses.asdict(info)}
    if isinstance(info.payload, bytes):
        expected["payload"] = base64.b64encode(info.payload).decode()
        expected["payload_type"] = "bytes"
    else:
        expected["payload_type"] = "none" if info.payload is None else "json"
    return expected


def _snapshot(path: Path) -> tuple[str, list[str]]:
    """The file's bytes (digest) and the names in its folder."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""
    return digest, sorted(p.name for p in path.parent.iterdir())


def _version_1(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sqlq database at schema version 1 with one task."""
    with monkeypatch.context() as m:
        first = migrate.migrations()[:1]
        m.setattr(migrate, "migrations", lambda: first)
        conn = dbapi.connect(str(path), isolation_level=None)
        migrate.ensure_schema(str(path), lambda: conn, mode=0o600, timeout=5)
        conn.execute(
            "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts, "
            "created_at, updated_at) VALUES ('default', 'old', 'AVAILABLE', 1, 0, 3, 0, 0)"
        )
        conn.execute("UPDATE sqlq_clock SET counter = 1")
        conn.close()
    assert migrate.latest_version() > 1


def _foreign(path: Path, kind: str) -> None:
    if kind == "text":
        path.write_text("hello, I am not a database\n" * 100)
    elif kind == "empty":
        path.touch()
    elif kind == "no tables":
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA user_version = 7")
        conn.close()
    elif kind == "empty sqlq_migrations":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute(
                "CREATE TABLE sqlq_migrations (version INTEGER PRIMARY KEY, name TEXT, "
                "checksum TEXT, applied_at REAL)"
            )
        conn.close()
    else:
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE notes (body TEXT)")
            conn.execute("INSERT INTO notes VALUES ('keep me')")
        conn.close()


# --- help -----------------------------------------------------------------------------------


def test_subcommands_are_the_documented_set() -> None:
    expected = ["add", "backup", "dead", "demo", "list", "migrate", "purge", "redrive", "show"]
    expected += ["schedules", "unschedule", "stats", "cancel", "pause", "resume", "limits"]
    expected += ["web", "metrics", "workers", "configure"]
    assert sorted([*expected, "worker"]) == SUBCOMMANDS


def test_help_via_python_m() -> None:
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: sqlq")
    for name in SUBCOMMANDS:
        # A name longer than argparse's column stands alone, its help on the next line.
        assert re.search(rf"^    {name}( |$)", proc.stdout, re.M), name


def test_help_via_console_script() -> None:
    script = shutil.which("sqlq", path=str(Path(sys.executable).parent))
    need(script, "the sqlq console script is not installed next to this Python")
    proc = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: sqlq")


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_subcommand_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: sqlq {name}")
    subparser = cli.subcommands()[name]
    summary = subparser.description
    assert summary and len(summary) > 80 and summary.split()[0] in out
    assert name in cli.build_parser().format_help()  # listed, with its help line
    for action in subparser._actions:  # every argument and option is explained
        assert action.help and len(action.help) > 10, (name, action.dest)


def test_the_prefetch_help_states_the_workers_batch() -> None:
    """`sqlq worker --help` states the default prefetch from the batch the Worker really uses."""
    from sqlq.worker import BATCH

    (prefetch,) = [a for a in cli.subcommands()["worker"]._actions if a.dest == "prefetch"]
    assert f"default: {BATCH} less --concurrency" in " ".join((prefetch.help or "").split())


@pytest.mark.parametrize("name", sorted(set(SUBCOMMANDS) - {"demo", "worker", "web", "metrics"}))
def test_every_command_that_prints_data_has_json(name: str) -> None:
    options = {o for a in cli.subcommands()[name]._actions for o in a.option_strings}
    assert "--json" in options
    if name not in ("stats", "schedules", "workers", "migrate", "backup"):  # the whole file
        assert "--queue" in options


def test_no_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: sqlq" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "hint"),
    [(["stats", "DB", "--jsn"], "did you mean --json?"),
     (["worker", "DB", "m:f", "--concurency", "2"], "did you mean --concurrency?"),
     (["purge", "DB", "--zzz"], "")],
)  # fmt: skip
def test_a_mistyped_option_prints_the_usage_of_its_subcommand(
    args: list[str], hint: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, *(str(db) if a == "DB" else a for a in args))
    assert (code, out) == (2, "")
    assert err.startswith(f"usage: sqlq {args[0]} ")
    bad = next(a for a in args if a.startswith("--"))
    assert f"sqlq {args[0]}: error: unrecognized arguments: {bad}" in err
    assert hint in err


def test_the_command_line_page_mentions_every_subcommand() -> None:
    text = COMMAND_LINE_PAGE.read_text("utf-8")
    missing = [name for name in SUBCOMMANDS if f"sqlq {name}" not in text]
    assert not missing, f"{COMMAND_LINE_PAGE.name} does not mention: " + ", ".join(
        "sqlq " + m for m in missing
    )


def test_the_command_line_page_has_a_row_per_subcommand() -> None:
    text = COMMAND_LINE_PAGE.read_text("utf-8")
    rows = re.findall(r"^\| `sqlq (\w+)", text, re.M)
    assert sorted(rows) == SUBCOMMANDS


# --- files that must be left alone ----------------------------------------------------------

NEEDS_DB = {
    "stats": [],
    "list": [],
    "show": ["d0"],
    "dead": [],
    "redrive": ["--all"],
    "purge": [],
    "cancel": ["d6"],
    "pause": [],
    "resume": [],
    "limits": [],
    "backup": ["copy.db"],
    "workers": [],
    "worker": ["somewhere.handlers:handle"],
}


@pytest.mark.parametrize("name", sorted(NEEDS_DB))
def test_a_missing_database_is_exit_2_and_is_not_created(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "missing.db"
    code, out, err = _cli(capsys, name, db, *NEEDS_DB[name])
    assert code == 2
    assert out == ""
    assert f"sqlq {name}: error:" in err and "no such file" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted({*NEEDS_DB, "add", "migrate"} - {"worker"}))
def test_every_command_takes_a_sqlite_url_as_the_queue_does(
    name: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A backup goes beside the database, not into the directory the tests run in.
    args = {**NEEDS_DB, "add": ["d0"], "migrate": [], "backup": [str(db.parent / "copy.db")]}[name]
    code, _, err = _cli(capsys, name, f"sqlite:///{db}", *args)
    assert code == 0, err


def test_a_url_the_queue_refuses_is_a_usage_error(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "stats", f"sqlite:///{db}?mode=ro")
    assert code == 2
    assert "sqlq stats: error:" in err and "may only name the file" in err


def test_stats_of_a_missing_file_via_python_m(tmp_path: Path) -> None:
    proc = _run("stats", str(tmp_path / "missing.db"))
    assert proc.returncode == 2
    assert "no such file" in proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["stats", "list", "migrate"])
def test_a_directory_is_exit_2(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, name, tmp_path)
    assert code == 2
    assert "directory" in err


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (name, kind)
        for name in [*sorted(NEEDS_DB), "add", "migrate"]
        for kind in ["text", "foreign sqlite", "empty", "no tables", "empty sqlq_migrations"]
        # the commands that create databases create one in an empty file (tested below)
        if not (name in ("add", "migrate") and kind == "empty")
    ],
)
def test_files_that_are_not_sqlq_databases_are_refused_untouched(
    name: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "other.db"
    _foreign(db, kind)
    before = _snapshot(db)
    extra = ["t1"] if name == "add" else NEEDS_DB.get(name, [])
    code, out, err = _cli(capsys, name, db, *extra)
    assert code == 1, err
    assert out == ""
    assert err.startswith(f"sqlq {name}: error:")
    assert any(
        words in err for words in ("not a sqlq database", "not a database", "not created by sqlq")
    ), err
    assert "Traceback" not in err
    assert _snapshot(db) == before
    if kind == "empty":
        assert "empty" in err


@pytest.mark.parametrize("name", ["stats", "list", "show", "dead"])
def test_inspecting_an_older_schema_is_refused_without_migrating(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.db"
    _version_1(db, monkeypatch)
    before = _snapshot(db)
    code, out, err = _cli(capsys, name, db, *(["old"] if name == "show" else []))
    assert code == 1
    assert out == ""
    assert "schema version 1" in err and f"sqlq migrate {db}" in err
    assert _snapshot(db) == before


def test_a_newer_schema_is_refused_by_every_command(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conn = dbapi.connect(str(db), isolation_level=None)
    conn.execute(
        "INSERT INTO sqlq_migrations VALUES (?, 'future', '', 0)", (migrate.latest_version() + 1,)
    )
    conn.close()
    before = _snapshot(db)
    for name, args in [*NEEDS_DB.items(), ("add", ["t"]), ("migrate", [])]:
        code, _, err = _cli(capsys, name, db, *args)
        assert code == 1, (name, err)
        assert "upgrade sqlq" in err, (name, err)
    assert _snapshot(db) == before


# --- sqlq stats -----------------------------------------------------------------------------


def _stats_tables(out: str) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """The counts table's header, its rows, and the rows of the second table, by queue."""
    blocks = out.split("\n\n")
    counts, details = blocks[1].splitlines(), blocks[2].splitlines()
    header = counts[0].split()
    rows = {line.split()[0]: line.split()[1:] for line in counts[1:]}
    return header, rows, {re.split(r"\s{2,}", ln)[0]: re.split(r"\s{2,}", ln) for ln in details}


#: The Unix time _fill's tasks are made at where a test shows times relative to now.
FILLED_AT = 1_700_000_000.0


def test_stats_prints_counts_per_queue_and_state(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    migration_files: list[Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Filled at FILLED_AT, shown one second later: exact ages and deadlines, whatever
    # the real clock does between the two (it once printed "in 1h" for "in 59m59s").
    db = tmp_path / "q.db"
    _fill(db, clock=lambda: FILLED_AT)
    shown_at = types.SimpleNamespace(time=lambda: FILLED_AT + 1)
    monkeypatch.setattr(reading, "time", shown_at)
    code, out, _ = _cli(capsys, "stats", db)
    assert code == 0
    lines = out.splitlines()
    assert f"database: {db}" in lines
    assert driver.describe() in out
    assert f"schema:   version {len(migration_files)}" in lines
    header, rows, details = _stats_tables(out)
    assert header == ["queue", *STATES, "total"]
    assert rows == {
        "default": ["0", "3", "1", "2", "1", "0", "7"],
        "emails": ["1", "2", "1", "0", "0", "0", "4"],
    }
    assert details["queue"] == [
        "queue",
        "oldest available",
        "leases",
        "next deadline",
        "next run_at",
        "claims",
    ]
    assert details["default"] == ["default", "1.0s", "1", "in 59m59s", "-", "-"]
    assert details["emails"] == ["emails", "1.0s", "1", "in 59m59s", "in 59m59s", "-"]
    named = out.split("\n\n")[3].splitlines()  # the named tasks per queue and name
    assert [line.split() for line in named] == [
        ["queue", "name", *STATES, "total"],
        ["default", "resize", "0", "1", "0", "0", "0", "0", "1"],
        ["emails", "mail", "0", "2", "0", "0", "0", "0", "2"],
    ]


def test_stats_json_gives_every_figure(
    db: Path, capsys: pytest.CaptureFixture[str], migration_files: list[Path]
) -> None:
    before = time.time()
    document = _json(capsys, "stats", db)
    assert document["database"] == str(db)
    assert document["sqlite"] == driver.describe()
    assert document["schema_version"] == len(migration_files)
    wal = Path(f"{db}-wal")
    assert document["wal_bytes"] == (wal.stat().st_size if wal.exists() else 0)
    assert before <= document["now"] <= time.time()
    # What _fill made, per state: WAITING, AVAILABLE, RESERVED, COMPLETED, DEAD, CANCELLED.
    assert document["queues"] == {
        "default": dict(zip(STATES, [0, 3, 1, 2, 1, 0], strict=True)),
        "emails": dict(zip(STATES, [1, 2, 1, 0, 0, 0], strict=True)),
    }
    assert document["names"] == {  # named tasks per queue, name and state
        "default": {"resize": {"AVAILABLE": 1}},
        "emails": {"mail": {"AVAILABLE": 2}},
    }
    conn = dbapi.connect(str(db))  # the times, read by the test's own SQL
    times = conn.execute(
        "SELECT queue, max(deadline), max(run_at), min(updated_at) FILTER (WHERE state = "
        "'AVAILABLE') FROM sqlq_tasks GROUP BY queue"
    ).fetchall()
    conn.close()
    for name, deadline, run_at, available_since in times:
        details = document["stats"][name]
        assert details["total"] == {"default": 7, "emails": 4}[name]
        assert details["leases"] == 1
        assert details["next_deadline"] == deadline
        assert details["next_run_at"] == run_at
        assert details["paused"] is False
        age = document["now"] - available_since
        assert details["oldest_available_age"] == pytest.approx(age, abs=1e-6)


def test_stats_reads_only_and_shows_overdue_leases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=10, max_attempts=3) as q:
        q.add("a", now=1000)
        q.reserve(now=1000)  # its lease ran out long ago by the wall clock
    conn = dbapi.connect(str(db))
    tables = "SELECT * FROM sqlq_tasks", "SELECT * FROM sqlq_clock"
    rows_before = [conn.execute(sql).fetchall() for sql in tables]
    code, out, _ = _cli(capsys, "stats", db)
    assert code == 0
    _, rows, details = _stats_tables(out)
    assert rows["default"][2] == "1"  # RESERVED, as last written
    assert details["default"][3].endswith("ago (overdue)")
    assert _json(capsys, "stats", db)["stats"]["default"]["next_deadline"] == 1010
    assert [conn.execute(sql).fetchall() for sql in tables] == rows_before
    conn.close()
    with _queue(db) as q:  # the next call on the queue releases the lease
        assert q.status("a") == "AVAILABLE"


def test_stats_watch_stops_after_count_reads(db: Path) -> None:
    proc = _run("stats", f"sqlite:///{db}", "--watch", "--count", "3", "--interval", "10ms")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [re.sub(r"^\[[\d:]+\] ", "", line).split(":")[0] for line in lines] == [
        "default",
        "emails",
    ] * 3
    assert "AVAILABLE 3, RESERVED 1" in lines[0] and "(+" not in lines[0]  # no rate yet
    assert "AVAILABLE 3 (+0.0/s), RESERVED 1" in lines[-2]


def test_stats_watch_is_for_people_not_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "stats", db, "--watch", "--json")
    assert code == 2 and "--watch prints lines for people" in err


@pytest.mark.parametrize("option", [["--count", "3"], ["--interval", "1s"]])
def test_stats_options_of_watch_are_refused_without_it(
    db: Path, capsys: pytest.CaptureFixture[str], option: list[str]
) -> None:
    code, out, err = _cli(capsys, "stats", db, *option)
    assert (code, out) == (2, "") and "--interval and --count go with --watch" in err


@contextlib.contextmanager
def _watching(db: Path) -> Iterator[tuple[subprocess.Popen[str], Callable[..., str]]]:
    """``sqlq stats DB --watch`` as a process reading every 50 ms, and a function that
    reads its lines until one holds any of the texts given (killed after 120 s)."""
    watch = subprocess.Popen(
        [sys.executable, "-m", "sqlq", "stats", str(db), "--watch", "--interval", "50ms"],
        stdout=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(120, watch.kill)
    watchdog.start()
    assert watch.stdout is not None

    def line_with(*texts: str) -> str:
        for line in watch.stdout:  # type: ignore[union-attr]
            if any(text in line for text in texts):
                return line
        raise AssertionError(f"the watch ended before it printed any of {texts}")

    try:
        yield watch, line_with
    finally:
        watchdog.cancel()
        if watch.poll() is None:
            watch.kill()


@pytest.mark.processes
def test_stats_watch_shows_rates_and_a_progress_bar_while_a_backlog_drains(
    tmp_path: Path,
) -> None:
    """The watch runs as a process; this one drains the queue in steps and reads the
    watch's lines until each step shows (no timing: the watch reads every 50 ms)."""
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=1) as q:
        q.add_many([f"t{i}" for i in range(100)])
    with _watching(db) as (watch, line_with):

        def available(count: int) -> str:
            return line_with(f"AVAILABLE {count},", f"AVAILABLE {count} (")

        first = available(100)
        assert "%" not in first and "oldest available" in first
        seen = []
        with sqlq.Queue(db, lease_seconds=3600, max_attempts=1) as q:
            for left in (60, 20, 0):
                q.complete_many(q.claim_many(q.counts()["AVAILABLE"] - left))
                seen.append(available(left))
        watch.send_signal(signal.SIGINT)  # Ctrl-C: the way to stop watching
        assert watch.wait(30) == 0
    assert re.search(r"AVAILABLE 60 \(-\d+\.\d/s\)", seen[0])
    assert "[########------------] 40% ETA " in seen[0]
    assert "[################----] 80% ETA " in seen[1]
    assert "[####################] 100% drained" in seen[2]


@pytest.mark.processes
def test_stats_watch_reads_a_file_that_replaced_the_one_it_watched(tmp_path: Path) -> None:
    """A restore replaces the database under a running watch: the watch says so and shows
    the new file's counts, and says when the path names no file (no timing: it reads
    every 50 ms and this test waits for its lines)."""
    db, other = tmp_path / "q.db", tmp_path / "restored.db"
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=1) as q:
        q.add_many(["a", "b", "c"])
    with sqlq.Queue(other, lease_seconds=3600, max_attempts=1) as q:
        q.add_many([f"r{i}" for i in range(7)])
    with _watching(db) as (watch, line_with):
        line_with("AVAILABLE 3,")
        db.unlink()
        line_with("no such file (waiting for it)")
        os.replace(other, db)
        assert "was replaced: reading the new file" in line_with("was replaced")
        assert "(" not in line_with("AVAILABLE 7").split(";")[0]  # no rate across two files
        watch.send_signal(signal.SIGINT)
        assert watch.wait(30) == 0


def test_stats_of_a_database_without_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "q.db"
    sqlq.Queue(db, lease_seconds=1, max_attempts=1).close()
    assert cli.main(["stats", str(db)]) == 0
    assert "no tasks" in capsys.readouterr().out
    document = _json(capsys, "stats", db)
    assert document["queues"] == document["stats"] == {}


# --- sqlq add -------------------------------------------------------------------------------


def test_add_ids_with_a_payload_skips_existing_ones(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "add", db, "n1", "n2", "d0", "--payload", '{"k": [1, 2]}')
    assert code == 0
    assert out == "added 2 tasks to queue 'default'; 1 already existed\n"
    document = _json(capsys, "add", db, "n2", "n3", "--queue", "emails", "--max-attempts", "7")
    assert document == {
        "database": str(db),
        "queue": "emails",
        "created": False,
        "added": 2,
        "existed": 0,
    }
    with _queue(db) as q:
        n1 = q.info("n1")
        assert n1 is not None and n1.payload == {"k": [1, 2]}
        assert n1.state == "AVAILABLE" and n1.max_attempts == 5  # the default
        assert q.info("d0").state == "COMPLETED"  # type: ignore[union-attr]
    with _queue(db, "emails") as q:
        n3 = q.info("n3")
        assert n3 is not None and n3.payload is None and n3.max_attempts == 7


def test_add_creates_a_missing_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "new.db"
    code, out, _ = _cli(capsys, "add", db, "a")
    assert code == 0
    assert out.splitlines() == [
        f"created {db}",
        "added 1 task to queue 'default'; 0 already existed",
    ]
    with _queue(db) as q:
        assert q.counts()["AVAILABLE"] == 1
    code, _, err = _cli(capsys, "add", tmp_path / "no" / "such" / "folder.db", "a")
    assert code == 2 and "no such folder" in err
    assert not (tmp_path / "no").exists()


def test_add_creates_the_database_in_an_empty_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file is a database not created yet: add creates it as in a missing
    path; the commands that do not create databases refuse it."""
    db = tmp_path / "empty.db"
    db.touch()
    code, _, err = _cli(capsys, "list", db)
    assert code == 1 and "empty" in err
    assert _json(capsys, "add", db, "a")["added"] == 1
    assert _cli(capsys, "list", db)[0] == 0
    with _queue(db) as q:
        assert q.counts()["AVAILABLE"] == 1


@pytest.mark.processes
def test_concurrent_adds_on_a_new_file_all_succeed(tmp_path: Path) -> None:
    """12 `sqlq add NEW.db id` processes at once: whichever creates the file, the
    others wait for it and add their task; none finds the file half made."""
    for round_ in range(3):
        db = tmp_path / f"new-{round_}.db"
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "sqlq", "add", str(db), f"id-{i}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(12)
        ]
        outcomes = [(p.communicate(timeout=120)[1], p.returncode) for p in procs]
        failed = [err for err, code in outcomes if code != 0]
        assert not failed, f"round {round_}: {len(failed)} of 12 failed: {failed[0]}"
        with _queue(db) as q:
            assert sorted(t.task_id for t in q.tasks()) == sorted(f"id-{i}" for i in range(12))


def _has_open(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux's /proc)."""
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}") == path for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:  # it exited meanwhile
        return False


@pytest.mark.processes
def test_a_reader_waits_for_a_database_another_process_is_creating(tmp_path: Path) -> None:
    """`sqlq stats` finds the file empty while its creator holds the migration lock:
    it waits for the creation to end and shows the database, instead of refusing
    the file as empty."""
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to see the reader waiting")
    made = tmp_path / "made.db"
    with _queue(made) as q:
        q.add("a")
    db = tmp_path / "new.db"
    db.touch()
    lock = f"{db}.migrate-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # this test is "creating" the database
        reader = subprocess.Popen(
            [sys.executable, "-m", "sqlq", "stats", "--json", str(db)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while reader.poll() is None and not _has_open(reader.pid, lock):  # found it empty
            assert time.monotonic() < deadline, "the reader never waited for the lock"
            time.sleep(0.01)
        db.write_bytes(made.read_bytes())  # the creation ends
    finally:
        os.close(fd)
    out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    assert json.loads(out)["queues"]["default"]["AVAILABLE"] == 1


def test_add_migrates_an_older_sqlq_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "old.db"
    _version_1(db, monkeypatch)
    assert _json(capsys, "add", db, "new", "old")["added"] == 1
    with _queue(db) as q:
        assert [t.task_id for t in q.tasks()] == ["old", "new"]


def test_add_with_delay_or_run_at_is_waiting(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = time.time()
    assert _cli(capsys, "add", db, "later", "--delay", "120")[0] == 0
    assert _cli(capsys, "add", db, "at", "--run-at", "4000000000")[0] == 0
    with _queue(db) as q:
        later, at = q.info("later"), q.info("at")
    assert later is not None and later.state == "WAITING" and later.run_at is not None
    assert before + 120 <= later.run_at <= time.time() + 120
    assert at is not None and at.state == "WAITING" and at.run_at == 4_000_000_000
    code, _, err = _cli(capsys, "add", db, "x", "--delay", "1", "--run-at", "5")
    assert code == 2 and "not allowed with" in err


@pytest.mark.parametrize(
    ("policy", "waits"),
    [("immediate", [0, 0]), ("fixed:30s", [30, 30]), ("exponential:1m:90s:no-jitter", [60, 90])],
)
def test_add_stores_a_retry_policy(
    policy: str, waits: list[float], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "q.db"
    code, _, err = _cli(capsys, "add", db, "t", "--retry", policy, "--max-attempts", "3")
    assert code == 0, err
    with _queue(db) as q:
        for wait in waits:
            info = q.info("t")
            assert info is not None
            lease = q.claim(info.run_at)  # when it wakes (None: now)
            assert lease is not None
            q.fail("t", token=lease.token)
            info = q.info("t")
            assert info is not None
            assert info.run_at == (info.updated_at + wait if wait else None)


@pytest.mark.parametrize(
    "policy", ["sometimes", "fixed", "fixed:x", "exponential:1m:1s", "fixed:1:2"]
)
def test_add_refuses_a_bad_retry_policy(
    policy: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "add", db, "t", f"--retry={policy}")
    assert code == 2
    assert "usage: sqlq add" in err and "--retry" in err
    with _queue(db) as q:
        assert q.status("t") is None


def test_add_payload_file_as_json_or_raw_bytes(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "payload.json"
    source.write_text('{"photo": "p.jpg", "sizes": [64, 128]}\n')
    assert _cli(capsys, "add", db, "j", "--payload-file", source)[0] == 0
    blob = tmp_path / "payload.bin"
    blob.write_bytes(bytes(range(256)))
    assert _cli(capsys, "add", db, "b", "--payload-file", blob, "--raw")[0] == 0
    with _queue(db) as q:
        assert q.info("j").payload == {"photo": "p.jpg", "sizes": [64, 128]}  # type: ignore[union-attr]
        assert q.info("b").payload == bytes(range(256))  # type: ignore[union-attr]
    code, _, err = _cli(capsys, "add", db, "c", "--payload-file", blob)
    assert code == 2 and "not UTF-8" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--payload", "{oops"], "not valid JSON"),
        (["--payload-file", "/no/such/file"], "No such file"),
        (["--raw"], "--raw goes with --payload-file"),
        (["--from-file", "/no/such/file"], "No such file"),
        (["--delay", "-1"], "must be at least 0"),
    ],
)
def test_add_refuses_bad_input_with_exit_2_and_changes_nothing(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "new.db"
    code, out, err = _cli(capsys, "add", db, "t1", *args)
    assert code == 2
    assert out == ""
    assert message in err
    assert not db.exists()


def test_add_needs_ids_or_a_file(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "add", db)
    assert code == 2
    assert "usage: sqlq add" in err and "give at least one TASK_ID" in err


def test_add_of_an_invalid_id_is_a_sqlq_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "new.db"
    code, _, err = _cli(capsys, "add", db, "ok", "x" * 2000)
    assert code == 1
    assert "sqlq add: error: TASK_ID:" in err and "limit" in err
    assert not db.exists()  # refused before the database was created
    _fill(db)
    code, _, err = _cli(capsys, "add", db, "ok", "")
    assert code == 1 and "must not be empty" in err
    with _queue(db) as q:
        assert q.info("ok") is None  # refused whole


def test_add_from_a_file_with_an_invalid_id_names_the_lines(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ids.txt"
    source.write_text("h1\n" + "h2\n" + "y" * 2000 + "\n")
    code, _, err = _cli(capsys, "add", db, "--from-file", source)
    assert code == 1
    assert f"{source}, lines 1-3:" in err and "nothing was added" in err
    with _queue(db) as q:
        assert q.info("h1") is None  # its batch was refused whole


def test_add_from_a_big_file_in_batches_with_progress(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "PROGRESS_SECONDS", 0.0)
    lines = []
    for i in range(2500):
        if i % 3 == 0:
            lines.append(json.dumps({"id": f"f{i}", "payload": {"i": i}}))
        elif i % 3 == 1:
            lines.append(f"  f{i}  ")
        else:
            lines.append(json.dumps({"id": f"f{i}"}))
        if i % 500 == 0:
            lines.append("")
    lines.append("d0")  # exists already
    source = tmp_path / "ids.txt"
    source.write_text("\n".join(lines) + "\n")
    code, out, err = _cli(capsys, "add", db, "first", "--from-file", source, "--payload", '"dflt"')
    assert code == 0, err
    assert out == "added 2501 tasks to queue 'default'; 1 already existed\n"
    progress = [ln for ln in err.splitlines() if ln.startswith("sqlq add: ")]
    assert len(progress) >= 2 and progress[-1].startswith("sqlq add: 2502 tasks so far")
    with _queue(db) as q:
        added = q.tasks(limit=10_000)
    ids = [t.task_id for t in added]
    assert ids[7:] == ["first", *(f"f{i}" for i in range(2500))]  # the order of the file
    payloads = {t.task_id: t.payload for t in added}
    assert payloads["f0"] == {"i": 0}
    assert payloads["f1"] == "dflt" and payloads["f2"] == "dflt" and payloads["first"] == "dflt"


def test_add_from_stdin(db: Path) -> None:
    proc = _run(
        "add", str(db), "--from-file", "-", "--json", input='s1\n{"id": "s2", "payload": 5}\n'
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["added"] == 2
    with _queue(db) as q:
        assert q.info("s2").payload == 5  # type: ignore[union-attr]


def test_add_from_a_file_with_a_bad_line_keeps_the_lines_before_it(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ids.txt"
    source.write_text('g1\ng2\n{"id": "g3", "colour": "red"}\ng4\n')
    code, out, err = _cli(capsys, "add", db, "--from-file", source)
    assert code == 2
    assert out == ""
    assert f"{source}, line 3:" in err and "the tasks before it were added (2 new" in err
    with _queue(db) as q:
        assert q.info("g2") is not None and q.info("g4") is None


# --- sqlq list ------------------------------------------------------------------------------


def test_list_shows_the_tasks_in_the_order_added(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "list", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["task_id", "name", "state", "attempts", "progress", "last_error"]
    assert [ln.split()[:4] for ln in lines[1:]] == [  # what _fill made
        ["d0", "-", "COMPLETED", "1/1"],
        ["d1", "-", "COMPLETED", "1/1"],
        ["d2", "-", "DEAD", "1/1"],
        ["d3", "-", "RESERVED", "1/1"],
        ["d4", "resize", "AVAILABLE", "0/1"],
        ["d5", "-", "AVAILABLE", "0/1"],
        ["d6", "-", "AVAILABLE", "0/1"],
    ]
    dead_line = next(ln for ln in lines if ln.startswith("d2 "))
    assert "ValueError: xxx" in dead_line and dead_line.endswith("...")
    assert "second line" not in out  # shortened to one line in the table


def test_list_json_matches_the_queue_api(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, "list", db, "--queue", "emails")
    with _queue(db, "emails") as q:
        expected = [_task_json(t, "emails") for t in q.tasks()]
    assert document == {
        "database": str(db),
        "queue": "emails",
        "state": None,
        "limit": 100,
        "tasks": expected,
    }
    assert [(t["task_id"], t["state"], t["attempts"]) for t in document["tasks"]] == [
        ("e0", "RESERVED", 1),
        ("e1", "AVAILABLE", 0),
        ("e2", "AVAILABLE", 0),
        ("e3", "WAITING", 0),
    ]
    document = _json(capsys, "list", db, "--state", "dead")
    assert [t["task_id"] for t in document["tasks"]] == ["d2"]
    assert document["tasks"][0]["last_error"] == LONG_ERROR  # in full
    document = _json(capsys, "list", db, "--state", "AVAILABLE", "--limit", "2")
    assert [t["task_id"] for t in document["tasks"]] == ["d4", "d5"]
    assert document["tasks"][1]["payload"] == base64.b64encode(b"\x00\x01binary").decode()


def test_list_says_when_there_is_more_or_nothing(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "list", db, "--limit", "3")
    assert code == 0
    assert out.splitlines()[-1] == "(the first 3 tasks; --limit N shows more)"
    assert _cli(capsys, "list", db, "--queue", "nobody")[1] == "no tasks in queue 'nobody'\n"
    code, _, err = _cli(capsys, "list", db, "--state", "LOST")
    assert code == 2 and "not a state" in err
    assert _cli(capsys, "list", db, "--limit", "0")[0] == 2


# --- sqlq show ------------------------------------------------------------------------------


def test_show_prints_every_field(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "show", db, "d4")
    assert code == 0
    names = [ln.split(":")[0] for ln in out.splitlines() if not ln.startswith(" ")]
    fields = [f.name for f in dataclasses.fields(sqlq.TaskInfo)]
    assert set(fields) <= set(names) and "queue" in names
    assert '"tags": [' in out  # the payload, pretty-printed
    assert re.search(r"^name:         resize$", out, re.M)
    code, out, _ = _cli(capsys, "show", db, "d5")
    assert "payload:      8 bytes of binary data" in out
    code, out, _ = _cli(capsys, "show", db, "d2")
    assert "second line of the error" in out  # the last error in full
    assert re.search(r"^finished_at:  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(", out, re.M)


@pytest.mark.parametrize("task_id", ["d2", "d3", "d4", "d5", "d6"])
def test_show_json_matches_the_queue_api(
    task_id: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _json(capsys, "show", db, task_id)
    with _queue(db) as q:
        info = q.info(task_id)
    assert info is not None
    assert document == {"database": str(db), **_task_json(info)}


def test_show_of_an_unknown_task_is_exit_1(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(capsys, "show", db, "e1")  # in another queue
    assert code == 1
    assert out == ""
    assert err == "sqlq show: error: no task 'e1' in queue 'default'\n"
    assert _json(capsys, "show", db, "e1", "--queue", "emails")["state"] == "AVAILABLE"


# --- sqlq dead / redrive --------------------------------------------------------------------


def test_dead_lists_dead_letters(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "dead", db)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["task_id", "name", "attempts", "died", "last_error"]
    assert lines[1].split()[:3] == ["d2", "-", "1/1"] and "ValueError: xxx" in lines[1]
    document = _json(capsys, "dead", db)
    with _queue(db) as q:
        assert document["tasks"] == [_task_json(t) for t in q.dead()]
    assert _cli(capsys, "dead", db, "--queue", "emails")[1] == "no dead tasks in queue 'emails'\n"


def test_redrive_given_ids_or_all(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=1) as q:
        q.add_many(["a", "b", "c", "live"])
        for task in ("a", "b", "c"):
            assert q.reserve() == task
            q.fail(task)
    code, out, _ = _cli(capsys, "redrive", db, "a", "live", "b")
    assert code == 0
    assert out == (
        "redrove 2 dead tasks back to the line of queue 'default' (1 given id not DEAD, skipped)\n"
    )
    assert _json(capsys, "redrive", db, "--all") == {
        "database": str(db),
        "queue": "default",
        "redriven": 1,
        "skipped": None,
    }
    with _queue(db) as q:
        assert q.counts()["DEAD"] == 0
        assert [(t.task_id, t.attempts) for t in q.tasks(state="AVAILABLE")] == [
            ("a", 0),
            ("b", 0),
            ("c", 0),
            ("live", 0),
        ]
        assert [q.reserve() for _ in range(4)] == ["live", "a", "b", "c"]  # the line's order
    assert _json(capsys, "redrive", db, "--all")["redriven"] == 0


def test_redrive_of_an_unknown_id_is_exit_1_and_redrives_nothing(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, "redrive", db, "d2", "nope")
    assert (code, out) == (1, "")
    assert "sqlq redrive: error: no task 'nope' in queue 'default'; nothing was redriven" in err
    with _queue(db) as q:
        assert q.status("d2") == "DEAD"


@pytest.mark.parametrize("args", [[], ["a", "--all"]])
def test_redrive_needs_ids_or_all(
    args: list[str], db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "redrive", db, *args)
    assert code == 2
    assert "usage: sqlq redrive" in err
    with _queue(db) as q:
        assert q.counts()["DEAD"] == 1


# --- sqlq purge -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("45", 45), ("1.5", 1.5), ("45s", 45), ("30m", 1800), ("12h", 43200), ("7d", 604800),
     ("1h30m", 5400), ("2w", 1209600), ("0", 0), ("250ms", 0.25), ("1m30s", 90)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert common.duration(text) == seconds


@pytest.mark.parametrize("text", ["", "7x", "d", "-5", "1h 2", "nan", "inf", "1e30"])
def test_bad_durations(text: str, db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "purge", db, f"--older-than={text}")
    assert code == 2
    assert "--older-than" in err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--delay", "10m"), ("--delay", "1.5h"), ("--delay", "90")],
)
def test_add_takes_a_duration(
    option: str, value: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "add", db, "later", option, value)
    assert code == 0, err
    with _queue(db) as q:
        info = q.info("later")
        assert info is not None and info.run_at is not None
        assert info.run_at - info.created_at == pytest.approx(common.duration(value))


@pytest.mark.parametrize("option", ["--lease", "--time-limit", "--grace", "--busy-timeout"])
def test_every_worker_option_in_seconds_takes_a_duration(option: str) -> None:
    args = cli.build_parser().parse_args(["worker", "db", "mod:fn", option, "1.5m"])
    assert getattr(args, option[2:].replace("-", "_")) == 90


@pytest.mark.parametrize("value", ["10x", "-1m"])
def test_a_refused_duration_says_how_to_write_one(
    value: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "add", db, "t", f"--delay={value}")
    assert code == 2
    assert "usage: sqlq add" in err and "--delay" in err and common.DURATION_SYNTAX in err


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (command, option, value)
        for command in (["add", "t"], ["configure"])
        for option, value in (
            ("--max-attempts", "0"),
            ("--max-attempts", str(sqlq.contract.MAX_ATTEMPTS + 1)),
            ("--retry", "sometimes"),
        )
    ]
    + [
        (command, "--lease", value)
        for command in (["configure"], ["worker", "mod:fn"])
        for value in ("0", str(sqlq.contract.MAX_LEASE_SECONDS * 2))
    ],
)
def test_a_stored_setting_out_of_its_range_is_a_usage_error_of_every_command(
    command: list[str], option: str, value: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--lease, --max-attempts and --retry take the same values wherever they are given."""
    code, _, err = _cli(capsys, command[0], db, *command[1:], f"{option}={value}")
    assert code == 2
    assert f"usage: sqlq {command[0]}" in err and option in err
    with _queue(db) as q:
        assert q.info("t") is None  # nothing added


def test_the_stored_settings_take_their_limits(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top, longest = sqlq.contract.MAX_ATTEMPTS, sqlq.contract.MAX_LEASE_SECONDS
    settings = _json(
        capsys, "configure", db, f"--max-attempts={top}", f"--lease={longest}", "--retry=fixed:1"
    )
    assert settings["max_attempts"] == top and settings["lease_seconds"] == longest
    document = _json(capsys, "add", db, "t", "--max-attempts=1", "--retry=immediate")
    assert document["added"] == 1
    with _queue(db) as q:
        info = q.info("t")
        assert info is not None and info.max_attempts == 1


def test_purge_removes_completed_tasks_by_default(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "purge", db, "--older-than", "1h")
    assert code == 0
    assert out == "removed 0 COMPLETED tasks that finished at least 1h ago from queue 'default'\n"
    code, out, _ = _cli(capsys, "purge", db)
    assert out == "removed 2 COMPLETED tasks from queue 'default'\n"
    code, out, _ = _cli(capsys, "purge", db, "--dead")
    assert out == "removed 1 DEAD task from queue 'default'\n"
    with _queue(db) as q:
        assert q.counts()["COMPLETED"] == 0 and q.counts()["DEAD"] == 0
        assert q.add("d0")  # a purged id can be added again


def test_purge_dead_and_both_json(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = _json(capsys, "purge", db, "--dead")
    assert document == {
        "database": str(db),
        "queue": "default",
        "older_than": 0.0,
        "removed": {"DEAD": 1},
        "total": 1,
        "groups_forgotten": 0,
        "vacuum": None,
    }
    document = _json(capsys, "purge", db, "--dead", "--completed")
    assert document["removed"] == {"COMPLETED": 2, "DEAD": 0} and document["total"] == 2
    with _queue(db) as q:
        assert q.counts() == {
            "WAITING": 0,
            "AVAILABLE": 3,
            "RESERVED": 1,
            "COMPLETED": 0,
            "DEAD": 0,
            "CANCELLED": 0,
        }


def test_purge_with_vacuum_shrinks_the_file_and_shows_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "PROGRESS_SECONDS", 0.0)
    db = tmp_path / "big.db"
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=1, synchronous="normal") as q:
        q.add_many([(f"t{i}", {"pad": "x" * 500}) for i in range(6000)])
        while leases := q.claim_many(1000):
            for lease in leases:
                q.complete(lease.task_id, token=lease.token)
        q.add("keep")
    size = db.stat().st_size
    document = _json(capsys, "purge", db, "--vacuum")
    assert document["removed"] == {"COMPLETED": 6000}
    before, after = document["vacuum"]["before"], document["vacuum"]["after"]
    assert before >= size > 3_000_000 and after < size / 10
    assert db.stat().st_size == after
    with _queue(db) as q:
        assert [t.task_id for t in q.tasks()] == ["keep"]
    code, out, _ = _cli(capsys, "purge", db, "--vacuum")
    assert code == 0 and "vacuum: the file went from" in out


# --- sqlq migrate ---------------------------------------------------------------------------


def test_migrate_creates_a_database_and_reports_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], migration_files: list[Path]
) -> None:
    db = tmp_path / "new.db"
    latest = len(migration_files)
    code, out, _ = _cli(capsys, "migrate", db)
    assert code == 0
    assert out == f"schema version 0 -> {latest} (created the database): {db}\n"
    assert _json(capsys, "migrate", db) == {
        "database": str(db),
        "created": False,
        "before": latest,
        "after": latest,
        "latest": latest,
    }
    assert _cli(capsys, "stats", db)[0] == 0


def test_migrate_an_older_database_and_an_empty_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    migration_files: list[Path],
) -> None:
    db = tmp_path / "old.db"
    _version_1(db, monkeypatch)
    document = _json(capsys, "migrate", db)
    assert (document["before"], document["after"]) == (1, len(migration_files))
    with _queue(db) as q:
        assert q.info("old") is not None
    empty = tmp_path / "empty.db"
    empty.touch()
    code, out, _ = _cli(capsys, "migrate", empty)
    assert code == 0 and "(set up the empty file)" in out
    assert _cli(capsys, "list", empty)[1] == "no tasks in queue 'default'\n"


# --- sqlq worker ----------------------------------------------------------------------------

HANDLERS = """
import os

def handle(payload):
    if payload.get("fail"):
        raise ValueError(f"refused task {payload['n']}")
    with open(os.environ["HANDLED_LOG"], "a") as log:
        log.write(f"{payload['n']}\\n")
"""


def test_worker_drains_the_queue_and_exits(tmp_path: Path) -> None:
    (tmp_path / "cli_test_handlers.py").write_text(HANDLERS)
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=30, max_attempts=2, queue="jobs") as q:
        q.add_many([(f"t{i}", {"n": i, "fail": i in (3, 7)}) for i in range(20)])
    log = tmp_path / "handled.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        "HANDLED_LOG": str(log),
    }
    args = ["--queue", "jobs", "--concurrency", "3", "--lease", "10", "--grace", "5", "--burst"]
    args += ["--busy-timeout", "20"]
    proc = _run("worker", str(db), "cli_test_handlers:handle", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    with sqlq.Queue(db, lease_seconds=30, max_attempts=2, queue="jobs") as q:
        assert q.counts() == {
            "WAITING": 0,
            "AVAILABLE": 0,
            "RESERVED": 0,
            "COMPLETED": 18,
            "DEAD": 2,
            "CANCELLED": 0,
        }
        dead = {t.task_id: t for t in q.dead()}
    assert set(dead) == {"t3", "t7"}
    assert dead["t3"].attempts == 2 and "refused task 3" in (dead["t3"].last_error or "")
    assert sorted(map(int, log.read_text().split())) == [i for i in range(20) if i not in (3, 7)]


def test_worker_has_no_max_attempts_option_that_would_do_nothing(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "worker", db, "mod:fn", "--max-attempts", "3")
    assert code == 2
    assert "unrecognized arguments: --max-attempts" in err


def _handlers_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "cli_test_handlers.py").write_text(HANDLERS)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
        "HANDLED_LOG": str(tmp_path / "handled.log"),
    }


@pytest.mark.processes
def test_worker_burst_says_what_it_leaves_behind(tmp_path: Path) -> None:
    env = _handlers_env(tmp_path)
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=2) as q:
        q.add_many([("held", {"n": 0}), ("t1", {"n": 1}), ("t2", {"n": 2})])
        q.add("later", payload={"n": 3}, delay=3600)
        assert q.claim() is not None  # "held": a lease of another worker
    proc = _run("worker", str(db), "cli_test_handlers:handle", "--burst", env=env)
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "worker stopped: 2 claimed, 2 completed" in last
    assert last.endswith(
        "; left behind: 1 RESERVED (leases of other workers), 1 WAITING (for a delay or a "
        "retry); stop_when_drained (sqlq worker --drain) waits for them"
    )
    assert "task completed" not in proc.stderr  # a line per task only with -v


@pytest.mark.processes
def test_worker_drain_waits_for_other_leases_logs_summaries_and_each_task_with_v(
    tmp_path: Path,
) -> None:
    env = _handlers_env(tmp_path)
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=3600, max_attempts=2) as q:
        q.add("held", payload={"n": 0})
        held = q.claim()
        assert held is not None
    err = tmp_path / "worker.err"
    args = ["--drain", "-v", "--summary-every", "0.2s"]
    with err.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "sqlq", "worker", str(db), "cli_test_handlers:handle", *args],
            stderr=stderr,
            env=env,
        )
    try:
        _poll(lambda: "waiting for 1 RESERVED" in err.read_text(), "the worker to wait")
        with sqlq.Queue(db, lease_seconds=3600, max_attempts=2) as q:
            q.add("late", payload={"n": 1})  # taken: the worker is still there
            _poll(lambda: q.status("late") == "COMPLETED", "the late task")
            _poll(lambda: "worker summary completed=" in err.read_text(), "a summary")
            assert process.poll() is None
            assert q.complete("held", token=held.token)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    lines = err.read_text().strip().splitlines()
    assert any(
        re.search(r"task completed task_id=late attempt=1 token=\d+ duration=", m) for m in lines
    )
    summary = next(m for m in lines if "worker summary" in m)
    assert re.search(r"INFO .* worker summary completed=\d+ failed=0 dead=0 lost=0 ", summary)
    assert lines[-1].endswith("; nothing left RESERVED or WAITING")


def _poll(predicate: Any, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("target", ["nocolon", "mod:", ":fn", "bad-mod:fn", "mod:fn()"])
def test_worker_rejects_a_malformed_handler(
    target: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "worker", db, target)
    assert code == 2
    assert "not a handler" in err


@pytest.mark.parametrize("value", ["-1", "nan", "soon", "86401"])
def test_worker_rejects_a_bad_busy_timeout(
    value: str, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "worker", db, "mod:fn", "--busy-timeout", value)
    assert code == 2
    assert "--busy-timeout" in err


# --- sqlq backup (the copy under load: test_processes.py) -------------------------------------


def test_backup_copies_every_queue_and_replaces_an_earlier_backup(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, dest = tmp_path / "jobs.db", tmp_path / "backup.db"
    _fill(db)
    with _queue(db) as q:
        before = {name: q.tasks(limit=100) for name in ("default",)}
    for target in (dest, f"sqlite:///{dest}"):  # the second replaces the first
        code, out, err = _cli(capsys, "backup", db, target)
        assert code == 0, err
        assert out.startswith(f"backed up {db} to {dest}")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("backup")) == [
        "backup.db"
    ]  # a single file: no -wal, no partial copy left behind
    assert os.stat(dest).st_mode & 0o777 == os.stat(db).st_mode & 0o777
    with sqlq.Queue(dest, lease_seconds=3600, max_attempts=1, queue="emails") as copy:
        assert copy.counts() == {
            "WAITING": 1,
            "AVAILABLE": 2,
            "RESERVED": 1,
            "COMPLETED": 0,
            "DEAD": 0,
            "CANCELLED": 0,
        }
    with _queue(dest) as copy:
        assert copy.tasks(limit=100) == before["default"]


@pytest.mark.parametrize("target", ["notes.txt", "other.db", "jobs.db", "folder", "open.db"])
def test_backup_refuses_to_replace_what_is_not_an_idle_sqlq_database(
    target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "jobs.db"
    _fill(db)
    (tmp_path / "notes.txt").write_text("keep me\n")
    _foreign(tmp_path / "other.db", "other app")
    (tmp_path / "folder").mkdir()
    _fill(tmp_path / "open.db")
    (tmp_path / "open.db-wal").write_bytes(b"")  # as if a queue had it open
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, _, err = _cli(capsys, "backup", db, tmp_path / target)
    assert code in (1, 2) and "sqlq backup: error:" in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == files


# --- sqlq demo (its guards; the demo itself runs in test_processes.py) -------------------------


@pytest.mark.parametrize(
    "args",
    [["--tasks", "2"], ["--workers", "1"], ["--lease", "0"], ["--tasks", "many"]],
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
    with _queue(db) as q:
        assert q.counts()["AVAILABLE"] == 3


def test_demo_refuses_to_delete_another_database_named_by_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "precious.db"
    _fill(db)
    assert cli.main(["demo", "--db", f"sqlite:///{db}"]) == 2
    assert "not deleting it" in capsys.readouterr().err


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


# --- input sqlq cannot take, and rows it cannot read ----------------------------------------

DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _one_error_line(err: str, command: str) -> None:
    assert "Traceback" not in err
    assert err.startswith(f"sqlq {command}: error: ") and err.count("\n") == 1, err


@pytest.mark.parametrize("depth", [100_000, sqlq.payload.MAX_DEPTH + 1])
def test_add_refuses_json_nested_too_deep(
    depth: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "payload.json"
    source.write_text("[" * depth + "]" * depth)
    db = tmp_path / "new.db"
    code, out, err = _cli(capsys, "add", db, "t1", "--payload-file", source)
    assert (code, out) == (2, "")
    _one_error_line(err, "add")
    assert "nested more than 200" in err
    code, _, err = _cli(capsys, "add", db, "t1", "--payload", "[" * depth + "]" * depth)
    assert code == 2 and "nested more than 200" in err
    assert not db.exists()


def test_add_names_the_payload_option_a_refused_payload_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A payload that decodes but cannot be stored (a lone surrogate, too large) is
    refused as the option that gave it, with a usage error, like one that does not
    decode: not as a bad TASK_ID."""
    db = tmp_path / "new.db"
    big = tmp_path / "big.json"
    big.write_text(json.dumps("x" * sqlq.payload.DEFAULT_MAX_PAYLOAD_BYTES))
    for option, value in (("--payload", '"\\ud800"'), ("--payload-file", big)):
        code, out, err = _cli(capsys, "add", db, "t1", option, value)
        assert (code, out) == (2, ""), err
        _one_error_line(err, "add")
        assert err.startswith(f"sqlq add: error: {option}"), err
        assert "TASK_ID" not in err and "nothing was added" in err
    assert not db.exists()


def test_add_from_a_file_refuses_a_line_nested_too_deep(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deepest = "[" * 200 + "]" * 200
    source = tmp_path / "tasks.txt"
    source.write_text(
        f'{{"id": "fits", "payload": {deepest}}}\n{{"id": "deep", "payload": {DEEP_JSON}}}\n'
    )
    code, _, err = _cli(capsys, "add", db, "--from-file", source)
    assert code == 2
    _one_error_line(err, "add")
    assert f"{source}, line 2:" in err and "nested more than" in err
    source.write_text(f'{{"id": "deeper", "payload": [{deepest}]}}\n')
    code, _, err = _cli(capsys, "add", db, "--from-file", source)
    assert code == 2 and "line 1:" in err and "nested more than 200 deep" in err
    with _queue(db) as q:
        assert q.info("fits").payload == json.loads(deepest)  # type: ignore[union-attr]
        assert q.info("deep") is None and q.info("deeper") is None
    assert _json(capsys, "show", db, "fits")["payload"] == json.loads(deepest)
    assert _cli(capsys, "show", db, "fits")[0] == 0


def _poison(db: Path) -> None:
    """Tasks whose stored payload sqlq cannot decode, written with the sqlite3 module."""
    with _queue(db) as q:
        q.add_many([("p-deep", "x"), ("p-text", "x"), ("p-surrogate", "x")])
    conn = driver.dbapi.connect(db, isolation_level=None)
    for task_id, stored in [
        ("p-deep", DEEP_JSON),
        ("p-text", "{oops"),
        ("p-surrogate", '"\\ud800"'),
    ]:
        conn.execute("UPDATE sqlq_tasks SET payload = ? WHERE task_id = ?", (stored, task_id))
    conn.close()


def test_inspection_shows_payloads_that_cannot_be_decoded(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _poison(db)
    code, out, err = _cli(capsys, "show", db, "p-deep")
    assert (code, err) == (0, "")
    assert "payload:      cannot be decoded (JSON nested more than 200" in out
    assert DEEP_JSON in out
    document = _json(capsys, "show", db, "p-text")
    assert (document["payload_type"], document["payload"]) == ("undecodable", "{oops")
    assert document["payload_error"].startswith("not valid JSON")
    # JSON that decodes to a lone surrogate: printed as an escape, not a crash.
    code, out, err = _cli(capsys, "show", db, "p-surrogate")
    assert (code, err) == (0, "") and 'payload:      "\\ud800"' in out
    listed = _json(capsys, "list", db, "--limit", "100")["tasks"]
    assert {t["task_id"]: t["payload_type"] for t in listed}["p-deep"] == "undecodable"
    assert _cli(capsys, "list", db)[0] == 0


def test_inspection_of_a_payload_stored_as_text_that_is_not_utf8(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with _queue(db) as q:
        q.add("bad", payload="x")
    conn = driver.dbapi.connect(db, isolation_level=None)
    conn.execute("UPDATE sqlq_tasks SET payload = CAST(X'2280FF22' AS TEXT)")
    conn.close()
    code, out, err = _cli(capsys, "show", db, "bad")
    assert (code, err) == (0, "")
    assert "payload:      cannot be decoded (the stored text is not valid UTF-8)" in out
    document = _json(capsys, "show", db, "bad")
    assert document["payload_type"] == "undecodable"
    assert document["payload_error"] == "the stored text is not valid UTF-8"
    listed = _json(capsys, "list", db, "--limit", "100")["tasks"]
    assert {t["task_id"]: t["payload_type"] for t in listed}["bad"] == "undecodable"
    assert _cli(capsys, "list", db)[:3:2] == (0, "")


def test_show_of_times_past_the_year_9999(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _queue(db) as q:
        q.add("far", run_at=sqlq.contract.MAX_TIME)
    code, out, err = _cli(capsys, "show", db, "far")
    assert (code, err) == (0, "")
    assert "run_at:       Unix time 1000000000000 (after the year 9999)" in out
    assert _json(capsys, "show", db, "far")["run_at"] == sqlq.contract.MAX_TIME


def test_worker_dead_letters_a_payload_it_cannot_decode_and_goes_on(tmp_path: Path) -> None:
    (tmp_path / "cli_test_handlers.py").write_text(HANDLERS)
    db = tmp_path / "q.db"
    with sqlq.Queue(db, lease_seconds=30, max_attempts=2) as q:
        q.add_many([("poison", {"n": 0}), ("next", {"n": 1})])
    conn = driver.dbapi.connect(db, isolation_level=None)
    conn.execute("UPDATE sqlq_tasks SET payload = ? WHERE task_id = 'poison'", (DEEP_JSON,))
    conn.close()
    log = tmp_path / "handled.log"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HANDLED_LOG": str(log)}
    proc = _run("worker", str(db), "cli_test_handlers:handle", "--burst", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert log.read_text() == "1\n"
    with sqlq.Queue(db, lease_seconds=30, max_attempts=2) as q:
        assert q.status("poison") == "DEAD" and q.status("next") == "COMPLETED"
        assert q.info("poison").last_error.startswith("payload cannot be decoded")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('raise RuntimeError("no config")', "(RuntimeError: no config)"),
        ('import sys; sys.exit("missing settings")', "(SystemExit: missing settings)"),
    ],
)
def test_worker_with_a_handler_module_that_raises_at_import(
    tmp_path: Path, db: Path, body: str, said: str
) -> None:
    (tmp_path / "broken_handlers.py").write_text(body + "\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = _run("worker", str(db), "broken_handlers:handle", "--burst", env=env)
    assert proc.returncode == 1
    _one_error_line(proc.stderr, "worker")
    assert f"cannot import module 'broken_handlers' {said}" in proc.stderr


# --- a database on a server (the commands use their backend through the port alone) ------


class _OnAServer:
    """A backend whose database is on a server as far as the commands can tell: a URL
    that names no file, no -wal file of its own, no backup into a file (SQLite's
    backend underneath keeps the tasks)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def describe(self) -> str:
        return "ServerDB 9.1"

    def storage_facts(self) -> sqlq.records.StorageFacts:
        return sqlq.records.StorageFacts()

    def backup(self, dest: str) -> int:
        raise sqlq.errors.InvalidConfig("a server database is backed up with the server's tools")


@pytest.fixture
def server_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The URL, with a password, of a database of the kind "serverdb" (see _OnAServer)."""
    sqlite = backends.KINDS["sqlite"]
    assert sqlite.open is not None
    open_sqlite = sqlite.open

    def open_on_a_server(url: str, **options: Any) -> Any:
        return _OnAServer(open_sqlite(tmp_path / "server.db", **options))

    kind = backends.Kind("serverdb://user@host/db", open_on_a_server, frozenset({"migrate"}))
    monkeypatch.setitem(backends.KINDS, "serverdb", kind)
    return "serverdb://ann:secret@host/db"


def test_the_commands_work_on_a_database_on_a_server(
    server_url: str, capsys: pytest.CaptureFixture[str], migration_files: list[Path]
) -> None:
    shown = "serverdb://ann:***@host/db"  # never the password
    latest = len(migration_files)
    assert _json(capsys, "migrate", server_url) == {
        "database": shown,
        "created": False,
        "before": 0,
        "after": latest,
        "latest": latest,
    }
    assert _json(capsys, "add", server_url, "a", "b") == {
        "database": shown,
        "queue": "default",
        "created": False,
        "added": 2,
        "existed": 0,
    }
    document = _json(capsys, "stats", server_url)
    assert (document["database"], document["server"]) == (shown, "ServerDB 9.1")
    assert "sqlite" not in document  # the server's software is not SQLite's
    assert document["wal_bytes"] is None and document["queues"]["default"]["AVAILABLE"] == 2
    assert [t["task_id"] for t in _json(capsys, "list", server_url)["tasks"]] == ["a", "b"]
    said = []  # what the commands print, none of it with the password
    code, out, _ = _cli(capsys, "stats", server_url)
    assert code == 0 and f"database: {shown}" in out and "ServerDB 9.1" in out
    assert "wal:" not in out  # no -wal file of its own to show
    said.append(out)
    code, out, _ = _cli(capsys, "stats", server_url, "--watch", "--count", "1", "--interval", "1ms")
    assert code == 0 and "default: WAITING 0, AVAILABLE 2," in out
    code, _, err = _cli(capsys, "backup", server_url, "copy.db")
    assert code == 1 and "backed up with the server's tools" in err
    code, _, err = _cli(capsys, "backup", server_url, server_url)
    assert code == 2 and f"{shown}: a backup goes to a file" in err
    said.append(err)
    code, _, err = _cli(capsys, "demo", "--db", server_url)
    assert code == 2 and f"{shown}: the demo runs on a file" in err
    said.append(err)
    assert not [text for text in said if "secret" in text]


def test_progress_is_shown_to_three_significant_digits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A progress of 1/12 reads 0.0833 in list and show, not 0.08333333333333333 (nor
    %g's 0.0833333); a count stays a count, and the integer part is never cut."""
    path = tmp_path / "p.db"
    with sqlq.Queue(path, lease_seconds=3600, max_attempts=1) as q:
        q.add_many(["a", "b"])
        for task_id, value in (("a", 1 / 12), ("b", 1234.5678)):
            lease = q.claim()
            assert lease and lease.task_id == task_id
            assert q.progress(task_id, lease.token, value, "decoding")
    code, out, _ = _cli(capsys, "list", path)
    rows = {ln.split()[0]: ln.split()[4:6] for ln in out.splitlines()[1:]}
    assert code == 0 and rows == {"a": ["0.0833", "decoding"], "b": ["1235", "decoding"]}
    code, out, _ = _cli(capsys, "show", path, "a")
    assert code == 0 and re.search(r"^progress: +0\.0833$", out, re.M), out


@pytest.mark.parametrize(
    ("value", "shown"),
    [(1 / 12, "0.0833"), (0.5, "0.5"), (3, "3"), (3.0, "3"), (12.345, "12.3"), (-2 / 3, "-0.667"),
     (1234.5678, "1235"), (99.96, "100"), (1e-7, "1e-07"), (2e20, "2e+20"), (1e15, "1e+15"),
     (123456789012.5, "123456789012")],
)  # fmt: skip
def test_figure_rounds_what_a_handler_reported(value: float, shown: str) -> None:
    assert humanize.figure(value) == shown
