"""Dedupe keys: what both faces agree on when ``add`` is given ``key=``.

A task added with a key *holds* it while it is WAITING, AVAILABLE or RESERVED
(not finished: a retry, back to WAITING or AVAILABLE, still holds it), and, for
an add that gives ``key_window=`` seconds, also once it finished (COMPLETED,
DEAD or CANCELLED) less than that long ago; ``purge`` forgets it.  At most one
task of a queue holds a key at a time (in the database a unique partial index
says so; see the migrations).  When an add finds its key held, ``on_key`` says
what happens:

* ``"refuse"`` (the default): nothing changes; the answer is false, as for an id
  that exists, and names the holder.
* ``"merge"``: nothing changes; the work asked for is the holder's, so the
  answer is true and names the holder.
* ``"debounce"``: a holder not started yet (WAITING or AVAILABLE) takes the new
  payload and the new add's run time (its delay or run_at; none: at once, an
  AVAILABLE holder then keeping its place in the line), a compare-and-set in
  the add's transaction; the answer is true and names the holder.  A holder
  that runs (RESERVED) or finished is not changed: the add is refused, since
  the running handler may have read the old payload already and a second
  holder cannot exist.

An add whose key is free adds its task as usual (false, as ever, if the id
exists).  ``redrive`` leaves DEAD a task whose key another task holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple

from .contract import Number, State, check_name, check_seconds
from .errors import InvalidArgument

#: What ``on_key`` may say.
ON_KEY: Final = ("refuse", "merge", "debounce")


class Keyed(StrEnum):
    """What an add with a key did."""

    #: The key was free: the task was added, and holds it now.
    ADDED = "added"
    #: The key was free but the id exists: nothing changed (add's False).
    EXISTS = "exists"
    #: The key is held (``on_key="refuse"``, or a holder debounce cannot change).
    REFUSED = "refused"
    #: The key is held: the add is absorbed by the holder (``on_key="merge"``).
    MERGED = "merged"
    #: The holder, not started yet, took the payload and run time (``"debounce"``).
    DEBOUNCED = "debounced"


@dataclass(frozen=True, slots=True)
class Added:
    """The answer of ``add(..., key=...)``: true when the work asked for is queued
    (the task was added, or the holder took it: merged, debounced), false when
    nothing was (refused, or the id exists), like add's bool without a key.

    ``holder`` is the id of the task that holds the key after the call (the new
    task's own when added), None when nothing holds it (the id existed)."""

    outcome: Keyed
    holder: str | None

    def __bool__(self) -> bool:
        return self.outcome is not Keyed.REFUSED and self.outcome is not Keyed.EXISTS


class KeyRule(NamedTuple):
    """An add's key, what to do when it is held, and the window (None: only tasks
    not finished hold it)."""

    key: str
    on_key: str
    window: Number | None


def check_key(key: object, on_key: object, window: object) -> KeyRule:
    """An add's ``key``, ``on_key`` and ``key_window``, checked (InvalidArgument)."""
    if key is None:
        raise InvalidArgument("on_key and key_window go with a key (add(..., key=...))")
    if on_key is None:
        on_key = "refuse"
    elif on_key not in ON_KEY:
        raise InvalidArgument(f"on_key must be one of {', '.join(ON_KEY)}; got {on_key!r}")
    return KeyRule(
        check_name(key, "dedupe key", InvalidArgument),
        str(on_key),
        None if window is None else check_seconds(window, "key_window"),
    )


def on_holder(on_key: str, state: str) -> Keyed:
    """What an add does when the task in ``state`` holds its key."""
    if on_key == "merge":
        return Keyed.MERGED
    if on_key == "debounce" and (state == State.WAITING or state == State.AVAILABLE):
        return Keyed.DEBOUNCED
    return Keyed.REFUSED
