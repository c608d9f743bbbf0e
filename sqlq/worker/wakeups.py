"""When an idle Worker looks again: polls of ``queue.ready()`` that back off, the
queue's announcements of new tasks, the next time a task falls due, the waits on the
worker's clock; and when an idle worker returns (``stop_when_idle``/``_drained``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..contract import (
    State,
)
from ..errors import TRANSIENT
from .batches import Batches
from .jobs import HELD
from .state import _BUSY, BUSY_PAUSE, _Busy

#: The longest idle pause between two ``ready()`` polls: where nothing announces new
#: tasks, and where the queue announces them (then only retry delays and leases
#: that run out are found by polling).
POLL_MAX = 0.04
PUSHED_POLL_MAX = 1.0

#: Seconds between two reads of the queue's counts by a worker that waits, idle,
#: for the queue to be drained (stop_when_drained).
DRAIN_CHECK = 1.0

T = TypeVar("T")


class Wakeups(Batches):
    """The idle worker's waits and polls (see the sqlq.worker docstring)."""

    def _listen_for_announcements(self) -> None:
        """Where the queue announces new tasks, be told (and, unless poll_max was
        given, poll only every PUSHED_POLL_MAX seconds for what nobody announces)."""
        cancel = self.queue.on_new_tasks(self._on_announcement)
        if cancel is not None:
            self._cancel_announcements = cancel
            if not self._poll_max_given:
                self.poll_max = max(PUSHED_POLL_MAX, self.poll_min)

    def _on_announcement(self) -> None:
        """New tasks were announced (called in the queue's listener thread)."""
        with self._cond:
            self._announced = True
            self._cond.notify_all()

    def _woken(self) -> bool:
        """Why an idle pause ends early (asked holding _cond)."""
        return self._stopping or bool(self._outcomes) or self._announced

    def _take_announcement(self) -> bool:
        """After an idle pause ended early: True (and forgotten) if tasks were
        announced and the worker is not stopping: claim at once."""
        with self._cond:
            announced, self._announced = self._announced, False
            return announced and not self._stopping

    def _ready(self) -> bool:
        """Would a claim find a task now (``queue.ready``)?  If not, when is the next
        task due that it holds back by time (_read_next_due)."""
        try:
            ready = self.queue.ready()
        except TRANSIENT as exc:  # readers are not blocked in WAL mode; be safe anyway
            self._log_busy(exc)
            return True
        if not ready:
            self._read_next_due()
        return ready

    def _read_next_due(self) -> None:
        """Note when the queue has a task due next that a claim does not find now
        (``queue.next_due``: a group's next rate slot, a lease running out, a
        WAITING task), by the worker's clock: an idle pause ends then at the latest
        (_until_due), not at the next poll.  A transient error leaves it unknown."""
        try:
            seconds = self.queue.next_due()
        except TRANSIENT as exc:
            self._log_busy(exc)
            seconds = None
        self._due_at = None if seconds is None else self.clock.monotonic() + seconds

    def _until_due(self, seconds: float) -> float:
        """``seconds`` (an idle pause), or less if a task falls due sooner (see
        _read_next_due); a time that has passed is forgotten (the next ``ready``
        reads the next one)."""
        due = self._due_at
        if due is None:
            return seconds
        left = due - self.clock.monotonic()
        if left <= 0:
            self._due_at = None
            return seconds
        return min(seconds, left)

    def _in_flight(self) -> int:
        """Leases held: prefetched, running or being reported."""
        with self._cond:
            return sum(e.state in HELD for e in self._running.values())

    def _wait_for_stop(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stop() is called; True if it was."""
        return self._pause(seconds, lambda: self._stopping)

    def _pause(self, seconds: float, done: Callable[[], bool]) -> bool:
        """Wait ``seconds`` or until ``done()`` (asked holding _cond); return ``done()``."""
        end = self.clock.monotonic() + seconds
        with self._cond:
            while not done() and self.clock.monotonic() < end:
                self._wait(end)
            return done()

    def _wait(self, until: float | None = None) -> None:
        """Wait on _cond (held) for a notification, until ``until`` at most."""
        self.clock.wait(self._cond, until)

    def _persist(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T | _Busy:
        """``call`` retried while it raises Busy, until run() gives up (then _BUSY)."""
        while True:
            try:
                return call(*args, **kwargs)
            except TRANSIENT as exc:
                self._log_busy(exc)
            if self._pause(BUSY_PAUSE, lambda: self._returned):
                return _BUSY

    def _idle_end(self) -> bool:
        """Nothing to claim and no handler running: True if run() returns now (it
        was asked to stop when idle, or when drained and the queue has nothing
        RESERVED or WAITING either)."""
        if self._until is None:
            return False
        if self._until == "drained":
            now = self.clock.monotonic()
            if now < self._drain_check:
                return False
            self._drain_check = now + DRAIN_CHECK
            pending = self._pending()
            if pending is None or any(pending):
                self.log.debug("queue %r: waiting for %s", self.queue.queue, _pending_text(pending))
                return False
        self.log.debug("queue %r is idle; stopping", self.queue.queue)
        return True

    def _pending(self) -> tuple[int, int, int] | None:
        """(AVAILABLE, RESERVED, WAITING) tasks of the queue, read without the write
        lock; None if the read met a transient error (logged).  Tasks AVAILABLE when a
        claim found nothing are held back: the queue is paused, or their groups are at
        their limits (a rate lets one start later)."""
        try:
            counts = self.queue.snapshot().counts
        except TRANSIENT as exc:
            self._log_busy(exc)
            return None
        return (
            counts[State.AVAILABLE.value],
            counts[State.RESERVED.value],
            counts[State.WAITING.value],
        )

    def _left_behind(self) -> str:
        """For the last log line of a worker that stopped idle: what it left."""
        pending = self._pending()
        if pending is not None and not any(pending):
            return "; nothing left RESERVED or WAITING"
        return (
            f"; left behind: {_pending_text(pending)}; stop_when_drained "
            "(sqlq worker --drain) waits for them"
        )


def _pending_text(pending: tuple[int, int, int] | None) -> str:
    if pending is None:
        return "tasks the queue could not be read for"
    available, reserved, waiting = pending
    held = f"{available} AVAILABLE (held back by a pause or their groups' limits), "
    return (
        f"{held if available else ''}{reserved} RESERVED (leases of other workers), "
        f"{waiting} WAITING (for a delay or a retry)"
    )
