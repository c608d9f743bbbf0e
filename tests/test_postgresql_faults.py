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
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import postgres
import psycopg
import pytest
import sqlalchemy
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


def test_two_configures_at_once_keep_both_settings(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """Two processes change two different settings of one queue at once: both stay. The
    settings row is locked by another session meanwhile, so that both calls are under
    way together (each seen waiting for the lock) before either writes. A configure
    that read the stored settings and then wrote them back whole lost one of the two."""
    first, second = calls(postgres_url, queue_name), calls(postgres_url, queue_name)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        queue.configure(lease_seconds=10, max_attempts=2)
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM sqlq_settings WHERE queue = %s FOR UPDATE", (queue_name,))
        first.send("configure", lease_seconds=77)
        second.send("configure", max_attempts=9)
        first.blocked(admin)
        second.blocked(admin)
        holder.execute("COMMIT")
        answers = [first.answer(), second.answer()]
        assert all("value" in answer for answer in answers), answers
        stored = queue.settings()
        assert stored is not None
        assert (stored.lease_seconds, stored.max_attempts) == (77, 9)
        assert stored.retry == sqlq.Retry.immediate()


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


def test_two_settles_over_two_groups_in_opposite_orders_do_not_deadlock(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """Two workers each settle a lease of group G and one of group H in one call, in
    opposite orders: the first completes its task of H, then fails its task of G, whose
    row another session holds for a moment; the second completes its task of G, then
    fails its task of H.  Row by row, each would hold one group's row and wait for the
    other's: a deadlock, Busy for one of them.  A call that moves grouped tasks takes
    the queue's turn before any row, so the second waits for the first to end, and
    both settle."""
    first = calls(postgres_url, queue_name, lease=30.0)
    second = calls(postgres_url, queue_name, lease=30.0)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        queue.add_many(["g1", "g2"], group="G")
        queue.add_many(["h1", "h2"], group="H")
        token = {lease.task_id: lease.token for lease in queue.claim_many(4)}
        holder.execute("BEGIN")
        lock_row(holder, queue_name, "g2")
        first.send(
            "settle_and_claim",
            0,
            completed=[["h1", token["h1"]]],
            failed=[["g2", token["g2"], "boom"]],
        )
        first.blocked(admin)  # on g2's row
        second.send(
            "settle_and_claim",
            0,
            completed=[["g1", token["g1"]]],
            failed=[["h2", token["h2"], "boom"]],
        )
        second.blocked(admin)
        holder.execute("ROLLBACK")
        settled = {"value": [[True], ["AVAILABLE"], []]}
        assert (first.answer(), second.answer()) == (settled, settled)
        assert queue.groups() == {"G": sqlq.GroupUse(0, 1), "H": sqlq.GroupUse(0, 1)}
        first.close()
        second.close()


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
        holder.execute("BEGIN")  # a claim of b in flight, as claim_grouped makes it
        holder.execute(
            "SELECT 1 FROM sqlq_groups WHERE queue = %s AND group_key = 'G' FOR UPDATE",
            (queue_name,),
        )
        holder.execute(
            "UPDATE sqlq_tasks SET state = 'RESERVED', attempts = attempts + 1, "
            "lease_id = nextval('sqlq_counter'), "
            "deadline = extract(epoch FROM clock_timestamp()) + 30 "
            "WHERE queue = %s AND task_id = 'b'",
            (queue_name,),
        )
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
    redrive of G's DEAD task, waits for it (the add in its trigger's INSERT ... ON
    CONFLICT, the redrive in remake_groups; or at commit, were the triggers deferred),
    and once the purge commits makes G's row anew: the task counted, G's limit of one
    lease applied.  (Without remake_groups the redrive's trigger would find no row to
    count the task in, and G's task would never be claimed.)"""
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


def test_two_redrives_over_two_idle_groups_in_opposite_orders_do_not_deadlock(
    postgres_url: str, queue_name: str, calls: Callable[..., Calls]
) -> None:
    """Two redrives, each of a DEAD task of idle group G2 and one of G1, in opposite
    orders, while another session holds G2's row for a moment.  The queue has no
    unfinished grouped task, so neither takes the queue's turn.  Task by task, the
    first would wait for G2 holding nothing, the second take G1 and wait for G2; G2
    freed, the first would take it and wait for G1: a deadlock, Busy for one of them.
    A redrive makes or locks its groups' rows in group-key order first, so the first
    takes G1 before it waits for G2, the second waits for G1, and both redrive."""
    first = calls(postgres_url, queue_name, lease=30.0)
    second = calls(postgres_url, queue_name, lease=30.0)
    with (
        sqlq.Queue(postgres_url, lease_seconds=30, max_attempts=3, queue=queue_name) as queue,
        connect(postgres_url) as admin,
        connect(postgres_url) as holder,
    ):
        queue.add_many(["b", "c"], group="G1")
        queue.add_many(["a", "d"], group="G2")
        for lease in queue.claim_many(4):
            assert queue.fail(lease.task_id, token=lease.token, retry=False) == "DEAD"
        holder.execute("BEGIN")
        holder.execute(
            "SELECT 1 FROM sqlq_groups WHERE queue = %s AND group_key = 'G2' FOR UPDATE",
            (queue_name,),
        )
        first.send("redrive", task_ids=["a", "b"])
        first.blocked(admin)  # on G2's row
        second.send("redrive", task_ids=["c", "d"])
        second.blocked(admin)
        holder.execute("ROLLBACK")
        assert (first.answer(), second.answer()) == ({"value": 2}, {"value": 2})
        assert queue.groups() == {"G1": sqlq.GroupUse(0, 2), "G2": sqlq.GroupUse(0, 2)}
        first.close()
        second.close()


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
