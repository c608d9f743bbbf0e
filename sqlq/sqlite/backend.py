"""The SQLite backend: one file, many processes, one write transaction per call.

SQLAlchemy's pysqlite dialect makes the connections (URL handling, the DB-API
module choice, connect-time settings); the calls then run the named statements
of queries.sql on the driver connection, with no ORM or expression compilation
on the hot path.

Concurrency model:

* Between processes: WAL mode, ``BEGIN IMMEDIATE`` (the write lock from the first
  statement), and SQLite's busy handler waiting up to ``busy_timeout`` seconds;
  past that the call raises :class:`sqlq.errors.Busy`.
* Within a process: one connection per backend object, calls serialised by a
  lock, so a Queue can be shared by threads.
* Across ``fork``: the child never touches the parent's connection (SQLite
  forbids it); it opens its own on first use.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from ..backend import TaskRow
from ..contract import Number, State
from ..errors import CannotOpen, InvalidConfig, InvariantViolation, QueueClosed
from . import driver
from .migrate import check_schema, ensure_schema
from .queries import Q

Synchronous = Literal["full", "normal"]

# Connections inherited through fork: kept alive (never closed or finalised) in
# the child, because closing them there would act on the parent's locks.
_inherited: list[Any] = []
_live_backends: weakref.WeakSet[SqliteBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_live_backends):
        backend._forget_connection()


os.register_at_fork(after_in_child=_after_fork_in_child)


def database_path(path_or_url: str | os.PathLike[str]) -> str:
    """The file path of a plain path or a ``sqlite:///`` URL."""
    if isinstance(path_or_url, os.PathLike):
        path_or_url = os.fspath(path_or_url)
    if not isinstance(path_or_url, str):
        raise InvalidConfig(f"expected a path or sqlite:/// URL, not {type(path_or_url).__name__}")
    if "://" in path_or_url:
        try:
            url = sa.engine.make_url(path_or_url)
        except sa.exc.ArgumentError as exc:
            raise InvalidConfig(f"not a database URL: {path_or_url!r}") from exc
        if url.get_backend_name() != "sqlite":
            raise InvalidConfig(
                f"{url.get_backend_name()!r} URLs are not supported yet; use a sqlite:/// URL"
            )
        path = url.database or ""
    else:
        path = path_or_url
    if path in ("", ":memory:") or path.startswith("file:"):
        raise InvalidConfig(
            "sqlq needs a database file that several processes can share; "
            "for a queue in memory use sqlq.WorkQueue"
        )
    return os.path.abspath(path)


class SqliteBackend:
    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        busy_timeout: float = 30.0,
        migrate: bool = True,
    ) -> None:
        """Open (and by default create or migrate) the database.

        With ``migrate=False`` nothing is created or changed: the file must exist
        and be a sqlq database at the current schema version (for inspection).
        """
        self.path = database_path(path_or_url)
        if not migrate and not os.path.isfile(self.path):
            raise CannotOpen(f"{self.path}: no such database file")
        if synchronous not in ("full", "normal"):
            raise InvalidConfig(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidConfig("busy_timeout must be a number of seconds")
        if not 0 <= busy_timeout <= 86400:
            raise InvalidConfig(f"busy_timeout must be between 0 and 86400, got {busy_timeout}")
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        driver.warn_if_affected()
        self._engine = sa.create_engine(
            sa.engine.URL.create("sqlite", database=self.path),
            module=driver.dbapi,
            poolclass=NullPool,
            connect_args={
                "isolation_level": None,  # sqlq issues BEGIN IMMEDIATE / COMMIT itself
                "check_same_thread": False,  # calls are serialised by self._lock
                "timeout": self.busy_timeout,
            },
        )
        sa.event.listen(self._engine, "connect", self._on_connect)
        self._lock = threading.Lock()
        self._fairy: Any = None  # SQLAlchemy's wrapper, owning the DB-API connection
        self._conn: Any = None
        self._closed = False
        _live_backends.add(self)
        with self._guard():
            conn = self._connection()
            if migrate:
                self.schema_version = ensure_schema(conn, self.path)
            else:
                self.schema_version = check_schema(conn, self.path)

    # --- connections --------------------------------------------------------------

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute(
            Q.set_synchronous_full if self.synchronous == "full" else Q.set_synchronous_normal
        )

    def _connection(self) -> Any:
        if self._conn is None:
            if self._closed:
                raise QueueClosed(f"{self.path}: the queue is closed")
            self._fairy = self._engine.raw_connection()
            self._conn = self._fairy.driver_connection
        return self._conn

    def _forget_connection(self) -> None:
        """In a forked child: drop (but keep alive) the parent's connection."""
        if self._fairy is not None:
            _inherited.append((self._fairy, self._conn))
        self._fairy = self._conn = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._fairy is not None:
                self._fairy.close()
            self._fairy = self._conn = None
            self._engine.dispose()
            _live_backends.discard(self)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Translate DB-API errors raised inside into sqlq errors (the cause kept)."""
        try:
            yield
        except driver.dbapi.Error as exc:
            raise driver.translate(exc, self.path) from exc
        except sa.exc.DBAPIError as exc:  # raised by SQLAlchemy when it connects
            cause = exc.orig if exc.orig is not None else exc
            raise driver.translate(cause, self.path) from cause

    # --- calls ----------------------------------------------------------------------

    @contextmanager
    def transaction(self, now: Number) -> Iterator[SqliteTransaction]:
        with self._lock, self._guard():
            conn = self._connection()
            conn.execute(Q.begin_write)
            try:
                tx = SqliteTransaction(conn, now)
                yield tx
                tx.flush()
                conn.execute(Q.commit)
            except BaseException:
                # SQLite may have rolled back already (e.g. on SQLITE_FULL); a blind
                # ROLLBACK would then raise a second, misleading error.
                if conn.in_transaction:
                    with suppress(driver.dbapi.Error):
                        conn.execute(Q.rollback)
                raise

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        with self._lock, self._guard():
            for queue, state, count in self._connection().execute(Q.count_states):
                out.setdefault(queue, {})[state] = count
        return out


class SqliteTransaction:
    """One call's statements; see sqlq.backend.Transaction for the contract."""

    __slots__ = ("_conn", "_counter", "_stored", "now")

    def __init__(self, conn: Any, now: Number) -> None:
        self._conn = conn
        mark, counter = conn.execute(Q.read_clock).fetchone()
        self.now: Number = now if now >= mark else mark
        self._counter: int = counter
        self._stored = (mark, counter)

    def _next_id(self) -> int:
        self._counter += 1
        return self._counter

    def flush(self) -> None:
        """Store the high-water mark and counter if they moved."""
        if (self.now, self._counter) != self._stored:
            cur = self._conn.execute(Q.write_clock, {"now": self.now, "counter": self._counter})
            if cur.rowcount != 1:
                raise InvariantViolation("the database clock or counter would have gone down")

    def due_leases(self) -> Iterator[TaskRow]:
        for row in self._conn.execute(Q.due_leases, {"now": self.now}).fetchall():
            yield _task_row(row)

    def insert(self, queue: str, task_id: str, max_attempts: int) -> bool:
        params = {
            "queue": queue,
            "task_id": task_id,
            "seq": self._counter + 1,
            "max_attempts": max_attempts,
            "now": self.now,
        }
        if self._conn.execute(Q.insert_task, params).rowcount != 1:
            return False
        self._next_id()
        return True

    def claim(self, queue: str, deadline: Number) -> str | None:
        params = {
            "queue": queue,
            "lease_id": self._counter + 1,
            "deadline": deadline,
            "now": self.now,
        }
        row = self._conn.execute(Q.claim_front, params).fetchone()
        if row is None:
            return None
        self._next_id()
        task_id: str = row[0]
        return task_id

    def get(self, queue: str, task_id: str) -> TaskRow | None:
        row = self._conn.execute(Q.get_task, {"queue": queue, "task_id": task_id}).fetchone()
        return None if row is None else _task_row(row)

    def complete(self, queue: str, task_id: str) -> bool:
        params = {"queue": queue, "task_id": task_id, "now": self.now}
        return bool(self._conn.execute(Q.complete_task, params).rowcount == 1)

    def release(self, task: TaskRow, state: State) -> None:
        params = {
            "id": task.row_id,
            "lease_id": task.lease_id,
            "state": state.value,
            "seq": self._next_id() if state is State.AVAILABLE else None,
            "now": self.now,
        }
        if self._conn.execute(Q.release_lease, params).rowcount != 1:
            raise InvariantViolation(
                f"task {task.task_id!r} was not RESERVED under lease {task.lease_id} any more"
            )


def _task_row(row: tuple[Any, ...]) -> TaskRow:
    row_id, task_id, state, attempts, max_attempts, lease_id = row
    return TaskRow(row_id, task_id, State(state), attempts, max_attempts, lease_id)
