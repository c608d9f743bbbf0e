-- Every SQL statement sqlq runs against PostgreSQL, one named block each.
--
-- A block starts with `-- name: <name>`, continues with comment lines that say
-- what it does, and ends where the next block starts.  Parameters are psycopg's
-- %(name)s; times are bound as double precision (seconds since the epoch).
-- psycopg prepares a statement on the server once it has run a few times, so
-- the calls' statements are planned once per connection.
--
-- Transactions run at READ COMMITTED (see begin): each statement sees what was
-- committed when it began, and a row it updates is rechecked against its WHERE
-- after any wait for the row (so every compare-and-set below holds under
-- concurrency).

-- name: begin
-- Start a call's transaction, at READ COMMITTED whatever default the user set
-- (default_transaction_isolation for the database or role): at REPEATABLE READ
-- or SERIALIZABLE concurrent claims would fail with serialization errors
-- instead of passing over the rows other calls hold.
BEGIN ISOLATION LEVEL READ COMMITTED

-- name: commit
-- Make the call's transaction durable (as synchronous_commit says).
COMMIT

-- name: rollback
-- Undo the call's transaction after an error.
ROLLBACK

-- name: savepoint
-- Start a call inside the caller's own open transaction (transactional enqueue
-- and completion): its statements can be undone without touching the caller's.
SAVEPOINT sqlq_call

-- name: release_savepoint
-- Keep the call's statements; they commit or roll back with the caller's transaction.
RELEASE SAVEPOINT sqlq_call

-- name: rollback_to_savepoint
-- Undo the call's statements after an error, leaving the caller's transaction open.
ROLLBACK TO SAVEPOINT sqlq_call

-- name: limit_idle_in_transaction
-- On the queue's own connection: a session that sits inside a transaction this
-- long (a process frozen in the middle of a call) is ended by the server, which
-- undoes the call and frees its rows and the queue's turn.
SELECT set_config('idle_in_transaction_session_timeout', %(ms)s::text, false)

-- name: use_schema
-- A call in the caller's transaction (conn=): sqlq's tables are the queue's own,
-- whatever search_path the caller set (a multi-tenant app's SET LOCAL): the
-- queue's schema first until the call ends.  Returns the caller's search_path.
SELECT current_setting('search_path'), set_config('search_path', quote_ident(%(schema)s), true)

-- name: restore_search_path
-- After a call in the caller's transaction: the caller's search_path again.
SELECT set_config('search_path', %(path)s, true)

-- name: lock_queue
-- Strict mode, first statement of every call: one call at a time per queue (of
-- this schema), until the transaction ends.  Calls then see exactly what they
-- would see on SQLite, whatever runs concurrently.
SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':' || %(queue)s, 0))

-- name: try_lock_queue
-- Default mode, only when something fell due: the turn to apply the queue's due
-- events, if no other transaction has it (then that one applies them, and this
-- call goes on without waiting).
SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || ':' || %(queue)s, 0))

-- name: open_call
-- The first statement of a call that does not start with a write of its own
-- (see _call, with :now NULL): the high-water mark of passed-in times, the
-- call's time (the later of the mark and :asked, or of the mark and the
-- server's clock when nothing was asked), and whether anything in the queue is
-- due then; last, whether it took the queue's turn (see _call).
WITH {{_call}}
SELECT mark, now, due, serial FROM call

-- name: _call
-- Fragment: the call's clock, the first CTE of open_call and of each statement
-- below that writes.  With :now (a call that opened with open_call) it is that
-- time, and the write goes ahead.  With :now NULL it is open_call folded into
-- the write, so that a call with nothing due is one round trip: the time is the
-- later of the high-water mark and :asked (the server's clock if NULL), `due`
-- says whether in the queue a lease ran out or a WAITING task's run_at came by
-- then, and the write goes ahead only if nothing is due, no time was asked and
-- the mark is at most :lag behind; otherwise the statement changes nothing and
-- the call opens as open_call's callers do, then runs it again with :now.
-- The probes use the partial indexes: the IS NOT NULL conditions are what lets
-- the planner choose them (the time is unknown when it plans; without them it
-- guesses that a third of the table matches and scans it all).
-- Lock order (see migrations/0008): in a queue with unfinished grouped tasks
-- (only probed in a schema that ever had one: sqlq_clock.grouped), a call that
-- may move tasks other than by claiming them (:serial) first takes the queue's
-- turn (the advisory lock of lock_queue and try_lock_queue), before any row
-- lock of the statement: `serial` (the turn taken) is computed when `call` is
-- read (a CTE with volatile functions is computed once, whole), and the
-- statement locks its rows after that.
-- `due` is NULL (and the write does not go ahead) when the database's schema
-- version (sqlq_clock.schema_version, stamped by each migration from 11 on) is
-- not :schema, the one this process knows: it was migrated under this process,
-- and the call raises SchemaChanged (a column of the row read anyway).
call AS (
    SELECT t.mark, t.now, t.due,
           %(now)s::float8 IS NOT NULL
           OR (%(asked)s::float8 IS NULL AND NOT t.due
               AND t.now <= t.mark + %(lag)s::float8) AS go,
           t.grouped,
           t.serial AND pg_advisory_xact_lock(
                            hashtextextended(current_schema() || ':' || %(queue)s, 0))::text
                        IS NOT NULL AS serial
    FROM (SELECT c.now AS mark, x.now, c.grouped,
                 c.grouped AND %(serial)s::boolean
                 AND EXISTS (SELECT 1 FROM sqlq_groups
                             WHERE queue = %(queue)s AND live > 0) AS serial,
                 CASE WHEN c.schema_version <> %(schema)s::bigint THEN NULL
                 ELSE %(now)s::float8 IS NULL
                      AND (EXISTS (SELECT 1 FROM sqlq_tasks
                                   WHERE queue = %(queue)s AND deadline IS NOT NULL
                                     AND deadline <= x.now)
                           OR EXISTS (SELECT 1 FROM sqlq_tasks
                                      WHERE queue = %(queue)s AND run_at IS NOT NULL
                                        AND run_at <= x.now)) END AS due
          FROM sqlq_clock AS c
          CROSS JOIN LATERAL (
              SELECT coalesce(%(now)s::float8,
                              greatest(c.now,
                                       coalesce(%(asked)s::float8,
                                                extract(epoch FROM clock_timestamp())::float8)))
                         AS now) AS x
          WHERE c.id = 1) AS t
)

-- name: due_events
-- After open_call found something due (and this call has the queue's turn):
-- everything due in the queue at :now, in the order it fell due (time, then
-- counter: the lease token or the wake-up order), each row locked for this
-- transaction; a row another transaction holds is skipped (it is about to
-- change, and the next call looks again).
SELECT coalesce(deadline, run_at), CASE WHEN state = 'RESERVED' THEN lease_id ELSE seq END,
       id, task_id, state, attempts, max_attempts, lease_id, seq,
       retry_kind, retry_base, retry_cap, stop_requested_at
FROM sqlq_tasks
WHERE queue = %(queue)s
  AND ((deadline IS NOT NULL AND deadline <= %(now)s::float8)
       OR (run_at IS NOT NULL AND run_at <= %(now)s::float8))
ORDER BY {{_due_order}}
FOR UPDATE SKIP LOCKED

-- name: raise_mark
-- At the end of a call whose time is past the mark by more than :lag seconds:
-- the new mark.  A passed-in time raises it with :lag 0; the server's clock
-- with a lag of a second, so that the calls of many workers take the row's
-- lock about once a second, not at every commit (and once one has raised it,
-- the others that waited for the row find nothing to do).
UPDATE sqlq_clock SET now = %(now)s::float8
WHERE id = 1 AND now < %(now)s::float8 - %(lag)s::float8

-- name: ready
-- Read only: would a claim on the queue find a task now?  Not while the queue
-- is paused; else something AVAILABLE (in the ungrouped line, or in a group that
-- may start one), a lease run out, or a WAITING task due (at the later of :now,
-- or the server's clock, and the mark).
WITH t AS (
    SELECT greatest(now, coalesce(%(now)s::float8,
                                  extract(epoch FROM clock_timestamp())::float8)) AS now
    FROM sqlq_clock WHERE id = 1
)
SELECT NOT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)
   AND (EXISTS (SELECT 1 FROM sqlq_tasks
                WHERE queue = %(queue)s AND state = 'AVAILABLE' AND group_key IS NULL)
    OR EXISTS (SELECT 1 FROM sqlq_groups, t
               WHERE queue = %(queue)s AND {{_group_admits}}
                 AND tat <= t.now)
    OR EXISTS (SELECT 1 FROM sqlq_tasks, t
               WHERE queue = %(queue)s AND deadline IS NOT NULL AND deadline <= t.now)
    OR EXISTS (SELECT 1 FROM sqlq_tasks, t
               WHERE queue = %(queue)s AND run_at IS NOT NULL AND run_at <= t.now))

-- name: next_due
-- Read only, as ready: the time of the read (the later of :now, or the
-- server's clock, and the mark), whether the queue is paused, and the earliest
-- times at which a claim finds a task it does not find now: the next rate slot
-- (tat) of a group with a task and a free place, the next lease to run out, the
-- next WAITING task due; NULL where there is none.  A worker that found nothing
-- sleeps until the soonest.
SELECT greatest(c.now, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)),
       EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s),
       (SELECT min(tat) FROM sqlq_groups
        WHERE queue = %(queue)s AND {{_group_admits}}),
       (SELECT min(deadline) FROM sqlq_tasks WHERE queue = %(queue)s AND deadline IS NOT NULL),
       (SELECT min(run_at) FROM sqlq_tasks WHERE queue = %(queue)s AND run_at IS NOT NULL)
FROM sqlq_clock AS c WHERE c.id = 1

-- name: insert_task
-- Add a task (see _call: the call's time, and (mark, now, due, go) first in the
-- answer), AVAILABLE at the back of the line or WAITING until run_at, taking
-- the next counter value as its seq and rules.line_key's line key; nothing (and no counter value) if the id exists in
-- any state.  Announces an AVAILABLE task on :channel (see
-- listen.py) in the same statement.  Then (added, announced): 1 or 0 each.
WITH {{_call}}, added AS (
    INSERT INTO sqlq_tasks
        (queue, task_id, state, seq, attempts, max_attempts, run_at, payload, payload_bytes,
         retry_kind, retry_base, retry_cap, created_at, updated_at, name, priority, aging,
         line_key, group_key)
    SELECT %(queue)s, %(task_id)s, %(state)s, nextval('sqlq_counter'), 0, %(max_attempts)s,
           %(run_at)s::float8, %(payload)s, %(payload_bytes)s, %(kind)s, %(base)s::float8,
           %(cap)s::float8, call.now, call.now, %(name)s, %(priority)s::integer,
           %(aging)s::float8, call.now - %(priority)s::integer * %(aging)s::float8,
           %(group_key)s
    FROM call
    WHERE call.go
      AND NOT EXISTS (SELECT 1 FROM sqlq_tasks
                      WHERE queue = %(queue)s AND task_id = %(task_id)s)
    ON CONFLICT (queue, task_id) DO NOTHING
    RETURNING state
)
SELECT call.mark, call.now, call.due, call.go,
       (SELECT count(*) FROM added),
       (SELECT count(pg_notify(%(channel)s, '')) FILTER (WHERE state = 'AVAILABLE') FROM added)
FROM call

-- name: insert_many
-- add_many in one statement: insert_task for each element of the arrays, in
-- their order (seq increasing along them); the ids must be distinct and new
-- (add_many finds the existing ones first).  Returns the ids added (one that
-- another transaction added meanwhile is not), and announces them on :channel
-- if they are AVAILABLE.
WITH items AS (
    SELECT ids.task_id, ids.payload, ids.payload_bytes, ids.name, ids.k
    FROM unnest(%(ids)s::text[], %(payloads)s::text[], %(blobs)s::bytea[], %(names)s::text[])
         WITH ORDINALITY AS ids(task_id, payload, payload_bytes, name, k)
), numbered AS (
    SELECT items.*, nextval('sqlq_counter') AS seq FROM (SELECT * FROM items ORDER BY k) AS items
), added AS (
    INSERT INTO sqlq_tasks
        (queue, task_id, state, seq, attempts, max_attempts, run_at, payload, payload_bytes,
         retry_kind, retry_base, retry_cap, created_at, updated_at, name, priority, aging,
         line_key, group_key)
    SELECT %(queue)s, task_id, %(state)s, seq, 0, %(max_attempts)s, %(run_at)s::float8,
           payload, payload_bytes, %(kind)s, %(base)s::float8, %(cap)s::float8,
           %(now)s::float8, %(now)s::float8, name, %(priority)s::integer, %(aging)s::float8,
           %(now)s::float8 - %(priority)s::integer * %(aging)s::float8, %(group_key)s
    FROM numbered ORDER BY k
    ON CONFLICT (queue, task_id) DO NOTHING
    RETURNING task_id, state
), announced AS (
    SELECT count(pg_notify(%(channel)s, '')) FILTER (WHERE state = 'AVAILABLE') AS n
    FROM added
)
SELECT task_id, (SELECT n FROM announced) FROM added

-- name: existing_ids
-- Which of the ids in :ids a queue already has.
SELECT task_id FROM sqlq_tasks WHERE queue = %(queue)s AND task_id = ANY (%(ids)s::text[])

-- name: _lease_taken
-- Fragment: the task a claim takes becomes RESERVED under a new lease, its deadline
-- :seconds after the call's time (at most :max_time); used by claim_front and
-- claim_grouped.
UPDATE sqlq_tasks
    SET state = 'RESERVED', attempts = attempts + 1, lease_id = nextval('sqlq_counter'),
        deadline = least(call.now + %(seconds)s::float8, %(max_time)s::float8),
        updated_at = call.now
    FROM call

-- name: claim_front
-- Reserve the front of the queue's line, the lowest (line_key, seq) (see _call:
-- the call's time, and (mark, now, due, go) first in the answer): count an attempt, take the next counter
-- value as the lease's token, set its deadline :seconds after the call's time
-- (at most :max_time).  A front row that another transaction is claiming is
-- skipped (the next one is taken).  Nothing while the queue is paused (a probe
-- of sqlq_paused's key).  Only in a queue without unfinished grouped tasks (a
-- probe of sqlq_groups_live, in a schema that ever had a grouped task:
-- sqlq_clock.grouped), from its ungrouped line; the answer says whether it has
-- any (then claim_grouped claims).  A claim takes rows only with SKIP LOCKED:
-- it never waits for a lock, so it runs without the queue's turn (:serial
-- false, see _call).  Then the task, or NULLs.
WITH {{_call}}, grouped AS (
    SELECT call.grouped
           AND EXISTS (SELECT 1 FROM sqlq_groups WHERE queue = %(queue)s AND live > 0) AS found
    FROM call
), claimed AS (
    {{_lease_taken}}
    WHERE call.go AND NOT (SELECT found FROM grouped)
      AND id = (SELECT id FROM sqlq_tasks
                WHERE queue = %(queue)s AND state = 'AVAILABLE' AND group_key IS NULL
                  AND NOT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)
                ORDER BY line_key, seq LIMIT 1
                FOR UPDATE SKIP LOCKED)
    RETURNING task_id, lease_id, attempts, payload, payload_bytes, name
)
SELECT call.mark, call.now, call.due, call.go, (SELECT found FROM grouped), claimed.*
FROM call LEFT JOIN claimed ON true

-- name: claim_front_many
-- claim_front up to :n times in one statement; tokens increase along the line.
-- One answer row per task claimed, in no particular order (one row of NULLs
-- after (mark, now, due, go, grouped) if none).  Nothing while the queue is
-- paused, nor in a queue with unfinished grouped tasks (as claim_front).
WITH {{_call}}, grouped AS (
    SELECT call.grouped
           AND EXISTS (SELECT 1 FROM sqlq_groups WHERE queue = %(queue)s AND live > 0) AS found
    FROM call
), line AS (
    SELECT id, line_key, seq FROM sqlq_tasks
    WHERE queue = %(queue)s AND state = 'AVAILABLE' AND group_key IS NULL
      AND (SELECT go FROM call) AND NOT (SELECT found FROM grouped)
      AND NOT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)
    ORDER BY line_key, seq LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT id, row_number() OVER (ORDER BY line_key, seq) AS rank FROM line
), tokens AS (
    SELECT g AS rank, nextval('sqlq_counter') AS token
    FROM generate_series(1, (SELECT count(*) FROM line)) AS g
), claimed AS (
    UPDATE sqlq_tasks
    SET state = 'RESERVED', attempts = attempts + 1, lease_id = tokens.token,
        deadline = least(call.now + %(seconds)s::float8, %(max_time)s::float8),
        updated_at = call.now
    FROM call, ranked JOIN tokens USING (rank)
    WHERE sqlq_tasks.id = ranked.id
    RETURNING task_id, lease_id, attempts, payload, payload_bytes, name
)
SELECT call.mark, call.now, call.due, call.go, (SELECT found FROM grouped), claimed.*
FROM call LEFT JOIN claimed ON true

-- name: _task_columns
-- Fragment: every column of a task the queue logic and inspection read, in the
-- order the backend's task_row maps them (get_task, get_current_lease, list_tasks, ...).
id, task_id, state, attempts, max_attempts, lease_id, seq, retry_kind,
       retry_base, retry_cap, deadline, run_at, payload, payload_bytes, last_error,
       created_at, updated_at, finished_at, name, stop_requested_at,
       result, progress, progress_message, dedupe_key, priority, group_key

-- name: get_task
-- One task by queue and id, every column the queue logic and inspection need.
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = %(queue)s AND task_id = %(task_id)s

-- name: get_current_lease
-- The task, held for this transaction, if its lease :token (any, if NULL) is
-- current and still runs at :now; no row otherwise.  fail and release act on
-- what it returns, so no other call can end the lease in between.
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = %(queue)s AND task_id = %(task_id)s AND state = 'RESERVED'
  AND (%(token)s::bigint IS NULL OR lease_id = %(token)s::bigint)
  AND deadline > %(now)s::float8
FOR UPDATE

-- name: complete_task
-- RESERVED -> COMPLETED at the call's time (see _call; (mark, now, due, go)
-- first in the answer), under the lease :token if it is not NULL, and only
-- while the lease runs (deadline after the call's time): a lease that ran out is
-- refused even before a call has applied its expiry.  Stores :result (JSON
-- text or NULL).  Then 1 or 0.
WITH {{_call}}, done AS (
    UPDATE sqlq_tasks
    SET state = 'COMPLETED', deadline = NULL, finished_at = call.now, updated_at = call.now,
        result = %(result)s
    FROM call
    WHERE call.go AND queue = %(queue)s AND task_id = %(task_id)s AND state = 'RESERVED'
      AND (%(token)s::bigint IS NULL OR lease_id = %(token)s::bigint)
      AND deadline > call.now
    RETURNING 1
)
SELECT call.mark, call.now, call.due, call.go, (SELECT count(*) FROM done) FROM call

-- name: complete_many
-- complete_task for each (id, token, result) of the arrays, in one statement.
-- Then how many completed.
WITH {{_call}}, done AS (
    UPDATE sqlq_tasks
    SET state = 'COMPLETED', deadline = NULL, finished_at = call.now, updated_at = call.now,
        result = item.result
    FROM call, unnest(%(ids)s::text[], %(tokens)s::bigint[], %(results)s::text[])
               AS item(task_id, token, result)
    WHERE call.go AND sqlq_tasks.queue = %(queue)s AND sqlq_tasks.task_id = item.task_id
      AND sqlq_tasks.state = 'RESERVED' AND sqlq_tasks.lease_id = item.token
      AND sqlq_tasks.deadline > call.now
    RETURNING 1
)
SELECT call.mark, call.now, call.due, call.go, (SELECT count(*) FROM done) FROM call

-- name: end_lease
-- End a lease that failed, ran out or was given back: AVAILABLE (the next
-- counter value as seq, and the line key of a task that joins the line at the
-- call's time :now), WAITING (the next value as wake-up order, until
-- :run_at) or DEAD (:finished_at).  Compare-and-set on the lease the caller
-- saw; no row means the task moved.  Returns the new seq.
UPDATE sqlq_tasks
SET state = %(state)s,
    seq = CASE WHEN %(state)s IN ('AVAILABLE', 'WAITING') THEN nextval('sqlq_counter')
               ELSE seq END,
    run_at = %(run_at)s::float8, deadline = NULL,
    line_key = {{_line_key}},
    attempts = attempts + %(attempts_delta)s, last_error = %(error)s,
    finished_at = %(finished_at)s::float8, updated_at = %(at)s::float8
WHERE id = %(id)s AND state = 'RESERVED' AND lease_id = %(token)s
RETURNING seq

-- name: extend_lease
-- Heartbeat (see _call; (mark, now, due, go) first in the answer): the lease's
-- deadline :seconds after the call's time (at most :max_time), if :token is the
-- task's current lease and it still runs then.  Then whether the task was asked
-- to stop (cancel), or NULL if the lease is not current.
WITH {{_call}}, moved AS (
    UPDATE sqlq_tasks
    SET deadline = least(call.now + %(seconds)s::float8, %(max_time)s::float8),
        updated_at = call.now
    FROM call
    WHERE call.go AND queue = %(queue)s AND task_id = %(task_id)s AND state = 'RESERVED'
      AND lease_id = %(token)s AND deadline > call.now
    RETURNING stop_requested_at IS NOT NULL AS stop
)
SELECT call.mark, call.now, call.due, call.go, (SELECT stop FROM moved) FROM call

-- name: wake_task
-- WAITING -> AVAILABLE when run_at (:at) has come, joining the line at the
-- call's time :now (its place: see insert_task).  Compare-and-set on the
-- wake-up the caller saw.
UPDATE sqlq_tasks
SET state = 'AVAILABLE', seq = nextval('sqlq_counter'), run_at = NULL,
    updated_at = %(at)s::float8,
    line_key = {{_line_key}}
WHERE id = %(id)s AND state = 'WAITING' AND seq = %(order)s

-- name: redrive_task
-- DEAD -> AVAILABLE at the back of the line, attempts reset; the last error is kept.
-- :keyed false: only a task without a dedupe key.  :keyed true: also one with a
-- key, unless another task holds it (a probe of sqlq_tasks_key_holder; a holder
-- that a concurrent add makes meanwhile is not seen here, but makes that unique
-- index refuse the update: run it after savepoint_redrive).
UPDATE sqlq_tasks
SET state = 'AVAILABLE', attempts = 0, seq = nextval('sqlq_counter'), finished_at = NULL,
    updated_at = %(now)s::float8,
    line_key = {{_line_key}}
WHERE id = %(id)s AND state = 'DEAD'
  AND (dedupe_key IS NULL
       OR %(keyed)s AND NOT EXISTS (SELECT 1 FROM sqlq_tasks AS holder
                                    WHERE holder.queue = sqlq_tasks.queue
                                      AND holder.dedupe_key = sqlq_tasks.dedupe_key
                                      AND holder.{{_key_unfinished}}))

-- name: savepoint_redrive
-- Before redrive_task: an update that sqlq_tasks_key_holder refuses (another
-- holder of the key committed meanwhile) is undone alone, the task left DEAD.
SAVEPOINT sqlq_redrive

-- name: release_redrive
-- Keep the redrive's update (or its finding that the task was not DEAD).
RELEASE SAVEPOINT sqlq_redrive

-- name: rollback_redrive
-- Undo the update the key's new holder refused; the call goes on.
ROLLBACK TO SAVEPOINT sqlq_redrive

-- name: dead_ids
-- DEAD tasks of a queue, the longest dead first (then in the order added).
SELECT id, task_id FROM sqlq_tasks
WHERE queue = %(queue)s AND state = 'DEAD'
ORDER BY finished_at, id
LIMIT %(limit)s

-- name: list_tasks
-- Tasks of a queue in the order they were added (all states).
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = %(queue)s
ORDER BY id
LIMIT %(limit)s

-- name: list_tasks_in_state
-- Tasks of a queue in one state, in the order they were added.
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = %(queue)s AND state = %(state)s
ORDER BY id
LIMIT %(limit)s

-- name: purge_batch
-- Delete up to :batch tasks of a queue in :state finished at or before :cutoff.
DELETE FROM sqlq_tasks
WHERE id IN (SELECT id FROM sqlq_tasks
             WHERE queue = %(queue)s AND state = %(state)s
               AND finished_at <= %(cutoff)s::float8
             ORDER BY finished_at
             LIMIT %(batch)s)

-- name: forget_groups
-- purge, forgetting idle groups in transactions of bounded work: of the next
-- :batch groups of a queue after the name :after (a range of the primary key),
-- delete the rows of the idle ones: no unfinished task (live = 0, and so no
-- lease: running = 0) and no start owed to the rate (tat, the next start it
-- allows, not after :now).  Their limits stay in sqlq_limits: sqlq_group_added
-- makes a group's row anew with them at its next add, remake_groups at a redrive.
-- Never waits for a lock, so it takes part in no deadlock: it locks the rows it
-- deletes in name order, skipping a row another transaction holds (a call that
-- moves one of the group's tasks, which will not leave it idle, or a claim), and
-- FOR UPDATE rechecks live, running and tat on the row's latest version.  An
-- add of the group that comes after waits for this transaction in its trigger's
-- INSERT ... ON CONFLICT, and then makes the row anew (the conflict is gone).
-- Returns how many it forgot, the last name of the range and its size.
WITH span AS (
    SELECT group_key FROM sqlq_groups
    WHERE queue = %(queue)s AND group_key > %(after)s
    ORDER BY group_key LIMIT %(batch)s
), idle AS (
    SELECT group_key FROM sqlq_groups
    WHERE queue = %(queue)s AND group_key IN (SELECT group_key FROM span)
      AND live = 0 AND running = 0 AND tat <= %(now)s::float8
    ORDER BY group_key
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM sqlq_groups AS g USING idle
    WHERE g.queue = %(queue)s AND g.group_key = idle.group_key
      AND g.live = 0 AND g.running = 0 AND g.tat <= %(now)s::float8
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT max(group_key) FROM span),
       (SELECT count(*) FROM span)

-- name: remake_groups
-- Before redrive_task, for the DEAD tasks %(ids)s: the rows of their groups that
-- forget_groups forgot (an add makes one in sqlq_group_added; a redrive moves
-- tasks whose groups may be gone), with the limits that apply as
-- sqlq_group_added reads them: the group's own, else the queue's default.  A
-- row that exists is locked (the update changes nothing), so that no purge
-- forgets it before the redrive's trigger counts a task in it; a purge that
-- holds it is waited for, and the row made anew.  One row a group, made or
-- locked in group-key order (the order of the sorted rows the INSERT takes), so
-- that two redrives wait for each other in one order.  No change for tasks
-- without a group.
INSERT INTO sqlq_groups AS g (queue, group_key, cap, spacing)
SELECT DISTINCT ON (t.group_key)
       t.queue, t.group_key, coalesce(l.concurrency, 9223372036854775807), l.per / l.rate
FROM sqlq_tasks AS t
LEFT JOIN LATERAL (SELECT concurrency, rate, per FROM sqlq_limits
                   WHERE queue = t.queue AND group_key IN (t.group_key, '')
                   ORDER BY group_key = '' LIMIT 1) AS l ON true
WHERE t.id = ANY(%(ids)s) AND t.state = 'DEAD' AND t.group_key IS NOT NULL
ORDER BY t.group_key
ON CONFLICT (queue, group_key) DO UPDATE SET live = g.live

-- name: queue_figures
-- What Queue.stats shows, in one statement (one snapshot): tasks per state as
-- JSON, when the front of the line became AVAILABLE, the next deadline, the
-- next wake-up, whether the queue is paused.
SELECT (SELECT coalesce(json_object_agg(state, n), '{}'::json)
        FROM (SELECT state, count(*) AS n FROM sqlq_tasks
              WHERE queue = %(queue)s GROUP BY state) AS per_state),
       (SELECT updated_at
        FROM ((SELECT updated_at, line_key, seq FROM sqlq_tasks
               WHERE queue = %(queue)s AND state = 'AVAILABLE' AND group_key IS NULL
               ORDER BY {{_line_order}} LIMIT 1)
              UNION ALL
              (SELECT t.updated_at, t.line_key, t.seq FROM sqlq_groups AS g
               JOIN sqlq_tasks AS t
                 ON t.queue = g.queue AND t.group_key = g.group_key
                AND t.state = 'AVAILABLE' AND t.line_key = g.head_key AND t.seq = g.head
               WHERE g.queue = %(queue)s AND g.head IS NOT NULL)) AS fronts
        ORDER BY {{_line_order}} LIMIT 1),
       (SELECT min(deadline) FROM sqlq_tasks WHERE queue = %(queue)s AND deadline IS NOT NULL),
       (SELECT min(run_at) FROM sqlq_tasks WHERE queue = %(queue)s AND run_at IS NOT NULL),
       EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)

-- name: count_states
-- Tasks per queue and state, for the whole database (this schema).
SELECT queue, state, count(*) FROM sqlq_tasks GROUP BY queue, state ORDER BY queue, state

-- name: begin_snapshot
-- Several reads that see one snapshot (sqlq stats), holding no lock.
BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY

-- name: queue_fronts
-- Per queue: when the front of its line became AVAILABLE, its next deadline and
-- its next wake-up (sqlq stats).  Each a probe of a partial index per queue
-- (and a row per group of the queue, for the fronts of the groups' lines).
SELECT queues.queue,
       (SELECT updated_at
        FROM ((SELECT updated_at, line_key, seq FROM sqlq_tasks
               WHERE queue = queues.queue AND state = 'AVAILABLE' AND group_key IS NULL
               ORDER BY {{_line_order}} LIMIT 1)
              UNION ALL
              (SELECT t.updated_at, t.line_key, t.seq FROM sqlq_groups AS g
               JOIN sqlq_tasks AS t
                 ON t.queue = g.queue AND t.group_key = g.group_key
                AND t.state = 'AVAILABLE' AND t.line_key = g.head_key AND t.seq = g.head
               WHERE g.queue = queues.queue AND g.head IS NOT NULL)) AS fronts
        ORDER BY {{_line_order}} LIMIT 1),
       (SELECT min(deadline) FROM sqlq_tasks WHERE queue = queues.queue AND deadline IS NOT NULL),
       (SELECT min(run_at) FROM sqlq_tasks WHERE queue = queues.queue AND run_at IS NOT NULL)
FROM (SELECT DISTINCT queue FROM sqlq_tasks) AS queues

-- name: count_names
-- Named tasks per queue, name and state (sqlq stats): one pass over the table,
-- which suits an inspection command better than an index every write keeps up.
SELECT queue, name, state, count(*) FROM sqlq_tasks WHERE name IS NOT NULL
GROUP BY queue, name, state ORDER BY queue, name, state

-- name: table_size
-- The bytes sqlq_tasks takes, its indexes and TOAST included.
SELECT pg_total_relation_size('sqlq_tasks')

-- name: vacuum_full
-- sqlq purge --vacuum: rewrite sqlq_tasks and its indexes without the space of
-- deleted rows, giving it back to the operating system; holds the table's
-- ACCESS EXCLUSIVE lock while it runs (every call waits).
VACUUM (FULL, ANALYZE) sqlq_tasks

-- name: announce
-- Before the commit of a call that made a task AVAILABLE: tell the listeners of
-- the queue's channel (delivered only if the transaction commits; several
-- announcements of one transaction are delivered as one).
SELECT pg_notify(%(channel)s, '')

-- name: current_schema
-- The schema sqlq's tables are in (the first of the search_path): part of the
-- name of each queue's notification channel.
SELECT current_schema()

-- name: lock_migrations
-- Migrations: one process at a time per schema, until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':sqlq-migrations', 0))

-- name: identify
-- Whether the schema has sqlq_migrations, and whether it has any other relation
-- of sqlq's names (the tables, the counter, the views).  Read from pg_class in
-- the statement's snapshot, not through the session's catalog cache
-- (to_regclass), which is stale in a session that just waited for the
-- migrations' lock: it would miss the tables the process it waited for created.
SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = 'sqlq_migrations'
                 AND relnamespace = current_schema()::regnamespace),
       EXISTS (SELECT 1 FROM pg_class
               WHERE relname IN ('sqlq_tasks', 'sqlq_clock', 'sqlq_counter',
                                 'sqlq_queue_stats', 'sqlq_dead_letters', 'sqlq_leases',
                                 'sqlq_schedules', 'sqlq_paused', 'sqlq_limits',
                                 'sqlq_groups', 'sqlq_workers')
                 AND relnamespace = current_schema()::regnamespace)

-- name: create_migrations_table
-- The record of applied migrations; created in the first migration's transaction.
CREATE TABLE IF NOT EXISTS sqlq_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at double precision NOT NULL
)

-- name: migration_records
-- The applied migrations as recorded, checked against sqlq's own files.
SELECT version, name, checksum FROM sqlq_migrations ORDER BY version

-- name: live_workers_unversioned
-- Before a migration of a database from 9 (the registry) up to 10: the live
-- workers (not stale by the later of the server's clock and the mark), every one
-- of an older sqlq (their rows say no version).
SELECT host, pid, '', 0 FROM sqlq_workers
WHERE stale_at > greatest(extract(epoch FROM clock_timestamp())::float8,
                          (SELECT now FROM sqlq_clock WHERE id = 1))
ORDER BY host, pid

-- name: live_older_workers
-- Before a migration of a database from 11 on: the live workers whose sqlq knows
-- a schema older than :latest (their rows say which, migration 0011).
SELECT host, pid, sqlq_version, schema_version FROM sqlq_workers
WHERE schema_version < %(latest)s
  AND stale_at > greatest(extract(epoch FROM clock_timestamp())::float8,
                          (SELECT now FROM sqlq_clock WHERE id = 1))
ORDER BY host, pid

-- name: stamp_schema
-- After each migration from 11 on, in its transaction: the database's schema
-- version, which the first statement of every call compares with its process's
-- (_call).
UPDATE sqlq_clock SET schema_version = %(version)s WHERE id = 1

-- name: schema_stamp
-- After a call found the schema version changed: the database's (for the error).
SELECT schema_version FROM sqlq_clock WHERE id = 1

-- name: record_migration
-- Record a migration, in the same transaction as its statements.
INSERT INTO sqlq_migrations (version, name, checksum, applied_at)
VALUES (%(version)s, %(name)s, %(checksum)s, extract(epoch FROM clock_timestamp()))

-- name: get_schedule
-- A schedule's stored state (migrations/postgresql/0003), read by the call
-- that ticks it, before it adds the tasks of the ticks that are due.  Not locked:
-- two schedulers may read the same state; the compare-and-set of update_schedule
-- lets one of them move it.
SELECT queue, name, task, spec, tz, catch_up, handled_until, last_enqueued, updated_at
FROM sqlq_schedules
WHERE queue = %(queue)s AND name = %(name)s

-- name: insert_schedule
-- A schedule seen for the first time; nothing if another call stored it first
-- (the caller then tries again with what that call stored).
INSERT INTO sqlq_schedules
    (queue, name, task, spec, tz, catch_up, handled_until, last_enqueued, updated_at)
VALUES (%(queue)s, %(name)s, %(task)s, %(spec)s, %(tz)s, %(catch_up)s, %(handled_until)s,
        %(last_enqueued)s, %(updated_at)s)
ON CONFLICT (queue, name) DO NOTHING

-- name: update_schedule
-- Move a schedule on, in the transaction that added its ticks' tasks: a
-- compare-and-set on the handled_until the call read.  A concurrent call that
-- moved it first holds the row until it commits; this update then finds the new
-- value, changes nothing, and the call is rolled back and tried again.
UPDATE sqlq_schedules
SET task = %(task)s, spec = %(spec)s, tz = %(tz)s, catch_up = %(catch_up)s,
    handled_until = %(handled_until)s, last_enqueued = %(last_enqueued)s,
    updated_at = %(updated_at)s
WHERE queue = %(queue)s AND name = %(name)s AND handled_until = %(seen)s

-- name: delete_schedule
-- forget_schedule: the stored state of a schedule no worker runs any more (its
-- tasks stay).  A worker that still has it stores it again as new.
DELETE FROM sqlq_schedules WHERE queue = %(queue)s AND name = %(name)s

-- name: list_schedules
-- Every schedule the database keeps (sqlq schedules), by queue and name.
SELECT queue, name, task, spec, tz, catch_up, handled_until, last_enqueued, updated_at
FROM sqlq_schedules
ORDER BY queue, name

-- name: beat_worker
-- A worker's row of the worker registry (migration 0009, sqlq/registry.py),
-- written when it starts and once per heartbeat interval: the first write makes
-- it, the next ones replace all but started_at.  With the schema version and the
-- sqlq version its process knows (migration 0011).
INSERT INTO sqlq_workers
    (worker_id, queue, host, pid, concurrency, started_at, beat_at, stale_at, holds,
     schema_version, sqlq_version)
VALUES (%(worker_id)s, %(queue)s, %(host)s, %(pid)s, %(concurrency)s, %(started_at)s,
        %(beat_at)s, %(stale_at)s, %(holds)s, %(schema_version)s, %(sqlq_version)s)
ON CONFLICT (worker_id) DO UPDATE
SET queue = excluded.queue, host = excluded.host, pid = excluded.pid,
    concurrency = excluded.concurrency, beat_at = excluded.beat_at,
    stale_at = excluded.stale_at, holds = excluded.holds,
    schema_version = excluded.schema_version, sqlq_version = excluded.sqlq_version

-- name: prune_workers
-- The rows of workers gone long enough (stale since before %(before)s), of every
-- queue, deleted by each worker's write: the table holds the live workers and the
-- recently gone, however many were killed before.
DELETE FROM sqlq_workers WHERE stale_at < %(before)s

-- name: forget_worker
-- A worker that stops cleanly deletes its row.
DELETE FROM sqlq_workers WHERE worker_id = %(worker_id)s

-- name: list_workers
-- Every row of the worker registry (sqlq workers, the dashboard): read only.
SELECT worker_id, queue, host, pid, concurrency, started_at, beat_at, stale_at, holds
FROM sqlq_workers

-- name: registry_time
-- The time by which a reader judges the registry's rows stale: the queue's time
-- (the mark, at which calls wrote them), or the server's clock if it is later:
-- never the reader's own clock, which may run ahead of the server's.
SELECT greatest(now, extract(epoch FROM clock_timestamp())::float8) FROM sqlq_clock

-- name: cancel_unstarted
-- cancel: AVAILABLE or WAITING -> CANCELLED at :now (finished, out of the line).
UPDATE sqlq_tasks
SET state = 'CANCELLED', run_at = NULL, finished_at = %(now)s::float8,
    updated_at = %(now)s::float8
WHERE queue = %(queue)s AND task_id = %(task_id)s AND state IN ('AVAILABLE', 'WAITING')

-- name: request_stop
-- cancel of a running task: record that its worker is asked to stop (the first
-- request's time is kept), if its lease runs past :now.
UPDATE sqlq_tasks
SET stop_requested_at = coalesce(stop_requested_at, %(now)s::float8)
WHERE queue = %(queue)s AND task_id = %(task_id)s AND state = 'RESERVED'
  AND deadline > %(now)s::float8

-- name: pause_queue
-- Pause a queue: its row in sqlq_paused, which the claims probe.  No change if
-- it is paused already.
INSERT INTO sqlq_paused (queue, paused_at) VALUES (%(queue)s, %(now)s::float8)
ON CONFLICT (queue) DO NOTHING

-- name: resume_queue
-- Resume a queue: claims find its tasks again.
DELETE FROM sqlq_paused WHERE queue = %(queue)s

-- name: queue_paused
-- Is the queue paused?
SELECT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)

-- name: paused_queues
-- Every paused queue of the schema (sqlq stats).
SELECT queue FROM sqlq_paused ORDER BY queue

-- name: task_outcome
-- What result and wait_for_result read of a task: its state, result and last
-- error (not the payload).
SELECT state, result, last_error FROM sqlq_tasks
WHERE queue = %(queue)s AND task_id = %(task_id)s

-- name: report_progress
-- A progress report (see _call; (mark, now, due, go) first in the answer):
-- stored if :token is the task's current lease and it still runs at the call's
-- time, as extend_lease guards.  Then 1 or 0.
WITH {{_call}}, reported AS (
    UPDATE sqlq_tasks
    SET progress = %(value)s::float8, progress_message = %(message)s, updated_at = call.now
    FROM call
    WHERE call.go AND queue = %(queue)s AND task_id = %(task_id)s AND state = 'RESERVED'
      AND lease_id = %(token)s AND deadline > call.now
    RETURNING 1
)
SELECT call.mark, call.now, call.due, call.go, (SELECT count(*) FROM reported) FROM call

-- name: _browse_columns
-- Fragment: the columns of a browse page (browse_newest, browse_line), read by
-- name; payload and result only when :payloads.
id, queue, task_id, state, attempts, max_attempts, lease_id, seq, retry_kind,
       retry_base, retry_cap, deadline, run_at,
       CASE WHEN %(payloads)s THEN payload END AS payload,
       CASE WHEN %(payloads)s THEN payload_bytes END AS payload_bytes,
       last_error, created_at, updated_at, finished_at, name, stop_requested_at,
       CASE WHEN %(payloads)s THEN result END AS result, progress, progress_message,
       dedupe_key, priority, group_key, line_key

-- name: _browse_filters
-- Fragment: the filters of a browse page, each given one narrowing it (NULL: any).
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
  AND (%(prefix)s::text IS NULL OR left(task_id, length(%(prefix)s::text)) = %(prefix)s::text)

-- name: browse_newest
-- The dashboard's task list (sqlq.browse), newest first: a keyset page of the
-- tasks added before row :id, each filter given narrowing it.  The columns are
-- read by name; payload and result only when :payloads (a page that shows none
-- does not read megabytes of them).  The primary key serves the order and the
-- page's start; the filters are checked on the way.
SELECT {{_browse_columns}}
FROM sqlq_tasks
WHERE id < %(id)s
  {{_browse_filters}}
ORDER BY id DESC
LIMIT %(limit)s

-- name: browse_line
-- The dashboard's task list by position in the line, front first: the order
-- claims take (line_key, seq; see migration 0007), then the row id; a keyset page
-- after (:line_key, :seq, :id); the columns as browse_newest's.
SELECT {{_browse_columns}}
FROM sqlq_tasks
WHERE (line_key, seq, id) > (%(line_key)s, %(seq)s, %(id)s)
  {{_browse_filters}}
ORDER BY line_key, seq, id
LIMIT %(limit)s

-- name: finished_per_bucket
-- The dashboard's throughput chart: tasks of a queue that finished (COMPLETED,
-- DEAD, CANCELLED) since :since, per state and per :bucket seconds of finished_at.
-- The index on (queue, state, finished_at) serves each state's range.
SELECT floor(finished_at / %(bucket)s) * %(bucket)s AS at, state, count(*)
FROM sqlq_tasks
WHERE queue = %(queue)s AND state IN ('COMPLETED', 'DEAD', 'CANCELLED')
  AND finished_at >= %(since)s
GROUP BY at, state
ORDER BY at

-- name: key_holder
-- The task of the queue that holds the dedupe key :key (see sqlq/keys.py): the
-- one with the key not finished (a probe of sqlq_tasks_key_holder), else, if
-- :cutoff is not NULL, the one that finished with it latest, after :cutoff (a
-- probe of sqlq_tasks_key_finished); no row if none.  (row id, task id, state,
-- seq).  Not locked: debounce_task is a compare-and-set.
SELECT id, task_id, state, seq FROM sqlq_tasks
WHERE id = coalesce(
    (SELECT id FROM sqlq_tasks
     WHERE queue = %(queue)s AND dedupe_key = %(key)s AND {{_key_unfinished}}),
    ({{_key_finished}}))

-- name: insert_keyed_task
-- Add a task holding the dedupe key :key at :now (a call opened already), as
-- insert_task does; nothing if the id exists or the key has a holder.  With no
-- conflict target every unique index is one: a holder that a concurrent call
-- is adding makes this wait for that call's transaction, then add nothing if
-- it commits (sqlq_tasks_key_holder is the race guard).  An id that exists
-- takes no counter value (the probe first, as in insert_task).  Returns a row if
-- added.
INSERT INTO sqlq_tasks
    (queue, task_id, state, seq, attempts, max_attempts, run_at, payload, payload_bytes,
     retry_kind, retry_base, retry_cap, created_at, updated_at, name, priority, aging,
     line_key, dedupe_key, group_key)
SELECT %(queue)s, %(task_id)s, %(state)s, nextval('sqlq_counter'), 0, %(max_attempts)s,
       %(run_at)s::float8, %(payload)s, %(payload_bytes)s, %(kind)s, %(base)s::float8,
       %(cap)s::float8, %(now)s::float8, %(now)s::float8, %(name)s, %(priority)s::integer,
       %(aging)s::float8, %(now)s::float8 - %(priority)s::integer * %(aging)s::float8,
       %(key)s, %(group_key)s
WHERE NOT EXISTS (SELECT 1 FROM sqlq_tasks WHERE queue = %(queue)s AND task_id = %(task_id)s)
ON CONFLICT DO NOTHING
RETURNING 1

-- name: debounce_task
-- on_key="debounce": the holder of a key, not started, takes the new payload
-- and :run_at (WAITING until then, or AVAILABLE if NULL), keeping its seq (its
-- place in the line) if :stays, else taking the next counter value and the
-- line key of rules.line_key at :now.
-- Compare-and-set on the state and seq the add found (a claim may have taken
-- the task meanwhile).  Returns a row if changed.
UPDATE sqlq_tasks
SET state = CASE WHEN %(run_at)s::float8 IS NULL THEN 'AVAILABLE' ELSE 'WAITING' END,
    run_at = %(run_at)s::float8,
    seq = CASE WHEN %(stays)s THEN seq ELSE nextval('sqlq_counter') END,
    line_key = CASE WHEN %(stays)s THEN line_key ELSE {{_line_key}} END,
    payload = %(payload)s, payload_bytes = %(payload_bytes)s, updated_at = %(now)s::float8
WHERE id = %(id)s AND state = %(state)s AND seq = %(seen)s
RETURNING 1

-- name: _line_key
-- Fragment: the line key of a task that joins the line (again) at the call's
-- time :now, by its priority and the aging stored with it (sqlq.rules.line_key;
-- see sqlq/contract.py, Priorities): written once for the statements that put
-- a task back in line (end_lease, wake_task, redrive_task, debounce_task).  An
-- add computes the same from its parameters (insert_task and its kin).
%(now)s::float8 - priority * aging

-- name: _group_admits
-- Fragment: a group that may start a task (sqlq.rules.admits): one in line
-- (head) and fewer leases out than its concurrency limit.  The partial indexes
-- sqlq_groups_by_head and sqlq_groups_by_turn have this predicate (migration
-- 0008): a statement that says it this way may use them.
head IS NOT NULL AND running < cap

-- name: _key_unfinished
-- Fragment: a task that holds its dedupe key whatever the window: one not
-- finished (sqlq.rules.holds_key; a probe of sqlq_tasks_key_holder).
finished_at IS NULL

-- name: _key_finished
-- Fragment: the latest of the queue's tasks that finished with the dedupe key
-- :key after :cutoff: it holds the key if none holds it unfinished
-- (sqlq.rules.holds_key; a probe of sqlq_tasks_key_finished).
SELECT id FROM sqlq_tasks
WHERE queue = %(queue)s AND dedupe_key = %(key)s AND finished_at > %(cutoff)s::float8
ORDER BY finished_at DESC, seq DESC LIMIT 1

-- name: _due_order
-- Fragment: the order in which due events run (sqlq.rules.runs_before): the
-- time each fell due, then its counter (a lease's token, a wake-up's order),
-- the first two columns of due_events.
1, 2

-- name: _line_order
-- Fragment: the order of a line (the ungrouped one, a group's, and between the
-- fronts of lines), written once for the statements that compare lines: the
-- line key, then the order joined (see sqlq/contract.py, Priorities).
line_key, seq

-- name: claim_grouped
-- claim_front in a queue with unfinished grouped tasks (claim_front said so; see
-- _call): the front of the ungrouped line or the front of the first group that
-- may start a task now, whichever is first in line order.  A group may start
-- one if it has an AVAILABLE task, fewer RESERVED tasks than its cap and its
-- tat (the earliest start its rate allows) has come; the partial indexes of
-- sqlq_groups hold only groups with a front and a free slot, so a group at its
-- concurrency limit is never read.  The first group is the one whose front is
-- first (:fair false) or, round robin, the one whose latest start is oldest.
-- Its row is locked (a group another call is claiming from or moving is
-- passed over), rechecked on its latest version, and the trigger
-- sqlq_group_moved counts the lease in this statement, under that lock.
-- Then the task, or NULLs.
WITH {{_call}}, ungrouped AS (
    SELECT id, line_key, seq FROM sqlq_tasks
    WHERE queue = %(queue)s AND state = 'AVAILABLE' AND group_key IS NULL
    ORDER BY {{_line_order}} LIMIT 1
    FOR UPDATE SKIP LOCKED
), first_in_line AS (
    SELECT group_key FROM sqlq_groups, call
    WHERE queue = %(queue)s AND {{_group_admits}} AND tat <= call.now
      AND NOT %(fair)s
    ORDER BY head_key, head LIMIT 1
    FOR UPDATE OF sqlq_groups SKIP LOCKED
), served_longest_ago AS (
    SELECT group_key FROM sqlq_groups, call
    WHERE queue = %(queue)s AND {{_group_admits}} AND tat <= call.now
      AND %(fair)s
    ORDER BY turn, head_key, head LIMIT 1
    FOR UPDATE OF sqlq_groups SKIP LOCKED
), front AS (
    SELECT t.id, t.line_key, t.seq
    FROM (SELECT group_key FROM first_in_line
          UNION ALL SELECT group_key FROM served_longest_ago) AS chosen
    CROSS JOIN LATERAL (SELECT id, line_key, seq FROM sqlq_tasks
                        WHERE queue = %(queue)s AND group_key = chosen.group_key
                          AND state = 'AVAILABLE'
                        ORDER BY {{_line_order}} LIMIT 1
                        FOR UPDATE SKIP LOCKED) AS t
), claimed AS (
    {{_lease_taken}}
    WHERE call.go
      AND id = (SELECT id FROM (SELECT * FROM ungrouped UNION ALL SELECT * FROM front) AS c
                WHERE NOT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = %(queue)s)
                ORDER BY {{_line_order}} LIMIT 1)
    RETURNING task_id, lease_id, attempts, payload, payload_bytes, name
)
SELECT call.mark, call.now, call.due, call.go, claimed.*
FROM call LEFT JOIN claimed ON true

-- name: set_limit
-- set_limit: the limits of group :group_key of a queue ('' for the queue's
-- default), replacing those it had.
INSERT INTO sqlq_limits (queue, group_key, concurrency, rate, per)
VALUES (%(queue)s, %(group_key)s, %(concurrency)s, %(rate)s, %(per)s::float8)
ON CONFLICT (queue, group_key)
DO UPDATE SET concurrency = excluded.concurrency, rate = excluded.rate, per = excluded.per

-- name: remove_limit
-- remove_limit: group :group_key ('' the default) has no limits of its own again.
DELETE FROM sqlq_limits WHERE queue = %(queue)s AND group_key = %(group_key)s

-- name: apply_limits
-- After set_limit or remove_limit: the limits as they apply to the groups they
-- concern (the group :group_key, or every group of the queue for the default
-- ''), from the group's own row, else the default's; the cap of a group without
-- a concurrency limit is the largest bigint.  A shorter spacing (or none) moves
-- the group's next start (tat) back by the difference: the last start plus the
-- new spacing (see sqlq/contract.py).
UPDATE sqlq_groups AS g
SET cap = coalesce(l.concurrency, 9223372036854775807), spacing = l.per / l.rate,
    tat = g.tat - greatest(0, coalesce(g.spacing, 0) - coalesce(l.per / l.rate, 0))
FROM sqlq_groups AS x
LEFT JOIN LATERAL (SELECT concurrency, rate, per FROM sqlq_limits
                   WHERE queue = x.queue AND group_key IN (x.group_key, '')
                   ORDER BY group_key = '' LIMIT 1) AS l ON true
WHERE g.queue = x.queue AND g.group_key = x.group_key AND x.queue = %(queue)s
  AND (%(group_key)s = '' OR x.group_key = %(group_key)s)

-- name: list_limits
-- The limits set in a queue ('' the default), by group.
SELECT group_key, concurrency, rate, per FROM sqlq_limits
WHERE queue = %(queue)s ORDER BY group_key

-- name: list_groups
-- The groups of a queue that have unfinished tasks, with their leases and how
-- many tasks are unfinished (sqlq limits), by group.
SELECT group_key, running, live FROM sqlq_groups
WHERE queue = %(queue)s AND live > 0 ORDER BY group_key

-- name: queue_settings
-- A queue's stored settings (migration 0011, sqlq/settings.py), read once by a
-- process that opens the queue without them: read only.
SELECT lease_seconds, max_attempts, retry_kind, retry_base, retry_cap
FROM sqlq_settings WHERE queue = %(queue)s

-- name: list_settings
-- Every queue's stored settings (sqlq stats): read only.
SELECT queue, lease_seconds, max_attempts, retry_kind, retry_base, retry_cap
FROM sqlq_settings ORDER BY queue

-- name: configure_settings
-- Change a queue's settings (Queue.configure, sqlq configure) in one statement: those
-- given replace the stored ones (a queue without any takes the defaults for the
-- others), those not given (keep_*) stay; returns the settings now stored.  One
-- upsert: a read and then a write of the whole row lost one of two configures at
-- once (the second wrote back what it had read before the first committed).
INSERT INTO sqlq_settings
    (queue, lease_seconds, max_attempts, retry_kind, retry_base, retry_cap, updated_at)
VALUES (%(queue)s, %(lease_seconds)s, %(max_attempts)s, %(retry_kind)s, %(retry_base)s,
        %(retry_cap)s, %(now)s)
ON CONFLICT (queue) DO UPDATE
SET lease_seconds = CASE WHEN %(keep_lease)s THEN sqlq_settings.lease_seconds
                         ELSE excluded.lease_seconds END,
    max_attempts = CASE WHEN %(keep_attempts)s THEN sqlq_settings.max_attempts
                        ELSE excluded.max_attempts END,
    retry_kind = CASE WHEN %(keep_retry)s THEN sqlq_settings.retry_kind
                      ELSE excluded.retry_kind END,
    retry_base = CASE WHEN %(keep_retry)s THEN sqlq_settings.retry_base
                      ELSE excluded.retry_base END,
    retry_cap = CASE WHEN %(keep_retry)s THEN sqlq_settings.retry_cap
                     ELSE excluded.retry_cap END,
    updated_at = excluded.updated_at
RETURNING queue, lease_seconds, max_attempts, retry_kind, retry_base, retry_cap
