"""The README is tested: its quick start is what CI runs, and its SQL examples work."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from needs import need

import sqlq
from sqlq.sqlite.driver import dbapi

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text("utf-8")


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"README.md has no section {title!r}"
    return match.group(1)


def _blocks(text: str, lang: str) -> list[str]:
    return [b.strip() for b in re.findall(rf"```{lang}\n(.*?)```", text, re.S)]


def test_readme_starts_with_a_two_command_quick_start() -> None:
    first_section = re.search(r"^## (.+)$", README, re.M)
    assert first_section and first_section.group(1) == "Quick start"
    commands = _blocks(_section("Quick start"), "sh")
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert "sqlq demo" in commands[0] and "pytest" in commands[1]


def test_ci_runs_the_quick_start_commands() -> None:
    ci = (ROOT / ".ci" / "run").read_text("utf-8")
    ci_lines = [line.strip() for line in ci.splitlines()]
    for command in _blocks(_section("Quick start"), "sh"):
        assert command in ci_lines, f".ci/run does not run {command!r}"
    # The test command runs last, so that its summary closes CI's log.
    assert [line for line in ci_lines if line and not line.startswith("#")][-1] == (
        _blocks(_section("Quick start"), "sh")[1]
    )


@pytest.fixture
def example_db(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.db"
    clock = [1_700_000_000.0]
    q = sqlq.Queue(path, lease_seconds=30, max_attempts=2, clock=lambda: clock[0])
    for i in range(5):
        q.add(f"photo-{i}")
    q.reserve()
    q.fail(q.reserve() or "")
    q.reserve()
    q.complete("photo-0")
    clock[0] += 100
    q.status("photo-0")  # expires the lease of photo-2: it goes back to the line
    q.close()
    return path


def _sql_examples() -> list[str]:
    return _blocks(_section("Looking inside with the `sqlite3` shell"), "sql")


def test_readme_sql_examples_run_with_the_driver(example_db: Path) -> None:
    examples = _sql_examples()
    assert len(examples) >= 4
    conn = dbapi.connect(str(example_db))
    try:
        for sql in examples:
            for statement in filter(None, (s.strip() for s in sql.split(";"))):
                conn.execute(statement).fetchall()
        stats = conn.execute(_sql_examples()[0].rstrip(";")).fetchall()
        counts = conn.execute(_sql_examples()[3].rstrip(";")).fetchall()
    finally:
        conn.close()
    assert counts == [("default", "AVAILABLE", 4), ("default", "COMPLETED", 1)]
    # queue, waiting, available, reserved, completed, dead, next deadline, next run_at
    assert stats == [("default", 0, 4, 0, 1, 0, None, None)]


def test_readme_sql_examples_run_in_the_sqlite3_shell(example_db: Path) -> None:
    need(shutil.which("sqlite3"), "no sqlite3 shell on this machine")
    for sql in _sql_examples():
        result = subprocess.run(
            ["sqlite3", "-readonly", "-bail", str(example_db), sql],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0 and not result.stderr, (sql, result.stderr)
    line = subprocess.run(
        ["sqlite3", "-readonly", str(example_db), _sql_examples()[3]],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    assert line == ["default|AVAILABLE|4", "default|COMPLETED|1"]


def _python_examples() -> list[str]:
    return _blocks(README, "python")


@pytest.mark.parametrize("index", range(len(_python_examples())))
def test_readme_python_examples_run(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ```python block of the README runs on its own, in an empty folder."""
    monkeypatch.chdir(tmp_path)
    code = _python_examples()[index]
    exec(compile(code, f"README.md python example {index + 1}", "exec"), {"__name__": "readme"})
