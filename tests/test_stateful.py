"""Stateful (model-based) tests: random call sequences, every answer compared.

* ``DurableVsMemory``: sqlq.Queue (SQLite) against sqlq.WorkQueue, call for call.
* ``MemoryVsModel``: sqlq.WorkQueue against ``BruteForceQueue`` below, a model
  written to be obviously correct rather than fast.

Both machines drive time the same way: a current time that moves forward by
small steps, plus calls that pass a time below it ("late" calls, which the
contract handles at the high-water mark).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import sqlq
from sqlq.errors import InvalidTaskId

# A small pool, so that calls often hit the same task.  The odd ones check that
# ids travel through SQL as data: quotes, a statement separator, non-ASCII text.
TASK_IDS = ["a", "b", "a'b", "x; DROP TABLE sqlq_tasks;--", "日本"]

task_ids = st.sampled_from(TASK_IDS)
leases = st.integers(min_value=0, max_value=6)
attempt_limits = st.integers(min_value=1, max_value=3)

# How a call's time relates to the current time: ("ahead", step) moves the
# current time forward by step (0 most often, fractions now and then), and
# ("late", back) passes a time `back` below the current time without moving it.
time_moves = st.one_of(
    st.tuples(st.just("ahead"), st.integers(min_value=0, max_value=4)),
    st.tuples(st.just("ahead"), st.sampled_from([0.5, 1.5])),
    st.tuples(st.just("late"), st.integers(min_value=1, max_value=5)),
)

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
    """("ok", answer) or ("raised", exception type) - comparable across faces."""
    try:
        return ("ok", call())
    except Exception as exc:
        return ("raised", type(exc))


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

    def _same(self, name: str, *args: Any, log: bool = True) -> Any:
        if log:
            self.log.append(f"{name}({', '.join(map(repr, args))})")
        left = _outcome(lambda: getattr(self.left, name)(*args))
        right = _outcome(lambda: getattr(self.right, name)(*args))
        assert left == right, (
            f"{type(self.left).__name__} answered {left}, "
            f"{type(self.right).__name__} answered {right}; calls: {'; '.join(self.log)}"
        )
        kind, answer = left
        assert kind == "ok", f"{name}{args!r} raised {answer.__name__} on both faces"
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
# 1. sqlq.Queue (SQLite) against sqlq.WorkQueue
# ---------------------------------------------------------------------------------


class DurableVsMemory(TwoQueues):
    directory: str | None = None

    @initialize(lease_seconds=leases, max_attempts=attempt_limits)
    def open_queues(self, lease_seconds: int, max_attempts: int) -> None:
        self.log.append(f"lease_seconds={lease_seconds}, max_attempts={max_attempts}")
        self.directory = tempfile.mkdtemp(prefix="sqlq-stateful-")
        self.left = sqlq.Queue(
            os.path.join(self.directory, "queue.db"),
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            synchronous="normal",
        )
        self.right = sqlq.WorkQueue(lease_seconds, max_attempts)

    def teardown(self) -> None:
        if getattr(self, "left", None) is not None:
            self.left.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


DurableVsMemory.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDurableVsMemory = DurableVsMemory.TestCase


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


MemoryVsModel.TestCase.settings = settings(max_examples=400, stateful_step_count=60)
TestMemoryVsModel = MemoryVsModel.TestCase
