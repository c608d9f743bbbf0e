-- 0003: periodic tasks.  One row per queue and schedule: where its ticks stand;
-- the same columns as SQLite's sqlq_schedules (sqlq/sqlite/migrations/0006).
--
-- A schedule's tasks are ordinary tasks whose id holds the tick, so the queue
-- itself refuses a tick added twice.  handled_until is the time up to which every
-- tick was handled (enqueued, or skipped by the catch-up policy): a call that
-- enqueues ticks moves it with a compare-and-set in the same transaction as the
-- adds, so two schedulers running at once never both move it (the second's
-- update finds it moved, and its call is rolled back and tried again).

CREATE TABLE sqlq_schedules (
    queue         text NOT NULL CHECK (length(queue) > 0),
    name          text NOT NULL CHECK (length(name) > 0),
    task          text CHECK (length(task) > 0),
    spec          text NOT NULL CHECK (length(spec) > 0),
    tz            text NOT NULL CHECK (length(tz) > 0),
    catch_up      text NOT NULL CHECK (catch_up IN ('all', 'latest', 'none')),
    handled_until double precision NOT NULL,
    last_enqueued double precision,
    updated_at    double precision NOT NULL,
    PRIMARY KEY (queue, name)
);
