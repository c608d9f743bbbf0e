-- 0005: results and progress, as SQLite's 0008.  A task keeps what its handler
-- returned (the completion writes it, as JSON text) and the latest progress a
-- lease of it reported (a number and a message).  All NULL until written.
--
-- Nullable columns without defaults: ADD COLUMN rewrites nothing.  No CHECK
-- (each costs server CPU in every write, see 0002) and no index: nothing looks
-- tasks up by these columns, and a progress report changes no indexed column,
-- so like a heartbeat it can be a HOT update.

ALTER TABLE sqlq_tasks
    ADD COLUMN result text,
    ADD COLUMN progress double precision,
    ADD COLUMN progress_message text;

-- The leases view of 0004, recreated to show the progress of running tasks.
DROP VIEW sqlq_leases;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       to_timestamp(deadline) AS deadline,
       round((deadline - extract(epoch FROM clock_timestamp()))::numeric, 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY sqlq_tasks.deadline, lease_id;
