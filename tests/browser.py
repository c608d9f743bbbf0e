"""The real dashboard in a real browser: `sqlq web` as a process, and headless Chromium
driven by Selenium (Debian's chromium and chromium-driver; .ci/run installs them).

Not a test module; imported as ``import browser`` (tests/ is on ``sys.path``).  Run as
a script, it takes the screenshots of the README (docs/web-*.png) from a demo database:
``python tests/browser.py``.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: The machine's network is closed: nothing of Chromium's own may reach out.
CHROMIUM_OPTIONS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1280,860",
)


def missing() -> str | None:
    """What the browser tests need that this machine lacks, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def server(db: str, *options: str, host: str = "127.0.0.1", command: str = "web") -> Iterator[str]:
    """`sqlq web DB` (or `sqlq metrics DB`) on a free port, as a process of its own;
    yields its base URL once it listens (it prints its address then).  Stopped with
    SIGTERM (then SIGKILL) at the end."""
    argv = [sys.executable, "-m", "sqlq", command, db, "--host", host, "--port", "0"]
    process = subprocess.Popen([*argv, *options], stdout=subprocess.PIPE, text=True)
    try:
        yield listening(process, command)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def listening(process: subprocess.Popen[str], command: str = "web", timeout: float = 60) -> str:
    """The base URL (on 127.0.0.1) of a `sqlq web` process, from its first line, which
    must come while the process runs: with stdout a pipe or a file (systemd, Docker), a
    line left in the process's buffer would come only at its exit (issue 23)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"sqlq {command} said nothing in {timeout} s (its address not flushed?)"
    started = process.stdout.readline()
    assert started.startswith(f"sqlq {command}: "), f"the server did not start: {started!r}"
    port = started.rstrip().rstrip("/").rpartition(":")[2]
    return f"http://127.0.0.1:{port}"


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium with a fresh profile, driven by Selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="sqlq-chromium-")
    for argument in (*CHROMIUM_OPTIONS, f"--user-data-dir={profile}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@contextmanager
def holding(db: str, queue: str, tasks: int) -> Iterator[None]:
    """A real `sqlq worker` on ``queue`` whose handler holds each task it takes until the
    end, running until the registry shows it holding ``tasks`` tasks."""
    import sqlq

    release = Path("release").resolve()
    Path("holding.py").write_text(
        "import os, time\n"
        "def hold(payload):\n"
        f"    while not os.path.exists({str(release)!r}):\n"
        "        time.sleep(0.05)\n"
    )
    argv = ["worker", db, "holding:hold", "--queue", queue, "--concurrency", "4", "--lease", "3"]
    worker = subprocess.Popen([sys.executable, "-m", "sqlq", *argv], stderr=subprocess.DEVNULL)
    try:
        with sqlq.Queue(db, lease_seconds=30, max_attempts=1, queue=queue) as q:
            deadline = time.monotonic() + 60
            while sum(len(w.holds) for w in q.workers()) < tasks:
                assert worker.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
        yield
    finally:
        release.touch()
        worker.terminate()
        worker.wait(60)


def _screenshots(folder: Path) -> None:
    """docs/web-*.png: the main pages on a small demo database."""
    import sqlq

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the pages name the database as given: jobs.db
        db = "jobs.db"
        with sqlq.Queue(db, lease_seconds=300, max_attempts=2, queue="emails") as q:
            # The row a worker killed 5 minutes ago left (its last write; stale now), written
            # first, at that time (later calls move the database's time on).
            q.beat_worker("9c41d2e07f3a8b15", time.time() - 300, every=10, concurrency=4,
                          host="batch-2", pid=31877)  # fmt: skip
            q.add_many([(f"welcome-{n}", {"user": n}) for n in range(1, 9)])
            for _ in range(3):
                lease = q.claim()
                assert lease is not None
                q.complete(lease.task_id, token=lease.token, result={"sent": True})
            for _ in range(2):
                lease = q.claim()
                assert lease is not None
                q.fail(lease.task_id, token=lease.token, error="SMTPServerDisconnected")
            q.claim()
        with sqlq.Queue(db, lease_seconds=300, max_attempts=1, queue="reports") as q:
            q.add("report-2026-12", payload={"month": "2026-12"}, name="monthly")
            q.add("report-2026-11", payload={"month": "2026-11"}, name="monthly")
            lease = q.claim()
            assert lease is not None
            q.fail(lease.task_id, token=lease.token, error="KeyError: 'totals'")
            q.add_many([(f"report-2026-0{n}", {"month": f"2026-0{n}"}, "monthly") for n in (8, 9)])
        with server(db) as url, chromium() as driver, holding(db, "reports", 3):
            for name, path in [
                ("queues", "/"),
                ("tasks", "/tasks"),
                ("task", "/task?queue=reports&id=report-2026-12"),
                ("dead", "/dead"),
                ("workers", "/workers"),
            ]:
                driver.get(url + path)
                if name == "queues":  # its charts, once drawn
                    from selenium.webdriver.common.by import By
                    from selenium.webdriver.support.ui import WebDriverWait

                    WebDriverWait(driver, 30).until(
                        lambda d: d.find_element(By.ID, "charts").get_attribute("data-drawn")
                    )
                driver.save_screenshot(str(folder / f"web-{name}.png"))


if __name__ == "__main__":
    _screenshots(Path(__file__).resolve().parent.parent / "docs")
