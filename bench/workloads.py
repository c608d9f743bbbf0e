"""The workloads.  Each measures every available system and records its figures.

Every timed loop stops at N tasks or after ``cfg.budget`` seconds, whichever
comes first, and reports tasks per second over what it did; RESULTS.md gives
the number of tasks behind each figure.  Set-up (filling a queue) is never timed.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import sqlq
from sqlq.sqlite.driver import dbapi

from . import postgres, procs, systems
from .config import Config, Results, log
from .seed_calls import make_calls
from .seed_calls import run as run_calls

_counter = itertools.count()


def fresh(cfg: Config, key: str, name: str) -> str:
    """A new location for one run of one system: a path in the work folder, or the
    URL of a new schema on the run's PostgreSQL server."""
    unique = f"{name}-{next(_counter)}"
    if key in systems.ALL and systems.ALL[key].on_postgres:
        return postgres.new_schema(cfg.postgres_url, f"{key}-{unique}")
    return systems.db_path(cfg.workdir, key, unique)


def cleanup(path: str) -> None:
    if postgres.is_location(path):
        postgres.drop(path)
        return
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    for suffix in ("", "-wal", "-shm", ".migrate-lock"):
        with contextlib.suppress(OSError):
            os.remove(path + suffix)


def ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}/s"


def available(
    cfg: Config, results: Results, sync: str | None = None
) -> Iterator[type[systems.System]]:
    """The systems measured (with durability ``sync``, when given)."""
    for key in cfg.systems:
        cls = systems.get(key)
        if key in results.skipped or (cls.on_postgres and sync not in (None, *cfg.pg_syncs)):
            continue
        yield cls


# --- 0. the floor -------------------------------------------------------------------


def floor(cfg: Config, results: Results) -> None:
    """An empty single-row write transaction: what bounds one-transaction-per-call queues."""
    for sync in cfg.syncs:
        values = []
        counts = []
        for _ in range(cfg.repeats):
            path = fresh(cfg, "floor", "floor")
            conn = dbapi.connect(path, isolation_level=None)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {sync.upper()}")
            conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER NOT NULL)")
            conn.execute("INSERT INTO t VALUES (1, 0)")
            n = 0
            start = time.perf_counter()
            stop = start + min(cfg.budget, 1.0)
            while n < 20 * cfg.tasks:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE t SET v = v + 1 WHERE id = 1")
                conn.execute("COMMIT")
                n += 1
                if time.perf_counter() > stop:
                    break
            elapsed = time.perf_counter() - start
            conn.close()
            cleanup(path)
            values.append(elapsed / n * 1e6)
            counts.append(n)
        results.add("floor", "sqlite", sync, "write transaction", values, "us", n=counts)
        log(f"floor {sync}: {statistics.median(values):.1f} us per write transaction")


# --- interleaving ----------------------------------------------------------------------


@dataclass
class Job:
    """One measurement (a system, a durability, a case), repeated cfg.repeats times.

    The runs of all jobs of a workload are interleaved (run 1 of every job, then
    run 2 of every job, ...), so that a burst of load from elsewhere on the
    machine falls on several systems rather than on all runs of one.
    """

    cls: type[systems.System]
    sync: str
    case: str
    once: Callable[[int], tuple[float, int, int]]  # run number -> (tasks/s, tasks, refused)
    values: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    refused: int = 0


def _run_jobs(
    cfg: Config, results: Results, workload: str, jobs: list[Job], title: str | None = None
) -> None:
    for rep in range(cfg.repeats):
        for job in jobs:
            value, n, refused = job.once(rep)
            job.values.append(value)
            job.counts.append(n)
            job.refused += refused
            log(
                f"{title or workload} {job.sync} {job.cls.key} {job.case} "
                f"[{rep + 1}/{cfg.repeats}]: "
                f"{fmt_rate(value)}, {n:,} tasks"
            )
    for job in jobs:
        results.add(
            workload,
            job.cls.key,
            job.sync,
            job.case,
            job.values,
            "tasks/s",
            n=job.counts,
            refused=job.refused,
        )
        if job.refused:
            results.note(f"{job.cls.key} {job.sync} {job.case}: {job.refused} completions refused")


# --- 1. enqueue -----------------------------------------------------------------------


def enqueue(cfg: Config, results: Results) -> None:
    jobs = []
    for sync in cfg.syncs:
        for cls in available(cfg, results, sync):
            jobs.append(Job(cls, sync, "single", functools.partial(_add_once, cfg, cls, sync)))
            if cls.can_add_many:
                once = functools.partial(_add_many_once, cfg, cls, sync)
                jobs.append(Job(cls, sync, "batch", once))
    _run_jobs(cfg, results, "enqueue", jobs)


def _add_once(
    cfg: Config, cls: type[systems.System], sync: str, rep: int
) -> tuple[float, int, int]:
    path = fresh(cfg, cls.key, "enqueue")
    system = cls(path, sync)
    add = system.add
    n = 0
    start = time.perf_counter()
    stop = start + cfg.budget
    for task_id in ids(f"e{rep}", cfg.tasks):
        add(task_id)
        n += 1
        if time.perf_counter() > stop:
            break
    elapsed = time.perf_counter() - start
    system.close()
    cleanup(path)
    return n / elapsed, n, 0


def _add_many_once(
    cfg: Config, cls: type[systems.System], sync: str, rep: int
) -> tuple[float, int, int]:
    path = fresh(cfg, cls.key, "enqueue-batch")
    system = cls(path, sync)
    all_ids = ids(f"b{rep}", max(cfg.tasks, 10 * cfg.batch))
    n = 0
    start = time.perf_counter()
    stop = start + cfg.budget
    for i in range(0, len(all_ids), cfg.batch):
        chunk = all_ids[i : i + cfg.batch]
        system.add_many(chunk)
        n += len(chunk)
        if time.perf_counter() > stop:
            break
    elapsed = time.perf_counter() - start
    system.close()
    cleanup(path)
    return n / elapsed, n, 0


# --- 2. reserve + complete in one process ------------------------------------------------


def reserve(cfg: Config, results: Results) -> None:
    jobs = []

    def job(cls: type[systems.System], sync: str, case: str, loop: Loop) -> Job:
        return Job(cls, sync, case, functools.partial(_reserve_once, cfg, cls, sync, case, loop))

    for sync in cfg.syncs:
        for cls in available(cfg, results, sync):
            jobs.append(job(cls, sync, "single", _single_loop))
            if cls.can_claim_many:
                jobs.append(job(cls, sync, "batch", _batch_loop(cfg.batch, True)))
            if cls.can_claim_many and cls.can_complete_many and not cls.on_postgres:
                loop = _batch_loop(cfg.batch, False)
                jobs.append(job(cls, sync, "batch, single completes", loop))
            if cls.can_complete_and_claim:
                jobs.append(job(cls, sync, "runner", _runner_loop))
            elif cls.key == "sqlq":
                results.note(
                    "sqlq.Queue has no complete_and_claim in this version: the runner-loop "
                    "row of sqlq is skipped."
                )
    _run_jobs(cfg, results, "reserve", jobs, "reserve+complete")


Loop = Callable[[systems.System, float], tuple[int, int]]


def _single_loop(system: systems.System, stop: float) -> tuple[int, int]:
    reserve, complete = system.reserve, system.complete
    done = refused = 0
    while (claimed := reserve()) is not None:
        if complete(claimed):
            done += 1
        else:
            refused += 1
        if time.perf_counter() > stop:
            break
    return done, refused


def _batch_loop(batch: int, batch_complete: bool) -> Loop:
    def loop(system: systems.System, stop: float) -> tuple[int, int]:
        done = refused = 0
        while claimed := system.claim_many(batch):
            if batch_complete:
                ok = system.complete_many(claimed)
            else:
                ok = sum(system.complete(c) for c in claimed)
            done += ok
            refused += len(claimed) - ok
            if time.perf_counter() > stop:
                break
        return done, refused

    return loop


def _runner_loop(system: systems.System, stop: float) -> tuple[int, int]:
    complete_and_claim = system.complete_and_claim
    claimed = system.reserve()
    done = refused = 0
    while claimed is not None:
        ok, claimed = complete_and_claim(claimed)
        if ok:
            done += 1
        else:
            refused += 1
        if time.perf_counter() > stop:
            if claimed is not None:
                if system.complete(claimed):
                    done += 1
                else:
                    refused += 1
            break
    return done, refused


def _reserve_once(
    cfg: Config, cls: type[systems.System], sync: str, case: str, loop: Loop, rep: int
) -> tuple[float, int, int]:
    n = cfg.tasks if case in ("single", "runner") else max(cfg.tasks, 10 * cfg.batch)
    path = fresh(cfg, cls.key, "reserve")
    cls.fill(path, ids(f"r{rep}", n))
    system = cls(path, sync)
    start = time.perf_counter()
    done, refused = loop(system, start + cfg.budget)
    elapsed = time.perf_counter() - start
    system.close()
    cleanup(path)
    return done / elapsed, done, refused


# --- 3. worker processes ----------------------------------------------------------------


def processes(cfg: Config, results: Results) -> None:
    plan = [
        (cls, sync, _tasks_per_drain(cfg, results, cls.key, sync))
        for sync in cfg.syncs
        for cls in available(cfg, results, sync)
    ]
    drains: dict[tuple[str, str, int], list[procs.Drain]] = {}
    broken: set[str] = set()
    pool = procs.Pool(max(k for cls, _, _ in plan for k in _workers(cfg, cls)))
    try:
        for rep in range(cfg.repeats):
            for cls, sync, n in plan:
                for k in _workers(cfg, cls):
                    if cls.key in broken:
                        continue
                    drain = _drain_once(cfg, results, pool, cls, sync, k, n, rep)
                    if drain is None:
                        broken.add(cls.key)
                    else:
                        drains.setdefault((cls.key, sync, k), []).append(drain)
    finally:
        pool.close()
    for cls, sync, n in plan:
        for k in _workers(cfg, cls):
            if (cls.key, sync, k) in drains:
                _record_drains(results, cls.key, sync, k, n, drains[(cls.key, sync, k)])


def _workers(cfg: Config, cls: type[systems.System]) -> tuple[int, ...]:
    return cfg.pg_workers if cls.on_postgres else cfg.workers


def _tasks_per_drain(cfg: Config, results: Results, key: str, sync: str) -> int:
    """Enough tasks for one worker to be busy about cfg.proc_budget seconds (at most N)."""
    one = results.one("reserve", key, sync, "single")
    if one is None:
        return cfg.tasks
    return max(min(cfg.tasks, 200), min(cfg.tasks, int(one.median * cfg.proc_budget)))


def _drain_once(
    cfg: Config,
    results: Results,
    pool: procs.Pool,
    cls: type[systems.System],
    sync: str,
    k: int,
    n: int,
    rep: int,
) -> procs.Drain | None:
    path = fresh(cfg, cls.key, f"procs{k}")
    task_ids = ids(f"p{rep}", n)
    cls.fill(path, task_ids)
    try:
        drain = pool.drain(cls.key, path, sync, k, task_ids, cfg.proc_time_limit)
    except RuntimeError as exc:
        results.note(str(exc))
        cleanup(path)
        return None
    check = cls(path, "normal")
    try:
        counted = check.completed_count()
    finally:
        check.close()
    cleanup(path)
    if counted is not None and counted != n - drain.lost and cls.key != "persist-queue":
        results.note(
            f"{cls.key} {sync} {k} workers: the file holds {counted} completed tasks, "
            f"the workers saw {n - drain.lost} accepted completions"
        )
    log(
        f"processes {sync} {cls.key} x{k} [{rep + 1}/{cfg.repeats}]: "
        f"{fmt_rate(drain.throughput)} over {n:,} tasks; duplicates {drain.duplicates}, "
        f"lost {drain.lost}, lock errors {drain.lock_errors}, other errors "
        f"{drain.other_errors}; per worker {drain.per_worker}"
        + ("" if drain.tasks_per_commit is None else f"; {drain.tasks_per_commit:.2f} tasks/commit")
        + f"; {drain.cpu_per_task:.0f} us CPU/task"
    )
    return drain


def _record_drains(
    results: Results, key: str, sync: str, k: int, n: int, drains: list[procs.Drain]
) -> None:
    results.add(
        "processes",
        key,
        sync,
        str(k),
        [d.throughput for d in drains],
        "tasks/s",
        tasks=n,
        workers=k,
        duplicates=sum(d.duplicates for d in drains),
        double_completed=sum(d.double_completed for d in drains),
        lost=sum(d.lost for d in drains),
        lock_errors=sum(d.lock_errors for d in drains),
        other_errors=sum(d.other_errors for d in drains),
        error_samples=[s for d in drains for s in d.error_samples][:3],
        timed_out=any(d.timed_out for d in drains),
        least_share=[d.least_share for d in drains],
        per_worker=[d.per_worker for d in drains],
        tasks_per_commit=[d.tasks_per_commit for d in drains],
        cpu_per_task=[d.cpu_per_task for d in drains],
        switches_per_task=[sum(d.switches) / max(1, d.tasks - d.lost) for d in drains],
    )


# --- 4. growth ------------------------------------------------------------------------


def growth(cfg: Config, results: Results) -> None:
    """Cost per reserve+complete with many finished rows already in the table (NORMAL)."""
    sync = "normal"
    for cls in available(cfg, results):
        for size in cfg.pg_growth_sizes if cls.on_postgres else cfg.growth_sizes:
            path = fresh(cfg, cls.key, f"growth{size}")
            start = time.perf_counter()
            try:
                cls.fill_completed(path, size)
            except systems.NotApplicable as exc:
                results.note(f"growth: {cls.label} skipped: {exc}")
                cleanup(path)
                break
            took = time.perf_counter() - start
            log(f"growth {cls.key}: {size:,} finished rows written in {took:.1f} s")
            values, counts = [], []
            for rep in range(cfg.repeats):
                cls.fill(path, ids(f"g{rep}", cfg.growth_ops))
                system = cls(path, sync)
                for _ in range(min(20, cfg.growth_ops // 10)):  # warm the cache and statements
                    claimed = system.reserve()
                    if claimed is not None:
                        system.complete(claimed)
                start = time.perf_counter()
                done, _ = _single_loop(system, start + cfg.budget)
                elapsed = time.perf_counter() - start
                system.close()
                values.append(elapsed / done * 1e6)
                counts.append(done)
            cleanup(path)
            results.add("growth", cls.key, sync, str(size), values, "us", n=counts, rows=size)
            log(f"growth {cls.key} {size:,} rows: {statistics.median(values):.0f} us per task")


# --- 5. the mixed calls of the core contract ---------------------------------------------------


def mixed(cfg: Config, results: Results) -> None:
    n = cfg.mixed_calls
    calls = make_calls(n, 7)
    values, digests = [], set()
    for _ in range(cfg.repeats):
        seconds, digest = run_calls(sqlq.WorkQueue(30, 3), calls)
        values.append(n / seconds)
        digests.add(digest)
    results.add("mixed", "sqlq", "-", "memory", values, "calls/s", calls=n, digests=sorted(digests))
    log(f"mixed calls, WorkQueue (memory): {fmt_rate(statistics.median(values))}")
    m = min(n, cfg.mixed_sqlite_calls)
    if m < n:  # the SQLite face runs a prefix: compare it with memory on the same prefix
        calls = calls[:m]
        digests = {run_calls(sqlq.WorkQueue(30, 3), calls)[1]}
    memory_digest = digests.pop() if len(digests) == 1 else None
    values, same = [], []
    for _ in range(cfg.mixed_sqlite_repeats):
        path = fresh(cfg, "sqlq", "mixed")
        queue = sqlq.Queue(path, lease_seconds=30, max_attempts=3, synchronous="normal")
        seconds, digest = run_calls(queue, calls)
        queue.close()
        cleanup(path)
        values.append(m / seconds)
        same.append(digest == memory_digest)
    results.add("mixed", "sqlq", "normal", "sqlite", values, "calls/s", calls=m, same=same)
    if not all(same):
        results.note("mixed calls: Queue (SQLite) and WorkQueue gave different answers")
    rate = fmt_rate(statistics.median(values))
    log(f"mixed calls, Queue (SQLite, NORMAL): {rate}; same answers: {all(same)}")


# --- 6. a waiting worker ----------------------------------------------------------------------


def idle(cfg: Config, results: Results) -> None:
    sync = "full"
    path = fresh(cfg, "sqlq", "idle")
    worker = procs.IdleWorker(path, sync)
    cpu, p50, p99, missed, samples = [], [], [], 0, 0
    try:
        for _ in range(cfg.repeats):
            run = worker.measure(cfg.idle_seconds, cfg.latency_adds)
            cpu.append(run.cpu_share * 100)
            lat = sorted(run.latencies)
            if lat:
                p50.append(_quantile(lat, 0.50) * 1000)
                p99.append(_quantile(lat, 0.99) * 1000)
            missed += run.missed
            samples += len(lat)
            if lat:
                log(
                    f"idle worker: {cpu[-1]:.2f}% of a core; pick-up p50 {p50[-1]:.1f} ms, "
                    f"p99 {p99[-1]:.1f} ms"
                )
    finally:
        worker.close()
        cleanup(path)
    common = {"worker": worker.kind, "idle_seconds": cfg.idle_seconds, "adds": cfg.latency_adds}
    results.add("idle", "sqlq", sync, "cpu", cpu, "% of a core", **common)
    results.add("idle", "sqlq", sync, "p50", p50, "ms", missed=missed, samples=samples, **common)
    results.add("idle", "sqlq", sync, "p99", p99, "ms", missed=missed, samples=samples, **common)
    if missed:
        results.note(f"idle worker: {missed} adds were not picked up within 5 s")


def _quantile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank quantile."""
    rank = max(1, min(len(sorted_values), math.ceil(q * len(sorted_values))))
    return sorted_values[rank - 1]


RUNNERS: dict[str, Callable[[Config, Results], None]] = {
    "floor": floor,
    "enqueue": enqueue,
    "reserve": reserve,
    "processes": processes,
    "growth": growth,
    "mixed": mixed,
    "idle": idle,
}
