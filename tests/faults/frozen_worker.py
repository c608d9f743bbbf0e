"""Child processes for tests/faults/test_frozen.py, which freezes them with SIGSTOP.

    python tests/faults/frozen_worker.py MODE DB [options]

``serve``
    Opens the queue (``--queue``, ``--lease``; for SQLite ``--busy-timeout`` and
    ``--synchronous``, else the defaults) and answers
    commands, one JSON array a line on stdin, with one JSON object a line on
    stdout.  First it prints ``{"ready": <pid>}``.  Commands::

        ["claim"]  ["add", id]  ["info", id]  ["exit"]
        ["complete", id, token]  ["fail", id, token]
        ["extend", id, token]    ["release", id, token]

    Answers: ``{"result": ..., "elapsed": s}`` or, when the call raised,
    ``{"error": "<exception class>", "message": str(exc), "elapsed": s}``
    (``elapsed`` is the call's duration by the monotonic clock).

``hold``
    Enters a write transaction and stays inside it: prints ``inside``, waits for
    a line on stdin, then commits and prints ``committed <result>``.  With
    ``--via engine`` the transaction is ``with q.engine.begin() as c:
    q.add("held", conn=c)`` (SQLite's write lock only).  With ``--via call`` it
    is an ordinary ``q.fail("held", token=...)``: the task's retry policy has
    jitter, and the Random the queue draws it from stalls inside the call (so
    the process holds sqlq's write gate and SQLite's write lock).

``migrating``
    Takes ``<DB>.migrate-lock`` as a process migrating the schema does, prints
    ``locked``, and keeps it until a line comes on stdin.

``hammer``
    add / claim / (sometimes) extend / complete in a loop (``--pause`` seconds
    between rounds) until the file ``--stop`` exists, then completes whatever is
    left and exits 0.  A call that raises Busy is logged and tried again.  The
    log (``--log``, opened with O_APPEND, one os.write a line) reads::

        start <pid>
        added <task>               add() returned True
        phantom <task>             add() returned False after a Busy: the Busy call wrote
        completed <task> <token>   complete(task, token=token) returned True
        refused <task> <token>     complete(...) returned False
        lost <task> <token>        extend(...) returned None
        empty                      claim() found nothing right after an add
        busy <op> <elapsed> <message>
        exit <calls> <max elapsed of a call>

``handle`` (not a mode) is a handler for ``sqlq worker``, named
``frozen_worker:handle`` with this folder on PYTHONPATH; see its docstring.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

import sqlq
from sqlq.errors import Busy

T = TypeVar("T")


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


# --- serve ---------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    queue = sqlq.Queue(
        args.db,
        lease_seconds=args.lease,
        max_attempts=args.max_attempts,
        queue=args.queue,
        **_sqlite_options(args),
    )
    _say(json.dumps({"ready": os.getpid()}))
    calls: dict[str, Callable[..., Any]] = {
        "add": queue.add,
        "claim": queue.claim,
        "info": queue.info,
        "complete": lambda task, token: queue.complete(task, token=token),
        "fail": lambda task, token: queue.fail(task, token=token, error="late fail"),
        "extend": queue.extend,
        "release": queue.release,
    }
    try:
        for line in sys.stdin:
            name, *params = json.loads(line)
            if name == "exit":
                break
            started = time.monotonic()
            try:
                result = calls[name](*params)
            except Exception as exc:
                answer = {"error": type(exc).__name__, "message": str(exc)}
            else:
                if dataclasses.is_dataclass(result) and not isinstance(result, type):
                    result = dataclasses.asdict(result)
                answer = {"result": result}
            answer["elapsed"] = time.monotonic() - started
            _say(json.dumps(answer))
    finally:
        queue.close()
    return 0


# --- hold ----------------------------------------------------------------------------------


class _Stall(random.Random):
    """A Random whose first ``uniform`` (the retry jitter, drawn inside the call's
    transaction) says ``inside`` and waits for a line on stdin."""

    stalled = False

    def uniform(self, a: float, b: float) -> float:
        if not self.stalled:
            self.stalled = True
            _say("inside")
            sys.stdin.readline()
            return a  # no retry delay: the task goes back to the line, AVAILABLE
        return super().uniform(a, b)


def _hold(args: argparse.Namespace) -> int:
    queue = sqlq.Queue(
        args.db,
        lease_seconds=30,
        max_attempts=3,
        queue=args.queue,
        retry=sqlq.Retry.exponential(1.0, 1.0),
        rng=_Stall(),
        busy_timeout=30.0,
    )
    try:
        if args.via == "engine":
            with queue.engine.begin() as conn:
                added = queue.add("held", conn=conn)
                _say("inside")
                sys.stdin.readline()
            _say(f"committed {added}")
        else:
            assert queue.add("held")
            lease = queue.claim()
            assert lease is not None and lease.task_id == "held"
            state = queue.fail("held", token=lease.token, error="boom")
            _say(f"committed {state}")
    finally:
        queue.close()
    return 0


def _migrating(args: argparse.Namespace) -> int:
    fd = os.open(args.db + ".migrate-lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as sqlq's migrate lock is taken
    _say("locked")
    sys.stdin.readline()
    os.close(fd)
    return 0


# --- hammer --------------------------------------------------------------------------------


def _hammer(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    log_path = args.log

    def log(line: str) -> None:
        _append(log_path, line)

    log(f"start {os.getpid()}")
    queue = sqlq.Queue(
        args.db,
        lease_seconds=30,
        max_attempts=3,
        queue=args.queue,
        **_sqlite_options(args),
    )
    calls, slowest = 0, 0.0
    busied: set[str] = set()  # tasks whose add raised Busy at least once

    def call(op: str, fn: Callable[..., T], *params: Any, **options: Any) -> T:
        nonlocal calls, slowest
        while True:
            started = time.monotonic()
            try:
                result = fn(*params, **options)
            except Busy as exc:
                elapsed = time.monotonic() - started
                slowest = max(slowest, elapsed)
                if op == "add":
                    busied.add(params[0])
                log(f"busy {op} {elapsed:.4f} {exc}")
                continue
            elapsed = time.monotonic() - started
            calls += 1
            slowest = max(slowest, elapsed)
            return result

    def finish(lease: sqlq.Lease) -> None:
        if call("complete", queue.complete, lease.task_id, token=lease.token):
            log(f"completed {lease.task_id} {lease.token}")
        else:
            log(f"refused {lease.task_id} {lease.token}")

    try:
        i = 0
        while not os.path.exists(args.stop):
            task = f"{args.queue}-{i:05d}"
            i += 1
            if call("add", queue.add, task):
                log(f"added {task}")
            else:
                log(f"phantom {task}" if task in busied else f"duplicate {task}")
            lease = call("claim", queue.claim)
            if lease is None:
                log("empty")
                continue
            if (
                rng.random() < 0.2
                and call("extend", queue.extend, lease.task_id, lease.token) is None
            ):
                log(f"lost {lease.task_id} {lease.token}")
            finish(lease)
            if args.pause:
                time.sleep(args.pause)
        while (lease := call("claim", queue.claim)) is not None:
            finish(lease)
    finally:
        queue.close()
    log(f"exit {calls} {slowest:.4f}")
    return 0


# --- a handler for `sqlq worker` -----------------------------------------------------------


def handle(payload: dict[str, Any]) -> None:
    """Appends ``start <pid>`` to ``payload["log"]``.  The first time only (it creates
    ``payload["marker"]`` with its pid) it then waits until the file ``payload["go"]``
    exists, at most ``payload["wait"]`` seconds.  Appends ``done <pid>`` and returns."""
    log, pid = payload["log"], os.getpid()
    _append(log, f"start {pid}")
    try:
        fd = os.open(payload["marker"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass  # a later attempt: the first one's process is frozen
    else:
        os.write(fd, f"{pid}\n".encode())
        os.close(fd)
        end = time.monotonic() + payload["wait"]
        while not os.path.exists(payload["go"]) and time.monotonic() < end:
            time.sleep(0.01)
    _append(log, f"done {pid}")


# --- main ----------------------------------------------------------------------------------


def _sqlite_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SQLite options given on the command line (a database of another kind takes
    none): without them, the Queue's defaults."""
    given = {"busy_timeout": args.busy_timeout, "synchronous": args.synchronous}
    return {name: value for name, value in given.items() if value is not None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("serve", "hold", "migrating", "hammer"))
    parser.add_argument("db")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--max-attempts", type=int, default=5)
    parser.add_argument("--busy-timeout", type=float)
    parser.add_argument("--via", choices=("engine", "call"), default="engine")
    parser.add_argument("--log")
    parser.add_argument("--stop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synchronous", choices=("full", "normal"))
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between rounds")
    args = parser.parse_args(argv)
    if args.mode == "serve":
        return _serve(args)
    if args.mode == "hold":
        return _hold(args)
    if args.mode == "migrating":
        return _migrating(args)
    return _hammer(args)


if __name__ == "__main__":
    sys.exit(main())
