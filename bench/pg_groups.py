"""Grouped queues on PostgreSQL: drain throughput before and after the lock order.

    python -m bench.pg_groups [--before PATH] [--rounds N] [--tasks N]

A queue of 16 groups, each limited to 4 leases at once, holding 3,000 tasks, is
drained by 1, 2, 4 and 8 worker processes; each loops ``settle_and_claim(4)``
(completing what it holds, claiming up to 4 more; the tasks do no work) until no
task of the queue is unfinished.  Each count of workers runs on the code before
(``--before``: a tree of main's code, imported with PYTHONPATH; by default a
temporary ``git worktree`` at the merge base of HEAD and main) and on this tree,
interleaved (before, after, before, after ...), each run in a fresh schema made and
filled by that code.  Prints a markdown table: tasks per second (median of the
rounds), the ratio after / before, and the calls that failed with Busy (a deadlock,
or a lock waited for longer than busy_timeout).  The server is the bench's
(bench/postgres.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from . import postgres

ROOT = Path(__file__).resolve().parents[1]
GROUPS = 16
LIMIT = 4
WORKERS = (1, 2, 4, 8)

#: A worker process: waits for a line on stdin, drains, prints its figures as JSON.
WORKER = """
import json, sys, time
import sqlq
from sqlq.errors import Busy
url, = sys.argv[1:]
queue = sqlq.Queue(url, lease_seconds=60, max_attempts=1000, busy_timeout=30, listen=False)
queue.counts()
print("ready", flush=True)
sys.stdin.readline()
held, calls, busy = [], 0, 0
while True:
    try:
        calls += 1
        _, _, held = queue.settle_and_claim(4, completed=held)
    except Busy:
        busy += 1
        held = []
        continue
    if not held:
        counts = queue.counts()
        if not counts["AVAILABLE"] + counts["WAITING"] + counts["RESERVED"]:
            break
        time.sleep(0.001)
queue.close()
print(json.dumps({"calls": calls, "busy": busy}), flush=True)
"""

#: Fill a new schema: the default limit, then the tasks, round robin over the groups.
FILL = """
import sys
import sqlq
url, tasks, groups, limit = sys.argv[1], *map(int, sys.argv[2:])
with sqlq.Queue(url, lease_seconds=60, max_attempts=1000, listen=False) as queue:
    queue.set_limit(None, concurrency=limit)
    for g in range(groups):
        queue.add_many([f"g{g}-{i}" for i in range(g, tasks, groups)], group=f"g{g}")
"""


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def drain(tree: Path, url: str, workers: int, tasks: int) -> tuple[float, int]:
    """Fill a schema with ``tree``'s code and drain it with ``workers`` processes:
    (tasks per second, calls that raised Busy)."""
    env = _env(tree)
    subprocess.run(
        [sys.executable, "-c", FILL, url, str(tasks), str(GROUPS), str(LIMIT)],
        env=env, check=True, cwd=tempfile.gettempdir(),
    )  # fmt: skip
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url],
            env=env,
            cwd=tempfile.gettempdir(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(workers)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started = time.monotonic()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    figures = []
    for proc in procs:
        assert proc.stdout is not None
        figures.append(json.loads(proc.stdout.readline()))
    elapsed = time.monotonic() - started
    for proc in procs:
        assert proc.wait() == 0
    return tasks / elapsed, sum(f["busy"] for f in figures)


@contextmanager
def merge_base_tree() -> Iterator[Path]:
    """A temporary worktree of the merge base of HEAD and main (removed after)."""
    base = subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=ROOT, check=True, capture_output=True,
        text=True,
    ).stdout.strip()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="sqlq-before-") as folder:
        tree = Path(folder) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), base], cwd=ROOT, check=True,
            capture_output=True,
        )  # fmt: skip
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="a tree of the code before (main's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=3000)
    args = parser.parse_args(argv)
    if (why := postgres.missing()) is not None:
        sys.exit(why)
    with ExitStack() as stack:
        before = args.before or stack.enter_context(merge_base_tree())
        url = stack.enter_context(postgres.server())
        trees = {"before": before.resolve(), "after": ROOT}
        rates: dict[tuple[str, int], list[float]] = {}
        busy: dict[tuple[str, int], int] = {}
        load = os.getloadavg()
        for round_ in range(args.rounds):
            for workers in WORKERS:
                for name, tree in trees.items():
                    location = postgres.new_schema(url, f"groups_{name}_{workers}_{round_}")
                    try:
                        rate, failed = drain(tree, location, workers, args.tasks)
                    finally:
                        postgres.drop(location)
                    rates.setdefault((name, workers), []).append(rate)
                    busy[name, workers] = busy.get((name, workers), 0) + failed
                    print(f"{name:6} {workers} workers: {rate:7.0f} tasks/s, {failed} busy",
                          file=sys.stderr, flush=True)  # fmt: skip
        load_after = os.getloadavg()
    print(f"{args.tasks} tasks, {GROUPS} groups of limit {LIMIT}, {args.rounds} rounds; "
          f"load average {load[0]:.1f} before, {load_after[0]:.1f} after\n")  # fmt: skip
    print("| workers | before (tasks/s) | after (tasks/s) | after / before | Busy before | after |")
    print("|---|---|---|---|---|---|")
    for workers in WORKERS:
        old = statistics.median(rates["before", workers])
        new = statistics.median(rates["after", workers])
        print(f"| {workers} | {old:.0f} | {new:.0f} | {new / old:.2f} "
              f"| {busy['before', workers]} | {busy['after', workers]} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
