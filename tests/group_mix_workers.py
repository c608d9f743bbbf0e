"""A worker process for tests/test_limits.py's lock-order test: every kind of call
that moves grouped tasks, from several processes at once.

    python tests/group_mix_workers.py URL LOG GROUPS ROUNDS SEED

Runs ROUNDS rounds on the queue at URL.  A round ends the leases it holds in one
settle_and_claim (most completed, some failed to be retried, some dead-lettered,
some abandoned to run out: a short lease, so other calls apply their expiry),
claims up to three new ones in the same transaction, and now and then cancels a
task, adds one, redrives dead ones (of several groups, in one call), adds a task
with a dedupe key that debounces the one holding it (moving it out of the line and
back), sets a group's limit again (set_limit: the schema's limits lock, exclusive),
purges (forgetting idle groups), or adds two tasks in one transaction of its own
(conn=, in group-key order), the second making a group of its own.  Then it drains
the queue: completes what it holds and claims more until no task of the queue is
unfinished (waiting while other workers still hold some).  Tasks are named
``<group>-<n>``, GROUPS the groups with their concurrency limits (``A:2,B:1``).  LOG, shared
by all the workers (O_APPEND, one os.write a line), gets:

    start <task> <token>   a lease was claimed (its transaction committed)
    end <task> <token>     the work of that lease is over, before it is reported
    busy <n> <cause>       a call failed with sqlq.errors.Busy (a deadlock, or a lock
                           waited for longer than busy_timeout); n counts them,
                           the cause is the psycopg error's class
"""

from __future__ import annotations

import os
import random
import sys
import time

import sqlq
from sqlq.errors import Busy


def main(argv: list[str]) -> int:
    url, log_path, groups_arg, rounds_arg, seed = argv
    caps = {group: int(cap) for group, cap in (g.split(":") for g in groups_arg.split(","))}
    groups = list(caps)
    rng = random.Random(int(seed))
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    busy = 0

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode("utf-8"))

    queue = sqlq.Queue(url, lease_seconds=0.3, max_attempts=1000, busy_timeout=10)
    held: list[sqlq.Lease] = []
    dead: list[str] = []  # dead-lettered here, some redriven later
    for n in range(int(rounds_arg)):
        done: list[sqlq.Lease] = []
        failed: list[tuple[str, int, str] | tuple[str, int, str, bool]] = []
        for lease in held:
            log(f"end {lease.task_id} {lease.token}")
            roll = rng.random()
            if roll < 0.6:
                done.append(lease)
            elif roll < 0.8:
                failed.append((lease.task_id, lease.token, "again"))
            elif roll < 0.87:
                failed.append((lease.task_id, lease.token, "dead", False))
                dead.append(lease.task_id)
            # else: abandoned, its lease runs out
        rng.shuffle(done)
        try:
            if rng.random() < 0.2:
                group = rng.choice(groups)
                queue.add(
                    f"{group}-k{os.getpid()}-{n}",
                    group=group,
                    key=f"{group}-key{rng.randrange(3)}",
                    on_key="debounce",
                    delay=rng.choice([None, 0.05]),
                )
            if rng.random() < 0.2:
                queue.cancel(f"{rng.choice(groups)}-{rng.randrange(60)}")
            if rng.random() < 0.1:
                group = rng.choice(groups)
                queue.add(f"{group}-a{os.getpid()}-{n}", group=group)
            if dead and rng.random() < 0.15:
                rng.shuffle(dead)
                queue.redrive(task_ids=dead[:3])
                del dead[:3]
            if rng.random() < 0.05:
                group = rng.choice(groups)
                queue.set_limit(group, concurrency=caps[group])
            if rng.random() < 0.03:
                queue.purge()
            if rng.random() < 0.05:  # a group of its own: "Z..." comes after A-D
                with queue.engine.begin() as conn:
                    group = rng.choice(groups)
                    queue.add(f"{group}-t{os.getpid()}-{n}", group=group, conn=conn)
                    own = f"Z{os.getpid()}{n}"
                    queue.add(f"{own}-0", group=own, conn=conn)
            _, _, held = queue.settle_and_claim(3, completed=done, failed=failed)
        except Busy as exc:
            busy += 1
            log(f"busy {busy} {type(exc.__cause__).__name__}")
            held = []  # nothing of that call happened: those leases run out
            continue
        for lease in held:
            log(f"start {lease.task_id} {lease.token}")
        time.sleep(rng.uniform(0.001, 0.004))  # the work of the leases
    while True:  # drain: every task of the queue finished
        for lease in held:
            log(f"end {lease.task_id} {lease.token}")
        try:
            _, _, held = queue.settle_and_claim(3, completed=held)
        except Busy as exc:
            busy += 1
            log(f"busy {busy} {type(exc.__cause__).__name__}")
            held = []
            continue
        for lease in held:
            log(f"start {lease.task_id} {lease.token}")
        if not held:
            counts = queue.counts()
            if not counts["AVAILABLE"] + counts["WAITING"] + counts["RESERVED"]:
                break
            time.sleep(0.02)  # leases held elsewhere, or running out
    queue.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
