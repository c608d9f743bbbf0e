"""A SQLite backend's upkeep of its file: checkpoints of the write-ahead log (after
every WAL_CHECK_EVERY-th commit, and on demand), VACUUM (compact) and backups.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import InvalidArgument
from ..records import Checkpoint, Compaction, StorageFacts
from . import driver, files
from .connections import log
from .queries import Q
from .waiting import Waiting

#: A process looks at the size of the -wal file after every this many of its own
#: commits (a stat call), and checkpoints once the file is past journal_size_limit.
#: SQLite truncates the file to that limit when the log starts over, so a file past
#: it holds that much log.  16 commits rarely write more than the 1 MiB between the
#: limit (3 MiB) and the bound the README gives (4 MiB).
WAL_CHECK_EVERY = 16


class Maintenance(Waiting):
    """SqliteBackend's upkeep of its file (what a transaction needs of its backend)."""

    #: The outcome of the last checkpoint this process ran, and how many failed.
    last_checkpoint: Checkpoint | None
    checkpoint_failures: int

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
            reopen: Any = type(self)  # SqliteBackend: the checks of opening it for inspection
            reopen(dest, migrate=False, busy_timeout=self.busy_timeout).close()


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
