"""Adversarial probes of the batched Worker (issue 24) with real `sqlq worker`
processes on SQLite: what a prefetch does to long tasks that follow short ones."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from test_worker import _cli_worker, _stop, _wait_for

import sqlq


def _done(db: str, n: int) -> bool:
    with sqlq.Queue(db, lease_seconds=30) as queue:
        return queue.counts().get("COMPLETED", 0) >= n


@pytest.mark.processes
@pytest.mark.xfail(
    strict=True,
    reason="the prefetch is cut by the mean duration of the tasks already run, so a "
    "worker that has just run short tasks claims a whole batch of long ones and runs "
    "them one after the other while another idle worker gets none (hoarding)",
)
def test_long_tasks_after_short_ones_are_not_hoarded(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'q.db'}"
    log = tmp_path / "handled.log"
    with sqlq.Queue(db, lease_seconds=30) as queue:
        queue.add_many([(f"warm{i}", {"task": f"warm{i}", "log": str(log)}) for i in range(40)])
    errs = [open(tmp_path / f"w{i}.stderr", "wb") for i in range(2)]  # noqa: SIM115
    first = _cli_worker(db, errs[0], "runner_handlers:handle", "--concurrency", "1")
    second = None
    try:
        # The first worker learns that tasks are short (its mean duration).
        _wait_for(lambda: _done(db, 40), 120, "the short tasks")
        second = _cli_worker(db, errs[1], "runner_handlers:handle", "--concurrency", "1")

        def both_registered() -> bool:
            with sqlq.Queue(db, lease_seconds=30) as queue:
                return len(queue.workers()) == 2

        _wait_for(both_registered, 60, "the second worker")
        with sqlq.Queue(db, lease_seconds=30) as queue:
            queue.add_many(
                [
                    (f"long{i}", {"task": f"long{i}", "log": str(log), "sleep": 0.4})
                    for i in range(16)
                ]
            )
        _wait_for(lambda: _done(db, 56), 120, "the long tasks")
    finally:
        for process in (first, second):
            if process is not None:
                _stop(process)
        for err in errs:
            err.close()
    ran = collections.Counter(
        line.split()[2] for line in log.read_text().splitlines() if line.startswith("done long")
    )
    # Two idle workers of one slot each share 16 tasks of 0.4 s: about 8 each.
    assert max(ran.values()) <= 11, ran


@pytest.mark.processes
@pytest.mark.xfail(
    strict=True,
    reason="a prefetched lease whose task was cancelled before its handler started is "
    "run anyway (and ends COMPLETED): the worker learns of the cancel only at a "
    "heartbeat, and does not give back a prefetched lease it was asked to stop",
)
def test_a_task_cancelled_while_prefetched_never_starts(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'q.db'}"
    log = tmp_path / "handled.log"
    with sqlq.Queue(db, lease_seconds=30) as queue:
        queue.add_many([(f"warm{i}", {"task": f"warm{i}", "log": str(log)}) for i in range(40)])
    with open(tmp_path / "worker.stderr", "wb") as err:
        worker = _cli_worker(db, err, "runner_handlers:handle", "--concurrency", "1")
        try:
            _wait_for(lambda: _done(db, 40), 120, "the short tasks")
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
                with sqlq.Queue(db, lease_seconds=30) as queue:
                    counts = queue.counts()
                return counts["RESERVED"] == 0 and counts["AVAILABLE"] == 0

            _wait_for(settled, 60, "the victim's end")
        finally:
            _stop(worker)
    with sqlq.Queue(db, lease_seconds=30) as queue:
        state = queue.status("victim")
    assert answer in (sqlq.Cancel.STOPPING, sqlq.Cancel.CANCELLED)
    assert "start victim" not in log.read_text()
    assert state == "CANCELLED"
