-- 0007: priorities, as SQLite's 0010 (see sqlq/contract.py).  A task has a
-- priority and an aging (its queue's when it was added, as max_attempts and the
-- retry policy), and the line is ordered by a line key, then by seq (the order
-- tasks joined it).  The key is what contract.line_key gives when the task becomes
-- AVAILABLE: the time it joined, moved priority * aging seconds earlier (strict
-- priorities: an aging longer than any wait).  With every priority 0 it is the
-- line of before: times and seqs grow together.
--
-- ADD COLUMN with a constant default rewrites no row.  The tasks in line before
-- this migration get key 0: ahead of every task added after it with priority 0
-- (their order among themselves is their seq, as before).  No CHECK on the
-- range (see 0002: the code checks it before any write).

ALTER TABLE sqlq_tasks
    ADD COLUMN priority integer NOT NULL DEFAULT 0,
    ADD COLUMN aging double precision NOT NULL DEFAULT 60,
    ADD COLUMN line_key double precision NOT NULL DEFAULT 0;

-- The line: a claim takes the first AVAILABLE rows in (line_key, seq) order, one
-- probe of this index as before.
DROP INDEX sqlq_tasks_line;

CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, line_key, seq) WHERE state = 'AVAILABLE';

-- The views of 0006, with the priorities (new columns at the end, as
-- CREATE OR REPLACE VIEW requires).
CREATE OR REPLACE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       to_timestamp(finished_at) AS died_at, coalesce(payload, payload_bytes::text) AS payload,
       dedupe_key, priority
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE OR REPLACE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       to_timestamp(deadline) AS deadline,
       round((deadline - extract(epoch FROM clock_timestamp()))::numeric, 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message, dedupe_key,
       priority
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY sqlq_tasks.deadline, lease_id;
