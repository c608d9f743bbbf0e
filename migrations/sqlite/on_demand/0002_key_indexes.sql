-- On demand 2: the dedupe keys' partial indexes (sqlq/keys.py), made by the first
-- add with a key in the file (inside that add's write transaction, before it
-- looks for the key's holder) and recorded in sqlq_migrations as version -2.
-- Migration 9 made them for every file; migration 13 left them to this one,
-- because every completion, failure and claim changes a column their conditions
-- read (finished_at, state), and so kept both in a file whose queues never use
-- keys (about 5,000 instructions a reserve + complete).  A file that held keyed
-- tasks when it was migrated to 13 gets them in that migration's transaction.
--
-- sqlq_tasks_key_holder: the holder of each key (a task not finished), at most
-- one: an insert of a second holder does nothing.
-- sqlq_tasks_key_finished: the finished tasks of each key, by their finish
-- time, for the window of on_key (key_window).

CREATE UNIQUE INDEX sqlq_tasks_key_holder ON sqlq_tasks (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;

CREATE INDEX sqlq_tasks_key_finished ON sqlq_tasks (queue, dedupe_key, finished_at)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NOT NULL;
