-- 0008: results and progress.  A task keeps what its handler returned (the
-- completion writes it, as JSON text) and the latest progress a lease of it
-- reported (a number and a message).  All NULL until written.
--
-- New nullable columns need no rebuild: ADD COLUMN leaves every row as it is
-- (NULL), and SQLite checks the CHECKs against the rows already there.  The
-- completion sets the result in the statement that completes (no statement
-- more), and nothing looks tasks up by these columns: no index.

ALTER TABLE sqlq_tasks ADD COLUMN result TEXT CHECK (result IS NULL OR state = 'COMPLETED');

ALTER TABLE sqlq_tasks ADD COLUMN progress REAL;

ALTER TABLE sqlq_tasks ADD COLUMN progress_message TEXT;

-- The leases view of 0007, recreated to show the progress of running tasks.
DROP VIEW sqlq_leases;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
