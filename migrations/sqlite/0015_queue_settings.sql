-- 0015: a queue's settings stored with it, and what a running process needs to
-- notice that the schema changed under it (issue 23).
--
-- sqlq_settings: a queue's lease length, attempts and retry policy, written by
-- Queue.configure (`sqlq configure`) and read once by every process that opens
-- the queue without them (sqlq.settings).  A queue without a row has sqlq's
-- defaults (sqlq.settings.DEFAULTS).
CREATE TABLE sqlq_settings (
    queue         TEXT    NOT NULL PRIMARY KEY CHECK (length(queue) > 0),
    lease_seconds REAL    NOT NULL CHECK (lease_seconds >= 0),
    max_attempts  INTEGER NOT NULL CHECK (max_attempts >= 1),
    retry_kind    TEXT    NOT NULL,
    retry_base    REAL    NOT NULL,
    retry_cap     REAL    NOT NULL,
    updated_at    REAL    NOT NULL
) STRICT, WITHOUT ROWID;

-- The schema version and the sqlq version that a worker's process knows, in its
-- registry row: a migration refuses to run while live workers know an older
-- schema (sqlq/sqlite/migrate.py).  Rows written by an older sqlq keep 0 and ''.
ALTER TABLE sqlq_workers ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_workers ADD COLUMN sqlq_version TEXT NOT NULL DEFAULT '';

-- The schema version, stamped by the migration runner after each migration from
-- this one on, and read by the first statement of every call (open_call) with the
-- version the process knows: a call of a process whose schema is no longer the
-- file's raises SchemaChanged instead of carrying on.
ALTER TABLE sqlq_clock ADD COLUMN schema_version INTEGER NOT NULL DEFAULT 0;
