-- 0002: worker features.  Tasks gain the WAITING state (delays and retry
-- backoff), a payload, the last error, their retry policy and the time they
-- finished; due leases and wake-ups are found per queue; read-only views for
-- people at the sqlite3 shell.
--
-- SQLite cannot change a table's CHECK constraints in place, so sqlq_tasks is
-- rebuilt: create the new table, copy every row, drop the old one, rename.

CREATE TABLE sqlq_tasks_new (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL CHECK (length(queue) > 0),
    task_id      TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('WAITING', 'AVAILABLE', 'RESERVED', 'COMPLETED', 'DEAD')),
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
                 CHECK (retry_kind IN ('immediate', 'fixed', 'exponential', 'exponential_jitter')),
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
    (id, queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline,
     created_at, updated_at, finished_at)
SELECT id, queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline,
       created_at, updated_at,
       CASE WHEN state IN ('COMPLETED', 'DEAD') THEN updated_at END
FROM sqlq_tasks;

DROP TABLE sqlq_tasks;

ALTER TABLE sqlq_tasks_new RENAME TO sqlq_tasks;

-- The line of each queue: claim takes the first row in seq order.  Partial:
-- only AVAILABLE rows are in it, so completing a task never touches it (in
-- migration 0001 it held every state as (queue, state, seq)).
CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, seq) WHERE state = 'AVAILABLE';

-- Running leases of each queue in expiry order (deadline, then token).
CREATE INDEX sqlq_tasks_leases ON sqlq_tasks (queue, deadline, lease_id)
    WHERE deadline IS NOT NULL;

-- WAITING tasks of each queue in wake-up order.
CREATE INDEX sqlq_tasks_waiting ON sqlq_tasks (queue, run_at, seq)
    WHERE run_at IS NOT NULL;

-- Finished tasks by age: retention and the dead-letter list.
CREATE INDEX sqlq_tasks_finished ON sqlq_tasks (queue, state, finished_at)
    WHERE finished_at IS NOT NULL;

-- Read-only views for the sqlite3 shell.  States are as of the last call on a
-- queue: a lease that ran out since shows as RESERVED until the next call.

-- Tasks per state, and what is due next, per queue.
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

-- Dead letters, the most recent first.
CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, attempts, last_error,
       datetime(finished_at, 'unixepoch') AS died_at_utc, payload
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

-- Leases in flight, the soonest to run out first.
CREATE VIEW sqlq_leases AS
SELECT queue, task_id, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
