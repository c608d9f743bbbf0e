"""The queue's rules, each stated once for Python: ``Queue`` (sqlq/durable/) asks
these functions, and each rule's SQL is one named fragment per backend
(sqlq/sqlite/queries.sql, sqlq/postgresql/queries.sql), named in each docstring
below.  ``WorkQueue`` (sqlq/memory/), the oracle the property tests hold
``Queue`` to, calls ``line_key`` and writes the others out where it runs them on
every call or expiry, each marked with the rule's name: calling these from
there cost about 6.5% of its mixed calls (callgrind), and its speed is a goal of
its own.

* ``lease_end``: how an attempt ends that failed or whose lease ran out: CANCELLED
  if the task was asked to stop, else retried now, retried later (and when), or
  dead-lettered; ``released``: a lease given back.
* ``line_key``: a task's place in the line, by its priority and the queue's aging.
* ``holds_key`` and ``key_cutoff``: which task holds a dedupe key.
* ``admits``: may a group start one more task (its concurrency limit).
* ``runs_before``: the order in which due events (lease expiries, wake-ups) run.
"""

from __future__ import annotations

import random
from typing import Final

from .contract import Number, State, time_after
from .retry import Retry

_CANCELLED: Final = State.CANCELLED
_DEAD: Final = State.DEAD
_WAITING: Final = State.WAITING
_AVAILABLE: Final = State.AVAILABLE


def lease_end(
    asked_to_stop: bool,
    attempts: int,
    max_attempts: int,
    retry: Retry | None,
    rng: random.Random,
    at: Number,
) -> tuple[State, Number | None]:
    """How a lease ends at time ``at`` when its attempt failed or the lease ran out:
    the task's new state, and the time it wakes if that is WAITING (else None).

    A task asked to stop (``cancel`` of a RESERVED task) runs no more: CANCELLED,
    and its retry policy is not asked.  Otherwise the policy (``retry``; None: retry
    at once) gives the delay before the next attempt, drawn from ``rng`` even when
    the task is dead-lettered (so that two faces with the same seed draw alike):
    DEAD once the attempts reach ``max_attempts``, else WAITING until ``at`` plus a
    delay > 0, else AVAILABLE at once.

    SQL: none; the backends' ``end_lease`` statement writes what this decides."""
    if asked_to_stop:
        return _CANCELLED, None
    delay = 0 if retry is None else retry.delay(attempts, rng)
    if attempts >= max_attempts:
        return _DEAD, None
    if delay > 0:
        return _WAITING, time_after(at, delay)
    return _AVAILABLE, None


def released(asked_to_stop: bool) -> State:
    """The state of a task whose lease is given back (``release``): back in line,
    AVAILABLE, its attempt not counted, or CANCELLED if it was asked to stop."""
    return _CANCELLED if asked_to_stop else _AVAILABLE


def line_key(joined: Number, priority: int, aging: float) -> float:
    """The order of a task in the line (lowest first, then the order it joined):
    the time it joined moved ``priority * aging`` seconds earlier.  For priority 0
    it is the time: times and line positions grow together, so one priority is
    the FIFO line.  A task joins the line when it is added, and again after a
    failure, an expiry, a wake-up, a release, a redrive or a debounce that moves it.

    SQL: the fragment ``_line_key`` of each backend (``now - priority * aging``,
    the same doubles as a float ``aging`` here), in every statement that puts an
    existing task back in line; an add binds the key computed here."""
    return joined - priority * aging


def key_cutoff(now: Number, window: Number | None) -> Number | None:
    """The time after which a task that finished with a dedupe key still holds it,
    for an add at ``now`` with ``key_window`` ``window`` (None: no finished task
    holds it)."""
    return None if window is None else now - window


def holds_key(finished_at: Number | None, cutoff: Number | None) -> bool:
    """Does the latest task that took a dedupe key hold it, for an add whose
    ``key_cutoff`` is ``cutoff``?  Yes while it is not finished, and after it
    finished (COMPLETED, DEAD, CANCELLED) if that was after the cutoff.  (Only the
    latest can hold it: a key held refuses, merges or debounces every other add.)

    SQL: the fragments ``_key_unfinished`` (a holder not finished, also what a
    redrive asks) and ``_key_finished`` (the latest after the cutoff) of each
    backend, in ``key_holder``."""
    return finished_at is None or (cutoff is not None and finished_at > cutoff)


def admits(running: int, cap: Number) -> bool:
    """May a group with ``running`` leases out start another task, under its
    concurrency limit ``cap``?  (Its rate is asked apart: a start no sooner than
    its ``tat``.)

    SQL: the fragment ``_group_admits`` of each backend (``head IS NOT NULL AND
    running < cap``: a group with a task in line and a free slot), which the
    partial indexes sqlq_groups_by_head and sqlq_groups_by_turn also state in
    their migrations, and the groups' triggers keep ``running`` and ``head``."""
    return running < cap


def runs_before(first: tuple[Number, int], second: tuple[Number, int]) -> bool:
    """The order of due events (leases that ran out, WAITING tasks whose time
    came): by the time each fell due, then by its counter (a lease's token, a
    wake-up's order), both from the queue's one counter, so never a tie.  An
    expiry that starts a retry delay already over queues its wake-up among them.
    (WorkQueue keeps its events as (time, counter, id) tuples, in heaps whose
    order is this one.)

    SQL: the fragment ``_due_order`` of each backend, in ``due_events``."""
    return first < second
