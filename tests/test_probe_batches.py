"""Adversarial probes of the batched Worker (issue 24) with real `sqlq worker`
processes on SQLite: what its prefetch does to long tasks that follow short ones,
to a cancel of a task it holds but has not started, and behind a handler that hangs."""

from __future__ import annotations

import collections
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from test_worker import _cli_worker, _stop, _wait_for

import sqlq


def _counts(db: str) -> dict[str, int]:
    with sqlq.Queue(db, lease_seconds=30) as queue:
        return queue.counts()


def _done(db: str, n: int) -> bool:
    return _counts(db).get("COMPLETED", 0) >= n


@contextmanager
def _workers(tmp_path: Path, db: str, *args: str) -> Iterator[Callable[[], None]]:
    """Start `sqlq worker` processes of one slot (runner_handlers:handle, ``args``) on
    demand; the first is warmed with 40 tasks that take no time, so that its mean
    duration is tiny and it prefetches a whole batch at its next claim.  All are
    stopped (SIGTERM) at the end."""
    log = tmp_path / "handled.log"
    with ExitStack() as stack:
        started: list[subprocess.Popen[bytes]] = []

        def start() -> None:
            err = stack.enter_context(open(tmp_path / f"w{len(started)}.stderr", "wb"))
            started.append(
                _cli_worker(db, err, "runner_handlers:handle", "--concurrency", "1", *args)
            )

        with sqlq.Queue(db, lease_seconds=30) as queue:
            queue.add_many([(f"warm{i}", {"task": f"warm{i}", "log": str(log)}) for i in range(40)])
        try:
            start()
            _wait_for(lambda: _done(db, 40), 120, "the short tasks")
            yield start
        finally:
            for process in started:
                _stop(process)


def _files(tmp_path: Path) -> tuple[str, Path]:
    """The test's database (SQLite) and the handlers' log (runner_handlers)."""
    return f"sqlite:///{tmp_path / 'q.db'}", tmp_path / "handled.log"


def _registered(db: str, n: int) -> bool:
    with sqlq.Queue(db, lease_seconds=30) as queue:
        return len(queue.workers()) == n


@pytest.mark.processes
def test_long_tasks_after_short_ones_are_shared_with_an_idle_worker(tmp_path: Path) -> None:
    db, log = _files(tmp_path)
    with _workers(tmp_path, db) as start:
        start()
        _wait_for(lambda: _registered(db, 2), 60, "the second worker")
        with sqlq.Queue(db, lease_seconds=30) as queue:
            queue.add_many(
                [
                    (f"long{i}", {"task": f"long{i}", "log": str(log), "sleep": 0.4})
                    for i in range(16)
                ]
            )
        _wait_for(lambda: _done(db, 56), 120, "the long tasks")
    ran = collections.Counter(
        line.split()[2] for line in log.read_text().splitlines() if line.startswith("done long")
    )
    # Two idle workers of one slot each share 16 tasks of 0.4 s: about 8 each.
    assert max(ran.values()) <= 11, ran


@pytest.mark.processes
def test_a_task_cancelled_while_prefetched_never_starts_and_ends_cancelled(tmp_path: Path) -> None:
    db, log = _files(tmp_path)
    with _workers(tmp_path, db):
        with sqlq.Queue(db, lease_seconds=30) as queue:
            queue.add_many(
                [
                    ("blocker", {"task": "blocker", "log": str(log), "sleep": 3}),
                    ("victim", {"task": "victim", "log": str(log)}),
                ]
            )
        _wait_for(lambda: "start blocker" in log.read_text(), 60, "the blocker")
        with sqlq.Queue(db, lease_seconds=30) as queue:
            answer = queue.cancel("victim")  # it waits behind the blocker
        _wait_for(lambda: _done(db, 41), 60, "the blocker's end")

        def settled() -> bool:
            counts = _counts(db)
            return counts["RESERVED"] == 0 and counts["AVAILABLE"] == 0

        _wait_for(settled, 60, "the victim's end")
    with sqlq.Queue(db, lease_seconds=30) as queue:
        state = queue.status("victim")
    assert answer in (sqlq.Cancel.STOPPING, sqlq.Cancel.CANCELLED)
    assert "start victim" not in log.read_text()
    assert state == "CANCELLED"


@pytest.mark.processes
def test_tasks_prefetched_behind_a_handler_past_its_time_limit_are_run_elsewhere(
    tmp_path: Path,
) -> None:
    db, log = _files(tmp_path)
    with _workers(tmp_path, db, "--time-limit", "1", "--lease", "3", "--grace", "2") as start:
        with sqlq.Queue(db, lease_seconds=30) as queue:
            queue.add_many(
                [("hung", {"task": "hung", "log": str(log), "sleep": 600})]
                + [(f"next{i}", {"task": f"next{i}", "log": str(log)}) for i in range(5)],
                max_attempts=1,
            )
        _wait_for(lambda: "start hung" in log.read_text(), 60, "the hung handler")
        start()  # an idle worker that could run the five
        # The hung task is failed at its time limit (1 s); the five tasks behind it take
        # no time, so 30 s is ample for either worker (or the lease of 3 s) to free them.
        try:
            _wait_for(lambda: _done(db, 45), 30, "the tasks behind the hung handler")
        except AssertionError:
            pytest.fail(f"the five tasks are still held: {_counts(db)}")
