"""The worker registry (sqlq.registry): which workers are alive, what they hold, since
when; on every durable backend, and with real `sqlq worker` processes."""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from databases import cli_options, queue_options
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

import sqlq
from sqlq.backends import open_backend
from sqlq.cli import main
from sqlq.errors import InvalidArgument, InvalidTaskId, InvalidTime
from sqlq.records import Held, WorkerInfo
from sqlq.registry import KEEP_STALE, STALE_BEATS
from sqlq.web import create_app

#: A browser's address on this machine, and the dashboard as it asks for it.
LOCAL = ("127.0.0.1", 50000)
HERE = "http://127.0.0.1:8470"


def _queue(url: str, queue: str = "default") -> sqlq.Queue:
    return sqlq.Queue(url, lease_seconds=30, max_attempts=2, queue=queue, **queue_options(url))


def test_a_workers_row_shows_what_it_holds_until_it_is_forgotten(queue_url: str) -> None:
    with _queue(queue_url) as q:
        q.add_many(["a", "b"], 0)
        first, second = q.claim_many(2, 1)
        q.beat_worker("w1", 2, every=10, concurrency=4, host="box", pid=77)
        q.beat_worker(
            "w1", 5, every=10, concurrency=4, host="box", pid=77,
            holds=[(first.task_id, first.token, 1), (second.task_id, second.token, 4)],
        )  # fmt: skip
        [worker] = q.workers(6)
        assert worker == WorkerInfo(
            "w1", "default", "box", 77, 4, started_at=2, beat_at=5, stale_at=5 + STALE_BEATS * 10,
            stale=False, holds=(Held("a", first.token, 1), Held("b", second.token, 4)),
        )  # fmt: skip
        assert q.forget_worker("w1", 7) is True
        assert q.forget_worker("w1", 7) is False
        assert q.workers(8) == []


def test_a_row_not_written_goes_stale_and_is_pruned_by_the_next_write(queue_url: str) -> None:
    with _queue(queue_url) as q:
        q.beat_worker("gone", 10, every=2, host="box", pid=1)
        stale_at = 10 + STALE_BEATS * 2
        assert [w.stale for w in q.workers(stale_at - 0.5)] == [False]
        assert [w.stale for w in q.workers(stale_at)] == [True]
        # Shown as stale for KEEP_STALE seconds, then no longer.
        assert [w.stale for w in q.workers(stale_at + KEEP_STALE)] == [True]
        assert q.workers(stale_at + KEEP_STALE + 1) == []
        # Another worker's write (of any queue) deletes it: a read at a time that would
        # show it finds it gone.
        with _queue(queue_url, "other") as other:
            other.beat_worker("alive", stale_at + KEEP_STALE + 1, every=2, host="box", pid=2)
            assert [w.worker_id for w in other.workers(stale_at)] == ["alive"]
        assert q.workers(stale_at) == []
        assert [row.worker_id for row in _rows(queue_url)] == ["alive"]


def test_the_queue_lists_its_own_workers_and_the_database_holds_all(queue_url: str) -> None:
    with _queue(queue_url, "mail") as mail, _queue(queue_url, "video") as video:
        mail.beat_worker("m", 1, every=5)
        video.beat_worker("v", 1, every=5)
        assert [w.worker_id for w in mail.workers(2)] == ["m"]
        [worker] = video.workers(2)
        assert (worker.worker_id, worker.host, worker.pid) == (
            "v",
            os.uname().nodename,
            os.getpid(),
        )
    assert sorted(row.worker_id for row in _rows(queue_url)) == ["m", "v"]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"worker_id": ""}, InvalidArgument),
        ({"worker_id": "w\x00"}, InvalidArgument),
        ({"worker_id": 7}, InvalidArgument),
        ({"every": 0}, InvalidArgument),
        ({"every": -1}, InvalidArgument),
        ({"every": "10"}, InvalidArgument),
        ({"concurrency": 0}, InvalidArgument),
        ({"concurrency": 2**31}, InvalidArgument),
        ({"pid": -1}, InvalidArgument),
        ({"host": ""}, InvalidArgument),
        ({"holds": [("t", 1)]}, InvalidArgument),
        ({"holds": 5}, InvalidArgument),
        ({"holds": [("", 1, 0)]}, InvalidTaskId),
        ({"holds": [("t", 0, 0)]}, InvalidArgument),
        ({"holds": [("t", 1, float("nan"))]}, InvalidTime),
    ],
)
def test_a_bad_beat_is_refused_and_writes_nothing(
    queue_url: str, options: dict[str, Any], error: type[Exception]
) -> None:
    with _queue(queue_url) as q:
        q.beat_worker("w", 1, every=5)
        beat: dict[str, Any] = {"worker_id": "w", "every": 5, **options}
        with pytest.raises(error):
            q.beat_worker(beat.pop("worker_id"), 2, **beat)
        [worker] = q.workers(3)
        assert (worker.beat_at, worker.holds) == (1, ())


XSS = "<img src=x onerror=alert(1)>"


def test_readers_judge_staleness_by_the_databases_time_not_their_own_clock(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker beat at the queue's time, which later calls moved far ahead of this
    host's clock (on PostgreSQL the same happens to a reader whose clock runs ahead of
    the server's): past its stale time in the queue's time, it is stale to every
    reader, though this host's clock has not reached that time."""
    ahead = time.time() + 100_000
    with _queue(queue_url) as q:
        q.beat_worker("w", ahead, every=10)
        q.add("later", ahead + 10 * STALE_BEATS + 1)  # the queue's time moves on
        assert [w.stale for w in q.workers()] == [True]
    assert main(["workers", queue_url, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(w["worker_id"], w["stale"]) for w in printed["workers"]] == [("w", True)]
    assert printed["now"] >= ahead + 10 * STALE_BEATS
    with TestClient(create_app(queue_url), base_url=HERE, client=LOCAL) as client:
        assert [w["stale"] for w in client.get("/api/workers").json()["workers"]] == [True]
        alive = {
            sample.labels["queue"]: sample.value
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for sample in family.samples
            if sample.name == "sqlq_workers"
        }
        assert alive == {"default": 0}


def test_sqlq_workers_the_api_the_page_and_metrics_show_them(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    with _queue(queue_url, "mail") as q:
        q.beat_worker("gone", now - 1000, every=10, host="old-box", pid=1)  # stale long since
        q.add(XSS, payload=1)
        lease = q.claim()
        assert lease is not None
        q.beat_worker("busy", every=10, host="box", pid=2, holds=[(XSS, lease.token, now - 5)])
    with _queue(queue_url, "idle") as idle:
        idle.add("waiting")

    assert main(["workers", queue_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["queue", "host", "pid", "slots", "started", "heartbeat", "holds"]
    assert [line.split()[:3] for line in lines[1:]] == [
        ["mail", "box", "2"],
        ["mail", "old-box", "1"],
    ]
    assert f"{XSS} (token {lease.token}," in lines[1] and "STALE" in lines[2]
    assert main(["workers", queue_url, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [(w["worker_id"], w["stale"]) for w in printed["workers"]] == [
        ("busy", False), ("gone", True)
    ]  # fmt: skip
    assert printed["workers"][0]["holds"] == [
        {
            "task_id": XSS,
            "token": lease.token,
            "since": now - 5,
            "now": None,  # a live row's leases, as it wrote them
            "state": None,
            "token_now": None,
        }
    ]

    with TestClient(create_app(queue_url), base_url=HERE, client=LOCAL) as client:
        api = client.get("/api/workers").json()
        page = client.get("/workers").text
        front = client.get("/").text
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for sample in family.samples
        }
    assert {**api, "now": 0} == {**printed, "now": 0}  # the same document, read anew
    assert 'href="/workers"' in front  # in the nav of every page
    assert XSS not in page and html.escape(XSS) in page  # shown as text
    link = "/task?" + urlencode({"queue": "mail", "id": XSS})
    assert f'href="{html.escape(link)}"' in page  # to the held task's page
    assert page.count('class="stale"') == 1 and "old-box" in page
    assert samples[("sqlq_workers", (("queue", "mail"),))] == 1  # the stale one is not alive
    assert samples[("sqlq_workers", (("queue", "idle"),))] == 0


def _rows(url: str) -> list[Any]:
    """Every row of the registry, as `sqlq workers` reads it."""
    backend = open_backend(url, migrate=False)
    try:
        return backend.workers()[1]
    finally:
        backend.close()


# --- real worker processes -------------------------------------------------------------

#: A handler that holds its task until the file its payload names exists.
HANDLERS = """
import os, time

def hold(path):
    while not os.path.exists(path):
        time.sleep(0.01)
"""


def _worker(url: str, folder: Path) -> subprocess.Popen[bytes]:
    """``sqlq worker URL handlers:hold`` with leases of 3 s (a heartbeat a second)."""
    (folder / "handlers.py").write_text(HANDLERS)
    return subprocess.Popen(
        [sys.executable, "-m", "sqlq", "worker", url, "handlers:hold", "--lease", "3",
         "--concurrency", "2", *cli_options(url)],
        cwd=folder, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _wait_for(found: Callable[[], list[WorkerInfo]], ok: Callable[[list[WorkerInfo]], bool],
              worker: subprocess.Popen[bytes]) -> list[WorkerInfo]:  # fmt: skip
    """Poll the registry until ``ok`` says yes (the worker must live meanwhile)."""
    deadline = time.monotonic() + 60
    while not ok(seen := found()):
        assert worker.poll() is None and time.monotonic() < deadline, seen
        time.sleep(0.02)
    return seen


@pytest.mark.processes
def test_a_worker_process_shows_what_it_holds_and_leaves_when_it_stops(
    queue_url: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    with _queue(queue_url) as q:
        q.add("held", payload=str(release))
        worker = _worker(queue_url, tmp_path)
        try:
            [shown] = _wait_for(q.workers, lambda seen: bool(seen and seen[0].holds), worker)
            info = q.info("held")
            assert info is not None and info.state == "RESERVED"
            assert shown.holds == (Held("held", info.token, shown.holds[0].since),)
            # (the first write runs beside the first claim: started_at, the queue's time
            # of that write, may be a moment after the claim)
            assert shown.holds[0].since <= shown.beat_at
            assert (shown.pid, shown.concurrency, shown.stale) == (worker.pid, 2, False)
            release.touch()  # the handler returns: the next write holds nothing
            _wait_for(q.workers, lambda seen: bool(seen and not seen[0].holds), worker)
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0
        assert q.workers() == []  # a clean stop deletes its row


@pytest.mark.processes
def test_a_killed_worker_goes_stale_and_is_pruned(queue_url: str, tmp_path: Path) -> None:
    with _queue(queue_url) as q:
        q.add("held", payload=str(tmp_path / "never"))
        worker = _worker(queue_url, tmp_path)
        try:
            [shown] = _wait_for(q.workers, lambda seen: bool(seen and seen[0].holds), worker)
        finally:
            worker.kill()
            worker.wait(60)
        [left] = q.workers(shown.beat_at)  # its last write stays
        assert left.holds == shown.holds and not left.stale
        assert left.stale_at == shown.beat_at + STALE_BEATS * 1.0  # its heartbeat: 1 s
        [seen] = q.workers(left.stale_at)
        assert seen.stale and seen.worker_id == left.worker_id
        q.beat_worker("next", left.stale_at + KEEP_STALE + 1, every=1)
        assert [w.worker_id for w in q.workers(left.stale_at)] == ["next"]


@pytest.mark.processes
def test_a_killed_workers_row_shows_what_is_still_true_of_its_tasks(
    queue_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stale row's leases are checked against the tasks (the CLI, the JSON API, the
    page and Queue.workers): still its lease, run out, or the task's state and holder
    now; a live worker's row is shown as it wrote it."""
    retry = sqlq.Retry.immediate()
    with sqlq.Queue(
        queue_url, lease_seconds=30, max_attempts=3, retry=retry, **queue_options(queue_url)
    ) as q:
        q.add_many([("a", str(tmp_path / "never")), ("b", str(tmp_path / "never"))])
        worker = _worker(queue_url, tmp_path)
        try:
            [shown] = _wait_for(
                q.workers, lambda seen: bool(seen and len(seen[0].holds) == 2), worker
            )
        finally:
            worker.kill()
            worker.wait(60)
        assert all(h.now is None for h in shown.holds)  # alive: as it wrote them
        tokens = {h.task_id: h.token for h in shown.holds}
        infos = {task_id: q.info(task_id) for task_id in tokens}
        stale = shown.stale_at
        [seen] = q.workers(stale)
        assert seen.stale
        for held in seen.holds:
            info = infos[held.task_id]
            assert info is not None and info.deadline is not None
            ran_out = info.deadline <= stale
            assert (held.now, held.state, held.token_now) == (
                "ran out" if ran_out else "held",
                "RESERVED",
                held.token,
            )
        # Another worker takes both once their leases ran out: completes "a", holds "b".
        later = max(i.deadline for i in infos.values() if i and i.deadline) + 1
        [seen] = q.workers(later)
        assert {h.task_id: h.now for h in seen.holds} == {"a": "ran out", "b": "ran out"}
        first, second = q.claim(later), q.claim(later)
        assert first is not None and second is not None
        done, held = (first, second) if first.task_id == "a" else (second, first)
        assert q.complete("a", token=done.token, now=later)
        [seen] = q.workers(later)
        now = {h.task_id: (h.now, h.state, h.token_now) for h in seen.holds}
        assert now == {
            "a": ("moved on", "COMPLETED", done.token),
            "b": ("moved on", "RESERVED", held.token),
        }
    assert main(["workers", queue_url]) == 0
    out = capsys.readouterr().out
    assert f"a (token {tokens['a']}," in out and "now COMPLETED" in out
    assert f"now RESERVED by token {held.token}" in out
    assert main(["workers", queue_url, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    [row] = printed["workers"]
    assert {h["task_id"]: [h["now"], h["state"], h["token_now"]] for h in row["holds"]} == {
        "a": ["moved on", "COMPLETED", done.token],
        "b": ["moved on", "RESERVED", held.token],
    }
    with TestClient(create_app(queue_url), base_url=HERE, client=LOCAL) as client:
        assert client.get("/api/workers").json()["workers"][0]["holds"] == row["holds"]
        page = client.get("/workers").text
    assert "now COMPLETED" in page and f"now RESERVED by token {held.token}" in page
