"""2*10^5 mixed calls of the core contract against each face, in one run.

    python bench/seed_calls.py [-n CALLS] [--synchronous full|normal] [--seed S]

Prints calls per second for WorkQueue (memory) and Queue (SQLite), their ratio,
and checks that both faces gave the same answer to every call.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlq

Call = tuple[str, str | None, int]


def make_calls(n: int, seed: int) -> list[Call]:
    """A reproducible mix: adds, reserves, completes, fails and status reads at rising times."""
    rng = random.Random(seed)
    calls: list[Call] = []
    ids: list[str] = []
    now = 0
    for _ in range(n):
        now += rng.choice((0, 0, 1, 2))
        r = rng.random()
        if r < 0.30 or not ids:
            ids.append(f"task-{len(ids)}")
            calls.append(("add", ids[-1], now))
        elif r < 0.60:
            calls.append(("reserve", None, now))
        elif r < 0.75:
            calls.append(("complete", rng.choice(ids[-200:]), now))
        elif r < 0.85:
            calls.append(("fail", rng.choice(ids[-200:]), now))
        else:
            calls.append(("status", rng.choice(ids), now))
    return calls


def answer(queue: Any, calls: list[Call]) -> list[Any]:
    """Every call made on ``queue``, in order: its answers."""
    add, reserve, complete, fail, status = (
        queue.add,
        queue.reserve,
        queue.complete,
        queue.fail,
        queue.status,
    )
    answers = []
    for op, task, now in calls:
        if op == "add":
            answers.append(add(task, now))
        elif op == "reserve":
            answers.append(reserve(now))
        elif op == "complete":
            answers.append(complete(task, now))
        elif op == "fail":
            answers.append(fail(task, now))
        else:
            answers.append(status(task, now))
    return answers


def run(queue: Any, calls: list[Call]) -> tuple[float, str]:
    """Seconds taken and a digest of every answer."""
    start = time.perf_counter()
    answers = answer(queue, calls)
    elapsed = time.perf_counter() - start
    return elapsed, hashlib.sha256(repr(answers).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="number of calls (default 200000)")
    parser.add_argument("--synchronous", choices=["full", "normal"], default="normal")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)

    calls = make_calls(args.n, args.seed)
    memory_s, memory_digest = run(sqlq.WorkQueue(30, 3), calls)
    with tempfile.TemporaryDirectory() as tmp:
        queue = sqlq.Queue(
            Path(tmp) / "seed.db", lease_seconds=30, max_attempts=3, synchronous=args.synchronous
        )
        sqlite_s, sqlite_digest = run(queue, calls)
        queue.close()

    print(f"{args.n} mixed calls (seed {args.seed}), SQLite synchronous={args.synchronous}")
    print(f"  WorkQueue (memory): {args.n / memory_s:>12,.0f} calls/s  ({memory_s:.3f} s)")
    print(f"  Queue (SQLite):     {args.n / sqlite_s:>12,.0f} calls/s  ({sqlite_s:.3f} s)")
    print(f"  memory / SQLite:    {sqlite_s / memory_s:>12,.1f} x")
    same = memory_digest == sqlite_digest
    print(f"  same answers:       {'yes' if same else 'NO'} ({memory_digest} / {sqlite_digest})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
