"""CPU instructions per call, sqlq beside the raw-SQLite reference, counted by callgrind.

    python -m bench.instructions [--ops add,claim_complete,runner,add_many] [-n 300]
    python -m bench.instructions --memory

Wall-clock timings on a shared machine vary by up to 2x from run to run;
valgrind's instruction counts do not (the same binary and inputs give the same
count, whatever else the machine does).  For each system and operation the
driver runs twice under callgrind, once with N operations and once with none
(after the same warm-up), and the difference divided by N is the cost of one
operation: Python, SQLAlchemy, the driver, SQLite and libc, everything but the
time spent waiting (fsync, locks), which these counts leave out on purpose.

Operations (synchronous=NORMAL, so that nothing waits on the disk):

* ``add``: one add per call.
* ``claim_complete``: reserve, then complete, as two calls (two transactions).
* ``runner``: complete_and_claim, one transaction per task, on both (the
  reference has one too): what the worker's loop costs per task.
* ``add_many``: add_many of 1,000 ids; the figure is per task.
* ``batches``: claim_many of 1,000, then complete_many of those leases (two
  transactions); the figure is per task.

The queues of ``claim_complete``, ``runner`` and ``batches`` are filled before
counting with the same number of tasks whatever N is (FILL, BATCH_FILL), so the
difference between the two runs holds no part of the fill.

``--memory`` counts the in-memory ``WorkQueue`` instead: instructions per call of
bench/seed_calls.py's mix (the benchmark's loop included), after 1,000 and after
100,000 tasks were queued first (half AVAILABLE, a quarter WAITING, a quarter
RESERVED with extended leases), so that the two figures show whether the cost
of a call grows with the number of tasks.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sqlq

from . import systems
from .seed_calls import answer, make_calls

OPS = ("add", "claim_complete", "runner", "add_many", "batches")
WARM = 200  # operations before counting, so that caches and statements are warm
MEMORY_TASKS = (1_000, 100_000)  # tasks queued before the mixed calls are counted
MEMORY_CALLS = 20_000  # mixed calls counted: enough for the garbage collector's share
BATCH = 1000  # tasks per batch call
FILL = 2000  # tasks in the queue before claim_complete and runner: room for N <= 1,798
BATCH_FILL = 11 * BATCH  # before batches: one warm-up batch, then up to 10 counted
BATCH_OPS = ("add_many", "batches")  # counted per task, N / 100 calls


def drive(system: str, op: str, n: int, folder: str) -> None:
    """The measured program: WARM operations, then ``n`` more (n = 0: the baseline)."""
    path = os.path.join(folder, "q.db")
    cls = systems.get(system)
    fill = BATCH_FILL if op == "batches" else FILL if op in ("claim_complete", "runner") else 0
    if fill:
        cls.fill(path, [f"t-{i}" for i in range(fill)])
    s = cls(path, "normal")
    if op == "add":
        for i in range(WARM + n):
            s.add(f"t-{i}")
    elif op == "add_many":
        for j in range(1 + n):
            s.add_many([f"t-{j}-{i}" for i in range(BATCH)])
    elif op == "claim_complete":
        for _ in range(WARM + n):
            s.complete(s.reserve())
    elif op == "runner":
        lease = s.reserve()
        for _ in range(WARM + n):
            _, lease = s.complete_and_claim(lease)
    elif op == "batches":
        for _ in range(1 + n):
            s.complete_many(s.claim_many(BATCH))
    s.close()


def drive_memory(tasks: int, n: int) -> None:
    """The measured program for ``--memory``: ``tasks`` queued, WARM mixed calls, then ``n``."""
    queue = sqlq.WorkQueue(30, 3)
    quarter = tasks // 4
    for i in range(quarter):
        queue.add(f"leased-{i}", 0)
        lease = queue.claim(0)
        assert lease is not None
        queue.extend(lease.task_id, lease.token, 0, seconds=10**8)
        queue.add(f"waiting-{i}", 0, run_at=10**9)
    for i in range(tasks - 2 * quarter):
        queue.add(f"line-{i}", 0)
    answer(queue, make_calls(WARM + MEMORY_CALLS, 7)[: WARM + n])


def count(drive: Callable[[str], list[str]]) -> int:
    """Instructions of the whole driver process, run with ``drive(folder)`` as its
    arguments (``--drive ...`` or ``--drive-memory ...``; a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="sqlq-instr-") as folder:
        out = os.path.join(folder, "callgrind.out")
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--dump-instr=no",
                "--dump-line=no",
                sys.executable,
                "-m",
                "bench.instructions",
                *drive(folder),
            ],
            check=True,
            capture_output=True,
            env=env,
            cwd=Path(__file__).resolve().parent.parent,
        )
        text = Path(out).read_text()
    found = re.search(r"^summary:\s+(\d+)", text, re.MULTILINE)
    if found is None:
        raise RuntimeError("callgrind wrote no summary")
    return int(found.group(1))


def per_op(system: str, op: str, n: int) -> float:
    def drive(k: int) -> Callable[[str], list[str]]:
        return lambda folder: ["--drive", system, op, str(k), folder]

    per = count(drive(n)) - count(drive(0))
    return per / n / (BATCH if op in BATCH_OPS else 1)


def per_mixed_call(tasks: int) -> float:
    def drive(k: int) -> Callable[[str], list[str]]:
        return lambda _: ["--drive-memory", str(tasks), str(k)]

    return (count(drive(MEMORY_CALLS)) - count(drive(0))) / MEMORY_CALLS


def print_memory() -> None:
    print(
        "WorkQueue: instructions per call of bench/seed_calls.py's mix "
        f"(callgrind, {MEMORY_CALLS:,} calls counted)"
    )
    print(f"{'tasks queued first':<20}{'per call':>12}")
    for tasks in MEMORY_TASKS:
        print(f"{tasks:<20,}{per_mixed_call(tasks):>12,.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument(
        "--ops", default=",".join(OPS), help="comma-separated, of: " + ", ".join(OPS)
    )
    parser.add_argument("-n", type=int, default=300, help="operations counted (default 300)")
    parser.add_argument(
        "--memory", action="store_true", help="count the in-memory WorkQueue's mixed calls"
    )
    parser.add_argument(
        "--json",
        default=str(Path(__file__).with_name("instructions.json")),
        help="where the counts go for the report (default bench/instructions.json; '' for none)",
    )
    parser.add_argument("--drive", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--drive-memory", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        system, op, n, folder = args.drive
        drive(system, op, int(n), folder)
        return 0
    if args.drive_memory:
        drive_memory(*args.drive_memory)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.memory:
        print_memory()
        return 0
    ops = [op for op in args.ops.split(",") if op]
    unknown = set(ops) - set(OPS)
    if unknown:
        parser.error(f"unknown operations: {', '.join(sorted(unknown))}")
    n = args.n
    if not 1 <= n <= FILL - WARM - 2 or n // 100 > BATCH_FILL // BATCH - 1:
        parser.error(f"-n must be from 1 to {min(FILL - WARM - 2, 100 * BATCH_FILL // BATCH - 1)}")
    print(f"instructions per operation (callgrind, synchronous=NORMAL, N = {n})")
    print(f"{'operation':<16}{'sqlq':>12}{'reference':>12}{'x ref':>8}")
    counted: dict[str, dict[str, float]] = {}
    for op in ops:
        count_n = max(1, n // 100) if op in BATCH_OPS else n
        ours = per_op("sqlq", op, count_n)
        ref = per_op("reference", op, count_n)
        counted[op] = {"sqlq": ours, "reference": ref}
        print(f"{op:<16}{ours:>12,.0f}{ref:>12,.0f}{ref / ours:>8.2f}")
    if args.json:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        Path(args.json).write_text(json.dumps({"when": when, "n": n, "ops": counted}, indent=1))
        print(f"wrote {args.json} (bench/RESULTS.md's targets read it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
