-- 0011: a queue's settings stored with it, and what a running process needs to
-- notice that the schema changed under it; as SQLite's 0015 (see there).

CREATE TABLE sqlq_settings (
    queue         text             PRIMARY KEY CHECK (length(queue) > 0),
    lease_seconds double precision NOT NULL CHECK (lease_seconds >= 0),
    max_attempts  bigint           NOT NULL CHECK (max_attempts >= 1),
    retry_kind    text             NOT NULL,
    retry_base    double precision NOT NULL,
    retry_cap     double precision NOT NULL,
    updated_at    double precision NOT NULL
);

ALTER TABLE sqlq_workers ADD COLUMN schema_version bigint NOT NULL DEFAULT 0;
ALTER TABLE sqlq_workers ADD COLUMN sqlq_version text NOT NULL DEFAULT '';

ALTER TABLE sqlq_clock ADD COLUMN schema_version bigint NOT NULL DEFAULT 0;
