"""A queue's settings, stored with it: lease length, attempts and retry policy.

Every process that opens a queue (``sqlq.Queue``, ``sqlq.AsyncQueue``, ``sqlq
worker``, the commands) without giving a setting reads the queue's stored one,
once, when it opens it (one read, no statement per call); a setting given as an
argument applies to that handle alone.  ``Queue.configure`` (``sqlq configure``)
changes the stored ones (in sqlq_settings: SQLite migration 15, PostgreSQL 11).
A queue without stored settings has DEFAULTS.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .contract import Number, check_retry, check_settings
from .retry import Retry, stored_policy


class QueueSettings(NamedTuple):
    """The settings of a queue (or of a handle on it)."""

    #: Seconds a lease lasts: a task not reported by then goes back in line.
    lease_seconds: Number
    #: Attempts a task gets before it goes DEAD.
    max_attempts: int
    #: How long a failed attempt waits before the next (``sqlq.Retry``).
    retry: Retry

    def as_json(self) -> dict[str, Any]:
        retry = self.retry
        return {
            "lease_seconds": self.lease_seconds,
            "max_attempts": self.max_attempts,
            "retry": {"kind": retry.kind, "base": retry.base, "cap": retry.cap},
        }


#: The settings of a queue that has none stored: leases of 30 seconds, 5 attempts (as
#: `sqlq add` always gave),
#: a failed attempt back in line at once (Retry.immediate, the core contract's).
DEFAULTS = QueueSettings(30.0, 5, Retry.immediate())


def merged(
    base: QueueSettings,
    lease_seconds: Number | None = None,
    max_attempts: int | None = None,
    retry: Retry | None = None,
) -> QueueSettings:
    """``base`` with the settings given (not None) instead of its own, checked."""
    lease = base.lease_seconds if lease_seconds is None else lease_seconds
    attempts = base.max_attempts if max_attempts is None else max_attempts
    lease, attempts = check_settings(lease, attempts)
    return QueueSettings(lease, attempts, base.retry if retry is None else check_retry(retry))


def stored_settings(rows: list[tuple[Any, ...]]) -> dict[str, QueueSettings]:
    """The rows of sqlq_settings (queue, lease_seconds, max_attempts, retry_kind,
    retry_base, retry_cap) as settings by queue."""
    return {
        queue: QueueSettings(lease, attempts, stored_policy(kind, base, cap))
        for queue, lease, attempts, kind, base, cap in rows
    }


#: The settings a configure call gives, None for one not given: (lease_seconds,
#: max_attempts, retry).
Given = tuple[Number | None, int | None, Retry | None]


def configure_params(queue: str, given: Given, now: Number) -> dict[str, Any]:
    """The parameters of configure_settings (both backends' queries.sql), the settings
    given checked: those of a queue without stored settings (DEFAULTS' for those not
    given), and which of a stored row's the statement keeps (those not given)."""
    lease_seconds, max_attempts, retry = given
    lease, attempts, policy = merged(DEFAULTS, lease_seconds, max_attempts, retry)
    return {
        "queue": queue,
        "lease_seconds": float(lease),
        "max_attempts": attempts,
        "retry_kind": policy.kind,
        "retry_base": policy.base,
        "retry_cap": policy.cap,
        "now": now,
        "keep_lease": lease_seconds is None,
        "keep_attempts": max_attempts is None,
        "keep_retry": retry is None,
    }
