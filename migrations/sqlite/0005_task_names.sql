-- 0005: tasks by name.  A task may carry the name of the function that runs it
-- (sqlq.Tasks); NULL for a task added without one.  Leases hand it out, so
-- claim returns it from the row it updates (no extra statement).
--
-- A new nullable column needs no rebuild: ADD COLUMN leaves every row as it is
-- (NULL) and SQLite checks the CHECK against the rows already there.
--
-- No index on name: nothing on the hot path looks tasks up by name, and `sqlq
-- stats` counts them per name with one GROUP BY over the table, which suits an
-- inspection command better than an index every add and change of state would
-- have to keep up.

ALTER TABLE sqlq_tasks ADD COLUMN name TEXT CHECK (length(name) > 0);

-- The views of 0003 that list tasks, recreated to show the name.
DROP VIEW sqlq_dead_letters;

DROP VIEW sqlq_leases;

CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       datetime(finished_at, 'unixepoch') AS died_at_utc, payload
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
