"""The rows of sqlq_groups on PostgreSQL checked against the tasks they count.

A group's row must say what its tasks say: ``live`` the tasks AVAILABLE, WAITING or
RESERVED, ``running`` those RESERVED, and ``head_key``/``head`` the front of the
group's AVAILABLE line (its least (line_key, seq)), NULL when it has none; a group
without a row (purge forgot it) must have no unfinished task.  A stale
head makes claims pass over the queue's other tasks (the group looks first in line
but has nothing to hand out), a stale count holds a group back or lets it past its
limit.  Not a test module: the tests of PostgreSQL's groups call ``mismatches``
when nothing moves (tests/test_postgresql_faults.py, tests/test_limits.py's
processes, tests/test_stateful.py's histories with limits).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

#: Per group of the queue (a row or tasks or both): what the row says, then what the
#: tasks say; a row is wrong if the two halves differ.
CHECK = """
WITH keys AS (
    SELECT group_key FROM sqlq_groups WHERE queue = %(queue)s
    UNION SELECT group_key FROM sqlq_tasks WHERE queue = %(queue)s AND group_key IS NOT NULL
)
SELECT k.group_key, g.live, g.running, g.head_key, g.head,
       t.live, t.running, f.line_key, f.seq
FROM keys AS k
LEFT JOIN sqlq_groups AS g ON g.queue = %(queue)s AND g.group_key = k.group_key
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE state IN ('AVAILABLE', 'WAITING', 'RESERVED')) AS live,
           count(*) FILTER (WHERE state = 'RESERVED') AS running
    FROM sqlq_tasks WHERE queue = %(queue)s AND group_key = k.group_key) AS t
LEFT JOIN LATERAL (
    SELECT line_key, seq FROM sqlq_tasks
    WHERE queue = %(queue)s AND group_key = k.group_key AND state = 'AVAILABLE'
    ORDER BY line_key, seq LIMIT 1) AS f ON true
ORDER BY k.group_key
"""


def mismatches(conn: Any, queue: str) -> list[str]:
    """The groups of ``queue`` whose row disagrees with their tasks, each said in words
    (an empty list: every row is right).  ``conn``: a psycopg connection or a
    SQLAlchemy Connection, outside any other session's uncommitted moves."""
    if isinstance(conn, sa.Connection):
        rows = conn.exec_driver_sql(CHECK, {"queue": queue}).all()
    else:
        rows = conn.execute(CHECK, {"queue": queue}).fetchall()
    wrong = []
    for group, *row, live, running, front_key, front in rows:
        if row == [None] * 4 and (live, running) == (0, 0):
            continue  # an idle group purge forgot
        if tuple(row) != (live, running, front_key, front):
            wrong.append(
                f"group {group!r}: row (live, running, head_key, head) = {tuple(row)}, "
                f"its tasks say {(live, running, front_key, front)}"
            )
    return wrong
