-- 0011: a lock order for the calls that move grouped tasks, instead of the
-- queue's turn (migration 0008's lock order: every call but a claim took the
-- queue's advisory lock, so completions, failures, expiries, cancels and adds
-- ran one at a time across all the workers of a queue with grouped tasks).
--
-- The triggers that count a grouped task's moves are deferred constraint
-- triggers: a move is counted when the call's transaction ends (or when the
-- call flushes them: SET CONSTRAINTS ... IMMEDIATE), not in the statement that
-- made it.  The lock order (the one statement of it: sqlq/postgresql/backend.py,
-- "The lock order"):
--
-- 0. the schema's limits lock, an advisory lock in the two-int key space
--    (1936813169 = "sqlq", hashtext of the schema), which no queue's turn (one
--    bigint key) can be: shared by every call of a schema that ever had a
--    grouped task, in the call's first statement (queries.sql _call), by
--    lock_groups and by these triggers before any group row (free when the
--    transaction holds it); exclusive in set_limit's first statement;
-- 1. the task rows, as a call's statements reach them (a claim never waits:
--    SKIP LOCKED on tasks and groups alike);
-- 2. in one statement (queries.sql lock_groups), the rows of all the groups it
--    moved tasks of, in group-key order, before the deferred triggers run;
-- 3. the clock row (raise_mark), after the triggers ran.
--
-- A claim counts its lease at once (the claim sets the triggers IMMEDIATE for
-- its statement, after flushing the call's earlier moves in that order), under
-- the group row it locked with SKIP LOCKED, so that no two claims take a group's
-- last slot.
--
-- sqlq_group_moved keeps 0010's order: it locks the group's row before it reads
-- the front of the group's line.  A group whose row a purge forgot (no
-- unfinished task: see queries.sql forget_groups) and whose DEAD task a redrive
-- brings back has its row made anew by the trigger, as an add's makes it (the
-- redrive no longer makes it in its own statement, which would lock the row in
-- the middle of the call, out of the lock order).
--
-- A group's limits are read from sqlq_limits only when its row is made, under
-- the limits lock: a set_limit (exclusive) that starts while an add makes a
-- group waits for the add's commit, then finds and limits the group; an add that
-- makes a group while a set_limit runs waits for its commit, then reads its
-- limits.

CREATE OR REPLACE FUNCTION sqlq_group_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1936813169, hashtext(TG_TABLE_SCHEMA));
    UPDATE sqlq_groups AS g
    SET live = g.live + 1,
        head_key = CASE WHEN NEW.state = 'AVAILABLE'
                         AND (g.head IS NULL OR (NEW.line_key, NEW.seq) < (g.head_key, g.head))
                        THEN NEW.line_key ELSE g.head_key END,
        head = CASE WHEN NEW.state = 'AVAILABLE'
                     AND (g.head IS NULL OR (NEW.line_key, NEW.seq) < (g.head_key, g.head))
                    THEN NEW.seq ELSE g.head END
    WHERE g.queue = NEW.queue AND g.group_key = NEW.group_key;
    IF NOT FOUND THEN
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
                             AND (g.head IS NULL
                                  OR (NEW.line_key, NEW.seq) < (g.head_key, g.head))
                            THEN NEW.line_key ELSE g.head_key END,
            head = CASE WHEN NEW.state = 'AVAILABLE'
                         AND (g.head IS NULL OR (NEW.line_key, NEW.seq) < (g.head_key, g.head))
                        THEN NEW.seq ELSE g.head END;
    END IF;
    UPDATE sqlq_clock SET grouped = true WHERE id = 1 AND NOT grouped;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION sqlq_group_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    front_key double precision;
    front bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(1936813169, hashtext(TG_TABLE_SCHEMA));
    LOOP
        IF OLD.state = 'AVAILABLE' OR NEW.state = 'AVAILABLE' THEN
            PERFORM 1 FROM sqlq_groups
            WHERE queue = NEW.queue AND group_key = NEW.group_key
            FOR UPDATE;
            -- The front of the group's line, read again (one probe of
            -- sqlq_tasks_group_line) when the task was or is AVAILABLE (a task that
            -- joins may go before the front: a higher priority).
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
        EXIT WHEN FOUND;
        -- No row: a purge forgot the group (it had no unfinished task), and a redrive
        -- brings one back.  Made anew as sqlq_group_added makes a group; a row
        -- another transaction makes meanwhile is waited for, then updated as above.
        INSERT INTO sqlq_groups (queue, group_key, live, running, head_key, head, cap, spacing)
        SELECT NEW.queue, NEW.group_key,
               (NEW.state IN ('AVAILABLE', 'WAITING', 'RESERVED'))::int,
               (NEW.state = 'RESERVED')::int,
               front_key, front,
               coalesce(l.concurrency, 9223372036854775807), l.per / l.rate
        FROM (SELECT 1) AS one
        LEFT JOIN LATERAL (SELECT concurrency, rate, per FROM sqlq_limits
                           WHERE queue = NEW.queue AND group_key IN (NEW.group_key, '')
                           ORDER BY group_key = '' LIMIT 1) AS l ON true
        ON CONFLICT (queue, group_key) DO NOTHING;
        EXIT WHEN FOUND;
    END LOOP;
    RETURN NULL;
END
$$;

DROP TRIGGER sqlq_group_added ON sqlq_tasks;

DROP TRIGGER sqlq_group_moved ON sqlq_tasks;

CREATE CONSTRAINT TRIGGER sqlq_group_added AFTER INSERT ON sqlq_tasks
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.group_key IS NOT NULL)
EXECUTE FUNCTION sqlq_group_added();

CREATE CONSTRAINT TRIGGER sqlq_group_moved AFTER UPDATE OF state ON sqlq_tasks
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.group_key IS NOT NULL AND NEW.state <> OLD.state)
EXECUTE FUNCTION sqlq_group_moved();
