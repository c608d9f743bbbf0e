-- 0003: the same constraints, written so that checking them costs no temporary table.
--
-- SQLite evaluates `x IN ('a', 'b', 'c', ...)` (three or more constants) by
-- building a temporary b-tree of the list.  In a CHECK constraint that b-tree is
-- built again for every row written, so the two list checks of 0002 (state and
-- retry_kind) cost about 30,000 CPU instructions per insert or update, more than
-- the row write itself.  The same conditions written with `=` and `OR` accept
-- and refuse exactly the same rows, and cost a few comparisons.  Lists of two
-- constants are compared one by one already; they stay as they are.
--
-- SQLite cannot change a table's CHECK constraints in place, so sqlq_tasks is
-- rebuilt as in 0002: create the new table, copy every row, drop the old one,
-- rename, then the indexes and the views (dropped first: a view on a dropped
-- table would stop the rename).

DROP VIEW sqlq_queue_stats;

DROP VIEW sqlq_dead_letters;

DROP VIEW sqlq_leases;

CREATE TABLE sqlq_tasks_new (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL CHECK (length(queue) > 0),
    task_id      TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state = 'WAITING' OR state = 'AVAILABLE' OR state = 'RESERVED'
                        OR state = 'COMPLETED' OR state = 'DEAD'),
    -- Position in the queue's line (AVAILABLE), or order of wake-up (WAITING).
    seq          INTEGER NOT NULL,
    attempts     INTEGER NOT NULL CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    -- The latest lease's fencing token; kept after the lease ends.
    lease_id     INTEGER,
    -- When the current lease runs out; set exactly while RESERVED.
    deadline     REAL,
    -- When a WAITING task becomes AVAILABLE; set exactly while WAITING.
    run_at       REAL,
    -- JSON text, or a blob of bytes; NULL for no payload.
    payload      ANY,
    last_error   TEXT,
    -- The retry policy the task was added with (see sqlq/retry.py).
    retry_kind   TEXT    NOT NULL DEFAULT 'immediate'
                 CHECK (retry_kind = 'immediate' OR retry_kind = 'fixed'
                        OR retry_kind = 'exponential' OR retry_kind = 'exponential_jitter'),
    retry_base   REAL    NOT NULL DEFAULT 0 CHECK (retry_base >= 0),
    retry_cap    REAL    NOT NULL DEFAULT 0 CHECK (retry_cap >= retry_base),
    created_at   REAL    NOT NULL,
    updated_at   REAL    NOT NULL,
    -- When it became COMPLETED or DEAD; set exactly in those states.
    finished_at  REAL,
    UNIQUE (queue, task_id),
    CHECK (attempts <= max_attempts),
    CHECK ((state = 'RESERVED') = (deadline IS NOT NULL)),
    CHECK (state <> 'RESERVED' OR lease_id IS NOT NULL),
    CHECK ((state = 'WAITING') = (run_at IS NOT NULL)),
    CHECK (state NOT IN ('AVAILABLE', 'WAITING') OR attempts < max_attempts),
    CHECK (state NOT IN ('RESERVED', 'COMPLETED') OR attempts >= 1),
    CHECK (state <> 'DEAD' OR attempts = max_attempts),
    CHECK ((state IN ('COMPLETED', 'DEAD')) = (finished_at IS NOT NULL)),
    CHECK (payload IS NULL OR typeof(payload) IN ('text', 'blob'))
) STRICT;

INSERT INTO sqlq_tasks_new
    (id, queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline, run_at,
     payload, last_error, retry_kind, retry_base, retry_cap, created_at, updated_at,
     finished_at)
SELECT id, queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline, run_at,
       payload, last_error, retry_kind, retry_base, retry_cap, created_at, updated_at,
       finished_at
FROM sqlq_tasks;

DROP TABLE sqlq_tasks;

ALTER TABLE sqlq_tasks_new RENAME TO sqlq_tasks;

-- The indexes of 0002, unchanged.
CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, seq) WHERE state = 'AVAILABLE';

CREATE INDEX sqlq_tasks_leases ON sqlq_tasks (queue, deadline, lease_id)
    WHERE deadline IS NOT NULL;

CREATE INDEX sqlq_tasks_waiting ON sqlq_tasks (queue, run_at, seq)
    WHERE run_at IS NOT NULL;

CREATE INDEX sqlq_tasks_finished ON sqlq_tasks (queue, state, finished_at)
    WHERE finished_at IS NOT NULL;

-- The views of 0002, unchanged.
CREATE VIEW sqlq_queue_stats AS
SELECT queue,
       sum(state = 'WAITING')   AS waiting,
       sum(state = 'AVAILABLE') AS available,
       sum(state = 'RESERVED')  AS reserved,
       sum(state = 'COMPLETED') AS completed,
       sum(state = 'DEAD')      AS dead,
       min(deadline)            AS next_deadline,
       min(run_at)              AS next_run_at
FROM sqlq_tasks
GROUP BY queue;

CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, attempts, last_error,
       datetime(finished_at, 'unixepoch') AS died_at_utc, payload
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
