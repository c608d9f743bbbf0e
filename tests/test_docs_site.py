"""The documentation site (docs/): it builds with warnings as errors, its reference covers
everything public, and it works in the real browser the dashboard's tests use, served
from this machine with no network.

The site is built once per test run (``site``: a session fixture; under pytest-xdist the
first worker builds it under a file lock while the others wait, and all read the same
build).  The build runs as CI and a contributor run it: ``sphinx-build -W --keep-going
-b html docs OUT`` (docs/conf.py; docs-changes/i27-site.md has the command).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import browser
import pytest
from filelock import FileLock
from needs import need

import sqlq
import sqlq.errors
from sqlq import schema
from sqlq.cli import subcommands

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@dataclass(frozen=True)
class Site:
    html: Path
    returncode: int
    log: str
    seconds: float

    def page(self, name: str) -> str:
        return (self.html / name).read_text("utf-8")


def build(docs: Path, out: Path) -> tuple[int, str, float]:
    """``sphinx-build -W --keep-going -b html`` of ``docs`` into ``out``: its exit code,
    its output and how long it took."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q",
         "-d", str(out.parent / "doctrees"), str(docs), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The site, built strictly once for the whole run (xdist's workers share it)."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, which every worker's folder is in
    folder = shared / "docs-site"
    record = folder / "build.json"
    with FileLock(shared / "docs-site.lock"):
        if not record.exists():
            folder.mkdir(exist_ok=True)
            code, log, seconds = build(DOCS, folder / "html")
            record.write_text(json.dumps({"returncode": code, "log": log, "seconds": seconds}))
    built = json.loads(record.read_text())
    return Site(folder / "html", built["returncode"], built["log"], built["seconds"])


def built(site: Site) -> Site:
    """The site, or the test fails with the build's output."""
    if site.returncode != 0:
        pytest.fail(f"sphinx-build failed ({site.returncode}):\n{site.log}", pytrace=False)
    return site


def _ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def test_the_site_builds_with_warnings_as_errors(site: Site, record_property: Any) -> None:
    record_property("docs_build_seconds", round(site.seconds, 1))
    built(site)
    assert "WARNING" not in site.log and "ERROR" not in site.log, site.log
    assert (site.html / "index.html").is_file()
    assert (site.html / "searchindex.js").is_file()


def test_a_warning_fails_the_build(tmp_path: Path) -> None:
    """-W as the site's build runs it: a broken cross-reference to sqlq's API (nitpicky
    in docs/conf.py) or a link to a missing page fails it, and --keep-going reports both."""
    docs = tmp_path / "docs"
    (docs / "_ext").mkdir(parents=True)
    (docs / "_ext" / "sqlq_reference.py").write_text(
        (DOCS / "_ext" / "sqlq_reference.py").read_text("utf-8")
    )
    (docs / "conf.py").write_text((DOCS / "conf.py").read_text("utf-8"))
    (docs / "index.md").write_text(
        "# Broken\n\n{py:meth}`sqlq.Queue.no_such_call` and [a page](no-such-page.md)\n"
    )
    code, log, _ = build(docs, tmp_path / "out" / "html")
    assert code != 0, log
    assert "sqlq.Queue.no_such_call" in log and "no-such-page" in log, log


def test_the_reference_has_every_public_name(site: Site) -> None:
    ids = {i for p in (built(site).html / "reference").glob("*.html") for i in _ids(p.read_text())}
    names = [n for n in sqlq.__all__ if n != "errors"]
    assert [n for n in names if f"sqlq.{n}" not in ids] == []
    # Queue's calls, each with its own entry (its methods are the library's surface)
    calls = [n for n in dir(sqlq.Queue) if not n.startswith("_")]
    assert [n for n in calls if f"sqlq.Queue.{n}" not in ids] == []
    assert "module-sqlq.errors" in _ids(site.page("reference/errors.html"))


def test_the_reference_has_every_error_async_call_and_testing_helper(site: Site) -> None:
    errors = _ids(built(site).page("reference/errors.html"))
    classes = [
        name
        for name, value in vars(sqlq.errors).items()
        if isinstance(value, type) and issubclass(value, sqlq.errors.SqlqError)
    ]
    assert len(classes) > 20
    assert [n for n in classes if f"sqlq.errors.{n}" not in errors] == []
    aio = _ids(site.page("reference/asyncio.html"))
    calls = [n for n in dir(sqlq.AsyncQueue) if not n.startswith("_")]
    assert [n for n in calls if f"sqlq.AsyncQueue.{n}" not in aio] == []
    assert "sqlq.testing.ManualClock" in _ids(site.page("reference/testing.html"))
    django = _ids(site.page("reference/django.html"))
    assert {"sqlq.django.Backend", "sqlq.django.run_worker"} <= django


def _entry(html: str, name: str) -> str:
    """The text of one entry of a reference page: from its anchor to the next entry."""
    start = html.index(f'id="{name}"')
    end = html.find('id="sqlq.', start + 1)  # (an overload's signatures share one entry)
    return re.sub(r"<[^>]+>", "", html[start : end if end > 0 else None])


def test_each_call_of_a_queue_says_what_it_raises(site: Site) -> None:
    api = built(site).page("reference/api.html")
    aio = site.page("reference/asyncio.html")
    missing = {}
    for page, queue in ((api, sqlq.Queue), (aio, sqlq.AsyncQueue)):
        calls = [  # dir(): Queue's calls come from its parts (sqlq/durable/), not vars()
            n
            for n in dir(queue)
            if not n.startswith("_")
            and callable(getattr(queue, n))
            and n not in ("close", "interrupt_waits")
        ]
        assert len(calls) > 40
        for call in calls:
            text = _entry(page, f"sqlq.{queue.__name__}.{call}")
            gaps = [e for e in ("Raises", "StorageError", "QueueClosed") if e not in text]
            if gaps:
                missing[f"{queue.__name__}.{call}"] = gaps
    assert missing == {}
    # what the call takes, and the call's own errors
    assert "ClockSkew" in _entry(api, "sqlq.Queue.add")
    assert "InvalidArgument" not in _entry(api, "sqlq.Queue.counts")  # takes nothing
    result = _entry(api, "sqlq.Queue.result")
    assert "NoResult" in result and "TaskDead" in result
    assert "ResultTimeout" in _entry(aio, "sqlq.AsyncQueue.wait_for_result")
    # in memory: bad arguments, and no database to fail or close
    memory = _entry(api, "sqlq.WorkQueue.add")
    assert "InvalidArgument" in memory and "StorageError" not in memory


def test_the_cli_reference_has_every_subcommand_and_option(site: Site) -> None:
    html = built(site).page("reference/cli.html")
    commands = subcommands()
    assert len(commands) > 15
    assert [c for c in commands if f"sqlq-{c}" not in _ids(html)] == []
    # each option as its own or with its aliases ("-v, --verbose"); --help is on every
    # command, said once at the top
    options = {
        s
        for p in commands.values()
        for a in p._actions
        if a.help != argparse.SUPPRESS  # hidden from --help, and from the reference
        for s in a.option_strings
    }
    options -= {"-h", "--help"}
    shown = set(re.findall(r"<kbd>([^<]+)</kbd>", html))
    shown = {o for text in shown for o in text.split(", ")}
    assert [o for o in sorted(options) if o not in shown] == []


def test_the_schema_and_metrics_pages_are_generated_from_the_code(site: Site) -> None:
    page = built(site).page("reference/schema.html")
    names = [t.name for t in schema.metadata.sorted_tables] + list(schema.VIEWS)
    assert [n for n in names if n.replace("_", "-") not in _ids(page)] == []
    for table in schema.metadata.sorted_tables:
        assert all(f">{c.name}<" in page for c in table.columns), table.name
    metrics = built(site).page("reference/metrics.html")
    for name in ("sqlq_tasks", "sqlq_workers", "sqlq_wal_bytes", "sqlq_worker_tasks_total",
                 "sqlq_worker_handler_seconds_bucket"):  # fmt: skip
        assert f">{name}" in metrics, name


def test_the_schema_page_shows_the_views_a_migrated_database_has(tmp_path: Path) -> None:
    """The views' SQL on the page is what the migrations leave in a database: the last
    definition of each, not one a later migration replaced."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        from sqlq_reference import view_definitions
    finally:
        sys.path.remove(str(DOCS / "_ext"))
    path = tmp_path / "views.db"
    sqlq.Queue(path).close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        views = dict(db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'view'"))
    shown = view_definitions(ROOT / "migrations" / "sqlite")
    assert sorted(views) == sorted(schema.VIEWS)
    assert {name: shown[name].rstrip(";") for name in views} == views


def test_the_pages_load_nothing_from_the_network(site: Site) -> None:
    """Scripts, styles, fonts and images all come from the site's own files."""
    outside = re.compile(r'<(?:script|link|img)\b[^>]*\b(?:src|href)="(?:https?:)?//', re.I)
    pages = sorted(built(site).html.rglob("*.html"))
    assert len(pages) > 5
    assert [str(p) for p in pages if outside.search(p.read_text("utf-8"))] == []


# --- in the browser ----------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def served(site: Site) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (a free port), as a static host serves it."""
    handler = functools.partial(_Quiet, directory=str(built(site).html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    need(browser.missing() is None, str(browser.missing()))
    with browser.chromium() as d:
        yield d


def _wait(driver: Any, condition: Any) -> Any:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 30, ignored_exceptions=(WebDriverException,)).until(condition)


def _sidebar_link(driver: Any, text: str) -> Any:
    from selenium.webdriver.common.by import By

    links = driver.find_elements(By.CSS_SELECTOR, ".sidebar-tree a.reference")
    found = [a for a in links if a.text.strip() == text]
    assert found, [a.text for a in links]
    return found[0]


def test_home_page_and_a_reference_page_render_and_navigation_works(
    driver: Any, served: str
) -> None:
    from selenium.webdriver.common.by import By

    driver.get(served + "/")
    assert "sqlq" in driver.title
    assert driver.find_element(By.TAG_NAME, "h1").is_displayed()
    # The theme's styles applied: Furo's sidebar sits beside the page, not above it.
    sidebar = driver.find_element(By.CSS_SELECTOR, ".sidebar-drawer")
    content = driver.find_element(By.CSS_SELECTOR, ".main .content")
    assert sidebar.location["x"] < content.location["x"]

    _sidebar_link(driver, "Reference").click()
    _wait(driver, lambda d: d.current_url.endswith("/reference/index.html"))
    _sidebar_link(driver, "Python API").click()
    _wait(driver, lambda d: d.current_url.endswith("/reference/api.html"))
    queue = _wait(driver, lambda d: d.find_element(By.ID, "sqlq.Queue"))
    assert queue.is_displayed()
    assert "class sqlq.Queue" in queue.text.replace("\n", " ")


def test_the_built_in_search_finds_queue_offline(driver: Any, served: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(served + "/reference/index.html")
    box = driver.find_element(By.CSS_SELECTOR, "input.sidebar-search")
    box.send_keys("Queue", Keys.ENTER)
    _wait(driver, lambda d: "/search.html?q=Queue" in d.current_url)

    def queue_result(d: Any) -> Any:
        """The result that leads to sqlq.Queue's entry, once the search has listed it
        (results are listed a few at a time)."""
        links = d.find_elements(By.CSS_SELECTOR, "#search-results ul.search li a")
        wanted = [a for a in links if a.get_attribute("href").endswith("#sqlq.Queue")]
        return wanted[0] if wanted else None

    result = _wait(driver, queue_result)
    assert result.get_attribute("href") == served + "/reference/api.html#sqlq.Queue"
    result.click()
    _wait(driver, lambda d: d.current_url.endswith("/reference/api.html#sqlq.Queue"))
    assert driver.find_element(By.ID, "sqlq.Queue").is_displayed()
