"""Faults on PostgreSQL, with real processes and a real server: the server restarted
(immediate) in the middle of a drain, a session terminated inside a call, timeouts
and an isolation level set by the user, lock waits and deadlocks, and workers killed
with SIGKILL in the middle of a drain.

The processes are tests/pg_worker.py (see its docstring): ``drain`` runs a
sqlq.Worker until the queue is drained, recording each run of its handler with the
lease's token; ``calls`` makes the queue calls a test asks for, in a process and a
server session of its own.  Tests that restart the server or change its settings get
a throwaway cluster of their own (``postgres.restartable()``); the others use the
session's server, each on a queue of its own.
"""

from __future__ import annotations

import json
import random
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import databases
import postgres
import psycopg
import pytest
import sqlalchemy
from group_rows import mismatches
from needs import need

import sqlq
from sqlq import errors
from sqlq.postgresql.queries import Q

pytestmark = [pytest.mark.processes, pytest.mark.faults]

WORKER = Path(__file__).with_name("pg_worker.py")
#: Longest wait for anything the tests wait for (a drain, a process's answer).
DEADLINE = 60.0
#: Leases of the drains: short, so that a killed worker's tasks come back soon.
LEASE = 1.0

T = TypeVar("T")

ACKNOWLEDGED = re.compile(r"task completed task_id=(\S+) .*\btoken=(\d+)")


@pytest.fixture
def cluster() -> Iterator[postgres.Cluster]:
    """A server of this test's own, which it may restart or reconfigure."""
    with postgres.restartable() as own:
        yield own


@pytest.fixture
def queue_name() -> str:
    """A queue of this test's own on the session's server."""
    return f"faults-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def _killable() -> None:
    need(hasattr(signal, "SIGKILL"), "needs SIGKILL")


# --- helpers ---------------------------------------------------------------------------


def wait_for(condition: Callable[[], T], what: str) -> T:
    """Poll ``condition`` until it gives a true value, and return that; fail after
    DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while not (value := condition()):
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)
    return value


def connect(url: str) -> psycopg.Connection[Any]:
    """A plain psycopg session on the server of the SQLAlchemy URL ``url``."""
    parsed = sqlalchemy.make_url(url)
    return psycopg.connect(
        host=parsed.query.get("host") or parsed.host,
        port=parsed.port,
        user=parsed.username,
        password=parsed.password,
        dbname=parsed.database,
        options=parsed.query.get("options"),  # a fresh schema's search_path
        autocommit=True,
    )


def with_query(url: str, **query: str) -> str:
    return sqlalchemy.make_url(url).update_query_dict(query).render_as_string(hide_password=False)


@dataclass
class Drainer:
    """A ``pg_worker.py drain`` process."""

    process: subprocess.Popen[bytes]
    stderr_path: Path
    stderr: IO[bytes]
    killed: bool = False

    def log(self) -> str:
        return self.stderr_path.read_text("utf-8", errors="replace")


def start_drainer(url: str, tmp: Path, number: int, *options: str) -> Drainer:
    stderr_path = tmp / f"drainer{number}.stderr"
    stderr = stderr_path.open("wb")
    command = [sys.executable, str(WORKER), "drain", url, str(tmp / "runs")]
    process = subprocess.Popen(
        [*command, "--lease", str(LEASE), *options], stdout=subprocess.DEVNULL, stderr=stderr
    )
    return Drainer(process, stderr_path, stderr)


def runs(tmp: Path) -> list[tuple[str, int, int]]:
    """(task, token, pid) of every handler run so far, in order."""
    path = tmp / "runs"
    if not path.exists():
        return []
    found = []
    for line in path.read_text("utf-8").splitlines():
        _, task, token, pid = line.split(" ")
        found.append((task, int(token), int(pid)))
    return found


def wait_for_drainers(drainers: list[Drainer]) -> None:
    deadline = time.monotonic() + DEADLINE
    try:
        for drainer in drainers:
            drainer.process.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        for drainer in drainers:
            if drainer.process.poll() is None:
                drainer.process.kill()
                drainer.process.wait()
            drainer.stderr.close()


def check_drain(queue: sqlq.Queue, names: list[str], drainers: list[Drainer], tmp: Path) -> None:
    """Every task COMPLETED, each under a lease its handler ran with; every completion a
    worker saw acknowledged is the one the database holds (none lost, none under a second
    token); every worker not killed drained the queue and exited 0."""
    for drainer in drainers:
        log = drainer.log()
        assert "Traceback" not in log, log
        if drainer.killed:
            assert drainer.process.returncode == -signal.SIGKILL
        else:
            assert drainer.process.returncode == 0, log
            assert "nothing left RESERVED or WAITING" in log, log
    assert queue.counts() == {
        "WAITING": 0,
        "AVAILABLE": 0,
        "RESERVED": 0,
        "COMPLETED": len(names),
        "DEAD": 0,
        "CANCELLED": 0,
    }
    final = {info.task_id: info.token for info in queue.tasks(limit=len(names))}
    assert sorted(final) == sorted(names)
    ran = {(task, token) for task, token, _ in runs(tmp)}
    assert set(final.items()) <= ran, "a task completed under a lease no handler ran with"
    acknowledged = {
        (task, int(token)) for d in drainers for task, token in ACKNOWLEDGED.findall(d.log())
    }
    twice = sorted((task, token, final[task]) for task, token in acknowledged - set(final.items()))
    assert not twice, f"acknowledged completions the database does not hold: {twice}"


class Calls:
    """A ``pg_worker.py calls`` process: queue calls in a session of its own, which the
    test finds in pg_stat_activity by its application_name."""

    def __init__(self, url: str, queue: str, lease: float) -> None:
        self.application = f"sqlq-calls-{uuid.uuid4().hex[:12]}"
        command = [
            sys.executable,
            str(WORKER),
            "calls",
            with_query(url, application_name=self.application),
        ]
        self.process = subprocess.Popen(
            [*command, queue, "--lease", str(lease)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def send(self, call: str, *args: Any, **kwargs: Any) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"call": call, "args": args, "kwargs": kwargs}) + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], DEADLINE)
        assert ready, "the calls process did not answer"
        line = self.process.stdout.readline()
        assert line, f"the calls process ended (exit {self.process.wait()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, call: str, *args: Any, **kwargs: Any) -> Any:
        self.send(call, *args, **kwargs)
        answer = self.answer()
        assert "value" in answer, answer
        return answer["value"]

    def session(self, admin: psycopg.Connection[Any], *, waiting: bool = False) -> int | None:
        """The pid of this process's session (``waiting``: only while it waits for a
        lock), or None."""
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
            "AND (NOT %s OR wait_event_type = 'Lock')",
            (self.application, waiting),
        ).fetchone()
        return None if row is None else int(row[0])

    def blocked(self, admin: psycopg.Connection[Any]) -> int:
        """The pid of this process's session, once it waits for a lock."""
        return wait_for(lambda: self.session(admin, waiting=True), "the call to wait for a lock")

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=DEADLINE) == 0


@pytest.fixture
def calls() -> Iterator[Callable[..., Calls]]:
    """calls(url, queue, lease) -> a Calls process, killed at the end if still running."""
    started: list[Calls] = []

    def start(url: str, queue: str, lease: float = LEASE) -> Calls:
        started.append(Calls(url, queue, lease))
        return started[-1]

    yield start
    for process in started:
        if process.process.poll() is None:
            process.process.kill()
            process.process.wait()


def lock_row(session: psycopg.Connection[Any], queue: str, task_id: str) -> None:
    """In ``session``'s open transaction: lock the task's row (as an application that
    reads sqlq's table FOR UPDATE would)."""
    session.execute(
        "SELECT 1 FROM sqlq_tasks WHERE queue = %s AND task_id = %s FOR UPDATE", (queue, task_id)
    )


def claim_in_flight(session: psycopg.Connection[Any], queue: str, group: str, task_id: str) -> None:
    """In a transaction ``session`` begins and leaves open: a claim of the group's task,
    as claim_grouped makes it (the group's row locked, the task RESERVED)."""
    session.execute("BEGIN")
    session.execute(
        "SELECT 1 FROM sqlq_groups WHERE queue = %s AND group_key = %s FOR UPDATE", (queue, group)
    )
    session.execute(
        "UPDATE sqlq_tasks SET state = 'RESERVED', attempts = attempts + 1, "
        "lease_id = nextval('sqlq_counter'), "
        "deadline = extract(epoch FROM clock_timestamp()) + 30 "
        "WHERE queue = %s AND task_id = %s",
        (queue, task_id),
    )


# --- the server restarted ------------------------------------------------------------------


def test_server_restarted_in_the_middle_of_a_drain(
    cluster: postgres.Cluster, tmp_path: Path
) -> None:
    """Three worker processes drain a queue; the server restarts (immediate) twice under
    them.  They reconnect by themselves and finish; nothing acknowledged is lost and no
    task completes twice."""
    names = [f"task-{i:04d}" for i in range(1200)]
    with sqlq.Queue(cluster.url, lease_seconds=LEASE, max_attempts=1000) as queue:
        queue.add_many(names)
        drainers = [start_drainer(cluster.url, tmp_path, n) for n in range(3)]
        pids = {d.process.pid for d in drainers}
        try:
            for ran in (200, 600):
                # Every worker has opened its queue (and run tasks): it is draining.
                def draining(ran: int = ran) -> bool:
                    found = runs(tmp_path)
                    return len(found) >= ran and {pid for _, _, pid in found} == pids

                wait_for(draining, f"{ran} tasks run by every worker")
                cluster.restart()
            after = len(runs(tmp_path))
            assert after < len(names), "the drain ended before the last restart"
        finally:
            wait_for_drainers(drainers)
        check_drain(queue, names, drainers, tmp_path)
    assert any("Unavailable" in d.log() for d in drainers), "no worker saw the server go"
    ran_after = Counter(pid for _, _, pid in runs(tmp_path)[after:])
    for drainer in drainers:  # each took tasks from the restarted server
        assert ran_after[drainer.process.pid] >= 5, ran_after


# --- workers killed ------------------------------------------------------------------------


def test_workers_killed_in_the_middle_of_a_drain(
    postgres_url: str, queue_name: str, tmp_path: Path
) -> None:
    """Worker processes drain a queue while one after another is killed with SIGKILL
    (and replaced): nothing is lost, nothing completed twice, and the tasks the killed
    workers held come back when their leases run out and are completed by others."""
    names = [f"task-{i:04d}" for i in range(800)]
    rng = random.Random(1234)
    options = ("--queue", queue_name)
    with sqlq.Queue(postgres_url, lease_seconds=LEASE, max_attempts=1000, queue=queue_name) as q:
        q.add_many(names)
        drainers = [start_drainer(postgres_url, tmp_path, n, *options) for n in range(3)]
        try:
            for kill in range(1, 5):
                wait_for(lambda kill=kill: len(runs(tmp_path)) >= 120 * kill, "tasks run")
                working = {pid for _, _, pid in runs(tmp_path)}
                victim = rng.choice(
                    [d for d in drainers if not d.killed and d.process.pid in working]
                )
                victim.process.send_signal(signal.SIGKILL)
                victim.process.wait()
                victim.killed = True
                drainers.append(start_drainer(postgres_url, tmp_path, len(drainers), *options))
            assert len(runs(tmp_path)) < len(names), "the drain ended before the last kill"
        finally:
            wait_for_drainers(drainers)
        check_drain(q, names, drainers, tmp_path)
        final = {info.task_id: info.token for info in q.tasks(limit=len(names))}
    killed = {d.process.pid for d in drainers if d.killed}
    came_back = {
        task: token for task, token, pid in runs(tmp_path) if pid in killed and final[task] != token
    }
    assert came_back, "no worker was killed while it held a task"
    assert all(final[task] > token for task, token in came_back.items())


# --- a session terminated, locks held ------------------------------------------------------


def test_session_terminated_inside_a_call(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """A worker's session is terminated (pg_terminate_backend) while its call waits for
    a row lock, after it completed a task in the same transaction: the call raises
    Unavailable, nothing of it is applied, the leases run out and another worker takes
    the tasks; the worker's process goes on, on a new connection."""
    victim = calls(postgres_url, queue_name)
    with (
        sqlq.Queue(postgres_url, lease_seconds=LEASE, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        queue.add_many(["a", "b"])
        (_, token_a), (_, token_b) = victim.call("claim_many", 2)
        holder.execute("BEGIN")
        lock_row(holder, queue_name, "b")
        victim.send(
            "settle_and_claim", 0, completed=[["a", token_a]], failed=[["b", token_b, "boom"]]
        )
        admin.execute("SELECT pg_terminate_backend(%s)", (victim.blocked(admin),))
        answer = victim.answer()
        assert (answer["error"], answer["cause"], answer["sqlstate"]) == (
            "Unavailable",
            "AdminShutdown",
            "57P01",
        )
        assert "lost the connection to the server" in answer["message"]
        holder.execute("ROLLBACK")
        for task_id, token in (("a", token_a), ("b", token_b)):
            info = queue.info(task_id)
            assert info is not None
            assert (info.state, info.token, info.attempts) == ("RESERVED", token, 1)

        taken: dict[str, int] = {}

        def take() -> bool:
            lease = queue.claim()
            if lease is not None:
                taken[lease.task_id] = lease.token
            return len(taken) == 2

        wait_for(take, "the leases to run out")
        assert taken["a"] > token_a and taken["b"] > token_b
        # The victim's process goes on: its late completion is refused, its next calls work.
        assert victim.call("complete", "a", token=token_a) is False
        assert victim.call("add", "c") is True
        assert victim.call("claim")[0] == "c"
        victim.close()


@pytest.mark.parametrize("timeout", ["busy_timeout", "statement_timeout"])
def test_a_lock_held_too_long_is_busy(postgres_url: str, queue_name: str, timeout: str) -> None:
    """A row locked by another session longer than the queue's busy_timeout (lock_timeout
    on the server), or than a statement_timeout the user set: Busy, with psycopg's error as
    its cause; nothing changed, and the same call works once the lock is gone."""
    url, busy_timeout = postgres_url, 0.2
    if timeout == "statement_timeout":
        url, busy_timeout = with_query(postgres_url, options="-c statement_timeout=200"), 30.0
    with (
        sqlq.Queue(
            url, lease_seconds=30, max_attempts=3, queue=queue_name, busy_timeout=busy_timeout
        ) as queue,
        connect(postgres_url) as holder,
    ):
        queue.add("a")
        lease = queue.claim()
        assert lease is not None
        holder.execute("BEGIN")
        lock_row(holder, queue_name, "a")
        with pytest.raises(errors.Busy) as caught:
            queue.fail("a", token=lease.token, error="boom")
        expected = {
            "busy_timeout": psycopg.errors.LockNotAvailable,
            "statement_timeout": psycopg.errors.QueryCanceled,
        }[timeout]
        assert isinstance(caught.value.__cause__, expected)
        holder.execute("ROLLBACK")
        info = queue.info("a")
        assert info is not None and (info.state, info.token) == ("RESERVED", lease.token)
        assert queue.fail("a", token=lease.token, error="boom") == "AVAILABLE"


def test_a_deadlock_is_busy(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """A worker's call deadlocks with another session (it completed one task and waits
    for the row of the next, which that session holds while it waits for the first):
    the server picks the call as the victim, which raises Busy with psycopg's
    DeadlockDetected as its cause; nothing of it is applied, and tried again it works."""
    victim = calls(postgres_url, queue_name, lease=30.0)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        need(
            admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
            == (True,),
            "sets deadlock_timeout, which takes a superuser",
        )
        queue.add_many(["a", "b"])
        (_, token_a), (_, token_b) = victim.call("claim_many", 2)
        # The victim's session finds the deadlock (after the server's deadlock_timeout),
        # long before this one would.
        holder.execute("SET deadlock_timeout = '60s'")
        holder.execute("BEGIN")
        lock_row(holder, queue_name, "b")
        settle = {"completed": [["a", token_a]], "failed": [["b", token_b, "boom"]]}
        victim.send("settle_and_claim", 0, **settle)
        victim.blocked(admin)
        lock_row(holder, queue_name, "a")  # waits until the victim's transaction is undone
        answer = victim.answer()
        assert (answer["error"], answer["cause"], answer["sqlstate"]) == (
            "Busy",
            "DeadlockDetected",
            "40P01",
        )
        assert "conflicted with another transaction" in answer["message"]
        holder.execute("ROLLBACK")
        for task_id, token in (("a", token_a), ("b", token_b)):
            info = queue.info(task_id)
            assert info is not None and (info.state, info.token) == ("RESERVED", token)
        assert victim.call("settle_and_claim", 0, **settle) == [[True], ["AVAILABLE"], []]
        victim.close()


#: What a settle_and_claim of one completion and one failure (retried) answers.
SETTLED = {"value": [[True], ["AVAILABLE"], []]}


def answer_or_wait(process: Calls, admin: psycopg.Connection[Any]) -> dict[str, Any] | str:
    """The process's answer to the call it was sent, or, once its session waits for a
    lock instead, what kind of lock ("advisory": the queue's turn; "transactionid" or
    "tuple": a row another transaction holds)."""
    assert process.process.stdout is not None

    def answered_or_waiting() -> dict[str, Any] | str | None:
        ready, _, _ = select.select([process.process.stdout], [], [], 0.01)
        if ready:
            return process.answer()
        row = admin.execute(
            "SELECT l.locktype FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid) "
            "WHERE a.application_name = %s AND NOT l.granted",
            (process.application,),
        ).fetchone()
        return None if row is None else str(row[0])

    return wait_for(answered_or_waiting, "an answer or a wait")


@contextmanager
def leases_in_two_groups(
    url: str, queue: str, in_g: list[str], in_h: list[str], at: int | None = None
) -> Iterator[tuple[sqlq.Queue, psycopg.Connection[Any], psycopg.Connection[Any], dict[str, int]]]:
    """A queue whose tasks ``in_g`` (group G) and ``in_h`` (group H) are all leased
    (30 s, at time ``at``, else now), an admin session and a holder session: (queue,
    admin, holder, the lease tokens)."""
    with (
        sqlq.Queue(url, lease_seconds=30, max_attempts=3, queue=queue) as q,
        connect(url) as admin,
        connect(url) as holder,
    ):
        q.add_many(in_g, at, group="G")
        q.add_many(in_h, at, group="H")
        token = {lease.task_id: lease.token for lease in q.claim_many(len(in_g) + len(in_h), at)}
        yield q, admin, holder, token


def settle(process: Calls, completed: str, failed: str, token: dict[str, int], **kw: Any) -> None:
    """Send a settle_and_claim that completes the lease of ``completed``, then fails the
    lease of ``failed`` (to be retried), and claims nothing."""
    process.send(
        "settle_and_claim",
        0,
        completed=[[completed, token[completed]]],
        failed=[[failed, token[failed], "boom"]],
        **kw,
    )


def test_settles_over_two_groups_in_opposite_orders_neither_wait_nor_deadlock(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """Two workers each settle a lease of group G and one of group H in one call, in
    opposite orders: the first completes its task of H, then fails its task of G, whose
    row another session holds for a moment; the second completes its task of G, then
    fails its task of H.  Counted row by row, each would hold one group's row and wait
    for the other's: a deadlock, Busy (40P01) for one of them.  Counted at the end, in
    group-key order (migration 11), the second waits for nothing (with the queue's turn,
    it waited for the first call to end), and both settle."""
    first = calls(postgres_url, queue_name, lease=30.0)
    second = calls(postgres_url, queue_name, lease=30.0)
    with leases_in_two_groups(postgres_url, queue_name, ["g1", "g2"], ["h1", "h2"]) as (
        queue,
        admin,
        holder,
        token,
    ):
        holder.execute("BEGIN")
        lock_row(holder, queue_name, "g2")
        settle(first, "h1", "g2", token)
        first.blocked(admin)  # on g2's row
        settle(second, "g1", "h2", token)
        waited = answer_or_wait(second, admin)
        holder.execute("ROLLBACK")
        answers = (first.answer(), waited if isinstance(waited, dict) else second.answer())
        assert answers == (SETTLED, SETTLED)
        assert waited == SETTLED, f"the second call waited for a lock ({waited})"
        assert mismatches(admin, queue_name) == []
        assert queue.groups() == {"G": sqlq.GroupUse(0, 1), "H": sqlq.GroupUse(0, 1)}
        first.close()
        second.close()


def test_expiries_over_two_groups_beside_a_settle_neither_wait_nor_deadlock(
    postgres_url: str, calls: Callable[..., Calls]
) -> None:
    """A call applies the expiries of two leases, h2's (group H) then g2's (group G: the
    order their deadlines came), while a worker's settle has completed g1 (group G) and
    waits for h1's row (group H), which another session holds for a moment.  Counted row
    by row, the expiries would hold H's row and wait for G's, the settle hold G's and
    wait for H's: a deadlock.  In the lock order the call applying them (an add) waits
    for nothing (with the queue's turn, it waited for the settle to end).  Times are
    passed in (a schema of its own: its clock moves for no other test)."""
    with databases.fresh_schema(postgres_url) as url:
        worker = calls(url, "q", lease=30.0)
        adder = calls(url, "q", lease=30.0)
        with leases_in_two_groups(url, "q", ["g1", "g2"], ["h1", "h2"], at=1000) as (
            queue,
            admin,
            holder,
            token,
        ):
            for task_id, seconds in (("g1", 1000), ("h1", 1000), ("h2", 10), ("g2", 20)):
                assert queue.extend(task_id, token[task_id], 1000, seconds=seconds)
            holder.execute("BEGIN")
            lock_row(holder, "q", "h1")
            settle(worker, "g1", "h1", token, now=1001)
            worker.blocked(admin)  # on h1's row
            adder.send("add", "u", 1025)  # h2 ran out at 1010, g2 at 1020
            waited = answer_or_wait(adder, admin)
            holder.execute("ROLLBACK")
            answers = (worker.answer(), waited if isinstance(waited, dict) else adder.answer())
            assert answers == (SETTLED, {"value": True})
            assert waited == {"value": True}, f"the add waited for a lock ({waited})"
            assert mismatches(admin, "q") == []
            assert queue.groups(1025) == {"G": sqlq.GroupUse(0, 1), "H": sqlq.GroupUse(0, 2)}
            worker.close()
            adder.close()


def test_a_redrive_over_two_groups_beside_a_settle_neither_waits_nor_deadlocks(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """A redrive of h3 (group H) then g3 (group G) while a worker's settle has completed
    g1 (group G) and waits for h1's row (group H), which another session holds for a
    moment.  Counted row by row: a deadlock.  In the lock order the redrive waits for
    nothing (with the queue's turn, it waited for the settle to end)."""
    worker = calls(postgres_url, queue_name, lease=30.0)
    redriver = calls(postgres_url, queue_name, lease=30.0)
    with leases_in_two_groups(postgres_url, queue_name, ["g1", "g3"], ["h1", "h3"]) as (
        queue,
        admin,
        holder,
        token,
    ):
        for task_id in ("h3", "g3"):
            assert queue.fail(task_id, token=token[task_id], retry=False) == "DEAD"
        holder.execute("BEGIN")
        lock_row(holder, queue_name, "h1")
        settle(worker, "g1", "h1", token)
        worker.blocked(admin)  # on h1's row
        redriver.send("redrive", task_ids=["h3", "g3"])
        waited = answer_or_wait(redriver, admin)
        holder.execute("ROLLBACK")
        answers = (worker.answer(), waited if isinstance(waited, dict) else redriver.answer())
        assert answers == (SETTLED, {"value": 2})
        assert waited == {"value": 2}, f"the redrive waited for a lock ({waited})"
        assert mismatches(admin, queue_name) == []
        assert queue.groups() == {"G": sqlq.GroupUse(0, 1), "H": sqlq.GroupUse(0, 2)}
        worker.close()
        redriver.close()


def test_a_cancel_beside_a_claim_of_its_groups_next_task_leaves_the_front_right(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """A claim of group G holds G's row and reserves b; meanwhile a cancel of a, G's
    front, waits for G's row.  Had the cancel read G's front before the claim committed
    (b), it would write b as the front once it got the row, and every later claim would
    find G's front RESERVED and nothing to take, h1 of group H included.  The trigger
    locks the row before it reads the front (PostgreSQL migration 0010)."""
    canceller = calls(postgres_url, queue_name, lease=30.0)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        queue.add_many(["a", "b"], group="G")
        queue.add("h1", group="H")
        claim_in_flight(holder, queue_name, "G", "b")
        canceller.send("cancel", "a")
        canceller.blocked(admin)  # on G's row
        holder.execute("COMMIT")
        assert canceller.answer() == {"value": "CANCELLED"}
        lease = queue.claim()
        assert lease is not None and lease.task_id == "h1"
        assert queue.groups() == {"G": sqlq.GroupUse(1, 1), "H": sqlq.GroupUse(1, 1)}
        queue.add("c", group="G")
        assert [lease.task_id for lease in queue.claim_many(2)] == ["c"]
        canceller.close()


@pytest.mark.parametrize("other", ["cancel", "release"])
def test_two_moves_in_a_group_beside_a_claim_of_it_leave_its_front_right(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls], other: str
) -> None:
    """A claim of group G holds G's row and reserves b; meanwhile a cancel of c, and a
    cancel of d or a release of a's lease, wait to count their moves.  Each counts its
    move once it holds G's row (lock_groups, then the trigger's own lock before it
    reads G's front), so the last to count reads the front after every other move of
    G committed.  Had they read G's front before the claim committed (b), G's row would
    point at a task no longer AVAILABLE, and claims would find nothing though h1 of
    group H waits."""
    first = calls(postgres_url, queue_name, lease=30.0)
    second = calls(postgres_url, queue_name, lease=30.0)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        queue.add("a", group="G")
        lease = queue.claim()
        assert lease is not None and lease.task_id == "a"
        queue.add_many(["b", "c", "d"], group="G")
        queue.add("h1", group="H")
        claim_in_flight(holder, queue_name, "G", "b")
        first.send("cancel", "c")
        first.blocked(admin)  # on G's row
        if other == "cancel":
            second.send("cancel", "d")
        else:
            second.send("release", "a", lease.token)
        second.blocked(admin)
        holder.execute("COMMIT")
        assert first.answer() == {"value": "CANCELLED"}
        assert second.answer() == {"value": "CANCELLED" if other == "cancel" else True}
        assert mismatches(admin, queue_name) == []
        taken = [lease.task_id for lease in queue.claim_many(3)]
        assert taken == (["h1"] if other == "cancel" else ["d", "h1", "a"])
        first.close()
        second.close()


def test_a_limit_set_while_an_add_makes_the_group_holds_it(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """An add in the caller's transaction makes group N's row (its trigger ran at the
    end of the call) and has not committed; a set_limit of N meanwhile cannot see the
    row.  It waits for the add (the schema's limits lock, shared by the add's call and
    by the trigger that made the row, exclusive in set_limit), then limits N: two
    claims take one task.
    Without the wait N kept no limit, and two claims ran at once under a limit of 1."""
    setter = calls(postgres_url, queue_name)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
    ):
        with queue.engine.begin() as conn:
            assert queue.add("n1", group="N", conn=conn)
            setter.send("set_limit", "N", concurrency=1)
            waited = answer_or_wait(setter, admin)
        answer = waited if isinstance(waited, dict) else setter.answer()
        assert answer == {"value": None}
        assert waited == "advisory", "the set_limit did not wait for the add"
        queue.add("n2", group="N")
        assert [lease.task_id for lease in queue.claim_many(2)] == ["n1"]
        assert mismatches(admin, queue_name) == []
        setter.close()


#: The kinds of lock a call waits for when it waits for a row (see answer_or_wait).
ROW = ("transactionid", "tuple")


def test_calls_in_the_callers_transaction_beside_a_set_limit_wait_in_the_lock_order(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """A caller's transaction completes g1 (group G: it holds G's row), then adds to G
    and makes group M, in key order; a set_limit of the default and an add making
    group N come between.  The caller's first call took the schema's limits lock
    shared, so the set_limit waits for it before any group row, and the add queues
    behind the set_limit; the caller's later calls take the lock again at once.
    (With the limits lock taken only where a group's row is made, the set_limit held
    it and waited for G's row while the caller, making M, waited for the lock: a
    deadlock, Busy for one of them.)  Once the caller commits, the set_limit limits
    every group, N included (made after it: it read the limits)."""
    setter = calls(postgres_url, queue_name)
    adder = calls(postgres_url, queue_name)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
    ):
        queue.add_many(["g1", "g2"], group="G")
        lease = queue.claim()
        assert lease is not None and lease.task_id == "g1"
        with queue.engine.begin() as conn:
            assert queue.complete("g1", token=lease.token, conn=conn)
            setter.send("set_limit", None, concurrency=1)
            set_limit_waited = answer_or_wait(setter, admin)
            adder.send("add", "n1", group="N")
            add_waited = answer_or_wait(adder, admin)
            assert queue.add("g3", group="G", conn=conn)
            assert queue.add("m1", group="M", conn=conn)
        assert setter.answer() == {"value": None}
        assert adder.answer() == {"value": True}
        assert (set_limit_waited, add_waited) == ("advisory", "advisory")  # the limits lock
        queue.add("n2", group="N")
        assert sorted(lease.task_id for lease in queue.claim_many(5)) == ["g2", "m1", "n1"]
        assert mismatches(admin, queue_name) == []
        setter.close()
        adder.close()


def test_a_redrive_making_a_forgotten_group_beside_a_set_limit_waits_in_the_lock_order(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """A redrive of a2 (group A) and b1 (group B, whose row a purge forgot) waits for
    A's row, which a caller's transaction holds (a completion in A); a set_limit of
    the default comes next.  The redrive took the schema's limits lock shared in its
    first statement, so the set_limit waits for that lock, holding no group row; once
    the caller commits, the redrive takes A's row, makes B's anew and commits, and the
    set_limit limits both.  (With the limits lock taken only where a group's row is
    made, the set_limit held it and waited for A's row behind the redrive, which held
    A's row and waited for the lock to make B's: a deadlock, Busy for one of them.)"""
    redriver = calls(postgres_url, queue_name, lease=30.0)
    setter = calls(postgres_url, queue_name)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
    ):
        queue.add_many(["a1", "a2"], group="A")
        queue.add("b1", group="B")
        token = {lease.task_id: lease.token for lease in queue.claim_many(3)}
        for task_id in ("a2", "b1"):
            assert queue.fail(task_id, token=token[task_id], retry=False) == "DEAD"
        assert queue.purge().groups == 1  # B: no unfinished task
        assert _group_row(queue, "B") is None
        with queue.engine.begin() as conn:
            assert queue.complete("a1", token=token["a1"], conn=conn)
            redriver.send("redrive", task_ids=["a2", "b1"])
            redrive_waited = answer_or_wait(redriver, admin)
            setter.send("set_limit", None, concurrency=1)
            set_limit_waited = answer_or_wait(setter, admin)
        assert redriver.answer() == {"value": 2}
        assert setter.answer() == {"value": None}
        assert redrive_waited in ROW  # A's row
        assert set_limit_waited == "advisory"  # the limits lock
        assert _group_row(queue, "A") == (1, 0, 1)
        assert _group_row(queue, "B") == (1, 0, 1)
        assert mismatches(admin, queue_name) == []
        redriver.close()
        setter.close()


@pytest.mark.parametrize("first", ["clock", "due-events"])
def test_a_set_limit_waits_for_the_limits_lock_before_anything_else(
    postgres_url: str, calls: Callable[..., Calls], first: str
) -> None:
    """A caller's transaction makes a first call, then completes r (group G, leased at
    1000); a set_limit at 1020 comes between.  The caller's first call took the
    schema's limits lock shared, so the set_limit waits for it before anything else.

    "clock": the first call adds an ungrouped task at 1010, raising the clock's mark
    (the caller holds the clock's row until it commits).  Had only the calls that
    move grouped tasks taken the lock, the set_limit would hold it and wait for the
    clock's row to raise the mark, while the completion waited for the lock.
    "due-events": the first call adds to group H at 1001, and r's lease (10 s) has run
    out by 1020, not by the completion's 1005.  Had the set_limit applied r's expiry
    first, holding r's row, then waited for the lock, the completion would wait for
    r's row.  Either way a deadlock, Busy for one of them.  Times are passed in (a
    schema of its own)."""
    lease_seconds, (task_id, at, group), completed_at = {
        "clock": (30, ("u1", 1010, None), 1010),
        "due-events": (10, ("h1", 1001, "H"), 1005),
    }[first]
    with databases.fresh_schema(postgres_url) as url:
        setter = calls(url, "q")
        with (
            sqlq.Queue(url, lease_seconds=lease_seconds, max_attempts=3, queue="q") as queue,
            connect(url) as admin,
        ):
            queue.add("r", 1000, group="G")
            lease = queue.claim(1000)
            assert lease is not None and lease.task_id == "r"
            with queue.engine.begin() as conn:
                assert queue.add(task_id, at, group=group, conn=conn)
                setter.send("set_limit", "G", 1020, concurrency=1)
                waited = answer_or_wait(setter, admin)
                assert queue.complete("r", completed_at, token=lease.token, conn=conn)
            assert setter.answer() == {"value": None}
            assert waited == "advisory"
            info = queue.info("r")
            assert info is not None and info.state == "COMPLETED"
            assert _group_row(queue, "G") == (0, 0, 1)
            assert mismatches(admin, "q") == []
            setter.close()


def test_the_limits_lock_is_no_queues_turn(postgres_url: str, queue_name: str) -> None:
    """The turn of a queue named "<name>:limits" (held by a session, as a strict call
    holds it) is not the limits lock of queue <name>: a set_limit goes ahead.  (When
    the limits lock was the advisory lock of the text "<schema>:<name>:limits", it was
    that turn, and the set_limit waited for it: Busy after busy_timeout.)"""
    with (
        sqlq.Queue(
            postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name, busy_timeout=2
        ) as queue,
        connect(postgres_url) as holder,
    ):
        holder.execute("BEGIN")
        holder.execute(Q.lock_queue, {"queue": f"{queue_name}:limits"})
        queue.set_limit("G", concurrency=1)
        assert queue.limits() == {"G": sqlq.Limit(1, None, None)}
        holder.execute("ROLLBACK")


def test_a_call_in_the_callers_transaction_leaves_the_counting_deferred(
    postgres_url: str, queue_name: str
) -> None:
    """A call in the caller's transaction counts its moves of grouped tasks at its end
    (SET CONSTRAINTS ... IMMEDIATE), then defers the counting again: the mode outlives
    the call's savepoint, and the caller's later moves would count statement by
    statement, out of the lock order.  A move the caller makes after the call is
    counted at the commit."""
    with sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue:
        queue.add_many(["a", "b"], group="G")
        lease = queue.claim()
        assert lease is not None and lease.task_id == "a"

        def live(conn: sqlalchemy.Connection) -> int:
            return int(
                conn.exec_driver_sql(
                    "SELECT live FROM sqlq_groups WHERE queue = %(q)s AND group_key = 'G'",
                    {"q": queue_name},
                ).scalar_one()
            )

        with queue.engine.begin() as conn:
            assert queue.complete("a", token=lease.token, conn=conn)
            assert live(conn) == 1  # counted at the call's end
            conn.exec_driver_sql(
                "UPDATE sqlq_tasks SET state = 'CANCELLED', finished_at = 1 "
                "WHERE queue = %(q)s AND task_id = 'b'",
                {"q": queue_name},
            )
            assert live(conn) == 1  # counted at the commit
        with queue.engine.connect() as conn:
            assert live(conn) == 0


def _group_row(queue: sqlq.Queue, group: str) -> tuple[Any, ...] | None:
    """(live, running, cap) of the group's row, or None if it has none."""
    with queue.engine.connect() as conn:
        row = conn.execute(
            sqlalchemy.text(
                "SELECT live, running, cap FROM sqlq_groups WHERE queue = :q AND group_key = :g"
            ),
            {"q": queue.queue, "g": group},
        ).first()
    return None if row is None else tuple(row)


def _idle_group(queue: sqlq.Queue, group: str, ending: str = "complete") -> None:
    """``group`` under a limit of one lease, with a row and nothing unfinished: its one
    task, "first", completed (or DEAD: ``ending`` "fail")."""
    queue.set_limit(group, concurrency=1)
    queue.add("first", group=group)
    lease = queue.claim()
    assert lease is not None
    if ending == "complete":
        assert queue.complete("first", token=lease.token)
    else:
        assert queue.fail("first", token=lease.token, retry=False) == "DEAD"
    assert _group_row(queue, group) == (0, 0, 1)


@pytest.mark.parametrize("mover", ["add", "redrive"])
def test_an_add_or_redrive_beside_a_purge_forgetting_its_group_makes_the_group_anew(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls], mover: str
) -> None:
    """A purge's transaction deletes the row of idle group G (what Queue.purge runs a
    batch at a time, here held open); an add of a task of G in another session, or a
    redrive of G's DEAD task, waits for it (at the end of its call: lock_groups, the
    counting triggers being deferred), and once the purge commits its trigger makes
    G's row anew: the task counted, G's limit of one lease applied.  (Had the move
    trigger made no row, the redrive's task would be counted nowhere, and G's task
    would never be claimed.)"""
    mover_session = calls(postgres_url, queue_name, lease=30.0)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        queue.engine.connect() as purging,
    ):
        _idle_group(queue, "G", "complete" if mover == "add" else "fail")
        with purging.begin():
            with queue._call(None, purging) as tx:  # one batch of Queue.purge's
                assert tx.forget_groups(queue.queue, "", 10) == (1, None)
            if mover == "add":
                mover_session.send("add", "g1", group="G")
            else:
                mover_session.send("redrive")
            mover_session.blocked(admin)  # on G's row, deleted but not committed
        assert mover_session.answer() == {"value": 1}  # True, or 1 task redriven
        assert _group_row(queue, "G") == (1, 0, 1)
        queue.add("g2", group="G")
        first = "g1" if mover == "add" else "first"
        assert [lease.task_id for lease in queue.claim_many(2)] == [first]
        assert queue.groups() == {"G": sqlq.GroupUse(1, 2)}
        mover_session.close()


def test_a_purge_beside_an_add_to_an_idle_group_never_waits_for_it(
    postgres_url: str, queue_name: str
) -> None:
    """An add of idle group G is in flight (its transaction open, G's row locked by its
    trigger); a purge meanwhile passes over G's row (SKIP LOCKED) instead of waiting
    (busy_timeout=5 would fail it), forgets the other idle group, and G ends with a
    right row once the add commits."""
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        sqlq.Queue(
            postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name, busy_timeout=5
        ) as purger,
        queue.engine.connect() as adding,
    ):
        _idle_group(queue, "G")
        queue.add("h0", group="H")
        assert queue.cancel("h0") == sqlq.Cancel.CANCELLED  # H: idle too
        with adding.begin():
            assert queue.add("g1", group="G", conn=adding)
            assert purger.purge(states=["COMPLETED", "CANCELLED"]) == 2
            assert _group_row(queue, "H") is None
        assert _group_row(queue, "G") == (1, 0, 1)
        queue.add("g2", group="G")
        assert [lease.task_id for lease in queue.claim_many(2)] == ["g1"]


# --- settings of the user's ----------------------------------------------------------------


def test_timeouts_set_by_the_user(
    cluster: postgres.Cluster, calls: Callable[..., Calls], tmp_path: Path
) -> None:
    """statement_timeout, idle_in_transaction_session_timeout and idle_session_timeout
    set for the database and the role: worker processes drain a queue, and an idle
    worker whose connection the server closed goes on with its next call."""
    with connect(cluster.url) as admin:
        closes_idle = admin.info.server_version >= 140000  # idle_session_timeout is new in 14
        admin.execute("ALTER DATABASE postgres SET statement_timeout = '2s'")
        admin.execute("ALTER ROLE postgres SET idle_in_transaction_session_timeout = '1s'")
        if closes_idle:
            admin.execute("ALTER ROLE postgres SET idle_session_timeout = '100ms'")
    names = [f"task-{i:04d}" for i in range(300)]
    with sqlq.Queue(cluster.url, lease_seconds=LEASE, max_attempts=1000) as queue:
        queue.add_many(names)
        drainers = [start_drainer(cluster.url, tmp_path, n) for n in range(2)]
        wait_for_drainers(drainers)
        check_drain(queue, names, drainers, tmp_path)

    idle = calls(cluster.url, "default")
    assert idle.call("add", "late") is True
    with connect(cluster.url) as admin:
        if not closes_idle:  # what the server does on 14 and later
            admin.execute("SELECT pg_terminate_backend(%s)", (idle.session(admin),))
        wait_for(lambda: idle.session(admin) is None, "the server to close the idle session")
    task_id, token = idle.call("claim")[:2]
    assert task_id == "late"
    with connect(cluster.url) as admin:  # again, before a call that commits on its own
        if not closes_idle:
            admin.execute("SELECT pg_terminate_backend(%s)", (idle.session(admin),))
        wait_for(lambda: idle.session(admin) is None, "the server to close the idle session")
    assert idle.call("complete", "late", token=token) is True
    idle.close()


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_isolation_level_set_by_the_user(
    cluster: postgres.Cluster, tmp_path: Path, isolation: str
) -> None:
    """A default_transaction_isolation set for the database is not sqlq's: its calls
    run at READ COMMITTED, which its statements are written for, so concurrent workers
    meet no serialization failure (each would be a Busy, and a pause of the worker)."""
    with connect(cluster.url) as admin:
        admin.execute(f"ALTER DATABASE postgres SET default_transaction_isolation = '{isolation}'")
    names = [f"task-{i:04d}" for i in range(600)]
    with sqlq.Queue(cluster.url, lease_seconds=LEASE, max_attempts=1000) as queue:
        queue.add_many(names)
        drainers = [start_drainer(cluster.url, tmp_path, n) for n in range(3)]
        wait_for_drainers(drainers)
        check_drain(queue, names, drainers, tmp_path)
    for drainer in drainers:
        assert "Busy" not in drainer.log()


@pytest.mark.parametrize("isolation", ["read committed", "repeatable read"])
def test_first_opens_at_once(
    cluster: postgres.Cluster, calls: Callable[..., Calls], isolation: str
) -> None:
    """Two processes open a new database at once (workers started together), at the
    server's default isolation or at one the user set for the database: both wait for
    the migrations' lock, one creates sqlq's tables, and the other, once it has the
    lock, finds them (it reads the catalog and the records at READ COMMITTED, in a
    snapshot taken after it waited) and goes on."""
    with connect(cluster.url) as admin, connect(cluster.url) as holder:
        admin.execute(f"ALTER DATABASE postgres SET default_transaction_isolation = '{isolation}'")
        holder.execute("BEGIN")
        holder.execute(Q.lock_migrations)
        openers = [calls(cluster.url, "default") for _ in range(2)]
        for opener in openers:
            opener.blocked(admin)
        holder.execute("ROLLBACK")
        for number, opener in enumerate(openers):
            assert opener.call("add", f"task-{number}") is True
            opener.close()
