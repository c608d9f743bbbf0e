"""Priorities (sqlq.contract): higher first, FIFO within a priority, aging that keeps
low priorities from starving (or strict priorities with ``aging=None``), on every
face and backend; the registry's default and per-send priority; the checks."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from databases import cli_options, queue_options

import sqlq
from sqlq import Retry, cli
from sqlq.contract import (
    DEFAULT_AGING,
    MAX_PRIORITY,
    MAX_TIME,
    MIN_PRIORITY,
    STRICT_AGING,
)
from sqlq.errors import InvalidArgument, InvalidConfig
from sqlq.rules import line_key

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py
TESTS = Path(__file__).resolve().parent  # runner_handlers, for the worker processes


def _drain(q: Any, now: float) -> list[str]:
    """Every task id the line hands out at ``now``, in order."""
    taken = []
    while (task_id := q.reserve(now)) is not None:
        taken.append(task_id)
    return taken


def test_higher_priorities_go_first_and_each_priority_is_fifo(make_queue: Factory) -> None:
    q = make_queue(100, 3)
    for i, (task_id, priority) in enumerate(
        [("a0", 0), ("b5", 5), ("c-3", -3), ("d5", 5), ("e0", 0), ("f-3", -3), ("g9", 9)]
    ):
        assert q.add(task_id, i, priority=priority) is True
    assert _drain(q, 10) == ["g9", "b5", "d5", "a0", "e0", "c-3", "f-3"]


def test_one_priority_is_the_fifo_line(make_queue: Factory) -> None:
    """Every task of priority 7 (or all of the default 0): the order they were added."""
    q = make_queue(100, 3)
    ids = [f"t{i}" for i in range(6)]
    for i, task_id in enumerate(ids):
        q.add(task_id, i // 2, priority=7)
    assert _drain(q, 10) == ids


def test_aging_lets_a_waiting_task_pass_higher_priorities_that_came_later(
    make_queue: Factory,
) -> None:
    """With aging 10 s, priority 2 goes before priority 0 that joined less than 20 s
    earlier, and after one that joined more than 20 s earlier (ties: FIFO)."""
    q = make_queue(100, 3, aging=10)
    q.add("low", 0)
    q.add("high-soon", 19, priority=2)  # key -1: before low's 0
    q.add("high-tie", 20, priority=2)  # key 0: low's, but joined later
    q.add("high-late", 21, priority=2)  # key 1: after low
    assert _drain(q, 30) == ["high-soon", "low", "high-tie", "high-late"]


def test_a_priority_joining_a_line_of_one_priority_is_placed_by_the_current_front(
    make_queue: Factory,
) -> None:
    """The front of the line of one priority moves on with each claim; a task of
    another priority that joins then is compared with that front, not an old one."""
    q = make_queue(1000, 3)
    q.add("first", 0)
    q.add("second", 100)
    assert q.reserve(100) == "first"
    q.add("urgent", 150, priority=1)  # as if at 90: before second (100)
    assert _drain(q, 150) == ["urgent", "second"]


def test_the_line_keeps_its_order_as_priorities_run_out_cancel_and_come_back(
    make_queue: Factory,
) -> None:
    """A task cancelled out of a line of three priorities, the first priority's tasks
    running out while others wait, and tasks joining after: the line stays in order
    (WorkQueue keeps the line of one priority apart from the others')."""
    q = make_queue(1000, 3, aging=100)
    q.add("a0", 0)
    q.add("b5", 1, priority=5)  # key -499
    q.add("c-5", 2, priority=-5)  # key 502
    q.add("d5", 3, priority=5)  # key -497
    q.add("e0", 4)
    assert q.reserve(5) == "b5"
    assert q.cancel("e0", 6) == sqlq.Cancel.CANCELLED
    q.add("f0", 7)
    q.add("g5", 8, priority=5)  # key -492: after d5
    assert _drain(q, 9) == ["d5", "g5", "a0", "f0", "c-5"]
    q.add("h-5", 10, priority=-5)  # the line of -5 alone now
    q.add("i0", 11)  # key 11: before h-5's 510
    assert _drain(q, 12) == ["i0", "h-5"]


def test_strict_priorities_with_aging_none(make_queue: Factory) -> None:
    """aging=None: a lower priority waits while any higher one is in line, however
    long it has waited."""
    q = make_queue(100, 3, aging=None)
    q.add("old-low", 0, priority=-1)
    q.add("zero", 10**6)
    q.add("high", 2 * 10**6, priority=1)
    assert _drain(q, 3 * 10**6) == ["high", "zero", "old-low"]


def test_a_retried_released_woken_or_redriven_task_keeps_its_priority(
    make_queue: Factory,
) -> None:
    """Every move back to AVAILABLE places the task by its priority, at the time of
    the call that makes the move (a wake-up or an expiry: the call that applies it)."""
    q = make_queue(10, 3, retry=Retry.fixed(5), aging=None)
    q.add("hi", 0, priority=3)
    q.add_many(["x", "y"], 0)
    lease = q.claim(0)
    assert lease.task_id == "hi"
    assert q.fail("hi", 1, token=lease.token) == "WAITING"  # wakes at 6
    assert q.reserve(7) == "hi"  # woken, ahead of x and y
    assert q.release("hi", q.info("hi", 7).token, 8) is True
    assert q.reserve(8) == "hi"  # released: ahead again
    assert q.reserve(30) == "hi"  # its lease ran out at 18: retried, WAITING until 23
    assert q.fail("hi", 31, token=q.info("hi", 31).token) == "DEAD"
    assert q.redrive(32) == 1
    assert q.info("hi", 32).priority == 3
    assert _drain(q, 33) == ["hi", "x", "y"]


def test_a_debounce_that_wakes_a_waiting_holder_places_it_by_its_priority(
    make_queue: Factory,
) -> None:
    """A WAITING holder that a debounce without a delay makes AVAILABLE joins the line
    at the time of the add, moved ``priority * aging`` earlier, as any task that joins:
    the priority-5 holder goes before a priority-0 task that joined earlier."""
    q = make_queue(10, 3)
    q.add("held", 0, key="k", priority=5, delay=100)
    q.add("plain", 1)
    assert q.add("again", 2, key="k", payload="now", on_key="debounce")
    assert q.info("held", 2).priority == 5
    assert _drain(q, 2) == ["held", "plain"]


def test_claim_many_takes_the_front_in_order(make_queue: Factory) -> None:
    q = make_queue(100, 3)
    q.add_many(["l1", "l2"], 0, priority=-5)
    q.add_many(["h1", "h2"], 1, priority=5)
    q.add("z", 2)
    assert [lease.task_id for lease in q.claim_many(4, 3)] == ["h1", "h2", "z", "l1"]
    assert q.reserve(3) == "l2"


def test_info_and_tasks_show_the_priority(make_queue: Factory) -> None:
    q = make_queue(100, 3)
    q.add("p", 0, priority=MAX_PRIORITY)
    q.add("n", 0, priority=MIN_PRIORITY)
    q.add("d", 0, delay=5, priority=-2)
    assert [(t.task_id, t.priority) for t in q.tasks(1)] == [
        ("p", MAX_PRIORITY),
        ("n", MIN_PRIORITY),
        ("d", -2),
    ]
    assert q.info("p", 1).priority == MAX_PRIORITY


def test_stats_age_is_that_of_the_front_of_the_line(make_queue: Factory) -> None:
    q = make_queue(100, 3)
    q.add("old", 0)
    q.add("urgent", 50, priority=10)
    assert q.stats(60).oldest_available_age == 10  # urgent is next, waiting since 50


@pytest.mark.parametrize(
    "priority", ["1", 1.0, 0.0, True, False, None, MAX_PRIORITY + 1, MIN_PRIORITY - 1]
)
def test_a_bad_priority_is_refused_and_changes_nothing(make_queue: Factory, priority: Any) -> None:
    q = make_queue(100, 3)
    with pytest.raises(InvalidArgument, match="priority"):
        q.add("t", 0, priority=priority)
    with pytest.raises(InvalidArgument, match="priority"):
        q.add_many(["u"], 0, priority=priority)
    assert q.tasks(1) == []
    assert q.add("t", 1, priority=1) and q.reserve(1) == "t"


@pytest.mark.parametrize("aging", [0, -1, math.nan, math.inf, "60", True, 10**9 + 1])
def test_a_bad_aging_is_refused(aging: Any) -> None:
    with pytest.raises(InvalidConfig, match="aging"):
        sqlq.WorkQueue(10, 3, aging=aging)
    with pytest.raises(InvalidConfig, match="aging"):
        sqlq.Queue(":memory:", lease_seconds=10, max_attempts=3, aging=aging)


def test_the_line_key_is_the_contracts_rule() -> None:
    assert DEFAULT_AGING == 60.0
    assert line_key(1000, 2, 60.0) == 880.0
    assert line_key(1000, -1, 60.0) == 1060.0
    assert line_key(1000, 0, STRICT_AGING) == 1000.0
    assert sqlq.WorkQueue(1, 1, aging=None).aging == STRICT_AGING
    # strict: one step of priority outweighs the longest wait there can be
    assert line_key(MAX_TIME, 1, STRICT_AGING) < line_key(0, 0, STRICT_AGING)


def test_a_registered_task_has_a_default_priority_and_each_send_may_override_it() -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="urgent", priority=4)
    def urgent(n: int) -> int:
        return n

    @tasks.task(name="plain")
    def plain(n: int) -> int:
        return n

    q = sqlq.WorkQueue(100, 3)
    low = plain.enqueue(q, {"n": 1}, now=0)
    high = urgent.enqueue(q, {"n": 2}, now=0)
    lowered = urgent.enqueue(q, {"n": 3}, now=0, priority=-1)
    raised = plain.enqueue(q, {"n": 4}, now=0, priority=9)
    assert _drain(q, 1) == [raised, high, low, lowered]
    with pytest.raises(InvalidConfig, match="priority"):
        tasks.task(name="bad", priority=5000)
    with pytest.raises(InvalidArgument, match="priority"):
        plain.enqueue(q, {"n": 5}, now=1, priority="high")


def test_async_queue_adds_with_a_priority(tmp_path: Any) -> None:
    async def main() -> list[str | None]:
        async with sqlq.AsyncQueue(
            str(tmp_path / "q.db"), lease_seconds=10, max_attempts=3, aging=None
        ) as aq:
            await aq.add("low", priority=-1)
            await aq.add("high", priority=1)
            await aq.add_many(["mid"])
            return [await aq.reserve() for _ in range(4)]

    assert asyncio.run(main()) == ["high", "mid", "low", None]


def test_a_task_keeps_the_aging_of_the_queue_that_added_it(queue_url: str) -> None:
    """Aging is stored with each task when it is added (as max_attempts and retry): a
    process with another aging that retries it, or applies its expiry, places it by
    the aging it was added with."""
    options: dict[str, Any] = {"lease_seconds": 1000, "max_attempts": 3}
    with (
        sqlq.Queue(queue_url, aging=None, **options, **queue_options(queue_url)) as strict,
        sqlq.Queue(queue_url, aging=1, **options, **queue_options(queue_url)) as aged,
    ):
        strict.add("urgent", 0, priority=1)
        lease = strict.claim(0)
        aged.add("plain", 100)
        assert aged.fail("urgent", 200, token=lease.token) == "AVAILABLE"
        assert aged.reserve(300) == "urgent"  # strict: ahead of plain, 100 s earlier
        aged.add("soon", 400, priority=1)  # aging 1 s: behind plain, 300 s earlier
        assert [aged.reserve(500), aged.reserve(500)] == ["plain", "soon"]
        aged.add("late", 1400)  # urgent's lease ran out at 1300: back in line first
        assert [aged.reserve(1400), aged.reserve(1400)] == ["urgent", "late"]


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_sqlq_add_priority_and_aging_and_what_show_and_list_print(
    queue_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(capsys, "add", queue_url, "plain")[0] == 0
    assert _cli(capsys, "list", queue_url)[1].splitlines()[0].split() == [
        "task_id",
        "name",
        "state",
        "attempts",
        "progress",
        "last_error",
    ]  # fmt: skip  (no priority column while every task has priority 0)
    assert _cli(capsys, "add", queue_url, "a", "b", "--priority", "7", "--aging", "none")[0] == 0
    assert _cli(capsys, "add", queue_url, "c", "--priority", "-2", "--aging", "5m")[0] == 0
    lines = [line.split() for line in _cli(capsys, "list", queue_url)[1].splitlines()]
    assert lines[0][:4] == ["task_id", "name", "state", "priority"]
    assert [line[:4] for line in lines[1:]] == [
        ["plain", "-", "AVAILABLE", "0"],
        ["a", "-", "AVAILABLE", "7"],
        ["b", "-", "AVAILABLE", "7"],
        ["c", "-", "AVAILABLE", "-2"],
    ]
    assert re.search(r"^priority: +7$", _cli(capsys, "show", queue_url, "a")[1], re.M)
    assert json.loads(_cli(capsys, "show", queue_url, "c", "--json")[1])["priority"] == -2
    listed = json.loads(_cli(capsys, "list", queue_url, "--json")[1])
    assert [t["priority"] for t in listed["tasks"]] == [0, 7, 7, -2]
    with sqlq.Queue(queue_url, lease_seconds=10, max_attempts=1) as q:
        assert [q.reserve(), q.reserve(), q.reserve(), q.reserve()] == ["a", "b", "plain", "c"]


@pytest.mark.parametrize("bad", [["--priority", "1001"], ["--priority", "x"], ["--aging", "0"]])
def test_sqlq_add_refuses_a_bad_priority_or_aging(
    queue_url: str, capsys: pytest.CaptureFixture[str], bad: list[str]
) -> None:
    code, _, err = _cli(capsys, "add", queue_url, "t", *bad)
    assert code == 2 and bad[0] in err
    with sqlq.Queue(queue_url, lease_seconds=10, max_attempts=1) as q:
        assert q.tasks() == []


def test_the_views_show_the_priority(queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=300, max_attempts=1) as q:
        q.add("running", priority=3)
        q.add("doomed", priority=-4)
        q.claim()
        q.fail("doomed", token=q.claim().token)
        with q.engine.connect() as conn:
            leases = conn.execute(sa.text("SELECT task_id, priority FROM sqlq_leases")).all()
            dead = conn.execute(sa.text("SELECT task_id, priority FROM sqlq_dead_letters")).all()
    assert [tuple(r) for r in leases] == [("running", 3)]
    assert [tuple(r) for r in dead] == [("doomed", -4)]


def test_a_killed_workers_urgent_task_runs_first_when_its_lease_runs_out(
    queue_url: str, tmp_path: Path
) -> None:
    """Real processes: a `sqlq worker` takes the urgent task first and is SIGKILLed in
    it; once its lease has run out the task is back in line by its priority, ahead of
    the tasks that waited all along, and another worker runs it first."""
    log, pidfile = tmp_path / "log", tmp_path / "pid"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    command = [sys.executable, "-m", "sqlq", "worker", queue_url, "runner_handlers:handle",
               "--lease", "2", *cli_options(queue_url)]  # fmt: skip
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3, aging=None) as q:
        for task_id in ["low-1", "low-2"]:
            q.add(task_id, payload={"task": task_id, "log": str(log)})
        urgent = {"task": "urgent", "log": str(log), "pidfile": str(pidfile), "hang": 600}
        q.add("urgent", payload=urgent, priority=5)
        first = subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"))
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait()
        _wait_for(lambda: q.info("urgent").state == "AVAILABLE")  # its lease ran out
        second = subprocess.run([*command, "--drain"], env=env, cwd=tmp_path, timeout=120)
        assert second.returncode == 0
    done = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("done")]
    assert done == ["urgent", "low-1", "low-2"]


def _wait_for(condition: Callable[[], bool], seconds: float = 60) -> None:
    """Poll ``condition`` until it holds; fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# --- a queue that takes up issue 13's features midway -------------------------------
# The WorkQueue's lease calls take the seed's paths until a queue uses a priority, a
# group, a stop request or a pause (memory.py: _plain); each of these tests starts a
# queue without any, with tasks in line and a lease running, then uses one.


def test_a_second_priority_added_midway_goes_first_and_a_failure_rejoins_behind(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b"], 0)
    assert q.reserve(1) == "a"
    assert q.add("urgent", 2, priority=5) is True
    assert q.fail("a", 3) == "AVAILABLE"
    assert [q.reserve(4), q.reserve(4), q.reserve(4)] == ["urgent", "b", "a"]
    assert q.fail("urgent", 5) == "AVAILABLE"  # back in line by its priority
    assert q.reserve(6) == "urgent"


def test_a_group_added_midway_is_claimed_and_its_completions_free_its_slots(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.add("a", 0)
    assert q.reserve(1) == "a"
    q.set_limit("t", 2, concurrency=1)
    q.add_many(["t1", "t2"], 2, group="t")
    assert q.reserve(3) == "t1"
    assert q.reserve(3) is None  # the group's one slot is taken
    assert q.complete("t1", 4) is True and q.complete("a", 4) is True
    assert q.reserve(5) == "t2"


def test_a_stop_request_midway_ends_the_running_task_cancelled(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b"], 0)
    assert q.reserve(1) == "a"
    assert q.cancel("a", 2) == "STOPPING"
    assert q.fail("a", 3) == "CANCELLED"
    assert [q.reserve(4), q.reserve(4)] == ["b", None]


def test_tasks_lined_up_before_a_group_keep_their_place_at_equal_line_keys(
    make_queue: Factory,
) -> None:
    # b is added and a fails back into line while the queue is plain, all at time 5;
    # then a grouped task joins at 5 too: the two were first in line, so they go first
    q = make_queue(10, 3)
    q.add("a", 5)
    assert q.reserve(5) == "a"
    q.add("b", 5)
    assert q.fail("a", 5) == "AVAILABLE"
    q.add("g", 5, group="x")
    assert [q.reserve(5), q.reserve(5), q.reserve(5)] == ["b", "a", "g"]


def test_tasks_lined_up_before_a_priority_keep_their_place_at_equal_line_keys(
    make_queue: Factory,
) -> None:
    # priority 1 added 60 s later (the default aging) has the line key of b's add
    q = make_queue(1000, 3)
    q.add("b", 5)
    q.add("p", 5 + DEFAULT_AGING, priority=1)
    assert [q.reserve(70), q.reserve(70)] == ["b", "p"]
