"""The PostgreSQL backend: many machines, one database server, calls that run
concurrently.

SQLAlchemy (its psycopg dialect and pool) makes the connections; the calls run
the named statements of queries.sql through psycopg on a connection the backend
holds, with no ORM or expression compilation on the hot path.

Concurrency model:

* Between processes: calls run at once.  Claims take the front of the line
  ``FOR UPDATE SKIP LOCKED`` (a row another call is claiming is passed over);
  every completion, failure and heartbeat is a compare-and-set on (state, token)
  *and* ``deadline > now``, so a lease that ran out is refused whether or not a
  call has applied its expiry yet.  Due events (expired leases, WAITING tasks
  whose time came) are applied inside the calls, as on SQLite, by whichever call
  wins the queue's transaction-scoped advisory lock (tried only when a probe of
  the partial indexes finds something due); the others go on without waiting.
* ``strict=True``: every call first takes that advisory lock and waits for it,
  so a queue's calls run one at a time and answer exactly as SQLite's would.
* Within a process: one connection per backend object, calls serialised by a
  lock (a Queue can be shared by threads).
* Time: the server's clock when the caller gives none (one clock for every
  machine), else the caller's ``now``, never below the high-water mark, as on
  SQLite.  Calls at the server's time keep the mark at most MARK_LAG behind it.
* A lost connection (server restart, ``pg_terminate_backend``, a pooler's
  timeout) raises :class:`sqlq.errors.Unavailable` from the call that saw it; the
  next call connects again.  A call that finds its idle connection dead before
  anything was sent connects again at once and goes on.
* Across ``fork``: the child never uses (nor closes: that would end the parent's
  session) a connection it inherited; it opens its own on first use.
"""

from __future__ import annotations

import math
import os
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from operator import itemgetter
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import sqlalchemy as sa

from ..backend import Claimed, Figures, Holder, Opened, TaskRow, claim_each
from ..browse import Browse, Found, task_row
from ..contract import (
    DEFAULT_AGING,
    FINISHED,
    MAX_TIME,
    Completion,
    Number,
    State,
)
from ..errors import (
    Busy,
    InvalidArgument,
    InvalidConfig,
    InvariantViolation,
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
from . import driver
from .driver import psycopg
from .listen import Listener, channel
from .migrate import check_schema, ensure_schema, latest_version
from .queries import Q
from .text import read, read_or_none, stored, stored_or_none

T = TypeVar("T")

#: How far (seconds) the high-water mark may lag behind the server's clock: calls
#: that take the server's time raise it only when it is further behind, so that
#: a caller's own clock (``Queue(clock=...)``) or ``now`` is never more than this
#: behind the server's time of earlier calls.
MARK_LAG = 1.0

#: The least time (seconds) the server lets the queue's own session sit idle inside
#: a transaction before it ends the session (idle_in_transaction_session_timeout:
#: busy_timeout, or this if longer).  sqlq's calls never pause between statements.
IDLE_IN_CALL_MIN = 5.0

#: The unique index that lets one task of a queue hold a dedupe key (migration 0006).
KEY_HOLDER_INDEX = "sqlq_tasks_key_holder"

#: Connections a forked child inherited open: kept referenced, never closed there
#: (closing one would end the parent's session on the server).
_inherited: list[Any] = []
_live_backends: weakref.WeakSet[PostgresBackend] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for backend in list(_live_backends):
        backend._start_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def engine_url(url: str) -> sa.engine.URL:
    """The SQLAlchemy URL for psycopg 3 of a ``postgresql://`` (or
    ``postgresql+psycopg://``) URL; other drivers are refused."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise InvalidConfig(f"not a database URL: {url!r}") from exc
    if parsed.get_backend_name() != "postgresql" or parsed.get_driver_name() not in (
        "psycopg",
        "psycopg2",  # what SQLAlchemy calls a URL without a driver
    ):
        raise InvalidConfig(
            f"{shown(parsed)}: sqlq talks to PostgreSQL "
            "through psycopg 3; use a postgresql:// or postgresql+psycopg:// URL"
        )
    if "+" in parsed.drivername and parsed.get_driver_name() != "psycopg":
        raise InvalidConfig(f"{parsed.drivername}: sqlq uses psycopg 3 (postgresql+psycopg://)")
    return parsed.set(drivername="postgresql+psycopg")


def shown(url: sa.engine.URL) -> str:
    """The URL as messages show it: without its password, the user's or a ``password``
    query parameter (which libpq takes too)."""
    if "password" in url.query:
        url = url.update_query_dict({"password": "***"})
    return url.render_as_string(hide_password=True)


#: The migration that made sqlq_settings (a queue's stored settings).
SETTINGS_SINCE = 11


def _task_row(row: tuple[Any, ...]) -> TaskRow:
    (row_id, task_id, state, attempts, max_attempts, token, seq, kind, base, cap, deadline,
     run_at, payload, payload_bytes, error, created, updated, finished, name,
     stop, result, progress, message, key, priority, group) = row  # fmt: skip
    return TaskRow(
        row_id, read(task_id), State(state), attempts, max_attempts, token, seq,
        stored_policy(kind, base, cap), deadline, run_at,
        payload if payload_bytes is None else payload_bytes, read_or_none(error),
        created, updated, finished, name, stop, result, progress, message, group,
        key, priority,
    )  # fmt: skip


class PostgresBackend(SqlReads):
    """A PostgreSQL database (the first schema of its search_path) holding queues."""

    keeps_time = True
    q = Q
    stored = staticmethod(stored)
    task_row = staticmethod(_task_row)
    settings_since = SETTINGS_SINCE

    def __init__(
        self,
        url: str,
        *,
        strict: bool = False,
        synchronous: str = "full",
        busy_timeout: float = 30.0,
        migrate: bool = True,
        listen: bool = True,
        force_migration: bool = False,
    ) -> None:
        """Open (and by default create or migrate) sqlq's tables in the database.

        ``synchronous``: "full" waits for the server's WAL flush at each commit
        (``synchronous_commit = on``); "normal" does not (``off``: a server crash
        may lose the last commits, never corrupt).  ``busy_timeout``: seconds a
        call may wait for a lock (``lock_timeout``), then Busy.  ``listen``: hear
        announcements of new tasks (LISTEN, which needs a session of its own: False
        behind a pooler in transaction mode; workers then poll).  A migration is
        refused (WorkersRunning) while live workers of an older schema run, unless
        ``force_migration``.
        """
        if not isinstance(url, str):
            raise InvalidConfig(f"expected a postgresql:// URL, not {type(url).__name__}")
        for flag, value in (
            ("strict", strict),
            ("listen", listen),
            ("migrate", migrate),
            ("force_migration", force_migration),
        ):
            if not isinstance(value, bool):
                raise InvalidConfig(f"{flag} must be True or False, not {value!r}")
        if synchronous not in ("full", "normal"):
            raise InvalidConfig(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise InvalidConfig("busy_timeout must be a number of seconds")
        if not 0 < busy_timeout <= 86400:
            raise InvalidConfig(f"busy_timeout must be in (0, 86400], got {busy_timeout}")
        parsed = engine_url(url)
        self._name = shown(parsed)
        self.strict = strict
        self.synchronous = synchronous
        self.busy_timeout = float(busy_timeout)
        # pool_pre_ping: a connection of queue.engine that the server closed meanwhile
        # (a restart, idle_session_timeout) is replaced before the caller's transaction
        # uses it; the queue's own connection is checked out once and reconnects itself.
        self._engine = sa.create_engine(parsed, pool_size=2, max_overflow=8, pool_pre_ping=True)
        sa.event.listen(self._engine, "connect", self._on_connect)
        self._idle_limit_ms = int(max(self.busy_timeout, IDLE_IN_CALL_MIN) * 1000)
        self._lock = threading.Lock()
        self._cancelling = threading.Lock()  # held while a cancel is being sent
        self._fairy: Any = None  # SQLAlchemy's wrapper, owning the psycopg connection
        self._conn: Any = None
        self._cursor: Any = None
        self._poller: Any = None
        self._schema: str = ""
        self._closed = False
        self._cutoff = math.inf  # waits end by this time.monotonic() (interrupt_waits)
        self._in_call = False
        self.listen = listen
        self._listener: Listener | None = None
        self._channels: dict[str, str] = {}
        _live_backends.add(self)
        try:
            with self._lock, self._guard():
                conn = self._connection()
                if migrate:
                    self.schema_found = ensure_schema(conn, self._name, force_migration)
                    self.schema_version = latest_version()
                else:
                    self.schema_found = self.schema_version = check_schema(conn, self._name)
                (self._schema,) = conn.execute(Q.current_schema).fetchone()
        except BaseException:
            self.close()
            raise

    # --- connections --------------------------------------------------------------

    def _on_connect(self, dbapi_conn: Any, _record: Any) -> None:
        """Every connection of the engine (the queue's and queue.engine's): waits for
        a lock end after busy_timeout; commits wait for the flush or not."""
        dbapi_conn.autocommit = True
        try:
            dbapi_conn.execute(
                "SELECT set_config('lock_timeout', %s, false), "
                "set_config('synchronous_commit', %s, false)",
                (
                    f"{int(self.busy_timeout * 1000)}ms",
                    "on" if self.synchronous == "full" else "off",
                ),
            )
        finally:
            dbapi_conn.autocommit = False

    def _connection(self) -> Any:
        if self._conn is None:
            if self._closed:
                raise QueueClosed(f"{self._name}: the queue is closed")
            try:
                self._fairy = self._engine.raw_connection()
            except psycopg.Error as exc:  # the pool's connect raises psycopg's own errors
                raise driver.translate(exc, self._name, connecting=True) from exc
            self._conn = self._fairy.driver_connection
            self._conn.autocommit = True  # sqlq sends BEGIN and COMMIT itself
            # The transactions psycopg begins (the migrations') are READ COMMITTED too,
            # as Q.begin's are, whatever default_transaction_isolation the user set.
            self._conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
            # A process frozen inside a call (SIGSTOP, a debugger) would hold its rows
            # and the queue's turn for expiries: the server ends its session after this.
            self._conn.execute(Q.limit_idle_in_transaction, {"ms": self._idle_limit_ms})
            self._cursor = self._conn.cursor()
            self._poller = select.poll()  # see send_first
            self._poller.register(self._conn.fileno(), select.POLLIN)
        return self._conn

    def _disconnect(self) -> None:
        """Drop the connection (after it broke): the next call makes a new one."""
        self._cursor = None
        if self._fairy is not None:
            with suppress(Exception):
                self._fairy.invalidate()
        self._fairy = self._conn = None

    def _start_in_child(self) -> None:
        if self._listener is not None:  # its thread is the parent's: kept, never closed
            _inherited.append(self._listener)
            self._listener = None
        if self._fairy is not None:
            _inherited.append((self._fairy, self._conn, self._cursor))
            self._fairy = self._conn = self._cursor = None
        self._engine.dispose(close=False)
        self._lock = threading.Lock()
        self._cancelling = threading.Lock()

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            self._closed = True
            if self._fairy is not None:
                with suppress(Exception):
                    self._fairy.close()
            self._fairy = self._conn = self._cursor = None
            self._engine.dispose()
            _live_backends.discard(self)

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """psycopg errors raised inside as sqlq errors (the cause kept); a broken
        connection is dropped."""
        try:
            yield
        except psycopg.Error as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: BaseException) -> Exception:
        if self._conn is not None and self._conn.closed:
            self._disconnect()
        if self._cutoff <= time.monotonic() and getattr(exc, "sqlstate", None) == "57014":
            return Busy(
                f"{self._name}: the call was cut short by interrupt_waits (a stopping "
                "worker's grace period is over)"
            )
        return driver.translate(exc, self._name)

    # --- calls ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def engine(self) -> sa.Engine:
        return self._engine

    def transaction(
        self, now: Number | None, queue: str, external: Any, opened: Opened, one_write: bool = False
    ) -> PostgresTransaction:
        return PostgresTransaction(self, now, queue, external, opened, one_write)

    def _external_connection(self, external: Any) -> Any:
        if self._closed:
            raise QueueClosed(f"{self._name}: the queue is closed")
        if not isinstance(external, sa.Connection):
            raise InvalidArgument(
                f"conn must be a SQLAlchemy Connection, not {type(external).__name__}"
            )
        if shown(external.engine.url) != self._name:
            raise InvalidArgument(f"conn is not connected to the queue's database {self._name}")
        if not external.in_transaction():
            raise InvalidArgument("conn must be in an open transaction (with engine.begin())")
        conn: Any = external.connection.driver_connection
        if not isinstance(conn, psycopg.Connection):
            raise InvalidArgument("conn must use psycopg 3 (queue.engine does)")
        return conn

    def start_call(self, deadline: float) -> Any:
        """Take the thread lock (waiting until ``deadline``, a time.monotonic()) and
        make sure of a connection; returns its cursor.  end_call gives the lock back."""
        if not self._lock.acquire(True, max(0.0, deadline - time.monotonic())):
            raise Busy(f"{self._name}: other calls on this queue object held it")
        try:
            with self._cancelling, self._guard():  # (see _cancel_if_waiting)
                self._connection()
            self._in_call = True
        except BaseException:
            self._lock.release()
            raise
        return self._cursor

    def send_first(
        self, statement: str, params: dict[str, Any], begin: bool = False, commits: bool = False
    ) -> Any:
        """A call's first statement, after BEGIN in the same round trip if ``begin``.
        Returns the cursor, holding the statement's rows.

        If the server has started closing the connection while it sat idle (a
        restart, a timeout, pg_terminate_backend: it says so on the connection,
        where nothing else arrives between calls), a new one is made first.  Should
        the held one still turn out dead, the statements are sent again on a new
        connection, except one that ``commits`` on its own (a write in
        autocommit): that is never sent twice."""
        if self._poller.poll(0):
            self._disconnect()
            self._connection()
        if commits:
            return self._cursor.execute(statement, params)

        def send() -> Any:
            cur = self._cursor
            if not begin:
                return cur.execute(statement, params)
            with self._conn.pipeline():
                cur.execute(Q.begin)
                cur.execute(statement, params)
            return cur

        return self._on_live_connection(send)

    def _on_live_connection(self, attempt: Callable[[], T]) -> T:
        """``attempt()``, and once more on a new connection if the held one turns out
        to have died while idle (then nothing of the attempt reached the server)."""
        try:
            return attempt()
        except psycopg.OperationalError:
            if not self._conn.closed:
                raise
            self._disconnect()
            self._connection()
            return attempt()

    def end_call(self) -> None:
        self._in_call = False
        self._lock.release()

    def _read(self, attempt: Callable[[Any], T]) -> T:
        """A read outside any transaction (one statement: one snapshot), holding the
        thread lock."""
        self.start_call(time.monotonic() + self.busy_timeout)
        try:
            with self._guard():
                return self._on_live_connection(lambda: attempt(self._cursor))
        finally:
            self.end_call()

    def snapshot(self, queue: str) -> Figures:
        return self._read(lambda cur: _figures(cur, queue))

    def storage_facts(self) -> StorageFacts:
        return StorageFacts()  # no write-ahead log of its own: the server's is shared

    def checkpoint(self) -> Checkpoint:
        """Nothing to do: what committed is in the server's WAL, which the server
        checkpoints itself; there is no log of this database alone to copy."""
        return Checkpoint(busy=False, wal_frames=0, checkpointed=0, wal_bytes=None)

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls ``after`` seconds from now at the
        latest: a call still running then is cancelled on the server (it raises
        Busy and changes nothing).  None: waits last busy_timeout again."""
        if after is None:
            self._cutoff = math.inf
            return
        self._cutoff = time.monotonic() + after
        timer = threading.Timer(after, self._cancel_if_waiting)
        timer.daemon = True
        timer.start()

    def _cancel_if_waiting(self) -> None:
        # The server may signal the cancel to the session after the call it was meant
        # for has ended: a call starts only once the cancel is sent (see start_call),
        # so that it lands while the session waits for the next statement, where the
        # server ignores it, not on a statement of the next call.
        with self._cancelling:
            conn = self._conn
            if self._in_call and conn is not None and time.monotonic() >= self._cutoff:
                with suppress(Exception):
                    conn.cancel_safe(timeout=1.0)

    @property
    def schema(self) -> str:
        """The schema sqlq's tables are in (the first of the search_path on opening)."""
        return self._schema

    def channel(self, queue: str) -> str:
        found = self._channels.get(queue)
        if found is None:
            found = self._channels[queue] = channel(self._schema, queue)
        return found

    def subscribe(self, queue: str, callback: Callable[[], None]) -> Callable[[], None] | None:
        if not self.listen:
            return None
        with self._lock:
            if self._closed:
                raise QueueClosed(f"{self._name}: the queue is closed")
            if self._listener is None:
                self._listener = Listener(self._listening_connection, self._name)
        return self._listener.subscribe(self.channel(queue), callback)

    def _listening_connection(self) -> Any:
        """A connection of the listener's own, outside the pool (it stays in LISTEN)."""
        fairy = self._engine.raw_connection()
        conn: Any = fairy.driver_connection
        fairy.detach()
        conn.autocommit = True
        return conn

    def clock_reference(self) -> float | None:
        return None  # calls without a time take the server's clock: nothing to check

    # --- inspection and maintenance ----------------------------------------------------

    def describe(self) -> str:
        """'PostgreSQL 15.18 (psycopg 3.3.9)': the server's version and the driver's."""
        version = self._read(lambda cur: cur.connection.info.parameter_status("server_version"))
        return f"PostgreSQL {version or '?'} (psycopg {psycopg.__version__})"

    def schema_versions(self) -> SchemaVersions:
        return SchemaVersions(self.schema_found, self.schema_version, latest_version())

    def overview(self, with_names: bool) -> dict[str, QueueOverview]:
        return self._read(lambda cur: in_snapshot(cur, Q, Q.begin_snapshot, _overview, with_names))

    def compact(self) -> Compaction:
        """VACUUM FULL of sqlq_tasks; the sizes are the table's with its indexes."""

        def vacuum(cur: Any) -> Compaction:
            (before,) = cur.execute(Q.table_size).fetchone()
            cur.execute(Q.vacuum_full)
            (after,) = cur.execute(Q.table_size).fetchone()
            return Compaction(before, after)

        return self._read(vacuum)

    def backup(self, dest: str) -> int:
        raise InvalidConfig(
            f"{self._name}: a database on a server is not copied to a file by sqlq; back it "
            "up with the server's tools (pg_dump --table 'sqlq_*', or your backups of the "
            "whole database)"
        )

    # --- the dashboard: reads only ------------------------------------------------------

    def browse(self, where: Browse) -> list[Found]:
        statement = Q.browse_newest if where.order == "newest" else Q.browse_line
        params = where.params()
        params["prefix"] = stored_or_none(where.prefix)

        def page(cur: Any) -> list[Found]:
            cur.execute(statement, params)
            columns = [d.name for d in cur.description]
            return [task_row(columns, row, read) for row in cur.fetchall()]

        return self._read(page)


class PostgresTransaction(SqlCalls):
    """One call's transaction and statements; see sqlq.backend.Transaction.

    A call at the server's time in the default mode opens lazily: nothing is sent
    until its first statement.  If that is a write (insert, claim, complete,
    extend), the clock and the due check are folded into it (see queries.sql,
    _call): with nothing due it is the call's only round trip before COMMIT (a
    one-write call runs it in autocommit: its only round trip).  Anything else
    first (reading ``now``, ``mark`` or ``events``, another statement) opens the
    call as the other modes do: open_call, then the due events if any.
    """

    __slots__ = (
        "_announce",
        "_asked",
        "_autocommit",
        "_backend",
        "_callers_path",
        "_cur",
        "_events",
        "_external",
        "_locked",
        "_mark",
        "_now",
        "_one_write",
        "_opened",
        "_pending",
        "queue",
    )

    q = Q
    stored = staticmethod(stored)
    read_or_none = staticmethod(read_or_none)
    task_row = staticmethod(_task_row)

    def __init__(
        self,
        backend: PostgresBackend,
        now: Number | None,
        queue: str,
        external: Any,
        opened: Opened,
        one_write: bool = False,
    ) -> None:
        self._backend = backend
        self._asked = now
        self._one_write = one_write
        self._autocommit = False
        self._pending = False  # opened lazily, nothing sent yet
        self._callers_path = ""
        self._mark: Number = 0.0  # set once the call has read the clock
        self._now: Number = 0.0
        self.queue = queue
        self._external = external
        self._opened = opened
        self._cur: Any = None
        self._locked = False
        self._announce = False  # a task became AVAILABLE: NOTIFY before commit
        self._events: list[tuple[Number, int, TaskRow]] = []

    @property
    def now(self) -> Number:
        if self._pending:
            self._open()
        return self._now

    @property
    def mark(self) -> Number:
        if self._pending:
            self._open()
        return self._mark

    @property
    def events(self) -> list[tuple[Number, int, TaskRow]]:
        if self._pending:
            self._open()
        return self._events

    def __enter__(self) -> PostgresTransaction:
        backend = self._backend
        try:
            if self._external is not None:
                self._cur = backend._external_connection(self._external).cursor()
                self._cur.execute(Q.savepoint)
                row = self._cur.execute(Q.use_schema, {"schema": backend.schema}).fetchone()
                self._callers_path = row[0]
                self._open_with(self._cur)
                return self
            self._cur = backend.start_call(time.monotonic() + backend.busy_timeout)
            self._locked = True
            if self._asked is None and not backend.strict:
                self._pending = True  # see the class docstring
            else:
                self._cur = backend.send_first(Q.begin, {})
                self._open_with(self._cur)
        except BaseException as exc:
            self._fail(exc)
        return self

    def _open(self) -> None:
        """Open a lazy call whose first statement is no write of its own: open_call (in
        autocommit, for a one-write call: if nothing is due, its statements each run
        as a transaction of their own), then what ``_after_clock`` does."""
        self._pending = False
        backend = self._backend
        if not self._one_write:
            self._cur = backend.send_first(Q.begin, {})
            self._open_with(self._cur)
            return
        self._cur = backend.send_first(Q.open_call, self._call_params(None))
        mark, now, due, serial = self._cur.fetchone()
        if due is None:  # the database was migrated under this process
            self._changed()
        if not due and not serial and now <= mark + MARK_LAG:
            self._mark, self._now, self._autocommit = mark, now, True
            return
        self._cur.execute(Q.begin)
        if serial:  # the turn open_call took ended with it: taken again, first
            self._cur.execute(Q.lock_queue, {"queue": self.queue})
        self._after_clock(mark, now, due)

    def _open_with(self, cur: Any) -> None:
        """In the call's transaction: strict mode's turn, open_call, the due events."""
        if self._backend.strict:
            cur.execute(Q.lock_queue, {"queue": self.queue})
        mark, now, due, _ = cur.execute(Q.open_call, self._call_params(None)).fetchone()
        self._after_clock(mark, now, due)

    def _after_clock(self, mark: Number, now: Number, due: bool | None) -> None:
        """The call's time is known: if something is due (and, in the default mode,
        this call wins the queue's turn), read the due events; run ``opened`` if
        anything is due or the time asked was behind the mark."""
        cur, queue, asked = self._cur, self.queue, self._asked
        if due is None:  # the database was migrated under this process
            self._changed()
        self._mark, self._now = mark, now
        if due and not self._backend.strict:
            due = cur.execute(Q.try_lock_queue, {"queue": queue}).fetchone()[0]
        if due:
            rows = cur.execute(Q.due_events, {"queue": queue, "now": now}).fetchall()
            self._events = [(row[0], row[1], event_row(row, read)) for row in rows]
        if due or (asked is not None and asked < mark):
            self._opened(self, now if asked is None else asked)

    def _changed(self) -> NoReturn:
        """Raise SchemaChanged: the call found the database migrated under its process."""
        from ..version import __version__

        backend = self._backend
        found = self._cur.execute(Q.schema_stamp).fetchone()[0]
        raise SchemaChanged(
            f"{backend.name}: the database was migrated to schema version {found} while "
            f"this process (sqlq {__version__}) had it open at version "
            f"{backend.schema_version}; stop this process and start it again with a sqlq "
            "that knows the new schema"
        )

    def _call_params(self, now: Number | None, serial: bool = True) -> dict[str, Any]:
        """The parameters of _call (queries.sql): the call's time once known, and
        whether the call takes the queue's turn in a queue with grouped tasks (every
        call but a claim: see _call's lock order)."""
        return {
            "queue": self.queue,
            "now": now,
            "asked": self._asked,
            "lag": MARK_LAG,
            "schema": self._backend.schema_version,
            "serial": serial,
        }

    def _write(
        self, statement: str, params: dict[str, Any], serial: bool = True
    ) -> list[tuple[Any, ...]]:
        """Run a statement that starts with _call (queries.sql); its rows without the
        clock's four columns.  The first statement of a lazy call carries the clock
        and the due check; if something is due (or the mark must be raised) it
        changed nothing, and runs again once the call has opened.  ``serial``
        false: a claim, which needs no turn (see _call)."""
        params.update(self._call_params(None if self._pending else self._now, serial))
        if self._pending:
            self._pending = False
            commits = self._autocommit = self._one_write
            self._cur = self._backend.send_first(statement, params, not commits, commits)
            rows = self._cur.fetchall()
            mark, now, due, go = rows[0][:4]
            self._mark, self._now = mark, now
            if go:
                return [row[4:] for row in rows]
            if commits:
                self._autocommit = False
                self._cur.execute(Q.begin)
            self._after_clock(mark, now, due)
            params["now"] = now
        return [row[4:] for row in self._cur.execute(statement, params).fetchall()]

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
            if self._pending:  # nothing was sent: nothing to end
                self._pending = False
                self._unlock()
                return
            lag = 0.0 if self._asked is not None else MARK_LAG
            if self._now > self._mark + lag:
                cur.execute(Q.raise_mark, {"now": self._now, "lag": lag})
            if self._announce:
                cur.execute(Q.announce, {"channel": self._backend.channel(self.queue)})
            if self._external is not None:
                cur.execute(Q.restore_search_path, {"path": self._callers_path})
                cur.execute(Q.release_savepoint)
            elif not self._autocommit:
                cur.execute(Q.commit)
        except BaseException as error:
            self._fail(error)
        self._unlock()

    def _fail(self, exc: BaseException) -> NoReturn:
        """Undo the call and raise: a psycopg error as its sqlq error, the cause kept."""
        try:
            self._abort()
            if isinstance(exc, psycopg.Error):
                if self._external is None:
                    raise self._backend._translated(exc) from exc
                raise driver.translate(exc, self._backend.name) from exc
            raise exc
        finally:
            self._unlock()

    def _abort(self) -> None:
        cur = self._cur
        if cur is None or cur.closed or cur.connection.closed or self._autocommit or self._pending:
            return
        with suppress(psycopg.Error):
            if self._external is None:
                cur.execute(Q.rollback)
            else:
                cur.execute(Q.rollback_to_savepoint)
                cur.execute(Q.release_savepoint)

    @property
    def _cursor(self) -> Any:
        """The call's cursor, once the call has opened (for statements without _call)."""
        if self._pending:
            self._open()
        return self._cur

    def _announce_if(self, available: bool) -> None:
        self._announce |= available

    def _figures(self, cur: Any, queue: str) -> Figures:
        return _figures(cur, queue)

    def _unlock(self) -> None:
        if self._locked:
            self._locked = False
            self._backend.end_call()

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
        params = _new_task(queue, task_id, max_attempts, retry, payload, run_at, name)
        params.update(group_key=group, priority=priority, aging=aging)
        params["channel"] = self._backend.channel(queue)
        ((added, _announced),) = self._write(Q.insert_task, params)
        return bool(added)

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
        """The ids the queue has are found first, so that only new ones take counter
        values; an id that another call adds meanwhile is skipped, and answered
        False."""
        ids = [stored(task_id) for task_id, _, _ in batch]
        params: dict[str, Any] = {"queue": queue, "ids": ids}
        seen = {row[0] for row in self._cursor.execute(Q.existing_ids, params)}
        fresh: dict[str, tuple[Encoded, str | None]] = {}
        for key, (_, payload, name) in zip(ids, batch, strict=True):
            if key not in seen and key not in fresh:
                fresh[key] = (payload, name)
        if fresh:
            items = list(fresh.values())
            params = {
                "queue": queue,
                "ids": list(fresh),
                "payloads": [p if isinstance(p, str) else None for p, _ in items],
                "blobs": [p if isinstance(p, bytes) else None for p, _ in items],
                "names": [name for _, name in items],
                "state": "AVAILABLE" if run_at is None else "WAITING",
                "max_attempts": max_attempts,
                "run_at": run_at,
                "kind": retry.kind,
                "base": retry.base,
                "cap": retry.cap,
                "now": self._now,
                "group_key": group,
                "channel": self._backend.channel(queue),
                "priority": priority,
                "aging": aging,
            }
            added = {row[0] for row in self._cursor.execute(Q.insert_many, params)}
        else:
            added = set()
        answers = []
        for key in ids:
            answers.append(key in added)
            added.discard(key)  # a repeat in the batch existed by then
        return answers

    def claim_many(self, queue: str, n: int, seconds: Number, fair: bool = False) -> list[Claimed]:
        params = {"queue": queue, "n": n, "seconds": seconds, "max_time": MAX_TIME}
        found = self._write(Q.claim_front_many, params, serial=False)
        if found[0][0]:  # grouped tasks: one at a time, each may use up a group's slot
            return claim_each(lambda: self._claim_grouped(queue, seconds, fair), n)
        rows = [_claimed(row[1:]) for row in found if row[1]]
        rows.sort(key=itemgetter(1))
        return rows

    def complete_many(self, queue: str, items: list[Completion]) -> int:
        params = {
            "queue": queue,
            "ids": [stored(task_id) for task_id, _, _ in items],
            "tokens": [token for _, token, _ in items],
            "results": [result for _, _, result in items],
        }
        ((done,),) = self._write(Q.complete_many, params)
        return int(done)

    def claim(self, queue: str, seconds: Number, fair: bool = False) -> Claimed | None:
        params = {"queue": queue, "seconds": seconds, "max_time": MAX_TIME}
        ((grouped, *row),) = self._write(Q.claim_front, params, serial=False)
        if grouped:
            return self._claim_grouped(queue, seconds, fair)
        return _claimed(tuple(row)) if row[0] else None

    def _claim_grouped(self, queue: str, seconds: Number, fair: bool) -> Claimed | None:
        params = {"queue": queue, "seconds": seconds, "max_time": MAX_TIME, "fair": fair}
        (row,) = self._write(Q.claim_grouped, params, serial=False)
        return _claimed(row) if row[0] else None

    def lease(self, queue: str, task_id: str, token: int | None) -> TaskRow | None:
        cur = self._cursor  # (first: the call's time is known once it opened)
        params = {"queue": queue, "task_id": stored(task_id), "token": token, "now": self._now}
        row = cur.execute(Q.get_current_lease, params).fetchone()
        return None if row is None else _task_row(row)

    def complete(
        self, queue: str, task_id: str, token: int | None, result: str | None = None
    ) -> bool:
        params = {"queue": queue, "task_id": stored(task_id), "token": token, "result": result}
        ((done,),) = self._write(Q.complete_task, params)
        return bool(done)

    def end_lease(
        self,
        task: TaskRow,
        state: State,
        at: Number,
        error: str | None,
        run_at: Number | None = None,
        attempts_delta: int = 0,
    ) -> int:
        params = {
            "id": task.row_id,
            "token": task.token,
            "state": state.value,
            "run_at": run_at,
            "attempts_delta": attempts_delta,
            "error": stored_or_none(error),
            "finished_at": at if state in FINISHED else None,
            "at": at,
            "now": self._now,
        }
        row = self._cursor.execute(Q.end_lease, params).fetchone()
        self._announce |= state is State.AVAILABLE
        if row is None:
            raise InvariantViolation(
                f"task {task.task_id!r} was no longer RESERVED under its lease"
            )
        return int(row[0])

    def extend(self, queue: str, task_id: str, token: int, seconds: Number) -> bool | None:
        params = {
            "queue": queue,
            "task_id": stored(task_id),
            "token": token,
            "seconds": seconds,
            "max_time": MAX_TIME,
        }
        ((stop,),) = self._write(Q.extend_lease, params)
        return None if stop is None else bool(stop)

    def wake(self, task: TaskRow, order: int, at: Number) -> None:
        cur = self._cursor  # (first: the call's time is known once it opened)
        params = {"id": task.row_id, "order": order, "at": at, "now": self._now}
        if cur.execute(Q.wake_task, params).rowcount != 1:
            raise InvariantViolation(f"task {task.task_id!r} was no longer WAITING")
        self._announce = True

    def redrive(self, row_ids: list[int]) -> int:
        """The rows of the tasks' groups are made or locked first, in one statement, in
        group-key order (remake_groups): taken task by task, two redrives of tasks of
        two idle or forgotten groups in opposite orders could each hold one group's
        row and wait for the other's (a deadlock, Busy; such a queue has no unfinished
        grouped task, so its calls do not take the queue's turn).

        A task with a dedupe key is updated in a savepoint: a holder of its key that
        a concurrent add committed after this call's probe makes the unique index
        refuse the update, and the task stays DEAD (as when the probe sees the holder)
        without undoing the call.  A task without a key needs none."""
        cur = self._cursor
        cur.execute(Q.remake_groups, {"ids": row_ids})
        moved = 0
        for row_id in row_ids:
            params = {"id": row_id, "now": self._now, "keyed": False}
            redriven = cur.execute(Q.redrive_task, params).rowcount == 1
            if not redriven:  # it has a key (or is no longer DEAD)
                redriven = self._redrive_keyed(cur, {**params, "keyed": True})
            moved += redriven
        self._announce |= moved > 0
        return moved

    def _redrive_keyed(self, cur: Any, params: dict[str, Any]) -> bool:
        cur.execute(Q.savepoint_redrive)
        try:
            redriven: bool = cur.execute(Q.redrive_task, params).rowcount == 1
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != KEY_HOLDER_INDEX:
                raise
            cur.execute(Q.rollback_redrive)
            return False
        cur.execute(Q.release_redrive)
        return redriven

    def dead_ids(self, queue: str, limit: int) -> list[tuple[int, str]]:
        params = {"queue": queue, "limit": None if limit < 0 else limit}
        rows = self._cursor.execute(Q.dead_ids, params)
        return [(row_id, read(task_id)) for row_id, task_id in rows]

    def forget_groups(self, queue: str, after: str, batch: int) -> tuple[int, str | None]:
        cur = self._cursor
        params = {"queue": queue, "after": after, "batch": batch, "now": self._now}
        forgotten, last, seen = cur.execute(Q.forget_groups, params).fetchone()
        return int(forgotten), last if seen == batch else None

    def progress(
        self, queue: str, task_id: str, token: int, value: float | None, message: str | None
    ) -> bool:
        params = {
            "queue": queue,
            "task_id": stored(task_id),
            "token": token,
            "value": value,
            "message": message,
        }
        ((reported,),) = self._write(Q.report_progress, params)
        return bool(reported)

    def key_holder(self, queue: str, key: str, cutoff: Number | None) -> Holder | None:
        params = {"queue": queue, "key": key, "cutoff": cutoff}
        row = self._cursor.execute(Q.key_holder, params).fetchone()
        return None if row is None else Holder(row[0], read(row[1]), State(row[2]), row[3])

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
        cur = self._cursor  # (first: the call's time is known once it opened)
        params = _new_task(queue, task_id, max_attempts, retry, payload, run_at, name)
        params.update(key=key, group_key=group, priority=priority, aging=aging, now=self._now)
        added = cur.execute(Q.insert_keyed_task, params).fetchone() is not None
        self._announce |= added and run_at is None
        return added

    def debounce(self, holder: Holder, payload: Encoded, run_at: Number | None) -> bool:
        cur = self._cursor
        params = {
            "id": holder.row_id,
            "state": holder.state.value,
            "seen": holder.seq,
            "stays": run_at is None and holder.state is State.AVAILABLE,
            "run_at": run_at,
            "payload": payload if isinstance(payload, str) else None,
            "payload_bytes": payload if isinstance(payload, bytes) else None,
            "now": self._now,
        }
        changed = cur.execute(Q.debounce_task, params).fetchone() is not None
        self._announce |= changed and run_at is None and holder.state is State.WAITING
        return changed


def _figures(cur: Any, queue: str) -> Figures:
    """The figures of Queue.stats, in one statement (one snapshot)."""
    per_state, front, deadline, run_at, paused = cur.execute(
        Q.queue_figures, {"queue": queue}
    ).fetchone()
    counts = dict.fromkeys((s.value for s in State), 0)
    counts.update(per_state)
    return counts, front, deadline, run_at, paused


def _overview(cur: Any, with_names: bool) -> dict[str, QueueOverview]:
    states = cur.execute(Q.count_states).fetchall()
    names = cur.execute(Q.count_names).fetchall() if with_names else []
    fronts = {
        queue: (since, deadline, run_at)
        for queue, since, deadline, run_at in cur.execute(Q.queue_fronts)
    }
    paused = [queue for (queue,) in cur.execute(Q.paused_queues).fetchall()]
    return overviews(states, names, lambda queue: fronts.get(queue, (None, None, None)), paused)


def _claimed(row: tuple[Any, ...]) -> Claimed:
    task_id, token, attempts, payload, payload_bytes, name = row
    return read(task_id), token, attempts, payload if payload_bytes is None else payload_bytes, name


def _new_task(
    queue: str,
    task_id: str,
    max_attempts: int,
    retry: Retry,
    payload: Encoded,
    run_at: Number | None,
    name: str | None,
) -> dict[str, Any]:
    """The parameters of a new task that insert_task and insert_keyed_task share."""
    return {
        "queue": queue,
        "task_id": stored(task_id),
        "state": "AVAILABLE" if run_at is None else "WAITING",
        "max_attempts": max_attempts,
        "run_at": run_at,
        "payload": payload if isinstance(payload, str) else None,
        "payload_bytes": payload if isinstance(payload, bytes) else None,
        "kind": retry.kind,
        "base": retry.base,
        "cap": retry.cap,
        "name": name,
    }
