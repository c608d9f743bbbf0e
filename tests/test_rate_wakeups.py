"""A rate-limited group starts its tasks at its rate (issue 23): an idle worker wakes
when the next rate slot falls due (Queue.next_due), not at its next poll; real
`sqlq worker` processes on every durable backend, their start times measured."""

from __future__ import annotations

import itertools
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from databases import cli_options, queue_options

import sqlq

#: Records when each task started: its result is the start time.
HANDLERS = """
import time

def stamp(payload):
    return time.time()
"""


def _queue(url: str) -> sqlq.Queue:
    return sqlq.Queue(url, lease_seconds=30, max_attempts=1, **queue_options(url))


def test_next_due_tells_the_next_rate_slot_lease_end_and_wake_up(queue_url: str) -> None:
    with _queue(queue_url) as q:
        assert q.next_due(100) is None  # nothing held back
        q.set_limit("g", 100, rate=4, per=1)
        q.add_many([("a", None), ("b", None)], 100, group="g")
        assert q.next_due(100) == 0  # a slot is free now
        lease = q.claim(100)
        assert lease is not None and lease.task_id == "a"
        assert q.next_due(100) == pytest.approx(0.25)  # the next slot, before a's lease end
        assert q.next_due(100.1) == pytest.approx(0.15)
        q.add("later", 100.1, delay=0.05)
        assert q.next_due(100.1) == pytest.approx(0.05)  # a WAITING task due first
        q.pause(100.1)
        assert q.next_due(100.1) is None  # nothing is due while paused
        q.resume(100.1)
        assert q.claim(100.2) is not None  # "later"
        assert q.claim(100.25) is not None  # "b", at its slot
        # Only leases left: the first to run out (a's, claimed at 100).
        assert q.next_due(101) == pytest.approx(29)


@pytest.mark.processes
@pytest.mark.parametrize(("rate", "tasks"), [(4, 32), (20, 40)])
def test_a_limited_group_starts_its_tasks_at_its_rate(
    queue_url: str, tmp_path: Path, rate: int, tasks: int
) -> None:
    """Two worker processes (two slots each) drain a group limited to ``rate`` starts a
    second: the starts follow the rate within 10%, over the whole drain and in the
    median gap.  (Single gaps vary by the hand-off of a claimed task to a handler;
    that no span holds more starts than the rate is tests/test_limits.py's.)"""
    (tmp_path / "stamps.py").write_text(HANDLERS)
    with _queue(queue_url) as q:
        q.set_limit("g", rate=rate, per=1)
        q.add_many([(f"t{i:03}", i) for i in range(tasks)], group="g")
    command = [
        sys.executable, "-m", "sqlq", "worker", queue_url, "stamps:stamp", "--drain",
        "--concurrency", "2", "--log-level", "warning", *cli_options(queue_url),
    ]  # fmt: skip
    workers = [subprocess.Popen(command, cwd=tmp_path) for _ in range(2)]
    try:
        for worker in workers:
            assert worker.wait(120) == 0
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    with _queue(queue_url) as q:
        starts = sorted(q.result(f"t{i:03}") for i in range(tasks))
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    spacing = 1 / rate
    span = starts[-1] - starts[0]
    assert span == pytest.approx((tasks - 1) * spacing, rel=0.10), (span, gaps)
    assert statistics.median(gaps) == pytest.approx(spacing, rel=0.10), gaps
