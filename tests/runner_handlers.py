"""Handlers for the worker tests that run in real processes (tests/test_worker.py).

The worker processes run ``sqlq.worker.serve(DB, "runner_handlers:handle", ...)``
with this folder on PYTHONPATH.  The payload says what to do::

    {"task": id, "log": path, "sleep": seconds, "pidfile": path, "hang": seconds}

``handle`` appends ``start <task> <pid>`` to the log, then (with "pidfile", the
first time only) writes its pid to that file and sleeps "hang" seconds (the test
kills the process meanwhile), sleeps "sleep" seconds, and appends
``done <task> <pid>`` just before it returns.  The log is opened with O_APPEND
and each line is one os.write, so a written line survives a SIGKILL.

``nap`` sleeps its payload (seconds) and ``fast`` does nothing: for draining
many short tasks.  ``async_handle`` is an ``async def`` handler.  ``until_stopped``
runs until its task is cancelled (tests/test_control.py).  ``square`` reports
progress and returns a result (tests/test_results.py); ``settings`` returns the
settings of the queue its worker opened (tests/test_settings.py).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import sqlq


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def handle(payload: dict[str, Any]) -> None:
    task, log, pid = payload["task"], payload["log"], os.getpid()
    _append(log, f"start {task} {pid}")
    pidfile = payload.get("pidfile")
    if pidfile is not None:
        try:
            fd = os.open(pidfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass  # a later attempt: the first handler's process was killed
        else:
            os.write(fd, f"{pid}\n".encode())
            os.close(fd)
            time.sleep(payload.get("hang", 60.0))
    time.sleep(payload.get("sleep", 0.0))
    _append(log, f"done {task} {pid}")


def nap(seconds: float) -> None:
    """Sleep ``seconds`` (the payload): a short task."""
    time.sleep(seconds)


def fast(payload: object) -> None:
    """Do nothing: the shortest task there is."""


async def async_handle(payload: dict[str, Any]) -> None:
    """``handle`` as a coroutine: ``start``/``done`` lines in the log; with "hang" it
    waits on the event loop until it is cancelled."""
    task, log, pid = payload["task"], payload["log"], os.getpid()
    _append(log, f"start {task} {pid}")
    if payload.get("hang"):
        await asyncio.Event().wait()
    await asyncio.sleep(0)
    _append(log, f"done {task} {pid}")


def until_stopped(payload: dict[str, Any]) -> None:
    """Append ``start <task>`` to the log at "log", then work in small steps until the
    worker says the task was asked to stop (sqlq.stop_requested), and stop by raising."""
    _append(payload["log"], f"start {payload['task']}")
    while not sqlq.stop_requested():
        time.sleep(0.01)
    raise RuntimeError("asked to stop")


def square(payload: dict[str, int]) -> dict[str, int]:
    """Report progress (0.5, "squaring"), then return the square of payload["n"]."""
    sqlq.current_task().progress(0.5, "squaring")
    return {"square": payload["n"] ** 2}


def settings(payload: object) -> dict[str, Any]:
    """The settings of the queue its worker opened, as its result (tests/test_settings.py)."""
    queue = sqlq.current_task().queue
    return {
        "lease_seconds": queue.lease_seconds,
        "max_attempts": queue.max_attempts,
        "retry": [queue.retry.kind, queue.retry.base, queue.retry.cap],
    }
