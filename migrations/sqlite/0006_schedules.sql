-- 0006: periodic tasks.  One row per queue and schedule: where its ticks stand.
--
-- A schedule's tasks are ordinary tasks whose id holds the tick
-- (`<schedule>@<tick in UTC>`), so the queue itself refuses a tick added twice.
-- This row is what makes a tick never come back once its task is gone (purged)
-- and lets a worker started after downtime know which ticks it missed:
-- handled_until is the time up to which every tick was handled (enqueued, or
-- skipped by the catch-up policy); a call that enqueues ticks moves it with a
-- compare-and-set in the same transaction as the adds (see sqlq/schedule.py).
-- The spec, zone, policy and task name are stored with it, so that `sqlq
-- schedules` lists them and their next run without importing the user's code.

CREATE TABLE sqlq_schedules (
    queue         TEXT NOT NULL CHECK (length(queue) > 0),
    name          TEXT NOT NULL CHECK (length(name) > 0),
    -- The name of the task each tick adds (sqlq.Tasks), or NULL.
    task          TEXT CHECK (length(task) > 0),
    -- 'cron <expression>' or 'every <seconds>'.
    spec          TEXT NOT NULL CHECK (length(spec) > 0),
    tz            TEXT NOT NULL CHECK (length(tz) > 0),
    catch_up      TEXT NOT NULL
                  CHECK (catch_up = 'all' OR catch_up = 'latest' OR catch_up = 'none'),
    handled_until REAL NOT NULL,
    -- The latest tick a task was added for; NULL before the first.
    last_enqueued REAL,
    updated_at    REAL NOT NULL,
    PRIMARY KEY (queue, name)
) STRICT;
