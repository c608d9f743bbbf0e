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

import math
import os
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..backend import Opened
from ..clock import kernel_time
from ..contract import Number
from ..errors import CannotOpen, InvalidConfig
from ..records import Checkpoint
from ..sqlstore import SqlReads
from . import driver, files
from .connections import Connector, Synchronous
from .forks import live
from .gate import Gate
from .inspection import Inspection
from .maintenance import WAL_CHECK_EVERY as WAL_CHECK_EVERY
from .maintenance import Maintenance
from .migrate import check_schema, ensure_schema, latest_version
from .paths import NO_DATABASE as NO_DATABASE
from .paths import database_path as database_path
from .queries import Q
from .transaction import SqliteTransaction as SqliteTransaction
from .transaction import _task_row

if TYPE_CHECKING:
    import sqlalchemy as sa

#: The migration that made sqlq_settings (a queue's stored settings).
SETTINGS_SINCE = 15


class SqliteBackend(Inspection, Maintenance, SqlReads):
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
        self.wal_limit = 0  # bytes; set from limit_wal_size when connecting (Connector)
        self.last_checkpoint: Checkpoint | None = None
        self.checkpoint_failures = 0
        self._opened = False
        self._closed = False
        self._held_for_fork = False
        self.keyed = False  # the dedupe keys' indexes are there (SqliteTransaction._keying)
        self.grouped = False  # the group triggers are there (SqliteTransaction._grouping)
        self._connect = Connector(self.path, synchronous, self.busy_timeout)
        live.add(self)
        # One straight path down: the file was resolved and checked above; now create
        # or lock and migrate it, or check it (migrate.py, handed the connector: it
        # returns the version found and the connection it used), then keep that
        # connection for the calls, ready.
        try:
            with self._lock, self._guard():
                if migrate:
                    self.schema_found, conn = ensure_schema(
                        self.path,
                        self._connect,
                        mode=mode,
                        timeout=self.busy_timeout,
                        force=force_migration,
                    )
                    self.schema_version = latest_version()
                else:
                    self.schema_found, conn = check_schema(
                        self._connect, self.path, timeout=self.busy_timeout
                    )
                    self.schema_version = self.schema_found
                self._adopt(conn)
                self.file_mode = files.file_mode(self.path)
                self._rng = random.Random()
                self._opened = True  # from now on connections wait for locks in _waiting
                conn.execute(Q.no_busy_handler)
        except BaseException:
            self.close()  # a refused file keeps no connection (nor -wal/-shm files)
            raise

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
            live.discard(self)

    @property
    def name(self) -> str:
        return self.path

    def transaction(
        self, now: Number | None, queue: str, external: Any, opened: Opened, one_write: bool = False
    ) -> SqliteTransaction:
        """One call on ``queue`` at ``now``, as a context manager (see
        sqlq.backend.Backend).  With ``external`` (a SQLAlchemy Connection in an open
        transaction on this database) the call runs inside the caller's transaction,
        in a savepoint.  ``one_write`` changes nothing: each call is one transaction
        anyway, under the write lock."""
        return SqliteTransaction(self, now, queue, external, opened, one_write)

    def _read_time(self, now: Number | None) -> Number:
        return time.time() if now is None else now  # SQLite's clock is this process's

    def subscribe(self, queue: str, callback: Callable[[], None]) -> None:
        """Nothing is announced: SQLite has no way to tell other processes (they
        poll ``ready()``, a read that takes no lock)."""
        return None

    def clock_reference(self) -> float | None:
        """The kernel's time (see sqlq.clock); where it cannot be read directly, the
        time the kernel stamps on the gate file, which every process of the
        database touches alike."""
        return kernel_time(self.path + ".sqlq-gate")
