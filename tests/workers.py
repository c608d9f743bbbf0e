"""A worker process for tests/test_processes.py.

    python tests/workers.py DB LOG [--lease S] [--max-attempts N] [--work-ms A B] [--seed X]

Takes tasks from the queue in DB (a path or URL, of any durable backend) (reserve,
a short sleep, complete) until every task is COMPLETED or DEAD, and records what it
does in LOG, one line per event.
The log is opened with O_APPEND and each line is a single os.write, so a line
that was written survives a SIGKILL of this process:

    start <pid>
    took <task>      reserve() returned <task>
    intent <task>    about to call complete(<task>)
    done <task>      complete(<task>) returned True
    false <task>     complete(<task>) returned False (the lease ran out first)
    exit             the drain is over; the process exits 0
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

import sqlq


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("log")
    parser.add_argument("--lease", type=float, default=1.0)
    parser.add_argument("--max-attempts", type=int, default=100)
    parser.add_argument("--work-ms", type=float, nargs=2, default=(1.0, 5.0))
    parser.add_argument("--idle-ms", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=None)
    # Sleep this long after every Nth complete() returned, before its result is
    # logged: widens the window in which a SIGKILL leaves an "intent" line alone.
    parser.add_argument("--linger-every", type=int, default=0)
    parser.add_argument("--linger-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode("utf-8"))

    log(f"start {os.getpid()}")
    queue = sqlq.Queue(args.db, lease_seconds=args.lease, max_attempts=args.max_attempts)
    finished = 0
    try:
        while True:
            task = queue.reserve()
            if task is None:
                counts = queue.counts()
                if counts["AVAILABLE"] == 0 and counts["RESERVED"] == 0:
                    break
                time.sleep(args.idle_ms / 1000)  # leases may still run out
                continue
            log(f"took {task}")
            time.sleep(rng.uniform(*args.work_ms) / 1000)
            log(f"intent {task}")
            completed = queue.complete(task)
            finished += 1
            if args.linger_every and finished % args.linger_every == 0:
                time.sleep(args.linger_ms / 1000)
            if completed:
                log(f"done {task}")
            else:
                log(f"false {task}")
    finally:
        queue.close()
    log("exit")
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
