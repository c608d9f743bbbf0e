"""Per-key concurrency and rate limits, and fairness between groups, on every face:
grouped tasks, limits per group and the queue's default, the slot a lease holds until
it ends in any way (its expiry included), starts spaced by a rate (an injected clock,
never a sleep), round robin between groups; and real worker processes that never hold
more leases of a group than its limit, one of them killed with SIGKILL while it holds
the only slot of its group."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from databases import fresh_schema
from group_rows import mismatches
from needs import need

import sqlq
from sqlq import GroupUse, Limit
from sqlq.errors import InvalidArgument

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py


def _claims(q: Any, now: float, n: int) -> list[str | None]:
    """The ids of ``n`` claims at ``now`` (None where a claim found nothing)."""
    return [q.reserve(now) for _ in range(n)]


# --- concurrency -----------------------------------------------------------------


def test_a_group_at_its_concurrency_limit_is_passed_over(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=2)
    q.add_many(["a0", "a1", "a2"], 0, group="A")
    q.add("b0", 0, group="B")
    q.add("u0", 0)
    assert _claims(q, 1, 5) == ["a0", "a1", "b0", "u0", None]
    assert q.groups(1) == {"A": GroupUse(2, 3), "B": GroupUse(1, 1)}
    assert q.ready(1) is False  # a2 waits for a slot
    assert q.complete("a0", 2) is True
    assert q.ready(2) is True
    assert _claims(q, 2, 2) == ["a2", None]


def test_claim_many_takes_no_more_of_a_group_than_its_limit(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=2)
    q.add_many([f"a{i}" for i in range(5)], 0, group="A")
    q.add_many(["u0", "u1"], 0)
    leases = q.claim_many(10, 1)
    assert [lease.task_id for lease in leases] == ["a0", "a1", "u0", "u1"]
    done, failed, leases = q.settle_and_claim(10, 2, completed=[leases[0]])
    assert (done, failed, [lease.task_id for lease in leases]) == ([True], [], ["a2"])


@pytest.mark.parametrize("ending", ["complete", "fail", "fail_dead", "release", "cancel"])
def test_every_end_of_a_lease_frees_its_slot(make_queue: Factory, ending: str) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=1)
    q.add_many(["a0", "a1"], 0, group="A")
    first = q.claim(1)
    assert (first.task_id, q.reserve(1)) == ("a0", None)
    if ending == "complete":
        assert q.complete("a0", 2, token=first.token)
    elif ending == "fail":
        assert q.fail("a0", 2, token=first.token) == "AVAILABLE"
    elif ending == "fail_dead":
        assert q.fail("a0", 2, token=first.token, retry=False) == "DEAD"
    elif ending == "release":
        assert q.release("a0", first.token, 2)
    else:
        assert q.cancel("a0", 2) == sqlq.Cancel.STOPPING
        assert q.release("a0", first.token, 2)  # its worker gives it up: CANCELLED
    assert q.reserve(3) == "a1"
    assert q.groups(3)["A"].running == 1


def test_an_expired_lease_frees_its_slot_in_the_call_that_applies_it(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=1)
    q.add_many(["a0", "a1"], 0, group="A")
    assert _claims(q, 0, 2) == ["a0", None]
    assert q.reserve(9.5) is None  # a0's lease runs until 10
    assert q.reserve(10) == "a1"  # a0 expired (back in line behind a1), a1 took the slot
    assert q.status("a0", 10) == "AVAILABLE"
    assert q.groups(10)["A"] == GroupUse(1, 2)
    assert q.reserve(10) is None


def test_a_lower_limit_holds_new_claims_until_leases_end(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many([f"a{i}" for i in range(4)], 0, group="A")
    assert _claims(q, 0, 3) == ["a0", "a1", "a2"]
    q.set_limit("A", 0, concurrency=2)
    assert q.reserve(1) is None  # 3 leases out, limit 2
    assert q.complete("a0", 1) and q.reserve(1) is None
    assert q.complete("a1", 1) and q.reserve(1) == "a3"
    q.set_limit("A", 1, concurrency=5)  # raised: room at once
    assert q.groups(1)["A"].running == 2


# --- the queue's default, removal, what is stored ----------------------------------------


def test_the_default_limits_groups_without_their_own_and_removal_restores_it(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3)
    q.set_limit(None, 0, concurrency=1)
    q.set_limit("big", 0, concurrency=3)
    for group in ("small", "big"):
        q.add_many([f"{group}{i}" for i in range(3)], 0, group=group)
    q.add_many(["u0", "u1"], 0)  # ungrouped tasks have no limits
    assert _claims(q, 1, 7) == ["small0", "big0", "big1", "big2", "u0", "u1", None]
    assert q.limits(1) == {None: Limit(1, None, None), "big": Limit(3, None, None)}
    assert q.remove_limit("big", 2) is True
    assert q.remove_limit("big", 2) is False
    assert q.limits(2) == {None: Limit(1, None, None)}
    q.complete("big0", 2)
    q.complete("big1", 2)
    assert q.reserve(2) is None  # "big" obeys the default now: 1 lease, still running
    q.complete("big2", 2)
    assert q.remove_limit(None, 3) is True  # no limits at all
    assert _claims(q, 3, 3) == ["small1", "small2", None]


def test_a_group_of_its_own_with_no_limits_overrides_the_default(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.set_limit(None, 0, concurrency=1)
    q.set_limit("free", 0)  # a row of its own that limits nothing
    q.add_many(["f0", "f1", "f2"], 0, group="free")
    assert _claims(q, 1, 4) == ["f0", "f1", "f2", None]
    assert q.limits(1)["free"] == Limit(None, None, None)


def test_the_group_is_stored_with_the_task(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0, group="tenant:42", payload={"x": 1})
    q.add_many([("m", 5)], 0, group="tenant:7", delay=5)
    q.add("plain", 0)
    assert q.info("t", 0).group == "tenant:42"
    assert q.info("m", 0).group == "tenant:7" and q.info("m", 0).state == "WAITING"
    assert q.info("plain", 0).group is None
    assert q.groups(0) == {"tenant:42": GroupUse(0, 1), "tenant:7": GroupUse(0, 1)}
    assert [lease.task_id for lease in q.claim_many(5, 6)] == ["t", "plain", "m"]
    q.complete("t", 7)
    assert set(q.groups(7)) == {"tenant:7"}  # only groups with unfinished tasks


def test_a_waiting_or_redriven_grouped_task_obeys_its_limit(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.set_limit("A", 0, concurrency=1)
    q.add("a0", 0, group="A")
    q.add("a1", 0, group="A", delay=5)
    lease = q.claim(0)
    assert q.fail("a0", 1, token=lease.token) == "DEAD"
    assert q.reserve(6) == "a1"  # woke at 5
    assert q.redrive(6) == 1
    assert q.reserve(6) is None  # a0 is back in line, a1 holds the slot
    assert q.complete("a1", 7) and q.reserve(7) == "a0"


def test_a_cancelled_front_of_a_group_leaves_the_next_one_first(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many(["a0", "a1"], 0, group="A")
    q.add("u0", 0)
    assert q.cancel("a0", 1) == sqlq.Cancel.CANCELLED
    assert _claims(q, 2, 3) == ["a1", "u0", None]


def test_a_groups_front_is_its_highest_priority_task(make_queue: Factory) -> None:
    """A group's line is ordered as the ungrouped line (line key, then seq), and the
    fronts of the lines compete by the same order."""
    q = make_queue(10, 3, aging=None)
    q.add("a-low", 0, group="A")
    q.add("u-mid", 0, priority=1)
    q.add("a-high", 0, group="A", priority=2)
    q.add("b-mid", 0, group="B", priority=1)
    assert _claims(q, 1, 5) == ["a-high", "u-mid", "b-mid", "a-low", None]


def test_a_keyed_add_in_a_group_obeys_its_limit(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=1)
    assert q.add("k1", 0, key="one", group="A").holder == "k1"
    assert q.add("k2", 0, key="two", group="A").holder == "k2"
    assert q.info("k2", 0).group == "A"
    assert _claims(q, 1, 2) == ["k1", None]
    assert q.groups(1) == {"A": GroupUse(1, 2)}


def test_a_debounce_that_moves_a_groups_front_moves_the_group(make_queue: Factory) -> None:
    """A debounce gives an AVAILABLE holder a new place at the back of the line: its
    group's front is then the next task (not a place the holder left)."""
    q = make_queue(10, 3)
    q.add("held", 0, key="k", group="A")
    q.add("next", 0, group="A")
    q.add("held-again", 1, key="k", on_key="debounce", delay=5)
    assert _claims(q, 2, 2) == ["next", None]
    assert _claims(q, 6, 2) == ["held", None]


def test_a_paused_queue_hands_out_no_grouped_task(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("a0", 0, group="A")
    q.pause(0)
    assert q.reserve(1) is None and q.ready(1) is False
    q.resume(2)
    assert q.reserve(2) == "a0"


# --- rates (an injected clock) ---------------------------------------------------


def test_a_rate_spaces_the_starts_of_a_group(make_queue: Factory) -> None:
    q = make_queue(100, 3)
    q.set_limit("api", 0, rate=2, per=10)  # a start every 5 s
    q.add_many([f"r{i}" for i in range(4)], 0, group="api")
    q.add("u0", 0)
    assert _claims(q, 0, 3) == ["r0", "u0", None]
    assert q.ready(4.9) is False
    assert _claims(q, 4.9, 1) == [None]
    assert q.ready(5) is True
    assert _claims(q, 5, 2) == ["r1", None]
    assert _claims(q, 12, 2) == ["r2", None]  # the next start 5 s after the one before
    assert _claims(q, 16.9, 1) == [None]
    assert _claims(q, 17, 1) == ["r3"]


@pytest.mark.parametrize("limited", ["A", None])  # the group's own limits, or the default
def test_a_looser_or_removed_rate_never_delays_the_next_start(
    make_queue: Factory, limited: str | None
) -> None:
    # A start a day set by mistake (meant: a minute) held the group's next start a day
    # after its last, whatever limits came after, its removal included.
    q = make_queue(100, 3)
    q.set_limit(limited, 0, rate=1, per=86400)
    q.add_many([f"a{i}" for i in range(5)], 0, group="A")
    assert _claims(q, 1, 2) == ["a0", None]
    q.set_limit(limited, 2, rate=1, per=60)  # the next start: a minute after a0's
    assert _claims(q, 60.9, 1) == [None]
    assert _claims(q, 61, 2) == ["a1", None]
    assert q.remove_limit(limited, 62) is True
    assert _claims(q, 62, 1) == ["a2"]
    q.set_limit(limited, 63, rate=1, per=3600)  # a longer spacing: from the next start on
    assert _claims(q, 63, 2) == ["a3", None]
    assert _claims(q, 3662.9, 1) == [None]
    assert _claims(q, 3663, 1) == ["a4"]


def test_no_span_of_per_seconds_holds_more_than_rate_starts(make_queue: Factory) -> None:
    q = make_queue(1000, 3)
    q.set_limit("g", 0, rate=3, per=1)
    q.add_many([f"t{i}" for i in range(30)], 0, group="g")
    starts: list[float] = []
    for step in range(300):  # claims every 0.05 s, as many as the rate allows
        now = step * 0.05
        while q.reserve(now) is not None:
            starts.append(now)
    assert len(starts) == 30
    assert all(b - a >= 1 / 3 - 1e-9 for a, b in itertools.pairwise(starts))
    assert max(sum(1 for s in starts if t <= s < t + 1) for t in starts) <= 3


def test_concurrency_and_rate_together(make_queue: Factory) -> None:
    q = make_queue(100, 3)
    q.set_limit("g", 0, concurrency=1, rate=1, per=10)
    q.add_many(["g0", "g1", "g2"], 0, group="g")
    assert _claims(q, 0, 2) == ["g0", None]
    q.complete("g0", 1)
    assert q.reserve(9) is None  # a free slot, but the rate says 10
    assert q.reserve(10) == "g1"
    assert q.reserve(30) is None  # the rate allows it, the slot does not
    q.complete("g1", 30)
    assert q.reserve(30) == "g2"


# --- order between groups --------------------------------------------------------


def test_in_line_order_by_default_a_big_group_goes_first(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many([f"a{i}" for i in range(6)], 0, group="A")
    q.add_many(["b0", "b1"], 0, group="B")
    q.add("u0", 0)
    assert _claims(q, 1, 9) == ["a0", "a1", "a2", "a3", "a4", "a5", "b0", "b1", "u0"]


def test_round_robin_alternates_between_groups(make_queue: Factory) -> None:
    q = make_queue(10, 3, fair=True)
    q.add_many([f"a{i}" for i in range(100)], 0, group="A")
    q.add_many([f"b{i}" for i in range(3)], 0, group="B")
    q.add_many([f"c{i}" for i in range(2)], 0, group="C")
    assert _claims(q, 1, 9) == ["a0", "b0", "c0", "a1", "b1", "c1", "a2", "b2", "a3"]


def test_round_robin_passes_over_a_group_at_its_limit(make_queue: Factory) -> None:
    q = make_queue(10, 3, fair=True)
    q.set_limit("A", 0, concurrency=1)
    q.add_many([f"a{i}" for i in range(10)], 0, group="A")
    q.add_many([f"b{i}" for i in range(3)], 0, group="B")
    assert _claims(q, 1, 5) == ["a0", "b0", "b1", "b2", None]
    q.complete("a0", 2)
    assert _claims(q, 2, 2) == ["a1", None]


def test_ungrouped_tasks_keep_their_place_in_line_with_round_robin(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 3, fair=True)
    q.add("u0", 0)
    q.add_many(["a0", "a1"], 0, group="A")
    q.add("u1", 0)
    q.add("b0", 0, group="B")
    assert _claims(q, 1, 6) == ["u0", "a0", "u1", "b0", "a1", None]


# --- bad input ---------------------------------------------------------------------


@pytest.mark.parametrize("group", ["", 5, b"g", "a\x00b"])
def test_a_bad_group_is_refused(make_queue: Factory, group: object) -> None:
    q = make_queue(10, 3)
    with pytest.raises(InvalidArgument):
        q.add("t", 0, group=group)
    with pytest.raises(InvalidArgument):
        q.add_many(["t"], 0, group=group)
    with pytest.raises(InvalidArgument):
        q.set_limit(group, 0, concurrency=1)
    with pytest.raises(InvalidArgument):
        q.remove_limit(group, 0)
    assert q.status("t", 0) is None and q.limits(0) == {}


@pytest.mark.parametrize(
    "limit",
    [
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": True},
        {"concurrency": 2.5},
        {"concurrency": 2**31},
        {"rate": 0},
        {"rate": "3"},
        {"per": 5},  # per without a rate
        {"rate": 1, "per": 0},
        {"rate": 1, "per": -1},
        {"rate": 1, "per": float("nan")},
        {"rate": 2, "per": 5e-324},  # per / rate rounds to 0: a group no task could join
    ],
)
def test_a_bad_limit_is_refused_and_changes_nothing(
    make_queue: Factory, limit: dict[str, Any]
) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=1)
    with pytest.raises(InvalidArgument):
        q.set_limit("A", 0, **limit)
    assert q.limits(0) == {"A": Limit(1, None, None)}


def test_a_rate_alone_counts_per_second(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, rate=4)
    assert q.limits(0) == {"A": Limit(None, 4, 1.0)}


# --- idle groups forgotten at purge ---------------------------------------------------


def _run_once(q: Any, task_id: str, now: float, group: str = "A") -> None:
    """Add a task of ``group``, claim it and complete it: the group is idle after."""
    q.add(task_id, now, group=group)
    lease = q.claim(now)
    assert lease is not None and lease.task_id == task_id
    assert q.complete(task_id, now, token=lease.token)


@pytest.mark.parametrize("limited", ["A", None])  # the group's own limits, or the default
def test_purge_forgets_an_idle_group_and_its_limits_apply_when_it_comes_back(
    make_queue: Factory, limited: str | None
) -> None:
    q = make_queue(10, 3)
    q.set_limit(limited, 0, concurrency=1)
    _run_once(q, "a0", 1)
    purged = q.purge(2)
    assert (purged, purged.groups) == (1, 1)  # a0 deleted, A forgotten
    assert isinstance(purged, int) and q.purge(2).groups == 0
    assert q.limits(2) == {limited: Limit(1, None, None)}  # the limits stay
    q.add_many(["a1", "a2"], 3, group="A")  # A made anew, under them
    assert _claims(q, 3, 2) == ["a1", None]
    assert q.groups(3) == {"A": GroupUse(1, 2)}
    assert q.purge(3).groups == 0


@pytest.mark.parametrize("state", ["WAITING", "AVAILABLE", "RESERVED"])
def test_purge_keeps_a_group_with_an_unfinished_task(make_queue: Factory, state: str) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, concurrency=1)
    _run_once(q, "b0", 0, group="B")  # idle: forgotten beside A
    q.add("a0", 0, group="A", delay=5 if state == "WAITING" else None)
    if state == "RESERVED":
        assert q.reserve(1) == "a0"
    assert q.status("a0", 1) == state
    assert q.purge(1).groups == 1  # B only
    q.add("a1", 2, group="A")
    expected = {"WAITING": "a1", "AVAILABLE": "a0", "RESERVED": None}[state]
    assert q.reserve(2) == expected  # a0's lease still holds A's only slot
    assert q.groups(2)["A"] == GroupUse(1, 2)


def test_purge_keeps_a_group_until_its_rate_allows_its_next_start(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.set_limit("A", 0, rate=1, per=10)  # a start every 10 s
    _run_once(q, "a0", 0)  # the next start of A: at 10 at the soonest
    assert q.purge(2).groups == 0
    assert q.purge(9.5).groups == 0
    q.add("a1", 9.5, group="A")
    assert q.reserve(9.5) is None  # the rate still holds: A was not forgotten
    assert q.reserve(10) == "a1"
    assert q.complete("a1", 11)
    assert q.purge(19).groups == 0
    assert q.purge(20).groups == 1  # a next start not after the call's time
    q.add_many(["a2", "a3"], 20, group="A")
    assert _claims(q, 20, 2) == ["a2", None]  # made anew under its rate
    assert q.reserve(30) == "a3"


def test_a_redriven_task_makes_its_forgotten_group_anew_under_its_limits(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 1)
    q.set_limit(None, 0, concurrency=1)
    q.add("b0", 0, group="B")
    assert q.fail("b0", 1, token=q.claim(0).token) == "DEAD"
    assert q.purge(2).groups == 1  # DEAD is finished: B is idle
    assert q.redrive(3) == 1
    assert q.groups(3) == {"B": GroupUse(0, 1)}
    q.add("b1", 3, group="B")
    assert _claims(q, 4, 2) == ["b0", None]
    assert q.groups(4) == {"B": GroupUse(1, 2)}


@pytest.mark.parametrize("purged", [True, False])
def test_a_forgotten_group_comes_back_as_a_new_group_in_the_round_robin(
    make_queue: Factory, purged: bool
) -> None:
    """The rule (sqlq.contract): a group forgotten and back has no latest claim, so a
    fair claim serves it before A, served before it; one kept waits for its turn."""
    q = make_queue(10, 3, fair=True)
    q.add_many(["a0", "a1"], 0, group="A")
    q.add("c0", 0, group="C")
    assert _claims(q, 1, 2) == ["a0", "c0"]
    assert q.complete("c0", 2)
    if purged:
        assert q.purge(3).groups == 1
    q.add("c1", 4, group="C")
    assert _claims(q, 5, 2) == (["c1", "a1"] if purged else ["a1", "c1"])


def test_purge_looks_at_the_groups_in_batches_and_forgets_every_idle_one(
    queue_url: str,
) -> None:
    """batch_size groups a transaction (a range of names), every range looked at: the
    busy groups between idle ones stay, the idle ones go, their rows with them."""
    with sqlq.Queue(queue_url, lease_seconds=10, max_attempts=3) as q:
        for i in range(7):
            _run_once(q, f"t{i}", 0, group=f"g{i}")
        q.add("busy1", 0, group="g1")
        q.add("busy4", 0, group="g4", delay=60)
        purged = q.purge(1, batch_size=2)
        assert (purged, purged.groups) == (7, 5)
        with q.engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT group_key, live FROM sqlq_groups WHERE queue = :q ORDER BY 1"),
                {"q": q.queue},
            ).all()
        assert [tuple(row) for row in rows] == [("g1", 1), ("g4", 1)]
        assert q.purge(1, batch_size=1).groups == 0
        assert q.reserve(1) == "busy1" and q.complete("busy1", 2)
        assert q.purge(2, batch_size=1).groups == 1


# --- real processes ------------------------------------------------------------------

GROUP_WORKERS = Path(__file__).with_name("group_workers.py")
DRAIN_TIMEOUT = 120.0


def _worker(url: str, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(GROUP_WORKERS), url, str(log), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _drain(workers: list[subprocess.Popen[bytes]]) -> None:
    """Wait for the workers to finish the queue, each exiting 0."""
    deadline = time.monotonic() + DRAIN_TIMEOUT
    for worker in workers:
        try:
            _, err = worker.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in workers:
                other.kill()
            pytest.fail("the workers did not drain the queue in time")
        assert worker.returncode == 0, err.decode()


def _most_at_once(
    lines: list[str], group_of: Callable[[str], str], abandoned: frozenset[str] = frozenset()
) -> dict[str, int]:
    """The most leases each group held at once by the workers' own marks: a start
    opens an interval, its end closes it; a lease in ``abandoned`` (tokens whose
    worker was killed) is closed by the next start in its group."""
    open_now: dict[str, set[str]] = {}
    most: dict[str, int] = {}
    for line in lines:
        mark, task_id, token = line.split()
        group = group_of(task_id)
        running = open_now.setdefault(group, set())
        if mark == "start":
            running -= abandoned
            running.add(token)
            most[group] = max(most.get(group, 0), len(running))
        else:
            running.discard(token)
    return most


@pytest.mark.processes
def test_worker_processes_never_exceed_a_group_limit(tmp_path: Path, queue_url: str) -> None:
    log = tmp_path / "marks.log"
    caps = {"A": 2, "B": 1, "C": 3}
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3) as q:
        for group, cap in caps.items():
            q.set_limit(group, concurrency=cap)
            q.add_many([f"{group}-{i}" for i in range(40)], group=group)
        q.add_many([f"U-{i}" for i in range(40)])
        workers = [_worker(queue_url, log) for _ in range(4)]
        _drain(workers)
        assert q.counts()["COMPLETED"] == 160
    lines = log.read_text().splitlines()
    assert sum(line.startswith("start") for line in lines) == 160
    most = _most_at_once(lines, lambda task_id: task_id.split("-")[0])
    assert set(most) == {"A", "B", "C", "U"}
    assert all(most[group] <= cap for group, cap in caps.items()), most


@pytest.mark.processes
def test_a_killed_workers_expired_lease_frees_the_only_slot(tmp_path: Path, queue_url: str) -> None:
    """One slot; the worker holding it is killed with SIGKILL.  Nothing else of the
    group starts until its lease runs out, and then the rest is done, the killed
    task's retry among it."""
    need(hasattr(signal, "SIGKILL"), "needs SIGKILL")
    log = tmp_path / "marks.log"
    with sqlq.Queue(queue_url, lease_seconds=1, max_attempts=3) as q:
        q.set_limit("solo", concurrency=1)
        q.add_many([f"s-{i}" for i in range(10)], group="solo")
        holder = _worker(queue_url, log, "--lease", "1", "--hold", "s-0")
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while "start s-0" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and holder.poll() is None, "no worker took s-0"
            time.sleep(0.01)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        workers = [_worker(queue_url, log, "--lease", "1") for _ in range(3)]
        _drain(workers)
        info = q.info("s-0")
        assert (info.state, info.attempts) == ("COMPLETED", 2)
        assert q.counts()["COMPLETED"] == 10
    lines = log.read_text().splitlines()
    mark, task_id, token = lines[0].split()
    assert (mark, task_id) == ("start", "s-0")  # the killed lease: never ended
    assert _most_at_once(lines, lambda task_id: "solo", frozenset({token})) == {"solo": 1}


RATE_LEASE = 600.0


def _claim_starts(url: str, out: Any) -> None:
    """Claim until nothing is AVAILABLE; put the time of each start (the database's:
    the lease's deadline less its length) in ``out``."""
    starts = []
    with sqlq.Queue(url, lease_seconds=RATE_LEASE, max_attempts=1) as q:
        while q.counts()["AVAILABLE"]:
            lease = q.claim()
            if lease is not None:
                starts.append(lease.deadline - RATE_LEASE)
    out.put(starts)


@pytest.mark.processes
def test_worker_processes_never_start_a_group_faster_than_its_rate(queue_url: str) -> None:
    # (Held up.) Four processes claim as fast as they can from a group of 10 starts a
    # second: in the database's time, no two starts are closer than 0.1 s.
    with sqlq.Queue(queue_url, lease_seconds=RATE_LEASE, max_attempts=1) as q:
        q.set_limit("g", rate=10, per=1)
        q.add_many([f"t{i}" for i in range(25)], group="g")
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [context.Process(target=_claim_starts, args=(queue_url, out)) for _ in range(4)]
    for process in processes:
        process.start()
    starts = sorted(start for _ in processes for start in out.get(timeout=DRAIN_TIMEOUT))
    for process in processes:
        process.join(DRAIN_TIMEOUT)
        assert process.exitcode == 0
    assert len(starts) == 25
    # Each start is read back as deadline - RATE_LEASE, two float roundings at the
    # magnitude of Unix time (an ulp there is about 2.4e-7 s): allowed, no more.
    slack = 4 * math.ulp(starts[-1])
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.1 - slack


def _claim_fairly(url: str, n: int, out: Any) -> None:
    """Claim (round robin) and complete ``n`` tasks; put (token, task id) of each in ``out``."""
    taken = []
    with sqlq.Queue(url, lease_seconds=600, max_attempts=1, fair=True) as q:
        while len(taken) < n:
            lease = q.claim()
            if lease is not None:
                taken.append((lease.token, lease.task_id))
                q.complete(lease.task_id, token=lease.token)
    out.put(taken)


@pytest.mark.processes
def test_worker_processes_serve_a_small_tenant_between_a_big_ones_tasks(queue_url: str) -> None:
    # (Held up.) 10,000 tasks of one tenant added first, then 10 of another: three
    # processes claiming round robin serve the small one between the big one's tasks.
    with sqlq.Queue(queue_url, lease_seconds=600, max_attempts=1) as q:
        for start in range(0, 10_000, 1000):
            q.add_many([f"big-{i}" for i in range(start, start + 1000)], group="big")
        q.add_many([f"small-{i}" for i in range(10)], group="small")
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    processes = [context.Process(target=_claim_fairly, args=(queue_url, 20, out)) for _ in range(3)]
    for process in processes:
        process.start()
    taken = sorted(lease for _ in processes for lease in out.get(timeout=DRAIN_TIMEOUT))
    for process in processes:
        process.join(DRAIN_TIMEOUT)
        assert process.exitcode == 0
    order = [task_id for _, task_id in taken]
    # Every other claim (PostgreSQL's claims run side by side: give or take a few).
    assert {f"small-{i}" for i in range(10)} <= set(order[:25]), order


GROUP_MIX_WORKERS = Path(__file__).with_name("group_mix_workers.py")


@pytest.mark.processes
def test_calls_that_move_grouped_tasks_never_deadlock_on_postgresql(
    tmp_path: Path, postgres_url: str
) -> None:
    """Four processes settle their leases of several groups at once (completions in
    a random order, failures retried or dead-lettered, leases left to run out and
    expired by the others' calls), claim, cancel, add, redrive dead tasks of several
    groups, add debouncing tasks with dedupe keys, set limits again, purge, and add
    tasks in transactions of their own (conn=) that make new groups, on groups with
    concurrency limits; one of them is killed with SIGKILL mid-way and replaced; then they drain
    the queue to its last task.  No call fails with Busy (PostgreSQL's deadlock
    detector undoes one transaction of a lock cycle: it would say Busy), no group ever
    has more leases than its limit, and every group's row says what its tasks say
    (unfinished tasks, leases, the front of its line: a stale front would have
    claims find nothing and the drain never end)."""
    need(hasattr(signal, "SIGKILL"), "needs SIGKILL")
    log = tmp_path / "marks.log"
    caps = {"A": 2, "B": 1, "C": 2, "D": 3}
    groups = ",".join(f"{group}:{cap}" for group, cap in caps.items())

    def worker(seed: int) -> subprocess.Popen[bytes]:
        command = [sys.executable, str(GROUP_MIX_WORKERS), url, str(log), groups, "120", str(seed)]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    with fresh_schema(postgres_url) as url:
        with sqlq.Queue(url, lease_seconds=1, max_attempts=1000) as q:
            for group, cap in caps.items():
                q.set_limit(group, concurrency=cap)
                q.add_many([f"{group}-{i}" for i in range(100)], group=group)
        workers = [worker(seed) for seed in range(4)]
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while (log.read_text() if log.exists() else "").count("start") < 40:
            assert time.monotonic() < deadline and workers[0].poll() is None, "no progress"
            time.sleep(0.01)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        workers[0] = worker(4)
        _drain(workers)
        with sqlq.Queue(url, lease_seconds=1, max_attempts=1000) as q:
            with q.engine.connect() as conn:
                assert mismatches(conn, q.queue) == []
            counts = q.counts()
            assert counts["AVAILABLE"] + counts["WAITING"] + counts["RESERVED"] == 0, counts
            assert counts["DEAD"] > 0 and q.groups() == {}
    lines = log.read_text().splitlines()
    assert [line for line in lines if line.startswith("busy")] == []
    marks = [line for line in lines if not line.startswith("busy")]
    ended = {line.split()[2] for line in marks if line.startswith("end")}
    killed = frozenset(line.split()[2] for line in marks if line.split()[2] not in ended)
    most = _most_at_once(marks, lambda task_id: task_id.split("-")[0], killed)
    assert all(most[group] <= cap for group, cap in caps.items()), most


# --- the command line ----------------------------------------------------------------


def _sqlq(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_cli_adds_grouped_tasks_and_sets_shows_and_removes_limits(queue_url: str) -> None:
    added = _sqlq("add", queue_url, "a1", "a2", "a3", "--group", "tenant:1")
    assert added.returncode == 0, added.stderr
    assert _sqlq("add", queue_url, "u1").returncode == 0
    assert _sqlq("limits", queue_url).stdout.splitlines() == [
        "queue 'default':",
        "group     concurrency  rate       running  unfinished",
        "tenant:1  (default)    (default)        0           3",
    ]
    set_one = _sqlq("limits", queue_url, "tenant:1", "--concurrency", "2", "--rate", "10")
    assert set_one.returncode == 0, set_one.stderr
    assert _sqlq("limits", queue_url, "--default", "--concurrency", "5").returncode == 0
    shown = _sqlq("limits", queue_url, "--json")
    assert json.loads(shown.stdout) == {
        "database": json.loads(shown.stdout)["database"],
        "queue": "default",
        "limits": [
            {"group": None, "concurrency": 5, "rate": None, "per": None},
            {"group": "tenant:1", "concurrency": 2, "rate": 10, "per": 1.0},
        ],
        "groups": [{"group": "tenant:1", "running": 0, "unfinished": 3}],
    }
    with sqlq.Queue(queue_url, lease_seconds=60, max_attempts=3) as q:
        assert q.info("a1").group == "tenant:1" and q.info("u1").group is None
        assert [q.reserve(), q.reserve(), q.reserve()] == ["a1", "u1", None]  # a rate of 10/s
    listed = _sqlq("list", queue_url).stdout.splitlines()
    assert listed[0].split()[:3] == ["task_id", "name", "group"]
    assert listed[1].split()[:3] == ["a1", "-", "tenant:1"]
    assert "group:        tenant:1" in _sqlq("show", queue_url, "a2").stdout
    assert json.loads(_sqlq("show", queue_url, "u1", "--json").stdout)["group"] is None
    removed = _sqlq("limits", queue_url, "tenant:1", "--remove", "--json")
    assert json.loads(removed.stdout)["removed"] is True
    again = _sqlq("limits", queue_url, "tenant:1", "--remove")
    assert again.stdout.startswith("tenant:1: no limits were set\n")


def test_sqlq_purge_says_how_many_idle_groups_it_forgot(queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=60, max_attempts=3) as q:
        q.set_limit("tenant:1", concurrency=1)
        for task_id, group in (("a1", "tenant:1"), ("b1", "tenant:2")):
            _run_once(q, task_id, 0, group)
        q.add("b2", group="tenant:2", delay=600)  # tenant:2 stays
        _run_once(q, "c1", 0, group="tenant:3")
    purged = _sqlq("purge", queue_url)
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout == "removed 3 COMPLETED tasks from queue 'default'; forgot 2 idle groups\n"
    again = json.loads(_sqlq("purge", queue_url, "--json", "--dead").stdout)
    assert (again["removed"], again["groups_forgotten"]) == ({"DEAD": 0}, 0)
    with sqlq.Queue(queue_url, lease_seconds=60, max_attempts=3) as q:
        assert q.limits() == {"tenant:1": Limit(1, None, None)}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "2"], "give the GROUP to change"),
        (["g"], "give --concurrency/--rate/--per, --unlimited or --remove"),
        (["g", "--default", "--remove"], "not both"),
        (["g", "--remove", "--unlimited"], "--unlimited or --remove"),
        (["g", "--concurrency", "0"], "must be at least 1"),
        (["", "--concurrency", "1"], "group must not be empty"),
        (["g", "--per", "0"], "more than 0"),
    ],
)
def test_the_cli_refuses_bad_limits(queue_url: str, args: list[str], message: str) -> None:
    assert _sqlq("add", queue_url, "t").returncode == 0
    refused = _sqlq("limits", queue_url, *args)
    assert refused.returncode == 2 and message in refused.stderr, refused.stderr
    assert json.loads(_sqlq("limits", queue_url, "--json").stdout)["limits"] == []


def test_a_per_without_a_rate_is_refused_by_the_queue(queue_url: str) -> None:
    assert _sqlq("add", queue_url, "t").returncode == 0
    refused = _sqlq("limits", queue_url, "g", "--per", "5")
    assert refused.returncode == 1 and "per (seconds) goes with a rate" in refused.stderr


def test_sqlq_worker_fair_claims_round_robin(queue_url: str) -> None:
    with sqlq.Queue(queue_url, lease_seconds=60, max_attempts=1) as q:
        q.add_many(["a0", "a1", "a2"], group="A")
        q.add_many(["b0", "b1"], group="B")
    tests = str(Path(__file__).resolve().parent)
    command = [sys.executable, "-m", "sqlq", "worker", queue_url, "runner_handlers:fast"]
    worker = subprocess.run(
        [*command, "--burst", "--fair", "--summary-every", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": tests},
    )
    assert worker.returncode == 0, worker.stderr
    with sqlq.Queue(queue_url, lease_seconds=60, max_attempts=1) as q:
        tokens = {task.task_id: task.token for task in q.tasks()}
    assert sorted(tokens, key=tokens.__getitem__) == ["a0", "b0", "a1", "b1", "a2"]


def test_a_registered_task_enqueued_in_a_group_obeys_its_limit(make_queue: Factory) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="report")
    def report(tenant: int) -> None: ...

    q = make_queue(10, 3)
    q.set_limit("tenant:1", 0, concurrency=1)
    first = report.enqueue(q, {"tenant": 1}, task_id="r1", group="tenant:1", now=0)
    second = report.enqueue(q, {"tenant": 1}, task_id="r2", group="tenant:1", now=0)
    assert (first, second) == ("r1", "r2")
    assert q.info("r2", 0).group == "tenant:1"
    assert _claims(q, 1, 2) == ["r1", None]


def test_an_async_queue_takes_groups_and_limits(queue_url: str) -> None:
    tasks = sqlq.Tasks()

    @tasks.task(name="report")
    def report() -> None: ...

    async def main() -> list[str | None]:
        async with sqlq.AsyncQueue(queue_url, lease_seconds=10, max_attempts=3) as q:
            await q.set_limit("g", concurrency=1)
            await q.add("a", group="g")
            await report.enqueue_async(q, {}, task_id="b", group="g")
            assert await q.limits() == {"g": Limit(1, None, None)}
            assert (await q.groups())["g"] == GroupUse(0, 2)
            taken = [await q.reserve(), await q.reserve()]
            assert await q.remove_limit("g")
            return [*taken, await q.reserve()]

    assert asyncio.run(main()) == ["a", None, "b"]
