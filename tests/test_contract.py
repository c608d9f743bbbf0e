"""The conformance suite: every rule of the contract, on every face of the queue."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from sqlq import Retry, WorkQueue
from sqlq.errors import InvalidArgument, InvalidConfig, InvalidTaskId, InvalidTime
from sqlq.settings import DEFAULTS

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py


def test_worked_example_retry_at_back_of_line(make_queue: Factory) -> None:
    q = make_queue(30, 3)
    assert q.add("resize-7", 0) is True
    assert q.add("resize-8", 0) is True
    assert q.reserve(5) == "resize-7"
    assert q.fail("resize-7", 9) == "AVAILABLE"
    assert q.reserve(10) == "resize-8"
    assert q.reserve(11) == "resize-7"
    assert q.complete("resize-8", 20) is True


def test_worked_example_expiry_then_dead(make_queue: Factory) -> None:
    q = make_queue(4, 2)
    assert q.add("emb-1", 0) is True
    assert q.reserve(1) == "emb-1"
    assert q.status("emb-1", 5) == "AVAILABLE"
    assert q.reserve(6) == "emb-1"
    assert q.complete("emb-1", 11) is False
    assert q.status("emb-1", 11) == "DEAD"


def test_worked_example_long(make_queue: Factory) -> None:
    q = make_queue(10, 2)
    assert [q.add("a", 0), q.add("b", 0), q.add("c", 1)] == [True, True, True]
    assert q.add("a", 1) is False
    assert q.reserve(2) == "a"
    assert q.fail("a", 3) == "AVAILABLE"
    assert q.reserve(4) == "b"
    assert q.reserve(4) == "c"
    assert q.reserve(5) == "a"
    assert q.reserve(5) is None
    assert q.complete("b", 6) is True
    assert q.complete("b", 7) is False
    assert q.status("b", 7) == "COMPLETED"
    assert q.status("c", 13) == "RESERVED"
    assert q.status("c", 14) == "AVAILABLE"
    assert q.complete("c", 14) is False
    assert q.status("a", 15) == "DEAD"
    assert q.fail("a", 15) is None
    assert q.status("zzz", 15) is None


def test_equal_deadlines_expire_in_reservation_order(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    for task in ("x", "y", "z"):
        q.add(task, 0)
    assert [q.reserve(1), q.reserve(1), q.reserve(1)] == ["x", "y", "z"]
    assert q.reserve(6) == "x"
    assert q.reserve(6) == "y"
    assert q.reserve(6) == "z"


def test_expired_tasks_go_behind_waiting_ones(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add("early", 0)
    assert q.reserve(0) == "early"
    q.add("waiting", 1)
    # At 5 the lease of "early" runs out: it goes to the back, behind "waiting".
    assert q.reserve(5) == "waiting"
    assert q.reserve(5) == "early"


def test_deadline_is_inclusive(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    q.reserve(0)
    assert q.status("t", 9) == "RESERVED"
    assert q.complete("t", 10) is False
    assert q.status("t", 10) == "AVAILABLE"


def test_complete_after_expiry_is_refused(make_queue: Factory) -> None:
    q = make_queue(3, 5)
    q.add("t", 0)
    q.reserve(0)
    assert q.complete("t", 3) is False
    assert q.status("t", 3) == "AVAILABLE"


def test_duplicate_add_changes_nothing_in_any_state(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add("t", 0)
    assert q.add("t", 0) is False
    q.reserve(1)
    assert q.add("t", 2) is False
    assert q.status("t", 2) == "RESERVED"
    q.complete("t", 3)
    assert q.add("t", 4) is False
    assert q.status("t", 4) == "COMPLETED"
    q.add("d", 5)
    q.reserve(5)
    q.fail("d", 5)
    assert q.add("d", 6) is False
    assert q.status("d", 6) == "DEAD"


def test_max_attempts_one_goes_straight_to_dead(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add("t", 0)
    assert q.reserve(0) == "t"
    assert q.fail("t", 1) == "DEAD"
    assert q.reserve(2) is None
    q.add("u", 3)
    q.reserve(3)
    assert q.status("u", 13) == "DEAD"


def test_lease_seconds_zero(make_queue: Factory) -> None:
    q = make_queue(0, 3)
    q.add("t", 0)
    assert q.reserve(0) == "t"
    # Any later call at time 0 sees the lease (deadline 0) as run out.
    assert q.status("t", 0) == "AVAILABLE"
    assert q.reserve(0) == "t"
    assert q.complete("t", 0) is False


def test_stale_lease_never_expires_a_later_reservation(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    q.reserve(0)  # deadline 10
    q.fail("t", 1)
    q.reserve(2)  # deadline 12
    assert q.status("t", 10) == "RESERVED"
    assert q.status("t", 11) == "RESERVED"
    assert q.status("t", 12) == "AVAILABLE"


def test_stale_lease_after_complete_and_reserve_again(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("a", 0)
    q.add("b", 0)
    assert q.reserve(0) == "a"  # deadline 10
    assert q.complete("a", 1) is True
    assert q.reserve(2) == "b"
    assert q.status("a", 10) == "COMPLETED"
    assert q.status("b", 11) == "RESERVED"


def test_expiry_counts_as_attempt_and_leads_to_dead(make_queue: Factory) -> None:
    q = make_queue(2, 3)
    q.add("t", 0)
    for start in (0, 2, 4):
        assert q.reserve(start) == "t"
    assert q.status("t", 5) == "RESERVED"
    assert q.status("t", 6) == "DEAD"
    assert q.reserve(7) is None


def test_fail_and_complete_need_a_reservation(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    assert q.fail("nope", 0) is None
    assert q.complete("nope", 0) is False
    q.add("t", 0)
    assert q.fail("t", 1) is None
    assert q.complete("t", 1) is False
    assert q.status("t", 1) == "AVAILABLE"


def test_time_high_water_mark(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    q.reserve(5)  # deadline 15
    assert q.status("t", 20) == "AVAILABLE"
    # A call from the past is handled at 20: nothing moves backwards.
    assert q.status("t", 1) == "AVAILABLE"
    assert q.reserve(1) == "t"  # reserved at 20, deadline 30
    assert q.status("t", 29) == "RESERVED"
    assert q.status("t", 3) == "RESERVED"
    assert q.status("t", 30) == "AVAILABLE"


def test_float_times(make_queue: Factory) -> None:
    q = make_queue(0.5, 2)
    q.add("t", 0.25)
    assert q.reserve(0.25) == "t"
    assert q.status("t", 0.74) == "RESERVED"
    assert q.status("t", 0.75) == "AVAILABLE"


@pytest.mark.parametrize(
    "task_id",
    [
        "it's",
        'say "hi"',
        "a; DROP TABLE sqlq_tasks; --",
        "SELECT",
        "日本語のタスク",
        "emoji 🚀",
        "tab\tand\nnewline",
        "nul\x00inside",
        "x" * 1024,
    ],
)
def test_unusual_ids_are_ordinary(make_queue: Factory, task_id: str) -> None:
    q = make_queue(10, 2)
    assert q.add(task_id, 0) is True
    assert q.add(task_id, 0) is False
    assert q.reserve(1) == task_id
    assert q.status(task_id, 1) == "RESERVED"
    assert q.complete(task_id, 2) is True
    assert q.status("other", 2) is None


def test_ids_are_distinct_from_near_twins(make_queue: Factory) -> None:
    q = make_queue(10, 2)
    assert q.add("nul\x00a", 0) is True
    assert q.add("nul\x00b", 0) is True
    assert q.add("nul", 0) is True
    assert q.add("Nul", 0) is True
    assert [q.reserve(1) for _ in range(4)] == ["nul\x00a", "nul\x00b", "nul", "Nul"]


@pytest.mark.parametrize("bad", [None, 7, b"bytes", "", "x" * 1025, "\ud800"])
def test_bad_task_ids_are_refused(make_queue: Factory, bad: object) -> None:
    q = make_queue(10, 2)
    for call in (q.add, q.complete, q.fail, q.status):
        with pytest.raises(InvalidTaskId):
            call(bad, 0)
    assert q.reserve(0) is None  # nothing was added


@pytest.mark.parametrize("bad", ["5", float("nan"), float("inf"), -1, True, 10**12 + 1])
def test_bad_times_are_refused(make_queue: Factory, bad: object) -> None:
    q = make_queue(10, 2)
    q.add("t", 0)
    with pytest.raises(InvalidTime):
        q.add("u", bad)
    with pytest.raises(InvalidTime):
        q.reserve(bad)
    with pytest.raises(InvalidTime):
        q.status("t", bad)
    assert q.status("u", 0) is None
    assert q.reserve(0) == "t"  # the refused calls did not move time or the line


def test_a_payload_given_by_position_is_refused_with_a_hint(make_queue: Factory) -> None:
    """add(task_id, now): a payload in now's place says how to pass it, and adds nothing."""
    q = make_queue(10, 2)
    with pytest.raises(InvalidTime, match=r"not dict; .*add\(task_id, payload=\.\.\.\)"):
        q.add("p1", {"width": 640})
    assert q.status("p1", 0) is None


def test_unknown_and_positional_options_of_add_are_refused(make_queue: Factory) -> None:
    """add's options are keywords it knows (the WorkQueue takes them as ``**options``)."""
    q = make_queue(10, 2)
    with pytest.raises(TypeError, match="colour"):
        q.add("t", 0, colour="red")
    with pytest.raises(TypeError, match="positional"):
        q.add("t", 0, {"width": 640})
    assert q.tasks(0) == []


def test_add_keeps_its_time_payload_and_options_on_every_path(make_queue: Factory) -> None:
    """Both faces' add has a path of its own for no option or a payload alone (see
    WorkQueue.add, Queue.add): each call keeps its time, by position or keyword, and
    its payload; a payload with another option keeps both."""
    q = make_queue(10, 2)
    assert q.add("a", 5) is True
    assert q.add("b", now=6) is True
    assert q.add("c", 7, payload={"w": 1}) is True
    assert q.add("d", payload=[2], now=8) is True
    assert q.add("e", 9, payload=None) is True
    assert q.add("f", 9, payload="named", name="resize") is True
    assert q.add("g", 9, payload="later", delay=5) is True
    assert q.add("a", 9, payload="again") is False  # exists: no change
    assert q.add("b", now=9) is False
    seen = [(t.task_id, t.created_at, t.payload, t.name, t.state) for t in q.tasks(9)]
    assert seen == [
        ("a", 5, None, None, "AVAILABLE"),
        ("b", 6, None, None, "AVAILABLE"),
        ("c", 7, {"w": 1}, None, "AVAILABLE"),
        ("d", 8, [2], None, "AVAILABLE"),
        ("e", 9, None, None, "AVAILABLE"),
        ("f", 9, "named", "resize", "AVAILABLE"),
        ("g", 9, "later", None, "WAITING"),
    ]
    leases = q.claim_many(10, 14)
    assert [(lease.task_id, lease.payload, lease.name) for lease in leases] == [
        ("a", None, None),
        ("b", None, None),
        ("c", {"w": 1}, None),
        ("d", [2], None),
        ("e", None, None),
        ("f", "named", "resize"),
        ("g", "later", None),
    ]


@pytest.mark.parametrize("bad", [Fraction(1, 2), Decimal("1.5")])
def test_numbers_that_are_not_int_or_float_are_not_times(make_queue: Factory, bad: object) -> None:
    """They compare with ints, so a check of the range alone would let them in."""
    q = make_queue(10, 2)
    q.add("t", 0)
    calls = (q.status, q.complete, q.fail, q.add)
    for call in calls:
        with pytest.raises(InvalidTime):
            call("t", bad)
    with pytest.raises(InvalidTime):
        q.reserve(bad)
    assert q.reserve(0) == "t"


@pytest.mark.parametrize(
    ("lease_seconds", "max_attempts"),
    [
        (-1, 3),
        (10**9 + 1, 3),
        (float("nan"), 3),
        ("10", 3),
        (10, 0),
        (10, 10**6 + 1),
        (10, 2.0),
        (10, True),
        (None, 3),
    ],
)
def test_bad_settings_are_refused(
    make_queue: Factory, lease_seconds: object, max_attempts: object
) -> None:
    if lease_seconds is None and make_queue is not WorkQueue:
        # a durable queue's setting not given is its stored one (sqlq.settings)
        assert make_queue(lease_seconds, max_attempts).lease_seconds == DEFAULTS.lease_seconds
        return
    with pytest.raises(InvalidConfig):
        make_queue(lease_seconds, max_attempts)


def test_limits_are_accepted(make_queue: Factory) -> None:
    q = make_queue(10**9, 10**5)
    q.add("t", 10**9)
    assert q.reserve(10**9) == "t"
    assert q.status("t", 2 * 10**9 - 1) == "RESERVED"
    assert q.status("t", 2 * 10**9) == "AVAILABLE"


def test_work_queue_needs_a_time() -> None:
    from sqlq import WorkQueue

    with pytest.raises(InvalidTime):
        WorkQueue(10, 2).add("t", None)  # type: ignore[arg-type]


# --- task names and per-task options (issue 11) -----------------------------------------


def test_a_task_keeps_its_name_and_its_own_attempts_and_retry(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    assert q.add("once", 0, name="resize", max_attempts=1, payload={"w": 1}) is True
    assert q.add("plain", 0) is True
    assert q.add("waits", 0, name="mail", retry=Retry.fixed(5)) is True
    assert q.add_many(["m0", ("m1", None, "mail"), ("m2", 7)], 0, max_attempts=2) == [True] * 3
    leases = q.claim_many(10, 1)
    assert [(lease.task_id, lease.name) for lease in leases] == [
        ("once", "resize"),
        ("plain", None),
        ("waits", "mail"),
        ("m0", None),
        ("m1", "mail"),
        ("m2", None),
    ]
    assert q.fail("once", 2, token=leases[0].token) == "DEAD"  # its own limit: 1
    assert q.fail("plain", 2, token=leases[1].token) == "AVAILABLE"  # the queue's: 3
    assert q.fail("waits", 2, token=leases[2].token) == "WAITING"  # its own retry
    assert q.info("waits", 2).run_at == 7
    assert q.fail("m1", 2, token=leases[4].token) == "AVAILABLE"
    assert [(t.task_id, t.name, t.max_attempts) for t in q.tasks(3)] == [
        ("once", "resize", 1),
        ("plain", None, 3),
        ("waits", "mail", 3),
        ("m0", None, 2),
        ("m1", "mail", 2),
        ("m2", None, 2),
    ]


def test_fail_without_retry_is_dead_at_once_under_the_lease_only(make_queue: Factory) -> None:
    q = make_queue(10, 5, retry=Retry.fixed(3))
    q.add("t", 0, name="x")
    lease = q.claim(1)
    assert q.fail("t", 2, token=lease.token + 1, error="nope", retry=False) is None
    assert q.fail("t", 2, token=lease.token, error="no such task", retry=False) == "DEAD"
    info = q.info("t", 2)
    assert (info.state, info.attempts, info.last_error, info.finished_at) == (
        "DEAD",
        5,
        "no such task",
        2,
    )
    assert q.fail("t", 3, token=lease.token, retry=False) is None  # not RESERVED any more
    assert q.redrive(4) == 1 and q.info("t", 4).attempts == 0


def test_settle_and_claim_fails_some_without_retry(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add_many(["a", "b", "c"], 0)
    a, b = q.claim_many(2, 1)
    done, states, leases = q.settle_and_claim(
        3, 2, failed=[("a", a.token, "unknown", False), ("b", b.token, "boom")]
    )
    assert (done, states) == ([], ["DEAD", "AVAILABLE"])
    assert [lease.task_id for lease in leases] == ["c", "b"]
    assert q.info("a", 2).attempts == 3


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"name": ""}, InvalidArgument),
        ({"name": 7}, InvalidArgument),
        ({"name": "x" * 1025}, InvalidArgument),
        ({"name": "a\x00b"}, InvalidArgument),
        ({"name": "\ud800"}, InvalidArgument),
        ({"max_attempts": 0}, InvalidConfig),
        ({"max_attempts": True}, InvalidConfig),
        ({"retry": "fixed"}, InvalidConfig),
    ],
)
def test_bad_names_and_options_are_refused(
    make_queue: Factory, options: dict[str, Any], error: type[Exception]
) -> None:
    q = make_queue(10, 3)
    with pytest.raises(error):
        q.add("t", 0, **options)
    with pytest.raises(error):
        q.add_many(
            [("t", None, options["name"])] if "name" in options else ["t"],
            0,
            **{k: v for k, v in options.items() if k != "name"},
        )
    assert q.tasks(0) == []


@pytest.mark.parametrize("bad", [0, 1, None, "no"])
def test_retry_of_fail_must_be_a_bool(make_queue: Factory, bad: object) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    lease = q.claim(0)
    with pytest.raises(InvalidArgument):
        q.fail("t", 1, token=lease.token, retry=bad)
    with pytest.raises(InvalidArgument):
        q.settle_and_claim(0, 1, failed=[("t", lease.token, None, bad)])
    assert q.status("t", 1) == "RESERVED"
