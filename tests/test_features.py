"""The worker features of the contract, on every face: tokens, heartbeats, delays,
retry backoff, payloads and errors, dead letters, retention, stats and batches.

With no token, no delay, no backoff and no payload the core contract
(test_contract.py) holds unchanged; these tests cover what extends it.
"""

from __future__ import annotations

import inspect
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest

from sqlq import Retry, payload
from sqlq.contract import MAX_TIME
from sqlq.errors import (
    InvalidArgument,
    InvalidConfig,
    InvalidPayload,
    InvalidTaskId,
    PayloadTooLarge,
)

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py


# --- fencing tokens and heartbeats -------------------------------------------------


def test_claim_returns_a_lease_with_a_fresh_increasing_token(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("a", 0, payload={"n": 1})
    q.add("b", 0)
    first = q.claim(1)
    second = q.claim(1)
    assert (first.task_id, first.attempt, first.deadline, first.payload) == ("a", 1, 11, {"n": 1})
    assert (second.task_id, second.payload) == ("b", None)
    assert second.token > first.token
    q.fail("a", 2, token=first.token)
    again = q.claim(3)
    assert (again.task_id, again.attempt) == ("a", 2)
    assert again.token > second.token
    assert q.claim(3) is None


def test_a_stale_worker_cannot_complete_a_task_another_worker_holds(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add("job", 0)
    stale = q.claim(0)  # worker 1; its lease runs out at 5
    fresh = q.claim(5)  # worker 2 takes the task again at 5
    assert fresh.task_id == "job" and fresh.token != stale.token
    assert q.complete("job", 6, token=stale.token) is False
    assert q.fail("job", 6, token=stale.token) is None
    assert q.extend("job", stale.token, 6) is None
    assert q.release("job", stale.token, 6) is False
    assert q.status("job", 6) == "RESERVED"
    assert q.complete("job", 7, token=fresh.token) is True
    assert q.status("job", 7) == "COMPLETED"


def test_complete_with_the_winning_token_is_safe_to_retry(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add("job", 0)
    lease = q.claim(0)
    assert q.complete("job", 1, token=lease.token) is True
    assert q.complete("job", 2, token=lease.token) is True  # the same attempt did complete
    assert q.complete("job", 2, token=lease.token + 1) is False
    assert q.complete("job", 2) is False  # the core contract: not RESERVED now


def test_extend_keeps_a_long_task_leased(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("long", 0)
    lease = q.claim(0)
    assert q.extend("long", lease.token, 8) == 18
    assert q.status("long", 15) == "RESERVED"
    assert q.extend("long", lease.token, 17, seconds=30) == 47
    assert q.status("long", 46) == "RESERVED"
    assert q.status("long", 47) == "AVAILABLE"  # the extended deadline is inclusive too
    assert q.extend("long", lease.token, 48) is None


def test_extend_after_expiry_fails_even_before_another_claim(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 0)
    lease = q.claim(0)
    assert q.extend("t", lease.token, 10) is None
    assert q.status("t", 10) == "AVAILABLE"


def test_extended_leases_keep_reservation_order_at_equal_deadlines(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    for name in "xyz":
        q.add(name, 0)
    x, y, z = q.claim(0), q.claim(0), q.claim(0)
    # All three now end at 20; expiry order stays the order of reservation.
    for lease in (z, x, y):
        q.extend(lease.task_id, lease.token, 10)
    assert [q.reserve(20) for _ in range(3)] == ["x", "y", "z"]


def test_shortened_and_lengthened_leases_expire_in_deadline_order(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    for name in "abc":
        q.add(name, 0)
    a, _, c = q.claim(0), q.claim(1), q.claim(2)  # deadlines 10, 11, 12
    assert q.extend("c", c.token, 3, seconds=1) == 4  # now before the other two
    assert q.extend("a", a.token, 3, seconds=20) == 23  # now after them
    assert q.stats(3).next_deadline == 4
    assert q.status("c", 4) == "AVAILABLE"
    assert q.stats(4).next_deadline == 11  # a's first deadline, 10, no longer counts
    assert q.status("a", 10) == "RESERVED"
    assert q.status("b", 11) == "AVAILABLE"
    assert [q.reserve(23) for _ in range(3)] == ["c", "b", "a"]


def test_release_gives_the_attempt_back(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    q.add("a", 0)
    q.add("b", 0)
    lease = q.claim(0)
    assert q.release("a", lease.token, 1) is True
    assert q.status("a", 1) == "AVAILABLE"
    assert q.reserve(2) == "b"  # released to the back of the line
    again = q.claim(2)
    assert (again.task_id, again.attempt) == ("a", 1)  # the released attempt did not count


@pytest.mark.parametrize("token", [0, -1, "7", 1.5, True, None])
def test_bad_tokens_are_refused(make_queue: Factory, token: object) -> None:
    q = make_queue(10, 2)
    q.add("t", 0)
    with pytest.raises(InvalidArgument):
        q.extend("t", token, 0)
    with pytest.raises(InvalidArgument):
        q.release("t", token, 0)
    if token is not None:
        with pytest.raises(InvalidArgument):
            q.complete("t", 0, token=token)
    assert q.status("t", 0) == "AVAILABLE"


# --- delays, scheduled tasks, retry backoff -----------------------------------------


def test_delayed_task_waits_then_joins_the_back_of_the_line(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    assert q.add("later", 0, delay=5) is True
    assert q.add("now", 1) is True
    assert q.status("later", 4) == "WAITING"
    assert q.reserve(4) == "now"
    assert q.reserve(4) is None
    assert q.status("later", 5) == "AVAILABLE"
    assert q.reserve(5) == "later"


def test_run_at_schedules_and_wakes_in_time_order(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("c", 0, run_at=30)
    q.add("a", 0, run_at=10)
    q.add("b", 0, run_at=10)  # same time: the order they were added
    q.add("past", 5, run_at=1)  # already due: AVAILABLE at once
    assert q.status("past", 5) == "AVAILABLE"
    assert [q.reserve(40) for _ in range(4)] == ["past", "a", "b", "c"]


def test_delay_zero_is_no_delay(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    q.add("t", 3, delay=0)
    assert q.status("t", 3) == "AVAILABLE"


def test_delay_and_run_at_together_are_refused(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    with pytest.raises(InvalidArgument):
        q.add("t", 0, delay=1, run_at=5)
    with pytest.raises(InvalidArgument):
        q.add("t", 0, delay=-1)
    assert q.status("t", 0) is None


def test_fixed_backoff_after_fail_and_after_expiry(make_queue: Factory) -> None:
    q = make_queue(10, 3, retry=Retry.fixed(7))
    q.add("t", 0)
    q.reserve(0)
    assert q.fail("t", 2, error="boom") == "WAITING"
    assert q.status("t", 8) == "WAITING"
    assert q.status("t", 9) == "AVAILABLE"
    q.reserve(9)  # lease until 19; expiry at 19 -> waits until 26
    assert q.status("t", 25) == "WAITING"
    info = q.info("t", 25)
    assert (info.run_at, info.last_error, info.attempts) == (26, "lease expired", 2)
    assert q.status("t", 26) == "AVAILABLE"


def test_exponential_backoff_without_jitter_doubles_up_to_the_cap(make_queue: Factory) -> None:
    q = make_queue(1, 6, retry=Retry.exponential(base=2, cap=10, jitter=False))
    q.add("t", 0)
    now, waits = 0, []
    for _ in range(5):
        assert q.reserve(now) == "t"
        assert q.fail("t", now) == "WAITING"
        run_at = q.info("t", now).run_at
        waits.append(run_at - now)
        now = run_at
    assert waits == [2, 4, 8, 10, 10]


def test_exponential_backoff_with_full_jitter_stays_within_bounds(make_queue: Factory) -> None:
    q = make_queue(1, 50, retry=Retry.exponential(base=1, cap=8), rng=random.Random(3))
    q.add("t", 0)
    now, waits = 0, []
    for attempt in range(1, 40):
        assert q.reserve(now) == "t"
        q.fail("t", now)
        info = q.info("t", now)
        wait = 0 if info.state == "AVAILABLE" else info.run_at - now
        assert 0 <= wait <= min(8, 2 ** (attempt - 1))
        waits.append(wait)
        now += wait
    assert len(set(waits)) > 10  # really random


def test_expired_lease_whose_backoff_is_already_over_wakes_in_order(make_queue: Factory) -> None:
    q = make_queue(2, 3, retry=Retry.fixed(1))
    q.add("a", 0)
    q.reserve(0)  # lease ends at 2, retry at 3
    q.add("b", 0, run_at=4)
    q.add("c", 0, run_at=3)  # wakes at 3 too, but was queued before a's retry began
    assert [q.reserve(10) for _ in range(3)] == ["c", "a", "b"]


def test_backoff_never_delays_dead(make_queue: Factory) -> None:
    q = make_queue(10, 2, retry=Retry.fixed(100))
    q.add("t", 0)
    q.reserve(0)
    assert q.fail("t", 1) == "WAITING"
    q.reserve(101)
    assert q.fail("t", 102) == "DEAD"


@pytest.mark.parametrize(
    "make",
    [lambda: Retry.fixed(-1), lambda: Retry.exponential(5, 1), lambda: Retry.fixed("3")],
)
def test_bad_retry_policies_are_refused(make: Callable[[], Retry]) -> None:
    with pytest.raises(InvalidConfig):
        make()


# --- payloads and errors ----------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        {"url": "https://example.com/a.jpg", "sizes": [64, 128], "ok": True, "x": None},
        [1, 2.5, "three", {"four": [4]}],
        "just a string with 'quotes' and ; and 日本",
        12345678901234567890,
        b"\x00\x01binary\xff",
        0,
        False,
    ],
)
def test_payloads_come_back_as_stored(make_queue: Factory, payload: object) -> None:
    q = make_queue(10, 2)
    q.add("t", 0, payload=payload)
    assert q.claim(1).payload == payload
    assert q.info("t", 1).payload == payload


def test_tuples_come_back_as_lists(make_queue: Factory) -> None:
    q = make_queue(10, 2)
    q.add("t", 0, payload={"pair": (1, 2)})
    assert q.claim(0).payload == {"pair": [1, 2]}


@pytest.mark.parametrize("payload", [object(), {1, 2}, float("nan"), {"f": lambda: 1}])
def test_unserialisable_payloads_are_refused_and_nothing_is_added(
    make_queue: Factory, payload: object
) -> None:
    q = make_queue(10, 2)
    with pytest.raises(InvalidPayload, match="never pickles"):
        q.add("t", 0, payload=payload)
    assert q.status("t", 0) is None


def test_payload_size_limit(make_queue: Factory) -> None:
    q = make_queue(10, 2, max_payload_bytes=100)
    assert q.add("fits", 0, payload="x" * 98) is True  # 100 bytes as JSON
    with pytest.raises(PayloadTooLarge):
        q.add("big", 0, payload="x" * 99)
    with pytest.raises(PayloadTooLarge):
        q.add("bytes", 0, payload=b"x" * 101)
    assert q.status("big", 0) is None and q.status("bytes", 0) is None


def test_errors_and_attempts_are_recorded(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add("t", 0)
    q.reserve(0)
    q.fail("t", 1, error=ValueError("bad input row 7"))
    info = q.info("t", 1)
    assert (info.state, info.attempts, info.last_error) == (
        "AVAILABLE",
        1,
        "ValueError: bad input row 7",
    )
    q.reserve(2)  # lease until 7
    assert q.info("t", 7).last_error == "lease expired"
    q.reserve(8)
    q.fail("t", 9, error="x" * 10_000)
    info = q.info("t", 9)
    assert info.state == "DEAD" and info.attempts == 3
    assert len(info.last_error) == 4000 and info.last_error.endswith("…")
    with pytest.raises(InvalidArgument):
        q.fail("t", 9, error=42)


def test_info_of_an_unknown_task_is_none(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    assert q.info("nope", 0) is None


# --- dead letters, retention, stats ----------------------------------------------------


def _kill(q: Any, task_id: str, now: int, error: str = "boom") -> None:
    q.add(task_id, now)
    assert q.reserve(now) == task_id
    assert q.fail(task_id, now, error=error) == "DEAD"


def test_dead_letters_list_count_and_redrive(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    _kill(q, "d1", 1, "first")
    _kill(q, "d2", 2, "second")
    _kill(q, "d3", 3)
    q.add("alive", 4)
    dead = q.dead(5)
    assert [(d.task_id, d.attempts, d.last_error) for d in dead] == [
        ("d1", 1, "first"),
        ("d2", 1, "second"),
        ("d3", 1, "boom"),
    ]
    assert [d.finished_at for d in dead] == [1, 2, 3]
    assert [d.task_id for d in q.dead(5, limit=2)] == ["d1", "d2"]
    assert q.stats(5).counts["DEAD"] == 3

    assert q.redrive(6, task_ids=["d2", "alive", "unknown"]) == 1
    assert q.status("d2", 6) == "AVAILABLE"
    assert q.info("d2", 6).attempts == 0
    assert q.info("d2", 6).last_error == "second"  # kept for the record
    assert q.redrive(7) == 2  # all the rest
    assert [q.reserve(8) for _ in range(4)] == ["alive", "d2", "d1", "d3"]


def test_purge_forgets_old_finished_tasks(make_queue: Factory) -> None:
    q = make_queue(10, 1)
    for i, t in enumerate(["c1", "c2", "c3"]):
        q.add(t, i)
        q.reserve(i)
        q.complete(t, i)
    _kill(q, "dead", 3)
    q.add("waiting", 3)
    assert q.purge(10, older_than=8.5) == 2  # c1 and c2 finished at 0 and 1
    assert q.status("c1", 10) is None and q.status("c3", 10) == "COMPLETED"
    assert q.purge(10, states=["DEAD"], older_than=100) == 0
    assert q.purge(10, states=["COMPLETED", "DEAD"]) == 2
    assert q.stats(10).counts == {
        "WAITING": 0, "AVAILABLE": 1, "RESERVED": 0, "COMPLETED": 0, "DEAD": 0, "CANCELLED": 0
    }  # fmt: skip
    assert q.add("c1", 11) is True  # a purged id can be used again
    with pytest.raises(InvalidArgument):
        q.purge(11, states=["AVAILABLE"])


def test_stats(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    empty = q.stats(0)
    assert empty.oldest_available_age is None and empty.next_deadline is None
    q.add("a", 1)
    q.add("b", 2)
    q.add("c", 2)
    q.add("later", 2, run_at=50)
    q.reserve(5)  # a, until 15
    s = q.stats(7)
    assert s.counts == {
        "WAITING": 1, "AVAILABLE": 2, "RESERVED": 1, "COMPLETED": 0, "DEAD": 0, "CANCELLED": 0
    }  # fmt: skip
    assert s.leases == 1
    assert s.oldest_available_age == 5  # b has been available since 2
    assert (s.next_deadline, s.next_run_at) == (15, 50)


# --- batches ------------------------------------------------------------------------------


def test_add_many_and_claim_many(make_queue: Factory) -> None:
    q = make_queue(10, 3)
    assert q.add_many(["a", ("b", {"n": 2}), "a", "c"], 0) == [True, True, False, True]
    leases = q.claim_many(2, 1)
    assert [(x.task_id, x.payload) for x in leases] == [("a", None), ("b", {"n": 2})]
    assert leases[1].token > leases[0].token
    assert [x.task_id for x in q.claim_many(10, 1)] == ["c"]
    assert q.claim_many(10, 1) == []


def test_add_many_gives_counter_values_to_the_tasks_it_adds_alone(make_queue: Factory) -> None:
    """SQLite inserts a batch of new ids in one statement; a batch with an id that
    exists, an id twice or a bytes payload takes another path.  Either way only the
    tasks added take line positions, so later tokens agree on both faces."""
    q = make_queue(10, 3)
    q.add("old", 0)
    batch = [("é-1", "text"), ("n2", [1, {"k": None}]), "n3", ("n\x004", {"ü": "\u2603"})]
    assert q.add_many(batch, 1) == [True] * 4
    assert q.add_many(["n5", "old", "n6", "n5"], 1) == [True, False, True, False]
    assert q.add_many([("b", b"\x00raw"), "n7"], 1) == [True, True]
    assert q.claim(2).token == 10  # old, n1 .. n7 and b took 1 .. 9
    leases = q.claim_many(10, 2)
    assert [(x.task_id, x.payload) for x in leases] == [
        ("é-1", "text"),
        ("n2", [1, {"k": None}]),
        ("n3", None),
        ("n\x004", {"ü": "\u2603"}),
        ("n5", None),
        ("n6", None),
        ("b", b"\x00raw"),
        ("n7", None),
    ]
    assert [x.token for x in leases] == list(range(11, 19))


def test_batches_keep_expiry_first_and_fifo(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add_many(["x", "y"], 0)
    q.claim_many(2, 0)
    q.add_many(["z"], 1)
    # At 5 both leases run out (x then y) behind z.
    assert [x.task_id for x in q.claim_many(3, 5)] == ["z", "x", "y"]


def test_add_many_with_delay(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add_many(["a", "b"], 0, delay=10)
    assert q.claim_many(5, 9) == []
    assert [x.task_id for x in q.claim_many(5, 10)] == ["a", "b"]


def test_a_bad_item_refuses_the_whole_batch(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    with pytest.raises(InvalidTaskId):
        q.add_many(["ok", 7], 0)
    with pytest.raises(InvalidPayload):
        q.add_many(["ok", ("bad", object())], 0)
    with pytest.raises(InvalidArgument):
        q.add_many("abc", 0)
    assert q.status("ok", 0) is None
    with pytest.raises(InvalidArgument):
        q.claim_many(0, 0)


# --- tasks listing -----------------------------------------------------------------------


def test_tasks_lists_by_state_in_the_order_added(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add_many(["a", "b", "c"], 0)
    q.reserve(0)
    assert [t.task_id for t in q.tasks(1)] == ["a", "b", "c"]
    assert [t.task_id for t in q.tasks(1, state="AVAILABLE")] == ["b", "c"]
    assert [t.task_id for t in q.tasks(1, state="RESERVED")] == ["a"]
    assert [t.task_id for t in q.tasks(1, limit=1)] == ["a"]
    with pytest.raises(InvalidArgument):
        q.tasks(1, state="LOST")


def test_ready_tells_whether_a_claim_would_find_work(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    assert q.ready(0) is False
    q.add("later", 0, delay=10)
    assert q.ready(9) is False
    assert q.ready(10) is True  # the wake-up is due, though no call has run it yet
    assert q.claim(10).task_id == "later"
    assert q.ready(11) is False
    assert q.ready(15) is True  # its lease ran out at 15
    assert q.ready(3) is False  # read at the high-water mark, 11: ready moved nothing
    q.add("now", 16)
    assert q.ready(16) is True


def test_complete_and_claim_is_one_call_that_does_both(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add_many(["a", "b"], 0)
    first = q.claim(0)
    done, second = q.complete_and_claim("a", 1, token=first.token)
    assert done is True and second.task_id == "b" and second.token > first.token
    done, third = q.complete_and_claim("b", 2, token=second.token)
    assert done is True and third is None
    assert q.complete_and_claim("b", 3, token=second.token) == (True, None)  # a retry
    q.add("c", 4)
    stale, fresh = q.claim(4), None
    done, fresh = q.complete_and_claim("c", 9, token=stale.token)  # lease ran out at 9
    assert done is False and fresh.task_id == "c" and fresh.attempt == 2


def test_complete_many_in_one_call(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add_many(["a", "b", "c"], 0)
    a, b, c = q.claim_many(3, 0)
    q.complete("b", 1, token=b.token)
    answers = q.complete_many([a, ("b", b.token), ("c", c.token + 99), ("zz", 1), a], 2)
    assert answers == [True, True, False, False, True]  # b and the second a: retried, True
    assert [q.status(t, 2) for t in "abc"] == ["COMPLETED", "COMPLETED", "RESERVED"]
    assert q.complete_many([], 3) == []
    with pytest.raises(InvalidArgument):
        q.complete_many([("c", "token")], 3)
    with pytest.raises(InvalidArgument):
        q.complete_many("c", 3)
    assert q.complete_many([c], 5) == [False]  # its lease ran out at 5


def test_settle_and_claim_reports_outcomes_then_claims_in_one_call(make_queue: Factory) -> None:
    q = make_queue(5, 3)
    q.add_many(["a", "b", "c", "d", "e"], 0)
    a, b, c = q.claim_many(3, 0)
    q.complete("b", 1, token=b.token)
    done, states, leases = q.settle_and_claim(
        3,
        2,
        completed=[a, ("b", b.token), ("zz", 1)],
        failed=[("c", c.token + 99, "not mine"), ("c", c.token, "boom")],
    )
    assert done == [True, True, False]  # b: a retried completion, True again
    assert states == [None, "AVAILABLE"]  # another lease's token is refused
    # The claim comes after the failure: c, back at the end of the line, is taken too.
    assert [(x.task_id, x.attempt) for x in leases] == [("d", 1), ("e", 1), ("c", 2)]
    assert q.info("c", 2).last_error == "boom"
    d, e, _ = leases
    # A lease that ran out (at 7) is refused by its token; n=0 only reports.
    assert q.settle_and_claim(0, 8, completed=[d], failed=[("e", e.token, None)]) == (
        [False],
        [None],
        [],
    )
    assert [x.task_id for x in q.settle_and_claim(5, 8)[2]] == ["d", "e", "c"]
    for bad in (
        lambda: q.settle_and_claim(-1, 9),
        lambda: q.settle_and_claim(True, 9),
        lambda: q.settle_and_claim(1, 9, completed="a"),
        lambda: q.settle_and_claim(1, 9, failed=[("a", 1)]),
        lambda: q.settle_and_claim(1, 9, failed=[("a", "token", None)]),
        lambda: q.settle_and_claim(1, 9, failed=[("a", 1, 42)]),
    ):
        with pytest.raises(InvalidArgument):
            bad()


# --- payloads that cannot be read back ---------------------------------------------------


def _nested(depth: int) -> Any:
    """A JSON value nesting arrays and objects ``depth`` deep."""
    value: Any = []
    for level in range(depth - 1):
        value = [value] if level % 2 else {"k": value}
    return value


def test_payloads_nested_past_the_limit_are_refused_by_add_and_add_many(
    make_queue: Factory,
) -> None:
    q = make_queue(10, 2)
    deepest = _nested(payload.MAX_DEPTH)
    assert q.add("deepest", 0, payload=deepest) is True
    assert q.add_many([("in-batch", deepest)], 0) == [True]
    for too_deep in (_nested(payload.MAX_DEPTH + 1), _nested(991)):
        with pytest.raises(InvalidPayload, match="nested more than"):
            q.add("too-deep", 0, payload=too_deep)
        with pytest.raises(InvalidPayload, match="nested more than"):
            q.add_many(["fine", ("too-deep", too_deep)], 0)
    assert q.status("too-deep", 0) is None and q.status("fine", 0) is None
    # Brackets inside strings are not nesting.
    assert q.add("brackets", 0, payload=["[{" * 1000, {"k": "]}" * 1000}]) is True
    assert q.claim(1).payload == deepest
    assert q.claim(1).payload == deepest
    assert q.claim(1).payload == ["[{" * 1000, {"k": "]}" * 1000}]


def test_a_payload_that_cannot_be_decoded_is_dead_lettered_and_the_line_moves_on(
    make_queue: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = make_queue(10, 3)
    q.add("poison", 0, payload=_nested(50))
    q.add("next", 0, payload={"n": 1})
    stored = payload.encode(_nested(50), 10**6)
    monkeypatch.setattr(payload, "MAX_DEPTH", 20)  # stored under a higher limit
    lease = q.claim(1)
    assert (lease.task_id, lease.payload) == ("next", {"n": 1})
    info = q.info("poison", 1)
    assert (info.state, info.attempts, info.token, info.finished_at) == ("DEAD", 3, 3, 1)
    assert info.last_error.startswith("payload cannot be decoded: JSON nested more than 20")
    assert isinstance(info.payload, payload.Undecodable)  # inspection shows it as stored
    assert info.payload.text == stored
    assert info.payload.reason.startswith("JSON nested more than 20")
    assert [t.task_id for t in q.dead(1)] == ["poison"]
    assert [t.payload for t in q.tasks(1, state="DEAD")] == [info.payload]
    monkeypatch.setattr(payload, "MAX_DEPTH", 200)  # readable again: redrive brings it back
    assert q.redrive(2, ["poison"]) == 1
    assert q.claim(3).payload == _nested(50)


def _claim_with_little_stack(q: Any, now: float) -> Any:
    """``q.claim(now)`` from about 100 frames below the recursion limit."""

    def descend(left: int) -> Any:
        return q.claim(now) if left <= 0 else descend(left - 1)

    return descend(sys.getrecursionlimit() - len(inspect.stack()) - 100)


def test_a_claim_short_of_stack_never_dead_letters_a_payload_add_accepted(
    make_queue: Factory,
) -> None:
    """Decoding a payload MAX_DEPTH deep needs stack.  A caller whose own stack is
    nearly used up gets RecursionError from the call (nothing changed), not a
    task dead-lettered as undecodable: the text is fine, the caller's stack is not."""
    q = make_queue(10, 3)
    deepest = _nested(payload.MAX_DEPTH)
    q.add("deep", 0, payload=deepest)
    try:
        lease = _claim_with_little_stack(q, 1)
    except RecursionError:  # the call changed nothing: the task is still first in line
        lease = q.claim(1)
    assert (lease.task_id, lease.attempt, lease.payload) == ("deep", 1, deepest)
    assert q.dead(1) == []


def test_claim_many_replaces_tasks_dead_lettered_on_the_way(
    make_queue: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = make_queue(10, 3)
    poison = _nested(30)
    q.add_many([("p1", poison), "a", ("p2", poison), "b", "c", ("p3", poison), "d"], 0)
    monkeypatch.setattr(payload, "MAX_DEPTH", 20)
    assert [lease.task_id for lease in q.claim_many(3, 1)] == ["a", "b", "c"]
    assert [lease.task_id for lease in q.claim_many(3, 1)] == ["d"]
    assert [t.task_id for t in q.dead(1)] == ["p1", "p2", "p3"]
    q.add("p4", 1, payload=_nested(20))
    monkeypatch.setattr(payload, "MAX_DEPTH", 10)
    done, lease = q.complete_and_claim("a", 2, token=q.info("a", 2).token)
    assert (done, lease) == (True, None)
    assert q.status("p4", 2) == "DEAD"


# --- typed errors at the edges ---------------------------------------------------------------


@pytest.mark.parametrize("token", [2**63, 2**64 + 5])
def test_tokens_past_sqlite_integers_are_refused(make_queue: Factory, token: int) -> None:
    q = make_queue(10, 2)
    q.add("t", 0)
    q.claim(0)
    for call in (
        lambda: q.complete("t", 1, token=token),
        lambda: q.fail("t", 1, token=token),
        lambda: q.extend("t", token, 1),
        lambda: q.release("t", token, 1),
        lambda: q.complete_many([("t", token)], 1),
        lambda: q.complete_and_claim("t", 1, token=token),
    ):
        with pytest.raises(InvalidArgument, match="token"):
            call()
    assert q.status("t", 1) == "RESERVED"
    assert q.complete("t", 1, token=2**63 - 1) is False  # the largest token is a valid one


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_an_exception_whose_str_raises_is_still_recorded(make_queue: Factory) -> None:
    q = make_queue(10, 2)
    q.add("t", 0)
    q.claim(0)
    assert q.fail("t", 1, error=_Unprintable()) == "AVAILABLE"
    assert q.info("t", 1).last_error == "_Unprintable: <str() raised RuntimeError>"


@pytest.mark.parametrize(
    "retry",
    [("fixed", -1.0, -1.0), ("exponential", -5.0, 1.0), ("exponential", 5.0, 1.0),
     ("fixed", 1e10, 1e10), ("fixed", "3", "3"), ("exponential_jitter", 1.0, float("nan"))],
)  # fmt: skip
def test_a_retry_policy_built_directly_is_checked_like_the_named_ones(
    retry: tuple[Any, float, float],
) -> None:
    with pytest.raises(InvalidConfig):
        Retry(*retry)


def test_a_retry_policy_built_directly_works_on_both_faces(make_queue: Factory) -> None:
    q = make_queue(10, 3, retry=Retry("fixed", 5, 5))
    q.add("t", 0)
    q.claim(0)
    assert q.fail("t", 1) == "WAITING"
    assert q.info("t", 1).run_at == 6


@pytest.mark.parametrize("rng", [5, "seed", object()])
def test_an_rng_without_random_is_refused_at_construction(make_queue: Factory, rng: object) -> None:
    with pytest.raises(InvalidConfig, match="rng"):
        make_queue(10, 3, rng=rng)


@pytest.mark.parametrize("task_ids", ["abc", b"abc", 5])
def test_redrive_refuses_a_str_or_a_non_iterable_for_task_ids(
    make_queue: Factory, task_ids: object
) -> None:
    q = make_queue(10, 1)
    for task_id in ("a", "b", "c", "abc"):
        q.add(task_id, 0)
        q.claim(0)
        q.fail(task_id, 0)
    with pytest.raises(InvalidArgument, match="task_ids"):
        q.redrive(1, task_ids)
    assert q.counts()["DEAD"] == 4
    assert q.redrive(1, ["abc"]) == 1


def test_leases_and_retries_near_the_time_limit_end_at_it(make_queue: Factory) -> None:
    """A lease taken just before MAX_TIME ends at MAX_TIME, which a call can reach."""
    q = make_queue(30, 3, retry=Retry.fixed(60))
    end = MAX_TIME
    q.add_many(["leased", "extended", "claimed"], 0)
    assert q.claim(end - 1).deadline == end
    assert q.extend("extended", q.claim(end - 20).token, end - 1, seconds=100) == end
    assert [lease.deadline for lease in q.claim_many(5, end - 1)] == [end]
    assert q.fail("claimed", end - 1) == "WAITING"
    assert q.info("claimed", end - 1).run_at == end
    assert q.stats(end - 1).next_deadline == end
    assert [q.status(t, end) for t in ("leased", "extended", "claimed")] == ["AVAILABLE"] * 3
    at_the_limit = q.claim(end)  # as the README says: run out as it is handed out
    assert at_the_limit.deadline == end
    assert q.complete(at_the_limit.task_id, end, token=at_the_limit.token) is False
    assert q.info(at_the_limit.task_id, end).attempts == 2


def test_reserve_hands_out_the_id_without_reading_the_payload(
    make_queue: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = make_queue(10, 3)
    q.add("poison", 0, payload=_nested(30))
    monkeypatch.setattr(payload, "MAX_DEPTH", 20)
    assert q.reserve(1) == "poison"
    info = q.info("poison", 1)
    assert info.state == "RESERVED" and isinstance(info.payload, payload.Undecodable)
    assert q.complete("poison", 2) is True
