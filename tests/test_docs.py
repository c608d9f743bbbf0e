"""The README is tested: its quick start is what CI runs, and every example in it runs.

The python and sh blocks run as a reader runs them: in the README's order, in one
folder, the scripts as ``__main__`` in processes of their own, the workers left running
(see test_readme_examples_run_in_order_in_one_folder and the README's Development
section for the markers); the SQL examples run on a database in every state, through
sqlq's SQLite and in the sqlite3 shell.
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
    # queue, waiting, available, reserved, completed, dead, cancelled, paused, next
    # deadline, next run_at
    assert stats == [("default", 0, 4, 0, 1, 0, 0, 0, None, None)]


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


def test_readme_queue_stats_example_shows_its_times_as_utc(tmp_path: Path) -> None:
    """sqlq_queue_stats keeps Unix times (next_deadline, next_run_at), as the tables do;
    the README's query of it shows them as UTC times, as the other views do theirs."""
    path = tmp_path / "jobs.db"
    with sqlq.Queue(path, lease_seconds=30, max_attempts=1, clock=lambda: 1_700_000_000) as q:
        q.add_many(["a", "b"])
        q.add("later", delay=60)
        q.reserve()
    query = _sql_examples()[0]
    conn = dbapi.connect(str(path))
    try:
        row = conn.execute(query.rstrip(";")).fetchall()
    finally:
        conn.close()
    #            (waiting, available, reserved, completed, dead, cancelled, paused)
    assert row == [("default", 1, 1, 1, 0, 0, 0, 0, "2023-11-14 22:13:50", "2023-11-14 22:14:20")]
    need(shutil.which("sqlite3"), "no sqlite3 shell on this machine")
    shown = subprocess.run(
        ["sqlite3", "-readonly", str(path), query], capture_output=True, text=True, timeout=30
    ).stdout
    assert shown == "default|1|1|1|0|0|0|0|2023-11-14 22:13:50|2023-11-14 22:14:20\n"


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
    "Django": "needs Django 6.1 (Python 3.12); tests/test_django.py runs such a project",
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


def _is_worker_until_stopped(words: list[str]) -> bool:
    return words[:2] == ["sqlq", "worker"] and "--burst" not in words and "--drain" not in words


class Reader:
    """What a reader of the README has on their machine: one folder, in which they save the
    module files, run the scripts (``python example.py``) and the commands in the order the
    README gives them, and leave each ``sqlq worker`` they start running, as its text says
    ("it runs until SIGTERM or Ctrl-C"), while they read on."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.scripts = 0
        self.workers: dict[tuple[str, ...], tuple[subprocess.Popen[bytes], Path]] = {}

    def save(self, block: Block) -> None:
        assert block.file
        compile(block.code, str(block), "exec")
        (self.folder / block.file).write_text(block.code, "utf-8")

    def run_python(self, block: Block) -> None:
        """Saved as a script of its own beside the modules and run with this Python, as
        ``__main__``, in a process of its own (what a reader does)."""
        self.scripts += 1
        script = self.folder / f"example_{self.scripts}.py"
        script.write_text(block.code, "utf-8")
        self.command([sys.executable, script.name], f"{block}, run as {script.name}")

    def command(self, argv: list[str], what: str) -> None:
        """One command in the folder, to its end, which must be a success."""
        done = subprocess.run(
            argv,
            cwd=self.folder,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{what} failed:\n{done.stdout}{done.stderr}"

    def run_sh(self, block: Block) -> None:
        for line in block.code.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            words = [os.path.expandvars(word) for word in shlex.split(line)]
            if _is_worker_until_stopped(words):
                self.serve(words, block)
                continue
            self.command(["bash", "-euo", "pipefail", "-c", line], f"{block}: {line!r}")

    def serve(self, words: list[str], block: Block) -> None:
        """Start the worker (the same command again finds it running) and wait until its queue
        has nothing left to do; it goes on running while the reader reads on."""
        if tuple(words) not in self.workers:
            log = self.folder / f"worker_{len(self.workers) + 1}.log"
            with log.open("w") as out:
                proc = subprocess.Popen(
                    words, cwd=self.folder, stdin=subprocess.DEVNULL, stdout=out, stderr=out
                )
            self.workers[tuple(words)] = (proc, log)
            deadline = time.monotonic() + 60
            while "worker started" not in log.read_text():  # its SIGTERM handler is in place
                assert proc.poll() is None, f"{block}: {words} exited early:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"{block}: {words} did not start"
                time.sleep(0.05)  # polling the worker's log, with a deadline
        proc, log = self.workers[tuple(words)]
        queue = words[words.index("--queue") + 1] if "--queue" in words else "default"
        deadline = time.monotonic() + 60
        with sqlq.Queue(words[2], lease_seconds=30, max_attempts=1, queue=queue) as q:
            while any(q.counts()[s] for s in ("WAITING", "AVAILABLE", "RESERVED")):
                assert proc.poll() is None, f"{block}: {words} exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"{block}: {words} did not drain"
                time.sleep(0.05)  # polling the queue's state, with a deadline
        self.check_workers(block)

    def check_workers(self, after: object) -> None:
        """No worker the reader left running has died or sent a task DEAD: a README
        example whose tasks cannot run (a name the worker does not know, no name) would."""
        for words, (proc, log) in self.workers.items():
            assert proc.poll() is None, f"after {after}: {list(words)} exited:\n{log.read_text()}"
            assert "task dead" not in log.read_text(), (
                f"after {after}: {list(words)} sent a task DEAD:\n{log.read_text()}"
            )

    def stop_workers(self) -> None:
        """SIGTERM, as a service manager or Ctrl-C does: each exits 0, having logged its stop."""
        for proc, _ in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for words, (proc, log) in self.workers.items():
            try:
                code = proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert code == 0 and "worker stopped" in log.read_text(), (list(words), log.read_text())

    def kill_workers(self) -> None:
        for proc, _ in self.workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _run_in_process(block: Block) -> None:
    """The block pasted into a module of a program (run under a module's name, not as
    ``__main__``)."""
    exec(compile(block.code, str(block), "exec"), {"__name__": "readme"})


def _database_url(request: pytest.FixtureRequest, stack: ExitStack) -> str | None:
    """A fresh schema on the test PostgreSQL server, for the examples that read
    DATABASE_URL; None when this machine has no server (its blocks are then skipped)."""
    try:
        server = request.getfixturevalue("postgres_url")
    except pytest.skip.Exception:
        return None
    return stack.enter_context(databases.fresh_schema(server))


def test_readme_examples_run_in_order_in_one_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Every python and sh block of the README, in the README's order, in one folder that
    starts empty, as a reader who follows it does: the ``file:`` blocks saved as modules,
    each other python block saved as a script and run as ``__main__`` in a process of its
    own, and then again pasted into a module (under a module's name, in this process);
    each sh block run twice in a row; each ``sqlq worker`` that runs until stopped left
    running to the end, serving whatever the later examples add to its database, and
    then stopped with SIGTERM.

    Twice, because that is what a reader does, and what the first version of these
    snippets did not survive (a claim that found nothing, a fixed file asserted on, a
    UNIQUE constraint).  In one folder and in order, because examples that share a file
    must work together: unnamed tasks added to the file a registry's worker serves, or a
    second registry's worker on it, send tasks DEAD (issue 23, item 9); as ``__main__``,
    because a bare ``@tasks.task`` in a script is refused (item 8).
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    bin_dir = str(Path(sys.executable).parent)  # this sqlq's console script first
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    stack = ExitStack()
    request.addfinalizer(stack.close)
    reader = Reader(tmp_path)
    skipped = []
    try:
        for title in _sections_to_run():
            url = None
            if title == "PostgreSQL":  # its examples take the database from DATABASE_URL
                url = _database_url(request, stack)
                if url:
                    monkeypatch.setenv("DATABASE_URL", url)
            for block in (b for b in _code_blocks(title) if b.lang in RUN_LANGS):
                why = _missing(block) or (
                    "no PostgreSQL server" if title == "PostgreSQL" and not url else None
                )
                if why:
                    skipped.append(f"{block}: {why}")
                elif block.file:
                    reader.save(block)
                elif block.lang == "python":
                    reader.run_python(block)
                    _run_in_process(block)
                else:
                    for _ in range(2):
                        reader.run_sh(block)
                reader.check_workers(block)
        reader.stop_workers()
    finally:
        reader.kill_workers()  # (after a failure) before the PostgreSQL schema is dropped
        for name, module in list(sys.modules.items()):  # the README's modules, e.g. tasks
            if str(getattr(module, "__file__", "") or "").startswith(str(tmp_path)):
                del sys.modules[name]
    need(not skipped, "the other blocks ran; skipped: " + "; ".join(skipped))


def test_each_module_file_has_one_text() -> None:
    """A reader saves every ``file:`` block in one folder: two blocks of one name would
    replace one module with another under the workers that import it."""
    texts: dict[str, str] = {}
    for title in _sections():
        for block in _code_blocks(title):
            if block.file:
                assert texts.setdefault(block.file, block.code) == block.code, (
                    f"{block}: another block of the README is {block.file} too"
                )


def test_each_database_is_served_by_one_handler() -> None:
    """Every ``sqlq worker`` command of the README (examples and sessions) on one database
    runs the same handler: a worker of another registry would take the first one's tasks
    and send them DEAD, their names unknown to it."""
    handlers: dict[str, set[str]] = {}
    for title in _sections():
        for block in _code_blocks(title):
            if block.lang not in ("sh", "console"):
                continue
            for line in block.code.splitlines():
                line = line.removeprefix("$ ")
                if not line.startswith("sqlq worker "):
                    continue
                words = shlex.split(line, comments=True)
                if len(words) >= 4:
                    handlers.setdefault(words[2], set()).add(words[3])
    assert handlers
    shared = {db: sorted(targets) for db, targets in handlers.items() if len(targets) > 1}
    assert not shared, f"databases served by workers of different handlers: {shared}"
