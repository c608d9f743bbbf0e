"""A batch of registered tasks: N ``Task.defer`` calls against one ``Task.defer_many``
and one ``Queue.add_many`` of the same payloads, side by side in one run (issue 23).

    python -m bench.defer_many              # N = 2,000
    python -m bench.defer_many --tasks 50   # a smoke run

Each way fills a fresh SQLite file with the queue's defaults (synchronous FULL: one
``defer`` is one transaction, flushed to disk). ``defer_many`` checks every call's
arguments against the function as ``defer`` does, then adds them as ``add_many``
does, which checks nothing of the function: the last two rows should be close, the
first far behind. ``add_many`` is given ids made beforehand, of the same length as
the others' (uuid4 hex), so that the three write the same rows. CPU time (getrusage
of this process) is given beside the wall clock: a flush waits for the disk without
using the CPU.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlq

tasks = sqlq.Tasks()


@tasks.task(name="resize")
def resize(path: str, width: int = 100) -> None:
    """The task deferred (never run here)."""


def _calls(n: int) -> list[dict[str, Any]]:
    return [{"path": f"photos/{i}.jpg", "width": 320 + i % 3} for i in range(n)]


def _defer(queue: sqlq.Queue, calls: list[dict[str, Any]]) -> None:
    for kwargs in calls:
        resize.defer(queue, **kwargs)


def _defer_many(queue: sqlq.Queue, calls: list[dict[str, Any]]) -> None:
    resize.defer_many(queue, calls)


def _add_many(queue: sqlq.Queue, calls: list[dict[str, Any]]) -> None:
    queue.add_many([(task_id, kwargs, "resize") for task_id, kwargs in calls])


WAYS: list[tuple[str, Callable[[sqlq.Queue, Any], None]]] = [
    ("`Task.defer`, once per task", _defer),
    ("`Task.defer_many`, one call", _defer_many),
    ("`Queue.add_many`, one call (no check of the arguments)", _add_many),
]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(n: int, folder: Path) -> list[tuple[str, float, float]]:
    """(way, wall seconds, CPU seconds) of adding ``n`` tasks each way."""
    calls = _calls(n)
    results = []
    for number, (label, way) in enumerate(WAYS):
        given: Any = calls if way is not _add_many else [(uuid.uuid4().hex, c) for c in calls]
        with sqlq.Queue(folder / f"{number}.db", lease_seconds=30, max_attempts=3) as queue:
            start, cpu = time.perf_counter(), _cpu()
            way(queue, given)
            results.append((label, time.perf_counter() - start, _cpu() - cpu))
            assert queue.counts()["AVAILABLE"] == n
    return results


def table(n: int, results: list[tuple[str, float, float]]) -> str:
    batch = results[-1][1]
    lines = [
        f"| {n:,} tasks | wall clock | tasks/s | CPU | wall / add_many's |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, wall, cpu in results:
        lines.append(
            f"| {label} | {wall:.3f} s | {n / wall:,.0f} | {cpu:.3f} s | {wall / batch:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.defer_many", description=__doc__)
    parser.add_argument("--tasks", type=int, default=2000, help="N: tasks each way (2,000)")
    args = parser.parse_args(argv)
    if not 1 <= args.tasks <= 10_000:
        parser.error("--tasks must be 1 to 10,000 (one batch)")
    with tempfile.TemporaryDirectory(prefix="sqlq-defer-many-") as folder:
        print(table(args.tasks, measure(args.tasks, Path(folder))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
