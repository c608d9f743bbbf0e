"""Code that runs in worker processes (started with multiprocessing's spawn).

* ``Pool``: up to 16 processes started once and reused for every drain, so a
  drain's time is the drain and not Python starting up.  Each drain: every
  worker opens the system on the file, says ready, waits for "go", then
  reserves and completes until reserve finds nothing, recording every task it
  received and every completion that was accepted.  sqlq's workers run a
  ``sqlq.Worker`` with its defaults instead (``Sqlq.run_worker``), which also
  counts its transactions (tasks per commit); the peers' loops count theirs
  (one a call).  Lock errors (sqlq's
  ``Busy``, SQLite's "database is locked") are caught and counted, never
  retried silently; any other exception is counted too.
* ``idle_worker``: a sqlq worker waiting on an empty queue, for the idle CPU
  and pick-up latency workload.  It uses ``sqlq.worker.Worker`` when that module
  exists, otherwise a ``ready()`` + sleep loop with a capped backoff.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from . import systems

_SPAWN = multiprocessing.get_context("spawn")


# --- draining one file with K processes -----------------------------------------------


def _pool_main(conn: Connection) -> None:
    while True:
        job = conn.recv()
        if job is None:
            return
        key, path, sync, time_limit = job
        try:
            system = systems.get(key)(path, sync)
        except Exception as exc:  # reported to the parent, which records it
            conn.send(("error", f"open: {exc!r}"))
            continue
        conn.send(("ready",))
        conn.recv()  # "go"
        before = _usage()
        drained = _drain(system, time_limit)
        conn.send(("done", *drained, *(a - b for a, b in zip(_usage(), before, strict=True))))


def _usage() -> tuple[float, int, int]:
    """This process's CPU seconds (every thread, user + system) and context switches
    (voluntary: it waited; involuntary: the scheduler took the core away)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime, use.ru_nvcsw, use.ru_nivcsw


def _drain(system: systems.System, time_limit: float) -> tuple[Any, ...]:
    if isinstance(system, systems.Sqlq):
        return _worker_drain(system, time_limit)
    reserve, complete = system.reserve, system.complete
    received: list[str] = []
    completed: list[str] = []
    lock_errors = 0
    other: list[str] = []
    timed_out = False
    start = time.time()
    stop_at = start + time_limit
    while True:
        if time.time() > stop_at:
            timed_out = True
            break
        try:
            claimed = reserve()
        except Exception as exc:
            if systems.is_lock_error(exc):
                lock_errors += 1
            else:
                other.append(f"reserve: {exc!r}")
            if len(other) > 100:
                break
            continue
        if claimed is None:
            break
        received.append(claimed[0])
        try:
            ok = complete(claimed)
        except Exception as exc:
            if systems.is_lock_error(exc):
                lock_errors += 1
            else:
                other.append(f"complete: {exc!r}")
            continue
        if ok:
            completed.append(claimed[0])
    end = time.time()
    try:
        system.close()
    except Exception as exc:
        other.append(f"close: {exc!r}")
    # Its transactions: one per reserve call that returned (and the last, which found
    # nothing), and complete_commits per complete call that returned.
    commits = len(received) + 1 + system.complete_commits * (len(received) - len(other))
    return received, completed, lock_errors, other[:3], len(other), start, end, timed_out, commits


def _worker_drain(system: systems.Sqlq, time_limit: float) -> tuple[Any, ...]:
    """sqlq's drain: a Worker, as an application runs it (see Sqlq.run_worker)."""
    start = time.time()
    run = system.run_worker(start + time_limit)
    end = time.time()
    timed_out = end >= start + time_limit
    system.close()
    return (
        run.received,
        run.completed,
        run.lock_errors,
        run.other[:3],
        len(run.other),
        start,
        end,
        timed_out,
        run.commits,
    )


@dataclass
class Drain:
    """What one drain of a file by K workers did."""

    workers: int
    tasks: int
    seconds: float
    per_worker: list[int]  # tasks received by each worker
    duplicates: int  # deliveries beyond the first, over all tasks
    double_completed: int  # tasks whose completion was accepted more than once
    lost: int  # tasks nobody completed
    lock_errors: int
    other_errors: int
    error_samples: list[str] = field(default_factory=list)
    timed_out: bool = False
    commits: int | None = None  # write transactions, where the system counts them
    cpu_seconds: float = 0.0  # CPU time of every worker process during the drain
    switches: tuple[int, int] = (0, 0)  # context switches: voluntary, involuntary

    @property
    def cpu_per_task(self) -> float:
        """Microseconds of CPU (all worker processes) per task completed."""
        done = self.tasks - self.lost
        return self.cpu_seconds / done * 1e6 if done else 0.0

    @property
    def tasks_per_commit(self) -> float | None:
        return None if not self.commits else (self.tasks - self.lost) / self.commits

    @property
    def throughput(self) -> float:
        return (self.tasks - self.lost) / self.seconds if self.seconds > 0 else 0.0

    @property
    def least_share(self) -> float:
        """The least-served worker's tasks over a fair share (tasks / workers)."""
        fair = self.tasks / self.workers
        return min(self.per_worker) / fair if fair else 0.0


class Pool:
    def __init__(self, size: int) -> None:
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(size):
            parent, child = _SPAWN.Pipe()
            proc = _SPAWN.Process(target=_pool_main, args=(child,), daemon=True)
            proc.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(proc)

    def drain(
        self, key: str, path: str, sync: str, workers: int, task_ids: list[str], time_limit: float
    ) -> Drain:
        conns = self.conns[:workers]
        for conn in conns:
            conn.send((key, path, sync, time_limit))
        errors = [msg[1] for msg in (conn.recv() for conn in conns) if msg[0] == "error"]
        if errors:
            raise RuntimeError(f"{key}: a worker could not open the queue: {errors[0]}")
        start = time.time()
        for conn in conns:
            conn.send("go")
        results = [conn.recv() for conn in conns]
        end = max(r[7] for r in results)
        received: Counter[str] = Counter()
        completed: Counter[str] = Counter()
        samples: list[str] = []
        for r in results:
            received.update(r[1])
            completed.update(r[2])
            samples.extend(r[4])
        return Drain(
            workers=workers,
            tasks=len(task_ids),
            seconds=end - start,
            per_worker=[len(r[1]) for r in results],
            duplicates=sum(received.values()) - len(received),
            double_completed=sum(1 for c in completed.values() if c > 1),
            lost=sum(1 for t in task_ids if completed[t] == 0),
            lock_errors=sum(r[3] for r in results),
            other_errors=sum(r[5] for r in results),
            error_samples=samples[:3],
            timed_out=any(r[8] for r in results),
            commits=None if any(r[9] is None for r in results) else sum(r[9] for r in results),
            cpu_seconds=sum(r[10] for r in results),
            switches=(sum(r[11] for r in results), sum(r[12] for r in results)),
        )

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()


# --- a waiting worker -----------------------------------------------------------------


def _idle_main(conn: Connection, path: str, sync: str, poll_max: float | None) -> None:
    import sqlq

    queue = sqlq.Queue(path, lease_seconds=60, max_attempts=3, synchronous=sync)  # type: ignore[arg-type]
    picks: list[tuple[Any, float]] = []

    def handler(payload: Any) -> None:
        picks.append((payload, time.time()))

    stop_event = threading.Event()
    try:
        from sqlq.worker import Worker
    except ImportError:
        worker = None
        kind = "a loop of queue.ready() + sleep, backoff 5 ms..50 ms (no sqlq.worker)"
    else:
        worker = (
            Worker(queue, handler, concurrency=1)
            if poll_max is None
            else Worker(queue, handler, concurrency=1, poll_max=poll_max)
        )
        kind = f"sqlq.worker.Worker(concurrency=1, poll_max={worker.poll_max})"

    def stop() -> None:
        stop_event.set()
        if worker is not None:
            worker.stop()

    def commands() -> None:
        while True:
            cmd = conn.recv()
            if cmd == "cpu":
                conn.send(time.process_time())
            elif cmd == "picks":
                conn.send(list(picks))
            else:
                stop()
                return

    conn.send(("ready", kind))
    threading.Thread(target=commands, daemon=True).start()
    if worker is not None:
        worker.run(stop_when_idle=False)
    else:
        _poll_loop(queue, handler, stop_event, 0.005, 0.04 if poll_max is None else poll_max)
    queue.close()


def _poll_loop(
    queue: Any, handler: Any, stop: threading.Event, poll_min: float, poll_max: float
) -> None:
    wait = poll_min
    while not stop.is_set():
        if queue.ready():
            lease = queue.claim()
            if lease is not None:
                handler(lease.payload)
                queue.complete(lease.task_id, token=lease.token)
                wait = poll_min
                continue
        stop.wait(wait)
        wait = min(wait * 2, poll_max)


@dataclass
class IdleRun:
    cpu_share: float  # of one core, while idle
    latencies: list[float]  # seconds from add() returning to the handler starting
    missed: int  # adds never picked up within the wait


class IdleWorker:
    def __init__(self, path: str, sync: str, poll_max: float | None = None) -> None:
        import sqlq

        self.queue = sqlq.Queue(path, lease_seconds=60, max_attempts=3, synchronous=sync)  # type: ignore[arg-type]
        self.conn, child = _SPAWN.Pipe()
        self.proc = _SPAWN.Process(target=_idle_main, args=(child, path, sync, poll_max))
        self.proc.start()
        child.close()
        _, self.kind = self.conn.recv()
        self.rng = random.Random(11)
        self.count = 0

    def _ask(self, what: str) -> Any:
        self.conn.send(what)
        return self.conn.recv()

    def measure(self, idle_seconds: float, adds: int) -> IdleRun:
        time.sleep(0.5)  # the poll backoff reaches its cap
        cpu0, wall0 = self._ask("cpu"), time.perf_counter()
        time.sleep(idle_seconds)
        cpu1, wall1 = self._ask("cpu"), time.perf_counter()
        sent: dict[str, float] = {}
        for _ in range(adds):
            time.sleep(self.rng.uniform(0.02, 0.1))
            self.count += 1
            task_id = f"latency-{self.count}"
            self.queue.add(task_id, payload=task_id)
            sent[task_id] = time.time()  # committed: a worker can see it from now on
        deadline = time.monotonic() + 5
        while True:
            picks = {task: at for task, at in self._ask("picks") if task in sent}
            if len(picks) == len(sent) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return IdleRun(
            cpu_share=(cpu1 - cpu0) / (wall1 - wall0),
            latencies=[picks[t] - sent[t] for t in sent if t in picks],
            missed=len(sent) - len(picks),
        )

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send("stop")
        self.proc.join(timeout=40)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join()
        self.queue.close()
