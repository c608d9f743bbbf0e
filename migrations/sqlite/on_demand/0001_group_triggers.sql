-- On demand 1: the group triggers, applied by the first add of a grouped task in
-- the file (inside that add's write transaction) and recorded in sqlq_migrations
-- as version -1 (on-demand migrations have negative versions, so the schema's
-- version, the highest one, stays that of the numbered migrations).  Migration
-- 11 made the tables they keep; they are not made there because every statement
-- that moves a task runs the program of a trigger on it (its WHEN is checked
-- inside), which costs the add, claim and completion of a file whose queues
-- never use groups about a sixth more instructions.
--
-- sqlq_group_added: a grouped task added gets its group's row (with the limits
-- that apply to it, from sqlq_limits) and counts in it, at the front of its line
-- if AVAILABLE and before the front it had (the lowest (line_key, seq)).
-- sqlq_group_moved: every change of a grouped task's state moves its group's row
-- in the same statement: a lease taken (running + 1, the rate's tat moved on,
-- the turn taken) or ended however it ends (running - 1), the unfinished tasks,
-- and the front of the line: read again from the group's line (one probe of
-- sqlq_tasks_group_line) when the task was or is AVAILABLE (a task that joins
-- may go before the front: a higher priority).  So a slot is freed in the
-- transaction that ends its lease, whatever statement ends it.
-- Last, sqlq_clock.grouped (see open_call in queries.sql): from now on the first
-- statement of every call looks for the queue's groups.

CREATE TRIGGER sqlq_group_added AFTER INSERT ON sqlq_tasks
WHEN new.group_key IS NOT NULL
BEGIN
    INSERT INTO sqlq_groups (queue, group_key, cap, spacing)
    SELECT new.queue, new.group_key, coalesce(l.concurrency, 9223372036854775807),
           l.per / l.rate
    FROM (SELECT 1) LEFT JOIN (SELECT concurrency, rate, per FROM sqlq_limits
                               WHERE queue = new.queue
                                 AND (group_key = new.group_key OR group_key = '')
                               ORDER BY group_key = '' LIMIT 1) AS l
    WHERE true
    ON CONFLICT (queue, group_key) DO NOTHING;
    UPDATE sqlq_groups
    SET live = live + 1,
        head_key = iif(new.state = 'AVAILABLE'
                       AND (head IS NULL OR (new.line_key, new.seq) < (head_key, head)),
                       new.line_key, head_key),
        head = iif(new.state = 'AVAILABLE'
                   AND (head IS NULL OR (new.line_key, new.seq) < (head_key, head)),
                   new.seq, head)
    WHERE queue = new.queue AND group_key = new.group_key;
END;

CREATE TRIGGER sqlq_group_moved AFTER UPDATE OF state ON sqlq_tasks
WHEN new.group_key IS NOT NULL AND new.state <> old.state
BEGIN
    UPDATE sqlq_groups
    SET running = running + (new.state = 'RESERVED') - (old.state = 'RESERVED'),
        live = live
               + (new.state = 'AVAILABLE' OR new.state = 'WAITING' OR new.state = 'RESERVED')
               - (old.state = 'AVAILABLE' OR old.state = 'WAITING' OR old.state = 'RESERVED'),
        tat = iif(new.state = 'RESERVED' AND spacing IS NOT NULL,
                  max(tat, new.updated_at) + spacing, tat),
        turn = iif(new.state = 'RESERVED', new.lease_id, turn)
    WHERE queue = new.queue AND group_key = new.group_key;
    UPDATE sqlq_groups
    SET (head_key, head) = (SELECT line_key, seq FROM sqlq_tasks
                            WHERE queue = new.queue AND group_key = new.group_key
                              AND state = 'AVAILABLE'
                            ORDER BY line_key, seq LIMIT 1)
    WHERE queue = new.queue AND group_key = new.group_key
      AND (old.state = 'AVAILABLE' OR new.state = 'AVAILABLE');
END;

UPDATE sqlq_clock SET grouped = 1 WHERE id = 1;
