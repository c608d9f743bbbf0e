-- 0004: cancel and pause (see sqlq/contract.py), as SQLite's 0007.
--
-- * A new finished state, CANCELLED: a task cancelled before it started, or a
--   running one whose lease ended, other than by a completion, after it was
--   asked to stop.  finished_at is set in it, as in COMPLETED and DEAD.
-- * stop_requested_at: when cancel asked the running task to stop; NULL if it
--   was not.  Set only while RESERVED, and kept in the state its lease ends in.
-- * sqlq_paused: a row per paused queue.  The claims probe its key, so a paused
--   queue hands out no lease whoever claims.
--
-- The two CHECK constraints that name the finished states are replaced; adding
-- them checks every row once.  0001 left them PostgreSQL's names: the column's
-- (sqlq_tasks_state_check), and for the one on finished_at a number that
-- depends on the order of the table's constraints, so it is found by what it
-- says.

ALTER TABLE sqlq_tasks DROP CONSTRAINT sqlq_tasks_state_check;

DO $$
DECLARE
    found text;
BEGIN
    SELECT conname INTO STRICT found FROM pg_constraint
    WHERE conrelid = 'sqlq_tasks'::regclass AND contype = 'c'
      AND position('finished_at' IN pg_get_constraintdef(oid)) > 0;
    EXECUTE format('ALTER TABLE sqlq_tasks DROP CONSTRAINT %I', found);
END
$$;

ALTER TABLE sqlq_tasks ADD COLUMN stop_requested_at double precision;

ALTER TABLE sqlq_tasks ADD CONSTRAINT sqlq_tasks_state_check
    CHECK (state IN ('WAITING', 'AVAILABLE', 'RESERVED', 'COMPLETED', 'DEAD', 'CANCELLED'));

ALTER TABLE sqlq_tasks ADD CONSTRAINT sqlq_tasks_finished_check
    CHECK ((state IN ('COMPLETED', 'DEAD', 'CANCELLED')) = (finished_at IS NOT NULL));

ALTER TABLE sqlq_tasks ADD CONSTRAINT sqlq_tasks_stop_check
    CHECK (stop_requested_at IS NULL OR state IN ('RESERVED', 'COMPLETED', 'CANCELLED'));

CREATE TABLE sqlq_paused (
    queue     text PRIMARY KEY CHECK (length(queue) > 0),
    paused_at double precision NOT NULL
);

-- The views of 0001, with the cancelled tasks, the paused queues and the stop
-- requests (new columns at the end, as CREATE OR REPLACE VIEW requires).
CREATE OR REPLACE VIEW sqlq_queue_stats AS
SELECT queue,
       count(*) FILTER (WHERE state = 'WAITING')   AS waiting,
       count(*) FILTER (WHERE state = 'AVAILABLE') AS available,
       count(*) FILTER (WHERE state = 'RESERVED')  AS reserved,
       count(*) FILTER (WHERE state = 'COMPLETED') AS completed,
       count(*) FILTER (WHERE state = 'DEAD')      AS dead,
       min(deadline)                               AS next_deadline,
       min(run_at)                                 AS next_run_at,
       count(*) FILTER (WHERE state = 'CANCELLED') AS cancelled,
       EXISTS (SELECT 1 FROM sqlq_paused WHERE sqlq_paused.queue = sqlq_tasks.queue) AS paused
FROM sqlq_tasks
GROUP BY queue;

CREATE OR REPLACE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       to_timestamp(deadline) AS deadline,
       round((deadline - extract(epoch FROM clock_timestamp()))::numeric, 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY sqlq_tasks.deadline, lease_id;
