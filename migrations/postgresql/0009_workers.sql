-- 0009: the worker registry, as SQLite's 0012 (see there and sqlq/registry.py):
-- a row per worker process, written when it starts and once per heartbeat
-- interval, deleted when it stops cleanly; what it holds is JSON text in its own
-- row, so a claim writes nothing more.  Rows of workers gone without a word are
-- stale to readers, and deleted by a worker's next write once stale for a while.

CREATE TABLE sqlq_workers (
    worker_id   text             PRIMARY KEY CHECK (length(worker_id) > 0),
    queue       text             NOT NULL CHECK (length(queue) > 0),
    host        text             NOT NULL,
    pid         bigint           NOT NULL CHECK (pid >= 0),
    concurrency bigint           NOT NULL CHECK (concurrency >= 1),
    started_at  double precision NOT NULL,
    beat_at     double precision NOT NULL,
    stale_at    double precision NOT NULL,
    holds       text             NOT NULL
);
