"""`sqlq demo`: worker processes share one SQLite file, and one of them is killed.

The scenario, with the real :class:`sqlq.Queue`, real processes and a real SIGKILL:

1. A producer adds ``task-001``, ``task-002``, ... to the queue ``demo``.
2. K worker processes (``multiprocessing``, "spawn") loop: ``reserve`` a task,
   "work" on it (a short sleep), ``complete`` it.  They stop once every task is
   COMPLETED or DEAD.
3. Once a quarter of the tasks were taken, the next worker that reserves a task
   tells the supervisor (this process) which task it holds and hangs on it.
   The supervisor kills it with SIGKILL.  Nobody fails or releases that task:
   its lease runs out, the next ``reserve`` by another worker counts that as a
   failed attempt, and the task goes to the back of the line, where another
   worker takes it and completes it.

Each worker reports to the supervisor over its own pipe (no lock shared between
processes is held while a worker can be killed).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from .contract import State
from .durable import Queue
from .errors import SchemaError
from .sqlite import driver
from .sqlite.backend import SqliteBackend

#: The queue the demo uses inside its database file.
QUEUE = "demo"
#: Attempts per task before it is DEAD.
MAX_ATTEMPTS = 3
#: The "work" on a task: a sleep of this many seconds (uniformly random).
WORK_SECONDS = (0.05, 0.2)
#: How long an idle worker waits before it asks again.
IDLE_SECONDS = 0.05
#: The files SQLite (and sqlq's migration lock) keep next to a database.
SIDE_FILES = ("-wal", "-shm", "-journal", ".migrate-lock", ".sqlq-gate")

# States of the shared "arm" flag: who hangs on its next task.
_NOT_YET, _ARMED, _CLAIMED = 0, 1, 2


class DemoError(Exception):
    """The demo cannot run (e.g. its database path holds something else)."""


@dataclass
class DemoResult:
    """What happened, for the summary (and for tests)."""

    path: str
    tasks: int
    workers: int
    counts: dict[str, int]
    attempts: int
    elapsed: float
    #: (worker number, pid, task it held) of each killed worker.
    killed: list[tuple[int, int, str]] = field(default_factory=list)
    #: task -> worker number that completed it after a killed worker held it.
    recovered: dict[str, int] = field(default_factory=dict)
    #: worker number -> exit code of its process.
    exit_codes: dict[int, int | None] = field(default_factory=dict)

    @property
    def retries(self) -> int:
        """Reservations beyond the first of each task."""
        return self.attempts - self.tasks


def task_names(count: int) -> list[str]:
    width = max(3, len(str(count)))
    return [f"task-{i:0{width}d}" for i in range(1, count + 1)]


def remove_old_demo(path: str | os.PathLike[str]) -> bool:
    """Delete an earlier demo database at ``path`` and its -wal/-shm files.

    Only a file that is empty or a sqlq database holding nothing but the demo's
    queue is deleted; anything else raises :class:`DemoError` and is left alone.
    Returns True if something was deleted.
    """
    path = os.path.abspath(path)
    if os.path.isdir(path):
        raise DemoError(f"{path} is a directory")
    if os.path.exists(path) and os.path.getsize(path) > 0:
        try:
            backend = SqliteBackend(path, busy_timeout=5.0)
            try:
                queues = set(backend.counts())
            finally:
                backend.close()
        except SchemaError as exc:
            raise DemoError(f"{path} is not a sqlq demo database; not deleting it ({exc})") from exc
        if queues - {QUEUE}:
            others = ", ".join(sorted(queues - {QUEUE}))
            raise DemoError(
                f"{path} holds other queues than the demo's ({others}); not deleting it"
            )
    removed = False
    for name in (path, *(path + suffix for suffix in SIDE_FILES)):
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
            removed = True
    return removed


# --- the worker processes ---------------------------------------------------------


def _worker(
    number: int,
    path: str,
    lease_seconds: float,
    report: Connection,
    arm: Synchronized[int],
    seed: int,
) -> None:
    """One worker process: reserve, work, complete, until nothing is left to do."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the supervisor
    rng = random.Random(seed)
    queue = Queue(path, lease_seconds=lease_seconds, max_attempts=MAX_ATTEMPTS, queue=QUEUE)
    report.send(("ready", number, None))
    try:
        while True:
            task = queue.reserve()
            if task is None:
                counts = queue.counts()
                if counts[State.AVAILABLE] == 0 and counts[State.RESERVED] == 0:
                    break  # every task is COMPLETED or DEAD
                time.sleep(IDLE_SECONDS)  # a lease may still run out; ask again
                continue
            hang = False
            if arm.value == _ARMED:
                with arm.get_lock():
                    if arm.value == _ARMED:
                        arm.value = _CLAIMED
                        hang = True
            report.send(("hang" if hang else "took", number, task))
            if hang:
                # This worker is "stuck" on its task until it is killed.  The lock
                # of `arm` was released above, so the kill leaves no lock held.
                report.poll(60.0)
            time.sleep(rng.uniform(*WORK_SECONDS))
            done = queue.complete(task)
            report.send(("completed" if done else "lost", number, task))
    finally:
        queue.close()
    report.send(("finished", number, None))
    report.close()


# --- the supervisor ---------------------------------------------------------------


@dataclass
class _Worker:
    number: int
    process: Any  # multiprocessing.context.SpawnProcess
    conn: Connection


def run(
    path: str | os.PathLike[str],
    *,
    tasks: int = 40,
    workers: int = 4,
    lease_seconds: float = 2.0,
    out: Callable[[str], None] | None = None,
    timeout: float | None = None,
) -> DemoResult:
    """Run the scenario on the database ``path`` (which should be new); print progress.

    ``out`` receives each line of progress (default: print to stdout).  Raises
    RuntimeError if the workers have not finished within ``timeout`` seconds.
    """
    if tasks < 1:
        raise ValueError("the demo needs at least 1 task")
    if workers < 2:
        raise ValueError("the demo needs at least 2 workers: one is killed")
    if not lease_seconds > 0:
        raise ValueError("lease_seconds must be positive")
    say = out or (lambda line: print(line, flush=True))
    path = os.path.abspath(path)
    if timeout is None:
        timeout = 30.0 + 2 * lease_seconds * MAX_ATTEMPTS + tasks * sum(WORK_SECONDS) / workers
    started = time.monotonic()

    def stamp() -> str:
        return f"[{time.monotonic() - started:5.2f}s]"

    say(
        f"sqlq demo: {tasks} tasks, {workers} worker processes, leases of {lease_seconds:g} s, "
        f"up to {MAX_ATTEMPTS} attempts per task"
    )
    say(f"database {path} ({driver.describe()})")

    names = task_names(tasks)
    with Queue(path, lease_seconds=lease_seconds, max_attempts=MAX_ATTEMPTS, queue=QUEUE) as q:
        for name in names:
            q.add(name)
        say(f"{stamp()} producer added {names[0]} .. {names[-1]}")

        ctx = multiprocessing.get_context("spawn")
        hang_after = tasks // 4  # reservations seen before a worker is told to hang
        arm = ctx.Value("i", _ARMED if hang_after == 0 else _NOT_YET)
        crew: dict[int, _Worker] = {}
        for number in range(1, workers + 1):
            parent_end, child_end = ctx.Pipe(duplex=True)
            process = ctx.Process(
                target=_worker,
                args=(number, path, lease_seconds, child_end, arm, random.randrange(2**32)),
                name=f"sqlq-demo-worker-{number}",
                daemon=True,
            )
            process.start()
            child_end.close()
            crew[number] = _Worker(number, process, parent_end)
        say(f"{stamp()} started {workers} worker processes")

        attempts: dict[str, int] = {}
        held_by_killed: dict[str, int] = {}
        result = DemoResult(path, tasks, workers, {}, 0, 0.0)
        open_conns = {w.conn: w for w in crew.values()}
        try:
            while open_conns:
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"the demo workers did not finish within {timeout:.0f} s")
                for conn in wait(list(open_conns), timeout=0.5):
                    assert isinstance(conn, Connection)
                    worker = open_conns[conn]
                    try:
                        kind, number, task = conn.recv()
                    except EOFError:  # the worker exited (or was killed)
                        del open_conns[conn]
                        conn.close()
                        continue
                    if kind in ("took", "hang"):
                        attempts[task] = attempts.get(task, 0) + 1
                        result.attempts += 1
                        say(f"{stamp()} worker {number} took {task} (attempt {attempts[task]})")
                        if arm.value == _NOT_YET and result.attempts >= hang_after:
                            arm.value = _ARMED
                    if kind == "hang":
                        pid = worker.process.pid
                        os.kill(pid, signal.SIGKILL)
                        worker.process.join()
                        result.killed.append((number, pid, task))
                        held_by_killed[task] = number
                        say(
                            f"{stamp()} killed worker {number} (pid {pid}) with SIGKILL "
                            f"while it held {task}; its lease runs out in {lease_seconds:g} s"
                        )
                    elif kind == "completed" and task in held_by_killed:
                        result.recovered[task] = number
                        say(
                            f"{stamp()} {task} came back after its lease ran out and was "
                            f"completed by worker {number} (attempt {attempts[task]})"
                        )
                    elif kind == "lost":
                        say(
                            f"{stamp()} worker {number} finished {task} too late: its lease ran out"
                        )
                    elif kind == "ready":
                        say(f"{stamp()} worker {number} is ready (pid {worker.process.pid})")
                    elif kind == "finished":
                        say(f"{stamp()} worker {number} found nothing left to do and stopped")
        finally:
            for worker in crew.values():
                if worker.process.is_alive() and open_conns:
                    worker.process.kill()
                worker.process.join(5.0)
                result.exit_codes[worker.number] = worker.process.exitcode
                worker.conn.close()

        result.counts = q.counts()
    result.elapsed = time.monotonic() - started

    states = ", ".join(f"{state} {n}" for state, n in result.counts.items())
    say("summary:")
    say(f"  tasks:    {tasks} ({states})")
    say(
        f"  attempts: {result.attempts} reservations, so {result.retries} "
        f"retr{'y' if result.retries == 1 else 'ies'}"
    )
    for number, pid, task in result.killed:
        fate = (
            f"completed by worker {result.recovered[task]}"
            if task in result.recovered
            else "not completed"
        )
        code = result.exit_codes.get(number)
        say(f"  killed:   worker {number} (pid {pid}, exit code {code}) held {task}: {fate}")
    say(f"  time:     {result.elapsed:.2f} s")
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `sqlq demo` (or `python -m sqlq demo`)")
