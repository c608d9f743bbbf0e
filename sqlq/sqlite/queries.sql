-- Every SQL statement sqlq runs against SQLite, one named block each.
--
-- A block starts with `-- name: <name>`, continues with comment lines that say
-- what it does, and ends where the next block starts.  Parameters are named
-- (:name).  sqlq/sqlite/queries.py loads this file; tests check that every block
-- is used and that every name the code uses is defined here.

-- name: begin_write
-- Start a call's transaction holding the write lock from its first statement,
-- so that two writers never deadlock upgrading a read lock.
BEGIN IMMEDIATE

-- name: commit
-- Make the call's transaction durable (to the degree `synchronous` promises).
COMMIT

-- name: rollback
-- Undo the call's transaction after an error.
ROLLBACK

-- name: read_clock
-- The database's time high-water mark and the id counter, read at the start of a call.
SELECT now, counter FROM sqlq_clock WHERE id = 1

-- name: write_clock
-- Store the new high-water mark and counter; guarded so neither can go down.
UPDATE sqlq_clock SET now = :now, counter = :counter
WHERE id = 1 AND now <= :now AND counter <= :counter

-- name: due_leases
-- Every lease that has run out at :now (deadline inclusive), in expiry order:
-- by deadline, then by lease id (the order of reservation).  A range scan of
-- sqlq_tasks_leases.
SELECT id, task_id, state, attempts, max_attempts, lease_id
FROM sqlq_tasks
WHERE deadline <= :now
ORDER BY deadline, lease_id

-- name: insert_task
-- Add a task at the back of its queue's line; does nothing if the id exists in
-- any state (the caller reads the row count).
INSERT INTO sqlq_tasks
    (queue, task_id, state, seq, attempts, max_attempts, created_at, updated_at)
VALUES (:queue, :task_id, 'AVAILABLE', :seq, 0, :max_attempts, :now, :now)
ON CONFLICT (queue, task_id) DO NOTHING

-- name: claim_front
-- Reserve the front of the queue's line in one statement: count an attempt,
-- record the lease and its deadline.  Returns the task id, or no row.
UPDATE sqlq_tasks
SET state = 'RESERVED', attempts = attempts + 1, lease_id = :lease_id,
    deadline = :deadline, updated_at = :now
WHERE id = (SELECT id FROM sqlq_tasks
            WHERE queue = :queue AND state = 'AVAILABLE'
            ORDER BY seq LIMIT 1)
  AND state = 'AVAILABLE'
RETURNING task_id

-- name: get_task
-- One task by queue and id.
SELECT id, task_id, state, attempts, max_attempts, lease_id
FROM sqlq_tasks
WHERE queue = :queue AND task_id = :task_id

-- name: complete_task
-- Mark a task COMPLETED if, and only if, it is RESERVED now.
UPDATE sqlq_tasks
SET state = 'COMPLETED', deadline = NULL, updated_at = :now
WHERE queue = :queue AND task_id = :task_id AND state = 'RESERVED'

-- name: release_lease
-- End a lease that failed or ran out: back of the line (a new :seq) or DEAD.
-- Compare-and-set on the lease the caller saw; zero rows means the task moved.
UPDATE sqlq_tasks
SET state = :state, seq = coalesce(:seq, seq), deadline = NULL, updated_at = :now
WHERE id = :id AND state = 'RESERVED' AND lease_id = :lease_id

-- name: count_states
-- Tasks per queue and state, for stats.
SELECT queue, state, count(*) FROM sqlq_tasks GROUP BY queue, state ORDER BY queue, state

-- name: list_objects
-- Names of the tables, indexes, views and triggers in the file: tells a new or
-- foreign file from a sqlq database.
SELECT type, name FROM sqlite_master

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

-- name: record_migration
-- Record a migration, in the same transaction as its statements.
INSERT INTO sqlq_migrations (version, name, checksum, applied_at)
VALUES (:version, :name, :checksum, :applied_at)

-- name: enable_wal
-- Write-ahead logging: readers never block the writer; persistent in the file.
PRAGMA journal_mode = WAL

-- name: set_synchronous_full
-- A commit waits for fsync of the WAL: a call that returned survives power loss.
PRAGMA synchronous = FULL

-- name: set_synchronous_normal
-- Commits skip the fsync: survives a process crash; power loss may undo the
-- last commits, never corrupt.
PRAGMA synchronous = NORMAL
