"""Queue: the lease queue of sqlq.contract, durable in a database shared by processes.

Each call is one write transaction on the backend: first everything due in the
queue happens (leases run out, WAITING tasks wake up, in the order they fell
due), then the call does its work.  The logic decides what happens to a
task; the backend only stores it (see sqlq.backend for that contract).  The
class is made of parts of one job each, the modules beside this one."""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .. import payload as payloads
from ..backend import Backend
from ..backends import open_backend
from ..contract import (
    DEFAULT_AGING,
    MAX_LEASE_SECONDS,
    Number,
    check_aging,
    check_flag,
    check_queue_name,
    check_rng,
)
from ..errors import InvalidArgument, InvalidConfig, SchemaError
from ..retry import Retry
from ..settings import DEFAULTS, QueueSettings, merged
from .adding import Adding
from .calls import DEFAULT_MAX_CLOCK_STEP, LAG_WARNING_EVERY
from .control import Control
from .inspection import Inspection
from .leasing import Leasing
from .maintenance import Maintenance
from .workers import Workers

if TYPE_CHECKING:  # the backend loads SQLAlchemy when a Queue opens its database
    import sqlalchemy as sa


class Queue(Adding, Leasing, Control, Inspection, Maintenance, Workers):
    """A named queue in a SQLite file or a PostgreSQL database, safe for many
    processes and threads.

    ``now`` is optional in every call and defaults to ``clock()`` (Unix time;
    on PostgreSQL, with the default clock, the server's time).  Processes'
    clocks disagree a little, so the database keeps a high-water mark of time:
    a call whose ``now`` is below it is handled at the mark.

    Readings of the system clock (``now`` not given) are checked against the
    kernel's clock about once per ``max_clock_step`` seconds of clock advance:
    a reading more than that ahead of the kernel's time (a faked or broken
    clock) makes the call raise :class:`sqlq.errors.ClockSkew` and change
    nothing.  So one process with a wrong clock can expire leases at
    most ``max_clock_step`` early.  A ``now`` passed in, or a custom ``clock``,
    is trusted as given (that is the injectable clock of tests and replays).

    ``max_attempts``, ``retry`` and ``aging`` (seconds of waiting one step of
    priority is worth, DEFAULT_AGING; None for strict priorities: see
    sqlq.contract) are stored with each task when it is added; ``lease_seconds``
    applies to the leases this object hands out.  ``lease_seconds``,
    ``max_attempts`` and ``retry`` not given (None) are the queue's stored
    settings, read once when it is opened (see ``configure`` and sqlq.settings);
    one given applies to this object alone.

    ``path_or_url`` chooses the backend (see sqlq.backends); the other keyword
    options are the backend's: for SQLite ``synchronous`` ("full" or "normal"),
    ``busy_timeout`` (seconds a call may wait for the write lock, 30 by default)
    and ``file_mode`` (of a new database file, 0o600 by default); for
    PostgreSQL ``synchronous``, ``busy_timeout`` (for any lock), ``strict`` and
    ``listen`` (see sqlq.postgresql.backend).

    ``fair``: this object's claims take grouped tasks round robin between the
    groups (the group served longest ago first) instead of in line order; see
    ``set_limit``.
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        lease_seconds: Number | None = None,
        max_attempts: int | None = None,
        queue: str = "default",
        retry: Retry | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        max_clock_step: float | None = DEFAULT_MAX_CLOCK_STEP,
        aging: float | None = DEFAULT_AGING,
        fair: bool = False,
        **options: Any,
    ) -> None:
        # The settings given (None: the queue's stored one, read once opened), checked
        # before anything is opened.
        merged(DEFAULTS, lease_seconds, max_attempts, retry)
        self._explicit = (lease_seconds, max_attempts, retry)
        self.aging = check_aging(aging)
        self.fair = check_flag(fair, "fair")
        if max_clock_step is not None and (
            isinstance(max_clock_step, bool)
            or not isinstance(max_clock_step, int | float)
            or not 0 < max_clock_step <= MAX_LEASE_SECONDS
        ):
            raise InvalidConfig(
                f"max_clock_step must be a number of seconds in (0, {MAX_LEASE_SECONDS:g}], "
                f"or None to trust the clock; got {max_clock_step!r}"
            )
        self.max_clock_step = max_clock_step
        self._step = math.inf if max_clock_step is None else float(max_clock_step)
        # Only the system clock is checked against the kernel's.
        self._guard_clock = max_clock_step is not None and clock is time.time
        self._kernel_seen = -math.inf  # the kernel's time at this process's last check
        self._lag_warned = -LAG_WARNING_EVERY
        self.queue = check_queue_name(queue)
        self.max_payload_bytes = payloads.check_limit(max_payload_bytes)
        if not callable(clock):
            raise InvalidConfig(f"clock must be a function giving the time, not {clock!r}")
        self._clock = clock
        self._rng = check_rng(rng)
        self._backend: Backend = open_backend(path_or_url, **options)
        versions = self._backend.schema_versions()
        if versions.current < versions.latest:  # opened with migrate=False, as it is
            self._backend.close()
            raise SchemaError(
                f"{self._backend.name}: the database is at schema version {versions.current}, "
                f"older than this sqlq's {versions.latest}; a Queue needs the current one "
                "(open it without migrate=False to migrate it)"
            )
        if None in self._explicit:
            try:
                stored = self._backend.settings(self.queue).get(self.queue, DEFAULTS)
            except BaseException:
                self._backend.close()
                raise
        else:
            stored = DEFAULTS  # not read: every setting was given
        self._use(stored)
        # Calls without a time take the database's clock, when it keeps one and the
        # caller did not give a clock of their own.
        self._server_time = clock is time.time and self._backend.keeps_time

    def _use(self, stored: QueueSettings) -> None:
        """This handle's settings: those given to it, else ``stored``."""
        lease, attempts, retry = self._explicit
        self.lease_seconds, self.max_attempts, self.retry = merged(stored, lease, attempts, retry)

    def configure(
        self,
        *,
        lease_seconds: Number | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        now: Number | None = None,
    ) -> QueueSettings:
        """Store the queue's settings for every process that opens it without them (see
        sqlq.settings): those given replace the stored ones (or the defaults), the
        others stay; returns the settings now stored.  This handle uses them too, but
        for the settings it was opened with.  Processes that have the queue open keep
        theirs until they open it again.  Tasks already added keep their attempts and
        retry policy."""
        with self._call(now) as tx:
            new = tx.configure(self.queue, (lease_seconds, max_attempts, retry))
        self._use(new)
        return new

    def settings(self) -> QueueSettings | None:
        """The queue's stored settings as the database holds them now, or None if none
        were stored (processes then use sqlq.settings.DEFAULTS): read only.  This
        handle's own are its ``lease_seconds``, ``max_attempts`` and ``retry``."""
        return self._backend.settings(self.queue).get(self.queue)

    @property
    def engine(self) -> sa.Engine:
        """A SQLAlchemy engine on the queue's database, for transactional ``add``/``complete``.

        On SQLite its transactions start with ``BEGIN IMMEDIATE`` and it uses the same
        SQLite library as the queue.  Use it for your own tables in the same database.
        """
        return self._backend.engine

    def close(self) -> None:
        self._backend.close()

    def __reduce__(self) -> Any:
        raise InvalidArgument(
            "a Queue holds a database connection and cannot be sent to another process "
            "(pickled); open a Queue on the same file in that process instead"
        )

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
