"""Processes for tests/test_postgresql_faults.py: a queue on PostgreSQL in a process of
its own, as users run one.

    python tests/pg_worker.py drain URL RUNS [--queue Q] [--lease S] [--concurrency N]
                                               [--work-ms A B]

runs a :class:`sqlq.Worker` on queue Q of the database at URL until the queue is
drained (nothing AVAILABLE, RESERVED or WAITING), then exits 0.  Its handler appends
``run <task> <token> <pid>`` to RUNS as it starts each task, then works ``--work-ms``
(a random time between A and B milliseconds).  RUNS is opened with O_APPEND and each
line is one os.write, so a line written survives a SIGKILL.  The worker logs at
DEBUG to stderr (``sqlq worker -v``): its ``task completed task_id=... token=...``
lines are the completions the queue acknowledged (each logged once its transaction
committed), its warnings the errors it outlived.

    python tests/pg_worker.py calls URL QUEUE [--lease S]

makes the queue's calls a test asks for, one at a time: each line read from stdin is
``{"call": method, "args": [...], "kwargs": {...}}`` (JSON's lists passed as tuples),
each line written to stdout its answer, ``{"value": ...}`` (a Lease as ``[task_id,
token]``) or ``{"error": the sqlq error's class, "message": its text, "cause": the
class of its __cause__, "sqlstate": the cause's}``.  It exits at the end of stdin.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from typing import Any

import sqlq
from sqlq.worker import LOG_FORMAT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("drain", "calls"))
    parser.add_argument("url")
    parser.add_argument("target", help="drain: the RUNS file; calls: the queue's name")
    parser.add_argument("--queue", default="default")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--work-ms", type=float, nargs=2, default=(1.0, 5.0))
    args = parser.parse_args(argv)
    if args.mode == "drain":
        drain(args)
    else:
        calls(args)
    return 0


def drain(args: argparse.Namespace) -> None:
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG, format=LOG_FORMAT)
    fd = os.open(args.target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rng = random.Random()
    pid = os.getpid()

    def record(lease: sqlq.Lease) -> None:
        os.write(fd, f"run {lease.task_id} {lease.token} {pid}\n".encode())
        time.sleep(rng.uniform(*args.work_ms) / 1000)

    with sqlq.Queue(
        args.url, lease_seconds=args.lease, max_attempts=1000, queue=args.queue
    ) as queue:
        worker = sqlq.Worker(queue, record, concurrency=args.concurrency, with_lease=True)
        worker.run(stop_when_drained=True)


def calls(args: argparse.Namespace) -> None:
    with sqlq.Queue(
        args.url, lease_seconds=args.lease, max_attempts=1000, queue=args.target
    ) as queue:
        for line in sys.stdin:
            asked = json.loads(line)
            method = getattr(queue, asked["call"])
            args, kwargs = _tuples(asked.get("args", [])), _tuples(asked.get("kwargs", {}))
            try:
                answer = {"value": method(*args, **kwargs)}
            except sqlq.errors.SqlqError as exc:
                cause = exc.__cause__
                answer = {
                    "error": type(exc).__name__,
                    "message": str(exc),
                    "cause": type(cause).__name__,
                    "sqlstate": getattr(cause, "sqlstate", None),
                }
            print(json.dumps(answer, default=_lease), flush=True)


def _tuples(value: Any) -> Any:
    """JSON's lists as the tuples the queue's calls take ((task id, token) pairs ...)."""
    if isinstance(value, list):
        return tuple(_tuples(item) for item in value)
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    return value


def _lease(value: Any) -> Any:
    if isinstance(value, sqlq.Lease):
        return [value.task_id, value.token]
    if isinstance(value, sqlq.Retry):  # (in the QueueSettings configure answers)
        return [value.kind, value.base, value.cap]
    raise TypeError(f"cannot answer {value!r}")


if __name__ == "__main__":
    sys.exit(main())
