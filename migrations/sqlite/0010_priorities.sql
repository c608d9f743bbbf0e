-- 0010: priorities (see sqlq/contract.py).  A task has a priority and an
-- aging (its queue's when it was added, as max_attempts and the retry policy),
-- and the line is ordered by a line key, then by seq (the order tasks joined
-- it).  The key is what contract.line_key gives when the task becomes
-- AVAILABLE: the time it joined, moved priority * aging seconds earlier (strict
-- priorities: an aging longer than any wait).  With every priority 0 it is the
-- line of before: times and seqs grow together.
--
-- ADD COLUMN with a constant default rewrites no row.  The tasks in line before
-- this migration get key 0: ahead of every task added after it with priority 0
-- (their order among themselves is their seq, as before).

ALTER TABLE sqlq_tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0
    CHECK (priority BETWEEN -1000 AND 1000);

ALTER TABLE sqlq_tasks ADD COLUMN aging REAL NOT NULL DEFAULT 60 CHECK (aging > 0);

ALTER TABLE sqlq_tasks ADD COLUMN line_key REAL NOT NULL DEFAULT 0;

-- The line: a claim takes the first AVAILABLE row in (line_key, seq) order, one
-- probe of this index as before.
DROP INDEX sqlq_tasks_line;

CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, line_key, seq) WHERE state = 'AVAILABLE';

-- The views of 0009, recreated to show the priorities too.
DROP VIEW sqlq_dead_letters;

CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       datetime(finished_at, 'unixepoch') AS died_at_utc, payload, dedupe_key,
       priority
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

DROP VIEW sqlq_leases;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       datetime(deadline, 'unixepoch') AS deadline_utc,
       round(deadline - unixepoch(), 1) AS seconds_left,
       stop_requested_at IS NOT NULL AS stop_requested, progress, progress_message, dedupe_key,
       priority
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY deadline, lease_id;
