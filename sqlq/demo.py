"""`sqlq demo`: worker processes share one SQLite file; one is killed mid-task.

The scenario, with the real :class:`sqlq.Queue`, real :class:`sqlq.Worker`
processes and a real SIGKILL:

1. A producer adds ``task-001``, ``task-002``, ... to the queue ``demo``.  Each
   payload says how long the "work" takes and, for three tasks, what goes
   wrong: one *hangs* on its first attempt, one *fails* on its first attempt,
   and one fails on every attempt.
2. K worker processes (``multiprocessing``, "spawn") each run a
   ``sqlq.Worker`` with a handler that reports every lease it gets (task,
   attempt, fencing token) to the supervisor (this process) over its own pipe.
3. The worker that gets the hanging task is killed with SIGKILL.  Nobody fails
   or releases that task: its lease runs out, which counts as a failed
   attempt, and another worker claims it (a new token) and completes it.  The
   failing task is retried after a short backoff and completes on its second
   attempt; the one that always fails becomes a dead letter (DEAD) after
   MAX_ATTEMPTS attempts.
4. The supervisor learns every outcome from the database itself: once a handler
   has returned or raised, it reads the task until the worker's report has
   committed, so "completed" is printed only for a completion the queue
   accepted under that lease's token.  When every task is COMPLETED or DEAD it
   stops the workers with SIGTERM, as a service manager would.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from .backends import open_backend
from .contract import State
from .durable import Queue
from .errors import SchemaError
from .records import Lease, TaskInfo
from .retry import Retry
from .worker import Worker

#: The queue the demo uses inside its database file.
QUEUE = "demo"
#: Attempts per task before it is DEAD.
MAX_ATTEMPTS = 3
#: The wait after a failed attempt before the next one.
RETRY_SECONDS = 0.25
#: The "work" on a task: a sleep of this many seconds (uniformly random).
WORK_SECONDS = (0.05, 0.2)
#: The fewest tasks: one hangs, one fails once, one always fails.
MIN_TASKS = 3
#: The files SQLite (and sqlq's migration lock) keep next to a database.
SIDE_FILES = ("-wal", "-shm", "-journal", ".migrate-lock", ".sqlq-gate")
#: How long the supervisor waits for a worker's report to commit.
REPORT_TIMEOUT = 30.0


class DemoError(Exception):
    """The demo cannot run (e.g. its database path holds something else)."""


class DemoFailure(Exception):
    """What the demo's handler raises for a task whose payload says it fails."""


@dataclass
class DemoResult:
    """What happened, for the summary (and for tests)."""

    path: str
    tasks: int
    workers: int
    counts: dict[str, int]
    #: Leases handed out (claims), over all tasks and workers.
    claims: int
    elapsed: float
    #: (worker number, pid, task it held, token of its lease) of each killed worker.
    killed: list[tuple[int, int, str, int]] = field(default_factory=list)
    #: task -> (worker number, token) that completed it after a killed worker held it.
    recovered: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Tasks that became DEAD, with their last error.
    dead: dict[str, str | None] = field(default_factory=dict)
    #: worker number -> exit code of its process.
    exit_codes: dict[int, int | None] = field(default_factory=dict)

    @property
    def retries(self) -> int:
        """Leases beyond the first of each task."""
        return self.claims - self.tasks


def task_names(count: int) -> list[str]:
    width = max(3, len(str(count)))
    return [f"task-{i:0{width}d}" for i in range(1, count + 1)]


def payloads(names: list[str], rng: random.Random) -> dict[str, dict[str, Any]]:
    """Each task's payload: its work time, and for three of them what goes wrong."""
    out = {name: {"work": round(rng.uniform(*WORK_SECONDS), 3)} for name in names}
    out[names[len(names) // 4]]["hang"] = True  # its first worker is killed
    out[names[len(names) // 2]]["fail_attempts"] = 1  # one retry, then completed
    out[names[-1]]["fail_attempts"] = MAX_ATTEMPTS  # a dead letter
    return out


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
            backend = open_backend(path, busy_timeout=5.0)
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


def _worker(number: int, path: str, lease_seconds: float, report: Connection) -> None:
    """One worker process: a sqlq.Worker until SIGTERM; every lease is told to ``report``."""

    def send(kind: str, *details: Any) -> None:
        report.send((time.monotonic(), kind, number, *details))

    def handle(lease: Lease) -> None:
        send("claimed", lease.task_id, lease.token, lease.attempt)
        todo = lease.payload
        if todo.get("hang") and lease.attempt == 1:
            send("hang", lease.task_id, lease.token)
            threading.Event().wait()  # "stuck" until the supervisor kills this process
        time.sleep(todo["work"])
        if lease.attempt <= todo.get("fail_attempts", 0):
            error = f"attempt {lease.attempt} of {lease.task_id} fails on purpose"
            send("raised", lease.task_id, lease.token)
            raise DemoFailure(error)
        send("returned", lease.task_id, lease.token)

    quiet = logging.getLogger(f"sqlq.demo.worker-{number}")  # the supervisor tells the story
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    with Queue(path, lease_seconds=lease_seconds, max_attempts=MAX_ATTEMPTS, queue=QUEUE) as q:
        send("ready", os.getpid())
        stats = Worker(q, handle, with_lease=True, grace=5.0, logger=quiet).run()
    send("stopped", asdict(stats))
    report.close()


# --- the supervisor ---------------------------------------------------------------


@dataclass
class _Story:
    """The supervisor's view: who holds what, and what came of it."""

    result: DemoResult
    queue: Queue
    crew: dict[int, Any]  # worker number -> its multiprocessing process
    say: Callable[[str, float], None]  # a line, and when it happened (time.monotonic)
    lease_seconds: float
    #: Tasks that are COMPLETED or DEAD.
    finished: set[str] = field(default_factory=set)
    #: task -> (worker number, token) of a lease whose worker was killed.
    orphaned: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: Tasks claimed again after a killed worker's lease ran out.
    taken_over: set[str] = field(default_factory=set)
    at: float = 0.0

    def event(self, at: float, kind: str, number: int, *details: Any) -> None:
        self.at = at
        getattr(self, f"_{kind}")(number, *details)

    def tell(self, line: str) -> None:
        self.say(line, self.at)

    def _ready(self, number: int, pid: int) -> None:
        self.tell(f"worker {number} is running a sqlq.Worker (pid {pid})")

    def _claimed(self, number: int, task: str, token: int, attempt: int) -> None:
        self.result.claims += 1
        lease = f"attempt {attempt}, token {token}"
        if task in self.orphaned:
            killed, old = self.orphaned.pop(task)
            self.tell(
                f"the lease of {task} held by killed worker {killed} (token {old}) ran out; "
                f"worker {number} claimed it ({lease})"
            )
            self.taken_over.add(task)
        else:
            self.tell(f"worker {number} claimed {task} ({lease})")

    def _hang(self, number: int, task: str, token: int) -> None:
        process = self.crew[number]
        os.kill(process.pid, signal.SIGKILL)
        process.join()
        self.result.killed.append((number, process.pid, task, token))
        self.orphaned[task] = (number, token)
        self.tell(
            f"worker {number} hangs on {task}: killed it (pid {process.pid}) with SIGKILL; "
            f"nobody reports that lease (token {token}), so it runs out in "
            f"{self.lease_seconds:g} s"
        )

    def _returned(self, number: int, task: str, token: int) -> None:
        info = self._outcome(task, token)
        if info.state == State.COMPLETED and info.token == token:
            self.finished.add(task)
            if task in self.taken_over:
                self.result.recovered[task] = (number, token)
            self.tell(f"worker {number} completed {task} (token {token})")
        else:
            self.tell(
                f"worker {number} finished {task} too late: its lease (token {token}) ran out"
            )

    def _raised(self, number: int, task: str, token: int) -> None:
        info = self._outcome(task, token)
        failed = f"worker {number} failed {task} (token {token}): {info.last_error}"
        if info.state == State.DEAD:
            self.finished.add(task)
            self.result.dead[task] = info.last_error
            self.tell(f"{failed}; DEAD after {info.attempts} attempts: a dead letter")
        else:
            self.tell(f"{failed}; retried in {RETRY_SECONDS:g} s")

    def _stopped(self, number: int, stats: dict[str, int]) -> None:
        self.tell(
            f"worker {number} stopped on SIGTERM: {stats['claimed']} claimed, "
            f"{stats['completed']} completed, {stats['failed']} failed"
        )

    def _outcome(self, task: str, token: int) -> TaskInfo:
        """The task once the report of lease ``token`` has committed (or the lease ended)."""
        deadline = time.monotonic() + REPORT_TIMEOUT
        while True:
            info = self.queue.info(task)
            assert info is not None
            if info.state != State.RESERVED or info.token != token:
                return info
            if time.monotonic() > deadline:
                raise RuntimeError(f"the report of {task} (token {token}) did not commit")
            time.sleep(0.01)


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
    if tasks < MIN_TASKS:
        raise ValueError(f"the demo needs at least {MIN_TASKS} tasks")
    if workers < 2:
        raise ValueError("the demo needs at least 2 workers: one is killed")
    if not lease_seconds > 0:
        raise ValueError("lease_seconds must be positive")
    write = out or (lambda line: print(line, flush=True))
    path = os.path.abspath(path)
    if timeout is None:
        timeout = 30.0 + 2 * lease_seconds * MAX_ATTEMPTS + tasks * sum(WORK_SECONDS) / workers
    started = time.monotonic()

    def say(line: str, at: float | None = None) -> None:
        write(f"[{(time.monotonic() if at is None else at) - started:5.2f}s] {line}")

    write(
        f"sqlq demo: {tasks} tasks, {workers} worker processes, leases of {lease_seconds:g} s, "
        f"up to {MAX_ATTEMPTS} attempts per task"
    )
    backend = open_backend(path)  # creates the database
    try:
        write(f"database {path} ({backend.describe()})")
    finally:
        backend.close()

    names = task_names(tasks)
    todo = payloads(names, random.Random())
    retry = Retry.fixed(RETRY_SECONDS)
    with Queue(
        path, lease_seconds=lease_seconds, max_attempts=MAX_ATTEMPTS, queue=QUEUE, retry=retry
    ) as q:
        q.add_many(todo.items())
        say(f"producer added {names[0]} .. {names[-1]}; {_trouble(todo)}")

        ctx = multiprocessing.get_context("spawn")
        crew: dict[int, Any] = {}
        conns: dict[Connection, int] = {}
        for number in range(1, workers + 1):
            parent_end, child_end = ctx.Pipe(duplex=False)
            process = ctx.Process(
                target=_worker,
                args=(number, path, lease_seconds, child_end),
                name=f"sqlq-demo-worker-{number}",
                daemon=True,
            )
            process.start()
            child_end.close()
            crew[number] = process
            conns[parent_end] = number
        result = DemoResult(path, tasks, workers, {}, 0, 0.0)
        story = _Story(result, q, crew, say, lease_seconds)
        stopping = False
        try:
            while conns:
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"the demo workers did not finish within {timeout:.0f} s")
                # Events of one round in the order they happened (a worker claims a
                # retried task only after another's failure of it has committed).
                for event in sorted(_receive(conns)):
                    story.event(*event)
                if len(story.finished) == tasks and not stopping:
                    stopping = True
                    say("every task is COMPLETED or DEAD: stopping the workers with SIGTERM")
                    for process in crew.values():
                        if process.is_alive():
                            os.kill(process.pid, signal.SIGTERM)
        finally:
            for number, process in crew.items():
                if process.is_alive() and conns:
                    process.kill()
                process.join(5.0)
                result.exit_codes[number] = process.exitcode
            for conn in conns:
                conn.close()
        result.counts = q.counts()
    result.elapsed = time.monotonic() - started
    _summary(result, write)
    return result


def _trouble(todo: dict[str, dict[str, Any]]) -> str:
    """What the payloads make go wrong, in words."""
    words = []
    for name, payload in todo.items():
        if payload.get("hang"):
            words.append(f"{name} hangs on its first attempt")
        fails = payload.get("fail_attempts", 0)
        if fails:
            words.append(
                f"{name} fails " + ("every attempt" if fails >= MAX_ATTEMPTS else f"{fails}x")
            )
    return ", ".join(words)


def _receive(conns: dict[Connection, int]) -> list[tuple[Any, ...]]:
    """Every event the workers have sent so far (waiting a little for the first)."""
    events = []
    for conn in wait(list(conns), timeout=0.2):
        assert isinstance(conn, Connection)
        try:
            while conn.poll():
                events.append(conn.recv())
        except EOFError:  # the worker exited (or was killed)
            del conns[conn]
            conn.close()
    return events


def _summary(result: DemoResult, write: Callable[[str], None]) -> None:
    states = ", ".join(f"{state} {n}" for state, n in result.counts.items())
    write("summary:")
    write(f"  tasks:    {result.tasks} ({states})")
    write(
        f"  leases:   {result.claims} claimed, so {result.retries} "
        f"retr{'y' if result.retries == 1 else 'ies'}"
    )
    for number, pid, task, token in result.killed:
        if task in result.recovered:
            by, new = result.recovered[task]
            fate = f"completed by worker {by} under token {new}"
        else:
            fate = "not completed"
        code = result.exit_codes.get(number)
        write(
            f"  killed:   worker {number} (pid {pid}, exit code {code}) held {task} "
            f"(token {token}): {fate}"
        )
    for task, error in result.dead.items():
        write(f"  dead:     {task}: {error} (see `sqlq dead {result.path} --queue {QUEUE}`)")
    write(f"  time:     {result.elapsed:.2f} s")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run `sqlq demo` (or `python -m sqlq demo`)")
