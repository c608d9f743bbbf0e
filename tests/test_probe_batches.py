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
