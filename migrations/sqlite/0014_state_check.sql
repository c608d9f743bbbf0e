-- 0014: the state machine's CHECKs of sqlq_tasks as one CASE on the state,
-- so that a queue using none of issue 13's features pays no more than before
-- them for every add, claim and completion (bench/bounds.md).
--
-- SQLite evaluates every CHECK that reads a column an UPDATE sets; every move
-- sets the state, so each of the ten CHECKs of migration 13 that read it ran on
-- every claim and completion (and all of them on every insert): each compares
-- the state with one or more strings.  The CASE compares it until it finds its
-- branch (the moves' states first) and tests only that state's rule: about
-- 6,000 instructions less a claim + completion, counted beside the ten CHECKs
-- on the same rows.  The rules are the same, branch for branch (tests/
-- test_schema.py writes every kind of bad row in the real sqlite3 shell), and
-- a state outside the six fails the CHECK (ELSE 0), as the column's CHECK did.
--
-- As in 0013: create the new table, copy every row, drop the old one, rename,
-- then the indexes and the views (dropped first: a view on a dropped table
-- would stop the rename).  The migration runner applies again, in this
-- migration's transaction, the on-demand migrations a file recorded whose
-- triggers or indexes the drop took (sqlq/sqlite/migrate.py).

DROP VIEW sqlq_queue_stats;

DROP VIEW sqlq_dead_letters;

DROP VIEW sqlq_leases;

CREATE TABLE sqlq_tasks_new (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    task_id      TEXT    NOT NULL,
    state        TEXT    NOT NULL,
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
    retry_kind   TEXT    NOT NULL DEFAULT 'immediate',
    retry_base   REAL    NOT NULL DEFAULT 0,
    retry_cap    REAL    NOT NULL DEFAULT 0,
    created_at   REAL    NOT NULL,
    updated_at   REAL    NOT NULL,
    -- When it became COMPLETED, DEAD or CANCELLED; set exactly in those states.
    finished_at  REAL,
    name         TEXT,
    -- When cancel asked the running task to stop.
    stop_requested_at REAL,
    -- The handler's return value (JSON text), kept with a COMPLETED task.
    result       TEXT,
    -- What the handler reported of its work (a number and a message).
    progress     REAL,
    progress_message TEXT,
    -- The dedupe key the task holds (sqlq/keys.py).
    dedupe_key   TEXT,
    -- Higher first; line_key = the time it joined the line - priority * aging
    -- (see sqlq/contract.py, Priorities).
    priority     INTEGER NOT NULL DEFAULT 0,
    aging        REAL    NOT NULL DEFAULT 60,
    line_key     REAL    NOT NULL DEFAULT 0,
    -- The group whose limits it is under (migration 11), or NULL.
    group_key    TEXT,
    UNIQUE (queue, task_id),
    CHECK (attempts <= max_attempts),
    -- The state machine, one branch a state, most written first: a deadline
    -- and a token exactly while RESERVED, a wake-up time exactly while WAITING,
    -- a finish time exactly when finished, the attempts against max_attempts, a
    -- stop request (RESERVED, COMPLETED, CANCELLED) and a result (COMPLETED)
    -- only in their states.  ELSE 0: no other state.
    CHECK (CASE state
        WHEN 'RESERVED' THEN deadline IS NOT NULL AND lease_id IS NOT NULL AND run_at IS NULL
                             AND finished_at IS NULL AND attempts >= 1 AND result IS NULL
        WHEN 'COMPLETED' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NOT NULL
                              AND attempts >= 1
        WHEN 'AVAILABLE' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NULL
                              AND attempts < max_attempts AND stop_requested_at IS NULL
                              AND result IS NULL
        WHEN 'WAITING' THEN deadline IS NULL AND run_at IS NOT NULL AND finished_at IS NULL
                            AND attempts < max_attempts AND stop_requested_at IS NULL
                            AND result IS NULL
        WHEN 'DEAD' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NOT NULL
                         AND attempts = max_attempts AND stop_requested_at IS NULL
                         AND result IS NULL
        WHEN 'CANCELLED' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NOT NULL
                              AND result IS NULL
        ELSE 0 END)
) STRICT;

INSERT INTO sqlq_tasks_new
    (id, queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline, run_at,
     payload, last_error, retry_kind, retry_base, retry_cap, created_at, updated_at,
     finished_at, name, stop_requested_at, result, progress, progress_message, dedupe_key,
     priority, aging, line_key, group_key)
SELECT id, queue, task_id, state, seq, attempts, max_attempts, lease_id, deadline, run_at,
       payload, last_error, retry_kind, retry_base, retry_cap, created_at, updated_at,
       finished_at, name, stop_requested_at, result, progress, progress_message, dedupe_key,
       priority, aging, line_key, group_key
FROM sqlq_tasks;

DROP TABLE sqlq_tasks;

ALTER TABLE sqlq_tasks_new RENAME TO sqlq_tasks;

CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, group_key, line_key, seq)
    WHERE state = 'AVAILABLE';

CREATE INDEX sqlq_tasks_leases ON sqlq_tasks (queue, deadline, lease_id)
    WHERE deadline IS NOT NULL;

CREATE INDEX sqlq_tasks_waiting ON sqlq_tasks (queue, run_at, seq)
    WHERE run_at IS NOT NULL;

CREATE INDEX sqlq_tasks_finished ON sqlq_tasks (queue, state, finished_at)
    WHERE finished_at IS NOT NULL;

-- The views, as migration 13 left them.
CREATE VIEW sqlq_queue_stats AS
SELECT queue,
       sum(state = 'WAITING')   AS waiting,
       sum(state = 'AVAILABLE') AS available,
       sum(state = 'RESERVED')  AS reserved,
       sum(state = 'COMPLETED') AS completed,
       sum(state = 'DEAD')      AS dead,
       min(deadline)            AS next_deadline,
       min(run_at)              AS next_run_at,
       sum(state = 'CANCELLED') AS cancelled,
       EXISTS (SELECT 1 FROM sqlq_paused WHERE sqlq_paused.queue = sqlq_tasks.queue) AS paused
FROM sqlq_tasks
GROUP BY queue;

CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       datetime(finished_at, 'unixepoch') AS died_at_utc, payload, dedupe_key,
       priority
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message, dedupe_key,
       priority
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
