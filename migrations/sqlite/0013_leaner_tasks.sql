-- 0013: sqlq_tasks rebuilt leaner, so that a queue using none of issue 13's
-- features (priorities, dedupe keys, groups, results) pays for them as little as
-- it can in every add, claim and completion (bench/bounds.md).
--
-- * One line index instead of two: (queue, group_key, line_key, seq) over the
--   AVAILABLE tasks.  The ungrouped line is its group_key IS NULL part (an
--   equality for the index: the claims of a queue without groups read it in
--   line order, as they read sqlq_tasks_line before), and each group's line is
--   its group_key = g part.  Every write of an AVAILABLE task kept one of the two
--   and checked the other's condition; it now keeps one and checks one.
-- * The CHECKs kept are those of the state machine, which the partial indexes,
--   the due probes and the queue logic rely on (the states; a deadline and a
--   token exactly while RESERVED; a wake-up time exactly while WAITING; a finish
--   time exactly when finished; the attempts against max_attempts; a stop request
--   and a result only in their states).  Dropped: the checks of values that every
--   write of sqlq already checks before the statement (a non-empty queue, task
--   name and group; the retry policy; a payload's type; the priority's range and
--   the aging), which cost every insert about 1,900 instructions.  PostgreSQL's
--   migration 2 made the same choice; the conformance and property tests hold
--   both backends to the checks in the code.
-- * The dedupe keys' two partial indexes (migration 9) are not made again here:
--   the first keyed add of a file makes them (on-demand migration 2, as the
--   group triggers), so a file whose queues use no keys keeps none.  Every
--   completion, failure and claim changed a column their conditions read, and
--   kept both (about 5,000 instructions a reserve + complete).  A file that holds
--   keyed tasks gets them in this migration's transaction (migrate.py).
-- * sqlq_clock.paused: 1 while some queue of the file is paused, kept by two
--   triggers on sqlq_paused (so a row written by hand counts too).  The claims
--   probed sqlq_paused in every statement (about 2,000 instructions a claim);
--   now the first statement of a call probes it only while paused is 1
--   (open_call), and a paused queue's claims run no statement.
--
-- As in 0003 and 0007: create the new table, copy every row, drop the old one,
-- rename, then the indexes and the views (dropped first: a view on a dropped
-- table would stop the rename).  Dropping the table drops the group triggers a
-- file may have (on-demand migration 1): the migration runner applies again the
-- on-demand migrations a file recorded (sqlq/sqlite/migrate.py), in this
-- migration's transaction.

DROP VIEW sqlq_queue_stats;

DROP VIEW sqlq_dead_letters;

DROP VIEW sqlq_leases;

CREATE TABLE sqlq_tasks_new (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL,
    task_id      TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state = 'WAITING' OR state = 'AVAILABLE' OR state = 'RESERVED'
                        OR state = 'COMPLETED' OR state = 'DEAD' OR state = 'CANCELLED'),
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
    CHECK ((state = 'RESERVED') = (deadline IS NOT NULL)),
    CHECK (state <> 'RESERVED' OR lease_id IS NOT NULL),
    CHECK ((state = 'WAITING') = (run_at IS NOT NULL)),
    CHECK (state NOT IN ('AVAILABLE', 'WAITING') OR attempts < max_attempts),
    CHECK (state NOT IN ('RESERVED', 'COMPLETED') OR attempts >= 1),
    CHECK (state <> 'DEAD' OR attempts = max_attempts),
    CHECK ((state = 'COMPLETED' OR state = 'DEAD' OR state = 'CANCELLED')
           = (finished_at IS NOT NULL)),
    CHECK (stop_requested_at IS NULL
           OR state = 'RESERVED' OR state = 'COMPLETED' OR state = 'CANCELLED'),
    CHECK (result IS NULL OR state = 'COMPLETED')
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

-- The views, as migrations 7, 8 and 10 left them.
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

ALTER TABLE sqlq_clock ADD COLUMN paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1));

UPDATE sqlq_clock SET paused = EXISTS (SELECT 1 FROM sqlq_paused);

CREATE TRIGGER sqlq_queue_paused AFTER INSERT ON sqlq_paused
BEGIN
    UPDATE sqlq_clock SET paused = 1 WHERE id = 1;
END;

CREATE TRIGGER sqlq_queue_resumed AFTER DELETE ON sqlq_paused
BEGIN
    UPDATE sqlq_clock SET paused = EXISTS (SELECT 1 FROM sqlq_paused) WHERE id = 1;
END;
