"""The PostgreSQL reference: a minimal lease queue written directly on psycopg.

What PostgreSQL itself allows for sqlq's contract, as bench/reference.py is for
SQLite: every sqlq-on-PostgreSQL figure in RESULTS.md is divided by this queue's
figure measured in the same run with the same ``synchronous_commit``.  It does
what a correct lease queue must do and nothing more:

* every call is one statement, its own transaction (autocommit): one round trip;
* expiry first: each statement starts with a data-modifying CTE that puts the
  leases whose deadline has passed back at the end of the line (or DEAD when
  their attempts are used up), found through a partial index on the deadline;
* claim = ``UPDATE ... WHERE id = (SELECT ... ORDER BY seq LIMIT 1 FOR UPDATE
  SKIP LOCKED) RETURNING``: concurrent claims pass over each other's rows;
* complete = ``UPDATE`` by task id and lease token, with ``deadline > now``: a
  compare-and-set that refuses a late or stale holder;
* line positions and lease tokens from one sequence; times from the server's clock.

No payload encoding, no input checks, no retry policies, no WAITING state, no
due-event order, no LISTEN/NOTIFY: those are what sqlq adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

AVAILABLE, RESERVED, COMPLETED, DEAD = 0, 1, 2, 3

SCHEMA = """
CREATE SEQUENCE IF NOT EXISTS ref_counter AS bigint;
CREATE TABLE IF NOT EXISTS ref_tasks (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id      text    NOT NULL UNIQUE,
    state        smallint NOT NULL,
    seq          bigint  NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    lease        bigint,
    deadline     double precision,
    payload      text
);
CREATE INDEX IF NOT EXISTS ref_line ON ref_tasks (seq) WHERE state = 0;
CREATE INDEX IF NOT EXISTS ref_leases ON ref_tasks (deadline) WHERE deadline IS NOT NULL
"""

NOW = "extract(epoch FROM now())::float8"  # the statement's start: one value, indexable
EXPIRE = f"""
WITH expired AS (
    UPDATE ref_tasks SET state = CASE WHEN attempts < max_attempts THEN 0 ELSE 3 END,
                         seq = nextval('ref_counter'), deadline = NULL
    WHERE id = ANY (ARRAY (SELECT id FROM ref_tasks WHERE deadline <= {NOW}
                           FOR UPDATE SKIP LOCKED))
)"""
TAKE = f"""
    UPDATE ref_tasks SET state = 1, attempts = attempts + 1, lease = nextval('ref_counter'),
                         deadline = {NOW} + %(lease_seconds)s
    WHERE id = ANY (ARRAY (SELECT id FROM ref_tasks WHERE state = 0
                           ORDER BY seq LIMIT %(n)s FOR UPDATE SKIP LOCKED))
    RETURNING task_id, lease, payload"""
DONE = f"""
    UPDATE ref_tasks SET state = 2, deadline = NULL
    WHERE task_id = %(task_id)s AND state = 1 AND lease = %(lease)s AND deadline > {NOW}
    RETURNING 1"""
INSERT = EXPIRE + " INSERT INTO ref_tasks (task_id, state, seq, max_attempts, payload) "
ADD = INSERT + (
    "VALUES (%(task_id)s, 0, nextval('ref_counter'), %(max_attempts)s, %(payload)s) "
    "ON CONFLICT (task_id) DO NOTHING"
)
ADD_MANY = INSERT + (
    "SELECT t, 0, nextval('ref_counter'), %(max_attempts)s, NULL "
    "FROM unnest(%(task_ids)s::text[]) WITH ORDINALITY AS i(t, n) ORDER BY n "
    "ON CONFLICT (task_id) DO NOTHING"
)
CLAIM = EXPIRE + TAKE
COMPLETE = EXPIRE + ", done AS (" + DONE + ") SELECT count(*) FROM done"
COMPLETE_MANY = (
    EXPIRE + ", done AS (UPDATE ref_tasks SET state = 2, deadline = NULL "
    "FROM unnest(%(task_ids)s::text[], %(leases)s::bigint[]) AS c(task_id, lease) "
    "WHERE ref_tasks.task_id = c.task_id AND state = 1 AND ref_tasks.lease = c.lease "
    f"AND deadline > {NOW} RETURNING 1) SELECT count(*) FROM done"
)
COMPLETE_AND_CLAIM = (
    EXPIRE + ", done AS (" + DONE + "), claimed AS (" + TAKE + ") "
    "SELECT (SELECT count(*) FROM done), claimed.task_id, claimed.lease "
    "FROM (SELECT) AS one LEFT JOIN claimed ON true"
)

Claimed = tuple[str, int]  # (task_id, lease)


class RawPostgresQueue:
    """One queue in one schema (the connection's search_path); every call one statement."""

    def __init__(
        self,
        conninfo: str,
        *,
        lease_seconds: float = 300.0,
        max_attempts: int = 3,
        synchronous: str = "full",
    ) -> None:
        self.params: dict[str, Any] = {"lease_seconds": lease_seconds, "n": 1}
        self.max_attempts = max_attempts
        self.conn = psycopg.connect(conninfo, autocommit=True)
        commit = "on" if synchronous == "full" else "off"
        self.conn.execute(f"SET synchronous_commit = {commit}")
        with self.conn.transaction():
            for statement in SCHEMA.split(";"):
                self.conn.execute(statement)
        self.cur = self.conn.cursor()

    def add(self, task_id: str, payload: str | None = None) -> bool:
        params = {"task_id": task_id, "max_attempts": self.max_attempts, "payload": payload}
        return self.cur.execute(ADD, params).rowcount == 1

    def add_many(self, task_ids: Sequence[str]) -> int:
        params = {"task_ids": list(task_ids), "max_attempts": self.max_attempts}
        return self.cur.execute(ADD_MANY, params).rowcount

    def claim(self) -> Claimed | None:
        row = self.cur.execute(CLAIM, self.params).fetchone()
        return None if row is None else (row[0], row[1])

    def claim_many(self, n: int) -> list[Claimed]:
        rows = self.cur.execute(CLAIM, {**self.params, "n": n}).fetchall()
        return [(task_id, lease) for task_id, lease, _ in rows]

    def complete(self, task_id: str, lease: int) -> bool:
        row = self.cur.execute(COMPLETE, {"task_id": task_id, "lease": lease}).fetchone()
        return bool(row[0])

    def complete_many(self, claimed: Sequence[Claimed]) -> int:
        task_ids = [task_id for task_id, _ in claimed]
        leases = [lease for _, lease in claimed]
        row = self.cur.execute(COMPLETE_MANY, {"task_ids": task_ids, "leases": leases}).fetchone()
        return int(row[0])

    def complete_and_claim(self, task_id: str, lease: int) -> tuple[bool, Claimed | None]:
        """Complete one task and claim the next in one statement (the runner loop)."""
        params = {**self.params, "task_id": task_id, "lease": lease}
        done, next_id, next_lease = self.cur.execute(COMPLETE_AND_CLAIM, params).fetchone()
        return bool(done), None if next_id is None else (next_id, next_lease)

    def completed_count(self) -> int:
        row = self.cur.execute("SELECT count(*) FROM ref_tasks WHERE state = 2").fetchone()
        return int(row[0])

    def close(self) -> None:
        self.conn.close()


def fill_completed(conninfo: str, n: int) -> None:
    """Put n COMPLETED tasks in a new reference queue, in one statement."""
    queue = RawPostgresQueue(conninfo, synchronous="normal")
    try:
        queue.conn.execute(
            "INSERT INTO ref_tasks (task_id, state, seq, attempts, max_attempts, lease) "
            "SELECT 'old-' || i, 2, nextval('ref_counter'), 1, 3, nextval('ref_counter') "
            "FROM generate_series(1, %s) AS i",
            (n,),
        )
        queue.conn.execute("VACUUM ANALYZE ref_tasks")
    finally:
        queue.close()
