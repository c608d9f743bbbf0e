"""A worker process for tests/test_limits.py: grouped tasks under per-key limits.

    python tests/group_workers.py DB LOG [--lease S] [--work-ms A B] [--hold TASK]

Claims tasks from the queue in DB (a path or URL, of any durable backend) until every
task is finished, and records in LOG (shared by all the workers: opened with O_APPEND,
each line one os.write, so lines are in the order they happened and survive a SIGKILL)
when the handler of each lease starts and ends:

    start <task> <token>   the lease was claimed (its transaction committed)
    end <task> <token>     the handler's work is over, before complete() is called

so every interval from a start to its end lies inside its lease.  The handler of the
task ``--hold`` (its first lease) never ends: the process waits to be killed.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

import sqlq


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("--lease", type=float, default=5.0)
    parser.add_argument("--work-ms", type=float, nargs=2, default=(1.0, 5.0))
    parser.add_argument("--idle-ms", type=float, default=10.0)
    parser.add_argument("--hold", default=None)
    args = parser.parse_args(argv)
    rng = random.Random()
    fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode("utf-8"))

    queue = sqlq.Queue(args.db, lease_seconds=args.lease, max_attempts=100)
    try:
        while True:
            lease = queue.claim()
            if lease is None:
                counts = queue.counts()
                if counts["WAITING"] + counts["AVAILABLE"] + counts["RESERVED"] == 0:
                    break
                time.sleep(args.idle_ms / 1000)  # polling: limits and leases free up
                continue
            log(f"start {lease.task_id} {lease.token}")
            if lease.task_id == args.hold and lease.attempt == 1:
                threading.Event().wait()  # until SIGKILL
            time.sleep(rng.uniform(*args.work_ms) / 1000)  # the handler's work
            log(f"end {lease.task_id} {lease.token}")
            queue.complete(lease.task_id, token=lease.token)
    finally:
        queue.close()
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
