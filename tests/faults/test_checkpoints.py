"""Checkpoints: sqlq runs and checks them itself, and the WAL stays within its bound.

SQLite's automatic checkpoint runs inside a commit and its outcome is thrown
away.  sqlq turns it off on every connection and checkpoints once the ``-wal``
file is past ``journal_size_limit`` (3 MiB; a process looks every 16 of its
commits), looking at what the checkpoint returns.  The documented bound: once
no reader holds an old snapshot, the ``-wal`` file is back within 4 MiB after a
few calls; while a reader holds one, it grows by what is written meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sqlq
from sqlq.sqlite import driver

pytestmark = [pytest.mark.faults]

PAYLOAD = "x" * 3000  # most of a page per task: the log grows quickly
BOUND = 4 * 2**20  # the README's bound on the -wal file


def wal_size(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


def test_automatic_checkpoints_are_off_and_checkpoint_reports(db_path: Path) -> None:
    q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3, synchronous="normal")
    conn = q._backend._connection()
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    assert conn.execute("PRAGMA journal_size_limit").fetchone()[0] == q._backend.wal_limit > 0
    for i in range(5):
        q.add(f"t{i}", payload=PAYLOAD)
    result = q.checkpoint()
    assert isinstance(result, sqlq.Checkpoint)
    assert result.wal_frames >= 5 and result.checkpointed == result.wal_frames
    assert not result.busy and result.wal_bytes == wal_size(db_path)
    # Nothing was lost by copying: a second connection sees every task.
    other = driver.dbapi.connect(str(db_path))
    assert other.execute("SELECT count(*) FROM sqlq_tasks").fetchone()[0] == 5
    other.close()
    q.close()


def test_a_process_checkpoints_by_itself(db_path: Path) -> None:
    q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3, synchronous="normal")
    assert q._backend.last_checkpoint is None
    for i in range(250):
        q.add(f"t{i}", payload=PAYLOAD)
    last = q._backend.last_checkpoint
    assert last is not None and last.checkpointed > 0 and q._backend.checkpoint_failures == 0
    q.close()


def test_a_small_log_is_left_alone(db_path: Path) -> None:
    """No checkpoint (and its fsyncs) while the -wal file is within its limit: a
    checkpoint every 100 commits cost a quarter of add's time under NORMAL."""
    q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3, synchronous="normal")
    for i in range(150):
        q.add(f"t{i}")
    assert 0 < wal_size(db_path) <= q._backend.wal_limit
    assert q._backend.last_checkpoint is None
    q.close()


READER = """
import sys
from sqlq.sqlite import driver
conn = driver.dbapi.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
print(conn.execute("SELECT count(*) FROM sqlq_tasks").fetchone()[0], flush=True)
sys.stdin.readline()  # paused, holding its snapshot, until told to go on
conn.execute("COMMIT")
conn.close()
"""


def test_the_wal_returns_within_its_bound_after_a_reader_paused(db_path: Path) -> None:
    q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3, synchronous="normal")
    limit = q._backend.wal_limit
    added = 0

    def add(n: int) -> int:
        nonlocal added
        largest = 0
        for _ in range(n):
            assert q.add(f"t{added}", payload=PAYLOAD)
            added += 1
            largest = max(largest, wal_size(db_path))
        return largest

    assert add(400) <= BOUND  # a steady run: the process's own checkpoints keep it small

    root = Path(__file__).resolve().parents[2]
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        assert int(reader.stdout.readline()) == added  # it holds a snapshot now
        grown = add(2000)
        # The test can fail: the paused reader really pinned the log past the limit.
        assert grown > 2 * limit, (grown, limit)
        reader.stdin.write("go\n")
        reader.stdin.flush()
        assert reader.wait(30) == 0
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()

    calls = 0
    while wal_size(db_path) > limit:
        add(1)
        calls += 1
        assert calls <= 50, f"the -wal file is still {wal_size(db_path)} bytes"
    stats = q.stats()
    assert stats.wal_bytes == wal_size(db_path) <= limit
    assert stats.counts["AVAILABLE"] == added
    assert q._backend.checkpoint_failures == 0
    conn = q._backend._connection()
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    q.close()


def test_stats_in_memory_has_no_wal() -> None:
    stats = sqlq.WorkQueue(30, 3).stats(0)
    assert stats.wal_bytes is None
    # wal_bytes is the storage's: two faces with equal queues compare equal.
    assert stats == sqlq.QueueStats(stats.counts, None, None, None, wal_bytes=123)


WRITER = """
import sys, sqlq
q = sqlq.Queue(sys.argv[1], lease_seconds=30, max_attempts=3, synchronous="normal")
for i in range(int(sys.argv[3])):
    q.add(f"{sys.argv[2]}-{i}", payload="x" * 3000)
    lease = q.claim()
    if lease is not None:
        q.complete(lease.task_id, token=lease.token)
q.close()
"""


def test_the_wal_stays_bounded_while_four_processes_write(db_path: Path) -> None:
    """The checkpoint runs while its process still holds the write gate.  Outside it,
    some other process's commit always landed during the checkpoint, the log never
    started over, and this run grew the -wal file to 66 MiB."""
    q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3, synchronous="normal")
    limit = q._backend.wal_limit
    root = Path(__file__).resolve().parents[2]
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db_path), f"w{k}", "400"],
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        for k in range(4)
    ]
    largest = 0
    try:
        while any(w.poll() is None for w in writers):
            largest = max(largest, wal_size(db_path))
            time.sleep(0.005)
    finally:
        for w in writers:
            if w.poll() is None:
                w.kill()
            w.wait()
    assert all(w.returncode == 0 for w in writers)
    assert q.counts()["COMPLETED"] == 1600
    assert largest <= 2 * limit, f"the -wal file reached {largest / 2**20:.1f} MiB"
    q.close()


def test_writers_on_queue_engine_keep_sqlites_own_checkpoints(db_path: Path) -> None:
    """sqlq does not see the commits of transactions on queue.engine, so those
    connections keep SQLite's automatic checkpoint; without it, 400 transactional
    adds left a 29 MiB -wal file behind."""
    q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3, synchronous="normal")
    limit = q._backend.wal_limit
    largest = 0
    for i in range(400):
        with q.engine.begin() as conn:
            q.add(f"t{i}", payload=PAYLOAD, conn=conn)
        largest = max(largest, wal_size(db_path))
    with q.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 1000
    assert q._backend._connection().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    assert largest <= 2 * limit, f"the -wal file reached {largest / 2**20:.1f} MiB"
    assert q.counts()["AVAILABLE"] == 400
    q.close()


def test_a_short_lived_queue_checkpoints_when_it_closes(db_path: Path) -> None:
    keep = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3)  # keeps the -wal alive
    for i in range(5):
        q = sqlq.Queue(db_path, lease_seconds=30, max_attempts=3)
        q.add(f"t{i}", payload=PAYLOAD)
        q.close()
        assert q._backend.last_checkpoint is not None  # a few commits, then close
        assert q._backend.last_checkpoint.checkpointed == q._backend.last_checkpoint.wal_frames
    keep.close()


# A writer that adds 130 tasks, says so, then waits to be SIGKILLed with the queue open.
ADD_AND_WAIT = """
import sys, sqlq
q = sqlq.Queue(sys.argv[1], lease_seconds=30, max_attempts=3)
for i in range(130):
    assert q.add(f"t{i}")
print("added", flush=True)
sys.stdin.read()
"""


def test_the_wal_holds_acknowledged_commits_after_a_sigkilled_writer(tmp_path: Path) -> None:
    """Why the README says never to delete the -wal file: after a crash it holds
    commits that were acknowledged and are nowhere else; opening the queue replays
    them.  The same files without the -wal lose them."""
    db = tmp_path / "q.db"
    writer = subprocess.Popen(
        [sys.executable, "-c", ADD_AND_WAIT, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "added\n"
    writer.kill()
    writer.communicate(timeout=60)
    assert wal_size(db) > 0
    without_wal = tmp_path / "without-wal"
    without_wal.mkdir()
    (without_wal / "q.db").write_bytes(db.read_bytes())  # as if the -wal had been deleted
    with sqlq.Queue(without_wal / "q.db", lease_seconds=30, max_attempts=3) as q:
        assert sum(q.counts().values()) < 130  # acknowledged adds lost
    with sqlq.Queue(db, lease_seconds=30, max_attempts=3) as q:
        assert sum(q.counts().values()) == 130  # the -wal replayed: nothing lost
