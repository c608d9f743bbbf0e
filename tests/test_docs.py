"""The documentation is tested: the README's quick start is what CI runs, and every example of
the README and of the site's pages (docs/, but for the generated reference) runs.

Each page's python and sh blocks run as a reader runs them: in the page's order, in one folder
of the page's own that starts empty, the scripts as ``__main__`` in processes of their own, the
workers left running (see test_page_examples_run_in_order_in_one_folder, and the contributing
page for the markers); the pages run as tests of their own, side by side.  The SQL examples run
on a database in every state, through sqlq's SQLite and in the sqlite3 shell.
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
DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text("utf-8")
#: Folders of docs/ whose pages are not written by hand (the reference, generated from the
#: code) or are not pages at all (the built site).
NOT_PAGES = ("reference", "_build")


def _pages() -> list[str]:
    """The README and every page of the site, as paths relative to the repository."""
    pages = ["README.md"]
    for path in sorted(DOCS.rglob("*.md")):
        if path.relative_to(DOCS).parts[0] not in NOT_PAGES:
            pages.append(path.relative_to(ROOT).as_posix())
    return pages


def _text(page: str) -> str:
    return (ROOT / page).read_text("utf-8")


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


def test_the_readme_is_short() -> None:
    """Issue 27: the README says what sqlq is and points to the site; the site holds the rest."""
    assert len(README.splitlines()) <= 260


#: Links that leave the repository (the site's own, or the web's).
_EXTERNAL = re.compile(r"^(?:[a-z]+:|#)")


def _links(page: str) -> list[str]:
    """The targets of the page's Markdown links and images (outside code blocks)."""
    text = _FENCE.sub("", _text(page))
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", _pages())
def test_relative_links_work_in_the_repository(page: str) -> None:
    """A relative link goes to a file that exists, read on GitHub or in a clone as in the site
    (the site takes ``.md`` links as links between its pages)."""
    for target in _links(page):
        if _EXTERNAL.match(target):
            continue
        path = (ROOT / page).parent / target.split("#")[0]
        assert path.exists(), f"{page}: a link to {target}, which does not exist"


def _reachable(page: str) -> set[str]:
    """The pages (repository paths) one click from ``page``: its links and its toctree."""
    text = _text(page)
    targets = [t for t in _links(page) if not _EXTERNAL.match(t)]
    for toctree in re.findall(r"```\{toctree\}\n(.*?)```", text, re.S):
        targets += [
            line.strip() + ".md"
            for line in toctree.splitlines()
            if line.strip() and not line.lstrip().startswith(":")
        ]
    here = (ROOT / page).parent
    return {
        os.path.relpath(os.path.normpath(here / t.split("#")[0]), ROOT).replace(os.sep, "/")
        for t in targets
    }


def test_the_home_page_reaches_what_readers_look_for_within_two_clicks() -> None:
    """Issue 27's list: the settings a queue needs, workers under systemd, a task whose worker
    is killed, moving to PostgreSQL, and the API of Queue (the generated reference)."""
    home = "docs/index.md"
    one = _reachable(home)
    two = one | {p for page in one if (ROOT / page).is_file() for p in _reachable(page)}
    wanted = {
        "the settings a queue needs": ("docs/how-to/configure.md", "stored with it"),
        "workers under systemd": ("docs/how-to/production.md", "systemd"),
        "a killed worker's task": ("docs/explanation/failure-modes.md", "SIGKILL"),
        "moving to PostgreSQL": ("docs/how-to/postgresql.md", "DATABASE_URL"),
    }
    for what, (page, phrase) in wanted.items():
        assert page in two, f"{what}: {page} is not within two clicks of the home page"
        assert phrase in _text(page), f"{what}: {page} does not say {phrase!r}"
    assert "docs/reference/index.md" in one, "the reference (the API of Queue) is not linked"


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
    """Every sql block of every page: queries of a queue's SQLite file."""
    return [b.code.strip() for page in _pages() for b in _code_blocks(page) if b.lang == "sql"]


def _sql_example(phrase: str) -> str:
    found = [sql for sql in _sql_examples() if phrase in sql]
    assert len(found) == 1, f"{len(found)} sql examples say {phrase!r}"
    return found[0]


def test_sql_examples_run_with_the_driver(example_db: Path) -> None:
    examples = _sql_examples()
    assert len(examples) >= 4
    stats_query = _sql_example("FROM sqlq_queue_stats")
    counts_query = _sql_example("GROUP BY queue, state")
    conn = dbapi.connect(str(example_db))
    try:
        for sql in examples:
            for statement in filter(None, (s.strip() for s in sql.split(";"))):
                conn.execute(statement).fetchall()
        stats = conn.execute(stats_query.rstrip(";")).fetchall()
        counts = conn.execute(counts_query.rstrip(";")).fetchall()
    finally:
        conn.close()
    assert counts == [("default", "AVAILABLE", 4), ("default", "COMPLETED", 1)]
    # queue, waiting, available, reserved, completed, dead, cancelled, paused, next
    # deadline, next run_at
    assert stats == [("default", 0, 4, 0, 1, 0, 0, 0, None, None)]


def test_sql_examples_run_in_the_sqlite3_shell(example_db: Path) -> None:
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
        ["sqlite3", "-readonly", str(example_db), _sql_example("GROUP BY queue, state")],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.splitlines()
    assert line == ["default|AVAILABLE|4", "default|COMPLETED|1"]


def test_queue_stats_example_shows_its_times_as_utc(tmp_path: Path) -> None:
    """sqlq_queue_stats keeps Unix times (next_deadline, next_run_at), as the tables do;
    the docs' query of it shows them as UTC times, as the other views do theirs."""
    path = tmp_path / "jobs.db"
    with sqlq.Queue(path, lease_seconds=30, max_attempts=1, clock=lambda: 1_700_000_000) as q:
        q.add_many(["a", "b"])
        q.add("later", delay=60)
        q.reserve()
    query = _sql_example("FROM sqlq_queue_stats")
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

#: Languages of the pages' code blocks.  ``python`` and ``sh`` blocks are run by the page
#: tests below (but those marked ``<!-- not run: why -->``); ``sql`` blocks by the tests
#: above; the rest never (output, a systemd unit, a shell session with its output, a
#: container's files).  A fence whose language is in braces (``{toctree}``) is a directive
#: of the site, not code.
RUN_LANGS = ("python", "sh")
NOT_RUN_LANGS = ("sql", "text", "ini", "console", "dockerfile", "yaml")
MARKERS = ("file: ", "not run: ")
_FENCE = re.compile(
    r"((?:^[ ]*<!-- [^\n]*? -->\n)*)^([ ]*)```([\w{}-]*)\n(.*?)^\2```[ ]*$", re.S | re.M
)


@dataclass(frozen=True)
class Block:
    page: str
    section: str
    number: int  # 1, 2, ... within the page
    lang: str
    code: str
    markers: tuple[str, ...]  # ("file: tasks.py",), ("not run: why",) or ()

    def _marker(self, kind: str) -> str | None:
        values = [m.removeprefix(kind) for m in self.markers if m.startswith(kind)]
        return values[0] if values else None

    @property
    def file(self) -> str | None:
        return self._marker("file: ")

    @property
    def not_run(self) -> str | None:
        """Why the block is not run, if a marker says so."""
        return self._marker("not run: ")

    @property
    def runs(self) -> bool:
        return self.lang in RUN_LANGS and not self.not_run

    def __str__(self) -> str:
        return f"{self.page}, {self.section!r}, block {self.number} ({self.lang})"


def _code_blocks(page: str) -> list[Block]:
    text = _text(page)
    blocks = []
    for number, match in enumerate(_FENCE.finditer(text), 1):
        markers, indent, lang, code = match.groups()
        code = textwrap.dedent("".join(line.removeprefix(indent) for line in code.splitlines(True)))
        titles = re.findall(r"^#+ (.+)$", _FENCE.sub("", text[: match.start()]), re.M)
        names = tuple(re.findall(r"<!-- (.*?) -->", markers))
        blocks.append(Block(page, titles[-1] if titles else "", number, lang, code, names))
    return blocks


def _pages_to_run() -> list[str]:
    return [page for page in _pages() if any(b.runs for b in _code_blocks(page))]


@pytest.mark.parametrize("page", _pages())
def test_every_code_block_says_whether_it_runs(page: str) -> None:
    fences = re.findall(r"^[ ]*```([\w{}-]*)$", _text(page), re.M)
    blocks = _code_blocks(page)
    assert len(blocks) * 2 == len(fences), f"{page}: a fence the tests do not parse"
    for block in blocks:
        if block.lang.startswith("{"):
            continue  # a directive of the site (a toctree)
        assert block.lang in RUN_LANGS + NOT_RUN_LANGS, f"{block}: unknown language"
        for marker in block.markers:
            assert marker.startswith(MARKERS), f"{block}: unknown marker {marker!r}"
        if block.file:
            assert block.lang == "python" and not block.not_run, f"{block}: a file: block is Python"
        if block.not_run is not None:
            assert block.lang in RUN_LANGS and block.not_run, f"{block}: not run, and why?"
        if block.lang == "python":
            compile(block.code, str(block), "exec")


def test_the_quick_start_is_not_run_here_but_by_ci() -> None:
    """CI runs the quick start's two commands (tested above): the page tests leave them."""
    quick = [b for b in _code_blocks("README.md") if b.section == "Quick start"]
    assert [b.lang for b in quick] == ["sh", "sh"]
    assert all(b.not_run for b in quick)


def _missing(block: Block) -> str | None:
    """Why ``block`` cannot run on this machine, if it cannot."""
    uses_shell = block.lang == "sh" and re.search(r"^sqlite3 ", block.code, re.M)
    if uses_shell and not shutil.which("sqlite3"):
        return "no sqlite3 shell on this machine"
    return None


def _is_worker_until_stopped(words: list[str]) -> bool:
    return words[:2] == ["sqlq", "worker"] and "--burst" not in words and "--drain" not in words


class Reader:
    """What a reader of a page has on their machine: one folder, in which they save the
    module files, run the scripts (``python example.py``) and the commands in the order the
    page gives them, and leave each ``sqlq worker`` they start running, as its text says
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
        """No worker the reader left running has died or sent a task DEAD: an
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
    exec(compile(block.code, str(block), "exec"), {"__name__": "docs_example"})


def _database_url(request: pytest.FixtureRequest, stack: ExitStack) -> str | None:
    """A fresh schema on the test PostgreSQL server, for the examples that read
    DATABASE_URL; None when this machine has no server (its blocks are then skipped)."""
    try:
        server = request.getfixturevalue("postgres_url")
    except pytest.skip.Exception:
        return None
    return stack.enter_context(databases.fresh_schema(server))


@pytest.mark.parametrize("page", _pages_to_run())
def test_page_examples_run_in_order_in_one_folder(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Every python and sh block of a page, in the page's order, in one folder of its own
    that starts empty, as a reader who follows the page does: the ``file:`` blocks saved as
    modules, each other python block saved as a script and run as ``__main__`` in a process
    of its own, and then again pasted into a module (under a module's name, in this
    process); each sh block run twice in a row; each ``sqlq worker`` that runs until stopped
    left running to the end, serving whatever the later examples add to its database, and
    then stopped with SIGTERM.  A page whose examples read ``DATABASE_URL`` gets a fresh
    schema of the test PostgreSQL server.

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
    blocks = [b for b in _code_blocks(page) if b.runs]
    url = None
    if any("DATABASE_URL" in b.code for b in blocks):
        url = _database_url(request, stack)
        if url:
            monkeypatch.setenv("DATABASE_URL", url)
    skipped = []
    try:
        for block in blocks:
            why = _missing(block) or (
                "no PostgreSQL server" if "DATABASE_URL" in block.code and not url else None
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
        for name, module in list(sys.modules.items()):  # the page's modules, e.g. tasks
            if str(getattr(module, "__file__", "") or "").startswith(str(tmp_path)):
                del sys.modules[name]
    need(not skipped, "the other blocks ran; skipped: " + "; ".join(skipped))


@pytest.mark.parametrize("page", _pages())
def test_each_module_file_has_one_text(page: str) -> None:
    """A reader saves every ``file:`` block of a page in one folder: two blocks of one name
    would replace one module with another under the workers that import it."""
    texts: dict[str, str] = {}
    for block in _code_blocks(page):
        if block.file:
            assert texts.setdefault(block.file, block.code) == block.code, (
                f"{block}: another block of the page is {block.file} too"
            )


def _worker_handlers(page: str) -> dict[str, set[str]]:
    handlers: dict[str, set[str]] = {}
    for block in _code_blocks(page):
        if block.lang not in ("sh", "console"):
            continue
        for line in block.code.splitlines():
            line = line.removeprefix("$ ")
            if not line.startswith("sqlq worker "):
                continue
            words = shlex.split(line, comments=True)
            if len(words) >= 4 and not words[2].startswith("-"):
                handlers.setdefault(words[2], set()).add(words[3])
    return handlers


@pytest.mark.parametrize("page", _pages())
def test_each_database_is_served_by_one_handler(page: str) -> None:
    """Every ``sqlq worker`` command of a page (examples and sessions) on one database runs
    the same handler: a worker of another registry would take the first one's tasks and
    send them DEAD, their names unknown to it."""
    handlers = _worker_handlers(page)
    shared = {db: sorted(targets) for db, targets in handlers.items() if len(targets) > 1}
    assert not shared, f"{page}: databases served by workers of different handlers: {shared}"


def test_the_pages_start_workers() -> None:
    """The test above has something to look at."""
    assert any(_worker_handlers(page) for page in _pages())
