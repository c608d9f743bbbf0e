"""The README is tested: its quick start is what CI runs, and every example in it runs.

Each section's python and sh blocks run in order, each twice in a row, in one
folder per section (see test_readme_snippets_run_twice_in_a_row and the README's
Development section for the markers); the SQL examples run on a database in
every state, through sqlq's SQLite and in the sqlite3 shell.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import databases
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
    # The test command runs last but for the mutation check's sample, which needs a
    # suite that passes (and whose table, then the suite's summary, close CI's log).
    commands = [line for line in ci_lines if line and not line.startswith("#")]
    assert commands[-3:] == [
        _blocks(_section("Quick start"), "sh")[1],
        ".venv/bin/pip install -e '.[test]'",
        ".venv/bin/python tests/mutation_check.py --sample 30",
    ]


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
    # queue, waiting, available, reserved, completed, dead, next deadline, next run_at,
    # cancelled, paused
    assert stats == [("default", 0, 4, 0, 1, 0, None, None, 0, 0)]


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


# --- every python and sh block runs, twice in a row ---------------------------------------

#: Languages of the README's code blocks.  ``python`` and ``sh`` blocks are run by the
#: section tests below; ``sql`` blocks by the tests above; the rest never (output, a
#: systemd unit, a shell session with its output).
RUN_LANGS = ("python", "sh")
NOT_RUN_LANGS = ("sql", "text", "ini", "console")
#: Sections whose commands are not run here, and why.
NOT_RUN_SECTIONS = {
    "Quick start": "CI runs it (.ci/run; tested above)",
    "Benchmarks": "minutes of benchmarks (bench/)",
    "Development": "installs and the whole test suite",
}
_FENCE = re.compile(r"((?:^[ ]*<!-- [^\n]*? -->\n)*)^([ ]*)```(\w*)\n(.*?)^\2```[ ]*$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    section: str
    number: int  # 1, 2, ... within the section
    lang: str
    code: str
    markers: tuple[str, ...]  # ("file: tasks.py",) or ()

    @property
    def file(self) -> str | None:
        names = [m.removeprefix("file: ") for m in self.markers if m.startswith("file: ")]
        return names[0] if names else None

    def __str__(self) -> str:
        return f"README.md, {self.section!r}, block {self.number} ({self.lang})"


def _sections() -> dict[str, str]:
    return dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", README, re.S | re.M))


def _code_blocks(title: str) -> list[Block]:
    blocks = []
    for number, match in enumerate(_FENCE.finditer(_sections()[title]), 1):
        markers, indent, lang, code = match.groups()
        code = textwrap.dedent("".join(line.removeprefix(indent) for line in code.splitlines(True)))
        names = tuple(re.findall(r"<!-- (.*?) -->", markers))
        blocks.append(Block(title, number, lang, code, names))
    return blocks


def _sections_to_run() -> list[str]:
    return [
        title
        for title in _sections()
        if title not in NOT_RUN_SECTIONS and any(b.lang in RUN_LANGS for b in _code_blocks(title))
    ]


def test_every_code_block_says_whether_it_runs() -> None:
    fences = re.findall(r"^[ ]*```(\w*)$", README, re.M)
    blocks = [b for title in _sections() for b in _code_blocks(title)]
    assert len(blocks) * 2 == len(fences), "a fence the tests do not parse"
    for block in blocks:
        assert block.lang in RUN_LANGS + NOT_RUN_LANGS, f"{block}: unknown language"
        for marker in block.markers:
            assert marker.startswith("file: "), f"{block}: unknown marker {marker!r}"
        if block.file:
            assert block.lang == "python", f"{block}: a file: block must be Python"
        if block.lang == "python":
            compile(block.code, str(block), "exec")


def test_the_sections_the_issue_asks_for_come_first() -> None:
    titles = list(_sections())
    assert titles[:4] == [
        "Quick start",
        "Contents",
        "Your first worker",
        "Running it in production",
    ]
    production = _sections()["Running it in production"]
    for part in ("systemd", "Processes, threads", "Logging", "Monitoring", "Backups", "Upgrades"):
        assert re.search(rf"^### .*{part}", production, re.M | re.I), part
    contents = _sections()["Contents"]
    for anchor in re.findall(r"\]\(#([\w-]+)\)", contents):
        assert anchor in _anchors(), anchor


def _anchors() -> set[str]:
    """GitHub's anchors of the README's headings."""
    headings = re.findall(r"^#+ (.+)$", README, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def _missing(block: Block) -> str | None:
    """Why ``block`` cannot run on this machine, if it cannot."""
    uses_shell = block.lang == "sh" and re.search(r"^sqlite3 ", block.code, re.M)
    if uses_shell and not shutil.which("sqlite3"):
        return "no sqlite3 shell on this machine"
    return None


def _seed(path: Path) -> None:
    """The jobs.db every section starts with: a small queue of its own, nothing overdue."""
    with sqlq.Queue(path, lease_seconds=30, max_attempts=3, queue="reports") as q:
        q.add_many([("report-1", {"day": 1}), ("report-2", {"day": 2})])


def _run_python(block: Block) -> None:
    exec(compile(block.code, str(block), "exec"), {"__name__": "readme"})


def _run_sh(block: Block, folder: Path) -> None:
    for line in block.code.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        words = [os.path.expandvars(word) for word in shlex.split(line)]
        if words[:2] == ["sqlq", "worker"] and "--burst" not in words:
            _serve_until_drained(words, folder)
            continue
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", line],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{block}: {line!r} failed:\n{done.stdout}{done.stderr}"


def _serve_until_drained(words: list[str], folder: Path) -> None:
    """A worker that runs until stopped: wait until its queue has nothing left to do,
    then stop it with SIGTERM, as a service manager does; it must exit 0, and have
    sent no task DEAD (a README example whose tasks cannot run drains too)."""
    queue = words[words.index("--queue") + 1] if "--queue" in words else "default"
    with sqlq.Queue(words[2], lease_seconds=30, max_attempts=1, queue=queue) as q:
        dead_before = q.counts()["DEAD"]
    log = folder / "worker.log"
    with log.open("w") as err:
        proc = subprocess.Popen(words, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while "worker started" not in log.read_text():  # its SIGTERM handler is in place
            assert proc.poll() is None, f"{words}: exited early:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"{words}: did not start:\n{log.read_text()}"
            time.sleep(0.05)
        with sqlq.Queue(words[2], lease_seconds=30, max_attempts=1, queue=queue) as q:
            while any(q.counts()[s] for s in ("WAITING", "AVAILABLE", "RESERVED")):
                assert proc.poll() is None, f"{words}: exited early:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"{words}: did not drain:\n{log.read_text()}"
                time.sleep(0.05)  # polling the queue's state, with a deadline
            assert q.counts()["DEAD"] == dead_before, f"{words}: tasks died:\n{log.read_text()}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "worker stopped" in log.read_text()


@pytest.mark.parametrize("title", _sections_to_run())
def test_readme_snippets_run_twice_in_a_row(
    title: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The section's python and sh blocks in order, each twice in a row, in one folder.

    Twice, because that is what a reader does, and what the first version of these
    snippets did not survive (a claim that found nothing, a fixed file asserted on, a
    UNIQUE constraint).
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    bin_dir = str(Path(sys.executable).parent)  # this sqlq's console script first
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    _seed(tmp_path / "jobs.db")
    if title == "PostgreSQL":  # its examples take the database from DATABASE_URL
        schemas = ExitStack()
        request.addfinalizer(schemas.close)
        server = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("DATABASE_URL", schemas.enter_context(databases.fresh_schema(server)))
    skipped = []
    try:
        for block in (b for b in _code_blocks(title) if b.lang in RUN_LANGS):
            why = _missing(block)
            if why:
                skipped.append(f"{block}: {why}")
            elif block.file:
                compile(block.code, str(block), "exec")
                (tmp_path / block.file).write_text(block.code, "utf-8")
            else:
                for _ in range(2):
                    if block.lang == "python":
                        _run_python(block)
                    else:
                        _run_sh(block, tmp_path)
    finally:
        for name, module in list(sys.modules.items()):  # the README's modules, e.g. tasks
            if str(getattr(module, "__file__", "") or "").startswith(str(tmp_path)):
                del sys.modules[name]
    need(not skipped, "the other blocks ran; skipped: " + "; ".join(skipped))
