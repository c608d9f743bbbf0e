"""The write gate: processes take turns at the write lock, and waiting is bounded.

How fairly four busy processes share the work is a benchmark's target
(bench/targets.py, the least-served worker's share, median of runs), not a test's:
on two cores the CPU scheduler decides it as much as the gate does (with the gate
stubbed out, four drains on CI's two cores gave the same spread as with it), so a
bound in a test was both flaky and unable to tell the gate's absence."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import sqlq
from sqlq.errors import Busy
from sqlq.sqlite.gate import Gate

pytestmark = pytest.mark.processes


def _hold_gate(path: str, ready: multiprocessing.synchronize.Event) -> None:
    gate = Gate(path + ".sqlq-gate")
    assert gate.acquire(time.monotonic() + 5)
    ready.set()
    time.sleep(60)


def test_a_frozen_gate_holder_gives_busy_not_a_hang(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    q = sqlq.Queue(path, lease_seconds=30, max_attempts=3, busy_timeout=0.5)
    q.add("t")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_gate, args=(path, ready))
    holder.start()
    try:
        assert ready.wait(30)
        os.kill(holder.pid, signal.SIGSTOP)  # type: ignore[arg-type]
        started = time.monotonic()
        with pytest.raises(Busy, match="busy_timeout"):
            q.reserve()
        assert time.monotonic() - started < 10
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        holder.join(30)
        assert q.reserve() == "t"  # the gate died with its holder
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join()
        q.close()


def test_two_queues_in_one_process_each_have_their_own_turn(tmp_path: Path) -> None:
    path = str(tmp_path / "q.db")
    a = sqlq.Queue(path, lease_seconds=30, max_attempts=3, queue="a")
    b = sqlq.Queue(path, lease_seconds=30, max_attempts=3, queue="b", busy_timeout=0.3)
    a.add("x")
    gate = a._backend._gate
    assert gate is not None and gate.acquire(time.monotonic() + 1)  # a holds its turn (as mid-call)
    try:
        with pytest.raises(Busy):
            b.add("y")  # flock belongs to the open file: b must wait for a
    finally:
        gate.release()
    assert b.add("y") is True
    a.close()
    b.close()


def _child_begins(q: sqlq.Queue, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    conn = q._backend._connection()
    out.put(conn.execute("PRAGMA busy_timeout").fetchone()[0])


def test_a_forked_child_waits_the_same_way(tmp_path: Path) -> None:
    q = sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=3)
    assert q._backend._connection().execute("PRAGMA busy_timeout").fetchone()[0] == 0
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_begins, args=(q, out))
    child.start()
    assert out.get(timeout=30) == 0  # the child's new connection leaves waiting to sqlq too
    child.join(30)
    q.close()


def test_interrupt_waits_ends_a_wait_for_the_gate_in_progress(tmp_path: Path) -> None:
    """A call waits for its turn at the gate (another process holds it) with a
    busy_timeout of 60 s; interrupt_waits(0) from another thread ends that wait at
    once with Busy, and interrupt_waits(None) lets calls wait again."""
    path = str(tmp_path / "q.db")
    q = sqlq.Queue(path, lease_seconds=30, max_attempts=3, busy_timeout=60)
    q.add("t")
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_gate, args=(path, ready))
    holder.start()
    outcome: list[object] = []

    def call() -> None:
        try:
            outcome.append(q.reserve())
        except Busy as exc:
            outcome.append(exc)

    try:
        assert ready.wait(30)
        waiter = threading.Thread(target=call, daemon=True)
        waiter.start()
        end = time.monotonic() + 30
        while (gate := q._backend._gate) is None or gate._wanted == 0:  # not waiting yet
            assert time.monotonic() < end and waiter.is_alive()
            time.sleep(0.01)
        q.interrupt_waits(0)
        waiter.join(10)  # far below the 60 s busy_timeout
        assert not waiter.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], Busy), outcome
        assert "cut short by interrupt_waits" in str(outcome[0])  # not "within busy_timeout"
        q.interrupt_waits(None)
        holder.kill()
        holder.join(30)
        assert q.reserve() == "t"  # the gate died with its holder; waits are normal again
    finally:
        if holder.is_alive():
            holder.kill()
            holder.join()
        q.close()
