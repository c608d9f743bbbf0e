"""Real worker processes on one database, killed with SIGKILL while they drain it (on
every durable backend); the demo and `sqlq backup` with real processes (SQLite files).

The workers are tests/workers.py (see its docstring for the log format).
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from needs import need

import sqlq
from sqlq.sqlite.driver import dbapi

pytestmark = pytest.mark.processes


@pytest.fixture(autouse=True)
def _killable() -> None:
    need(hasattr(signal, "SIGKILL"), "needs SIGKILL")


WORKER_SCRIPT = Path(__file__).with_name("workers.py")

TASKS = 1200
WORKERS = 4  # alive at any time; each killed worker is replaced
KILLS = 5
LEASE = 1.0
DRAIN_TIMEOUT = 60.0


@dataclass
class Worker:
    number: int
    process: subprocess.Popen[bytes]
    log: Path
    stderr_path: Path
    stderr: IO[bytes]
    killed: bool = False

    def lines(self) -> list[str]:
        return self.log.read_text("utf-8").splitlines() if self.log.exists() else []


def _start(number: int, url: str, tmp: Path, *extra: str) -> Worker:
    log = tmp / f"worker{number}.log"
    stderr_path = tmp / f"worker{number}.stderr"
    stderr = stderr_path.open("wb")
    process = subprocess.Popen(
        [
            sys.executable,
            str(WORKER_SCRIPT),
            url,
            str(log),
            "--lease",
            str(LEASE),
            "--max-attempts",
            "1000",  # only COMPLETED is a good ending here; no task may go DEAD
            "--work-ms",
            "2",
            "8",
            "--seed",
            str(number),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )
    return Worker(number, process, log, stderr_path, stderr)


def _taken(workers: list[Worker]) -> int:
    return sum(line.startswith("took ") for w in workers for line in w.lines())


def test_workers_drain_while_being_killed(tmp_path: Path, queue_url: str) -> None:
    names = [f"task-{i:04d}" for i in range(1, TASKS + 1)]
    rng = random.Random(1234)
    started = time.monotonic()
    with sqlq.Queue(queue_url, lease_seconds=LEASE, max_attempts=1000) as queue:
        for name in names:
            assert queue.add(name)

        workers = [_start(n, queue_url, tmp_path) for n in range(1, WORKERS)]
        # This one pauses 400 ms after every 5th complete() before logging its
        # result, so that one kill can land in the ambiguous window on purpose.
        lingerer = _start(WORKERS, queue_url, tmp_path, "--linger-every", "5", "--linger-ms", "400")
        workers.append(lingerer)
        try:
            # Let the drain get going (the workers take a moment to start).
            while _taken(workers) < 50:
                assert time.monotonic() - started < DRAIN_TIMEOUT, "workers did not start"
                time.sleep(0.02)

            # Kill a live worker every ~0.4 s and start a replacement.  The first
            # kill hits the lingerer between complete() and its "done" line; the
            # others hit a random worker, preferably while it holds a task (its
            # last log line is "took ...").
            kills = 0
            while kills < KILLS and queue.counts()["COMPLETED"] < TASKS - 100:
                if kills == 0:
                    victim, wanted, steady = lingerer, "intent ", 0.05
                else:
                    # Only workers that have started (a replacement may still be
                    # importing; killing it then would prove nothing).
                    alive = [
                        w
                        for w in workers
                        if not w.killed and w.process.poll() is None and w.lines()
                    ]
                    if not alive:
                        time.sleep(0.05)
                        continue
                    victim, wanted, steady = rng.choice(alive), "took ", 0.0
                seen, since = "", time.monotonic()
                wait_until = time.monotonic() + (5.0 if kills == 0 else 0.3)
                while time.monotonic() < wait_until:
                    last = (victim.lines() or [""])[-1]
                    if last != seen:
                        seen, since = last, time.monotonic()
                    if last.startswith(wanted) and time.monotonic() - since >= steady:
                        break
                    time.sleep(0.001)
                victim.process.send_signal(signal.SIGKILL)
                victim.killed = True
                victim.process.wait()
                kills += 1
                workers.append(_start(len(workers) + 1, queue_url, tmp_path))
                time.sleep(0.4)

            deadline = started + DRAIN_TIMEOUT
            for w in workers:
                w.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        finally:
            for w in workers:
                if w.process.poll() is None:
                    w.process.kill()
                    w.process.wait()
                w.stderr.close()
        final_counts = queue.counts()
        statuses = {name: queue.status(name) for name in names}
    elapsed = time.monotonic() - started

    killed = [w for w in workers if w.killed]
    assert len(killed) >= 3, f"the drain ended after only {len(killed)} kills; make it longer"

    # Exit codes and stderr.
    for w in workers:
        err = w.stderr_path.read_text("utf-8", errors="replace")
        assert "database is locked" not in err, f"worker {w.number}: {err}"
        assert "Traceback" not in err, f"worker {w.number}: {err}"
        if w.killed:
            assert w.process.returncode == -signal.SIGKILL
        else:
            assert w.process.returncode == 0, f"worker {w.number} exited badly: {err}"
            assert w.lines()[-1] == "exit"

    # Every task is COMPLETED.
    assert final_counts == {
        "WAITING": 0,
        "AVAILABLE": 0,
        "RESERVED": 0,
        "COMPLETED": TASKS,
        "DEAD": 0,
        "CANCELLED": 0,
    }
    assert set(statuses.values()) == {"COMPLETED"}

    # Read the logs: every "intent" is followed by that task's "done" or "false",
    # except as the very last line of a killed worker (the ambiguous window:
    # complete() may or may not have committed).
    done: Counter[str] = Counter()
    took: Counter[str] = Counter()
    ambiguous: Counter[str] = Counter()
    came_back: list[str] = []  # tasks a killed worker held when it died
    for w in workers:
        lines = w.lines()
        assert lines and lines[0].startswith("start "), f"worker {w.number} never started"
        for i, line in enumerate(lines):
            kind, _, task = line.partition(" ")
            if kind == "took":
                took[task] += 1
            elif kind == "done":
                done[task] += 1
            if kind == "intent":
                following = lines[i + 1] if i + 1 < len(lines) else None
                if following is None:
                    assert w.killed, f"worker {w.number} stopped after {line!r}"
                    ambiguous[task] += 1
                else:
                    assert following in (f"done {task}", f"false {task}"), (w.number, i)
        if w.killed and lines[-1].startswith("took "):
            came_back.append(lines[-1].partition(" ")[2])

    assert set(took) == set(names)
    assert sum(took.values()) >= TASKS
    # complete() returned True at most once per task ...
    assert max(done.values()) == 1, [t for t, n in done.items() if n > 1]
    # ... and exactly once for every task without a "done": those are the tasks
    # whose only completion was cut off by a SIGKILL between complete() and the
    # "done" line; the database says COMPLETED, so that complete() committed.
    no_done = set(names) - set(done)
    assert no_done <= set(ambiguous), sorted(no_done - set(ambiguous))
    assert all(ambiguous[task] == 1 for task in no_done)
    assert set(done) | set(ambiguous) == set(names)
    # The tasks killed workers held came back after their lease ran out, and were
    # taken again and completed by another worker.
    assert came_back, "no worker was killed while it held a task"
    assert ambiguous, "the lingerer was not killed in the ambiguous window"
    for task in came_back:
        assert took[task] >= 2, task
        assert done[task] == 1, task

    print(
        f"\n{TASKS} tasks, {len(workers)} worker processes ({len(killed)} killed), "
        f"{sum(took.values())} reservations, {sum(done.values())} done, "
        f"{len(ambiguous)} ambiguous ({len(no_done)} of them committed), "
        f"{len(came_back)} came back after a kill, "
        f"{elapsed:.1f} s"
    )


def test_demo_command(tmp_path: Path) -> None:
    """The demo's real Workers: claims and completions with tokens, a SIGKILLed worker
    whose lease runs out, a retry and a dead letter; and the database agrees.
    (SQLite only: the demo makes a file of its own.)"""
    db = tmp_path / "demo.db"
    command = [sys.executable, "-m", "sqlq", "demo", "--db", str(db), "--tasks", "12"]
    command += ["--workers", "3", "--lease", "1"]
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    # The plan: task-004 hangs (its worker is killed), task-007 fails once, task-012 always.
    killed = re.search(r"hangs on task-004: killed it \(pid \d+\) with SIGKILL.*token (\d+)", out)
    assert killed, out
    taken = re.search(
        rf"lease of task-004 held by killed worker \d \(token {killed.group(1)}\) ran out; "
        r"worker \d claimed it \(attempt 2, token (\d+)\)",
        out,
    )
    assert taken and int(taken.group(1)) > int(killed.group(1)), out
    assert f"completed task-004 (token {taken.group(1)})" in out
    assert re.search(r"failed task-007 \(token \d+\): DemoFailure: .*retried in", out)
    assert re.search(r"claimed task-007 \(attempt 2, token \d+\)", out)
    assert re.search(r"failed task-012 \(token \d+\): .*DEAD after 3 attempts", out)
    for i in (1, 2, 3, 5, 6, 8, 9, 10, 11):  # the rest: claimed and completed under one token
        token = re.search(rf"claimed task-{i:03d} \(attempt 1, token (\d+)\)", out)
        assert token and f"completed task-{i:03d} (token {token.group(1)})" in out, out
    assert "stopped on SIGTERM" in out
    assert "16 claimed, so 4 retries" in out  # 1 after the kill, 1 for task-007, 2 for task-012
    assert "COMPLETED 11, DEAD 1" in out
    with sqlq.Queue(db, lease_seconds=1, max_attempts=3, queue="demo") as queue:
        assert queue.counts() == {
            "WAITING": 0,
            "AVAILABLE": 0,
            "RESERVED": 0,
            "COMPLETED": 11,
            "DEAD": 1,
            "CANCELLED": 0,
        }
        assert [d.task_id for d in queue.dead()] == ["task-012"]
        info = queue.info("task-004")
        assert info is not None and (info.attempts, info.token) == (2, int(taken.group(1)))
    assert not (tmp_path / "sqlq-demo.db").exists()  # --db was used, not the default


def _sqlq(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_backup_while_a_worker_drains(tmp_path: Path) -> None:
    """`sqlq backup` while a `sqlq worker` process drains the file: every backup opens
    as a queue and holds every task (none lost), also those taken mid-drain.
    (SQLite only: a backup is a copy of the file.)"""
    db = tmp_path / "jobs.db"
    tasks = 400
    with sqlq.Queue(db, lease_seconds=30, max_attempts=3) as q:
        q.add_many([(f"t{i}", 0.02) for i in range(tasks)])
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent))
    command = [sys.executable, "-m", "sqlq", "worker", str(db), "runner_handlers:nap"]
    command += ["--concurrency", "2", "--burst"]
    worker = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    completed: list[int] = []
    try:
        while not completed or completed[-1] < tasks:
            assert len(completed) < 200, completed
            dest = tmp_path / "backup.db"  # replaced by each backup in turn
            backup = _sqlq("backup", db, dest)
            assert backup.returncode == 0, backup.stderr
            stats = _sqlq("stats", dest, "--json")
            assert stats.returncode == 0, stats.stderr
            counts = json.loads(stats.stdout)["queues"]["default"]
            assert sum(counts.values()) == tasks, counts
            conn = dbapi.connect(str(dest))
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            conn.close()
            completed.append(counts["COMPLETED"])
    finally:
        worker.wait(timeout=120)
    assert worker.returncode == 0
    assert any(0 < n < tasks for n in completed), completed  # taken while the worker ran
    with sqlq.Queue(dest, lease_seconds=30, max_attempts=3) as copy:
        assert copy.counts()["COMPLETED"] == tasks
