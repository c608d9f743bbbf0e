"""Frozen processes (SIGSTOP): leases run out under them, and their locks do not hang others.

A worker frozen past its lease is a fault of every backend (test 1 runs on each); the
rest is about SQLite's write lock, busy_timeout and files.

The children are tests/faults/frozen_worker.py (see its docstring for the modes).
A frozen worker keeps nothing it cannot lose: its lease runs out, another worker
takes the task, and once resumed, its reports with the old token are refused.
A process frozen inside a write transaction makes the others' writes fail with
``sqlq.errors.Busy`` naming the database after ``busy_timeout`` (never a hang),
reads go on meanwhile, and after SIGCONT everything continues with no work lost.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import queue as stdqueue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
import sqlalchemy as sa
from databases import kind, sqlite_path
from needs import need

import sqlq
from sqlq.errors import Busy
from sqlq.sqlite import driver

pytestmark = [pytest.mark.processes, pytest.mark.faults]


@pytest.fixture(autouse=True)
def _stoppable() -> None:
    need(hasattr(signal, "SIGSTOP") and Path("/proc/self/task").is_dir(), "needs SIGSTOP and /proc")


HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "frozen_worker.py"

#: The lease of a worker that is frozen while idle (test 1): any length works.
SHORT_LEASE = 0.3
#: The lease of `sqlq worker` processes, heartbeated every third of it.
LEASE = 1.0
BUSY_TIMEOUT = 0.5
#: A call that waits for a frozen lock holder must give up by then: a hang check,
#: not a performance bound.
HANG_BOUND = 5 * BUSY_TIMEOUT
#: A call still waiting after this long is taken for hung (see _timed).
HANG_LIMIT = 20.0
#: Waiting for a child to start (imports), answer, or exit.
PATIENCE = 30.0


# --- helpers ---------------------------------------------------------------------------------


def _stopped(pid: int) -> bool:
    """Are all threads of ``pid`` stopped (state T)?  SIGSTOP takes effect a little later
    than kill() returns."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rpartition(")")[2].split()[0])
        except OSError:
            continue  # the thread ended meanwhile
    return bool(states) and all(state in ("T", "t") for state in states)


def _freeze(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    _wait_for(lambda: _stopped(pid), 5.0, f"process {pid} to stop")


def _thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _sleep_until(wall_time: float) -> None:
    """Sleep until time.time() (the queue's clock) has passed ``wall_time``."""
    while (left := wall_time - time.time()) > 0:
        time.sleep(left)


def _timed(call: Callable[[], object], spawned: Spawner) -> tuple[object, float]:
    """``call()``'s result or the exception it raised, and how long it took.

    The call runs in a thread: if it is still waiting after HANG_LIMIT, the children
    are killed (their locks die with them, so the call and the test's cleanup can
    end) and the test fails, instead of hanging the test run.
    """
    box: list[tuple[object, float]] = []

    def run() -> None:
        started = time.monotonic()
        try:
            outcome: object = call()
        except Exception as exc:
            outcome = exc
        box.append((outcome, time.monotonic() - started))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_LIMIT)
    if thread.is_alive():
        spawned.kill_all()
        raise AssertionError(f"{call!r} still waited after {HANG_LIMIT} s: it hangs")
    return box[0]


def _check_busy(outcome: object, elapsed: float, path: str) -> None:
    """A Busy that came after about busy_timeout (not at once, not never) and names the file."""
    assert isinstance(outcome, Busy), outcome
    assert 0.9 * BUSY_TIMEOUT <= elapsed < HANG_BOUND, elapsed
    assert path in str(outcome) and "busy_timeout" in str(outcome), str(outcome)


def _rows(db: Path) -> dict[tuple[str, str], tuple[str, int | None, int]]:
    """(queue, task_id) -> (state, token, attempts) for every task in the file."""
    conn = driver.dbapi.connect(str(db))
    try:
        rows = conn.execute(
            "SELECT queue, task_id, state, lease_id, attempts FROM sqlq_tasks"
        ).fetchall()
    finally:
        conn.close()
    return {(q, t): (state, token, attempts) for q, t, state, token, attempts in rows}


def _integrity(db: Path | str) -> list[str]:
    conn = driver.dbapi.connect(str(db))
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check").fetchall()]
    finally:
        conn.close()


class Child:
    """A frozen_worker.py process; its stdout is read line by line in a thread."""

    def __init__(self, args: list[str], stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr: IO[bytes] = stderr_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self._lines: stdqueue.SimpleQueue[str | None] = stdqueue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text("utf-8", errors="replace")

    def line(self, timeout: float = PATIENCE) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except stdqueue.Empty:
            raise AssertionError(f"child {self.pid} said nothing in {timeout} s") from None
        if line is None:
            self.process.wait(PATIENCE)
            raise AssertionError(
                f"child {self.pid} exited ({self.process.returncode}): {self.stderr()}"
            )
        return line

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def ask(self, *command: Any) -> dict[str, Any]:
        """One command of the serve mode; its answer."""
        self.send(json.dumps(command))
        answer: dict[str, Any] = json.loads(self.line())
        return answer

    def result(self, *command: Any) -> Any:
        answer = self.ask(*command)
        assert "error" not in answer, (command, answer)
        return answer["result"]

    def freeze(self) -> None:
        _freeze(self.pid)

    def thaw(self) -> None:
        _thaw(self.pid)

    def finish(self) -> int:
        """Tell a serve child to exit (others just end); its exit code, stderr checked."""
        if self.process.poll() is None and self.process.stdin is not None:
            with contextlib.suppress(BrokenPipeError):  # modes other than serve ignore it
                self.send(json.dumps(["exit"]))
        code = self.process.wait(PATIENCE)
        assert "Traceback" not in self.stderr(), self.stderr()
        return code

    def cleanup(self) -> None:
        if self.process.poll() is None:
            _thaw(self.pid)  # a stopped process would not die of SIGTERM, and is confusing
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        self._stderr.close()


class Spawner:
    """spawn(mode, db, *options) -> a running frozen_worker.py."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.children: list[Child] = []

    def __call__(self, *args: str) -> Child:
        child = Child(list(args), self.tmp_path / f"child{len(self.children)}.stderr")
        self.children.append(child)
        return child

    def kill_all(self) -> None:
        """SIGCONT and SIGKILL every child still running."""
        for child in self.children:
            child.cleanup()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawner]:
    """A Spawner; whatever it started is resumed and killed at the end."""
    spawned = Spawner(tmp_path)
    try:
        yield spawned
    finally:
        spawned.kill_all()


# --- 1. a worker frozen past its lease ----------------------------------------------------------


@pytest.mark.parametrize("meanwhile", ["completed", "reserved", "untouched"])
def test_a_frozen_workers_late_reports_are_refused(
    queue_url: str, spawn: Spawner, meanwhile: str
) -> None:
    """Worker A claims a task and is frozen past its lease.  Meanwhile worker B (another
    process) claims the task (attempt 2, a higher token) and completes it, or only holds
    it, or nobody touches the queue at all.  Resumed, A's complete / fail / extend /
    release with its old token are all refused, without an exception, and change
    nothing: B's lease or completion stands (B can still complete and retry its
    complete), and when nobody came, A's own late call expires its lease first and
    A can claim the task again as a new attempt."""
    with sqlq.Queue(queue_url, lease_seconds=SHORT_LEASE, max_attempts=5) as queue:
        assert queue.add("t", payload={"n": 1})
        a = spawn("serve", queue_url, "--lease", str(SHORT_LEASE))
        b = None if meanwhile == "untouched" else spawn("serve", queue_url, "--lease", "30")
        for child in (a, b):
            assert child is None or json.loads(child.line())["ready"] == child.pid

        first = a.result("claim")
        assert (first["task_id"], first["attempt"], first["payload"]) == ("t", 1, {"n": 1})
        a.freeze()
        _sleep_until(first["deadline"] + 0.05)

        second: dict[str, Any] = {}
        before = None
        if b is not None:
            second = b.result("claim")
            assert (second["task_id"], second["attempt"]) == ("t", 2)
            assert second["token"] > first["token"]
            if meanwhile == "completed":
                assert b.result("complete", "t", second["token"]) is True
            before = queue.info("t")

        a.thaw()
        late = {op: a.ask(op, "t", first["token"]) for op in ("complete", "fail", "extend")}
        late["release"] = a.ask("release", "t", first["token"])
        assert all("error" not in answer for answer in late.values()), late
        assert {op: answer["result"] for op, answer in late.items()} == {
            "complete": False,
            "fail": None,
            "extend": None,
            "release": False,
        }
        # And once more: a refused report is refused again, never turned into a success.
        assert a.result("complete", "t", first["token"]) is False

        info = queue.info("t")
        assert info is not None
        if meanwhile == "untouched":
            # Nobody else ran a call: A's own complete ran the expiry first.
            assert (info.state, info.attempts, info.token, info.last_error) == (
                "AVAILABLE",
                1,
                first["token"],
                "lease expired",
            )
            again = a.result("claim")
            assert (again["task_id"], again["attempt"]) == ("t", 2)
            assert again["token"] > first["token"]
            assert a.result("complete", "t", again["token"]) is True
            winner = again["token"]
        else:
            assert b is not None
            assert info == before  # not even updated_at moved
            if meanwhile == "reserved":
                assert (info.state, info.token, info.deadline) == (
                    "RESERVED",
                    second["token"],
                    second["deadline"],
                )
                assert b.result("complete", "t", second["token"]) is True
            assert b.result("complete", "t", second["token"]) is True  # retry-safe
            assert a.result("complete", "t", first["token"]) is False
            winner = second["token"]

        final = queue.info("t")
        assert final is not None
        assert (final.state, final.attempts, final.token, final.last_error) == (
            "COMPLETED",
            2,
            winner,
            "lease expired",
        )
        assert queue.counts()["COMPLETED"] == 1
        assert a.finish() == 0 and (b is None or b.finish() == 0)
    if kind(queue_url) == "sqlite":
        assert _integrity(sqlite_path(queue_url)) == ["ok"]


# --- 2. a process frozen inside a write transaction ---------------------------------------------


@pytest.mark.parametrize("via", ["engine", "call"])
def test_a_process_frozen_holding_the_write_lock_gives_busy_then_all_continues(
    tmp_path: Path, spawn: Spawner, via: str
) -> None:
    """A process is frozen inside a write transaction: its own one on ``queue.engine``
    (``via="engine"``: SQLite's write lock only), or in the middle of a sqlq call
    (``via="call"``: a ``fail`` stalled in its retry jitter, holding sqlq's write gate
    and SQLite's lock).  Meanwhile writes from this process and from another one
    raise Busy naming the database after about busy_timeout (0.5 s), never hang, and
    change nothing; status ends within the bound too; reads (counts, ready) and
    opening the queue still work; a caller with a long busy_timeout keeps waiting.
    After SIGCONT the frozen transaction commits, the waiting caller gets through at
    once, the refused writes succeed when tried again, and no work is lost."""
    db = tmp_path / "q.db"
    path = os.path.abspath(db)
    queue = sqlq.Queue(db, lease_seconds=30, max_attempts=3, busy_timeout=BUSY_TIMEOUT)
    patient = sqlq.Queue(db, lease_seconds=30, max_attempts=3, busy_timeout=30.0)
    held = sqlq.Queue(db, lease_seconds=30, max_attempts=3, queue="held")
    holder: Child | None = None
    try:
        assert queue.add("before")
        other = spawn("serve", str(db), "--busy-timeout", str(BUSY_TIMEOUT))
        holder = spawn("hold", str(db), "--via", via, "--queue", "held")
        assert json.loads(other.line())["ready"] == other.pid
        assert holder.line() == "inside"
        holder.freeze()

        other.send(json.dumps(["add", "other"]))  # waits in the other process meanwhile
        for call in (lambda: queue.add("probe"), queue.claim):
            outcome, elapsed = _timed(call, spawn)
            _check_busy(outcome, elapsed, path)
        # status (like info) takes the write lock too, to run due events first.
        outcome, elapsed = _timed(lambda: queue.status("before"), spawn)
        assert isinstance(outcome, Busy) or outcome == "AVAILABLE", outcome
        assert elapsed < HANG_BOUND
        answer = json.loads(other.line())
        assert answer.get("error") == "Busy", answer
        assert 0.9 * BUSY_TIMEOUT <= answer["elapsed"] < HANG_BOUND, answer
        assert path in answer["message"], answer

        # Readers do not need the write lock (WAL), and opening the queue only reads.
        counts, elapsed = _timed(queue.counts, spawn)
        assert isinstance(counts, dict) and counts["AVAILABLE"] == 1 and elapsed < HANG_BOUND
        ready, elapsed = _timed(queue.ready, spawn)
        assert ready is True and elapsed < HANG_BOUND
        opened, elapsed = _timed(
            lambda: sqlq.Queue(db, lease_seconds=30, max_attempts=3, busy_timeout=BUSY_TIMEOUT),
            spawn,
        )
        assert isinstance(opened, sqlq.Queue), opened
        assert elapsed < HANG_BOUND
        opened.close()

        # A transaction of the caller's own on queue.engine waits busy_timeout as well
        # (SQLite's busy handler), then fails: SQLAlchemy's error, not sqlq's Busy.
        def own_transaction() -> bool:
            with queue.engine.begin() as conn:
                return queue.add("own", conn=conn)

        outcome, elapsed = _timed(own_transaction, spawn)
        assert isinstance(outcome, Busy | sa.exc.OperationalError), outcome
        assert "locked" in str(outcome) or "busy" in str(outcome).lower(), outcome
        assert 0.9 * BUSY_TIMEOUT <= elapsed < HANG_BOUND, elapsed

        # A caller with a long busy_timeout just keeps waiting.
        waited: list[tuple[object, float]] = []

        def wait_patiently() -> None:
            started = time.monotonic()
            waited.append((patient.add("p"), time.monotonic() - started))

        waiter = threading.Thread(target=wait_patiently, daemon=True)
        waiter.start()
        time.sleep(0.2)
        assert waiter.is_alive() and not waited

        holder.send("go")  # read once the process runs again
        thawed = time.monotonic()
        holder.thaw()
        assert holder.line() == ("committed True" if via == "engine" else "committed AVAILABLE")
        waiter.join(HANG_BOUND)
        assert not waiter.is_alive(), "the patient caller did not get through after SIGCONT"
        assert waited and waited[0][0] is True, waited
        assert time.monotonic() - thawed < HANG_BOUND
        assert holder.finish() == 0

        # Everything continues; the Busy calls had changed nothing.
        assert queue.add("probe") is True
        assert other.result("add", "other") is True
        assert queue.add("own") is True
        lease = queue.claim()
        assert lease is not None and lease.task_id == "before"
        assert queue.complete("before", token=lease.token) is True
        info = held.info("held")
        assert info is not None and info.state == "AVAILABLE"
        expected = (0, None) if via == "engine" else (1, "boom")
        assert (info.attempts, info.last_error) == expected
        assert queue.counts() == {
            "WAITING": 0,
            "AVAILABLE": 4,  # probe, other, own, p
            "RESERVED": 0,
            "COMPLETED": 1,
            "DEAD": 0,
            "CANCELLED": 0,
        }
        assert other.finish() == 0
    finally:
        if holder is not None:
            holder.cleanup()  # first: a failed test may leave the patient call waiting for it
        for q in (queue, patient, held):
            q.close()
    assert _integrity(db) == ["ok"]


def test_closing_a_queue_after_busy_leaves_no_stray_gate_thread(
    tmp_path: Path, spawn: Spawner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that gets Busy from a process frozen in the middle of a sqlq call and then
    closes its queue (giving up, as a script would) leaves nothing behind: once the
    frozen process resumes and lets go of the write gate, the closed queue's gate
    thread ends quietly, without an exception."""
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    db = tmp_path / "q.db"
    sqlq.Queue(db, lease_seconds=30, max_attempts=3).close()  # creates the file
    holder = spawn("hold", str(db), "--via", "call", "--queue", "held")
    assert holder.line() == "inside"
    holder.freeze()
    before = set(threading.enumerate())
    queue = sqlq.Queue(db, lease_seconds=30, max_attempts=3, busy_timeout=BUSY_TIMEOUT)
    outcome, elapsed = _timed(lambda: queue.add("x"), spawn)
    _check_busy(outcome, elapsed, os.path.abspath(db))
    queue.close()
    gate_threads = [t for t in set(threading.enumerate()) - before if t.name == "sqlq-gate"]
    holder.send("go")
    holder.thaw()
    assert holder.line() == "committed AVAILABLE"
    assert holder.finish() == 0
    for thread in gate_threads:
        thread.join(5.0)
        assert not thread.is_alive()
    assert errors == []


SEED = 20240605
WANTED_HITS = 3  # freezes that caught the writer holding the lock
MOST_FREEZES = 14


def test_random_freezes_of_a_busy_writer_never_hang_and_lose_nothing(
    tmp_path: Path, spawn: Spawner
) -> None:
    """Process A hammers add / claim / extend / complete (queue "a", synchronous=full,
    so it holds the write lock most of the time) and is frozen at random moments
    (seeded).  During each freeze this process tries a write with busy_timeout 0.5:
    it succeeds (A was between transactions) or raises Busy naming the database
    within the bound; reads stay quick.  Process B hammers queue "b" with
    busy_timeout 0.5 all along, retrying each Busy: each of its calls ends within
    the bound too.  After SIGCONT all goes on: both finish their work, and in the
    end every acknowledged add exists, every acknowledged complete is COMPLETED
    under its token, no Busy call had written anything, and the file is intact."""
    db = tmp_path / "q.db"
    path = os.path.abspath(db)
    stop = tmp_path / "stop"
    logs = {name: tmp_path / f"hammer-{name}.log" for name in ("a", "b")}
    rng = random.Random(SEED)
    probes: list[str] = []
    hits, slow_reads = 0, []
    with sqlq.Queue(
        db, lease_seconds=30, max_attempts=3, busy_timeout=BUSY_TIMEOUT, queue="probe"
    ) as queue:
        a = spawn(
            "hammer",
            str(db),
            *("--queue", "a", "--log", str(logs["a"]), "--seed", "1", "--stop", str(stop)),
            *("--synchronous", "full"),  # an fsync per commit: mostly inside a transaction
        )
        b = spawn(
            "hammer",
            str(db),
            *("--queue", "b", "--log", str(logs["b"]), "--seed", "2", "--stop", str(stop)),
            *("--synchronous", "normal", "--pause", "0.002"),  # leaves the lock mostly to A
            *("--busy-timeout", str(BUSY_TIMEOUT)),
        )

        def started() -> bool:
            for hammer, log in ((a, logs["a"]), (b, logs["b"])):
                if hammer.process.poll() is not None:
                    raise AssertionError(f"hammer {hammer.pid} exited: {hammer.stderr()}")
                if not log.exists() or log.read_text().count("\nadded ") < 20:
                    return False
            return True

        _wait_for(started, PATIENCE, "the hammers")
        try:
            for k in range(MOST_FREEZES):
                if hits >= WANTED_HITS:
                    break
                time.sleep(rng.uniform(0.01, 0.15))
                probe = f"p{k}"
                a.freeze()
                try:
                    outcome, elapsed = _timed(functools.partial(queue.add, probe), spawn)
                    if outcome is True:
                        assert elapsed < HANG_BOUND, elapsed
                        probes.append(probe)
                        continue
                    _check_busy(outcome, elapsed, path)
                    hits += 1
                    counts, elapsed = _timed(queue.counts, spawn)
                    assert isinstance(counts, dict), counts
                    slow_reads.append(elapsed)
                    time.sleep(0.1)  # B's waits run out too
                finally:
                    a.thaw()
                # The Busy add changed nothing: tried again, it adds the task.
                outcome, elapsed = _timed(functools.partial(queue.add, probe), spawn)
                assert outcome is True and elapsed < HANG_BOUND, (outcome, elapsed)
                probes.append(probe)
        finally:
            stop.touch()
        assert a.finish() == 0 and b.finish() == 0
    assert hits >= 1, "no freeze caught the writer inside a transaction"
    assert max(slow_reads) < HANG_BOUND

    rows = _rows(db)
    assert _integrity(db) == ["ok"]
    report = []
    for name in ("a", "b"):
        lines = logs[name].read_text().splitlines()
        assert lines[0].startswith("start ") and lines[-1].startswith("exit "), lines[-3:]
        kinds = {line.partition(" ")[0] for line in lines[1:-1]}
        assert kinds <= {"added", "completed", "busy"}, kinds  # no phantom, refused, lost...
        adds = [line.split()[1] for line in lines if line.startswith("added ")]
        completes = {
            task: int(token)
            for _, task, token in (line.split() for line in lines if line.startswith("completed "))
        }
        busies = [line.split(" ", 3) for line in lines if line.startswith("busy ")]
        _, calls, slowest = lines[-1].split()
        # Every acknowledged add is there, once, and nothing else is.
        assert len(adds) == len(set(adds))
        assert {t for q, t in rows if q == name} == set(adds)
        # Every acknowledged complete is COMPLETED under its token; all were completed.
        assert set(completes) == set(adds)
        for task, token in completes.items():
            assert rows[name, task] == ("COMPLETED", token, 1), (task, rows[name, task])
        for _, op, took, message in busies:
            assert 0.9 * BUSY_TIMEOUT <= float(took) < HANG_BOUND, (op, took)
            assert path in message, message
        if name == "b":
            assert float(slowest) < HANG_BOUND, slowest  # every call of B, Busy or not
            assert busies, "B never waited for the frozen A"
        report.append(f"{name}: {len(adds)} tasks, {calls} calls, {len(busies)} busy")
    assert {t for q, t in rows if q == "probe"} == set(probes)
    print(f"\n{hits} of {k + 1} freezes caught A in a transaction; " + "; ".join(report))


def test_threads_behind_a_held_write_lock_each_wait_one_busy_timeout(
    tmp_path: Path, spawn: Spawner
) -> None:
    """Four threads share a Queue while another process holds the write lock: each
    call's waits (the queue's thread lock included) end in Busy one busy_timeout
    after it began, instead of each thread waiting out the timeouts of those
    queued before it (1, 2, 3 and 4 s)."""
    timeout = 1.0
    db = tmp_path / "q.db"
    queue = sqlq.Queue(db, lease_seconds=30, max_attempts=3, busy_timeout=timeout)
    holder = spawn("hold", str(db), "--via", "engine")
    assert holder.line() == "inside"
    start = threading.Barrier(4)
    outcomes: list[tuple[object, float]] = []

    def call(i: int) -> None:
        start.wait()
        began = time.monotonic()
        try:
            outcome: object = queue.add(f"t{i}")
        except Exception as exc:
            outcome = exc
        outcomes.append((outcome, time.monotonic() - began))

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HANG_LIMIT)
    holder.send("go")
    assert holder.line() == "committed True"
    assert len(outcomes) == 4
    for outcome, elapsed in outcomes:
        assert isinstance(outcome, Busy), outcome
        assert os.path.abspath(db) in str(outcome) and "busy_timeout" in str(outcome)
        # About one timeout each; a thread that waited for another's whole timeout
        # first would take two or more (generous, as a loaded machine is slow).
        assert elapsed < 1.8 * timeout, sorted(e for _, e in outcomes)
    assert queue.add("after") is True  # the lock is free again: calls go through
    queue.close()


def test_a_process_frozen_holding_the_migrate_lock_gives_busy(
    tmp_path: Path, spawn: Spawner
) -> None:
    """Opening a new database migrates it under <db>.migrate-lock; a process frozen
    while holding that lock makes the opener fail with Busy naming the lock file
    after busy_timeout, never hang."""
    db = tmp_path / "new.db"
    holder = spawn("migrating", str(db))
    assert holder.line() == "locked"
    holder.freeze()

    def open_it() -> object:
        return sqlq.Queue(db, lease_seconds=30, max_attempts=3, busy_timeout=BUSY_TIMEOUT)

    outcome, elapsed = _timed(open_it, spawn)
    assert isinstance(outcome, Busy), outcome
    assert f"{os.path.realpath(db)}.migrate-lock" in str(outcome), str(outcome)
    assert 0.9 * BUSY_TIMEOUT <= elapsed < HANG_BOUND, elapsed
    holder.thaw()
    holder.send("go")
    assert holder.finish() == 0
    with sqlq.Queue(db, lease_seconds=30, max_attempts=3) as queue:  # free again: it migrates
        assert queue.add("t") is True


# --- 3. a `sqlq worker` process frozen mid-task -------------------------------------------------


def test_a_frozen_sqlq_worker_has_its_task_retried_and_its_result_refused(tmp_path: Path) -> None:
    """Two ``sqlq worker`` processes (lease 1 s).  The one that takes the task is frozen
    in the middle of its handler; its heartbeats stop, the lease runs out and the
    other worker runs the task and completes it.  Resumed, the frozen worker's
    handler returns, its completion is refused (counted as lost, logged, no crash),
    the queue's record of the task does not change, and both workers stop cleanly:
    the handler ran twice (at least once delivery), the task completed once."""
    db = tmp_path / "q.db"
    log, marker, go = tmp_path / "handled.log", tmp_path / "marker", tmp_path / "go"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "sqlq", "worker", str(db), "frozen_worker:handle"]
    command += ["--lease", str(LEASE), "--grace", "5", "--synchronous", "normal"]
    stderr_paths = [tmp_path / f"worker{i}.stderr" for i in range(2)]
    stderrs = [p.open("wb") for p in stderr_paths]
    processes: list[subprocess.Popen[bytes]] = []
    queue = sqlq.Queue(db, lease_seconds=LEASE, max_attempts=5)  # creates the file
    quick = sqlq.Queue(db, lease_seconds=LEASE, max_attempts=5, busy_timeout=BUSY_TIMEOUT)
    try:
        for stderr in stderrs:
            processes.append(
                subprocess.Popen(
                    command, stdout=subprocess.DEVNULL, stderr=stderr, env=env, cwd=tmp_path
                )
            )

        def started() -> bool:
            for process, path in zip(processes, stderr_paths, strict=True):
                if process.poll() is not None:
                    raise AssertionError(f"worker {process.pid} exited: {path.read_text()}")
            return all(b"worker started" in p.read_bytes() for p in stderr_paths)

        _wait_for(started, PATIENCE, "the workers to start")
        payload = {"log": str(log), "marker": str(marker), "go": str(go), "wait": PATIENCE}
        assert queue.add("job", payload=payload)
        _wait_for(
            lambda: marker.exists() and marker.read_text().endswith("\n"), PATIENCE, "the handler"
        )
        victim_pid = int(marker.read_text())
        (victim,) = (p for p in processes if p.pid == victim_pid)
        (survivor,) = (p for p in processes if p is not victim)
        victim_stderr = stderr_paths[processes.index(victim)]
        for _ in range(5):
            _freeze(victim.pid)
            try:
                quick.status("job")
                break
            except Busy:  # frozen inside a heartbeat's transaction: try another moment
                _thaw(victim.pid)
                time.sleep(0.05)
        else:
            raise AssertionError("the worker was always frozen holding the write lock")
        _wait_for(lambda: queue.status("job") == "COMPLETED", PATIENCE, "the other worker")
        done = queue.info("job")
        assert done is not None
        assert (done.attempts, done.last_error) == (2, "lease expired")

        go.touch()
        _thaw(victim.pid)
        _wait_for(lambda: b"refused=completion" in victim_stderr.read_bytes(), PATIENCE, "refusal")
        assert queue.info("job") == done
        for process in processes:
            process.send_signal(signal.SIGTERM)
        assert [p.wait(PATIENCE) for p in processes] == [0, 0]
    finally:
        for process in processes:
            if process.poll() is None:
                _thaw(process.pid)
                process.kill()
                process.wait()
        for stderr in stderrs:
            stderr.close()
        queue.close()
        quick.close()

    texts = {p.pid: path.read_text() for p, path in zip(processes, stderr_paths, strict=True)}
    for text in texts.values():
        assert "Traceback" not in text and "ERROR" not in text, text
    victim_text, survivor_text = texts[victim.pid], texts[survivor.pid]
    assert (
        "worker stopped: 1 claimed, 0 completed, 0 failed, 1 lost, 0 released, 0 timed out"
        in victim_text
    ), victim_text
    assert (
        "worker stopped: 1 claimed, 1 completed, 0 failed, 0 lost, 0 released, 0 timed out"
        in survivor_text
    ), survivor_text
    refused = re.search(
        r"task lost task_id=job attempt=1 token=(\d+) .*refused=completion", victim_text
    )
    assert refused is not None and int(refused.group(1)) < (done.token or 0), victim_text
    assert log.read_text().splitlines() == [
        f"start {victim.pid}",
        f"start {survivor.pid}",
        f"done {survivor.pid}",
        f"done {victim.pid}",
    ]
