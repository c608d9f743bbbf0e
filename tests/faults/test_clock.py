"""Clocks that step: backwards never undoes anything, forwards is bounded.

* Backwards: the database keeps a high-water mark of time, so a call whose
  clock is behind is handled at the mark: nothing un-expires, moves in the
  line, or comes back from COMPLETED or DEAD, and a new lease runs from the
  mark.
* Forwards: a lease can run out early (at least once still holds: the old
  holder's token is refused, someone else runs the task).  How far: a reading
  of the system clock more than ``max_clock_step`` (60 s) ahead of the queue's
  time is checked against the kernel's clock, and refused with ``ClockSkew``
  if the process's clock is off by more than that.  So one process with a
  wrong clock moves the queue's time at most 60 s ahead.

The processes with a wrong clock run under the fault shim (conftest.py), which
shifts ``time.time()`` but not the kernel's clock, like libfaketime.

Stepping back and forward with times passed in runs on every face and backend; the
bound on a wrong system clock is SQLite's (its calls read the process's clock, which
the kernel's is the reference for), and so are the real processes here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from databases import sqlite_only

import sqlq
from sqlq import durable
from sqlq.errors import ClockSkew, InvalidConfig
from sqlq.sqlite import backend as sqlite_backend

pytestmark = [pytest.mark.faults]

HERE = Path(__file__).resolve().parent
CHILD = HERE / "clock_child.py"
STEP = durable.DEFAULT_MAX_CLOCK_STEP


# --- stepping back, on both faces ---------------------------------------------------


def test_a_clock_stepping_back_undoes_nothing(make_queue: Any) -> None:
    q = make_queue(10, 3)
    for task in "abcd":
        assert q.add(task, 100)
    assert q.reserve(100) == "a"  # leased until 110
    assert q.reserve(101) == "b"
    assert q.complete("b", 102)
    assert q.status("a", 111) == "AVAILABLE"  # ran out at 110: the line is c, d, a
    # The clock steps back 100 s.
    assert q.status("a", 11) == "AVAILABLE"  # not leased again
    assert q.status("b", 11) == "COMPLETED"  # not back to RESERVED
    assert q.reserve(11) == "c"  # the line kept its order
    assert q.status("c", 120) == "RESERVED"  # its lease runs from 111, not from 11
    assert q.status("c", 121) == "AVAILABLE"
    assert q.reserve(5) == "d"
    assert q.reserve(5) == "a"
    assert q.reserve(5) == "c"


def test_dead_tasks_stay_dead_when_the_clock_steps_back(make_queue: Any) -> None:
    q = make_queue(10, 1)
    q.add("x", 1000)
    assert q.reserve(1000) == "x"
    assert q.fail("x", 1001) == "DEAD"
    assert q.status("x", 0) == "DEAD"
    assert q.reserve(0) is None


def test_a_clock_stepping_forward_expires_early_but_tokens_hold(queue_url: str) -> None:
    q = sqlq.Queue(queue_url, lease_seconds=20, max_attempts=5, max_clock_step=None)
    q.add("t", 1000)
    first = q.claim(1000)
    assert first is not None
    second = q.claim(5000)  # a clock jumped forward: the lease ran out early
    assert second is not None and second.task_id == "t" and second.token > first.token
    assert not q.complete("t", 1001, token=first.token)  # the stale holder is refused
    assert q.fail("t", 1001, token=first.token) is None
    assert q.extend("t", first.token, 1001) is None
    assert q.complete("t", 5001, token=second.token)
    q.close()


# --- the bound on a wrong system clock, in one process -----------------------------------


@sqlite_only
def test_a_system_clock_off_the_kernels_is_refused(
    queue_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3)
    q.add("a", time.time() - 7200)  # the queue's time is two hours behind the clock
    # The kernel says it is an hour earlier than this process's clock says.
    monkeypatch.setattr(sqlite_backend, "kernel_time", lambda _path=None: time.time() - 3600)
    with pytest.raises(ClockSkew, match=r"\+3600\.\d s off .*max_clock_step=60 s"):
        q.add("b")
    with pytest.raises(ClockSkew):
        q.reserve()
    q.add("c", time.time() - 7200 + 30)  # a time passed in is the caller's to answer for
    monkeypatch.undo()
    assert q.status("a") == "AVAILABLE" and q.status("b") is None
    q.close()


@sqlite_only
def test_a_clock_creeping_ahead_is_caught_within_the_step(queue_url: str) -> None:
    """Steps under max_clock_step, one after another, do not add up: no reading more
    than the step ahead of the kernel's time is accepted."""
    q = sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3)
    drift = [0.0]
    q._clock = lambda: time.time() + drift[0]  # the system clock, running away
    assert q._guard_clock
    accepted = 0
    with pytest.raises(ClockSkew):
        for _ in range(10):
            q.add(f"t{accepted}")
            assert queue_time(q, f"t{accepted}") <= time.time() + STEP
            accepted += 1
            drift[0] += 50
    assert accepted == 2  # +0 s and +50 s; +100 s is refused
    q.close()


@sqlite_only
def test_an_idle_queue_catches_up_with_the_real_clock(queue_url: str) -> None:
    """Hours without a call are not a wrong clock: the kernel agrees with the reading."""
    q = sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3)
    q.add("old", time.time() - 7200)  # the queue's time is two hours behind
    q.add("new")  # a reading far ahead of the queue's time, and right
    assert abs(queue_time(q, "new") - time.time()) < 5
    q.close()


def queue_time(q: sqlq.Queue, task_id: str) -> float:
    """The queue's time when ``task_id`` was added (the call's time, at the mark)."""
    info = q.info(task_id)
    assert info is not None
    return float(info.created_at)


def test_max_clock_step_is_checked(queue_url: str) -> None:
    for bad in (0, -1, float("nan"), float("inf"), "60", True):
        with pytest.raises(InvalidConfig, match="max_clock_step"):
            sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3, max_clock_step=bad)  # type: ignore[arg-type]


# --- real processes with a shifted clock ------------------------------------------------


def set_offset(ctl: Path, seconds: float) -> None:
    """Shift the shimmed processes' clock (the control file replaced atomically)."""
    tmp = ctl.with_name(ctl.name + ".tmp")
    tmp.write_text(f"clock_offset={seconds}\n")
    os.replace(tmp, ctl)


def child(
    shim: Any, ctl: Path, db: Path, *args: str, wait: bool = True
) -> subprocess.Popen[str] | list[dict[str, Any]]:
    env = shim.env(ctl, {**os.environ, "PYTHONPATH": str(HERE.parents[1])})
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), str(db), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    if not wait:
        return proc
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    lines.append({"call": "stderr", "ok": True, "result": err})
    return lines


def clock_row(db: Path) -> float:
    conn = sqlite3.connect(db)
    try:
        return float(conn.execute("SELECT now FROM sqlq_clock").fetchone()[0])
    finally:
        conn.close()


def outcomes(lines: list[dict[str, Any]], call: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["call"] == call]


def leased(db: Path) -> tuple[sqlq.Queue, sqlq.Lease]:
    """A queue with task "a" leased (20 s) by the test process."""
    q = sqlq.Queue(db, lease_seconds=20, max_attempts=5)
    q.add("a")
    lease = q.claim()
    assert lease is not None
    return q, lease


def test_a_process_an_hour_ahead_is_refused(fault_shim: Any, tmp_path: Path) -> None:
    db, ctl = tmp_path / "q.db", tmp_path / "ctl"
    q, lease = leased(db)
    set_offset(ctl, 3600)
    lines = child(fault_shim, ctl, db, "calls")
    assert isinstance(lines, list)
    (clock,) = outcomes(lines, "clock")
    assert clock["result"] > time.time() + 3000  # the shim did move its clock
    (claim,) = outcomes(lines, "claim")
    (add,) = outcomes(lines, "add")
    assert claim["ok"] is False and claim["error"] == "ClockSkew"
    assert add["ok"] is False and add["error"] == "ClockSkew"
    assert "+3600" in add["message"]
    # Nothing moved: the lease stands, the queue's time is the real one.
    assert clock_row(db) < time.time() + 1
    assert q.status("a") == "RESERVED" and q.complete("a", token=lease.token)
    assert q.counts()["AVAILABLE"] == 0
    q.close()


def test_without_the_guard_the_same_process_expires_leases_early(
    fault_shim: Any, tmp_path: Path
) -> None:
    """What the bound prevents, and what still holds without it: the stale token."""
    db, ctl = tmp_path / "q.db", tmp_path / "ctl"
    q, lease = leased(db)
    set_offset(ctl, 3600)
    lines = child(fault_shim, ctl, db, "calls", "--no-guard")
    assert isinstance(lines, list)
    (claim,) = outcomes(lines, "claim")
    assert claim["ok"] and claim["result"]["task_id"] == "a"  # taken 3,580 s early
    assert claim["result"]["token"] > lease.token
    assert clock_row(db) > time.time() + 3000  # and the queue's time is an hour ahead
    assert not q.complete("a", token=lease.token)  # the first holder is refused
    assert q.status("a") == "COMPLETED"  # the child completed it under its own lease
    q.close()


def test_a_process_within_the_step_can_expire_a_lease_early(
    fault_shim: Any, tmp_path: Path
) -> None:
    db, ctl = tmp_path / "q.db", tmp_path / "ctl"
    q, lease = leased(db)
    set_offset(ctl, 30)  # within max_clock_step: trusted
    lines = child(fault_shim, ctl, db, "calls")
    assert isinstance(lines, list)
    (claim,) = outcomes(lines, "claim")
    assert claim["ok"] and claim["result"]["task_id"] == "a"
    assert clock_row(db) < time.time() + 31  # at most the step ahead
    assert not q.complete("a", token=lease.token)
    q.close()


def test_a_process_behind_works_at_the_queues_time(fault_shim: Any, tmp_path: Path) -> None:
    db, ctl = tmp_path / "q.db", tmp_path / "ctl"
    q = sqlq.Queue(db, lease_seconds=20, max_attempts=5)
    q.add("a")
    q.add("b")
    set_offset(ctl, -3600)
    lines = child(fault_shim, ctl, db, "calls")
    assert isinstance(lines, list)
    (claim,) = outcomes(lines, "claim")
    assert claim["ok"] and claim["result"]["task_id"] == "a"
    # The lease runs from the queue's time, not from the clock an hour behind.
    assert claim["result"]["deadline"] > time.time() + 15
    assert "ahead of this process's clock" in outcomes(lines, "stderr")[0]["result"]
    assert q.status("a") == "COMPLETED" and q.status("b") == "AVAILABLE"
    q.close()


def test_a_clock_jumping_mid_run_is_refused_then_recovers(fault_shim: Any, tmp_path: Path) -> None:
    db, ctl = tmp_path / "q.db", tmp_path / "ctl"
    sqlq.Queue(db, lease_seconds=20, max_attempts=5).close()
    set_offset(ctl, 0)
    proc = child(fault_shim, ctl, db, "loop", "2.5", wait=False)
    assert isinstance(proc, subprocess.Popen) and proc.stdout is not None
    started = json.loads(proc.stdout.readline())  # the loop starts right after this line
    assert started["call"] == "clock"
    jumps = threading.Timer(0.5, set_offset, (ctl, 7200))
    back = threading.Timer(1.5, set_offset, (ctl, 0))
    jumps.start()
    back.start()
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        jumps.cancel()
        back.cancel()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    refused = [line["t"] for line in lines if not line["ok"]]
    assert refused and all(line["error"] == "ClockSkew" for line in lines if not line["ok"])
    assert min(refused) > 0.4 and max(refused) < 1.9, (min(refused), max(refused))
    assert any(line["ok"] and line["t"] > 2.0 for line in lines)  # it recovered
    assert clock_row(db) < time.time() + 1
    q = sqlq.Queue(db, lease_seconds=20, max_attempts=5)
    for line in lines:
        if line["call"] == "add" and line["result"]:
            assert q.status(line["task"]) is not None
        if line["call"] == "complete" and line["result"]:
            assert q.status(line["task"]) == "COMPLETED"
    q.close()
