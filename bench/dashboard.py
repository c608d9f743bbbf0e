"""Does an open dashboard slow the workers?  Worker throughput with `sqlq web` polled
without pause against none, and their ratio, in one run.

    python -m bench.dashboard                     # 20,000 tasks, 4 worker processes, 3 rounds
    python -m bench.dashboard --tasks 500 --rounds 1 --big 1000   # a smoke run

Then how long the dashboard's pages take on a file of ``--big`` (10^6) COMPLETED tasks,
with a few DEAD and AVAILABLE ones among them (the median of 5 fetches each, through the
real server).

Each round drains a fresh SQLite file of ``--tasks`` tasks with ``--workers``
processes (each a claim + complete loop) twice: once alone, once while a client
fetches the dashboard's pages and API (the queues page, the newest tasks, the dead
letters, /api/queues, /metrics) one after another without pause, far harder than a
person or a scraper polls.  The order of the two alternates between rounds; the
ratio is of the medians.  The dashboard reads without the write lock, so the ratio
should stay near 1 (on a machine with fewer cores than processes, the dashboard's
CPU is taken from the workers all the same).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import sqlq

_SPAWN = multiprocessing.get_context("spawn")

#: What the poller fetches, in turn.
PAGES = ("/", "/tasks", "/dead", "/api/queues", "/api/tasks?state=COMPLETED", "/metrics")


def _drain(path: str, start: Any) -> None:
    """A worker process: open the queue, wait for the others (``start``, a barrier),
    then claim and complete until the queue is empty."""
    with sqlq.Queue(path, lease_seconds=60, max_attempts=3, synchronous="normal") as q:
        start.wait()
        while (lease := q.claim()) is not None:
            q.complete(lease.task_id, token=lease.token)


def _fill(path: str, tasks: int) -> None:
    with sqlq.Queue(path, lease_seconds=60, max_attempts=3, synchronous="normal") as q:
        for start in range(0, tasks, 1000):
            q.add_many([f"t{n}" for n in range(start, min(tasks, start + 1000))])


def _throughput(path: str, tasks: int, workers: int) -> float:
    """Tasks per second of ``workers`` processes draining ``path``."""
    start = _SPAWN.Barrier(workers + 1)  # every process has the file open: the clock starts
    processes = [_SPAWN.Process(target=_drain, args=(path, start)) for _ in range(workers)]
    for p in processes:
        p.start()
    start.wait()
    started = time.perf_counter()
    for p in processes:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError(f"a worker exited with {p.exitcode}")
    return tasks / (time.perf_counter() - started)


class Poller:
    """`sqlq web` on ``path`` and a thread that fetches PAGES without pause."""

    def __init__(self, path: str) -> None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        import browser  # the tests' way to start the real server

        self._server = browser.server(path)
        self._stop = threading.Event()
        self.fetches = 0

    def __enter__(self) -> Poller:
        url = self._server.__enter__()
        self._thread = threading.Thread(target=self._poll, args=(url,), daemon=True)
        self._thread.start()
        return self

    def _poll(self, url: str) -> None:
        while not self._stop.is_set():
            for page in PAGES:
                urllib.request.urlopen(url + page, timeout=60).read()
                self.fetches += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._server.__exit__(None, None, None)


#: The pages timed on the big file: the filters a selective one (DEAD, a prefix), the
#: line order (a sort), and the reads of the charts and metrics.
BIG_PAGES = (
    "/",
    "/tasks",
    "/tasks?after=0.0_1000_1000",
    "/tasks?state=DEAD",
    "/tasks?order=line&state=AVAILABLE",
    "/tasks?prefix=old-99999",
    "/task?queue=default&id=old-{middle}",
    "/api/charts?queue=default&window=day",
    "/metrics",
)


def _page_times(folder: str, size: int) -> None:
    from .systems import Sqlq

    path = f"{folder}/big.db"
    Sqlq.fill_completed(path, size)
    with sqlq.Queue(path, lease_seconds=60, max_attempts=1) as q:
        q.add_many([f"dead-{n}" for n in range(5)])
        for _ in range(5):
            lease = q.claim()
            assert lease is not None
            q.fail(lease.task_id, token=lease.token, error="bench")
        q.add_many([f"new-{n}" for n in range(50)])
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import browser

    print(f"\n| page, {size:,} COMPLETED tasks | median of 5 (ms) |\n|---|---|")
    with browser.server(path) as url:
        for page in BIG_PAGES:
            times = []
            for _ in range(5):
                started = time.perf_counter()
                urllib.request.urlopen(url + page.format(middle=size // 2), timeout=60).read()
                times.append(time.perf_counter() - started)
            print(f"| `{page}` | {1000 * statistics.median(times):,.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dashboard", description=__doc__)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--big", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    alone: list[float] = []
    polled: list[float] = []
    fetches = 0
    with tempfile.TemporaryDirectory() as folder:
        for round_ in range(args.rounds):
            for with_dashboard in (round_ % 2 == 1, round_ % 2 == 0):
                path = f"{folder}/r{round_}-{int(with_dashboard)}.db"
                _fill(path, args.tasks)
                if with_dashboard:
                    with Poller(path) as poller:
                        polled.append(_throughput(path, args.tasks, args.workers))
                    fetches += poller.fetches
                else:
                    alone.append(_throughput(path, args.tasks, args.workers))
                print(
                    f"round {round_ + 1}: {'with' if with_dashboard else 'without'} the "
                    f"dashboard: {(polled if with_dashboard else alone)[-1]:,.0f} tasks/s",
                    file=sys.stderr,
                )
        a, p = statistics.median(alone), statistics.median(polled)
        print(
            "| workers | tasks | alone (tasks/s) | dashboard polled (tasks/s) | ratio | fetches |"
        )
        print("|---|---|---|---|---|---|")
        print(
            f"| {args.workers} | {args.tasks:,} | {a:,.0f} | {p:,.0f} | {p / a:.2f} | {fetches:,} |"
        )
        _page_times(folder, args.big)
    return 0


if __name__ == "__main__":
    sys.exit(main())
