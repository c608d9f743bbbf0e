"""Stateful (model-based) tests: random call sequences, every answer compared.

* ``DurableVsMemory``: sqlq.Queue (on each durable backend) against sqlq.WorkQueue,
  call for call.
* ``MemoryVsModel``: sqlq.WorkQueue against ``BruteForceQueue`` below, a model
  written to be obviously correct rather than fast.
* ``FeaturesDurableVsMemory``: Queue against WorkQueue again, with the worker
  features too: tokens, heartbeats, release, delays, retry backoff, payloads,
  errors, dead letters, purge, batches, inspection, periodic tasks, cancel and pause,
  dedupe keys, priorities (with each queue's aging, strict ones included);
  ``LimitsDurableVsMemory``: grouped tasks, per-group limits and round robin.
* ``test_long_histories_...``: Queue against WorkQueue again without hypothesis:
  long seeded random histories, rich in calls that find lease expiries and
  wake-ups due together (the order of those is where the faces could differ).

The machines drive time the same way: a current time that moves forward by
small steps and now and then by a jump past several leases and delays, plus
calls that pass a time below it ("late" calls, which the contract handles at
the high-water mark).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import hypothesis.strategies as st
import pytest
import sqlalchemy as sa
from databases import Databases, queue_options
from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import sqlq
from sqlq.errors import InvalidTaskId
from sqlq.schedule import Schedule

#: Seconds of CPU each: run first under pytest-xdist, and not in the inner loop
#: (README, Development: -m "not processes and not faults and not slow").
pytestmark = pytest.mark.slow

#: Every run explores the same examples: hypothesis derives its seed from the
#: test's name (derandomize) and keeps no example database, and the plain
#: histories use seeds 0, 1, ...  SQLQ_TEST_SEED=<n> explores seed n instead (the
#: plain histories print the seed of one that fails).
SEED = None if os.environ.get("SQLQ_TEST_SEED") is None else int(os.environ["SQLQ_TEST_SEED"])

# A small pool, so that calls often hit the same task.  The odd ones check that
# ids travel through SQL as data: quotes, a statement separator, non-ASCII text.
TASK_IDS = ["a", "b", "a'b", "x; DROP TABLE sqlq_tasks;--", "日本"]

task_ids = st.sampled_from(TASK_IDS)
leases = st.integers(min_value=0, max_value=6)
attempt_limits = st.integers(min_value=1, max_value=3)

# How a call's time relates to the current time: ("ahead", step) moves the
# current time forward by step (0 most often, fractions now and then, and jumps
# past several leases and retry delays at once, so that one call finds expiries
# and wake-ups due together), and ("late", back) passes a time `back` below the
# current time without moving it.
time_moves = st.one_of(
    st.tuples(st.just("ahead"), st.integers(min_value=0, max_value=4)),
    st.tuples(st.just("ahead"), st.sampled_from([0.5, 1.5])),
    st.tuples(st.just("ahead"), st.sampled_from([6, 10, 25])),
    st.tuples(st.just("late"), st.integers(min_value=1, max_value=5)),
)


def _settings(max_examples: int, stateful_step_count: int) -> settings:
    """Reproducible runs (see SEED); no deadline: SQLite calls vary in speed."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=stateful_step_count,
        derandomize=SEED is None,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
    )


def _seeded(machine: type[RuleBasedStateMachine]) -> type[RuleBasedStateMachine]:
    """The machine, run from SQLQ_TEST_SEED when it is set."""
    return machine if SEED is None else seed(SEED)(machine)


# ---------------------------------------------------------------------------------
# The brute-force model
# ---------------------------------------------------------------------------------

AVAILABLE, RESERVED, COMPLETED, DEAD = "AVAILABLE", "RESERVED", "COMPLETED", "DEAD"


class _ModelTask:
    def __init__(self) -> None:
        self.state = AVAILABLE
        self.attempts = 0
        self.deadline: float | None = None  # set exactly while RESERVED
        self.reservation = 0  # which reservation (1, 2, ...) holds it while RESERVED


class BruteForceQueue:
    """The contract, done the slow and plain way.

    Before every call: raise the clock to ``now`` if it is higher, then look at
    every task; the RESERVED ones whose deadline is <= the clock fail, sorted by
    (deadline, reservation number).  The available line is a plain list.
    """

    def __init__(self, lease_seconds: float, max_attempts: int) -> None:
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.tasks: dict[str, _ModelTask] = {}
        self.line: list[str] = []
        self.clock: float = 0
        self.reservations = 0

    def _check_id(self, task_id: str) -> None:
        if task_id == "":
            raise InvalidTaskId("task id must not be empty")

    def _tick(self, now: float) -> float:
        self.clock = max(self.clock, now)
        due = [
            (task.deadline, task.reservation, task_id)
            for task_id, task in self.tasks.items()
            if task.state == RESERVED and task.deadline is not None
            if task.deadline <= self.clock
        ]
        for _deadline, _reservation, task_id in sorted(due):
            self._fail(task_id)
        return self.clock

    def _fail(self, task_id: str) -> str:
        task = self.tasks[task_id]
        task.deadline = None
        if task.attempts < self.max_attempts:
            task.state = AVAILABLE
            self.line.append(task_id)
        else:
            task.state = DEAD
        return task.state

    def add(self, task_id: str, now: float) -> bool:
        self._check_id(task_id)
        self._tick(now)
        if task_id in self.tasks:
            return False
        self.tasks[task_id] = _ModelTask()
        self.line.append(task_id)
        return True

    def reserve(self, now: float) -> str | None:
        now = self._tick(now)
        if not self.line:
            return None
        task_id = self.line.pop(0)
        task = self.tasks[task_id]
        self.reservations += 1
        task.state = RESERVED
        task.attempts += 1
        task.deadline = now + self.lease_seconds
        task.reservation = self.reservations
        return task_id

    def complete(self, task_id: str, now: float) -> bool:
        self._check_id(task_id)
        self._tick(now)
        task = self.tasks.get(task_id)
        if task is None or task.state != RESERVED:
            return False
        task.state = COMPLETED
        task.deadline = None
        return True

    def fail(self, task_id: str, now: float) -> str | None:
        self._check_id(task_id)
        self._tick(now)
        task = self.tasks.get(task_id)
        if task is None or task.state != RESERVED:
            return None
        return self._fail(task_id)

    def status(self, task_id: str, now: float) -> str | None:
        self._check_id(task_id)
        self._tick(now)
        task = self.tasks.get(task_id)
        return None if task is None else task.state


# ---------------------------------------------------------------------------------
# The shared machine: the same calls on two queues, answers compared
# ---------------------------------------------------------------------------------


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", answer) or ("raised", exception type) - comparable across faces.  What
    purge answers is compared whole: the tasks removed and the groups forgotten."""
    try:
        answer = call()
    except Exception as exc:
        return ("raised", type(exc))
    if isinstance(answer, sqlq.Purged):
        return ("ok", (int(answer), answer.groups))
    return ("ok", answer)


class TwoQueues(RuleBasedStateMachine):
    """Subclasses build ``self.left`` and ``self.right`` in an initialize rule."""

    left: Any
    right: Any

    def __init__(self) -> None:
        super().__init__()
        self.now: float = 0  # the current time (the high-water mark of the calls)
        self.log: list[str] = []  # the calls so far, for failure messages

    def _time(self, move: tuple[str, float]) -> float:
        kind, amount = move
        if kind == "ahead":
            self.now += amount
            return self.now
        return max(0, self.now - amount)

    def _same(
        self, method: str, /, *args: Any, log: bool = True, may_raise: bool = False, **kwargs: Any
    ) -> Any:
        """Both faces' answers to the call, which must agree (and be answers, not
        errors, unless ``may_raise``: then the same error type)."""
        if log:
            shown = [*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]
            self.log.append(f"{method}({', '.join(shown)})")
        left = _outcome(lambda: getattr(self.left, method)(*args, **kwargs))
        right = _outcome(lambda: getattr(self.right, method)(*args, **kwargs))
        assert left == right, (
            f"{type(self.left).__name__} answered {left}, "
            f"{type(self.right).__name__} answered {right}; calls: {'; '.join(self.log)}"
        )
        kind, answer = left
        assert kind == "ok" or may_raise, f"{method}{args!r} raised {answer.__name__} on both faces"
        return answer

    @rule(task_id=task_ids, move=time_moves)
    def add(self, task_id: str, move: tuple[str, float]) -> None:
        self._same("add", task_id, self._time(move))

    @rule(move=time_moves)
    def reserve(self, move: tuple[str, float]) -> None:
        self._same("reserve", self._time(move))

    @rule(task_id=task_ids, move=time_moves)
    def complete(self, task_id: str, move: tuple[str, float]) -> None:
        self._same("complete", task_id, self._time(move))

    @rule(task_id=task_ids, move=time_moves)
    def fail(self, task_id: str, move: tuple[str, float]) -> None:
        self._same("fail", task_id, self._time(move))

    @rule(task_id=task_ids, move=time_moves)
    def status(self, task_id: str, move: tuple[str, float]) -> None:
        self._same("status", task_id, self._time(move))

    @rule(
        name=st.sampled_from(["add", "complete", "fail", "status"]),
        ahead=st.integers(min_value=0, max_value=4),
    )
    def empty_id_is_refused(self, name: str, ahead: int) -> None:
        """Both faces raise InvalidTaskId for "", and the refused call changes nothing.

        The call passes a time ahead of the current one without moving the
        current time: a face that let the refused call raise its clock (and
        expire leases) would give different answers later.
        """
        self.log.append(f"{name}('', {self.now + ahead!r}) -> InvalidTaskId")
        for queue in (self.left, self.right):
            outcome = _outcome(lambda q=queue: getattr(q, name)("", self.now + ahead))
            assert outcome == ("raised", InvalidTaskId), (
                f"{type(queue).__name__}.{name}('') gave {outcome}"
            )


# ---------------------------------------------------------------------------------
# 1. sqlq.Queue (each durable backend) against sqlq.WorkQueue
# ---------------------------------------------------------------------------------


class OnDurable(TwoQueues):
    """A machine whose left face is a sqlq.Queue on a new database of each example."""

    #: The databases of the test that runs the machine (see run_on).
    new_url: Databases

    def open_durable(self, lease_seconds: int, max_attempts: int, **options: Any) -> sqlq.Queue:
        # One database per example, given back at its end (teardown): the next example
        # may get the same PostgreSQL schema, emptied (tests/databases.py).
        databases = self.__dict__.setdefault("databases", ExitStack())
        url = databases.enter_context(self.new_url.one())
        return sqlq.Queue(
            url,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            **queue_options(url),
            **options,
        )

    def teardown(self) -> None:
        if getattr(self, "left", None) is not None:
            self.left.close()
        if "databases" in self.__dict__:
            self.databases.close()


def run_on(
    machine: type[OnDurable],
    new_url: Databases,
    monkeypatch: pytest.MonkeyPatch,
    machine_settings: settings,
) -> None:
    """Run ``machine`` with its Queues on the databases ``new_url`` gives."""
    monkeypatch.setattr(machine, "new_url", staticmethod(new_url), raising=False)
    run_state_machine_as_test(_seeded(machine), settings=machine_settings)


class DurableVsMemory(OnDurable):
    @initialize(lease_seconds=leases, max_attempts=attempt_limits)
    def open_queues(self, lease_seconds: int, max_attempts: int) -> None:
        self.log.append(f"lease_seconds={lease_seconds}, max_attempts={max_attempts}")
        self.left = self.open_durable(lease_seconds, max_attempts)
        self.right = sqlq.WorkQueue(lease_seconds, max_attempts)


def test_durable_vs_memory(
    migrated_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_on(
        DurableVsMemory,
        migrated_url,
        monkeypatch,
        _settings(max_examples=150, stateful_step_count=40),
    )


# ---------------------------------------------------------------------------------
# 2. sqlq.WorkQueue against the brute-force model
# ---------------------------------------------------------------------------------


class MemoryVsModel(TwoQueues):
    @initialize(lease_seconds=leases, max_attempts=attempt_limits)
    def open_queues(self, lease_seconds: int, max_attempts: int) -> None:
        self.log.append(f"lease_seconds={lease_seconds}, max_attempts={max_attempts}")
        self.left = sqlq.WorkQueue(lease_seconds, max_attempts)
        self.right = BruteForceQueue(lease_seconds, max_attempts)

    @invariant()
    def every_status_agrees(self) -> None:
        """Cheap here, so look at the whole queue after every step (at the current time)."""
        if getattr(self, "left", None) is None:
            return
        for task_id in TASK_IDS:
            self._same("status", task_id, self.now, log=False)


MemoryVsModel.TestCase.settings = _settings(max_examples=400, stateful_step_count=60)
TestMemoryVsModel = _seeded(MemoryVsModel).TestCase


# ---------------------------------------------------------------------------------
# 3. The worker features: Queue against WorkQueue
# ---------------------------------------------------------------------------------

retry_policies = st.one_of(
    st.just(sqlq.Retry.immediate()),
    st.builds(sqlq.Retry.fixed, st.sampled_from([0.5, 1, 3])),
    st.builds(
        lambda base, cap: sqlq.Retry.exponential(base, cap, jitter=False),
        st.sampled_from([0.5, 1]),
        st.sampled_from([1, 4]),
    ),
)
# Task names (a few; None most often) and the per-task options that replace the
# queue's, so that histories mix tasks of different max_attempts and retry policies.
names = st.sampled_from([None, None, "resize", "mail"])
own_attempts = st.sampled_from([None, None, 1, 2, 4])
own_retries = st.one_of(st.none(), st.none(), retry_policies)
payloads = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(0, 3), max_size=3),
    st.dictionaries(st.sampled_from(["k", "v"]), st.integers(0, 3), max_size=2),
)
#: Priorities of adds (0 most often) and the queues' aging (None: strict priorities):
#: agings shorter and longer than the time steps, so that waits outweigh priorities
#: sometimes and never.
priorities = st.sampled_from([0, 0, 0, 1, -1, 2])
agings = st.sampled_from([None, 0.5, 3, 60])
#: Results of completions (JSON values).
results = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=5), st.lists(st.none()))


#: Periodic tasks ticked by FeaturesDurableVsMemory: short periods, so that calls find
#: ticks due, missed ones (each policy), and the tasks of ticks among the others.
SCHEDULES = [
    Schedule("s3", every=3, catch_up="all"),
    Schedule("s5", every=5, task="t", kwargs={"k": 1}, with_tick=True, max_attempts=2),
    Schedule("s7", every=7, catch_up="none", grace=2),
    Schedule("m", cron="* * * * *", catch_up="all"),
]


class FeaturesDurableVsMemory(OnDurable):
    @initialize(
        lease_seconds=leases, max_attempts=attempt_limits, retry=retry_policies, aging=agings
    )
    def open_queues(
        self, lease_seconds: int, max_attempts: int, retry: sqlq.Retry, aging: float | None
    ) -> None:
        self.log.append(
            f"lease_seconds={lease_seconds}, max_attempts={max_attempts}, {retry}, {aging=}"
        )
        self.tokens: list[int] = [1, 2]
        self.leases: list[tuple[str, int]] = []  # (task id, token) of every lease handed out
        self.left = self.open_durable(lease_seconds, max_attempts, retry=retry, aging=aging)
        self.right = sqlq.WorkQueue(lease_seconds, max_attempts, retry=retry, aging=aging)

    def _token(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(self.tokens))

    def _remember(self, lease: Any) -> None:
        if lease is not None:
            self.tokens.append(lease.token)
            self.leases.append((lease.task_id, lease.token))

    @rule(
        task_id=task_ids,
        move=time_moves,
        payload=payloads,
        delay=st.sampled_from([None, 0, 1, 2, 2.5, 3, 6]),
        name=names,
        max_attempts=own_attempts,
        retry=own_retries,
        priority=priorities,
    )
    def add_with_payload(
        self,
        task_id: str,
        move: Any,
        payload: Any,
        delay: Any,
        name: Any,
        max_attempts: Any,
        retry: Any,
        priority: int,
    ) -> None:
        self._same(
            "add",
            task_id,
            self._time(move),
            payload=payload,
            delay=delay,
            name=name,
            max_attempts=max_attempts,
            retry=retry,
            priority=priority,
        )

    @rule(
        task_id=task_ids,
        move=time_moves,
        key=st.sampled_from(["k", "k2"]),
        on_key=st.sampled_from([None, "refuse", "merge", "debounce", "debounce"]),
        window=st.sampled_from([None, None, 0, 2, 10]),
        payload=st.one_of(st.none(), st.integers(0, 3)),
        delay=st.sampled_from([None, None, 0, 1, 3, 6]),
        priority=priorities,
    )
    def add_with_key(
        self,
        task_id: str,
        move: Any,
        key: str,
        on_key: Any,
        window: Any,
        payload: Any,
        delay: Any,
        priority: int,
    ) -> None:
        """Dedupe keys (sqlq.keys): two keys, so that adds often find one held, by a
        task in any state (retried, finished within the window, purged, redriven),
        with priorities (a debounce moves a task by its own)."""
        self._same(
            "add",
            task_id,
            self._time(move),
            payload=payload,
            delay=delay,
            priority=priority,
            key=key,
            on_key=on_key,
            key_window=window,
        )

    @rule(move=time_moves)
    def reserve(self, move: tuple[str, float]) -> None:
        self._same("reserve", self._time(move))

    @rule(move=time_moves)
    def claim(self, move: Any) -> None:
        self._remember(self._same("claim", self._time(move)))

    @rule(n=st.integers(1, 3), move=time_moves)
    def claim_many(self, n: int, move: Any) -> None:
        for lease in self._same("claim_many", n, self._time(move)):
            self._remember(lease)

    @rule(items=st.lists(st.tuples(task_ids, st.integers(1, 12)), max_size=3), move=time_moves)
    def complete_many(self, items: list[tuple[str, int]], move: Any) -> None:
        self._same("complete_many", items, self._time(move))

    @rule(
        items=st.lists(
            st.one_of(st.tuples(task_ids, payloads), st.tuples(task_ids, payloads, names)),
            max_size=3,
        ),
        move=time_moves,
        max_attempts=own_attempts,
        retry=own_retries,
        priority=priorities,
    )
    def add_many(
        self, items: list[Any], move: Any, max_attempts: Any, retry: Any, priority: int
    ) -> None:
        self._same(
            "add_many",
            items,
            self._time(move),
            max_attempts=max_attempts,
            retry=retry,
            priority=priority,
        )

    @rule(task_id=task_ids, move=time_moves, data=st.data())
    def complete_with_token(self, task_id: str, move: Any, data: st.DataObject) -> None:
        self._same("complete", task_id, self._time(move), token=self._token(data))

    @rule(task_id=task_ids, move=time_moves, data=st.data(), result=results)
    def complete_and_claim(self, task_id: str, move: Any, data: st.DataObject, result: Any) -> None:
        _, lease = self._same(
            "complete_and_claim", task_id, self._time(move), token=self._token(data), result=result
        )
        self._remember(lease)

    @rule(task_id=task_ids, move=time_moves, data=st.data(), result=results)
    def complete_with_result(
        self, task_id: str, move: Any, data: st.DataObject, result: Any
    ) -> None:
        self._same("complete", task_id, self._time(move), token=self._token(data), result=result)

    @rule(
        items=st.lists(st.tuples(task_ids, st.integers(1, 12), results), max_size=3),
        move=time_moves,
    )
    def complete_many_with_results(self, items: list[tuple[str, int, Any]], move: Any) -> None:
        self._same("complete_many", items, self._time(move))

    @rule(task_id=task_ids, move=time_moves)
    def result(self, task_id: str, move: Any) -> None:
        self._same("result", task_id, self._time(move), may_raise=True)  # NoResult, TaskDead

    @rule(
        task_id=task_ids,
        move=time_moves,
        data=st.data(),
        value=st.sampled_from([None, 0, 0.25, 1, -3.5]),
        message=st.sampled_from([None, "", "half way", "é"]),
    )
    def progress(
        self, task_id: str, move: Any, data: st.DataObject, value: Any, message: Any
    ) -> None:
        token = self._token(data)
        self._same("progress", task_id, token, value, message, now=self._time(move))

    @rule(
        n=st.integers(0, 3),
        move=time_moves,
        data=st.data(),
        completed=st.lists(st.tuples(task_ids, results), max_size=2),
        failed=st.lists(
            st.tuples(task_ids, st.sampled_from([None, "boom"]), st.booleans()), max_size=2
        ),
    )
    def settle_and_claim(
        self,
        n: int,
        move: Any,
        data: st.DataObject,
        completed: list[tuple[str, Any]],
        failed: list[tuple[str, Any, bool]],
    ) -> None:
        _, _, leases = self._same(
            "settle_and_claim",
            n,
            self._time(move),
            completed=[(task_id, self._token(data), result) for task_id, result in completed],
            failed=[  # (id, token, error), or with retry=False: DEAD at once
                (task_id, self._token(data), error, *(() if retry else (False,)))
                for task_id, error, retry in failed
            ],
        )
        for lease in leases:
            self._remember(lease)

    @rule(
        task_id=task_ids,
        move=time_moves,
        data=st.data(),
        error=st.sampled_from([None, "boom"]),
        retry=st.sampled_from([True, True, False]),
    )
    def fail_with_token(
        self, task_id: str, move: Any, data: st.DataObject, error: Any, retry: bool
    ) -> None:
        self._same(
            "fail", task_id, self._time(move), token=self._token(data), error=error, retry=retry
        )

    @rule(
        task_id=task_ids, move=time_moves, data=st.data(), seconds=st.sampled_from([None, 0, 2, 5])
    )
    def extend(self, task_id: str, move: Any, data: st.DataObject, seconds: Any) -> None:
        self._same("extend", task_id, self._token(data), self._time(move), seconds=seconds)

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), seconds=st.sampled_from([1, 2, 3]))
    def lease_ends_as_a_task_wakes(self, data: st.DataObject, seconds: int) -> None:
        """A lease moved to end when a new delayed task wakes, then the time of both and
        the front of the line: two events due at one time, the lease's token older than
        the wake-up's order, and their order shows in the line."""
        task_id, token = data.draw(st.sampled_from(self.leases[-3:]))  # mostly live
        self._same("extend", task_id, token, self.now, seconds=seconds)
        self._same("add", f"new{len(self.log)}", self.now, delay=seconds)
        self.now += seconds
        for lease in self._same("claim_many", len(TASK_IDS), self.now):
            self._remember(lease)

    @rule(task_id=task_ids, move=time_moves, data=st.data())
    def release(self, task_id: str, move: Any, data: st.DataObject) -> None:
        self._same("release", task_id, self._token(data), self._time(move))

    @rule(task_id=task_ids, move=time_moves)
    def cancel(self, task_id: str, move: Any) -> None:
        self._same("cancel", task_id, self._time(move))

    @precondition(lambda self: self.leases)
    @rule(data=st.data(), move=time_moves)
    def cancel_a_lease(self, data: st.DataObject, move: Any) -> None:
        """Cancel a task that was leased (running, most likely: a stop request)."""
        task_id, _ = data.draw(st.sampled_from(self.leases[-3:]))
        self._same("cancel", task_id, self._time(move))

    @rule(task_id=task_ids, move=time_moves, data=st.data())
    def heartbeat(self, task_id: str, move: Any, data: st.DataObject) -> None:
        self._same("heartbeat", task_id, self._token(data), self._time(move))

    @rule(pause=st.booleans(), move=time_moves)
    def pause_or_resume(self, pause: bool, move: Any) -> None:
        self._same("pause" if pause else "resume", self._time(move))
        assert self.left.paused == self.right.paused

    @rule(task_id=task_ids, move=time_moves)
    def info(self, task_id: str, move: Any) -> None:
        self._same("info", task_id, self._time(move))

    @rule(move=time_moves)
    def stats(self, move: Any) -> None:
        self._same("stats", self._time(move))

    @rule(
        move=time_moves,
        state=st.sampled_from([None, "WAITING", "AVAILABLE", "DEAD", "CANCELLED"]),
    )
    def tasks(self, move: Any, state: Any) -> None:
        self._same("tasks", self._time(move), state=state)

    @rule(move=time_moves)
    def dead(self, move: Any) -> None:
        self._same("dead", self._time(move))

    @rule(move=time_moves, ids=st.one_of(st.none(), st.lists(task_ids, max_size=2)))
    def redrive(self, move: Any, ids: Any) -> None:
        self._same("redrive", self._time(move), task_ids=ids)

    @rule(
        move=time_moves,
        states=st.sampled_from(
            [["COMPLETED"], ["DEAD"], ["COMPLETED", "DEAD"], ["CANCELLED", "COMPLETED"]]
        ),
        older_than=st.sampled_from([0, 2]),
    )
    def purge(self, move: Any, states: list[str], older_than: int) -> None:
        self._same("purge", self._time(move), states=states, older_than=older_than)

    @rule(move=time_moves)
    def ready(self, move: Any) -> None:
        self._same("ready", self._time(move))

    @rule(schedule=st.sampled_from(SCHEDULES), move=time_moves)
    def tick(self, schedule: Schedule, move: Any) -> None:
        self._same("tick", schedule, self._time(move))


def test_features_durable_vs_memory(
    migrated_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    features = _settings(max_examples=150, stateful_step_count=50)
    run_on(FeaturesDurableVsMemory, migrated_url, monkeypatch, features)


#: LimitsDurableVsMemory's tasks, their groups (None: no group) and the limits it sets.
LIMIT_IDS = [*(f"t{i}" for i in range(7)), "a'b"]
limit_ids = st.sampled_from(LIMIT_IDS)
groups = st.sampled_from([None, "g1", "g1", "g2", "g'3"])
limited_groups = st.sampled_from([None, "g1", "g2", "g'3"])  # None: the queue's default
concurrencies = st.sampled_from([None, 1, 1, 2])
rates = st.sampled_from([(None, None), (None, None), (1, None), (1, 2), (2, 5), (3, 1.5)])


class LimitsDurableVsMemory(OnDurable):
    """Queue against WorkQueue with grouped tasks, per-group limits (and the queue's
    default) set and removed as it goes, and round robin between groups or not:
    claims meet groups at their concurrency limit or waiting out their rate, and
    every end of a lease (completion, failure, release, cancel, expiry) frees a slot."""

    @initialize(
        lease_seconds=leases,
        max_attempts=attempt_limits,
        retry=st.sampled_from([sqlq.Retry.immediate(), sqlq.Retry.fixed(2)]),
        fair=st.booleans(),
        aging=agings,
    )
    def open_queues(
        self,
        lease_seconds: int,
        max_attempts: int,
        retry: sqlq.Retry,
        fair: bool,
        aging: float | None,
    ) -> None:
        self.log.append(f"lease_seconds={lease_seconds}, max_attempts={max_attempts}, {retry}")
        self.log.append(f"{fair=}, {aging=}")
        self.leases: list[tuple[str, int]] = [("t0", 1)]  # (task id, token) handed out
        options = {"retry": retry, "fair": fair, "aging": aging}
        self.left = self.open_durable(lease_seconds, max_attempts, **options)
        self.right = sqlq.WorkQueue(lease_seconds, max_attempts, **options)

    def _lease(self, data: st.DataObject) -> tuple[str, int]:
        return data.draw(st.sampled_from(self.leases[-4:]))

    @rule(
        task_id=limit_ids,
        move=time_moves,
        group=groups,
        delay=st.sampled_from([None, 2]),
        priority=priorities,
    )
    def add(  # type: ignore[override]
        self, task_id: str, move: Any, group: Any, delay: Any, priority: int
    ) -> None:
        self._same("add", task_id, self._time(move), group=group, delay=delay, priority=priority)

    @rule(
        task_id=limit_ids,
        move=time_moves,
        group=groups,
        key=st.sampled_from(["k", "k2"]),
        on_key=st.sampled_from([None, "merge", "debounce"]),
        delay=st.sampled_from([None, 0, 3]),
        priority=priorities,
    )
    def add_with_key(
        self, task_id: str, move: Any, group: Any, key: str, on_key: Any, delay: Any, priority: int
    ) -> None:
        """A keyed add in a group: a debounce moves the group's front, or its task
        out of the line for a while."""
        options = {"key": key, "on_key": on_key, "delay": delay, "priority": priority}
        self._same("add", task_id, self._time(move), group=group, **options)

    @rule(items=st.lists(limit_ids, max_size=4), move=time_moves, group=groups, priority=priorities)
    def add_many(self, items: list[str], move: Any, group: Any, priority: int) -> None:
        self._same("add_many", items, self._time(move), group=group, priority=priority)

    @rule(data=st.data(), move=time_moves, seconds=st.sampled_from([1, 5]))
    def extend_a_lease(self, data: st.DataObject, move: Any, seconds: int) -> None:
        task_id, token = self._lease(data)
        self._same("extend", task_id, token, self._time(move), seconds=seconds)

    @rule(data=st.data(), move=time_moves, n=st.integers(0, 2))
    def settle_and_claim(self, data: st.DataObject, move: Any, n: int) -> None:
        task_id, token = self._lease(data)
        _, _, leases = self._same(
            "settle_and_claim", n, self._time(move), completed=[(task_id, token)]
        )
        self.leases.extend((lease.task_id, lease.token) for lease in leases)

    @rule(
        move=time_moves,
        states=st.sampled_from([["COMPLETED"], ["COMPLETED", "DEAD", "CANCELLED"]]),
    )
    def purge(self, move: Any, states: list[str]) -> None:
        """Finished tasks and idle groups forgotten (the DEAD ones' too, which a
        redrive may bring back): how many of each must agree, and so must every claim
        after (limits, rates, round robin)."""
        self._same("purge", self._time(move), states=states)

    @rule(n=st.integers(1, 3), move=time_moves)
    def claim_many(self, n: int, move: Any) -> None:
        for lease in self._same("claim_many", n, self._time(move)):
            self.leases.append((lease.task_id, lease.token))

    @rule(move=time_moves)
    def claim(self, move: Any) -> None:
        lease = self._same("claim", self._time(move))
        if lease is not None:
            self.leases.append((lease.task_id, lease.token))

    @rule(data=st.data(), move=time_moves)
    def complete_a_lease(self, data: st.DataObject, move: Any) -> None:
        task_id, token = self._lease(data)
        self._same("complete", task_id, self._time(move), token=token)

    @rule(data=st.data(), move=time_moves, retry=st.booleans())
    def fail_a_lease(self, data: st.DataObject, move: Any, retry: bool) -> None:
        task_id, token = self._lease(data)
        self._same("fail", task_id, self._time(move), token=token, retry=retry)

    @rule(data=st.data(), move=time_moves)
    def release_a_lease(self, data: st.DataObject, move: Any) -> None:
        task_id, token = self._lease(data)
        self._same("release", task_id, token, self._time(move))

    @rule(data=st.data(), move=time_moves)
    def complete_one_and_claim(self, data: st.DataObject, move: Any) -> None:
        task_id, token = self._lease(data)
        _, lease = self._same("complete_and_claim", task_id, self._time(move), token=token)
        if lease is not None:
            self.leases.append((lease.task_id, lease.token))

    @rule(task_id=limit_ids, move=time_moves)
    def cancel(self, task_id: str, move: Any) -> None:
        self._same("cancel", task_id, self._time(move))

    @rule(move=time_moves)
    def redrive(self, move: Any) -> None:
        self._same("redrive", self._time(move))

    @rule(group=limited_groups, concurrency=concurrencies, rate=rates, move=time_moves)
    def set_limit(self, group: Any, concurrency: Any, rate: Any, move: Any) -> None:
        starts, per = rate
        self._same(
            "set_limit", group, self._time(move), concurrency=concurrency, rate=starts, per=per
        )

    @rule(group=limited_groups, move=time_moves)
    def remove_limit(self, group: Any, move: Any) -> None:
        self._same("remove_limit", group, self._time(move))

    @rule(move=time_moves)
    def ready_limits_and_groups(self, move: Any) -> None:
        now = self._time(move)
        self._same("ready", now)
        self._same("limits", now)
        self._same("groups", now)

    @rule(move=time_moves)
    def stats(self, move: Any) -> None:
        self._same("stats", self._time(move))

    @rule(task_id=limit_ids, move=time_moves)
    def info(self, task_id: str, move: Any) -> None:
        self._same("info", task_id, self._time(move))

    @rule(pause=st.booleans(), move=time_moves)
    def pause_or_resume(self, pause: bool, move: Any) -> None:
        self._same("pause" if pause else "resume", self._time(move))


def test_limits_durable_vs_memory(
    migrated_url: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = _settings(max_examples=120, stateful_step_count=50)
    run_on(LimitsDurableVsMemory, migrated_url, monkeypatch, limited)


# ---------------------------------------------------------------------------------
# 4. Long seeded histories: Queue against WorkQueue, no hypothesis
# ---------------------------------------------------------------------------------

HISTORY_IDS = [f"t{i}" for i in range(10)]
HISTORY_CALLS = 300
#: Per history: seeds 0, 1, ... (or just SQLQ_TEST_SEED when set).
HISTORY_SEEDS = range(60) if SEED is None else [SEED]


TASK_TIMES = sa.table("sqlq_tasks", sa.column("deadline"), sa.column("run_at"))
#: The leases that run out and the wake-ups that come by the time ``:at``.
DUE = sa.select(TASK_TIMES.c.deadline, TASK_TIMES.c.run_at).where(
    sa.or_(TASK_TIMES.c.deadline <= sa.bindparam("at"), TASK_TIMES.c.run_at <= sa.bindparam("at"))
)


class _History:
    """One random history of calls on both faces, every answer compared.

    Leases are short and every failure waits (fixed or exponential retry) or goes
    straight back to the line, time moves mostly by whole seconds with a jump now
    and then, so that one call often finds lease expiries and wake-ups due
    together, some at equal times (ordered then by their counters).  Before each
    call the test counts, with its own SQL, what is due at the call's time
    (``count_due``: on one backend; see test_long_histories_...).
    """

    def __init__(self, seed: int, url: str, count_due: bool) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        lease_seconds = rng.choice([1, 2, 3, 5])
        max_attempts = rng.randint(2, 6)
        retry = rng.choice(
            [
                sqlq.Retry.immediate(),
                sqlq.Retry.immediate(),
                sqlq.Retry.fixed(1),
                sqlq.Retry.fixed(2),
                sqlq.Retry.exponential(1, 4, jitter=False),
            ]
        )
        # Priorities and the aging come from a generator of their own: the histories'
        # calls are those of before, and only the order of the line differs.
        self.ranks = random.Random(-1 - seed)
        aging = self.ranks.choice([None, 1, 4, 60])
        # So do the groups, their limits and the round robin (half the histories).
        self.grouping = random.Random(-1_000_000 - seed)
        fair = self.grouping.random() < 0.5
        self.durable = sqlq.Queue(
            url,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            retry=retry,
            aging=aging,
            fair=fair,
            **queue_options(url),
        )
        self.memory = sqlq.WorkQueue(
            lease_seconds, max_attempts, retry=retry, aging=aging, fair=fair
        )
        self.reader = self.durable.engine.connect() if count_due else None
        self.log = [
            f"seed={seed} lease_seconds={lease_seconds} {max_attempts=} {retry} {aging=} {fair=}"
        ]
        if self.grouping.random() < 0.75:
            self._same("set_limit", "g1", 0, concurrency=1, rate=self.grouping.choice([None, 1]))
            self._same(
                "set_limit", None, 0, concurrency=2, rate=1, per=self.grouping.choice([1, 3])
            )
        self.now = 0
        self.tokens: list[int] = [1]
        self.mixed = self.ties = 0  # calls that found both kinds of event due (at one time)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.durable.close()

    def _time(self) -> int:
        """The next call's time: mostly the same or a second on, sometimes a jump or late."""
        roll = self.rng.random()
        if roll < 0.08:
            return max(0, self.now - self.rng.randint(1, 4))
        if roll < 0.45:
            self.now += 1
        elif roll < 0.6:
            self.now += self.rng.randint(2, 4)
        elif roll < 0.75:
            self.now += self.rng.randint(5, 12)
        return self.now

    def _count_due(self) -> None:
        """What the next call will find due, read by the test's own query: due at the
        current time, the queue's high-water mark (every call so far was at or below it,
        and the next one is at it or late)."""
        if self.reader is None:
            return
        due = self.reader.execute(DUE, {"at": self.now}).all()
        self.reader.rollback()  # the next read sees what was written meanwhile
        expiries = {
            deadline for deadline, _ in due if deadline is not None and deadline <= self.now
        }
        wakeups = {run_at for _, run_at in due if run_at is not None and run_at <= self.now}
        if expiries and wakeups:
            self.mixed += 1
            self.ties += bool(expiries & wakeups)

    def _token(self) -> int:
        recent = self.tokens[-4:]
        return self.rng.choice(recent if self.rng.random() < 0.85 else self.tokens)

    def _own(self, named: bool = True) -> dict[str, Any]:
        """Options of an add: now and then a name, and a max_attempts or retry policy of
        the task's own instead of the queue's."""
        rng = self.rng
        own: dict[str, Any] = {}
        if named and rng.random() < 0.3:
            own["name"] = rng.choice(["a", "b"])
        if rng.random() < 0.2:
            own["max_attempts"] = rng.randint(1, 6)
        if rng.random() < 0.2:
            own["retry"] = rng.choice([sqlq.Retry.immediate(), sqlq.Retry.fixed(1)])
        own["priority"] = self.ranks.choice([0, 0, 1, -1, 3])
        own["group"] = self.grouping.choice([None, None, "g1", "g2", "g3"])
        return own

    def _keep(self, leases: Any) -> None:
        for lease in leases:
            if lease is not None:
                self.tokens.append(lease.token)

    def step(self) -> None:
        rng, now = self.rng, self._time()
        task_id = rng.choice(HISTORY_IDS)
        self._count_due()
        kind = "resume" if self.memory.paused and rng.random() < 0.3 else rng.choices(
            ["add", "add_many", "claim", "claim_many", "complete", "complete_and_claim",
             "fail", "extend", "release", "status", "tasks", "stats", "redrive", "purge",
             "cancel", "heartbeat", "pause"],
            weights=[10, 3, 8, 8, 3, 3, 6, 2, 2, 2, 2, 1, 2, 2, 2, 1, 1],
        )[0]  # fmt: skip
        if kind == "add":
            delay = rng.choice([None, 0, 1, 2, 3, 5])
            payload = rng.choice([None, 1, "x", b"y"])
            self._same("add", task_id, now, payload=payload, delay=delay, **self._own())
        elif kind == "add_many":
            ids = rng.sample(HISTORY_IDS, rng.randint(1, 3))
            items = [(i, None, rng.choice([None, "n"])) if rng.random() < 0.3 else i for i in ids]
            own = self._own(named=False)  # add_many's names are in its items
            self._same("add_many", items, now, delay=rng.choice([None, 1, 2]), **own)
        elif kind == "claim":
            self._keep([self._same("claim", now)])
        elif kind == "claim_many":
            self._keep(self._same("claim_many", rng.randint(1, 4), now))
        elif kind == "complete":
            self._same("complete", task_id, now, token=self._token())
        elif kind == "complete_and_claim":
            self._keep([self._same("complete_and_claim", task_id, now, token=self._token())[1]])
        elif kind == "fail":
            error, retry = rng.choice([None, "e"]), rng.random() < 0.9
            self._same("fail", task_id, now, token=self._token(), error=error, retry=retry)
        elif kind == "extend":
            seconds = rng.choice([None, 1, 3])
            self._same("extend", task_id, self._token(), now, seconds=seconds)
        elif kind == "release":
            self._same("release", task_id, self._token(), now)
        elif kind == "status":
            self._same("info", task_id, now)
        elif kind == "tasks":
            self._same("tasks", now, limit=len(HISTORY_IDS))
        elif kind == "stats":
            self._same("stats", now)
        elif kind == "redrive":
            self._same("redrive", now, task_ids=rng.choice([None, [task_id]]))
        elif kind == "purge":
            states = ["COMPLETED", "DEAD", "CANCELLED"]
            self._same("purge", now, states=states, older_than=rng.choice([0, 3]))
        elif kind == "cancel":
            self._same("cancel", task_id, now)
        elif kind == "heartbeat":
            self._same("heartbeat", task_id, self._token(), now)
        else:  # pause, or resume: paused for a few calls at a time
            self._same(kind, now)

    def _same(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        shown = [*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]
        self.log.append(f"{method}({', '.join(shown)})")
        durable = _outcome(lambda: getattr(self.durable, method)(*args, **kwargs))
        memory = _outcome(lambda: getattr(self.memory, method)(*args, **kwargs))
        assert durable == memory, (
            f"Queue answered {durable}, WorkQueue answered {memory}; rerun just this history "
            f"with SQLQ_TEST_SEED={self.seed}; the last calls: {'; '.join(self.log[-25:])}"
        )
        kind, answer = durable
        assert kind == "ok", f"{self.log[-1]} raised {answer.__name__} on both faces"
        return answer


def test_long_histories_agree_and_reach_mixed_due_events(migrated_url: Databases) -> None:
    """Hundreds of calls per seed on both faces; between them, many calls that find
    lease expiries and wake-ups due together, also at equal times.

    Those are counted on SQLite only: the histories are the same on every backend
    (the same seeds, and every answer the same as WorkQueue's, which each run asserts),
    and on PostgreSQL the count's query per call took a quarter of the test's time."""
    count_due = migrated_url.kind == "sqlite"
    mixed = ties = 0
    for number in HISTORY_SEEDS:
        with migrated_url.one() as url:  # one database per seed, given back after it
            history = _History(number, url, count_due)
            try:
                for _ in range(HISTORY_CALLS):
                    history.step()
                history._same("tasks", history.now + 100, limit=len(HISTORY_IDS))
            finally:
                history.close()
        mixed, ties = mixed + history.mixed, ties + history.ties
    if SEED is None and count_due:  # the histories still reach what they are here for
        assert mixed >= 400 and ties >= 200, (mixed, ties)
