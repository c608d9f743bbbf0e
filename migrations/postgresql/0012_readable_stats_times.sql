-- 0012: sqlq_queue_stats shows when its next lease runs out and its next
-- waiting task falls due as UTC text, readable in psql (issue 23), the same
-- text as SQLite's migration 16 writes ('2023-11-14 22:13:50', UTC, whole
-- seconds), whatever the session's time zone: like SQLite's datetime(), the time
-- is rounded to the millisecond, then its fraction of a second left out.
--
-- next_deadline and next_run_at stay what they were, Unix times as in the
-- table (programs read them); the new columns come at the end, as CREATE OR
-- REPLACE VIEW requires.  NULL where there is no such task.

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
       EXISTS (SELECT 1 FROM sqlq_paused WHERE sqlq_paused.queue = sqlq_tasks.queue) AS paused,
       to_char(to_timestamp(round(min(deadline)::numeric, 3)::double precision)
               AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS next_deadline_utc,
       to_char(to_timestamp(round(min(run_at)::numeric, 3)::double precision)
               AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS next_run_at_utc
FROM sqlq_tasks
GROUP BY queue;
