"""The SQLite backend: one file, many processes, one write transaction per call.

The backend opens its own connections with the DB-API module (driver.py) and
runs the named statements of queries.sql on them, with no ORM or expression
compilation on the hot path.  SQLAlchemy is imported only for what needs it: a
``sqlite:///`` URL, ``queue.engine`` (made on first use, with the same
connect-time settings) and the caller's connections given as ``conn=``; reading
stats or running a worker on a file path never imports it.

Concurrency model:

* Between processes: WAL mode, ``BEGIN IMMEDIATE`` (the write lock from the first
  statement) after a turn at the write gate (gate.py), which makes processes
  take fair turns.  SQLite's own busy handler is used only while opening
  (migrations).
* Within a process: one connection per backend object, calls serialised by a
  lock, so a Queue can be shared by threads.
* One wait budget per call: the thread lock, the turn at the gate and the retries
  of a busy write lock together last at most ``busy_timeout`` seconds from the
  start of the call; past that the call raises :class:`sqlq.errors.Busy` naming
  the file.  Threads behind a held lock therefore all give up after one
  busy_timeout, not one after another.  ``interrupt_waits`` ends waits sooner
  (a worker that stops: its grace period bounds them).
* Across ``fork``: no connection of sqlq's is open at the moment of fork (each
  queue closes its own just before, see _close_before_fork); the parent and the
  child each open a new one on first use, and the child its own gate files.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeVar

from ..backend import (
    Claimed,
    Figures,
    Holder,
    Opened,
    TaskRow,
    claim_each,
)
from ..browse import Browse, Found, task_row
from ..clock import kernel_time
from ..contract import (
    DEFAULT_AGING,
    FINISHED,
    Completion,
    Number,
    State,
    time_after,
)
from ..errors import (
    Busy,
    CannotOpen,
    Corrupt,
    InvalidArgument,
    InvalidConfig,
    InvariantViolation,
    NoDatabase,
    QueueClosed,
    SchemaChanged,
)
from ..payload import Encoded
from ..records import (
    Checkpoint,
    Compaction,
    QueueOverview,
    SchemaVersions,
    StorageFacts,
    overviews,
)
from ..retry import Retry, stored_policy
from ..sqlstore import SqlCalls, SqlReads, event_row, in_snapshot
from . import driver, files
from .gate import Gate
from .migrate import (
    GROUP_TRIGGERS,
    KEY_INDEXES,
    apply_on_demand,
    check_schema,
    ensure_schema,
    latest_version,
)
from .queries import Q

if TYPE_CHECKING:
    import sqlalchemy as sa

Synchronous = Literal["full", "normal"]
T = TypeVar("T")

#: Waiting for the write lock: the first pause and the longest, in seconds (randomised).
WAIT_MIN, WAIT_MAX = 100e-6, 5e-3

#: A process looks at the size of the -wal file after every this many of its own
#: commits (a stat call), and checkpoints once the file is past journal_size_limit.
#: SQLite truncates the file to that limit when the log starts over, so a file past
#: it holds that much log.  16 commits rarely write more than the 1 MiB between the
#: limit (3 MiB) and the bound the README gives (4 MiB).
WAL_CHECK_EVERY = 16

log = logging.getLogger("sqlq")

# Connections a forked child inherited open (see _close_before_fork): kept alive,
# never closed or finalised there, because closing them would act on the file as
# if the child held the parent's locks.
_inherited: list[Any] = []
_live_backends: weakref.WeakSet[SqliteBackend] = weakref.WeakSet()
_engine_lock = threading.Lock()  # makes each backend's queue.engine once


def _before_fork() -> None:
    for backend in list(_live_backends):
        backend._close_before_fork()


def _after_fork_in_parent() -> None:
    for backend in list(_live_backends):
        backend._resume_after_fork()


def _after_fork_in_child() -> None:
    for backend in list(_live_backends):
        backend._start_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)


#: What an empty database argument is told (NoDatabase): every path and URL sqlq is
#: given that names no server comes here (a plain path, even empty, is SQLite's).
NO_DATABASE = (
    "no database given: pass a SQLite file path or a postgresql:// URL (is $DATABASE_URL set?)"
)


def database_path(path_or_url: str | os.PathLike[str]) -> str:
    """The file path of a plain path or a ``sqlite:///path`` URL.

    A URL names the file and nothing else: query options (``?mode=ro``, ...)
    are refused, since the queue always opens its file read-write.
    """
    if isinstance(path_or_url, os.PathLike):
        path_or_url = os.fspath(path_or_url)
    if not isinstance(path_or_url, str):
        raise InvalidConfig(f"expected a path or sqlite:/// URL, not {type(path_or_url).__name__}")
    if "://" in path_or_url:
        import sqlalchemy as sa  # a URL: SQLAlchemy reads it

        try:
            url = sa.engine.make_url(path_or_url)
        except sa.exc.ArgumentError as exc:
            raise InvalidConfig(f"not a database URL: {path_or_url!r}") from exc
        if url.get_backend_name() != "sqlite":
            raise InvalidConfig(
                f"{url.get_backend_name()!r} URLs are not supported yet; use a sqlite:/// URL"
            )
        if url.query or url.host or url.port or url.username or url.password:
            raise InvalidConfig(
                f"{path_or_url!r}: a sqlite URL may only name the file (sqlite:///path); "
                "sqlq takes no options from it and always opens the file read-write"
            )
        path = url.database or ""
    else:
        path = path_or_url
    if not path.strip():  # sqlite:/// (an empty path) too
        raise NoDatabase(NO_DATABASE)
    if "\x00" in path:
        raise InvalidConfig(f"a database path must not contain NUL ('\\x00'): {path!r}")
    if path in ("", ":memory:") or path.startswith("file:"):
        raise InvalidConfig(
            "sqlq needs a database file that several processes can share; "
            "for a queue in memory use sqlq.WorkQueue"
        )
    # The resolved path, as SQLite itself uses it: processes naming one database through
    # different symlinks must share one gate file.
    return os.path.realpath(path)


#: Prepared statements kept per connection (see SqliteBackend's connect_args).
STATEMENT_CACHE = 1024


#: The migration that made sqlq_settings (a queue's stored settings).
SETTINGS_SINCE = 15


def _task_row(row: tuple[Any, ...]) -> TaskRow:
    (row_id, task_id, state, attempts, max_attempts, token, seq, kind, base, cap,
     deadline, run_at, payload, error, created, updated, finished, name, stop,
     result, progress, message, key, priority, group) = row  # fmt: skip
    return TaskRow(
        row_id, task_id, State(state), attempts, max_attempts, token, seq,
        stored_policy(kind, base, cap), deadline, run_at, payload, error,
        created, updated, finished, name, stop, result, progress, message, group,
        key, priority,
    )  # fmt: skip


class SqliteBackend(SqlReads):
    keeps_time = False  # every call is given its time
    q = Q
    task_row = staticmethod(_task_row)
    settings_since = SETTINGS_SINCE

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "full",
        busy_timeout: float = 30.0,
        migrate: bool = True,
        file_mode: int = files.DEFAULT_FILE_MODE,
        force_migration: bool = False,
    ) -> None:
        """Open (and by default create or migrate) the database.

        With ``migrate=False`` nothing is created or changed: the file must exist
        and be a sqlq database of a schema version this sqlq knows, an older one
        included (for inspection and maintenance: see schema_versions; the queue
        calls need the current version).
        A new database file gets ``file_mode`` (see files.py); the files beside
        it get the database file's mode.  A migration is refused (WorkersRunning)
        while live workers of an older schema run, unless ``force_migration``.
        """
        self.path = database_path(path_or_url)
        if not isinstance(migrate, bool):
            raise InvalidConfig(f"migrate must be True or False, not {migrate!r}")
        if not isinstance(force_migration, bool):
            raise InvalidConfig(f"force_migration must be True or False, not {force_migration!r}")
        if not migrate and not os.path.isfile(self.path):
            raise CannotOpen(f"{self.path}: no such database file")
        mode = files.check_mode(file_mode)
        if synchronous not in ("full", "normal"):
            raise InvalidConfig(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidConfig("busy_timeout must be a number of seconds")
        if not 0 <= busy_timeout <= 86400:
            raise InvalidConfig(f"busy_timeout must be between 0 and 86400, got {busy_timeout}")
        if migrate:
            files.check_writable(self.path)  # before creating anything
        self.synchronous: Synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        driver.warn_if_affected()
        self._engine: sa.Engine | None = None  # queue.engine, made when first asked for
        self._lock = threading.Lock()
        self._cutoff = math.inf  # waits end by this time.monotonic() (interrupt_waits)
        self._conn: Any = None  # the DB-API connection of the queue's own calls
        # The cursor that calls' transactions run on (one per connection: a cursor
        # made per statement costs more than most statements).  Each transaction
        # ends with COMMIT or ROLLBACK on it, which resets whatever it ran before.
        self._cursor: Any = None
        self._gate: Gate | None = None  # opened on the first write
        self._commits = 0  # since this process's last checkpoint
        self.wal_limit = 0  # bytes; set from limit_wal_size when connecting
        self.last_checkpoint: Checkpoint | None = None
        self.checkpoint_failures = 0
        self._opened = False
        self._closed = False
        self._held_for_fork = False
        self.keyed = False  # the dedupe keys' indexes are there (SqliteTransaction._keying)
        self.grouped = False  # the group triggers are there (SqliteTransaction._grouping)
        _live_backends.add(self)
        try:
            with self._lock, self._guard():
                if migrate:
                    self.schema_found = ensure_schema(
                        self.path,
                        self._connection,
                        mode=mode,
                        timeout=self.busy_timeout,
                        reconnect=self._fresh_connection,
                        force=force_migration,
                    )
                    self.schema_version = latest_version()
                else:
                    self.schema_found = self.schema_version = check_schema(
                        self._fresh_connection, self.path, timeout=self.busy_timeout
                    )
            self.file_mode = files.file_mode(self.path)
            self._rng = random.Random()
            self._opened = True  # from now on connections wait for locks in _waiting
            with self._lock, self._guard():
                self._connection().execute(Q.no_busy_handler)
        except BaseException:
            self.close()  # a refused file keeps no connection (nor -wal/-shm files)
            raise

    # --- connections --------------------------------------------------------------

    def _connect_args(self) -> dict[str, Any]:
        """How every connection to the file is opened (the queue's and queue.engine's)."""
        return {
            "isolation_level": None,  # sqlq issues BEGIN IMMEDIATE / COMMIT itself
            "check_same_thread": False,  # calls are serialised by self._lock
            "timeout": self.busy_timeout,
            # The DB-API module keeps this many prepared statements per connection;
            # once full, each new one evicts the last one added, so two statements
            # that take turns would be parsed and planned again at every execution
            # (a worker that once ran migrations, listings and purges would).  More
            # than every statement sqlq can run: queries.sql, the migrations.
            "cached_statements": STATEMENT_CACHE,
        }

    def _on_connect(self, dbapi_conn: Any, _record: Any = None) -> None:
        dbapi_conn.execute(
            Q.set_synchronous_full if self.synchronous == "full" else Q.set_synchronous_normal
        )
        (self.wal_limit,) = dbapi_conn.execute(Q.limit_wal_size).fetchone()

    def _connection(self) -> Any:
        if self._conn is None:
            if self._closed:
                raise QueueClosed(f"{self.path}: the queue is closed")
            try:
                conn = driver.dbapi.connect(self.path, **self._connect_args())
                try:
                    self._on_connect(conn)
                except BaseException:
                    conn.close()
                    raise
            except driver.dbapi.Error as exc:
                raise driver.translate(exc, self.path) from exc
            self._conn = conn
            self._conn.text_factory = driver.stored_text
            self._cursor = self._conn.cursor()
            # The queue's own connection checkpoints itself (_after_commit); those
            # of queue.engine, whose commits sqlq does not see, keep SQLite's.
            self._conn.execute(Q.no_auto_checkpoint)
            if self._opened:  # a new connection after fork: same waiting as the first
                self._conn.execute(Q.no_busy_handler)
        return self._conn

    def _fresh_connection(self) -> Any:
        """A connection opened now (the schema checks look again on a new one)."""
        self._disconnect()
        return self._connection()

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
            _inherited.append((self._conn, self._cursor))
            self._conn = self._cursor = None
        if self._gate is not None:
            self._gate.close_copy()
            self._gate = None
        self._held_for_fork = False
        self._commits = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._commits and not self._closed:
                self._checkpoint_logged(self._conn)  # a short-lived queue leaves its log
            self._closed = True
            self._disconnect()
            if self._gate is not None:
                self._gate.close()
                self._gate = None
            if self._engine is not None:
                self._engine.dispose()
            _live_backends.discard(self)

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

    # --- calls ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.path

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

    def transaction(
        self,
        now: Number | None,
        queue: str,
        external: Any,
        opened: Opened,
        one_write: bool = False,  # each call is one transaction anyway: the write lock
    ) -> SqliteTransaction:
        """One call on ``queue`` at ``now``, as a context manager (see
        sqlq.backend.Backend).  With ``external`` (a SQLAlchemy Connection in an open
        transaction on this database) the call runs inside the caller's transaction,
        in a savepoint."""
        return SqliteTransaction(self, now, queue, external, opened, one_write)

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

    def snapshot(self, queue: str) -> Figures:
        return self._read(lambda conn: in_snapshot(conn, Q, Q.begin_read, _figures, queue))

    def _read(self, attempt: Callable[[Any], T]) -> T:
        """``attempt(conn)``, a read outside any transaction, holding the thread lock and
        retried while SQLite says busy, within one busy_timeout (see sqlstore)."""
        with self._holding_lock() as deadline, self._guard():
            conn = self._connection()
            return self._waiting(lambda: attempt(conn), deadline)

    def _read_time(self, now: Number | None) -> Number:
        return time.time() if now is None else now  # SQLite's clock is this process's

    # --- waiting, within one budget ---------------------------------------------------

    def wait_for_lock(self, deadline: float) -> None:
        """Take this object's thread lock, the first wait of a call whose ``deadline``
        (time.monotonic(), busy_timeout after it began) is given; Busy if it stays
        taken until then (another thread's call waits for the write lock meanwhile).
        (A transaction, on the hot path, first tries ``_lock.acquire(False)``.)"""
        if not self._lock.acquire(True, max(0.0, deadline - time.monotonic())):
            raise self._busy("other calls on this queue object held it")

    @contextmanager
    def _holding_lock(self) -> Iterator[float]:
        """The thread lock for a call outside a transaction (a read, a checkpoint);
        gives the call's deadline."""
        deadline = time.monotonic() + self.busy_timeout
        self.wait_for_lock(deadline)
        try:
            yield deadline
        finally:
            self._lock.release()

    def _busy(self, why: str) -> Busy:
        if time.monotonic() >= self._cutoff:
            return Busy(
                f"{self.path}: the wait for the write lock was cut short by interrupt_waits "
                f"(a stopping worker's grace period is over): {why}"
            )
        return Busy(
            f"{self.path}: no turn at the write lock within busy_timeout "
            f"({self.busy_timeout:g} s): {why}"
        )

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls, those in progress included, ``after``
        seconds from now at the latest (then the call raises Busy); None: waits last
        busy_timeout again.  Thread-safe, and safe in a signal handler.  A call whose
        lock is free at once still goes through."""
        self._cutoff = math.inf if after is None else time.monotonic() + after
        gate = self._gate
        if gate is not None:
            gate.interrupt(self._cutoff)

    # --- waiting for the lock, fairly -------------------------------------------------

    def begin_write(self, conn: Any, deadline: float) -> None:
        """Take a turn at the gate (see gate.py), then BEGIN IMMEDIATE.

        Both waits end by ``deadline`` (time.monotonic(); see wait_for_lock); past
        that, Busy.  The caller releases the gate (``end_write``) once the
        transaction is over.
        """
        if self._gate is None:
            self._gate = Gate(self.path + ".sqlq-gate", self.file_mode)
            self._gate.interrupt(self._cutoff)
        if not self._gate.acquire(deadline):
            raise self._busy("another process kept it")
        try:
            try:
                conn.execute(Q.begin_write)
            except driver.dbapi.OperationalError as exc:  # a writer outside the gate
                if not driver.is_busy(exc):
                    raise
                self._waiting(lambda: conn.execute(Q.begin_write), deadline, exc)
        except BaseException:
            self._gate.release()
            raise

    def end_write(self) -> None:
        if self._gate is not None:
            self._gate.release()

    # --- checkpoints -------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """Run a passive checkpoint now; DB-API errors leave as sqlq errors."""
        with self._holding_lock(), self._guard():
            return self._checkpoint(self._connection())

    def _checkpoint(self, conn: Any) -> Checkpoint:
        self._commits = 0
        busy, frames, copied = conn.execute(Q.checkpoint_passive).fetchone()
        result = Checkpoint(bool(busy), frames, copied, self.wal_bytes())
        self.last_checkpoint = result
        return result

    def _after_commit(self, conn: Any) -> None:
        """After every WAL_CHECK_EVERY-th commit, still holding the gate: a checkpoint
        whose outcome is looked at, if the -wal file is past the limit.  Never raises:
        the call has succeeded; a failed checkpoint leaves the log to the next one.

        The gate keeps other sqlq writers out while it runs, so it can copy the
        whole log, and the next writer then starts the log over from its beginning
        (truncating the file to journal_size_limit).  Run outside the gate, with
        several processes writing, some commit always lands during the checkpoint,
        the log never starts over, and the -wal file grows without bound."""
        if (self.wal_bytes() or 0) > self.wal_limit:
            self._checkpoint_logged(conn)

    def _checkpoint_logged(self, conn: Any) -> None:
        try:
            self._checkpoint(conn)
        except Exception as exc:  # an I/O error, a full disk: the WAL keeps the data
            self.checkpoint_failures += 1
            error = self._translated(exc) if isinstance(exc, driver.dbapi.Error) else exc
            log.warning("checkpoint of %s failed, retried later: %s", self.path, error)

    def wal_bytes(self) -> int | None:
        return files.wal_bytes(self.path)

    def storage_facts(self) -> StorageFacts:
        return StorageFacts(wal_bytes=self.wal_bytes())

    def subscribe(self, queue: str, callback: Callable[[], None]) -> None:
        """Nothing is announced: SQLite has no way to tell other processes (they
        poll ``ready()``, a read that takes no lock)."""
        return None

    def clock_reference(self) -> float | None:
        """The kernel's time (see sqlq.clock); where it cannot be read directly, the
        time the kernel stamps on the gate file, which every process of the
        database touches alike."""
        return kernel_time(self.path + ".sqlq-gate")

    def _waiting(
        self, attempt: Callable[[], T], deadline: float, error: BaseException | None = None
    ) -> T:
        """``attempt()``, retried with short randomised pauses while SQLite says busy
        (a writer that does not take the gate holds the lock), until ``deadline``
        (or an interrupt_waits cutoff).  ``error``: the busy error of a first
        attempt the caller already made."""
        pause = WAIT_MIN
        while True:
            if error is not None:  # busy: pause (randomised, growing), then try again
                now = time.monotonic()
                if now >= deadline:
                    raise error
                if now >= self._cutoff:
                    raise self._busy("a writer outside sqlq held SQLite's lock") from error
                time.sleep(pause * (0.5 + self._rng.random()))
                pause = min(pause * 2, WAIT_MAX)
            try:
                return attempt()
            except driver.dbapi.OperationalError as exc:
                if not driver.is_busy(exc):
                    raise
                error = exc

    # --- inspection and maintenance ---------------------------------------------------

    def describe(self) -> str:
        return driver.describe()

    def schema_versions(self) -> SchemaVersions:
        return SchemaVersions(self.schema_found, self.schema_version, latest_version())

    def overview(self, with_names: bool) -> dict[str, QueueOverview]:
        return self._read(lambda conn: in_snapshot(conn, Q, Q.begin_read, _overview, with_names))

    def compact(self) -> Compaction:
        """VACUUM (it rewrites the whole file, holding the write lock), then a checkpoint
        that moves the result into the file and truncates the -wal file to nothing, so
        the space comes back to the file system.  The sizes count both files."""
        before = self._size()
        with self._holding_lock() as deadline, self._guard():
            conn = self._connection()
            self._waiting(lambda: conn.execute(Q.vacuum), deadline)
            self._waiting(lambda: conn.execute(Q.checkpoint_truncate).fetchall(), deadline)
        return Compaction(before, self._size())

    def _size(self) -> int:
        names = (self.path, self.path + "-wal")
        return sum(os.path.getsize(name) for name in names if os.path.exists(name))

    def backup(self, dest: str) -> int:
        """VACUUM INTO a new file beside ``dest`` (one read transaction: writers go on;
        the copy is compact, a single file in rollback-journal mode, with the
        database's permissions), flushed to disk and renamed over ``dest``."""
        dest = os.path.abspath(dest)
        self._check_replaceable(dest)
        partial = f"{dest}.sqlq-backup-{os.getpid()}"
        files.create_database_file(partial, self.file_mode)  # VACUUM INTO fills an empty file
        try:
            self._read(lambda conn: conn.execute(Q.vacuum_into, {"dest": partial}))
            _fsync(partial)
            os.replace(partial, dest)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
        _fsync(os.path.dirname(dest))  # the rename itself
        return os.path.getsize(dest)

    def _check_replaceable(self, dest: str) -> None:
        """Refuse (unchanged) a ``dest`` that a backup must not replace: the database
        itself, a database with a -wal file beside it (open as a queue, or not closed
        cleanly), and anything but an empty file or a sqlq database."""
        if not os.path.exists(dest):
            return
        if os.path.samefile(dest, self.path):
            raise InvalidArgument(f"{dest}: is the database itself")
        if os.path.exists(dest + "-wal"):
            raise InvalidArgument(
                f"{dest}-wal exists: {dest} is open as a queue, or was not closed cleanly; "
                "not replacing it"
            )
        if os.path.getsize(dest) > 0:  # refuses anything but a sqlq database, unchanged
            SqliteBackend(dest, migrate=False, busy_timeout=self.busy_timeout).close()

    # --- the dashboard: reads only ------------------------------------------------------

    def browse(self, where: Browse) -> list[Found]:
        statement = Q.browse_newest if where.order == "newest" else Q.browse_line
        return self._read(lambda conn: _browsed(conn, statement, where.params()))


class SqliteTransaction(SqlCalls):
    """One call's transaction and statements; see sqlq.backend.Transaction.

    A class-based context manager (not a generator) because it is on the hot
    path of every call.  On entry it takes the backend's lock, begins the write
    transaction (or a savepoint in the caller's) and reads the clock and whether
    anything is due in one statement (the due events in a second one, only when
    something is), then calls ``opened`` if something is due or the call's time
    was behind the mark; on exit it stores the clock and commits, or rolls back.
    DB-API errors leave as sqlq errors, the original as the cause.
    """

    __slots__ = (
        "_backend",
        "_conn",
        "_counter",
        "_cur",
        "_external",
        "_keys_made",
        "_locked",
        "_opened",
        "_plain",
        "_stored_counter",
        "events",
        "groups",
        "mark",
        "now",
        "paused",
        "queue",
    )

    q = Q
    task_row = staticmethod(_task_row)

    def __init__(
        self,
        backend: SqliteBackend,
        now: Number | None,
        queue: str,
        external: Any,
        opened: Opened,
        one_write: bool = False,
    ) -> None:
        self._backend = backend
        self.now: Number = time.time() if now is None else now  # (Queue gives it)
        self._plain = one_write  # claims nothing: open_plain_call
        self.queue = queue
        self._external = external
        self._opened = opened
        self._conn: Any = None
        self._cur: Any = None  # the cursor every statement of the call runs on
        self._locked = False
        self._keys_made = False
        self.events: list[tuple[Number, int, TaskRow]] = []

    def __enter__(self) -> SqliteTransaction:
        backend = self._backend
        try:
            if self._external is None:
                deadline = time.monotonic() + backend.busy_timeout
                if not backend._lock.acquire(False):
                    backend.wait_for_lock(deadline)
                self._locked = True
                self._conn = backend._conn or backend._connection()
                self._cur = backend._cursor
                backend.begin_write(self._cur, deadline)
            else:
                self._conn = backend._external_connection(self._external)
                self._cur = self._conn.cursor()
                self._cur.execute(Q.savepoint)
            cur = self._cur
            asked = self.now
            known = backend.schema_version
            if self._plain:  # the group and pause bits unknown (None): see _flags
                mark, counter, due = cur.execute(
                    Q.open_plain_call, (self.queue, asked, known)
                ).fetchone()
                self.groups: int | None = None
                self.paused: int | None = None
            else:
                mark, counter, flags = cur.execute(
                    Q.open_call, (self.queue, asked, known)
                ).fetchone()
                due = flags & 9  # (the bits as they are: only their truth is asked)
                self.groups = flags & 2  # the queue has grouped tasks not finished
                self.paused = flags & 4  # its claims find nothing
            self.mark: Number = mark
            self._counter: int = counter
            self._stored_counter = counter
            if due or asked < mark:
                if due & 8:  # the file was migrated under this process
                    raise backend.schema_changed(cur.execute(Q.schema_stamp).fetchone()[0])
                if asked < mark:
                    self.now = mark
                if due:
                    rows = cur.execute(Q.due_events, (self.queue, self.now)).fetchall()
                    self.events = [(row[0], row[1], event_row(row)) for row in rows]
                self._opened(self, asked)
        except BaseException as exc:
            self._fail(exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            self._fail(exc)
        cur = self._cur
        try:
            moved = self.now != self.mark or self._counter != self._stored_counter
            if moved and cur.execute(Q.write_clock, (self.now, self._counter)).rowcount != 1:
                raise InvariantViolation("the database clock or counter would have gone down")
            cur.execute(Q.commit if self._external is None else Q.release_savepoint)
        except BaseException as error:
            self._fail(error)
        self._unlock(committed=True)

    def _fail(self, exc: BaseException) -> NoReturn:
        """Undo the call and raise: a DB-API error as its sqlq error, the cause kept."""
        if not isinstance(exc, driver.dbapi.Error):
            self._abort()
            raise exc
        try:
            self._abort(unlock=False)
            if self._external is None:
                error = self._backend._translated(exc)
            else:  # the caller's connection is the caller's to close
                error = driver.translate(exc, self._backend.path)
        finally:
            self._unlock()
        raise error from exc

    def _abort(self, unlock: bool = True) -> None:
        """Undo the call.  SQLite may have rolled back already (e.g. on SQLITE_FULL); a
        blind ROLLBACK would then raise a second, misleading error."""
        conn, cur = self._conn, self._cur
        try:
            if conn is not None and conn.in_transaction:
                with suppress(driver.dbapi.Error):
                    if self._external is None:
                        cur.execute(Q.rollback)
                    else:
                        cur.execute(Q.rollback_to_savepoint)
                        cur.execute(Q.release_savepoint)
        finally:
            if unlock:
                self._unlock()

    def _unlock(self, committed: bool = False) -> None:
        """Give up the gate and the backend's lock, if this call holds them (after a
        commit, checkpointing in between when one is due)."""
        if self._locked:
            self._locked = False
            backend = self._backend
            try:
                if committed:
                    backend._commits += 1
                    if backend._commits % WAL_CHECK_EVERY == 0:
                        backend._after_commit(self._conn)
            finally:
                try:
                    backend.end_write()
                finally:
                    backend._lock.release()

    @property
    def _cursor(self) -> Any:
        return self._cur

    def _figures(self, cur: Any, queue: str) -> Figures:
        return _figures(cur, queue)

    def _next_id(self) -> int:
        self._counter += 1
        return self._counter

    def insert(
        self,
        queue: str,
        task_id: str,
        max_attempts: int,
        retry: Retry,
        payload: Encoded,
        run_at: Number | None,
        name: str | None,
        *,
        priority: int = 0,
        aging: float = DEFAULT_AGING,
        group: str | None = None,
    ) -> bool:
        if group is not None:
            self._grouping()
        if run_at is None and group is None and priority == 0:
            plain = (queue, task_id, self._counter + 1, max_attempts,
                     "" if payload is None else payload, retry.kind, retry.base, retry.cap,
                     self.now, name or "", aging)  # fmt: skip
            if self._cur.execute(Q.insert_plain_task, plain).rowcount != 1:
                return False
            self._counter += 1
            return True
        state = "AVAILABLE" if run_at is None else "WAITING"
        row = (queue, task_id, state, self._counter + 1, max_attempts, run_at or 0,
               "" if payload is None else payload, retry.kind, retry.base, retry.cap,
               self.now, name or "", priority, aging, group or "")  # fmt: skip
        if self._cur.execute(Q.insert_task, row).rowcount != 1:
            return False
        self._counter += 1
        return True

    def _flags(self) -> None:
        """Bits 2 and 4 of open_call, for a call opened as one that claims nothing (none
        of sqlq's does claim; this keeps a claim right if one ever did)."""
        flags = self._cur.execute(Q.queue_flags, (self.queue,)).fetchone()[0]
        self.groups, self.paused = flags & 2, flags & 4

    def _grouping(self) -> None:
        """Before a grouped task is added: the triggers that keep its group's row (the
        on-demand migration the first such add of the file applies, see
        migrations/on_demand/0001), and the claims of this call take the statements
        that know groups.  Asked once per backend object once they are there for good
        (as _keying), and not when the queue has groups in use (open_call's bit 2)."""
        if self.groups:
            return
        backend = self._backend
        if not backend.grouped:
            there = apply_on_demand(self._cur, GROUP_TRIGGERS)
            backend.grouped = there and self._external is None
        self.groups = True

    def _keying(self) -> None:
        """Before a statement that uses a dedupe key: the keys' indexes (the on-demand
        migration the first keyed add of the file applies, see migrations/on_demand/
        0002).  Asked once per backend object once they are there for good."""
        backend = self._backend
        if not backend.keyed and not self._keys_made:
            # Made by this call, or by an earlier call of the caller's transaction (conn=),
            # they go if it rolls back: asked again by the next call.
            there = apply_on_demand(self._cur, KEY_INDEXES)
            backend.keyed = there and self._external is None
            self._keys_made = not there

    def insert_many(
        self,
        queue: str,
        batch: list[tuple[str, Encoded, str | None]],
        max_attempts: int,
        retry: Retry,
        run_at: Number | None,
        *,
        priority: int = 0,
        aging: float = DEFAULT_AGING,
        group: str | None = None,
    ) -> list[bool]:
        """One insert_batch of the whole batch when every id in it is new (the usual
        case); otherwise that is undone, the new ids are found first, and
        insert_task runs for them alone, so that only they take counter values."""
        if group is not None and batch:
            self._grouping()
        rule = (priority, aging, group)
        if batch and self._insert_batch(queue, batch, max_attempts, retry, run_at, rule):
            return [True] * len(batch)
        ids = json.dumps([item[0] for item in batch])
        seen = {row[0] for row in self._cur.execute(Q.existing_ids, {"queue": queue, "ids": ids})}
        group_text = group or ""  # insert_task takes no None
        added: list[bool] = []
        rows: list[tuple[Any, ...]] = []
        state = "AVAILABLE" if run_at is None else "WAITING"
        kind, base, cap, now = retry.kind, retry.base, retry.cap, self.now
        seq = self._counter
        for task_id, payload, name in batch:  # insert_task's parameters, built inline
            new = task_id not in seen
            added.append(new)
            if new:
                seen.add(task_id)
                seq += 1
                rows.append((queue, task_id, state, seq, max_attempts, run_at or 0,
                             "" if payload is None else payload, kind, base, cap, now,
                             name or "", priority, aging, group_text))  # fmt: skip
        self._counter = seq
        if rows:
            self._cur.executemany(Q.insert_task, rows)
        return added

    def _insert_batch(
        self,
        queue: str,
        batch: list[tuple[str, Encoded, str | None]],
        max_attempts: int,
        retry: Retry,
        run_at: Number | None,
        rule: tuple[int, float, str | None],
    ) -> bool:
        """insert_batch, kept if it added every task; False (and nothing changed) if
        some id was not new, or a payload is bytes, which JSON cannot carry.
        ``rule``: (priority, aging, group_key)."""
        pairs = any(payload is not None or name is not None for _, payload, name in batch)
        try:
            items = json.dumps(batch if pairs else [item[0] for item in batch])
        except TypeError:  # bytes
            return False
        state = "AVAILABLE" if run_at is None else "WAITING"
        params = (queue, items, state, self._counter, max_attempts, run_at,
                  retry.kind, retry.base, retry.cap, self.now, pairs, *rule)  # fmt: skip
        cur = self._cur
        cur.execute(Q.savepoint_batch)
        added: bool = cur.execute(Q.insert_batch, params).rowcount == len(batch)
        if added:
            self._counter += len(batch)
        else:
            cur.execute(Q.rollback_to_batch)
        cur.execute(Q.release_batch)
        return added

    def claim_many(self, queue: str, n: int, seconds: Number, fair: bool = False) -> list[Claimed]:
        if self.paused is None:
            self._flags()
        if self.paused:
            return []
        if self.groups:  # one at a time: each claim may use up a group's slot or rate
            return claim_each(lambda: self.claim(queue, seconds, fair), n)
        cur, now, base = self._cur, self.now, self._counter
        found = cur.execute(Q.claim_front_many, (queue, n)).fetchall()
        if not found:
            return []
        params = (queue, len(found), base, time_after(now, seconds), now)
        if cur.execute(Q.take_front, params).rowcount != len(found):
            raise InvariantViolation("tasks found AVAILABLE at the front were not all taken")
        self._counter = base + len(found)
        return [(task_id, base + k, attempts, payload, name)
                for k, (_, task_id, attempts, payload, name) in enumerate(found, 1)]  # fmt: skip

    def complete_many(self, queue: str, items: list[Completion]) -> int:
        now = self.now
        if all(result is None for _, _, result in items):
            plain = [(queue, task_id, token or 0, now) for task_id, token, _ in items]
            return int(self._cur.executemany(Q.complete_task, plain).rowcount)
        rows = [(queue, task_id, token or 0, now, result or "") for task_id, token, result in items]
        return int(self._cur.executemany(Q.complete_task_with_result, rows).rowcount)

    def claim(self, queue: str, seconds: Number, fair: bool = False) -> Claimed | None:
        if self.paused is None:
            self._flags()
        if self.paused:
            return None
        cur, now = self._cur, self.now
        if self.groups:
            row = cur.execute(Q.claim_grouped, (queue, now, fair)).fetchone()
        else:
            row = cur.execute(Q.claim_front, (queue,)).fetchone()
        if row is None:
            return None
        row_id, task_id, attempts, payload, name = row
        token = self._counter + 1
        params = (row_id, token, time_after(now, seconds), now)
        if cur.execute(Q.take_task, params).rowcount != 1:
            raise InvariantViolation(f"task {task_id!r} was found AVAILABLE, then not taken")
        self._counter = token
        return task_id, token, attempts, payload, name

    def lease(self, queue: str, task_id: str, token: int | None) -> TaskRow | None:
        """get, checked: the write lock holds the row for the rest of the call."""
        task = self.get(queue, task_id)
        if task is None or task.state is not State.RESERVED:
            return None
        if token is not None and task.token != token:
            return None
        return task if task.deadline is not None and task.deadline > self.now else None

    def complete(
        self, queue: str, task_id: str, token: int | None, result: str | None = None
    ) -> bool:
        if result is None:
            params: tuple[object, ...] = (queue, task_id, token or 0, self.now)
            return bool(self._cur.execute(Q.complete_task, params).rowcount == 1)
        params = (queue, task_id, token or 0, self.now, result)
        return bool(self._cur.execute(Q.complete_task_with_result, params).rowcount == 1)

    def end_lease(
        self,
        task: TaskRow,
        state: State,
        at: Number,
        error: str | None,
        run_at: Number | None = None,
        attempts_delta: int = 0,
    ) -> int:
        """Returns the task's new seq (line position or wake-up order)."""
        seq = self._next_id() if state in (State.AVAILABLE, State.WAITING) else task.seq
        params = {
            "id": task.row_id,
            "token": task.token,
            "state": state.value,
            "seq": seq,
            "run_at": run_at,
            "attempts_delta": attempts_delta,
            "error": error,
            "finished_at": at if state in FINISHED else None,
            "at": at,
            "now": self.now,
        }
        self._expect_one(Q.end_lease, params, task, "RESERVED under its lease")
        return seq

    def extend(self, queue: str, task_id: str, token: int, seconds: Number) -> bool | None:
        cur, now = self._cur, self.now
        params = (queue, task_id, token, time_after(now, seconds), now)
        if cur.execute(Q.extend_lease, params).rowcount != 1:
            return None
        return bool(cur.execute(Q.stop_asked, (queue, task_id)).fetchone()[0])

    def wake(self, task: TaskRow, order: int, at: Number) -> None:
        params = {
            "id": task.row_id,
            "order": order,
            "seq": self._next_id(),
            "at": at,
            "now": self.now,
        }
        self._expect_one(Q.wake_task, params, task, "WAITING")

    def redrive(self, row_ids: list[int]) -> int:
        moved = 0  # (one writer at a time: the groups need no order)
        for row_id in row_ids:
            params = {"id": row_id, "seq": self._counter + 1, "now": self.now}
            self._cur.execute(Q.remake_group, params)
            if self._cur.execute(Q.redrive_task, params).rowcount == 1:
                self._next_id()
                moved += 1
        return moved

    def dead_ids(self, queue: str, limit: int) -> list[tuple[int, str]]:
        rows = self._cur.execute(Q.dead_ids, {"queue": queue, "limit": limit}).fetchall()
        return [(row_id, task_id) for row_id, task_id in rows]

    def forget_groups(self, queue: str, after: str, batch: int) -> tuple[int, str | None]:
        params = {"queue": queue, "after": after, "batch": batch, "now": self.now}
        last, seen = self._cur.execute(Q.group_span, params).fetchone()
        if not seen:
            return 0, None
        forgotten = int(self._cur.execute(Q.forget_groups, {**params, "last": last}).rowcount)
        return forgotten, last if seen == batch else None

    def progress(
        self, queue: str, task_id: str, token: int, value: float | None, message: str | None
    ) -> bool:
        params = {
            "queue": queue,
            "task_id": task_id,
            "token": token,
            "value": value,
            "message": message,
            "now": self.now,
        }
        return bool(self._cur.execute(Q.report_progress, params).rowcount == 1)

    def key_holder(self, queue: str, key: str, cutoff: Number | None) -> Holder | None:
        self._keying()
        row = self._cur.execute(Q.key_holder, (queue, key, cutoff)).fetchone()
        return None if row is None else Holder(row[0], row[1], State(row[2]), row[3])

    def insert_keyed(
        self,
        queue: str,
        task_id: str,
        key: str,
        max_attempts: int,
        retry: Retry,
        payload: Encoded,
        run_at: Number | None,
        name: str | None,
        *,
        priority: int = 0,
        aging: float = DEFAULT_AGING,
        group: str | None = None,
    ) -> bool:
        if group is not None:
            self._grouping()
        # (the keys' indexes are there: key_holder, asked first in the call, made them)
        state = "AVAILABLE" if run_at is None else "WAITING"
        row = (queue, task_id, state, self._counter + 1, max_attempts, run_at, payload,
               retry.kind, retry.base, retry.cap, self.now, name, priority, aging, group,
               key)  # fmt: skip
        if self._cur.execute(Q.insert_keyed_task, row).rowcount != 1:
            return False
        self._counter += 1
        return True

    def debounce(self, holder: Holder, payload: Encoded, run_at: Number | None) -> bool:
        stays = run_at is None and holder.state is State.AVAILABLE  # its place in the line
        params = {
            "id": holder.row_id,
            "state": holder.state.value,
            "seen": holder.seq,
            "seq": holder.seq if stays else self._counter + 1,
            "run_at": run_at,
            "payload": payload,
            "now": self.now,
        }
        if self._cur.execute(Q.debounce_task, params).rowcount != 1:
            return False
        if not stays:
            self._counter += 1
        return True

    def _expect_one(self, sql: str, params: dict[str, Any], task: TaskRow, was: str) -> None:
        if self._cur.execute(sql, params).rowcount != 1:
            raise InvariantViolation(f"task {task.task_id!r} was no longer {was}")


def _figures(cur: Any, queue: str) -> Figures:
    """The figures of Queue.stats, read with ``cur`` (in a transaction: one snapshot)."""
    counts = dict.fromkeys((s.value for s in State), 0)
    counts.update(dict(cur.execute(Q.count_queue_states, {"queue": queue}).fetchall()))
    (paused,) = cur.execute(Q.queue_paused, {"queue": queue}).fetchone()
    return counts, *_fronts(cur, queue), bool(paused)


def _fronts(cur: Any, queue: str) -> tuple[Number | None, Number | None, Number | None]:
    """When the front of the queue's line became AVAILABLE, its next deadline and its
    next run_at (each None if there is none)."""
    params = {"queue": queue}
    front = cur.execute(Q.front_of_line, params).fetchone()
    (deadline,) = cur.execute(Q.next_deadline, params).fetchone()
    (run_at,) = cur.execute(Q.next_run_at, params).fetchone()
    return None if front is None else front[0], deadline, run_at


def _overview(cur: Any, with_names: bool) -> dict[str, QueueOverview]:
    """SqliteBackend.overview, read with ``cur`` (in a transaction: one snapshot)."""
    states = _counted(cur)
    names = cur.execute(Q.count_names).fetchall() if with_names else []
    paused = [queue for (queue,) in cur.execute(Q.paused_queues).fetchall()]
    return overviews(states, names, lambda queue: _fronts(cur, queue), paused)


def _counted(cur: Any) -> list[tuple[str, str, int]]:
    """(queue, state, count) of every task, through the indexes when they account for
    every task (a state of a newer schema that none of them covers: row by row)."""
    states: list[tuple[str, str, int]] = cur.execute(Q.count_states_by_index).fetchall()
    (total,) = cur.execute(Q.count_tasks).fetchone()
    if sum(count for _, _, count in states) != total:
        states = cur.execute(Q.count_states).fetchall()
    return states


def _browsed(conn: Any, statement: str, params: dict[str, Any]) -> list[Found]:
    """The tasks a browse statement finds (one statement: one snapshot)."""
    cur = conn.execute(statement, params)
    columns = [d[0] for d in cur.description]
    return [task_row(columns, row) for row in cur.fetchall()]


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
