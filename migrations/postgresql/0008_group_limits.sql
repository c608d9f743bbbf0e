-- 0008: per-key concurrency and rate limits, and fairness between groups, as
-- SQLite's 0011 (see there): a task's group_key, the limits set per group
-- (sqlq_limits, '' for the queue's default), and a row per group (sqlq_groups)
-- that triggers keep in step with its tasks in the statement that moves one.
--
-- Concurrency: a claim locks the row of the group it takes a task from (FOR
-- UPDATE SKIP LOCKED, rechecking that the group is below its limits on the row's
-- latest version), and its trigger counts the lease before the lock is let go
-- at commit, so no two calls can both take a group's last slot.  Every other
-- move of a grouped task updates the group's row in its trigger, waiting for
-- that lock.  A lease that ran out counts until a call applies its expiry,
-- whose trigger frees the slot in that call's transaction.
--
-- Lock order, so that no two calls wait for each other: a claim never waits
-- for a row (SKIP LOCKED on the group and on the task alike).  Every other call
-- on a queue with unfinished grouped tasks takes the queue's turn first (the
-- transaction's advisory lock of queries.sql lock_queue, taken by _call before
-- the statement locks any row; applying due events takes it too), so of the
-- calls that wait for rows, one at a time holds a group's row: the rest of a
-- cycle could only be claims, which wait for nothing.  Without the turn, a call
-- that moves tasks of several groups (settle_and_claim, complete_many, due
-- expiries, redrive) waits for one group's row while holding another's, or for
-- a task while holding a group's row, and two such calls deadlock.
-- sqlq_clock.grouped says whether the schema ever had a grouped task: until
-- then no call probes the queue's groups.

ALTER TABLE sqlq_tasks ADD COLUMN group_key text CHECK (length(group_key) > 0);

DROP INDEX sqlq_tasks_line;

CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, line_key, seq)
    WHERE state = 'AVAILABLE' AND group_key IS NULL;

CREATE INDEX sqlq_tasks_group_line ON sqlq_tasks (queue, group_key, line_key, seq)
    WHERE state = 'AVAILABLE' AND group_key IS NOT NULL;

CREATE TABLE sqlq_limits (
    queue       text    NOT NULL CHECK (length(queue) > 0),
    group_key   text    NOT NULL,
    concurrency integer CHECK (concurrency >= 1),
    rate        integer CHECK (rate >= 1),
    per         double precision CHECK (per > 0),
    PRIMARY KEY (queue, group_key),
    CHECK ((rate IS NULL) = (per IS NULL))
);

CREATE TABLE sqlq_groups (
    queue     text    NOT NULL CHECK (length(queue) > 0),
    group_key text    NOT NULL CHECK (length(group_key) > 0),
    live      bigint  NOT NULL DEFAULT 0 CHECK (live >= 0),
    running   bigint  NOT NULL DEFAULT 0 CHECK (running >= 0),
    head_key  double precision,
    head      bigint,
    cap       bigint  NOT NULL CHECK (cap >= 1),
    spacing   double precision CHECK (spacing > 0),
    tat       double precision NOT NULL DEFAULT 0,
    turn      bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, group_key)
);

CREATE INDEX sqlq_groups_by_head ON sqlq_groups (queue, head_key, head)
    WHERE head IS NOT NULL AND running < cap;

CREATE INDEX sqlq_groups_by_turn ON sqlq_groups (queue, turn, head_key, head)
    WHERE head IS NOT NULL AND running < cap;

CREATE INDEX sqlq_groups_live ON sqlq_groups (queue) WHERE live > 0;

ALTER TABLE sqlq_clock ADD COLUMN grouped boolean NOT NULL DEFAULT false;

CREATE FUNCTION sqlq_group_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sqlq_clock SET grouped = true WHERE id = 1 AND NOT grouped;
    INSERT INTO sqlq_groups AS g (queue, group_key, live, head_key, head, cap, spacing)
    SELECT NEW.queue, NEW.group_key, 1,
           CASE WHEN NEW.state = 'AVAILABLE' THEN NEW.line_key END,
           CASE WHEN NEW.state = 'AVAILABLE' THEN NEW.seq END,
           coalesce(l.concurrency, 9223372036854775807), l.per / l.rate
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (SELECT concurrency, rate, per FROM sqlq_limits
                       WHERE queue = NEW.queue AND group_key IN (NEW.group_key, '')
                       ORDER BY group_key = '' LIMIT 1) AS l ON true
    ON CONFLICT (queue, group_key) DO UPDATE
    SET live = g.live + 1,
        head_key = CASE WHEN NEW.state = 'AVAILABLE'
                         AND (g.head IS NULL OR (NEW.line_key, NEW.seq) < (g.head_key, g.head))
                        THEN NEW.line_key ELSE g.head_key END,
        head = CASE WHEN NEW.state = 'AVAILABLE'
                     AND (g.head IS NULL OR (NEW.line_key, NEW.seq) < (g.head_key, g.head))
                    THEN NEW.seq ELSE g.head END;
    RETURN NULL;
END
$$;

CREATE FUNCTION sqlq_group_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    front_key double precision;
    front bigint;
BEGIN
    -- The front of the group's line, read again (one probe of sqlq_tasks_group_line)
    -- when the task was or is AVAILABLE (a task that joins may go before the front:
    -- a higher priority).
    IF OLD.state = 'AVAILABLE' OR NEW.state = 'AVAILABLE' THEN
        SELECT line_key, seq INTO front_key, front FROM sqlq_tasks
        WHERE queue = NEW.queue AND group_key = NEW.group_key AND state = 'AVAILABLE'
        ORDER BY line_key, seq LIMIT 1;
    END IF;
    UPDATE sqlq_groups
    SET running = running + (NEW.state = 'RESERVED')::int - (OLD.state = 'RESERVED')::int,
        live = live + (NEW.state IN ('AVAILABLE', 'WAITING', 'RESERVED'))::int
                    - (OLD.state IN ('AVAILABLE', 'WAITING', 'RESERVED'))::int,
        head_key = CASE WHEN OLD.state = 'AVAILABLE' OR NEW.state = 'AVAILABLE'
                        THEN front_key ELSE head_key END,
        head = CASE WHEN OLD.state = 'AVAILABLE' OR NEW.state = 'AVAILABLE'
                    THEN front ELSE head END,
        tat = CASE WHEN NEW.state = 'RESERVED' AND spacing IS NOT NULL
                   THEN greatest(tat, NEW.updated_at) + spacing ELSE tat END,
        turn = CASE WHEN NEW.state = 'RESERVED' THEN NEW.lease_id ELSE turn END
    WHERE queue = NEW.queue AND group_key = NEW.group_key;
    RETURN NULL;
END
$$;

CREATE TRIGGER sqlq_group_added AFTER INSERT ON sqlq_tasks
FOR EACH ROW WHEN (NEW.group_key IS NOT NULL)
EXECUTE FUNCTION sqlq_group_added();

CREATE TRIGGER sqlq_group_moved AFTER UPDATE OF state ON sqlq_tasks
FOR EACH ROW WHEN (NEW.group_key IS NOT NULL AND NEW.state <> OLD.state)
EXECUTE FUNCTION sqlq_group_moved();
