-- 0016: sqlq_queue_stats shows when its next lease runs out and its next
-- waiting task falls due as UTC text, readable in the sqlite3 shell (issue 23).
--
-- next_deadline and next_run_at stay what they were, Unix times as in the
-- table (programs read them); next_deadline_utc and next_run_at_utc, added at
-- the end so that a query naming the columns or reading them in order keeps
-- working, are the same times as datetime(..., 'unixepoch') writes them
-- ('2023-11-14 22:13:50', UTC, whole seconds), as sqlq_leases.deadline_utc and
-- sqlq_dead_letters.died_at_utc are written.  NULL where there is no such task.
-- Only the view changes: no table is touched.

DROP VIEW sqlq_queue_stats;

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
       EXISTS (SELECT 1 FROM sqlq_paused WHERE sqlq_paused.queue = sqlq_tasks.queue) AS paused,
       datetime(min(deadline), 'unixepoch') AS next_deadline_utc,
       datetime(min(run_at), 'unixepoch')   AS next_run_at_utc
FROM sqlq_tasks
GROUP BY queue;
