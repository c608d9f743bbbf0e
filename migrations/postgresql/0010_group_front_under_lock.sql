-- 0010: the trigger that counts a grouped task's move (migration 0008) locks its
-- group's row before it reads the front of the group's line, not after.  Read
-- first, the front could be another transaction's past: a cancel waiting for the
-- row that a claim of the group's next task held wrote, once the claim committed,
-- the front it had read before it (the task just claimed), and the group's claims
-- then found nothing at its front.  With the lock first the read comes after every
-- earlier mover of the group committed (READ COMMITTED: each statement of the
-- function reads anew).  The row is locked at the same point of a call as before
-- (the UPDATE took it there), so the lock order does not change.

CREATE OR REPLACE FUNCTION sqlq_group_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    front_key double precision;
    front bigint;
BEGIN
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
    RETURN NULL;
END
$$;
