-- 0009: dedupe keys (see sqlq/keys.py).  A task added with a key keeps it in
-- dedupe_key; NULL for every other task.  A nullable column without a default
-- needs no rebuild (ADD COLUMN leaves every row as it is) and no CHECK: the code
-- checks keys as it checks names, and every CHECK costs every write.
ALTER TABLE sqlq_tasks ADD COLUMN dedupe_key TEXT;

-- The holder of a key: the one task of its queue with the key that is not
-- finished (finished_at IS NULL is exactly WAITING, AVAILABLE or RESERVED, by
-- the table's CHECK).  Unique, so that no path can make a second holder; an add
-- probes it before it inserts.  Tasks without a key are not in it.
CREATE UNIQUE INDEX sqlq_tasks_key_holder ON sqlq_tasks (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;

-- Finished tasks of a key by age: an add with a key_window probes the latest.
CREATE INDEX sqlq_tasks_key_finished ON sqlq_tasks (queue, dedupe_key, finished_at)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NOT NULL;

-- The views of 0007 and 0008 that show tasks, with their keys.
DROP VIEW sqlq_dead_letters;

DROP VIEW sqlq_leases;

CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       datetime(finished_at, 'unixepoch') AS died_at_utc, payload, dedupe_key
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message, dedupe_key
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
