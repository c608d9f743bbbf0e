-- 0012: the worker registry (see sqlq/registry.py): which workers are alive now.
--
-- A row per worker process, written by the worker when it starts and once per
-- heartbeat interval while it runs (beat_worker), deleted when it stops cleanly
-- (forget_worker).  What it holds is the list of its leases as JSON text,
-- [[task id, token, since], ...], in its own row: a claim writes nothing more
-- (no column of sqlq_tasks says which worker holds a task).  A worker killed
-- without a word leaves its row, which readers show as stale once it has
-- missed its beats, and which a worker's next write deletes once it has been
-- stale for a while: the table holds the live workers and the recently gone.
-- Times are the queue's (the database's high-water mark, as every call's).

CREATE TABLE sqlq_workers (
    worker_id   TEXT    NOT NULL PRIMARY KEY CHECK (length(worker_id) > 0),
    queue       TEXT    NOT NULL CHECK (length(queue) > 0),
    host        TEXT    NOT NULL,
    pid         INTEGER NOT NULL CHECK (pid >= 0),
    concurrency INTEGER NOT NULL CHECK (concurrency >= 1),
    -- The time of its first write, and of its latest.
    started_at  REAL    NOT NULL,
    beat_at     REAL    NOT NULL,
    -- When it is stale unless it writes again (a few of its intervals later).
    stale_at    REAL    NOT NULL,
    -- What it holds: JSON, [[task id, token, since], ...].
    holds       TEXT    NOT NULL
) STRICT, WITHOUT ROWID;
