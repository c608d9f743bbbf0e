-- 0001: the tasks table, the clock and the counter, on PostgreSQL.
--
-- Applied in one transaction together with its row in sqlq_migrations (which
-- sqlq/postgresql/migrate.py creates first), under an advisory lock, so two
-- processes opening a new database never both migrate it.  The same columns,
-- states and constraints as SQLite's sqlq_tasks (sqlq/sqlite/migrations/),
-- so the same questions asked of either give the same answers.

-- One row: the high-water mark of the times that callers passed in (`now=`).
-- Calls that take the server's clock neither read the mark's row lock nor
-- write it, so they never queue behind each other on it.
CREATE TABLE sqlq_clock (
    id  integer PRIMARY KEY CHECK (id = 1),
    now double precision NOT NULL CHECK (now >= 0)
);

INSERT INTO sqlq_clock (id, now) VALUES (1, 0);

-- The counter that hands out line positions, wake-up orders and lease tokens:
-- it only grows, and taking a value never waits for another transaction.
CREATE SEQUENCE sqlq_counter AS bigint MINVALUE 1;

-- One row per task.  Times are seconds since the epoch (double precision).
-- Text that PostgreSQL cannot hold (NUL) is stored escaped: see
-- sqlq/postgresql/text.py.
CREATE TABLE sqlq_tasks (
    id           bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue        text    NOT NULL CHECK (length(queue) > 0),
    task_id      text    NOT NULL,
    state        text    NOT NULL
                 CHECK (state IN ('WAITING', 'AVAILABLE', 'RESERVED', 'COMPLETED', 'DEAD')),
    -- Position in the queue's line (AVAILABLE), or order of wake-up (WAITING).
    seq          bigint  NOT NULL,
    attempts     integer NOT NULL CHECK (attempts >= 0),
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    -- The latest lease's fencing token; kept after the lease ends.
    lease_id     bigint,
    -- When the current lease runs out; set exactly while RESERVED.
    deadline     double precision,
    -- When a WAITING task becomes AVAILABLE; set exactly while WAITING.
    run_at       double precision,
    -- JSON text, or bytes (at most one of the two); both NULL for no payload.
    payload      text,
    payload_bytes bytea,
    last_error   text,
    -- The retry policy the task was added with (see sqlq/retry.py).
    retry_kind   text    NOT NULL DEFAULT 'immediate'
                 CHECK (retry_kind IN ('immediate', 'fixed', 'exponential',
                                       'exponential_jitter')),
    retry_base   double precision NOT NULL DEFAULT 0 CHECK (retry_base >= 0),
    retry_cap    double precision NOT NULL DEFAULT 0 CHECK (retry_cap >= retry_base),
    created_at   double precision NOT NULL,
    updated_at   double precision NOT NULL,
    -- When it became COMPLETED or DEAD; set exactly in those states.
    finished_at  double precision,
    name         text    CHECK (length(name) > 0),
    UNIQUE (queue, task_id),
    CHECK (attempts <= max_attempts),
    CHECK ((state = 'RESERVED') = (deadline IS NOT NULL)),
    CHECK (state <> 'RESERVED' OR lease_id IS NOT NULL),
    CHECK ((state = 'WAITING') = (run_at IS NOT NULL)),
    CHECK (state NOT IN ('AVAILABLE', 'WAITING') OR attempts < max_attempts),
    CHECK (state NOT IN ('RESERVED', 'COMPLETED') OR attempts >= 1),
    CHECK (state <> 'DEAD' OR attempts = max_attempts),
    CHECK ((state IN ('COMPLETED', 'DEAD')) = (finished_at IS NOT NULL)),
    CHECK (payload IS NULL OR payload_bytes IS NULL)
) WITH (
    -- A busy queue rewrites its rows several times each (add, claim, complete)
    -- and a change of state is never a HOT update (the partial indexes below
    -- depend on it), so dead row versions and index entries pile up fast:
    -- vacuum after 1% of the rows changed (not 20%), and without pausing.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0,
    -- Room in each page for the new version of a row updated in place (a
    -- heartbeat moves the deadline only: a HOT update when it fits).
    fillfactor = 85
);

-- The line of each queue: a claim takes the first AVAILABLE rows in seq order.
CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, seq) WHERE state = 'AVAILABLE';

-- Running leases in expiry order: due leases are a range scan, never a table scan.
CREATE INDEX sqlq_tasks_leases ON sqlq_tasks (queue, deadline, lease_id)
    WHERE deadline IS NOT NULL;

-- WAITING tasks in wake-up order.
CREATE INDEX sqlq_tasks_waiting ON sqlq_tasks (queue, run_at, seq)
    WHERE run_at IS NOT NULL;

-- Finished tasks, for retention (purge) and the dead letters.
CREATE INDEX sqlq_tasks_finished ON sqlq_tasks (queue, state, finished_at)
    WHERE finished_at IS NOT NULL;

-- What psql users look at: the same views as on SQLite.
CREATE VIEW sqlq_queue_stats AS
SELECT queue,
       count(*) FILTER (WHERE state = 'WAITING')   AS waiting,
       count(*) FILTER (WHERE state = 'AVAILABLE') AS available,
       count(*) FILTER (WHERE state = 'RESERVED')  AS reserved,
       count(*) FILTER (WHERE state = 'COMPLETED') AS completed,
       count(*) FILTER (WHERE state = 'DEAD')      AS dead,
       min(deadline)                               AS next_deadline,
       min(run_at)                                 AS next_run_at
FROM sqlq_tasks
GROUP BY queue;

CREATE VIEW sqlq_dead_letters AS
SELECT queue, task_id, name, attempts, last_error,
       to_timestamp(finished_at) AS died_at, coalesce(payload, payload_bytes::text) AS payload
FROM sqlq_tasks
WHERE state = 'DEAD'
ORDER BY finished_at DESC;

CREATE VIEW sqlq_leases AS
SELECT queue, task_id, name, lease_id AS token, attempts AS attempt,
       to_timestamp(deadline) AS deadline,
       round((deadline - extract(epoch FROM clock_timestamp()))::numeric, 1) AS seconds_left
FROM sqlq_tasks
WHERE state = 'RESERVED'
ORDER BY sqlq_tasks.deadline, lease_id;
