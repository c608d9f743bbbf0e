-- 0011: per-key concurrency and rate limits, and fairness between groups.
--
-- * group_key: a task's group (a tenant, a user, an API); NULL for none.  Grouped
--   tasks stay out of the ungrouped line's index (sqlq_tasks_line), so the claims
--   of a queue without groups read what they read before; grouped AVAILABLE tasks
--   have a line per group (sqlq_tasks_group_line).
-- * sqlq_limits: the limits set per group of a queue, and the queue's default
--   for groups without a row of their own (group_key ''), by set_limit.
--   concurrency: leases at once; rate and per: starts, spaced per/rate seconds
--   apart.  NULL: no such limit.
-- * sqlq_groups: a row per group that ever had a task: its RESERVED tasks
--   (running), its unfinished ones (live), the line key and seq of the front of
--   its line (head_key, head; NULL when it has no AVAILABLE task), its limits as they apply (cap,
--   spacing), the earliest time of its next start (tat, the "theoretical arrival
--   time" of a GCRA without a burst) and the token of its latest lease (turn,
--   the order of the round robin).  Two triggers keep it in step with the tasks
--   in the statement that moves a task, whatever statement that is (a claim, a
--   completion, an expiry applied, a cancel), so a slot is freed in the
--   transaction that ends its lease.  They are not made here but by the
--   on-demand migration 1 (migrations/on_demand/0001_group_triggers.sql), which
--   the first add of a grouped task applies and records: every statement that
--   moves a task runs the program of a trigger on it (its WHEN is checked
--   inside), which costs the add, claim and completion of a file whose queues
--   never use groups a sixth more.  The claims pick a group by the partial indexes of groups that can
--   start one (a front of line and a free slot): a group at its limit is not
--   read at all.

ALTER TABLE sqlq_tasks ADD COLUMN group_key TEXT CHECK (length(group_key) > 0);

DROP INDEX sqlq_tasks_line;

CREATE INDEX sqlq_tasks_line ON sqlq_tasks (queue, line_key, seq)
    WHERE state = 'AVAILABLE' AND group_key IS NULL;

CREATE INDEX sqlq_tasks_group_line ON sqlq_tasks (queue, group_key, line_key, seq)
    WHERE group_key IS NOT NULL AND state = 'AVAILABLE';

-- sqlq_clock.grouped: 1 once a grouped task was added to the file (set by the
-- on-demand migration that makes the triggers): until then the first statement of a call does not look
-- for groups (open_call), so a file without groups pays no probe of them.
ALTER TABLE sqlq_clock ADD COLUMN grouped INTEGER NOT NULL DEFAULT 0 CHECK (grouped IN (0, 1));

CREATE TABLE sqlq_limits (
    queue       TEXT    NOT NULL CHECK (length(queue) > 0),
    group_key   TEXT    NOT NULL,
    concurrency INTEGER CHECK (concurrency >= 1),
    rate        INTEGER CHECK (rate >= 1),
    per         REAL    CHECK (per > 0),
    PRIMARY KEY (queue, group_key),
    CHECK ((rate IS NULL) = (per IS NULL))
) STRICT, WITHOUT ROWID;

CREATE TABLE sqlq_groups (
    queue     TEXT    NOT NULL CHECK (length(queue) > 0),
    group_key TEXT    NOT NULL CHECK (length(group_key) > 0),
    live      INTEGER NOT NULL DEFAULT 0 CHECK (live >= 0),
    running   INTEGER NOT NULL DEFAULT 0 CHECK (running >= 0),
    head_key  REAL,
    head      INTEGER,
    cap       INTEGER NOT NULL CHECK (cap >= 1),
    spacing   REAL    CHECK (spacing > 0),
    tat       REAL    NOT NULL DEFAULT 0,
    turn      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, group_key)
) STRICT, WITHOUT ROWID;

-- Groups that can start a task, in line order (the front of each group's line)
-- and in round-robin order (the group served longest ago first).
CREATE INDEX sqlq_groups_by_head ON sqlq_groups (queue, head_key, head)
    WHERE head IS NOT NULL AND running < cap;

CREATE INDEX sqlq_groups_by_turn ON sqlq_groups (queue, turn, head_key, head)
    WHERE head IS NOT NULL AND running < cap;

-- Groups with unfinished tasks: a call's first statement asks whether the queue
-- has any (in a file marked grouped: sqlq_clock.grouped), and its claims take the
-- ungrouped line's statements when it has none.
CREATE INDEX sqlq_groups_live ON sqlq_groups (queue) WHERE live > 0;
