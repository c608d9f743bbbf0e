"""python -m bench.batches: long tasks are not hoarded by workers that prefetch.

    python -m bench.batches [--runs 3] [--processes 4] [--concurrency 4] [--tasks 64]
                            [--seconds 0.5] [--worker-options JSON]

Worker processes (``sqlq.Worker`` with its defaults and ``concurrency``; spawn)
drain ``tasks`` tasks that each sleep ``seconds`` from one SQLite file; the ideal
time is ``tasks * seconds / (processes * concurrency)``.  Meanwhile the parent
samples the tasks RESERVED (every 2 ms), and each worker's transactions and CPU
time (getrusage) are summed.  Prints, per run: the time over the ideal, the most
leases held at a sample against ``processes * (concurrency + prefetch)`` and
against ``processes * concurrency``, the least-served worker's share, and the
tasks per commit.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from typing import Any

import sqlq
from sqlq.worker import Worker

_SPAWN = multiprocessing.get_context("spawn")


def _nap(seconds: float) -> None:
    time.sleep(seconds)


def _worker(conn: Connection, path: str, concurrency: int, options: dict[str, Any]) -> None:
    queue = sqlq.Queue(path, lease_seconds=30.0, max_attempts=3)
    worker = Worker(queue, _nap, concurrency=concurrency, **options)
    conn.send(("ready", getattr(worker, "prefetch", 0)))  # (0: a Worker before issue 24)
    conn.recv()
    before = resource.getrusage(resource.RUSAGE_SELF)
    stats = worker.run(stop_when_idle=True, install_signal_handlers=False)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    conn.send(("done", stats.completed, stats.commits, cpu, time.time()))
    queue.close()


def run_once(
    processes: int, concurrency: int, tasks: int, seconds: float, options: dict[str, Any]
) -> dict[str, Any]:
    folder = tempfile.mkdtemp(prefix="sqlq-hoard-")
    path = os.path.join(folder, "q.db")
    queue = sqlq.Queue(path, lease_seconds=30.0, max_attempts=3)
    queue.add_many([(f"t{i}", seconds) for i in range(tasks)])
    pipes, procs = [], []
    for _ in range(processes):
        parent, child = _SPAWN.Pipe()
        proc = _SPAWN.Process(target=_worker, args=(child, path, concurrency, options))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    prefetch = max(conn.recv()[1] for conn in pipes)  # (all the same)
    start = time.time()
    for conn in pipes:
        conn.send("go")
    peak = 0
    while not all(conn.poll() for conn in pipes):
        peak = max(peak, queue.counts()["RESERVED"])
        time.sleep(0.002)
    results = [conn.recv() for conn in pipes]
    end = max(r[4] for r in results)
    for proc in procs:
        proc.join()
    queue.close()
    ideal = tasks * seconds / (processes * concurrency)
    done = [r[1] for r in results]
    return {
        "seconds": end - start,
        "over_ideal": (end - start) / ideal,
        "peak_reserved": peak,
        "bound": processes * (concurrency + prefetch),
        "slots": processes * concurrency,
        "least_share": min(done) / (tasks / processes),
        "tasks_per_commit": sum(done) / max(1, sum(r[2] for r in results)),
        "cpu_us_per_task": sum(r[3] for r in results) / max(1, sum(done)) * 1e6,
        "completed": sum(done),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batches", description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--worker-options", default="{}", metavar="JSON")
    args = parser.parse_args(argv)
    options = json.loads(args.worker_options)
    runs = []
    for i in range(args.runs):
        run = run_once(args.processes, args.concurrency, args.tasks, args.seconds, options)
        runs.append(run)
        print(f"run {i + 1}: " + ", ".join(f"{k} {v:.3g}" for k, v in run.items()), flush=True)
    print(
        "median over ideal "
        f"{statistics.median(r['over_ideal'] for r in runs):.3f}, most leases held "
        f"{max(r['peak_reserved'] for r in runs)} (bound {runs[0]['bound']}, slots "
        f"{runs[0]['slots']}), least-served {min(r['least_share'] for r in runs):.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
