"""The reference: a minimal lease queue written directly on SQLite.

It is what SQLite itself allows for the same contract, so every sqlq figure in
RESULTS.md is divided by this queue's figure measured in the same run, with the
same durability setting.  It does what a correct lease queue must do and
nothing more:

* one transaction per call (``BEGIN IMMEDIATE ... COMMIT``) on one connection,
  WAL mode, ``synchronous`` FULL or NORMAL as the row it is compared with;
* expiry first: before each call, one indexed range query (index on
  ``(deadline, lease)``) finds leases with ``deadline <= now``; each goes back to
  the end of the line, or to DEAD when its attempts are used up;
* claim in one statement: ``UPDATE ... WHERE id = (SELECT ... ORDER BY seq
  LIMIT 1) RETURNING ...``;
* completion is compare-and-set on the lease id, so a stale lease cannot
  complete a task another worker holds;
* lease ids and line positions come from a one-row counter that only grows.

It uses the same SQLite library as sqlq (``sqlq.sqlite.driver.dbapi``, normally
``pysqlite3``), and no SQLAlchemy.  No payload encoding, no time high-water mark,
no input checks, no retry policies, no WAITING state: those are what sqlq adds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqlq.sqlite.driver import dbapi

AVAILABLE, RESERVED, COMPLETED, DEAD = 0, 1, 2, 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id           INTEGER PRIMARY KEY,
    task_id      TEXT    NOT NULL UNIQUE,
    state        INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    lease        INTEGER,
    deadline     REAL,
    payload      BLOB
);
CREATE INDEX IF NOT EXISTS tasks_line ON tasks (state, seq);
CREATE INDEX IF NOT EXISTS tasks_leases ON tasks (deadline, lease) WHERE deadline IS NOT NULL;
CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY CHECK (id = 1), n INTEGER NOT NULL);
INSERT OR IGNORE INTO counter (id, n) VALUES (1, 0);
"""

DUE = (
    "SELECT id, attempts, max_attempts, lease FROM tasks "
    "WHERE deadline <= ? ORDER BY deadline, lease"
)
REQUEUE = (
    "UPDATE tasks SET state = ?, seq = ?, deadline = NULL WHERE id = ? AND state = 1 AND lease = ?"
)
BUMP = "UPDATE counter SET n = n + ? WHERE id = 1 RETURNING n"
INSERT = (
    "INSERT INTO tasks (task_id, state, seq, max_attempts, payload) VALUES (?, 0, ?, ?, ?) "
    "ON CONFLICT (task_id) DO NOTHING"
)
CLAIM = (
    "UPDATE tasks SET state = 1, attempts = attempts + 1, lease = ?, deadline = ? "
    "WHERE id = (SELECT id FROM tasks WHERE state = 0 ORDER BY seq LIMIT 1) "
    "RETURNING task_id, payload"
)
CLAIM_MANY = (
    "UPDATE tasks SET state = 1, attempts = attempts + 1, lease = ? + line.rank, deadline = ? "
    "FROM (SELECT id, row_number() OVER (ORDER BY seq) AS rank FROM tasks "
    "      WHERE state = 0 ORDER BY seq LIMIT ?) AS line "
    "WHERE tasks.id = line.id "
    "RETURNING task_id, lease, payload"
)
COMPLETE = (
    "UPDATE tasks SET state = 2, deadline = NULL WHERE task_id = ? AND state = 1 AND lease = ?"
)
READY = (
    "SELECT EXISTS (SELECT 1 FROM tasks WHERE state = 0) "
    "OR EXISTS (SELECT 1 FROM tasks WHERE deadline <= ?)"
)

Claimed = tuple[str, int, Any]  # (task_id, lease, payload)


class RawLeaseQueue:
    """One queue in one SQLite file; every method is one transaction."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lease_seconds: float = 300.0,
        max_attempts: int = 3,
        synchronous: str = "full",
        timeout: float = 30.0,
    ) -> None:
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.conn: Any = dbapi.connect(
            os.fspath(path), isolation_level=None, timeout=timeout, check_same_thread=False
        )
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {'FULL' if synchronous == 'full' else 'NORMAL'}")
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    # --- transactions ---------------------------------------------------------

    def _begin(self) -> float:
        """BEGIN IMMEDIATE, then expire every lease due at now; returns now."""
        now = time.time()
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            due = conn.execute(DUE, (now,)).fetchall()
            if due:
                (top,) = conn.execute(BUMP, (len(due),)).fetchone()
                seq = top - len(due)
                for row_id, attempts, max_attempts, lease in due:
                    seq += 1
                    state = AVAILABLE if attempts < max_attempts else DEAD
                    conn.execute(REQUEUE, (state, seq, row_id, lease))
        except BaseException:
            self._rollback()
            raise
        return now

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def _commit(self) -> None:
        self.conn.execute("COMMIT")

    # --- calls ----------------------------------------------------------------

    def add(self, task_id: str, payload: Any = None) -> bool:
        self._begin()
        try:
            (seq,) = self.conn.execute(BUMP, (1,)).fetchone()
            added = self.conn.execute(INSERT, (task_id, seq, self.max_attempts, payload)).rowcount
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return added == 1

    def add_many(self, task_ids: Sequence[str]) -> int:
        self._begin()
        try:
            (top,) = self.conn.execute(BUMP, (len(task_ids),)).fetchone()
            first = top - len(task_ids) + 1
            rows = ((t, first + i, self.max_attempts, None) for i, t in enumerate(task_ids))
            cur = self.conn.executemany(INSERT, rows)
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return int(cur.rowcount)

    def _claim(self, now: float) -> Claimed | None:
        (lease,) = self.conn.execute("SELECT n + 1 FROM counter WHERE id = 1").fetchone()
        row = self.conn.execute(CLAIM, (lease, now + self.lease_seconds)).fetchone()
        if row is None:
            return None
        self.conn.execute(BUMP, (1,))
        return row[0], lease, row[1]

    def claim(self) -> Claimed | None:
        now = self._begin()
        try:
            claimed = self._claim(now)
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return claimed

    def claim_many(self, n: int) -> list[Claimed]:
        """Up to n leases from the front of the line, in one transaction.

        One statement takes them all; each gets its own lease id (the counter
        plus its rank in the line).
        """
        now = self._begin()
        try:
            (base,) = self.conn.execute("SELECT n FROM counter WHERE id = 1").fetchone()
            rows = self.conn.execute(CLAIM_MANY, (base, now + self.lease_seconds, n)).fetchall()
            if rows:
                self.conn.execute(BUMP, (len(rows),))
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return [(task_id, lease, payload) for task_id, lease, payload in rows]

    def complete(self, task_id: str, lease: int) -> bool:
        self._begin()
        try:
            done = self.conn.execute(COMPLETE, (task_id, lease)).rowcount
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return done == 1

    def complete_many(self, leases: Iterable[tuple[str, int]]) -> int:
        self._begin()
        try:
            cur = self.conn.executemany(COMPLETE, leases)
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return int(cur.rowcount)

    def complete_and_claim(self, task_id: str, lease: int) -> tuple[bool, Claimed | None]:
        """Complete one task and claim the next in one transaction (the runner loop)."""
        now = self._begin()
        try:
            done = self.conn.execute(COMPLETE, (task_id, lease)).rowcount
            claimed = self._claim(now)
            self._commit()
        except BaseException:
            self._rollback()
            raise
        return done == 1, claimed

    def ready(self) -> bool:
        return bool(self.conn.execute(READY, (time.time(),)).fetchone()[0])

    def completed_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM tasks WHERE state = 2").fetchone()[0])

    def close(self) -> None:
        self.conn.close()


def fill_completed(path: str | os.PathLike[str], n: int, *, synchronous: str = "normal") -> None:
    """Put n COMPLETED tasks in a new reference queue file, in one transaction."""
    queue = RawLeaseQueue(path, synchronous=synchronous)
    try:
        conn = queue.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO tasks (task_id, state, seq, attempts, max_attempts, lease) "
            "VALUES (?, 2, ?, 1, 3, ?)",
            ((f"old-{i}", i, i) for i in range(1, n + 1)),
        )
        conn.execute("UPDATE counter SET n = ? WHERE id = 1", (n,))
        conn.execute("COMMIT")
    finally:
        queue.close()
