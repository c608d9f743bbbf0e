"""Adapters: every queue the bench measures, behind one small interface.

A system is opened on a fresh path with a durability setting ("full" or
"normal") and offers:

* ``add(task_id)``, and ``add_many(ids)`` where the library has a batch;
* ``reserve() -> (task_id, handle) | None`` and ``complete((task_id, handle)) -> bool``;
* ``claim_many(n)`` / ``complete_many(claimed)`` where the library has them;
* ``complete_and_claim(claimed) -> next | None`` (the runner loop) where it exists;
* ``fill(path, ids)`` and ``fill_completed(path, n)``: untimed set-up.

How each library maps onto reserve/complete is in ``System.semantics``; RESULTS.md
prints it.  Libraries that are not installed are skipped with a note.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg

import sqlq
from sqlq.errors import Busy
from sqlq.sqlite.driver import dbapi, describe

from . import pg_reference, postgres, reference

Claimed = tuple[str, Any]

LEASE_SECONDS = 300
MAX_ATTEMPTS = 3
#: sqlq's add_many takes at most this many tasks per call.
SQLQ_MAX_BATCH = 10_000


class NotApplicable(Exception):
    """The workload does not apply to this system (the reason is the message)."""


def is_lock_error(exc: BaseException) -> bool:
    """sqlq's Busy, or any SQLite library's 'database is locked' / busy error."""
    if isinstance(exc, Busy):
        return True
    text = str(exc).lower()
    return type(exc).__name__ == "OperationalError" and ("locked" in text or "busy" in text)


def _pragma_sync(synchronous: str) -> str:
    return "PRAGMA synchronous = " + ("FULL" if synchronous == "full" else "NORMAL")


class System:
    key: ClassVar[str]
    label: ClassVar[str]
    semantics: ClassVar[str]
    library: ClassVar[str]
    #: The raw queue of the same storage that x-ref figures divide by.
    reference: ClassVar[str] = "reference"
    #: Its location is a schema on the run's PostgreSQL server, not a file.
    on_postgres: ClassVar[bool] = False
    can_add_many: ClassVar[bool] = False
    can_claim_many: ClassVar[bool] = False
    can_complete_many: ClassVar[bool] = False
    can_complete_and_claim: ClassVar[bool] = False
    #: Write transactions one ``complete`` call commits (huey's: none, it has no ack).
    #: A drain's tasks per commit, for the peers' loops, counts one per ``reserve``
    #: call (the last, which finds nothing, included) and these per ``complete``.
    complete_commits: ClassVar[int] = 1

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous

    @classmethod
    def missing(cls) -> str | None:
        """Why this system cannot run here, or None."""
        return None

    def add(self, task_id: str) -> None:
        raise NotImplementedError

    def add_many(self, task_ids: Sequence[str]) -> None:
        raise NotApplicable(f"{self.label} has no batch add")

    def reserve(self) -> Claimed | None:
        raise NotImplementedError

    def complete(self, claimed: Claimed) -> bool:
        raise NotImplementedError

    def claim_many(self, n: int) -> list[Claimed]:
        raise NotApplicable(f"{self.label} has no batch claim")

    def complete_many(self, claimed: list[Claimed]) -> int:
        return sum(self.complete(c) for c in claimed)

    def complete_and_claim(self, claimed: Claimed) -> tuple[bool, Claimed | None]:
        """Complete ``claimed`` and claim the next task in one call: (completed?, next)."""
        raise NotApplicable(f"{self.label} has no complete-and-claim call")

    def completed_count(self) -> int | None:
        return None

    def close(self) -> None:
        pass

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        """Add tasks as fast as the library allows (untimed set-up)."""
        system = cls(path, "normal")
        try:
            for task_id in task_ids:
                system.add(task_id)
        finally:
            system.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        raise NotApplicable(f"{cls.label}: no pre-fill of finished rows")


# --- sqlq -------------------------------------------------------------------------


#: Slots (handler threads) of each sqlq.Worker in the process drains.
#: An environment variable: the options of the drains' sqlq.Worker, as a JSON object
#: (none: the Worker's defaults, as ``Worker(queue, handler)`` and ``sqlq worker`` run).
WORKER_OPTIONS = "SQLQ_BENCH_WORKER"


@dataclass
class WorkerRun:
    received: list[str]  # tasks the handler ran
    completed: list[str]  # tasks whose completion was accepted
    lock_errors: int  # Busy retried by the worker (it logs each)
    other: list[str]  # other warnings and errors it logged
    commits: int | None  # its claim loop's transactions


class _Warnings(logging.Handler):
    """Counts what a bench Worker logs at WARNING and above: Busy apart."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.busy = 0
        self.other: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Busy" in text:
            self.busy += 1
        else:
            self.other.append(text)


class Sqlq(System):
    key = "sqlq"
    label = "sqlq"
    library = describe()
    semantics = (
        "`Queue.add`/`add_many`; reserve = `claim()` (a lease with a fencing token); "
        "complete = `complete(task_id, token=...)` (compare-and-set on the lease); "
        "batches = `add_many(1000)`, `claim_many(1000)` and `complete_many(leases)` "
        "(one transaction each); runner loop = `complete_and_claim` (one transaction "
        "per task). Worker processes: each runs `sqlq.Worker(queue, handler)` with its "
        "defaults (one handler thread, a prefetch of 63: leases are claimed and "
        "outcomes reported up to 64 a `settle_and_claim` transaction) and a handler "
        "that does nothing (`python -m bench --worker-options JSON` gives it others)."
    )
    can_add_many = True
    can_claim_many = True
    can_complete_many = True
    can_complete_and_claim = hasattr(sqlq.Queue, "complete_and_claim")

    def __init__(self, path: str, synchronous: str) -> None:
        super().__init__(path, synchronous)
        self.queue = sqlq.Queue(
            path,
            lease_seconds=LEASE_SECONDS,
            max_attempts=MAX_ATTEMPTS,
            synchronous=synchronous,  # type: ignore[arg-type]
        )
        self._add = self.queue.add
        self._claim = self.queue.claim
        self._complete = self.queue.complete

    def add(self, task_id: str) -> None:
        self._add(task_id)

    def add_many(self, task_ids: Sequence[str]) -> None:
        self.queue.add_many(task_ids)

    def reserve(self) -> Claimed | None:
        lease = self._claim()
        return None if lease is None else (lease.task_id, lease.token)

    def complete(self, claimed: Claimed) -> bool:
        return self._complete(claimed[0], token=claimed[1])

    def claim_many(self, n: int) -> list[Claimed]:
        return [(lease.task_id, lease.token) for lease in self.queue.claim_many(n)]

    def complete_many(self, claimed: list[Claimed]) -> int:
        return sum(self.queue.complete_many(claimed))

    def complete_and_claim(self, claimed: Claimed) -> tuple[bool, Claimed | None]:
        if not self.can_complete_and_claim:
            raise NotApplicable("sqlq.Queue has no complete_and_claim in this version")
        call = self.queue.complete_and_claim  # type: ignore[attr-defined]
        done, lease = call(claimed[0], token=claimed[1])
        return done, None if lease is None else (lease.task_id, lease.token)

    def completed_count(self) -> int | None:
        return self.queue.counts()["COMPLETED"]

    def run_worker(self, stop_at: float) -> WorkerRun:
        """Drain the queue with a ``sqlq.Worker`` (its defaults, or WORKER_OPTIONS) and a
        handler that does nothing, stopped at ``stop_at`` (time.time()) at the latest."""
        from sqlq.worker import Worker

        received: list[str] = []
        warnings = _Warnings()
        logger = logging.getLogger(f"bench.worker.{os.getpid()}")
        logger.propagate = False
        logger.addHandler(warnings)
        worker = Worker(
            self.queue,
            lambda lease: received.append(lease.task_id),
            with_lease=True,
            logger=logger,
            **json.loads(os.environ.get(WORKER_OPTIONS, "{}")),
        )
        timer = threading.Timer(max(0.0, stop_at - time.time()), worker.stop)
        timer.start()
        try:
            stats = worker.run(stop_when_idle=True, install_signal_handlers=False)
        finally:
            timer.cancel()
            logger.removeHandler(warnings)
        unaccepted = stats.claimed - stats.completed
        other = warnings.other + ([f"{unaccepted} completions not accepted"] if unaccepted else [])
        return WorkerRun(
            received=received,
            # All accepted (checked above, and against the file by the parent).
            completed=received if not unaccepted else [],
            lock_errors=warnings.busy,
            other=other,
            commits=getattr(stats, "commits", None),  # None: a Worker before group commit
        )

    def close(self) -> None:
        self.queue.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        queue = sqlq.Queue(
            path, lease_seconds=LEASE_SECONDS, max_attempts=MAX_ATTEMPTS, synchronous="normal"
        )
        try:
            for i in range(0, len(task_ids), SQLQ_MAX_BATCH):
                queue.add_many(task_ids[i : i + SQLQ_MAX_BATCH])
        finally:
            queue.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        """n COMPLETED tasks written straight into sqlq's table, in one transaction.

        The columns are those sqlq writes (migrations/sqlite/0002, queries.sql
        insert_task and complete_task); the clock's counter is moved past the
        seqs and lease ids used, as sqlq would have.
        """
        sqlq.Queue(path, lease_seconds=LEASE_SECONDS, max_attempts=MAX_ATTEMPTS).close()
        at = time.time() - 3600
        conn = dbapi.connect(path, isolation_level=None, timeout=30)
        try:
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts, "
                "lease_id, deadline, run_at, payload, retry_kind, retry_base, retry_cap, "
                "created_at, updated_at, finished_at) "
                "VALUES ('default', ?, 'COMPLETED', ?, 1, ?, ?, NULL, NULL, NULL, "
                "'immediate', 0, 0, ?, ?, ?)",
                ((f"old-{i}", 2 * i - 1, MAX_ATTEMPTS, 2 * i, at, at, at) for i in range(1, n + 1)),
            )
            conn.execute(
                "UPDATE sqlq_clock SET counter = max(counter, ?), now = max(now, ?) WHERE id = 1",
                (2 * n, at),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()


# --- the raw SQLite reference -------------------------------------------------------


class Reference(System):
    key = "reference"
    label = "raw SQLite (reference)"
    library = describe()
    semantics = (
        "written in `bench/reference.py`: one `BEGIN IMMEDIATE ... COMMIT` per call, expiry "
        "of due leases through an index on (deadline, lease) first, claim in one "
        "`UPDATE ... WHERE id = (SELECT ... ORDER BY seq LIMIT 1) RETURNING`, completion "
        "compare-and-set on the lease id; batches: claim of 1000 in one statement, "
        "completion of 1000 in one transaction (`executemany`); runner loop: complete "
        "and claim in one transaction."
    )
    can_add_many = True
    can_claim_many = True
    can_complete_many = True
    can_complete_and_claim = True

    def __init__(self, path: str, synchronous: str) -> None:
        super().__init__(path, synchronous)
        self.queue = reference.RawLeaseQueue(
            path,
            lease_seconds=LEASE_SECONDS,
            max_attempts=MAX_ATTEMPTS,
            synchronous=synchronous,
        )

    def add(self, task_id: str) -> None:
        self.queue.add(task_id)

    def add_many(self, task_ids: Sequence[str]) -> None:
        self.queue.add_many(task_ids)

    def reserve(self) -> Claimed | None:
        claimed = self.queue.claim()
        return None if claimed is None else (claimed[0], claimed[1])

    def complete(self, claimed: Claimed) -> bool:
        return self.queue.complete(claimed[0], claimed[1])

    def claim_many(self, n: int) -> list[Claimed]:
        return [(task_id, lease) for task_id, lease, _ in self.queue.claim_many(n)]

    def complete_many(self, claimed: list[Claimed]) -> int:
        return self.queue.complete_many(claimed)

    def complete_and_claim(self, claimed: Claimed) -> tuple[bool, Claimed | None]:
        done, nxt = self.queue.complete_and_claim(claimed[0], claimed[1])
        return done, None if nxt is None else (nxt[0], nxt[1])

    def completed_count(self) -> int | None:
        return self.queue.completed_count()

    def close(self) -> None:
        self.queue.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        queue = reference.RawLeaseQueue(path, synchronous="normal")
        try:
            queue.add_many(task_ids)
        finally:
            queue.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        reference.fill_completed(path, n)


# --- peers --------------------------------------------------------------------------

_STDLIB = f"SQLite {sqlite3.sqlite_version} (stdlib sqlite3)"


class PersistQueue(System):
    key = "persist-queue"
    label = "persist-queue"
    library = _STDLIB
    semantics = (
        "`persistqueue.SQLiteAckQueue` (ack/nack, no lease expiry), opened with "
        "`auto_resume=False` so that a worker starting up does not put the others' "
        "unacknowledged tasks back; reserve = `get(block=False, raw=True)` (a SELECT, "
        "then a separate UPDATE to 'unack': two processes can get the same task, so it "
        "delivers duplicates across processes); complete = `ack(id=pqid)`; no batch calls. "
        "Its SELECT has no index on status: it walks past acknowledged rows."
    )

    @classmethod
    def missing(cls) -> str | None:
        try:
            import persistqueue  # noqa: F401
        except ImportError:
            return "persist-queue is not installed (pip install -e '.[bench]')"
        return None

    def __init__(self, path: str, synchronous: str, *, pragma: str | None = None) -> None:
        super().__init__(path, synchronous)
        import persistqueue

        self._empty = persistqueue.Empty
        self.queue = persistqueue.SQLiteAckQueue(path, auto_resume=False)
        self.queue._putter.execute(pragma or _pragma_sync(synchronous))

    def add(self, task_id: str) -> None:
        self.queue.put(task_id)

    def reserve(self) -> Claimed | None:
        try:
            item = self.queue.get(block=False, raw=True)
        except self._empty:
            return None
        return item["data"], item["pqid"]

    def complete(self, claimed: Claimed) -> bool:
        return self.queue.ack(id=claimed[1]) is not None

    def completed_count(self) -> int | None:
        return int(self.queue.acked_count())

    def close(self) -> None:
        self.queue.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        system = cls(path, "normal", pragma="PRAGMA synchronous = OFF")
        try:
            for task_id in task_ids:
                system.queue.put(task_id)
        finally:
            system.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        system = cls(path, "normal")
        table = system.queue._table_name
        system.close()
        conn = sqlite3.connect(os.path.join(path, "data.db"), isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            at = time.time() - 3600
            conn.executemany(
                f"INSERT INTO {table} (data, timestamp, status) VALUES (?, ?, 5)",
                ((pickle.dumps(f"old-{i}"), at) for i in range(n)),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()


class LiteQueue(System):
    key = "litequeue"
    label = "litequeue"
    library = _STDLIB
    semantics = (
        "`litequeue.LiteQueue`: reserve = `pop()` (one `UPDATE ... RETURNING` in a "
        "`BEGIN IMMEDIATE` transaction; the message becomes LOCKED, with no lease "
        "expiry), complete = `done(message_id)` (not guarded by the lock: any caller "
        "can mark any message done); no batch calls. Its pop reads every READY message "
        "and sorts them (the only index is on status: `USE TEMP B-TREE FOR ORDER BY`), so "
        "a pop costs more the longer the backlog. It forces synchronous=NORMAL when it "
        "opens; the bench sets the row's setting after that."
    )

    @classmethod
    def missing(cls) -> str | None:
        try:
            import litequeue  # noqa: F401
        except ImportError:
            return "litequeue is not installed (pip install -e '.[bench]')"
        return None

    def __init__(self, path: str, synchronous: str, *, pragma: str | None = None) -> None:
        super().__init__(path, synchronous)
        import litequeue

        self.queue = litequeue.LiteQueue(path)
        self.queue.conn.execute(pragma or _pragma_sync(synchronous))

    def add(self, task_id: str) -> None:
        self.queue.put(task_id)

    def reserve(self) -> Claimed | None:
        message = self.queue.pop()
        return None if message is None else (message.data, message.message_id)

    def complete(self, claimed: Claimed) -> bool:
        self.queue.done(claimed[1])
        return True

    def completed_count(self) -> int | None:
        table = self.queue.table
        return int(
            self.queue.conn.execute(f"SELECT count(*) FROM {table} WHERE status = 2").fetchone()[0]
        )

    def close(self) -> None:
        self.queue.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        system = cls(path, "normal", pragma="PRAGMA synchronous = OFF")
        try:
            with system.queue.transaction():
                for task_id in task_ids:
                    system.queue.put(task_id)
        finally:
            system.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        system = cls(path, "normal")
        table = system.queue.table
        system.close()
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            at = time.time_ns() - 3600 * 10**9
            # message ids sort before every uuid7 made from now on, as older messages' do.
            conn.executemany(
                f"INSERT INTO {table} (data, message_id, status, in_time, lock_time, done_time) "
                "VALUES (?, ?, 2, ?, ?, ?)",
                ((f"old-{i}", f"00000000-0000-7000-8000-{i:012x}", at, at, at) for i in range(n)),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()


class Huey(System):
    key = "huey"
    label = "huey SqliteStorage"
    library = _STDLIB
    semantics = (
        "`huey.storage.SqliteStorage`, the storage layer under huey's `enqueue_data`/"
        "`dequeue`: add = `enqueue(data)`; reserve = `dequeue()` (a SELECT and a DELETE "
        "in one `BEGIN EXCLUSIVE` transaction); complete = nothing: there is no ack and "
        "no lease, so a worker that dies after dequeue loses the task. Finished tasks "
        "leave no row, so the growth workload does not apply. Durability is set with "
        "`PRAGMA synchronous` on its connection (its `fsync=` flag knows FULL and OFF only)."
    )

    @classmethod
    def missing(cls) -> str | None:
        try:
            import huey  # noqa: F401
        except ImportError:
            return "huey is not installed (pip install -e '.[bench]')"
        return None

    def __init__(self, path: str, synchronous: str, *, pragma: str | None = None) -> None:
        super().__init__(path, synchronous)
        from huey.storage import SqliteStorage

        self.storage = SqliteStorage(name="bench", filename=path)
        self.storage.conn.execute(pragma or _pragma_sync(synchronous))
        self._enqueue = self.storage.enqueue
        self._dequeue = self.storage.dequeue

    def add(self, task_id: str) -> None:
        self._enqueue(task_id.encode())

    def reserve(self) -> Claimed | None:
        data = self._dequeue()
        return None if data is None else (bytes(data).decode(), None)

    complete_commits = 0

    def complete(self, claimed: Claimed) -> bool:
        return True

    def close(self) -> None:
        self.storage.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        system = cls(path, "normal", pragma="PRAGMA synchronous = OFF")
        try:
            for task_id in task_ids:
                system.add(task_id)
        finally:
            system.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        raise NotApplicable("huey deletes a task when it is dequeued: no finished rows pile up")


# --- PostgreSQL -------------------------------------------------------------------
#
# A location is the URL of a fresh schema on the run's server (bench/postgres.py);
# synchronous "full" / "normal" is synchronous_commit on / off.


class _OnPostgres(System):
    reference = "pg-reference"
    on_postgres = True
    library = "PostgreSQL (see the server's settings)"

    @classmethod
    def missing(cls) -> str | None:
        return postgres.missing()


class SqlqPostgres(_OnPostgres, Sqlq):
    key = "sqlq-pg"
    label = "sqlq (PostgreSQL)"
    semantics = (
        "`sqlq.Queue(postgresql_url, synchronous=...)`, default (non-strict) mode: the "
        "same calls as sqlq's SQLite row (single calls, batches, the runner loop, "
        "`sqlq.Worker` drains); FULL/NORMAL = `synchronous_commit` on/off."
    )

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        """n COMPLETED tasks written straight into sqlq's table, in one statement.

        The columns are those sqlq writes (migrations/postgresql/0001, queries.sql
        insert_task and complete_task); its counter is moved past the seqs and lease
        ids used, as sqlq would have.
        """
        sqlq.Queue(path, lease_seconds=LEASE_SECONDS, max_attempts=MAX_ATTEMPTS).close()
        at = time.time() - 3600
        with pg_connect(path) as conn:
            conn.execute(
                "INSERT INTO sqlq_tasks (queue, task_id, state, seq, attempts, max_attempts, "
                "lease_id, created_at, updated_at, finished_at) "
                "SELECT 'default', 'old-' || i, 'COMPLETED', 2 * i - 1, 1, %(max)s, 2 * i, "
                "%(at)s, %(at)s, %(at)s FROM generate_series(1, %(n)s) AS i",
                {"max": MAX_ATTEMPTS, "at": at, "n": n},
            )
            conn.execute("SELECT setval('sqlq_counter', %s)", (2 * n,))
            conn.execute("VACUUM ANALYZE sqlq_tasks")


def pg_connect(url: str, synchronous: str = "normal") -> psycopg.Connection[Any]:
    """An autocommit connection to a location's schema."""
    commit = "on" if synchronous == "full" else "off"
    return psycopg.connect(postgres.conninfo(url, synchronous_commit=commit), autocommit=True)


class ReferencePostgres(_OnPostgres):
    key = "pg-reference"
    label = "raw PostgreSQL SKIP LOCKED (reference)"
    semantics = (
        "written in `bench/pg_reference.py`: psycopg, one statement per call in autocommit "
        "(one round trip), each starting with a CTE that expires due leases (partial index "
        "on the deadline); claim = `UPDATE ... WHERE id = ANY (ARRAY (SELECT ... ORDER BY "
        "seq LIMIT n FOR UPDATE SKIP LOCKED)) RETURNING`; complete = `UPDATE` by task id "
        "and lease token with `deadline > now`; batches: the same statements over arrays "
        "(`unnest`); runner loop: complete and claim in one statement."
    )
    can_add_many = True
    can_claim_many = True
    can_complete_many = True
    can_complete_and_claim = True

    def __init__(self, path: str, synchronous: str) -> None:
        super().__init__(path, synchronous)
        self.queue = pg_reference.RawPostgresQueue(
            postgres.conninfo(path),
            lease_seconds=LEASE_SECONDS,
            max_attempts=MAX_ATTEMPTS,
            synchronous=synchronous,
        )

    def add(self, task_id: str) -> None:
        self.queue.add(task_id)

    def add_many(self, task_ids: Sequence[str]) -> None:
        self.queue.add_many(task_ids)

    def reserve(self) -> Claimed | None:
        return self.queue.claim()

    def complete(self, claimed: Claimed) -> bool:
        return self.queue.complete(claimed[0], claimed[1])

    def claim_many(self, n: int) -> list[Claimed]:
        return list(self.queue.claim_many(n))

    def complete_many(self, claimed: list[Claimed]) -> int:
        return self.queue.complete_many(claimed)

    def complete_and_claim(self, claimed: Claimed) -> tuple[bool, Claimed | None]:
        return self.queue.complete_and_claim(claimed[0], claimed[1])

    def completed_count(self) -> int | None:
        return self.queue.completed_count()

    def close(self) -> None:
        self.queue.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        system = cls(path, "normal")
        try:
            system.add_many(task_ids)
        finally:
            system.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        pg_reference.fill_completed(postgres.conninfo(path), n)


class Procrastinate(_OnPostgres):
    key = "procrastinate"
    label = "procrastinate (PostgreSQL)"
    semantics = (
        "procrastinate's storage calls, as its worker makes them, without asyncio: add = "
        "`JobManager.defer_job` (sync), batches = `JobManager.batch_defer_jobs`; reserve = "
        "its job manager's `fetch_job` query (`procrastinate_fetch_job_v2`: "
        "`FOR UPDATE SKIP LOCKED`), complete = its `finish_job` query "
        "(`procrastinate_finish_job_v1`, status succeeded, the row kept), both through its "
        "`SyncPsycopgConnector` (a psycopg pool of one connection, one transaction per "
        "call). Its schema is applied in the location's schema. No lease: a job stays "
        "'doing' until a stalled-job sweep retries it; no fencing token; finished jobs keep "
        "their row. No batch claim, no complete-and-claim."
    )
    can_add_many = True

    @classmethod
    def missing(cls) -> str | None:
        try:
            import procrastinate  # noqa: F401
        except ImportError:
            return "procrastinate is not installed (pip install -e '.[bench]')"
        return super().missing()

    def __init__(self, path: str, synchronous: str) -> None:
        super().__init__(path, synchronous)
        from procrastinate import SyncPsycopgConnector, jobs, schema, sql
        from procrastinate.manager import JobManager

        commit = "on" if synchronous == "full" else "off"
        self.connector = SyncPsycopgConnector(
            conninfo=postgres.conninfo(path, synchronous_commit=commit), min_size=1, max_size=1
        )
        self.connector.open()
        self.queries = sql.queries
        self.manager = JobManager(self.connector)
        self._job = jobs.Job
        if self.connector.execute_query_one(
            "SELECT to_regclass('procrastinate_jobs') IS NULL AS missing"
        )["missing"]:
            schema.SchemaManager(self.connector).apply_schema()
        row = self.connector.execute_query_one(self.queries["register_worker"])
        self.worker_id = row["worker_id"]

    def _jobs(self, task_ids: Sequence[str]) -> list[Any]:
        return [
            self._job(
                queue="default",
                lock=None,
                queueing_lock=None,
                task_name="bench",
                task_kwargs={"task_id": task_id},
            )
            for task_id in task_ids
        ]

    def add(self, task_id: str) -> None:
        self.manager.defer_job(self._jobs([task_id])[0])

    def add_many(self, task_ids: Sequence[str]) -> None:
        self.manager.batch_defer_jobs(self._jobs(task_ids))

    def reserve(self) -> Claimed | None:
        row = self.connector.execute_query_one(
            self.queries["fetch_job"], queues=None, worker_id=self.worker_id
        )
        return None if row["id"] is None else (row["args"]["task_id"], row["id"])

    def complete(self, claimed: Claimed) -> bool:
        self.connector.execute_query(
            self.queries["finish_job"], job_id=claimed[1], status="succeeded", delete_job=False
        )
        return True  # it raises when the job is not 'doing' (or 'todo')

    def completed_count(self) -> int | None:
        row = self.connector.execute_query_one(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE status = 'succeeded'"
        )
        return int(row["n"])

    def close(self) -> None:
        self.connector.close()

    @classmethod
    def fill(cls, path: str, task_ids: Sequence[str]) -> None:
        system = cls(path, "normal")
        try:
            for i in range(0, len(task_ids), SQLQ_MAX_BATCH):
                system.add_many(task_ids[i : i + SQLQ_MAX_BATCH])
        finally:
            system.close()

    @classmethod
    def fill_completed(cls, path: str, n: int) -> None:
        cls(path, "normal").close()  # its schema
        with pg_connect(path) as conn:
            conn.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args, status, attempts) "
                "SELECT 'default', 'bench', jsonb_build_object('task_id', 'old-' || i), "
                "'succeeded', 1 FROM generate_series(1, %s) AS i",
                (n,),
            )
            conn.execute("VACUUM ANALYZE procrastinate_jobs")


ALL: dict[str, type[System]] = {
    cls.key: cls
    for cls in (
        Sqlq,
        Reference,
        PersistQueue,
        LiteQueue,
        Huey,
        SqlqPostgres,
        ReferencePostgres,
        Procrastinate,
    )
}
PEERS = ("persist-queue", "litequeue", "huey", "procrastinate")


def get(key: str) -> type[System]:
    return ALL[key]


def db_path(folder: str | Path, key: str, name: str) -> str:
    """A fresh path for a system's data (persist-queue wants a folder)."""
    return os.path.join(
        os.fspath(folder), f"{name}-{key}" + ("" if key == "persist-queue" else ".db")
    )
