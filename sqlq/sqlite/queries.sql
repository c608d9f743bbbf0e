-- Every SQL statement sqlq runs against SQLite, one named block each.
--
-- A block starts with `-- name: <name>`, continues with comment lines that say
-- what it does, and ends where the next block starts.  Parameters are named
-- (:name), or numbered (?1) in the statements of every call, where binding a
-- tuple costs less than a dict.  sqlq/sqlite/queries.py loads this file; tests
-- check that every block is used and that every name the code uses is defined here.
--
-- A LIMIT taken from a parameter is written `LIMIT +:n`: SQLite reads the value
-- of a bare `LIMIT :n` when it plans the statement, so binding it again expires
-- the prepared statement and every execution is parsed and planned anew (about
-- 5 microseconds each); `+:n` is an expression it does not read ahead.
--
-- None is not bound in the statements of the usual calls (add, complete): the
-- DB-API module binds int, float, str and bytes at once, but sends None
-- through its adapter (sqlq/sqlite/driver.py), a Python call of about 750
-- instructions a parameter.  Those statements take '' (or 0) for "none" where
-- the value can never be empty (or 0), and say so.

-- name: begin_write
-- Start a call's transaction holding the write lock from its first statement,
-- so that two writers never deadlock upgrading a read lock.
BEGIN IMMEDIATE

-- name: no_busy_handler
-- After opening: SQLite's own busy handler (sleeps of 1, 2, 5, 10 ... ms) lets
-- a process that commits and begins again at once starve the others.  sqlq
-- waits for the write lock itself instead (see SqliteBackend.begin_write).
PRAGMA busy_timeout = 0

-- name: commit
-- Make the call's transaction durable (to the degree `synchronous` promises).
COMMIT

-- name: rollback
-- Undo the call's transaction after an error.
ROLLBACK

-- name: savepoint
-- Start a call inside the caller's own open transaction (transactional enqueue
-- and completion): the call's statements can be undone without touching the
-- caller's.
SAVEPOINT sqlq_call

-- name: release_savepoint
-- Keep the call's statements; they commit or roll back with the caller's transaction.
RELEASE sqlq_call

-- name: rollback_to_savepoint
-- Undo the call's statements after an error, leaving the caller's transaction open.
ROLLBACK TO sqlq_call

-- name: savepoint_batch
-- Before insert_batch: it can be undone alone if an id in the batch was not new.
SAVEPOINT sqlq_batch

-- name: release_batch
-- After insert_batch (kept, or undone by rollback_to_batch first).
RELEASE sqlq_batch

-- name: rollback_to_batch
-- Undo insert_batch: some id in the batch was not new.
ROLLBACK TO sqlq_batch

-- name: open_call
-- The first statement of every call that may claim, after BEGIN (see
-- open_plain_call for the others): the database clock (its time
-- high-water mark and id counter), then what the call must know of its queue
-- ?1, as the bits of one number (every column of a result costs the DB-API
-- module a tuple and a decoded name per statement, about 1,500 instructions):
-- 1: something is due at the call's time (the later of ?2 and the mark): a
-- lease whose deadline has passed (deadline inclusive) or a WAITING task whose
-- run_at has come.  Two probes of partial indexes; due_events reads the events
-- only when one is due.
-- 2: the queue has a group with unfinished tasks (a probe of sqlq_groups_live,
-- named: the planner, without statistics, would rather walk the queue's groups
-- by their key), asked only in a file where a grouped task was ever added
-- (sqlq_clock.grouped: a file without groups pays no probe): the claims then
-- take the statements that know groups.
-- 4: the queue is paused (a probe of sqlq_paused's key), asked only while some
-- queue of the file is (sqlq_clock.paused, kept by triggers on sqlq_paused,
-- migration 13): a paused queue's claims then run no statement.
-- 8: the file's schema version (sqlq_clock.schema_version, stamped by each
-- migration from 15 on) is not ?3, the one this process knows: the file was
-- migrated under it, and the call raises SchemaChanged (a column of the row
-- read anyway, and a comparison: no statement more).
SELECT now, counter,
       (EXISTS (SELECT 1 FROM sqlq_tasks
                WHERE queue = ?1 AND deadline <= max(?2, sqlq_clock.now))
        OR EXISTS (SELECT 1 FROM sqlq_tasks
                   WHERE queue = ?1 AND run_at <= max(?2, sqlq_clock.now)))
       + iif(grouped, 2 * EXISTS (SELECT 1 FROM sqlq_groups INDEXED BY sqlq_groups_live
                                  WHERE queue = ?1 AND live > 0), 0)
       + iif(paused, 4 * EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = ?1), 0)
       + 8 * (schema_version <> ?3)
FROM sqlq_clock WHERE id = 1

-- name: open_plain_call
-- open_call for a call that claims nothing (an add, a completion, a heartbeat:
-- Backend.transaction's one_write): bits 1 and 8 alone, so it reads neither
-- sqlq_clock.grouped nor .paused nor their probes (about 1,500 instructions).
-- A call that needs bits 2 and 4 after all asks queue_flags.
SELECT now, counter,
       (EXISTS (SELECT 1 FROM sqlq_tasks
                WHERE queue = ?1 AND deadline <= max(?2, sqlq_clock.now))
        OR EXISTS (SELECT 1 FROM sqlq_tasks
                   WHERE queue = ?1 AND run_at <= max(?2, sqlq_clock.now)))
       + 8 * (schema_version <> ?3)
FROM sqlq_clock WHERE id = 1

-- name: queue_flags
-- Bits 2 and 4 of open_call for queue ?1, for a call that opened with
-- open_plain_call and claims after all.
SELECT iif(grouped, 2 * EXISTS (SELECT 1 FROM sqlq_groups INDEXED BY sqlq_groups_live
                                WHERE queue = ?1 AND live > 0), 0)
       + iif(paused, 4 * EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = ?1), 0)
FROM sqlq_clock WHERE id = 1

-- name: due_events
-- After open_call found something due: everything due in queue ?1 at the
-- call's time ?2, in the order it fell due (time, then counter: the lease
-- token or the wake-up order), with the columns the queue logic needs.
SELECT deadline, lease_id, id, task_id, state, attempts, max_attempts, lease_id, seq,
       retry_kind, retry_base, retry_cap, stop_requested_at
FROM sqlq_tasks
WHERE queue = ?1 AND deadline <= ?2
UNION ALL
SELECT run_at, seq, id, task_id, state, attempts, max_attempts, lease_id, seq,
       retry_kind, retry_base, retry_cap, stop_requested_at
FROM sqlq_tasks
WHERE queue = ?1 AND run_at <= ?2
ORDER BY {{_due_order}}

-- name: write_clock
-- Store the new high-water mark ?1 and counter ?2 at the end of a call that
-- moved them; guarded so neither can go down.
UPDATE sqlq_clock SET now = ?1, counter = ?2
WHERE id = 1 AND now <= ?1 AND counter <= ?2

-- name: ready
-- Read only, outside any write transaction: would a claim on the queue find a
-- task now?  Not while the queue is paused; else something AVAILABLE (in the
-- ungrouped line, or in a group that may start one), a lease run out, or a
-- WAITING task due (at the later of :now and the database's high-water mark).
-- Lets idle workers poll without taking the write lock.
SELECT NOT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = :queue)
   AND (EXISTS (SELECT 1 FROM sqlq_tasks
                WHERE queue = :queue AND state = 'AVAILABLE' AND group_key IS NULL)
    OR EXISTS (SELECT 1 FROM sqlq_groups INDEXED BY sqlq_groups_by_head
               WHERE queue = :queue AND {{_group_admits}}
                 AND tat <= max(:now, (SELECT now FROM sqlq_clock WHERE id = 1)))
    OR EXISTS (SELECT 1 FROM sqlq_tasks
               WHERE queue = :queue
                 AND deadline <= max(:now, (SELECT now FROM sqlq_clock WHERE id = 1)))
    OR EXISTS (SELECT 1 FROM sqlq_tasks
               WHERE queue = :queue
                 AND run_at <= max(:now, (SELECT now FROM sqlq_clock WHERE id = 1))))

-- name: next_due
-- Read only, as ready: the time of the read (the later of :now and the mark),
-- whether the queue is paused, and the earliest times at which a claim finds a
-- task it does not find now: the next rate slot (tat) of a group with a task
-- and a free place, the next lease to run out, the next WAITING task due; NULL
-- where there is none.  A worker that found nothing sleeps until the soonest.
SELECT max(:now, (SELECT now FROM sqlq_clock WHERE id = 1)),
       EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = :queue),
       (SELECT min(tat) FROM sqlq_groups INDEXED BY sqlq_groups_by_head
        WHERE queue = :queue AND {{_group_admits}}),
       (SELECT min(deadline) FROM sqlq_tasks WHERE queue = :queue AND deadline IS NOT NULL),
       (SELECT min(run_at) FROM sqlq_tasks WHERE queue = :queue AND run_at IS NOT NULL)

-- name: insert_task
-- Add a task, AVAILABLE at the back of the line or WAITING until run_at; does
-- nothing if the id exists in any state (add reads the row count; add_many
-- runs it with executemany for the ids it found new).  Positional:
-- (queue, task_id, state, seq, max_attempts, run_at, payload, retry_kind,
--  retry_base, retry_cap, now, name, priority, aging, group_key); the line key
-- is rules.line_key's.  No parameter is None (see "None is not bound" at the
-- top): run_at is read only for a WAITING task, and an empty payload, name or
-- group stands for NULL (none of them can be empty: a payload is JSON text or
-- a blob, names and groups are checked non-empty).
INSERT INTO sqlq_tasks
    (queue, task_id, state, seq, attempts, max_attempts, run_at, payload,
     retry_kind, retry_base, retry_cap, created_at, updated_at, name, priority, aging,
     line_key, group_key)
VALUES (?1, ?2, ?3, ?4, 0, ?5, iif(?3 = 'WAITING', ?6, NULL), nullif(?7, ''), ?8, ?9, ?10,
        ?11, ?11, nullif(?12, ''), ?13, ?14, ?11 - ?13 * ?14, nullif(?15, ''))
ON CONFLICT (queue, task_id) DO NOTHING

-- name: insert_plain_task
-- insert_task for the usual add: AVAILABLE now, of no group and priority 0.
-- Its line key is the time it joins the line (rules.line_key with priority
-- 0); the state, run_at (NULL), priority and group are written here or are the
-- columns' defaults: four parameters, a NULLIF, an IIF and the line key's
-- arithmetic fewer than insert_task.  Positional: (queue, task_id, seq,
-- max_attempts, payload, retry_kind, retry_base, retry_cap, now, name, aging),
-- the aging kept with the task as given (priority 0 never reads it).
INSERT INTO sqlq_tasks
    (queue, task_id, state, seq, attempts, max_attempts, payload,
     retry_kind, retry_base, retry_cap, created_at, updated_at, name, aging, line_key)
VALUES (?1, ?2, 'AVAILABLE', ?3, 0, ?4, nullif(?5, ''), ?6, ?7, ?8, ?9, ?9, nullif(?10, ''),
        ?11, ?9)
ON CONFLICT (queue, task_id) DO NOTHING

-- name: insert_batch
-- add_many in one statement: insert_task for each element of the JSON array
-- ?2, the k-th (from 0) with seq ?4 + k + 1; the elements are [id, payload,
-- name] triples if ?11 is 1, plain ids (no payloads, no names) if it is 0, which
-- saves three JSON lookups a row.  Ids that exist are skipped: add_many compares the row count
-- with the batch.  The other parameters are insert_task's: (queue, items,
-- state, counter, max_attempts, run_at, retry_kind, retry_base, retry_cap, now,
-- pairs, priority, aging, group_key).  (WHERE true: an upsert after INSERT ...
-- SELECT needs a WHERE.)
INSERT INTO sqlq_tasks
    (queue, task_id, state, seq, attempts, max_attempts, run_at, payload,
     retry_kind, retry_base, retry_cap, created_at, updated_at, name, priority, aging,
     line_key, group_key)
SELECT ?1, iif(?11, value ->> 0, value), ?3, ?4 + key + 1, 0, ?5, ?6,
       iif(?11, value ->> 1, NULL), ?7, ?8, ?9, ?10, ?10, iif(?11, value ->> 2, NULL),
       ?12, ?13, ?10 - ?12 * ?13, ?14
FROM json_each(?2) WHERE true
ON CONFLICT (queue, task_id) DO NOTHING

-- name: existing_ids
-- Which of the ids in :ids (a JSON array) a queue already has: add_many inserts
-- the others with one executemany.
SELECT task_id FROM sqlq_tasks
WHERE queue = :queue AND task_id IN (SELECT value FROM json_each(:ids))

-- name: claim_front_many
-- The first ?2 tasks of queue ?1's ungrouped line, front first, with
-- claim_front's columns (a queue without groups: see claim_grouped); then
-- take_front reserves the same tasks in one statement.  (Not one UPDATE ...
-- RETURNING: see claim_front.)  Not run while the queue is paused (open_call).
SELECT id, task_id, attempts + 1, payload, name FROM sqlq_tasks
WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL
ORDER BY line_key, seq LIMIT +?2

-- name: take_front
-- Reserve the first ?2 tasks of queue ?1's ungrouped line, the ones
-- claim_front_many just read in the same transaction: the k-th (from 1) gets the
-- token ?3 + k, the deadline ?4, at time ?5.  The line is read in a subquery
-- that SQLite materializes (its window function keeps it from being merged), at
-- most ?2 rows, and each is then found by row id, whatever statistics ANALYZE
-- left (an UPDATE ... FROM json_each(ids) leaves the join order to them; with
-- statistics of a short line SQLite read the line once per id).  Compare-and-set
-- on the state; claim_many checks the row count.
UPDATE sqlq_tasks
SET state = 'RESERVED', attempts = attempts + 1, lease_id = ?3 + line.rank,
    deadline = ?4, updated_at = ?5
FROM (SELECT id, row_number() OVER (ORDER BY line_key, seq) AS rank
      FROM sqlq_tasks
      WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL
      ORDER BY line_key, seq LIMIT +?2) AS line
WHERE sqlq_tasks.id = line.id AND sqlq_tasks.state = 'AVAILABLE'

-- name: claim_front
-- The front of queue ?1's ungrouped line (the lowest (line_key, seq); a queue
-- without groups, see claim_grouped): the task a claim takes, with what its
-- lease carries (the attempt it starts: attempts + 1), or no row; take_task
-- then reserves it by its row id.  A read and a write, not one UPDATE ...
-- RETURNING: SQLite gathers RETURNING rows in an ephemeral table (a b-tree made
-- and dropped per statement) and must find the row before it updates it when
-- the WHERE reads the table it updates; the two statements cost about 20,000
-- instructions less per claim (bench/bounds.md).  Both run under the call's
-- write lock, so nothing moves the task in between; take_task's guard still
-- checks.  Not run while the queue is paused (open_call).
SELECT id, task_id, attempts + 1, payload, name FROM sqlq_tasks
WHERE queue = ?1 AND state = 'AVAILABLE' AND group_key IS NULL
ORDER BY line_key, seq LIMIT 1

-- name: take_task
-- Reserve the AVAILABLE task with row id ?1 that claim_front or claim_grouped
-- found: count an attempt, record the lease (token ?2) and its deadline ?3, at
-- time ?4.  Compare-and-set on the state; one row, or the claim raises.  (In a
-- file with groups, the trigger sqlq_group_moved counts the lease in its group
-- and moves the group's tat and turn in this statement.)
UPDATE sqlq_tasks
SET state = 'RESERVED', attempts = attempts + 1, lease_id = ?2, deadline = ?3, updated_at = ?4
WHERE id = ?1 AND state = 'AVAILABLE'

-- name: _task_columns
-- Fragment: every column of a task the queue logic and inspection read, in the
-- order the backend's task_row maps them (get_task, get_current_lease, list_tasks, ...).
id, task_id, state, attempts, max_attempts, lease_id, seq, retry_kind,
       retry_base, retry_cap, deadline, run_at, payload, last_error,
       created_at, updated_at, finished_at, name, stop_requested_at,
       result, progress, progress_message, dedupe_key, priority, group_key

-- name: get_task
-- One task by queue and id, every column the queue logic and inspection need.
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = :queue AND task_id = :task_id

-- name: complete_task
-- RESERVED -> COMPLETED at time ?4, for task ?2 of queue ?1 under the lease ?3
-- if that is not 0 (tokens start at 1), with no result: the column stays NULL
-- (it is NULL but in a COMPLETED task) and is not written, so the statement
-- binds one parameter less and evaluates no nullif.  complete_many runs it
-- with executemany.  No parameter is None (see "None is not bound" at the top).
UPDATE sqlq_tasks
SET state = 'COMPLETED', deadline = NULL, finished_at = ?4, updated_at = ?4
WHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED' AND (?3 = 0 OR lease_id = ?3)

-- name: complete_task_with_result
-- complete_task with the result ?5 (JSON text, or '' for none: JSON text is
-- never empty), for a completion that has one (or a batch of which one has).
UPDATE sqlq_tasks
SET state = 'COMPLETED', deadline = NULL, finished_at = ?4, updated_at = ?4,
    result = nullif(?5, '')
WHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED' AND (?3 = 0 OR lease_id = ?3)

-- name: end_lease
-- End a lease that failed, ran out or was given back: AVAILABLE (a new :seq,
-- and the line key of a task that joins the line at the call's time :now), WAITING (a new :seq as
-- wake-up order, until :run_at) or DEAD (:finished_at).  Compare-and-set on the
-- lease the caller saw; zero rows means the task moved.
UPDATE sqlq_tasks
SET state = :state, seq = coalesce(:seq, seq), run_at = :run_at, deadline = NULL,
    line_key = {{_line_key}},
    attempts = attempts + :attempts_delta, last_error = :error,
    finished_at = :finished_at, updated_at = :at
WHERE id = :id AND state = 'RESERVED' AND lease_id = :token

-- name: extend_lease
-- Heartbeat: move the deadline (?4, at time ?5) of task ?2 of queue ?1's current
-- lease, if it is ?3; then stop_asked reads whether the task was asked to stop.
-- (Two statements, not RETURNING: see claim_front; about 10,000 instructions
-- less per heartbeat.)
UPDATE sqlq_tasks
SET deadline = ?4, updated_at = ?5
WHERE queue = ?1 AND task_id = ?2 AND state = 'RESERVED' AND lease_id = ?3

-- name: stop_asked
-- After extend_lease moved the lease of task ?2 of queue ?1: was it asked to stop?
SELECT stop_requested_at IS NOT NULL FROM sqlq_tasks WHERE queue = ?1 AND task_id = ?2

-- name: wake_task
-- WAITING -> AVAILABLE when run_at (:at) has come, joining the line at the
-- call's time :now (its place: see insert_task).  Compare-and-set on the
-- wake-up the caller saw.
UPDATE sqlq_tasks
SET state = 'AVAILABLE', seq = :seq, run_at = NULL, updated_at = :at,
    line_key = {{_line_key}}
WHERE id = :id AND state = 'WAITING' AND seq = :order

-- name: redrive_task
-- DEAD -> AVAILABLE at the back of the line, attempts reset; the last error is kept.
-- Not if another task holds its dedupe key (a probe of sqlq_tasks_key_holder).
UPDATE sqlq_tasks
SET state = 'AVAILABLE', attempts = 0, seq = :seq, finished_at = NULL, updated_at = :now,
    line_key = {{_line_key}}
WHERE id = :id AND state = 'DEAD'
  AND (dedupe_key IS NULL
       OR NOT EXISTS (SELECT 1 FROM sqlq_tasks AS holder
                      WHERE holder.queue = sqlq_tasks.queue
                        AND holder.dedupe_key = sqlq_tasks.dedupe_key
                        AND holder.{{_key_unfinished}}))

-- name: dead_ids
-- DEAD tasks of a queue, the longest dead first (then in the order added).
SELECT id, task_id FROM sqlq_tasks
WHERE queue = :queue AND state = 'DEAD'
ORDER BY finished_at, id
LIMIT +:limit

-- name: list_tasks
-- Tasks of a queue in the order they were added (all states).
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = :queue
ORDER BY id
LIMIT +:limit

-- name: list_tasks_in_state
-- Tasks of a queue in one state, in the order they were added.
SELECT {{_task_columns}}
FROM sqlq_tasks
WHERE queue = :queue AND state = :state
ORDER BY id
LIMIT +:limit

-- name: purge_batch
-- Delete up to :batch tasks of a queue in :state finished at or before :cutoff.
DELETE FROM sqlq_tasks
WHERE id IN (SELECT id FROM sqlq_tasks
             WHERE queue = :queue AND state = :state AND finished_at <= :cutoff
             ORDER BY finished_at
             LIMIT +:batch)

-- name: group_span
-- purge, forgetting idle groups in transactions of bounded work: the last name
-- and the number of the next :batch groups of a queue after the name :after (a
-- range of the primary key), which forget_groups then looks at.
SELECT max(group_key), count(*)
FROM (SELECT group_key FROM sqlq_groups
      WHERE queue = :queue AND group_key > :after
      ORDER BY group_key LIMIT +:batch)

-- name: forget_groups
-- Forget the idle groups of the range group_span found (names after :after up
-- to :last): no unfinished task (live = 0, and so no lease: running = 0) and
-- no start owed to the rate (tat, the next start it allows, not after :now).
-- Their limits stay in sqlq_limits: sqlq_group_added makes the row of a group
-- anew with them at its next add, and remake_group at a redrive.
DELETE FROM sqlq_groups
WHERE queue = :queue AND group_key > :after AND group_key <= :last
  AND live = 0 AND running = 0 AND tat <= :now

-- name: remake_group
-- Before redrive_task: the row of the DEAD task's group, if forget_groups forgot
-- it (an add makes it in sqlq_group_added; a redrive moves a task whose group
-- may be gone), with the limits that apply to it as sqlq_group_added reads
-- them: the group's own, else the queue's default.  No change for a task
-- without a group or one whose group has its row.
INSERT INTO sqlq_groups (queue, group_key, cap, spacing)
SELECT t.queue, t.group_key, coalesce(l.concurrency, 9223372036854775807), l.per / l.rate
FROM sqlq_tasks AS t
LEFT JOIN sqlq_limits AS l
  ON l.queue = t.queue
 AND l.group_key = (SELECT group_key FROM sqlq_limits
                    WHERE queue = t.queue AND (group_key = t.group_key OR group_key = '')
                    ORDER BY group_key = '' LIMIT 1)
WHERE t.id = :id AND t.state = 'DEAD' AND t.group_key IS NOT NULL
ON CONFLICT (queue, group_key) DO NOTHING

-- name: count_queue_states
-- Tasks of one queue per state.
SELECT state, count(*) FROM sqlq_tasks WHERE queue = :queue GROUP BY state

-- name: front_of_line
-- When the task at the front of the queue's line became AVAILABLE: the front
-- of the ungrouped line or of a group's, whichever is first (reads a row per
-- group of the queue: for stats only).
SELECT updated_at
FROM (SELECT updated_at, line_key, seq FROM (SELECT updated_at, line_key, seq FROM sqlq_tasks
                                   WHERE queue = :queue AND state = 'AVAILABLE'
                                     AND group_key IS NULL
                                   ORDER BY {{_line_order}} LIMIT 1)
      UNION ALL
      SELECT t.updated_at, t.line_key, t.seq FROM sqlq_groups AS g
      JOIN sqlq_tasks AS t
        ON t.queue = :queue AND t.group_key = g.group_key
       AND t.state = 'AVAILABLE' AND t.line_key = g.head_key AND t.seq = g.head
      WHERE g.queue = :queue AND g.head IS NOT NULL)
ORDER BY {{_line_order}} LIMIT 1

-- name: next_deadline
-- The soonest lease deadline of a queue.
SELECT min(deadline) FROM sqlq_tasks WHERE queue = :queue AND deadline IS NOT NULL

-- name: next_run_at
-- The soonest wake-up of a WAITING task of a queue.
SELECT min(run_at) FROM sqlq_tasks WHERE queue = :queue AND run_at IS NOT NULL

-- name: count_states
-- Tasks per queue and state, for the whole file (sqlq stats).
SELECT queue, state, count(*) FROM sqlq_tasks GROUP BY queue, state ORDER BY queue, state

-- name: count_names
-- Named tasks per queue, name and state, for the whole file (sqlq stats).  No
-- index serves it: it reads every row once, which suits an inspection command,
-- and an index on name would cost every add and every change of state.
SELECT queue, name, state, count(*) FROM sqlq_tasks WHERE name IS NOT NULL
GROUP BY queue, name, state ORDER BY queue, name, state

-- name: identify
-- What tells a sqlq database, an empty file and a foreign one apart: the
-- header's application id and user version, how many tables, indexes, views
-- and triggers the file has, and whether sqlq_migrations is one of them.
SELECT (SELECT application_id FROM pragma_application_id),
       (SELECT user_version FROM pragma_user_version),
       (SELECT count(*) FROM sqlite_schema WHERE substr(name, 1, 7) <> 'sqlite_'),
       EXISTS (SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'sqlq_migrations')

-- name: migration_records
-- The applied migrations as recorded: a database made before the application
-- id existed is recognised by these being sqlq's own.
SELECT version, name, checksum FROM sqlq_migrations ORDER BY version

-- name: create_migrations_table
-- The record of applied migrations; created in the first migration's transaction.
CREATE TABLE IF NOT EXISTS sqlq_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    checksum   TEXT NOT NULL,
    applied_at REAL NOT NULL
) STRICT

-- name: applied_version
-- The newest migration applied to this database.
SELECT coalesce(max(version), 0) FROM sqlq_migrations

-- name: live_workers_unversioned
-- Before a migration of a file from 12 (the registry) up to 14: the live workers
-- (not stale by the later of :now and the file's mark), every one of an older
-- sqlq (their rows say no version; one of this sqlq would have migrated the file).
SELECT host, pid, '', 0 FROM sqlq_workers
WHERE stale_at > max(:now, (SELECT now FROM sqlq_clock WHERE id = 1))
ORDER BY host, pid

-- name: live_older_workers
-- Before a migration of a file from 15 on: the live workers whose sqlq knows a
-- schema older than :latest (their rows say which, migration 0015).
SELECT host, pid, sqlq_version, schema_version FROM sqlq_workers
WHERE schema_version < :latest
  AND stale_at > max(:now, (SELECT now FROM sqlq_clock WHERE id = 1))
ORDER BY host, pid

-- name: stamp_schema
-- After each migration from 15 on, in its transaction: the file's schema version,
-- which the first statement of every call compares with its process's (open_call).
UPDATE sqlq_clock SET schema_version = :version WHERE id = 1

-- name: schema_stamp
-- After open_call found the schema version changed: the file's (for the error).
SELECT schema_version FROM sqlq_clock WHERE id = 1

-- name: record_migration
-- Record a migration, in the same transaction as its statements.
INSERT INTO sqlq_migrations (version, name, checksum, applied_at)
VALUES (:version, :name, :checksum, :applied_at)

-- name: enable_wal
-- Write-ahead logging: readers never block the writer; persistent in the file.
PRAGMA journal_mode = WAL

-- name: no_auto_checkpoint
-- On every connection: no automatic checkpoints.  SQLite ignores the outcome
-- of the checkpoint it runs inside a commit; sqlq runs them itself
-- (checkpoint_passive) and checks what they return.
PRAGMA wal_autocheckpoint = 0

-- name: limit_wal_size
-- On every connection: when the write-ahead log restarts after a complete
-- checkpoint, truncate its file to this many bytes (3 MiB).  A process
-- checkpoints once the file is past it (see WAL_CHECK_EVERY in backend.py), so
-- the file stays within 4 MiB, the documented bound, once no reader holds an
-- old snapshot.
PRAGMA journal_size_limit = 3145728

-- name: checkpoint_passive
-- Copy what the write-ahead log holds into the database file as far as no
-- reader still needs it, without waiting for or blocking anyone.  Returns
-- (busy, frames in the log, frames checkpointed); busy is 1 when another
-- connection was checkpointing.
PRAGMA wal_checkpoint(PASSIVE)

-- name: vacuum
-- Rewrite the whole database into a smaller file (sqlq purge --vacuum); holds
-- the write lock while it runs.
VACUUM

-- name: vacuum_into
-- sqlq backup: a compact copy of the database as of one read transaction, into
-- an empty file; writers go on meanwhile (WAL), and the copy is a single file
-- in rollback-journal mode.
VACUUM INTO :dest

-- name: checkpoint_truncate
-- After VACUUM: copy the whole log into the database file and truncate the
-- -wal file to nothing, so the space comes back to the file system.
PRAGMA wal_checkpoint(TRUNCATE)

-- name: begin_read
-- A read transaction: one snapshot for several statements, never the write lock.
BEGIN

-- name: set_synchronous_full
-- A commit waits for fsync of the WAL: a call that returned survives power loss.
PRAGMA synchronous = FULL

-- name: set_synchronous_normal
-- Commits skip the fsync: survives a process crash; power loss may undo the
-- last commits, never corrupt.
PRAGMA synchronous = NORMAL

-- name: get_schedule
-- A schedule's stored state (migrations/sqlite/0006), read by the call that
-- ticks it, before it adds the tasks of the ticks that are due.
SELECT queue, name, task, spec, tz, catch_up, handled_until, last_enqueued, updated_at
FROM sqlq_schedules
WHERE queue = :queue AND name = :name

-- name: insert_schedule
-- A schedule seen for the first time; nothing if another call stored it first
-- (the caller then tries again with what that call stored).
INSERT INTO sqlq_schedules
    (queue, name, task, spec, tz, catch_up, handled_until, last_enqueued, updated_at)
VALUES (:queue, :name, :task, :spec, :tz, :catch_up, :handled_until, :last_enqueued,
        :updated_at)
ON CONFLICT (queue, name) DO NOTHING

-- name: update_schedule
-- Move a schedule on, in the transaction that added its ticks' tasks: a
-- compare-and-set on the handled_until the call read, so that a call that read
-- a state another call has moved since changes nothing (and is tried again).
UPDATE sqlq_schedules
SET task = :task, spec = :spec, tz = :tz, catch_up = :catch_up,
    handled_until = :handled_until, last_enqueued = :last_enqueued, updated_at = :updated_at
WHERE queue = :queue AND name = :name AND handled_until = :seen

-- name: delete_schedule
-- forget_schedule: the stored state of a schedule no worker runs any more (its
-- tasks stay).  A worker that still has it stores it again as new.
DELETE FROM sqlq_schedules WHERE queue = :queue AND name = :name

-- name: list_schedules
-- Every schedule the database keeps (sqlq schedules), by queue and name.
SELECT queue, name, task, spec, tz, catch_up, handled_until, last_enqueued, updated_at
FROM sqlq_schedules
ORDER BY queue, name

-- name: beat_worker
-- A worker's row of the worker registry (migration 0012, sqlq/registry.py),
-- written when it starts and once per heartbeat interval: the first write makes
-- it, the next ones replace all but started_at.  With the schema version and the
-- sqlq version its process knows (migration 0015: a migration refuses to run under
-- live workers of an older schema).
INSERT INTO sqlq_workers
    (worker_id, queue, host, pid, concurrency, started_at, beat_at, stale_at, holds,
     schema_version, sqlq_version)
VALUES (:worker_id, :queue, :host, :pid, :concurrency, :started_at,
        :beat_at, :stale_at, :holds, :schema_version, :sqlq_version)
ON CONFLICT (worker_id) DO UPDATE
SET queue = excluded.queue, host = excluded.host, pid = excluded.pid,
    concurrency = excluded.concurrency, beat_at = excluded.beat_at,
    stale_at = excluded.stale_at, holds = excluded.holds,
    schema_version = excluded.schema_version, sqlq_version = excluded.sqlq_version

-- name: prune_workers
-- The rows of workers gone long enough (stale since before :before), of every
-- queue, deleted by each worker's write: the table holds the live workers and the
-- recently gone, however many were killed before.
DELETE FROM sqlq_workers WHERE stale_at < :before

-- name: forget_worker
-- A worker that stops cleanly deletes its row.
DELETE FROM sqlq_workers WHERE worker_id = :worker_id

-- name: list_workers
-- Every row of the worker registry (sqlq workers, the dashboard): read only.
SELECT worker_id, queue, host, pid, concurrency, started_at, beat_at, stale_at, holds
FROM sqlq_workers

-- name: registry_time
-- The time by which a reader judges the registry's rows stale: the queue's time
-- (the mark, at which calls wrote them), or the system clock if it is later.
SELECT max(now, (julianday('now') - 2440587.5) * 86400.0) FROM sqlq_clock

-- name: cancel_unstarted
-- cancel: AVAILABLE or WAITING -> CANCELLED at :now (finished, out of the line).
UPDATE sqlq_tasks
SET state = 'CANCELLED', run_at = NULL, finished_at = :now, updated_at = :now
WHERE queue = :queue AND task_id = :task_id AND (state = 'AVAILABLE' OR state = 'WAITING')

-- name: request_stop
-- cancel of a running task: record that its worker is asked to stop (the first
-- request's time is kept), if its lease runs past :now.
UPDATE sqlq_tasks
SET stop_requested_at = coalesce(stop_requested_at, :now)
WHERE queue = :queue AND task_id = :task_id AND state = 'RESERVED' AND deadline > :now

-- name: pause_queue
-- Pause a queue: its row in sqlq_paused, which open_call probes (a trigger sets
-- sqlq_clock.paused).  No change if it is paused already.
INSERT INTO sqlq_paused (queue, paused_at) VALUES (:queue, :now)
ON CONFLICT (queue) DO NOTHING

-- name: resume_queue
-- Resume a queue: claims find its tasks again.
DELETE FROM sqlq_paused WHERE queue = :queue

-- name: queue_paused
-- Is the queue paused?
SELECT EXISTS (SELECT 1 FROM sqlq_paused WHERE queue = :queue)

-- name: paused_queues
-- Every paused queue of the file (sqlq stats).
SELECT queue FROM sqlq_paused ORDER BY queue

-- name: task_outcome
-- What result and wait_for_result read of a task: its state, result and last
-- error (not the payload).
SELECT state, result, last_error FROM sqlq_tasks
WHERE queue = :queue AND task_id = :task_id

-- name: report_progress
-- A progress report: stored if :token is the task's current lease (extend's
-- guard; due expiries were applied as the call began).
UPDATE sqlq_tasks
SET progress = :value, progress_message = :message, updated_at = :now
WHERE lease_id = :token AND queue = :queue AND task_id = :task_id AND state = 'RESERVED'

-- name: _browse_columns
-- Fragment: the columns of a browse page (browse_newest, browse_line), read by
-- name; payload and result only when :payloads.
id, queue, task_id, state, attempts, max_attempts, lease_id, seq, retry_kind,
       retry_base, retry_cap, deadline, run_at, CASE WHEN :payloads THEN payload END AS payload,
       last_error, created_at, updated_at, finished_at, name, stop_requested_at,
       CASE WHEN :payloads THEN result END AS result, progress, progress_message,
       dedupe_key, priority, group_key, line_key

-- name: _browse_filters
-- Fragment: the filters of a browse page, each given one narrowing it (NULL: any).
  AND (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR state = :state)
  AND (:name IS NULL OR name = :name)
  AND (:prefix IS NULL OR substr(task_id, 1, length(:prefix)) = :prefix)

-- name: browse_newest
-- The dashboard's task list (sqlq.browse), newest first: a keyset page of the
-- tasks added before row :id, each filter given narrowing it.  The columns are
-- read by name; payload and result only when :payloads (a page that shows none
-- does not read megabytes of them).  The primary key serves the order and the
-- page's start; the filters are checked on the way.
SELECT {{_browse_columns}}
FROM sqlq_tasks
WHERE id < :id
  {{_browse_filters}}
ORDER BY id DESC
LIMIT +:limit

-- name: browse_line
-- The dashboard's task list by position in the line, front first: the order
-- claims take (line_key, seq; see migration 0010), then the row id; a keyset page
-- after (:line_key, :seq, :id); the columns as browse_newest's.
SELECT {{_browse_columns}}
FROM sqlq_tasks
WHERE (line_key, seq, id) > (:line_key, :seq, :id)
  {{_browse_filters}}
ORDER BY line_key, seq, id
LIMIT +:limit

-- name: finished_per_bucket
-- The dashboard's throughput chart: tasks of a queue that finished (COMPLETED,
-- DEAD, CANCELLED) since :since, per state and per :bucket seconds of finished_at.
-- The index on (queue, state, finished_at) serves each state's range.
SELECT CAST(finished_at / :bucket AS INTEGER) * :bucket AS at, state, count(*)
FROM sqlq_tasks
WHERE queue = :queue AND state IN ('COMPLETED', 'DEAD', 'CANCELLED') AND finished_at >= :since
GROUP BY at, state
ORDER BY at

-- name: count_states_by_index
-- count_states, through the partial indexes alone (each state has one: finished,
-- line (the ungrouped line's and the groups' lines), leases, waiting), without reading the table's rows: the dashboard's and
-- stats' counts stay fast on a file of 10^6 finished tasks.  Correct only while
-- every state is one of these (the caller compares the sum with count_tasks).
SELECT queue, state, count(*) FROM sqlq_tasks WHERE finished_at IS NOT NULL
GROUP BY queue, state
UNION ALL
SELECT queue, 'AVAILABLE', sum(n)
FROM (SELECT queue, count(*) AS n FROM sqlq_tasks
      WHERE state = 'AVAILABLE' AND group_key IS NULL GROUP BY queue
      UNION ALL
      SELECT queue, count(*) FROM sqlq_tasks
      WHERE state = 'AVAILABLE' AND group_key IS NOT NULL GROUP BY queue)
GROUP BY queue
UNION ALL
SELECT queue, 'RESERVED', count(*) FROM sqlq_tasks WHERE deadline IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, 'WAITING', count(*) FROM sqlq_tasks WHERE run_at IS NOT NULL GROUP BY queue

-- name: count_tasks
-- Every task of the file: what count_states_by_index must add up to (a covering
-- scan of the smallest index).
SELECT count(*) FROM sqlq_tasks

-- name: key_holder
-- The task of queue ?1 that holds the dedupe key ?2 (see sqlq/keys.py): the one
-- with the key not finished (a probe of sqlq_tasks_key_holder), else, if ?3 is
-- not NULL, the one that finished with it latest, after ?3 (a probe of
-- sqlq_tasks_key_finished); no row if none.  (row id, task id, state, seq).
SELECT id, task_id, state, seq FROM sqlq_tasks
WHERE id = coalesce(
    (SELECT id FROM sqlq_tasks
     WHERE queue = ?1 AND dedupe_key = ?2 AND {{_key_unfinished}}),
    ({{_key_finished}}))

-- name: insert_keyed_task
-- insert_task for a task holding the dedupe key ?16; does nothing if the id
-- exists or the key has a holder (sqlq_tasks_key_holder: no conflict target, so
-- every unique index is one).  Positional, as insert_task, then the key.
INSERT INTO sqlq_tasks
    (queue, task_id, state, seq, attempts, max_attempts, run_at, payload,
     retry_kind, retry_base, retry_cap, created_at, updated_at, name, priority, aging,
     line_key, group_key, dedupe_key)
VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11, ?12, ?13, ?14, ?11 - ?13 * ?14,
        ?15, ?16)
ON CONFLICT DO NOTHING

-- name: debounce_task
-- on_key="debounce": the holder of a key, not started, takes the new :payload
-- and :run_at (WAITING until then, or AVAILABLE if NULL) with the seq :seq (the
-- one it had, to keep its place in the line, or a new one, and then the line
-- key of rules.line_key at :now).  Compare-and-set on the state and seq the
-- add found.
UPDATE sqlq_tasks
SET state = iif(:run_at IS NULL, 'AVAILABLE', 'WAITING'), run_at = :run_at, seq = :seq,
    line_key = iif(:seq = :seen, line_key, {{_line_key}}),
    payload = :payload, updated_at = :now
WHERE id = :id AND state = :state AND seq = :seen

-- name: _line_key
-- Fragment: the line key of a task that joins the line (again) at the call's
-- time :now, by its priority and the aging stored with it (sqlq.rules.line_key;
-- see sqlq/contract.py, Priorities): written once for the statements that put
-- a task back in line (end_lease, wake_task, redrive_task, debounce_task).  An
-- add computes the same from its parameters (insert_task and its kin).
:now - priority * aging

-- name: _group_admits
-- Fragment: a group that may start a task (sqlq.rules.admits): one in line
-- (head) and fewer leases out than its concurrency limit.  The partial indexes
-- sqlq_groups_by_head and sqlq_groups_by_turn have this predicate (migration
-- 0011): a statement that says it this way may use them.
head IS NOT NULL AND running < cap

-- name: _key_unfinished
-- Fragment: a task that holds its dedupe key whatever the window: one not
-- finished (sqlq.rules.holds_key; a probe of sqlq_tasks_key_holder).
finished_at IS NULL

-- name: _key_finished
-- Fragment: the latest of the tasks of queue ?1 that finished with the dedupe
-- key ?2 after the cutoff ?3: it holds the key if none holds it unfinished
-- (sqlq.rules.holds_key; a probe of sqlq_tasks_key_finished).
SELECT id FROM sqlq_tasks
WHERE queue = ?1 AND dedupe_key = ?2 AND finished_at > ?3
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
-- claim_front for a queue with groups (open_call said so): the front of the
-- ungrouped line or the front of the first group that may start a task now,
-- whichever is first in line order.  A group may start one if it has an
-- AVAILABLE task, fewer RESERVED tasks than its cap and its tat (the earliest
-- start its rate allows) has come: the partial indexes of sqlq_groups hold only
-- groups with a front and a free slot, so a group at its concurrency limit is
-- never read (one waiting out its rate is read and passed over).  The first
-- group is the one whose front is first (?3 = 0) or, round robin (?3 = 1), the
-- one whose latest start is oldest; ?2 is the call's time.  Returns claim_front's columns
-- (take_task then reserves the task, see claim_front), or no row.  Not run
-- while the queue is paused (open_call).
SELECT id, task_id, attempts + 1, payload, name FROM sqlq_tasks
WHERE id = (SELECT id
            FROM (SELECT id, line_key, seq FROM (SELECT id, line_key, seq FROM sqlq_tasks
                                       WHERE queue = ?1 AND state = 'AVAILABLE'
                                         AND group_key IS NULL
                                       ORDER BY {{_line_order}} LIMIT 1)
                  UNION ALL
                  SELECT t.id, t.line_key, t.seq
                  FROM (SELECT group_key, head_key, head
                        FROM (SELECT group_key, head_key, head FROM sqlq_groups
                              WHERE queue = ?1 AND {{_group_admits}}
                                AND tat <= ?2 AND NOT ?3
                              ORDER BY head_key, head LIMIT 1)
                        UNION ALL
                        SELECT group_key, head_key, head
                        FROM (SELECT group_key, head_key, head FROM sqlq_groups
                              WHERE queue = ?1 AND {{_group_admits}}
                                AND tat <= ?2 AND ?3
                              ORDER BY turn, head_key, head LIMIT 1)) AS g
                  JOIN sqlq_tasks AS t
                    ON t.queue = ?1 AND t.group_key = g.group_key
                   AND t.state = 'AVAILABLE' AND t.line_key = g.head_key AND t.seq = g.head)
            ORDER BY {{_line_order}} LIMIT 1)

-- name: set_limit
-- set_limit: the limits of group :group_key of a queue ('' for the queue's
-- default), replacing those it had.
INSERT INTO sqlq_limits (queue, group_key, concurrency, rate, per)
VALUES (:queue, :group_key, :concurrency, :rate, :per)
ON CONFLICT (queue, group_key)
DO UPDATE SET concurrency = excluded.concurrency, rate = excluded.rate, per = excluded.per

-- name: remove_limit
-- remove_limit: group :group_key ('' the default) has no limits of its own again.
DELETE FROM sqlq_limits WHERE queue = :queue AND group_key = :group_key

-- name: apply_limits
-- After set_limit or remove_limit: the limits as they apply to the groups they
-- concern (the group :group_key, or every group of the queue for the default
-- ''), from the group's own row, else the default's; the cap of a group without
-- a concurrency limit is the largest integer.  A shorter spacing (or none) moves
-- the group's next start (tat) back by the difference: the last start plus the
-- new spacing (see sqlq/contract.py).
UPDATE sqlq_groups
SET (cap, spacing, tat) = (
    SELECT coalesce(l.concurrency, 9223372036854775807), l.per / l.rate,
           sqlq_groups.tat - max(0, coalesce(sqlq_groups.spacing, 0) - coalesce(l.per / l.rate, 0))
    FROM (SELECT 1) LEFT JOIN sqlq_limits AS l
      ON l.queue = sqlq_groups.queue
     AND (l.group_key = sqlq_groups.group_key OR l.group_key = '')
    ORDER BY l.group_key = '' LIMIT 1)
WHERE queue = :queue AND (:group_key = '' OR group_key = :group_key)

-- name: list_limits
-- The limits set in a queue ('' the default), by group.
SELECT group_key, concurrency, rate, per FROM sqlq_limits
WHERE queue = :queue ORDER BY group_key

-- name: list_groups
-- The groups of a queue that have unfinished tasks, with their leases and how
-- many tasks are unfinished (sqlq limits), by group.
SELECT group_key, running, live FROM sqlq_groups
WHERE queue = :queue AND live > 0 ORDER BY group_key

-- name: record_on_demand
-- An on-demand migration (migrations/sqlite/on_demand/, see migrate.apply_on_demand),
-- recorded under its negative version in the transaction that applies it; no
-- change (no row) if it was applied before, and then its statements are not run.
INSERT INTO sqlq_migrations (version, name, checksum, applied_at)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (version) DO NOTHING

-- name: on_demand_applied
-- The on-demand migrations a database recorded (their numbers, from 1), in order.
SELECT -version FROM sqlq_migrations WHERE version < 0 ORDER BY version DESC

-- name: user_objects_on
-- The views, triggers and indexes of the user's own (not named sqlq_... or
-- sqlite_...) on table :table or naming it, in the order they were made: a
-- numbered migration that rebuilds the table drops them first and makes them
-- again after (migrate.py), as a view on a dropped table would stop the
-- rebuild's rename and the table's own indexes and triggers go with it.
SELECT type, name, sql FROM sqlite_schema
WHERE sql IS NOT NULL AND (type = 'view' OR type = 'trigger' OR type = 'index')
  AND name NOT LIKE 'sqlq\_%' ESCAPE '\' AND name NOT LIKE 'sqlite\_%' ESCAPE '\'
  AND (tbl_name = :table OR instr(lower(sql), :table) > 0)
ORDER BY rowid

-- name: missing_objects
-- Which of the triggers and indexes named in :names (a JSON array) the database
-- lacks.
SELECT value FROM json_each(:names)
WHERE value NOT IN (SELECT name FROM sqlite_schema WHERE type = 'trigger' OR type = 'index')

-- name: holds_keys
-- Does the file hold a task with a dedupe key (migrate.IN_USE)?  A scan, once,
-- when a file is migrated to 13.
SELECT EXISTS (SELECT 1 FROM sqlq_tasks WHERE dedupe_key IS NOT NULL)

-- name: queue_settings
-- A queue's stored settings (migration 0015, sqlq/settings.py), read once by a
-- process that opens the queue without them: read only.
SELECT lease_seconds, max_attempts, retry_kind, retry_base, retry_cap
FROM sqlq_settings WHERE queue = :queue

-- name: list_settings
-- Every queue's stored settings (sqlq stats): read only.
SELECT queue, lease_seconds, max_attempts, retry_kind, retry_base, retry_cap
FROM sqlq_settings ORDER BY queue

-- name: configure_settings
-- Change a queue's settings (Queue.configure, sqlq configure) in one statement: those
-- given replace the stored ones (a queue without any takes the defaults for the
-- others), those not given (keep_*) stay; returns the settings now stored.  One
-- upsert, as on PostgreSQL, where a read and then a write of the whole row lost one of
-- two configures at once.
INSERT INTO sqlq_settings
    (queue, lease_seconds, max_attempts, retry_kind, retry_base, retry_cap, updated_at)
VALUES (:queue, :lease_seconds, :max_attempts, :retry_kind, :retry_base, :retry_cap, :now)
ON CONFLICT (queue) DO UPDATE
SET lease_seconds = CASE WHEN :keep_lease THEN sqlq_settings.lease_seconds ELSE excluded.lease_seconds END,
    max_attempts = CASE WHEN :keep_attempts THEN sqlq_settings.max_attempts ELSE excluded.max_attempts END,
    retry_kind = CASE WHEN :keep_retry THEN sqlq_settings.retry_kind ELSE excluded.retry_kind END,
    retry_base = CASE WHEN :keep_retry THEN sqlq_settings.retry_base ELSE excluded.retry_base END,
    retry_cap = CASE WHEN :keep_retry THEN sqlq_settings.retry_cap ELSE excluded.retry_cap END,
    updated_at = excluded.updated_at
RETURNING queue, lease_seconds, max_attempts, retry_kind, retry_base, retry_cap
