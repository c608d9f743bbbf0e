-- 0001: the tasks table and the database clock.
--
-- Applied in one transaction together with its row in sqlq_migrations (which
-- sqlq/sqlite/migrate.py creates before the first migration).

-- One row: the database's time high-water mark and the counter that hands out
-- line positions (seq) and lease ids.  Both only ever grow.
CREATE TABLE sqlq_clock (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    now     REAL    NOT NULL CHECK (now >= 0),
    counter INTEGER NOT NULL CHECK (counter >= 0)
) STRICT;

INSERT INTO sqlq_clock (id, now, counter) VALUES (1, 0, 0);

-- One row per task.  Times are seconds (the caller's `now`, Unix time by default).
CREATE TABLE sqlq_tasks (
    id           INTEGER PRIMARY KEY,
    queue        TEXT    NOT NULL CHECK (length(queue) > 0),
    task_id      TEXT    NOT NULL,
    state        TEXT    NOT NULL
                 CHECK (state IN ('AVAILABLE', 'RESERVED', 'COMPLETED', 'DEAD')),
    -- Position in the queue's line: the AVAILABLE task with the lowest seq is next.
    seq          INTEGER NOT NULL,
    -- Reservations so far, and how many are allowed (fixed when the task is added).
    attempts     INTEGER NOT NULL CHECK (attempts >= 0),
    max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),
    -- The latest lease (reservation) of the task; kept after it ends.
    lease_id     INTEGER,
    -- When the current lease runs out; set exactly while RESERVED.
    deadline     REAL,
    created_at   REAL    NOT NULL,
    updated_at   REAL    NOT NULL,
    UNIQUE (queue, task_id),
    CHECK (attempts <= max_attempts),
    CHECK ((state = 'RESERVED') = (deadline IS NOT NULL)),
    CHECK (state <> 'RESERVED' OR lease_id IS NOT NULL),
    CHECK (state <> 'AVAILABLE' OR attempts < max_attempts),
    CHECK (state NOT IN ('RESERVED', 'COMPLETED') OR attempts >= 1),
    CHECK (state <> 'DEAD' OR attempts = max_attempts)
) STRICT;

-- The line of each queue: reserve takes the first AVAILABLE row in seq order.
CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, state, seq);

-- Running leases in expiry order: due leases are a range scan, never a table scan.
CREATE INDEX sqlq_tasks_leases ON sqlq_tasks (deadline, lease_id) WHERE deadline IS NOT NULL;
