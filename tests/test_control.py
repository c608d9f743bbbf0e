"""Cancel and pause (sqlq.contract), on every face: cancelling a task not started,
asking a running one to stop, pausing and resuming a queue; and, with real worker
processes, a paused queue that hands out nothing until it is resumed, and a running
handler that learns at a heartbeat that its task was cancelled."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from databases import cli_options, queue_options

import sqlq
from sqlq import Cancel, Retry, Worker, WorkerStats
from sqlq.errors import InvalidTaskId, InvalidTime
from sqlq.testing import ManualClock

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py


# --- cancel a task that has not started ---------------------------------------------


def test_cancel_of_an_available_task_ends_it_cancelled_and_out_of_the_line(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b", "c"], 0)
    assert q.cancel("b", 1) == Cancel.CANCELLED == "CANCELLED"
    assert q.status("b", 2) == "CANCELLED"
    info = q.info("b", 2)
    assert (info.state, info.attempts, info.finished_at, info.updated_at) == ("CANCELLED", 0, 1, 1)
    assert [q.reserve(3), q.reserve(3), q.reserve(3)] == ["a", "c", None]
    assert q.cancel("b", 4) is None  # finished: nothing to do
    assert q.complete("b", 4) is False
    assert q.add("b", 4) is False  # the id is taken until purged


def test_cancel_of_a_waiting_task_means_it_never_wakes(make_queue: Factory) -> None:
    q = make_queue(10, 3, retry=Retry.fixed(5))
    q.add("later", 0, delay=10)
    q.add("retried", 0)
    lease = q.claim(0)
    assert q.fail("retried", 1, token=lease.token) == "WAITING"  # its retry waits until 6
    assert q.cancel("later", 2) == Cancel.CANCELLED
    assert q.cancel("retried", 2) == Cancel.CANCELLED
    assert q.claim(100) is None
    stats = q.stats(100)
    assert stats.next_run_at is None and stats.counts["CANCELLED"] == 2
    assert q.info("retried", 100).attempts == 1  # the attempt it used counts


def test_cancel_of_an_unknown_or_finished_task_changes_nothing(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add_many(["done", "dead"], 0)
    q.complete(q.reserve(0), 1)
    q.fail(q.reserve(1), 1)
    before = q.tasks(2)
    assert [q.cancel(t, 2) for t in ("done", "dead", "nobody")] == [None, None, None]
    assert q.tasks(2) == before


def test_cancel_takes_a_task_id_and_a_time(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    with pytest.raises(InvalidTaskId):
        q.cancel(7, 0)
    with pytest.raises(InvalidTime):
        q.cancel("t", -1)


# --- ask a running task to stop ---------------------------------------------------


def test_cancel_of_a_running_task_asks_it_to_stop_at_its_next_heartbeat(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add("job", 0)
    lease = q.claim(0)
    assert q.heartbeat("job", lease.token, 1) == (11, False)
    assert q.cancel("job", 2) == Cancel.STOPPING == "STOPPING"
    assert q.cancel("job", 3) == Cancel.STOPPING  # asked again: the first time is kept
    info = q.info("job", 3)
    assert (info.state, info.stop_requested_at) == ("RESERVED", 2)
    assert q.heartbeat("job", lease.token, 4) == (14, True)
    assert q.extend("job", lease.token, 5) == 15  # extend works as ever
    assert q.heartbeat("job", lease.token + 1, 5) is None  # not its lease


@pytest.mark.parametrize("end", ["fail", "fail_no_retry", "expire", "release"])
def test_a_task_asked_to_stop_ends_cancelled_however_its_lease_ends_but_a_completion(
    make_queue: Factory, end: str
) -> None:
    q = make_queue(10, 3)
    q.add("job", 0)
    lease = q.claim(0)
    q.cancel("job", 1)
    if end == "fail":
        assert q.fail("job", 2, token=lease.token, error="stopped") == "CANCELLED"
    elif end == "fail_no_retry":
        assert q.fail("job", 2, token=lease.token, retry=False) == "CANCELLED"
    elif end == "release":
        assert q.release("job", lease.token, 2) is True
    info = q.info("job", 20)  # past the lease: an expiry, if nothing ended it
    assert (info.state, info.attempts) == ("CANCELLED", 1)
    assert info.finished_at == (10 if end == "expire" else 2)
    assert q.claim(20) is None
    assert q.complete("job", 21, token=lease.token) is False  # a late complete is refused


def test_a_task_asked_to_stop_that_its_worker_completes_is_completed(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add("job", 0)
    lease = q.claim(0)
    q.cancel("job", 1)
    assert q.complete("job", 2, token=lease.token) is True
    info = q.info("job", 3)
    assert (info.state, info.stop_requested_at) == ("COMPLETED", 1)


def test_cancel_of_a_lease_that_ran_out_cancels_the_task_back_in_line(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add("job", 0)
    q.claim(0)
    assert q.cancel("job", 10) == Cancel.CANCELLED  # its expiry at 10 came first


def test_cancelled_tasks_are_counted_listed_and_purged_like_finished_ones(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b", "c"], 0)
    q.cancel("a", 1)
    q.cancel("b", 5)
    assert q.counts()["CANCELLED"] == 2
    assert [t.task_id for t in q.tasks(6, state="CANCELLED")] == ["a", "b"]
    assert q.purge(6) == 0  # COMPLETED only, by default
    assert q.purge(6, states=["CANCELLED"], older_than=2) == 1
    assert q.status("a", 6) is None and q.status("b", 6) == "CANCELLED"
    assert q.add("a", 7) is True


# --- pause and resume ---------------------------------------------------------------


def test_a_paused_queue_hands_out_nothing_until_resumed(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b", "c", "d"], 0)
    held = q.claim(0)
    assert q.pause(1) is True
    assert q.pause(1) is False  # already paused
    assert q.paused and q.stats(1).paused
    assert q.add("e", 1) is True  # adds still work
    assert q.reserve(2) is None and q.claim(2) is None and q.claim_many(3, 2) == []
    assert q.ready(2) is False
    done, claimed = q.complete_and_claim("a", 3, token=held.token)
    assert (done, claimed) == (True, None)  # in-flight leases finish
    assert q.settle_and_claim(2, 3) == ([], [], [])
    assert q.counts()["AVAILABLE"] == 4
    assert q.resume(4) is True
    assert q.resume(4) is False
    assert not q.paused and not q.stats(4).paused
    assert q.ready(4) is True
    assert [lease.task_id for lease in q.claim_many(10, 5)] == ["b", "c", "d", "e"]


def test_in_flight_leases_of_a_paused_queue_extend_fail_and_run_out(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b", "c"], 0)
    a, b, _ = q.claim_many(3, 0)
    q.pause(1)
    assert q.extend("a", a.token, 2) == 12
    assert q.fail("b", 2, token=b.token) == "AVAILABLE"
    assert q.status("c", 10) == "AVAILABLE"  # its lease ran out
    assert q.claim(10) is None
    assert q.complete("a", 11, token=a.token) is True
    q.resume(11)
    assert [lease.task_id for lease in q.claim_many(5, 11)] == ["b", "c"]


# --- durable: one queue, many processes -------------------------------------------


def _queue(url: str, **options: Any) -> sqlq.Queue:
    return sqlq.Queue(url, lease_seconds=10, max_attempts=3, **queue_options(url), **options)


def test_pause_and_cancel_reach_every_queue_object_on_the_database(queue_url: str) -> None:
    with (
        _queue(queue_url) as one,
        _queue(queue_url) as two,
        _queue(queue_url, queue="other") as other,
    ):
        one.add_many(["a", "b"], 0)
        other.add("x", 0)
        one.pause(1)
        assert two.paused and two.claim(2) is None and not two.ready(2)
        assert other.claim(2) is not None  # a pause is the queue's, not the database's
        lease = one.resume(3) and two.claim(3)
        assert lease and lease.task_id == "a"
        assert one.cancel("a", 4) == Cancel.STOPPING
        assert two.heartbeat("a", lease.token, 5) == (15, True)


def test_stats_shows_cancelled_tasks_and_paused_queues(queue_url: str) -> None:
    with _queue(queue_url) as q, _queue(queue_url, queue="idle") as idle:
        q.add_many(["a", "b"], 0)
        q.cancel("a", 1)
        idle.pause(1)  # a paused queue without tasks is shown too
    out = _sqlq("stats", queue_url, "--json")
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["queues"]["default"]["CANCELLED"] == 1
    assert shown["queues"]["idle"] == dict.fromkeys(shown["queues"]["default"], 0)
    assert [shown["stats"][q]["paused"] for q in ("default", "idle")] == [False, True]
    lines = _sqlq("stats", queue_url).stdout.splitlines()
    assert "CANCELLED" in next(line for line in lines if line.startswith("queue"))
    assert [line.split()[-1] for line in lines if line.startswith(("default", "idle"))][-2:] == [
        "-",
        "PAUSED",
    ]
    watch = _sqlq("stats", queue_url, "--watch", "--count", "1", "--interval", "1ms").stdout
    assert "] default: " in watch and "] idle (PAUSED): " in watch


def test_the_cli_cancels_pauses_and_resumes(queue_url: str) -> None:
    with _queue(queue_url) as q:
        q.add_many(["a", "b"], 0)
    assert _sqlq("pause", queue_url).stdout.strip() == "queue 'default': paused"
    again = _sqlq("pause", queue_url)
    assert (again.returncode, again.stdout.strip()) == (0, "queue 'default': paused already")
    cancel = _sqlq("cancel", queue_url, "a", "nobody")
    assert cancel.returncode == 1
    assert cancel.stdout.splitlines() == ["a: CANCELLED", "nobody: not cancelled (unknown)"]
    with _queue(queue_url) as q:
        assert q.paused and q.status("a") == "CANCELLED"
    assert _sqlq("resume", queue_url).stdout.strip() == "queue 'default': resumed"
    assert _sqlq("resume", queue_url, "--json").stdout.count('"changed": false') == 1
    with _queue(queue_url) as q:
        assert not q.paused and q.reserve() == "b"


def _sqlq(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- a worker's handler learns of a stop request ------------------------------------


@pytest.mark.parametrize("kind", ["registered", "async"])
def test_a_handler_sees_the_stop_request_after_the_next_heartbeat(
    queue_url: str, kind: str
) -> None:
    """A registered task's function, or an async handler, asks sqlq.stop_requested()
    as it works: False until the worker's heartbeat after the cancel, then True; it
    raises, and the task ends CANCELLED (counted as cancelled, not failed)."""
    clock = ManualClock()
    started = threading.Event()
    seen: list[bool] = []

    def working() -> bool:
        """One step of work: whether the task is asked to stop (True within 30 s)."""
        started.set()
        seen.append(sqlq.stop_requested())
        assert len(seen) < 3000, "the stop request never reached the handler"
        return seen[-1]

    tasks = sqlq.Tasks()

    @tasks.task(name="export")
    def export() -> None:
        while not working():
            time.sleep(0.01)
        raise RuntimeError("asked to stop")

    async def handler(payload: None) -> None:
        while not working():
            await asyncio.sleep(0.01)
        raise RuntimeError("asked to stop")

    with _queue(queue_url, clock=clock.time) as q:  # lease 10 s: a heartbeat every 10/3 s
        q.add("job", name="export" if kind == "registered" else None)
        worker = Worker(q, tasks if kind == "registered" else handler, clock=clock)
        out: list[WorkerStats] = []
        thread = threading.Thread(target=lambda: out.append(worker.run(stop_when_idle=True)))
        thread.start()
        try:
            assert started.wait(30)
            assert q.cancel("job") == Cancel.STOPPING
            assert not any(seen)  # told at the next heartbeat, not before
            clock.step(2)  # the claim loop (waiting for its slot) and the heartbeat thread
        finally:
            thread.join(30)
        assert out == [WorkerStats(claimed=1, cancelled=1)]
        info = q.info("job")
        assert info is not None and (info.state, info.attempts) == ("CANCELLED", 1)
    assert seen[-1] and not sqlq.stop_requested()  # False outside a handler


# --- real worker processes -----------------------------------------------------------


def _worker(url: str, handler: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent))
    command = [sys.executable, "-m", "sqlq", "worker", url, f"runner_handlers:{handler}"]
    return subprocess.Popen(
        [*command, *args, *cli_options(url)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _wait_for(condition: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _started(worker: subprocess.Popen[str]) -> None:
    """Read the worker's log until it says it started (its claim loop runs next)."""
    assert worker.stderr is not None
    for line in worker.stderr:
        if "worker started" in line:
            return
    raise AssertionError(f"worker exited with {worker.wait()} before it started")


def _stop(workers: list[subprocess.Popen[str]]) -> list[str]:
    """SIGTERM each worker; what each wrote to stderr (after "worker started")."""
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    logs = []
    for worker in workers:
        try:
            logs.append(worker.communicate(timeout=60)[1])
        except subprocess.TimeoutExpired:
            worker.kill()
            logs.append(worker.communicate()[1])
    return logs


def test_worker_processes_claim_nothing_from_a_paused_queue_until_it_is_resumed(
    queue_url: str,
) -> None:
    tasks = 30
    with _queue(queue_url) as q:
        q.add_many([(f"t{i}", 0) for i in range(tasks)])
        q.pause()
        workers = [_worker(queue_url, "nap", "--concurrency", "2") for _ in range(3)]
        try:
            for worker in workers:
                _started(worker)
            # Every worker's claim loop runs now; for a while none of them gets a lease.
            watch_until = time.monotonic() + 2
            while time.monotonic() < watch_until:
                counts = q.counts()
                assert counts["AVAILABLE"] == tasks, counts
                assert all(w.poll() is None for w in workers)
            q.resume()
            _wait_for(lambda: q.counts()["COMPLETED"] == tasks, "the workers to drain the queue")
        finally:
            _stop(workers)
    assert [w.returncode for w in workers] == [0, 0, 0]


def test_a_running_handler_learns_at_a_heartbeat_that_its_task_was_cancelled(
    queue_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "handler.log"
    with _queue(queue_url) as q:
        q.add("long", payload={"task": "long", "log": str(log)})
        worker = _worker(queue_url, "until_stopped", "--lease", "1s")
        _started(worker)
        try:
            _wait_for(log.exists, "the handler to start")
            assert q.status("long") == "RESERVED"
            assert q.cancel("long") == Cancel.STOPPING
            _wait_for(lambda: q.status("long") == "CANCELLED", "the task to end CANCELLED")
        finally:
            (stderr,) = _stop([worker])
        info = q.info("long")
        assert info is not None and info.attempts == 1
        assert info.last_error == "RuntimeError: asked to stop"
    assert worker.returncode == 0
    assert "task asked to stop" in stderr and "task cancelled" in stderr
    assert (
        "1 claimed, 0 completed, 0 failed, 0 lost, 0 released, 0 timed out (0 dead), "
        "1 cancelled" in stderr
    )
