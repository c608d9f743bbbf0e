-- 0006: dedupe keys, as SQLite's 0009 (see sqlq/keys.py).  A task added with a
-- key keeps it in dedupe_key; NULL for every other task.  A nullable column
-- without a default: ADD COLUMN rewrites nothing.  No CHECK (see 0002).
ALTER TABLE sqlq_tasks ADD COLUMN dedupe_key text;

-- The holder of a key: the one task of its queue with the key that is not
-- finished (finished_at IS NULL is exactly WAITING, AVAILABLE or RESERVED, by
-- the CHECK that 0002 kept).  Unique: this is what keeps two calls that probe
-- for a holder at once (READ COMMITTED: neither sees the other's insert) from
-- both adding one.  The add inserts with ON CONFLICT DO NOTHING, which waits
-- for the other call's transaction and, if it commits, adds nothing; the add
-- then finds that call's task as the holder.  Tasks without a key are not in it.
CREATE UNIQUE INDEX sqlq_tasks_key_holder ON sqlq_tasks (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;

-- Finished tasks of a key by age: an add with a key_window probes the latest.
CREATE INDEX sqlq_tasks_key_finished ON sqlq_tasks (queue, dedupe_key, finished_at)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NOT NULL;

-- The views of 0001 and 0005 that show tasks, with their keys (new columns at
-- the end, as CREATE OR REPLACE VIEW requires).
CREATE OR REPLACE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       to_timestamp(finished_at) AS died_at, coalesce(payload, payload_bytes::text) AS payload,
       dedupe_key
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE OR REPLACE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       to_timestamp(deadline) AS deadline,
       round((deadline - extract(epoch FROM clock_timestamp()))::numeric, 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message, dedupe_key
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY sqlq_tasks.deadline, lease_id;
