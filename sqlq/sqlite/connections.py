"""A SQLite backend's connections and the translation of its errors.

The backend opens its own connections with the DB-API module (driver.py), with
the same connect-time settings for ``queue.engine`` (SQLAlchemy, made on first
use) and checks the caller's own connections given as ``conn=``.  One connection
per backend object, closed before ``fork()`` (forks.py).  DB-API errors leave as
sqlq errors (``_guard``, ``_translated``); after Corrupt the connection is
dropped, never the file.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Literal

from ..errors import Corrupt, InvalidArgument, QueueClosed, SchemaChanged
from . import driver, forks
from .gate import Gate
from .queries import Q

if TYPE_CHECKING:
    import sqlalchemy as sa

Synchronous = Literal["full", "normal"]

log = logging.getLogger("sqlq")
_engine_lock = threading.Lock()  # makes each backend's queue.engine once

#: Prepared statements kept per connection (see SqliteBackend's connect_args).
STATEMENT_CACHE = 1024


def connect_args(busy_timeout: float) -> dict[str, Any]:
    """How every connection to a file is opened (the queue's and queue.engine's)."""
    return {
        "isolation_level": None,  # sqlq issues BEGIN IMMEDIATE / COMMIT itself
        "check_same_thread": False,  # calls are serialised by the backend's lock
        "timeout": busy_timeout,
        # The DB-API module keeps this many prepared statements per connection;
        # once full, each new one evicts the last one added, so two statements
        # that take turns would be parsed and planned again at every execution
        # (a worker that once ran migrations, listings and purges would).  More
        # than every statement sqlq can run: queries.sql, the migrations.
        "cached_statements": STATEMENT_CACHE,
    }


def set_up(conn: Any, synchronous: Synchronous) -> int:
    """The connect-time settings of every connection to a file; returns the WAL size
    limit (bytes) the connection keeps."""
    conn.execute(Q.set_synchronous_full if synchronous == "full" else Q.set_synchronous_normal)
    limit: int = conn.execute(Q.limit_wal_size).fetchone()[0]
    return limit


class Connector:
    """Opens the queue's own connections to one file: the connection opening the file
    uses (migrate.py, given this as its ``connect``) and each one after (after fork,
    after Corrupt), all alike.  Below the backend: it knows the file and the settings,
    not the backend, and keeps the WAL size limit the last connection reported."""

    def __init__(self, path: str, synchronous: Synchronous, busy_timeout: float) -> None:
        self.path = path
        self.synchronous = synchronous
        self.busy_timeout = busy_timeout
        self.wal_limit = 0  # bytes; set from limit_wal_size when connecting

    def __call__(self) -> Any:
        """A new connection in autocommit mode, with SQLite's busy handler (waiting
        up to busy_timeout, which opening uses); DB-API errors of connecting leave as
        sqlq errors, the others (raised by a statement) for the caller's guard."""
        try:
            conn = driver.dbapi.connect(self.path, **connect_args(self.busy_timeout))
            try:
                self.wal_limit = set_up(conn, self.synchronous)
            except BaseException:
                conn.close()
                raise
        except driver.dbapi.Error as exc:
            raise driver.translate(exc, self.path) from exc
        try:
            conn.text_factory = driver.stored_text
            # The queue's own connection checkpoints itself (_after_commit); those
            # of queue.engine, whose commits sqlq does not see, keep SQLite's.
            conn.execute(Q.no_auto_checkpoint)
        except BaseException:
            conn.close()
            raise
        return conn


class Connections:
    """The first layer of SqliteBackend: its connection and error translation.  The
    attributes below are set by SqliteBackend.__init__ (the one path that opens a
    file)."""

    path: str
    synchronous: Synchronous
    busy_timeout: float
    schema_found: int
    schema_version: int
    file_mode: int
    wal_limit: int
    keyed: bool
    grouped: bool
    _engine: sa.Engine | None
    _connect: Connector
    _lock: threading.Lock
    _cutoff: float
    _conn: Any
    _cursor: Any
    _gate: Gate | None
    _commits: int
    _opened: bool
    _closed: bool
    _held_for_fork: bool
    _rng: random.Random

    def _connect_args(self) -> dict[str, Any]:
        """How every connection to the file is opened (the queue's and queue.engine's)."""
        return connect_args(self.busy_timeout)

    def _on_connect(self, dbapi_conn: Any, _record: Any = None) -> None:
        """queue.engine's connections get the queue's connect-time settings."""
        self.wal_limit = set_up(dbapi_conn, self.synchronous)

    def _connection(self) -> Any:
        if self._conn is None:
            if self._closed:
                raise QueueClosed(f"{self.path}: the queue is closed")
            conn = self._connect()
            self._adopt(conn)
            if self._opened:  # a new connection after fork: same waiting as the first
                conn.execute(Q.no_busy_handler)
        return self._conn

    def _adopt(self, conn: Any) -> None:
        """Make ``conn`` (from ``self._connect``: the one opening the file returned, or
        a new one) the connection of the queue's calls."""
        self._conn = conn
        self._cursor = conn.cursor()
        self.wal_limit = self._connect.wal_limit

    def _disconnect(self) -> None:
        self._cursor = None
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _close_before_fork(self) -> None:
        """Before fork(): close the connection, so that none of sqlq's is open in this
        process when it forks.  SQLite forbids carrying one into a child: the child
        would inherit this process's lock bookkeeping for the file and take no real
        locks, and whichever side closed last would checkpoint and delete the -wal the
        other still commits into.  The lock is held until the fork is over, so no call
        opens a new one meanwhile; both sides reconnect on their next call."""
        self._held_for_fork = self._lock.acquire(timeout=self.busy_timeout)
        if self._held_for_fork:
            self._disconnect()
        else:
            log.warning(
                "fork() while a call on %s ran for longer than busy_timeout in another "
                "thread: its connection stays open, and the child must not use this file",
                self.path,
            )

    def _resume_after_fork(self) -> None:
        """After fork(), in the parent."""
        if self._held_for_fork:
            self._held_for_fork = False
            self._lock.release()

    def _start_in_child(self) -> None:
        """After fork(), in the child: a new lock (a call of the parent's other threads
        may have held the old one), a new connection and gate files on first use."""
        if self._conn is not None:  # left open by _close_before_fork: keep it, unused
            forks.inherited.append((self._conn, self._cursor))
            self._conn = self._cursor = None
        if self._gate is not None:
            self._gate.close_copy()
            self._gate = None
        self._held_for_fork = False
        self._commits = 0
        self._lock = threading.Lock()

    def schema_changed(self, found: int) -> SchemaChanged:
        """The error of a call that found the file migrated under this process."""
        from ..version import __version__

        return SchemaChanged(
            f"{self.path}: the database was migrated to schema version {found} while this "
            f"process (sqlq {__version__}) had it open at version {self.schema_version}; "
            "stop this process and start it again with a sqlq that knows the new schema"
        )

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Translate DB-API errors raised inside into sqlq errors (the cause kept)."""
        try:
            yield
        except driver.dbapi.Error as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: BaseException) -> Exception:
        """The sqlq error for a DB-API error (called holding the lock).  After Corrupt the
        connection is dropped (never the file): its page cache may hold what was read
        wrong, and the next call reads afresh through a new connection."""
        error = driver.translate(exc, self.path)
        if isinstance(error, Corrupt) and self._conn is not None and not self._closed:
            with suppress(Exception):
                if self._conn.in_transaction:
                    self._conn.execute(Q.rollback)
                self._conn.close()
            self._conn = self._cursor = None
        return error

    @property
    def engine(self) -> sa.Engine:
        """Its transactions start with ``BEGIN IMMEDIATE`` and it uses the same SQLite
        library and connect-time settings as the queue.  Made (and SQLAlchemy
        imported) when first asked for."""
        with _engine_lock:
            if self._engine is None:
                import sqlalchemy as sa
                from sqlalchemy.pool import NullPool

                engine = sa.create_engine(
                    sa.engine.URL.create("sqlite", database=self.path),
                    module=driver.dbapi,
                    poolclass=NullPool,
                    connect_args=self._connect_args(),
                )
                sa.event.listen(engine, "connect", self._on_connect)
                sa.event.listen(engine, "begin", self._on_begin)
                self._engine = engine
            return self._engine

    def _external_connection(self, external: Any) -> Any:
        if self._closed:
            raise QueueClosed(f"{self.path}: the queue is closed")
        import sqlalchemy as sa  # (the caller's connection is SQLAlchemy's: imported)

        if not isinstance(external, sa.Connection):
            raise InvalidArgument(
                f"conn must be a SQLAlchemy Connection, not {type(external).__name__}"
            )
        if external.engine.dialect.dbapi is not driver.dbapi:
            raise InvalidArgument(
                "conn uses another SQLite library than the queue; two SQLite libraries in "
                "one process do not see each other's locks. Use queue.engine for your connection"
            )
        # The file alone: options in the caller's own URL (?timeout=...) are the caller's.
        if os.path.realpath(external.engine.url.database or "") != self.path:
            raise InvalidArgument(f"conn is not connected to the queue's database {self.path}")
        if not external.in_transaction():
            raise InvalidArgument("conn must be in an open transaction (with engine.begin())")
        conn: Any = external.connection.driver_connection
        if conn is None or not conn.in_transaction:
            raise InvalidArgument(
                "conn's transaction has not begun in SQLite; use queue.engine, whose "
                "transactions start with BEGIN IMMEDIATE"
            )
        return conn

    def _on_begin(self, connection: sa.Connection) -> None:
        """Transactions on queue.engine take the write lock at once, as the queue's do."""
        connection.exec_driver_sql(Q.begin_write)
