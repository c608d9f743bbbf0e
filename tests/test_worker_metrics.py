"""A worker's own metrics (sqlq.worker.metrics): a worker process serves its histograms
on its own port while it runs, parsed here by prometheus-client's parser."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import browser
import pytest
from prometheus_client.parser import text_string_to_metric_families

import sqlq
from sqlq.errors import InvalidConfig
from sqlq.worker import Worker

#: A worker process on the database argv[1], serving its metrics on port argv[2].
WORKER = """
import sys
import sqlq
from sqlq.worker import Worker

def handle(payload):
    if payload == "fail":
        raise ValueError("failed on purpose")

with sqlq.Queue(sys.argv[1], lease_seconds=30, max_attempts=1) as q:
    Worker(q, handle, concurrency=2, metrics_port=int(sys.argv[2])).run()
"""


def _counts(url: str) -> dict[tuple[str, str], float]:
    """(histogram, outcome) -> its _count, from one scrape."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return {
        (family.name, sample.labels.get("outcome", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.endswith("_count")
    }


@pytest.mark.processes
def test_a_worker_process_serves_its_histograms(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        q.add_many([("ok-1", "ok"), ("ok-2", "ok"), ("bad", "fail")])
    port = browser.free_port()
    worker = subprocess.Popen([sys.executable, "-c", WORKER, db, str(port)])
    wanted = {
        ("sqlq_worker_handler_seconds", "completed"): 2,
        ("sqlq_worker_handler_seconds", "failed"): 1,
    }
    try:
        deadline = time.monotonic() + 60
        while True:  # polls the worker's state until it has handled the three tasks
            try:
                counts = _counts(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                counts = {}
            if all(counts.get(key) == n for key, n in wanted.items()):
                break
            assert worker.poll() is None and time.monotonic() < deadline, counts
            time.sleep(0.05)
        assert counts[("sqlq_worker_transaction_seconds", "")] >= 2  # the claims, the reports
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert worker.returncode == 0
    with pytest.raises(OSError):  # the server stops with the worker
        _counts(f"http://127.0.0.1:{port}/metrics")


def test_metrics_port_must_be_a_port(tmp_path: Path) -> None:
    with sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=1) as q:
        for port in (-1, 70000, "8000", True):
            with pytest.raises(InvalidConfig, match="metrics_port must be a port number"):
                Worker(q, print, metrics_port=port)  # type: ignore[arg-type]


def _scrape(url: str) -> dict[tuple[str, str], float]:
    """(sample, outcome) -> its value: the tasks totals and the histograms' counts."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    return {
        (sample.name, sample.labels.get("outcome", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.endswith(("_count", "_total"))
    }


@pytest.mark.processes
def test_sqlq_worker_serves_its_metrics_with_metrics_port(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        q.add_many([("ok-1", "ok"), ("ok-2", "ok")])
        q.add("bad", payload="fail", max_attempts=2)
    (tmp_path / "handlers.py").write_text(
        "def handle(payload):\n"
        "    if payload == 'fail':\n"
        "        raise ValueError('failed on purpose')\n"
    )
    port = browser.free_port()
    argv = ["worker", db, "handlers:handle", "--metrics-port", str(port), "--concurrency", "2"]
    worker = subprocess.Popen([sys.executable, "-m", "sqlq", *argv], cwd=tmp_path)
    wanted = {
        ("sqlq_worker_tasks_total", "completed"): 2,
        ("sqlq_worker_tasks_total", "retried"): 1,
        ("sqlq_worker_tasks_total", "dead"): 1,
        ("sqlq_worker_handler_seconds_count", "failed"): 2,
    }
    try:
        deadline = time.monotonic() + 60
        while True:  # polls the worker's state until it has handled the tasks
            try:
                found = _scrape(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                found = {}
            if all(found.get(key) == n for key, n in wanted.items()):
                break
            assert worker.poll() is None and time.monotonic() < deadline, found
            time.sleep(0.05)
        assert ("sqlq_worker_tasks_total", "lost") not in found  # (no series before one)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert worker.returncode == 0


def test_the_totals_share_the_bound_on_task_names() -> None:
    from sqlq.worker.metrics import MAX_NAMES, OTHER_NAMES, WorkerMetrics

    metrics = WorkerMetrics("jobs", 0)
    for i in range(3 * MAX_NAMES):
        metrics.counted(f"send-to-user-{i}", "completed")
    metrics.handled("made-up-later", "completed", 0.01)  # one bound for both
    samples = [s for family in metrics.registry.collect() for s in family.samples]
    totals = {s.labels["name"]: s.value for s in samples if s.name == "sqlq_worker_tasks_total"}
    assert len(totals) == MAX_NAMES + 1 and totals[OTHER_NAMES] == 2 * MAX_NAMES
    assert totals["send-to-user-0"] == 1
    handled = {s.labels["name"] for s in samples if s.name == "sqlq_worker_handler_seconds_count"}
    assert handled == {OTHER_NAMES}


#: A scrape's Authorization header: the token as a bearer token, or basic auth.
TOKEN = "a-token-for-the-worker-metrics"


def _status(url: str, authorization: str | None = None) -> int:
    """The HTTP status of a scrape (0: nothing listens)."""
    request = urllib.request.Request(url)
    if authorization is not None:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code
    except urllib.error.URLError:  # not listening (yet)
        return 0


@pytest.mark.processes
def test_sqlq_worker_serves_its_metrics_on_another_address_only_with_a_token(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "jobs.db")
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        q.add("t")
    (tmp_path / "handlers.py").write_text("def handle(payload):\n    pass\n")
    argv = [sys.executable, "-m", "sqlq", "worker", db, "handlers:handle", "--metrics-host",
            "0.0.0.0"]  # fmt: skip
    port = browser.free_port()
    refused = subprocess.run(
        [*argv, "--metrics-port", str(port)], cwd=tmp_path, capture_output=True, text=True
    )
    assert refused.returncode != 0
    assert "serving on 0.0.0.0 lets other machines in" in refused.stderr
    assert "--metrics-token" in refused.stderr
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as q:
        assert q.status("t") == "AVAILABLE"  # refused before anything was claimed

    env = {**os.environ, "SQLQ_METRICS_TOKEN": TOKEN}
    worker = subprocess.Popen([*argv, "--metrics-port", str(port)], cwd=tmp_path, env=env)
    url = f"http://127.0.0.1:{port}/metrics"
    basic = base64.b64encode(f"prometheus:{TOKEN}".encode()).decode()
    try:
        deadline = time.monotonic() + 60
        while (status := _status(url, f"Bearer {TOKEN}")) != 200:  # until it listens
            assert worker.poll() is None and time.monotonic() < deadline, status
            time.sleep(0.05)
        assert _status(url) == 401
        assert _status(url, "Bearer not-the-token-of-the-worker") == 401
        assert _status(url, f"Basic {basic}") == 200
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
    assert worker.returncode == 0


def test_a_worker_checks_its_metrics_address_and_token(tmp_path: Path) -> None:
    with sqlq.Queue(str(tmp_path / "jobs.db"), lease_seconds=30, max_attempts=1) as q:
        with pytest.raises(InvalidConfig, match="lets other machines in"):
            Worker(q, print, metrics_port=0, metrics_host="0.0.0.0")
        with pytest.raises(InvalidConfig, match="at least 16 characters"):
            Worker(q, print, metrics_port=0, metrics_host="0.0.0.0", metrics_token="short")
        with pytest.raises(InvalidConfig, match="give metrics_port"):
            Worker(q, print, metrics_host="0.0.0.0", metrics_token=TOKEN)
        with pytest.raises(InvalidConfig, match="must be an address"):
            Worker(q, print, metrics_port=0, metrics_host="")
        worker = Worker(q, print, metrics_port=0, metrics_host="localhost")
        assert worker.metrics is not None and worker.metrics.host == "localhost"
