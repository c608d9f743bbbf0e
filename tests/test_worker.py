"""sqlq.worker: the claim loop, heartbeats, time limits, stopping, and real processes.

Leases here are 0.5 to 1 s so that everything about them happens within a few
seconds; the real-process tests run the handlers of tests/runner_handlers.py.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

import sqlq
from sqlq.errors import Busy, InvalidConfig
from sqlq.testing import ManualClock
from sqlq.worker import Worker, WorkerStats, resolve_target

TESTS = Path(__file__).resolve().parent
HANDLERS = "runner_handlers:handle"


@pytest.fixture
def open_queue(db_path: Path) -> Iterator[Callable[..., sqlq.Queue]]:
    """open_queue(lease_seconds=1.0, max_attempts=5, **options) -> a Queue on the test's
    database (``options``: more arguments of Queue, such as ``clock``).

    Each call opens another Queue object on the same file, as another process would.
    """
    opened: list[sqlq.Queue] = []

    def make(lease_seconds: float = 1.0, max_attempts: int = 5, **options: Any) -> sqlq.Queue:
        queue = sqlq.Queue(
            db_path,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            synchronous="normal",
            **options,
        )
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


def _in_thread(worker: Worker, **options: Any) -> tuple[threading.Thread, list[Any]]:
    """Run ``worker.run(**options)`` in a thread; the list gets its result (or exception)."""
    out: list[Any] = []

    def target() -> None:
        try:
            out.append(worker.run(**options))
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


# --- in one process ------------------------------------------------------------------


def test_drains_the_queue_with_threads_and_retries_failures(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    queue = open_queue(lease_seconds=1.0, max_attempts=3)
    queue.add_many([(f"t{i}", {"n": i}) for i in range(30)] + [("bad", {"n": -1})])
    seen: list[int] = []
    lock = threading.Lock()
    running = peak = 0

    def handler(payload: dict[str, int]) -> None:
        nonlocal running, peak
        with lock:
            seen.append(payload["n"])
            running += 1
            peak = max(peak, running)
        try:
            if payload["n"] == -1:
                raise ValueError("no good: -1")
            time.sleep(0.02)
        finally:
            with lock:
                running -= 1

    before = signal.getsignal(signal.SIGTERM)
    stats = Worker(queue, handler, concurrency=3).run(stop_when_idle=True)

    assert signal.getsignal(signal.SIGTERM) is before  # restored
    assert sorted(n for n in seen if n >= 0) == list(range(30))  # each handled once
    assert seen.count(-1) == 3
    assert stats == WorkerStats(claimed=33, completed=30, failed=3)
    assert 2 <= peak <= 3
    assert queue.counts() == {
        "WAITING": 0,
        "AVAILABLE": 0,
        "RESERVED": 0,
        "COMPLETED": 30,
        "DEAD": 1,
    }
    bad = queue.info("bad")
    assert bad is not None
    assert (bad.state, bad.attempts) == ("DEAD", 3)
    assert bad.last_error == "ValueError: no good: -1"
    warnings = _messages(caplog, logging.WARNING)
    assert sum("'bad' failed on attempt" in m for m in warnings) == 3
    assert not _messages(caplog, logging.ERROR)  # a failing handler is not a worker error
    assert any("worker started" in m for m in _messages(caplog, logging.INFO))


def test_heartbeats_keep_a_long_handler_s_lease_one_beat_per_period(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """A handler four leases long keeps its lease: the worker extends it once every
    lease_seconds / 3, no more and no less (time moved by the test's clock)."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, clock=clock.time)
    queue.add("long")
    beats: list[float] = []
    extend = queue.extend

    def counting_extend(*args: Any, **kwargs: Any) -> Any:
        beats.append(clock.monotonic())
        return extend(*args, **kwargs)

    queue.extend = counting_extend  # type: ignore[method-assign]
    started, finish = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        assert finish.wait(30)

    thread, out = _in_thread(Worker(queue, handler, clock=clock), stop_when_idle=True)
    assert started.wait(10)
    # Two threads wait on the clock: the claim loop (for a free slot) and the
    # heartbeat thread (for the next beat); each step runs the next beat.
    steps = [clock.step(2) for _ in range(12)]
    clock.wait_for_sleepers(2)  # the last beat is done
    finish.set()
    thread.join(10)
    assert steps == [float(n) for n in range(1, 13)]
    assert beats == steps
    assert out == [WorkerStats(claimed=1, completed=1)]
    info = queue.info("long")
    assert info is not None
    assert (info.state, info.attempts, info.last_error) == ("COMPLETED", 1, None)


def test_a_stale_worker_cannot_complete(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """Worker A's heartbeat (1 s) comes after its lease (0.5 s) ran out; worker B
    takes the task and completes it; A's heartbeat finds the lease lost, and A's
    completion is refused."""
    caplog.set_level(logging.INFO, logger="sqlq.worker")
    clock = ManualClock()
    first = open_queue(lease_seconds=0.5, clock=clock.time)
    second = open_queue(lease_seconds=0.5, clock=clock.time)
    first.add("t", payload="work")
    started, finish = threading.Event(), threading.Event()
    handled: list[str] = []

    def stale(payload: str) -> None:
        handled.append("A")
        started.set()
        assert finish.wait(30)

    worker_a = Worker(first, stale, heartbeat=1.0, clock=clock)
    thread, out = _in_thread(worker_a, stop_when_idle=True)
    assert started.wait(10)
    clock.advance(0.6)  # A's lease runs out
    stats_b = Worker(second, lambda p: handled.append("B"), clock=clock).run(stop_when_idle=True)
    assert clock.step(2) == 1.0  # A's first heartbeat
    clock.wait_for_sleepers(2)  # done: it found the lease lost
    finish.set()
    thread.join(10)

    assert stats_b == WorkerStats(claimed=1, completed=1)
    assert out == [WorkerStats(claimed=1, lost=1)]
    assert handled == ["A", "B"]
    info = second.info("t")
    assert info is not None
    assert (info.state, info.attempts, info.last_error) == ("COMPLETED", 2, "lease expired")
    warnings = _messages(caplog, logging.WARNING)
    assert any("leases will run out between heartbeats" in m for m in warnings)
    assert any("'t': lease (token" in m and "lost" in m for m in warnings)
    assert any("'t': completion refused" in m for m in warnings)


def test_a_handler_that_raises_after_its_lease_was_lost_leaves_the_task_alone(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's lease runs out while its handler runs and another worker takes
    the task; then the handler raises.  The failure carries the lease's token, so
    it is refused and counted as lost: the other worker's lease, the attempts and
    the last error stay as they were."""
    clock = ManualClock()
    queue = open_queue(lease_seconds=0.5, clock=clock.time)
    other = open_queue(lease_seconds=60.0, clock=clock.time)
    queue.add("t")
    started, finish = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        assert finish.wait(30)
        raise ValueError("too late")

    worker = Worker(queue, handler, heartbeat=1.0, clock=clock)
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    clock.advance(0.6)  # the lease (0.5 s) runs out before the first heartbeat (1 s)
    lease = other.claim()
    assert lease is not None and lease.attempt == 2
    finish.set()
    thread.join(10)

    assert out == [WorkerStats(claimed=1, lost=1)]
    info = other.info("t")
    assert info is not None
    assert (info.state, info.token, info.attempts, info.last_error) == (
        "RESERVED",
        lease.token,
        2,
        "lease expired",
    )
    assert any("'t': failure refused" in m for m in _messages(caplog, logging.WARNING))


def test_time_limit_fails_the_task_and_the_late_result_is_refused(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sqlq.worker")
    clock = ManualClock()
    queue = open_queue(lease_seconds=3.0, max_attempts=3, clock=clock.time)
    queue.add("slow")
    attempts: list[tuple[int, float]] = []
    started, finish = threading.Event(), threading.Event()

    def handler(lease: sqlq.Lease) -> None:
        attempts.append((lease.attempt, clock.monotonic()))
        if lease.attempt == 1:
            started.set()
            assert finish.wait(30)

    worker = Worker(queue, handler, time_limit=2.5, with_lease=True, clock=clock)
    thread, out = _in_thread(worker, stop_when_idle=True)
    assert started.wait(10)
    assert [clock.step(2) for _ in range(3)] == [1.0, 2.0, 2.5]  # two heartbeats, the limit
    clock.wait_for_sleepers(2)  # the task has been failed
    info = queue.info("slow")
    assert info is not None
    assert (info.state, info.last_error) == ("AVAILABLE", "time limit of 2.5s exceeded")
    assert attempts == [(1, 0.0)]  # attempt 1 keeps the only slot until its handler returns
    finish.set()
    thread.join(10)

    assert out == [WorkerStats(claimed=2, completed=1, timed_out=1)]
    assert attempts == [(1, 0.0), (2, 2.5)]
    info = queue.info("slow")
    assert info is not None
    assert (info.state, info.attempts) == ("COMPLETED", 2)
    assert info.last_error == "time limit of 2.5s exceeded"
    warnings = _messages(caplog, logging.WARNING)
    assert any("exceeded its time limit of 2.5s" in m for m in warnings)
    assert any("returned after its time limit; result refused" in m for m in warnings)


def test_stop_lets_short_handlers_finish_and_releases_the_rest(
    open_queue: Callable[..., sqlq.Queue], caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    queue = open_queue(lease_seconds=10.0, clock=clock.time)
    queue.add("quick")
    queue.add("stuck")
    both = threading.Barrier(3)
    go = {"quick": threading.Event(), "stuck": threading.Event()}

    def handler(lease: sqlq.Lease) -> None:
        both.wait(10)
        assert go[lease.task_id].wait(30)

    worker = Worker(queue, handler, concurrency=2, grace=1.0, with_lease=True, clock=clock)
    thread, out = _in_thread(worker)
    both.wait(10)
    worker.stop()
    go["quick"].set()
    _wait_for(lambda: worker.stats.completed == 1, 10, "the quick task")
    clock.advance(1.0)  # the grace period is over
    thread.join(10)

    assert out == [WorkerStats(claimed=2, completed=1, released=1)]
    quick, stuck = queue.info("quick"), queue.info("stuck")
    assert quick is not None and stuck is not None
    assert (quick.state, quick.attempts) == ("COMPLETED", 1)
    assert (stuck.state, stuck.attempts) == ("AVAILABLE", 0)  # the attempt is not counted
    go["stuck"].set()  # the abandoned handler returns: its result is ignored
    _wait_for(
        lambda: any("result is ignored" in m for m in _messages(caplog, logging.WARNING)),
        10,
        "the abandoned handler",
    )
    assert queue.status("stuck") == "AVAILABLE"


def test_a_report_that_meets_busy_as_the_worker_stops_is_retried(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop (grace 0) comes while a finished handler's completion meets Busy: the
    completion is still retried and made (within RELEASE_WAIT), not abandoned to
    let its lease run out and the task run again."""
    queue = open_queue()
    queue.add("t")
    worker = Worker(queue, lambda p: None, grace=0.0)
    complete_and_claim = queue.complete_and_claim
    busy_once = [Busy("the write lock is held elsewhere")]

    def stopped_midway(*args: Any, **kwargs: Any) -> Any:
        if busy_once:
            worker.stop()  # SIGTERM, say, while the call waits for the lock
            raise busy_once.pop()
        return complete_and_claim(*args, **kwargs)

    monkeypatch.setattr(queue, "complete_and_claim", stopped_midway)
    stats = worker.run(stop_when_idle=True)  # returns even if nothing stops it
    assert not busy_once, "the completion did not go through complete_and_claim"
    assert stats == WorkerStats(claimed=1, completed=1)
    assert queue.status("t") == "COMPLETED"


def test_sigterm_in_the_main_thread_stops_the_worker(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    queue = open_queue(lease_seconds=1.0)
    queue.add("t", payload=None)
    started, unblock = threading.Event(), threading.Event()

    def handler(payload: None) -> None:
        started.set()
        unblock.wait(10)

    def send() -> None:
        if started.wait(10):  # the worker's signal handlers are installed by now
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    threading.Thread(target=send, daemon=True).start()
    try:
        stats = Worker(queue, handler, grace=0.2).run()
    finally:
        unblock.set()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert stats == WorkerStats(claimed=1, released=1)
    info = queue.info("t")
    assert info is not None
    assert (info.state, info.attempts) == ("AVAILABLE", 0)


def test_idle_waits_double_up_to_poll_max_and_a_new_task_is_taken_at_the_next_poll(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    clock = ManualClock()
    queue = open_queue(clock=clock.time)
    polls: list[float] = []
    ready = queue.ready

    def counting_ready(now: float | None = None) -> bool:
        polls.append(clock.monotonic())
        return ready(now)

    queue.ready = counting_ready  # type: ignore[method-assign]
    handled = threading.Event()
    worker = Worker(queue, lambda p: handled.set(), poll_min=0.005, poll_max=0.04, clock=clock)
    thread, out = _in_thread(worker)
    # The claim loop's idle wait and the heartbeat thread (nothing to do) wait on the clock.
    for _ in range(8):
        clock.step(2)
    clock.wait_for_sleepers(2)  # the last poll is done
    gaps = [b - a for a, b in itertools.pairwise(polls)]
    assert polls[0] == pytest.approx(0.005)
    assert gaps == pytest.approx([0.01, 0.02, 0.04, 0.04, 0.04, 0.04, 0.04])

    added = clock.monotonic()
    queue.add("new")
    assert clock.step(2) - added <= 0.04  # the next poll takes it
    assert handled.wait(10)
    worker.stop()
    thread.join(10)
    assert out == [WorkerStats(claimed=1, completed=1)]


def test_each_task_costs_one_transaction_while_there_is_work(
    open_queue: Callable[..., sqlq.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that returns completes its task and claims the next in one call
    (complete_and_claim): one commit per task, not a complete and a claim."""
    queue = open_queue()
    queue.add_many([f"t{i}" for i in range(10)])
    calls: Counter[str] = Counter()

    def counted(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return call(*args, **kwargs)

        return wrapper

    for name in ("claim", "complete", "complete_and_claim"):
        monkeypatch.setattr(queue, name, counted(name, getattr(queue, name)))
    stats = Worker(queue, lambda p: None).run(stop_when_idle=True)
    assert stats == WorkerStats(claimed=10, completed=10)
    # The first claim, ten completions that each bring the next task (the last none),
    # and the claim that finds the queue empty.
    assert calls == Counter({"complete_and_claim": 10, "claim": 2})


def test_busy_is_logged_and_retried(
    open_queue: Callable[..., sqlq.Queue],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqlq.worker")
    queue = open_queue()
    queue.add("t")
    claim, complete = queue.claim, queue.complete
    fails = Counter({"claim": 2, "complete": 1})

    def flaky(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if fails[name] > 0:
                fails[name] -= 1
                raise Busy("the write lock was not free within busy_timeout")
            return call(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(queue, "claim", flaky("claim", claim))
    monkeypatch.setattr(queue, "complete", flaky("complete", complete))
    # The worker completes with complete_and_claim while it keeps going.
    monkeypatch.setattr(queue, "complete_and_claim", flaky("complete", queue.complete_and_claim))
    stats = Worker(queue, lambda p: None).run(stop_when_idle=True)
    assert stats == WorkerStats(claimed=1, completed=1)
    assert queue.status("t") == "COMPLETED"
    # Every retry is logged; the first as a warning, the repeats (within
    # REPEAT_WARNING seconds) at DEBUG, so a long outage does not flood the log.
    assert sum("Busy" in m for m in _messages(caplog, logging.DEBUG)) == 2
    assert sum("Busy" in m for m in _messages(caplog, logging.WARNING)) == 1
    assert not _messages(caplog, logging.ERROR)


def test_an_unexpected_error_is_logged_and_raised(
    open_queue: Callable[..., sqlq.Queue],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue = open_queue()

    def broken(now: float | None = None) -> sqlq.Lease | None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(queue, "claim", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        Worker(queue, lambda p: None).run(stop_when_idle=True)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None


def test_settings_are_checked(open_queue: Callable[..., sqlq.Queue]) -> None:
    queue = open_queue()
    bad: list[dict[str, Any]] = [
        {"concurrency": 0},
        {"concurrency": True},
        {"concurrency": 1.5},
        {"heartbeat": 0},
        {"heartbeat": math.nan},
        {"time_limit": -1},
        {"time_limit": math.inf},
        {"grace": -0.1},
        {"grace": 2e9},  # beyond any wait a queue can be told to keep
        {"poll_min": 0},
        {"poll_min": 0.5, "poll_max": 0.1},
        {"with_lease": 1},
        {"clock": time},  # no wait()
    ]
    for options in bad:
        with pytest.raises(InvalidConfig):
            Worker(queue, print, **options)
    with pytest.raises(InvalidConfig, match="callable"):
        Worker(queue, "print")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig, match="lease_seconds"):
        Worker(open_queue(lease_seconds=0), print)
    worker = Worker(queue, print)
    worker.run(stop_when_idle=True)
    with pytest.raises(RuntimeError, match="runs once"):
        worker.run(stop_when_idle=True)


def test_handler_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))
    import runner_handlers

    assert resolve_target(HANDLERS) is runner_handlers.handle
    assert resolve_target("os.path:join") is os.path.join
    assert resolve_target("pathlib:Path.cwd") == Path.cwd  # a dotted path after the colon
    for target, message in [
        ("runner_handlers", "must look like 'package.module:function'"),
        (":handle", "must look like"),
        ("runner_handlers:", "must look like"),
        ("no_such_module_here:f", "cannot import module 'no_such_module_here'"),
        ("runner_handlers:nope", "has no attribute 'nope'"),
        ("os:sep", "not callable"),
    ]:
        with pytest.raises(InvalidConfig, match=message):
            resolve_target(target)


# --- real processes --------------------------------------------------------------------


def _env() -> dict[str, str]:
    """The environment of a worker process: this folder importable (for the handlers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
    return env


def _serve(
    db: Path,
    stderr: IO[bytes],
    target: str = HANDLERS,
    switch_interval: float | None = None,
    **options: Any,
) -> subprocess.Popen[bytes]:
    """A worker process: ``sqlq.worker.serve(db, target, **options)``, with the
    interpreter's thread switch interval set to ``switch_interval`` if given."""
    code = (
        "import sys; from sqlq.worker import serve; "
        + ("" if switch_interval is None else f"sys.setswitchinterval({switch_interval!r}); ")
        + f"sys.exit(serve({str(db)!r}, {target!r}, **{options!r}))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=stderr, env=_env()
    )


def _cli_worker(db: Path, stderr: IO[bytes], *args: str) -> subprocess.Popen[bytes]:
    """``sqlq worker DB ARGS...`` in a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "sqlq", "worker", str(db), *args],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env=_env(),
    )


_STOPPED = re.compile(
    r"worker stopped: (\d+) claimed, (\d+) completed, (\d+) failed, (\d+) lost, "
    r"(\d+) released, (\d+) timed out"
)


def _final_stats(stderr_text: str) -> WorkerStats:
    """The counts of the "worker stopped" line a worker process logged."""
    found = _STOPPED.findall(stderr_text)
    assert len(found) == 1, stderr_text
    return WorkerStats(*(int(n) for n in found[0]))


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(15)


@pytest.mark.processes
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_an_idle_worker_process_sleeps_and_wakes_up(
    db_path: Path, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    queue = open_queue()  # creates the database before the worker opens it
    log = tmp_path / "handled.log"
    err_path = tmp_path / "worker.stderr"
    with err_path.open("wb") as stderr:
        process = _serve(db_path, stderr, lease_seconds=1.0, synchronous="normal")
        try:
            _wait_for(lambda: b"worker started" in err_path.read_bytes(), 30, "the worker")
            cpu, wall = _cpu_seconds(process.pid), time.monotonic()
            time.sleep(2.0)
            used = (_cpu_seconds(process.pid) - cpu) / (time.monotonic() - wall)
            assert used < 0.05, f"an idle worker used {used:.1%} of a core"

            added = time.monotonic()
            queue.add("new", payload={"task": "new", "log": str(log)})
            _wait_for(lambda: queue.status("new") == "COMPLETED", 5, "the new task")
            assert time.monotonic() - added < 1.0
            assert _stop(process) == 0
        finally:
            process.kill()
            process.wait()
    text = err_path.read_text()
    assert "worker stopped: 1 claimed, 1 completed" in text
    assert "ERROR" not in text and "Traceback" not in text


@pytest.mark.processes
def test_worker_processes_survive_a_kill_and_keep_long_tasks(
    db_path: Path, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    """Three worker processes (two handler threads each).  One is SIGKILLed in the
    middle of a task, which another worker completes after the lease; a task three
    leases long completes on its first attempt; no task completes twice."""
    lease = 1.0
    queue = open_queue(lease_seconds=lease, max_attempts=10)
    log, pidfile = tmp_path / "handled.log", tmp_path / "victim.pid"
    options = {"lease_seconds": lease, "concurrency": 2, "grace": 10.0, "synchronous": "normal"}
    stderr_paths = [tmp_path / f"worker{i}.stderr" for i in range(3)]
    stderrs = [p.open("wb") for p in stderr_paths]
    processes = [_serve(db_path, f, **options) for f in stderrs]

    def payload(task: str, **extra: Any) -> dict[str, Any]:
        return {"task": task, "log": str(log), **extra}

    try:
        _wait_for(
            lambda: all(b"worker started" in p.read_bytes() for p in stderr_paths),
            30,
            "the workers to start",
        )
        queue.add("victim", payload=payload("victim", pidfile=str(pidfile), hang=60.0))
        queue.add_many([(f"a{i}", payload(f"a{i}", sleep=0.02 + i % 4 * 0.01)) for i in range(30)])
        _wait_for(
            lambda: pidfile.exists() and pidfile.read_text().endswith("\n"), 30, "the victim's pid"
        )
        victim_pid = int(pidfile.read_text())
        victim = next(p for p in processes if p.pid == victim_pid)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(10) == -signal.SIGKILL
        killed_at = time.monotonic()

        queue.add("stuck", payload=payload("stuck", sleep=3 * lease))
        queue.add_many([(f"b{i}", payload(f"b{i}", sleep=0.02)) for i in range(10)])
        _wait_for(lambda: queue.counts()["COMPLETED"] == 42, 30, "every task to complete")
        assert time.monotonic() - killed_at >= 3 * lease  # "stuck" took three leases

        survivors = [p for p in processes if p is not victim]
        assert [_stop(p) for p in survivors] == [0, 0]
    finally:
        for process in processes:
            process.kill()
            process.wait()
        for f in stderrs:
            f.close()

    events: dict[str, list[tuple[str, int]]] = {}
    for line in log.read_text().splitlines():
        kind, task, pid = line.split()
        events.setdefault(task, []).append((kind, int(pid)))
    assert len(events) == 42
    retried = []
    for task, seen in events.items():
        info = queue.info(task)
        assert info is not None and info.state == "COMPLETED", task
        by_survivors = [kind for kind, pid in seen if pid != victim_pid]
        # A survivor handles a task at most once, and only what the victim did runs twice.
        assert by_survivors in ([], ["start", "done"]), (task, seen)
        if info.attempts > 1:
            retried.append(task)
            assert info.attempts == 2 and by_survivors == ["start", "done"], (task, seen)
    # The victim held at most two leases (two handler threads) when it was killed.
    assert "victim" in retried and len(retried) <= 2
    assert events["victim"][0] == ("start", victim_pid)
    victim_info = queue.info("victim")
    assert victim_info is not None and victim_info.last_error == "lease expired"
    stuck = queue.info("stuck")
    assert stuck is not None and (stuck.attempts, stuck.last_error) == (1, None)
    assert [kind for kind, pid in events["stuck"]] == ["start", "done"]
    for i, path in enumerate(stderr_paths):
        text = path.read_text()
        assert "Traceback" not in text, (i, text)
        if processes[i] is not victim:
            assert "worker stopped" in text, (i, text)


@pytest.mark.processes
@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_worker_never_holds_more_leases_than_its_concurrency(
    db_path: Path, tmp_path: Path, open_queue: Callable[..., sqlq.Queue], concurrency: int
) -> None:
    """Sampled from this process while a worker process drains 5 ms tasks, with the
    thread switch interval so short that the worker's threads interleave at almost
    every bytecode: the tasks RESERVED never outnumber the worker's slots."""
    tasks = 300
    queue = open_queue(lease_seconds=60.0)
    queue.add_many([(f"t{i}", 0.005) for i in range(tasks)])
    err_path = tmp_path / "worker.stderr"
    peak = 0
    with err_path.open("wb") as stderr:
        process = _serve(
            db_path,
            stderr,
            "runner_handlers:nap",
            switch_interval=1e-6,
            lease_seconds=60.0,
            concurrency=concurrency,
            stop_when_idle=True,
            synchronous="normal",
        )
        try:
            while process.poll() is None:
                peak = max(peak, queue.counts()["RESERVED"])
                time.sleep(0.001)  # sampling, not ordering: the worker goes on regardless
            assert process.returncode == 0, err_path.read_text()
        finally:
            process.kill()
            process.wait()
    assert 1 <= peak <= concurrency
    assert queue.counts()["COMPLETED"] == tasks
    assert _final_stats(err_path.read_text()) == WorkerStats(claimed=tasks, completed=tasks)


@pytest.mark.processes
@pytest.mark.parametrize("how", ["SIGTERM with --grace 0", "two SIGTERMs"])
def test_a_stopped_worker_leaves_no_lease_behind(
    db_path: Path, tmp_path: Path, open_queue: Callable[..., sqlq.Queue], how: str
) -> None:
    """`sqlq worker` draining fast tasks is stopped mid-stream, three times over: every
    lease it took is completed or released, none is left RESERVED to run out."""
    queue = open_queue(lease_seconds=600.0)
    queue.add_many([f"t{i}" for i in range(3000)])
    grace = "0" if how.startswith("SIGTERM with") else "30"
    for run in range(3):
        before = queue.counts()["COMPLETED"]
        err_path = tmp_path / f"worker{run}.stderr"
        with err_path.open("wb") as stderr:
            process = _cli_worker(
                db_path, stderr, "runner_handlers:fast", "--grace", grace, "--lease", "600",
                "--synchronous", "normal",
            )  # fmt: skip
            try:
                _wait_for(lambda b=before: queue.counts()["COMPLETED"] > b + 50, 30, "the drain")
                process.send_signal(signal.SIGTERM)
                if how == "two SIGTERMs":
                    process.send_signal(signal.SIGTERM)
                # A second SIGTERM that comes once the worker is done ends the
                # process the default way, after its last log line.
                exits = (0, -signal.SIGTERM) if how == "two SIGTERMs" else (0,)
                assert process.wait(30) in exits, err_path.read_text()
            finally:
                process.kill()
                process.wait()
        counts = queue.counts()
        assert counts["RESERVED"] == 0, (run, counts, err_path.read_text())
        stats = _final_stats(err_path.read_text())
        assert stats.claimed == stats.completed + stats.released, stats
        assert stats.completed == counts["COMPLETED"] - before
        assert (stats.failed, stats.lost, stats.timed_out) == (0, 0, 0)
    assert counts["AVAILABLE"] > 0  # each run was stopped before the queue ran dry


_HOLD_WRITE_LOCK = """
import sys
from sqlq.sqlite.driver import dbapi
conn = dbapi.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.processes
def test_grace_bounds_a_wait_for_a_write_lock_held_elsewhere(
    db_path: Path, tmp_path: Path, open_queue: Callable[..., sqlq.Queue]
) -> None:
    """Another connection holds the write lock (a sqlite3 shell inside BEGIN IMMEDIATE),
    and the worker waits to claim with a busy_timeout of 60 s.  SIGTERM with
    --grace 1 ends that wait: the worker exits long before the busy_timeout."""
    queue = open_queue()
    queue.add("t")
    queue.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WRITE_LOCK, str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    err_path = tmp_path / "worker.stderr"
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
        with err_path.open("wb") as stderr:
            process = _cli_worker(
                db_path, stderr, "runner_handlers:fast", "--grace", "1", "--busy-timeout", "60"
            )
            try:
                # The claim loop claims right after it logs this: it waits for the lock.
                _wait_for(lambda: b"worker started" in err_path.read_bytes(), 30, "the worker")
                stopped = time.monotonic()
                process.send_signal(signal.SIGTERM)
                assert process.wait(30) == 0
                took = time.monotonic() - stopped
            finally:
                process.kill()
                process.wait()
    finally:
        holder.kill()
        holder.wait()
    assert took < 10, f"the worker took {took:.1f}s to stop"  # generous: 1 s, not 60
    assert _final_stats(err_path.read_text()) == WorkerStats()
    reopened = open_queue()
    assert reopened.status("t") == "AVAILABLE"


@pytest.mark.processes
def test_a_lease_claimed_as_the_worker_stops_gets_the_release_wait_even_with_no_grace(
    open_queue: Callable[..., sqlq.Queue], db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--grace 0: a claim in flight when the stop comes brings a lease, and the worker
    releases it at once, as it releases running tasks after the grace: within
    RELEASE_WAIT, although the grace (which ends every wait) is already over.
    Here another process holds the write lock when the release starts and lets go
    of it only then; the release waits for it instead of giving up at once and
    leaving the task RESERVED until its lease (10 minutes) runs out."""
    monkeypatch.setattr(sqlq.worker, "RELEASE_WAIT", 60.0)  # the holder's exit, however slow
    queue = open_queue(lease_seconds=600, busy_timeout=60)
    queue.add("t")
    worker = Worker(queue, lambda payload: None, grace=0)
    holder: list[subprocess.Popen[bytes]] = []
    claim, release = queue.claim, queue.release

    def claim_then_stop(*args: Any, **kwargs: Any) -> Any:
        lease = claim(*args, **kwargs)
        worker.stop()  # the stop arrives while the claim was committing
        process = subprocess.Popen(
            [sys.executable, "-c", _HOLD_WRITE_LOCK, str(db_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        holder.append(process)
        assert process.stdout is not None and process.stdout.readline() == b"locked\n"
        return lease

    def release_as_the_lock_goes(*args: Any, **kwargs: Any) -> Any:
        ending = threading.Thread(target=holder[0].communicate, args=(b"",))
        ending.start()  # the holder ends, and its lock with it, while the release waits
        try:
            return release(*args, **kwargs)
        finally:
            ending.join()

    monkeypatch.setattr(queue, "claim", claim_then_stop)
    monkeypatch.setattr(queue, "release", release_as_the_lock_goes)
    try:
        stats = worker.run(install_signal_handlers=False)
    finally:
        for process in holder:
            process.kill()
            process.wait()
    assert (stats.claimed, stats.released) == (1, 1), stats
    assert queue.status("t") == "AVAILABLE"
