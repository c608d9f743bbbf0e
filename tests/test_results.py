"""Results and progress: what a handler returns, stored with its task and awaitable,
and the progress a lease's holder reports (sqlq.contract's section on them).

The contract's tests run on every face (make_queue: memory, SQLite, PostgreSQL);
the waits take a clock and a sleep of the test's, or are ended by a worker in
another process; none sleeps to order anything.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import sqlq
from sqlq import errors
from sqlq.results import FIRST_POLL, ResultWait

Factory = Callable[..., Any]
TESTS = Path(__file__).parent


# --- results: stored by the completion, read by id ------------------------------------


def test_a_completion_stores_its_result_for_result_and_info(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("a", 0)
    q.add("b", 0)
    a, b = q.claim(1), q.claim(1)
    assert q.complete("a", 2, token=a.token, result={"rows": [1, 2], "ok": True})
    assert q.complete("b", 2, token=b.token)  # no result
    assert q.result("a", 3) == {"rows": [1, 2], "ok": True}
    assert q.info("a", 3).result == {"rows": [1, 2], "ok": True}
    assert q.result("b", 3) is None and q.info("b", 3).result is None


def test_result_of_a_task_without_one_is_a_typed_error(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    with pytest.raises(errors.NoResult) as unknown:
        q.result("nope", 0)
    assert unknown.value.state is None and unknown.value.task_id == "nope"
    q.add("t", 0)
    with pytest.raises(errors.NoResult) as waiting:
        q.result("t", 0)
    assert waiting.value.state == "AVAILABLE" and type(waiting.value) is errors.NoResult
    lease = q.claim(1)
    with pytest.raises(errors.NoResult, match="RESERVED"):
        q.result("t", 1)
    q.fail("t", 2, token=lease.token, error="boom")
    with pytest.raises(errors.TaskDead) as dead:
        q.result("t", 3)
    assert dead.value.error == "boom" and dead.value.state == "DEAD"


def test_a_retried_completion_keeps_the_first_result(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    lease = q.claim(0)
    assert q.complete("t", 1, token=lease.token, result="first")
    assert q.complete("t", 2, token=lease.token, result="second")  # a retry: True again
    assert q.result("t", 3) == "first"


def test_a_late_holder_stores_no_result(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    late = q.claim(0)
    current = q.claim(10)  # the first lease ran out at 10: the task is leased again
    assert current.task_id == "t"
    assert not q.complete("t", 11, token=late.token, result="late")
    assert q.complete("t", 12, token=current.token, result="current")
    assert q.result("t", 13) == "current"


def test_every_completing_call_stores_results(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b", "c", "d", "e"], 0)
    a, b, c, d, e = q.claim_many(5, 1)
    assert q.complete_many([("a", a.token, 1), ("b", b.token), c], 2) == [True, True, True]
    done, lease = q.complete_and_claim("d", 3, token=d.token, result=[4])
    assert done and lease is None
    assert q.settle_and_claim(0, 4, completed=[("e", e.token, {"e": 5})]) == ([True], [], [])
    assert [q.result(t, 5) for t in "abcde"] == [1, None, None, [4], {"e": 5}]


@pytest.mark.parametrize(
    ("result", "error"),
    [
        (b"raw", errors.InvalidPayload),
        ({1, 2}, errors.InvalidPayload),
        (float("nan"), errors.InvalidPayload),
        ("x" * 100, errors.PayloadTooLarge),
    ],
)
def test_a_result_that_cannot_be_stored_is_refused_and_changes_nothing(
    make_queue: Factory, result: Any, error: type[Exception]
) -> None:
    q = make_queue(10, 3, max_payload_bytes=64)
    q.add_many(["a", "b"], 0)
    a, b = q.claim_many(2, 0)
    with pytest.raises(error, match="result"):
        q.complete("a", 1, token=a.token, result=result)
    with pytest.raises(error):  # one bad item refuses the whole batch
        q.complete_many([("a", a.token, "fine"), ("b", b.token, result)], 1)
    with pytest.raises(error):
        q.settle_and_claim(1, 1, completed=[("b", b.token, result)])
    assert [q.status(t, 1) for t in "ab"] == ["RESERVED", "RESERVED"]
    assert q.complete("a", 2, token=a.token, result="x" * 60)  # within the limit
    assert q.result("a", 2) == "x" * 60


def test_purge_removes_the_result_with_its_task(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    q.complete("t", 1, token=q.claim(0).token, result="old")
    assert q.purge(2) == 1
    with pytest.raises(errors.NoResult):
        q.result("t", 3)
    q.add("t", 3)  # the id again: a new task, without the old one's result
    q.complete("t", 4, token=q.claim(3).token)
    assert q.result("t", 5) is None


# --- progress: a compare-and-set on the current lease -----------------------------------


def test_progress_is_stored_under_the_current_lease(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    lease = q.claim(0)
    assert q.progress("t", lease.token, 0.25, "a quarter", now=1)
    info = q.info("t", 1)
    assert (info.progress, info.progress_message, info.updated_at) == (0.25, "a quarter", 1)
    assert q.progress("t", lease.token, 3, now=2)  # a count, and no message
    assert (q.info("t", 2).progress, q.info("t", 2).progress_message) == (3, None)
    q.complete("t", 3, token=lease.token)
    assert q.info("t", 3).progress == 3  # the latest report stays with the task


def test_progress_from_a_lease_that_ran_out_or_ended_is_refused(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    first = q.claim(0)
    assert not q.progress("t", first.token, 0.5, "late", now=10)  # ran out at 10
    assert q.status("t", 10) == "AVAILABLE"
    second = q.claim(11)
    assert not q.progress("t", first.token, 0.5, "late", now=12)  # another holds it now
    assert q.progress("t", second.token, 0.1, now=12)
    q.complete("t", 13, token=second.token)
    assert not q.progress("t", second.token, 0.9, now=14)  # ended
    assert not q.progress("nope", second.token, 0.9, now=14)
    info = q.info("t", 14)
    assert (info.progress, info.progress_message) == (0.1, None)


@pytest.mark.parametrize(
    ("value", "message"),
    [(float("nan"), None), (float("inf"), None), (True, None), ("1", None), (None, 5),
     (None, "nul\x00"), (None, "x" * 1025), (None, "\ud800")],
)  # fmt: skip
def test_a_bad_progress_report_is_refused_and_changes_nothing(
    make_queue: Factory, value: Any, message: Any
) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    lease = q.claim(0)
    q.progress("t", lease.token, 0.5, "kept", now=0)
    with pytest.raises(errors.InvalidArgument):
        q.progress("t", lease.token, value, message, now=1)
    info = q.info("t", 1)
    assert (info.progress, info.progress_message) == (0.5, "kept")


# --- waiting for a result ----------------------------------------------------------


class FakeTime:
    """A clock and a sleep for a wait: a sleep moves the clock, then runs ``step``."""

    def __init__(self, step: Callable[[], None] = lambda: None) -> None:
        self.now = 0.0
        self.pauses: list[float] = []
        self.step = step

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
        self.step()


def test_wait_for_result_returns_once_the_task_completes(make_queue: Factory) -> None:
    q = make_queue(60, 3)
    now = time.time()
    q.add("t", now)
    lease = q.claim(now)
    looks = 0

    def step() -> None:  # the third pause ends with the task completed
        nonlocal looks
        looks += 1
        if looks == 3:
            q.complete("t", now, token=lease.token, result={"answer": 42})

    fake = FakeTime(step)
    assert q.wait_for_result("t", 10, clock=fake.clock, sleep=fake.sleep) == {"answer": 42}
    assert fake.pauses == [FIRST_POLL, 2 * FIRST_POLL, 4 * FIRST_POLL]


def test_wait_for_result_of_a_dead_task_raises_its_error(make_queue: Factory) -> None:
    q = make_queue(60, 1)
    now = time.time()
    q.add("t", now)
    lease = q.claim(now)
    fake = FakeTime(lambda: q.fail("t", now, token=lease.token, error="broken"))
    with pytest.raises(errors.TaskDead, match="broken") as dead:
        q.wait_for_result("t", 10, clock=fake.clock, sleep=fake.sleep)
    assert dead.value.error == "broken" and fake.pauses == [FIRST_POLL]


def test_wait_for_result_times_out_with_pauses_that_double_up_to_poll(
    make_queue: Factory,
) -> None:
    q = make_queue(60, 1)
    q.add("t", time.time())
    fake = FakeTime()
    with pytest.raises(errors.ResultTimeout) as timeout:
        q.wait_for_result("t", 1, poll=0.3, clock=fake.clock, sleep=fake.sleep)
    assert timeout.value.state == "AVAILABLE" and isinstance(timeout.value, TimeoutError)
    assert fake.pauses[:6] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.3]
    assert fake.now == pytest.approx(1.0) and max(fake.pauses) == 0.3
    with pytest.raises(errors.ResultTimeout) as unknown:  # an unknown id is waited for
        q.wait_for_result("nope", 0, clock=fake.clock, sleep=fake.sleep)
    assert unknown.value.state is None


@pytest.mark.parametrize(
    ("timeout", "poll"), [(-1, 1), (float("nan"), 1), ("1", 1), (1, 0), (1, -1), (1, True)]
)
def test_wait_for_result_refuses_bad_durations(timeout: Any, poll: Any) -> None:
    with pytest.raises(errors.InvalidArgument):
        ResultWait("t", timeout, poll, time.monotonic)


def test_async_wait_for_result_lets_the_loop_run(queue_url: str) -> None:
    """The twin awaits its pauses: another coroutine completes the task meanwhile."""

    async def main() -> Any:
        async with sqlq.AsyncQueue(queue_url, lease_seconds=60, max_attempts=1) as aq:
            await aq.add("t")
            lease = await aq.claim()
            assert await aq.progress("t", lease.token, 0.5, "half")
            waiting = asyncio.create_task(aq.wait_for_result("t", 60))
            await asyncio.sleep(0)  # the wait has started (its first look is queued)
            await aq.complete("t", token=lease.token, result="done")
            return await waiting, await aq.result("t")

    assert asyncio.run(main()) == ("done", "done")


def test_wait_for_result_in_another_process_gets_a_worker_processes_result(
    queue_url: str, tmp_path: Path
) -> None:
    """A `sqlq worker` process runs the task (reporting progress, returning a value);
    this process's wait_for_result returns that value."""
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1) as q:
        q.add("sq", payload={"n": 7})
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
        worker = subprocess.Popen(
            [sys.executable, "-m", "sqlq", "worker", queue_url, "runner_handlers:square",
             "--drain"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            assert q.wait_for_result("sq", 120) == {"square": 49}
            _, stderr = worker.communicate(timeout=120)
        finally:
            worker.kill()
            worker.wait()
        assert worker.returncode == 0, stderr
        info = q.info("sq")
    assert (info.progress, info.progress_message) == (0.5, "squaring")


# --- the worker stores what handlers return and lets them report progress -------------


def test_a_worker_stores_what_its_handler_returns(queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1) as q:
        q.add_many([("a", 2), ("b", 3), ("c", None)])
        sqlq.Worker(q, lambda n: None if n is None else {"twice": 2 * n}).run(stop_when_idle=True)
        assert [q.result(t) for t in "abc"] == [{"twice": 4}, {"twice": 6}, None]


def test_a_registered_tasks_return_value_is_its_result(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task
    def add(x: int, y: int) -> int:
        return x + y

    @tasks.task
    async def shout(word: str) -> str:
        return word.upper()

    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1) as q:
        first, second = add.defer(q, x=2, y=3), shout.defer(q, word="hi")
        sqlq.Worker(q, tasks).run(stop_when_idle=True)
        assert (q.result(first), q.result(second)) == (5, "HI")


def test_a_handler_result_that_cannot_be_stored_sends_its_task_dead(queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=5) as q:
        q.add_many(["bad", "good"])
        stats = sqlq.Worker(q, lambda _: object()).run(stop_when_idle=True)
        assert stats.dead == 2
        with pytest.raises(errors.TaskDead, match="InvalidPayload"):
            q.result("bad")
        assert q.info("bad").attempts == 5  # no retry: it would return the same


def test_a_handler_reports_progress_through_current_task(queue_url: str) -> None:
    reported, go = threading.Event(), threading.Event()
    answers: list[bool] = []

    def handler(_: object) -> str:
        answers.append(sqlq.current_task().progress(0.5, "half way"))
        reported.set()
        assert go.wait(60)
        return "done"

    async def async_handler(_: object) -> None:
        answers.append(sqlq.current_task().progress(1, "async"))

    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1) as q:
        q.add("t")
        worker = sqlq.Worker(q, handler)
        thread = threading.Thread(target=worker.run, kwargs={"stop_when_idle": True})
        thread.start()
        try:
            assert reported.wait(60)
            info = q.info("t")
            assert (info.state, info.progress, info.progress_message) == (
                "RESERVED",
                0.5,
                "half way",
            )
        finally:
            go.set()
            thread.join(60)
        assert q.result("t") == "done"
        q.add("u")
        sqlq.Worker(q, async_handler).run(stop_when_idle=True)
        assert q.info("u").progress_message == "async" and answers == [True, True]


def test_current_task_outside_a_handler_is_refused() -> None:
    with pytest.raises(errors.InvalidArgument, match="current_task"):
        sqlq.current_task()


# --- where people look: show, list, the views ----------------------------------------


def _running_with_progress(url: str) -> None:
    with sqlq.Queue(url, lease_seconds=300, max_attempts=1) as q:
        q.add_many(["done", "running"])
        done = q.claim()
        q.complete("done", token=done.token, result={"n": 1})
        q.progress("running", q.claim().token, 0.75, "three quarters")


def test_show_and_list_print_results_and_progress(queue_url: str) -> None:
    _running_with_progress(queue_url)

    def sqlq_cli(*args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "sqlq", *args], capture_output=True, text=True, check=True
        )
        return proc.stdout

    shown = sqlq_cli("show", queue_url, "done")
    assert '"n": 1' in shown.split("result:", 1)[1]
    as_json = json.loads(sqlq_cli("show", "--json", queue_url, "running"))
    assert (as_json["progress"], as_json["progress_message"]) == (0.75, "three quarters")
    assert json.loads(sqlq_cli("show", "--json", queue_url, "done"))["result"] == {"n": 1}
    listed = sqlq_cli("list", queue_url)
    assert "0.75 three quarters" in next(ln for ln in listed.splitlines() if "running" in ln)


def test_the_leases_view_shows_progress(queue_url: str) -> None:
    _running_with_progress(queue_url)
    q = sqlq.Queue(queue_url, lease_seconds=300, max_attempts=1)
    with q, q.engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT task_id, progress, progress_message FROM sqlq_leases")
        ).all()
    assert [tuple(r) for r in rows] == [("running", 0.75, "three quarters")]
