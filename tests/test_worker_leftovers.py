"""What a handler leaves behind does not hang its worker (issue 23): a child process
it forked and that returns into the worker's code, and a non-daemon thread it
started; real `sqlq worker` processes."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from evil_handlers import run_worker

import sqlq


def _gone(pid: int, within: float) -> bool:
    """Has process ``pid`` ended (within ``within`` seconds)?"""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("kind", ["fork_returns", "fork_raises", "fork_async"])
def test_a_handler_that_forks_and_returns_in_the_child(tmp_path: Path, kind: str) -> None:
    """The child ends when the handler returns (or raises) in it: it neither reports
    nor runs the worker's loop, and neither process hangs."""
    db, pids = str(tmp_path / "q.db"), tmp_path / "pids"
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        queue.add("forks", payload={"kind": kind, "pids": str(pids)})
        queue.add("good", payload={"kind": "ok"})
    try:
        proc = run_worker(db, "--grace", "5", timeout=60)
        assert proc.returncode == 0, proc.stderr[-3000:]
        with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
            forks, good = queue.info("forks"), queue.info("good")
            assert forks is not None and forks.state == "COMPLETED"
            assert queue.result("forks") == "parent"  # the child's "child" never reported
            assert good is not None and good.state == "COMPLETED"
        (child,) = map(int, pids.read_text().split())
        assert _gone(child, 10)
    finally:
        for pid in map(int, pids.read_text().split()) if pids.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_leaked_non_daemon_thread_does_not_keep_the_worker_alive(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        queue.add("leaks", payload={"kind": "thread_leak"})
    proc = run_worker(db, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "leaked-by-handler" in proc.stderr  # named in a warning
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        assert queue.status("leaks") == "COMPLETED"


def test_a_worker_in_a_process_forked_after_import_runs_its_tasks(tmp_path: Path) -> None:
    """sqlq.worker.executors reads the process's id once, and again in a child of os.fork:
    a Worker run in a process forked after the import (a pre-forking server's child)
    runs every task, and is not taken for a child its handler forked (which would end
    at its first task's return, the task never reported)."""
    db = str(tmp_path / "q.db")
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        queue.add_many(["a", "b", "c"])
    worker = sqlq.Worker  # (imported before the fork, with sqlq.worker.executors: what is tested)
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
                stats = worker(queue, lambda payload: None).run(
                    stop_when_idle=True, install_signal_handlers=False
                )
            code = 0 if stats.completed == 3 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        assert queue.counts()["COMPLETED"] == 3
