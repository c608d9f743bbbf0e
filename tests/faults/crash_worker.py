"""A worker process for tests/faults/test_power_loss.py: adds, claims and completes.

    python crash_worker.py DB LOG --worker N [--synchronous full|normal] [--seed X]
                           [--stop FILE] [--max-seconds S] [--work-ms A B]

Loops until FILE exists, its parent process is gone, or S seconds have passed.
A round: add a new task (ids ``w<N>-<i>``, unique per worker); take a lease
(``claim``, or the one ``complete_and_claim`` returned); sleep A to B ms (the
work); complete the task with its token (by ``complete`` or
``complete_and_claim``, chosen at random).
A line about a call is written only once the call has RETURNED, so every line
is a promise the database made:

    start <pid>
    add <task>            add(task) returned True: the task exists
    claim <task> <token>  a lease was handed out: the task is RESERVED or COMPLETED
    done <task>           complete returned True: the task is COMPLETED
    false <task>          complete returned False (must not happen: leases last 60 s)
    dup <task>            add returned False (must not happen: ids are unique)
    exit

LOG must not be on the filesystem under test: it is opened with O_APPEND on
the machine's own filesystem and each line is one os.write, so the test can
read how far the log had got at the moment it froze the database's device.
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
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--synchronous", choices=("full", "normal"), default="full")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", default=None)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--work-ms", type=float, nargs=2, default=(0.0, 0.0))
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    parent = os.getppid()
    deadline = time.monotonic() + args.max_seconds
    fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode("ascii"))

    def stopping() -> bool:
        return (
            (args.stop is not None and os.path.exists(args.stop))
            or os.getppid() != parent
            or time.monotonic() > deadline
        )

    log(f"start {os.getpid()}")
    queue = sqlq.Queue(
        args.db,
        lease_seconds=60,  # no lease runs out during a run: every "claim" stays valid
        max_attempts=5,
        synchronous=args.synchronous,
    )
    lease: sqlq.Lease | None = None
    number = 0
    try:
        while not stopping():
            number += 1
            task = f"w{args.worker}-{number:06d}"
            # Payloads of varied size, so that rows spill over pages now and then.
            payload = {"n": number, "pad": "x" * rng.randrange(0, 600)}
            log(f"add {task}" if queue.add(task, payload=payload) else f"dup {task}")
            if lease is None:
                lease = queue.claim()
                if lease is None:
                    continue
                log(f"claim {lease.task_id} {lease.token}")
            time.sleep(rng.uniform(*args.work_ms) / 1000)  # "working" on the task
            if rng.random() < 0.5:
                done = queue.complete(lease.task_id, token=lease.token)
                following = None
            else:
                done, following = queue.complete_and_claim(lease.task_id, token=lease.token)
            log(f"{'done' if done else 'false'} {lease.task_id}")
            lease = following
            if lease is not None:
                log(f"claim {lease.task_id} {lease.token}")
    finally:
        queue.close()
    log("exit")
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
