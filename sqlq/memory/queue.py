"""WorkQueue: the lease queue in memory, every call passing the current time; its
parts, one job each, are the modules beside this one (the data structures are
described in sqlq/memory/layout.py)."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

from .. import payload as payloads
from ..contract import (
    DEFAULT_AGING,
    MAX_TIME,
    Limit,
    Number,
    check_aging,
    check_flag,
    check_retry,
    check_rng,
    check_settings,
)
from ..retry import Retry
from .adding import Adding
from .control import Control
from .inspection import Inspection
from .layout import Entry, Record, _Group, _stored
from .leasing import Leasing
from .maintenance import Maintenance


class WorkQueue(Adding, Leasing, Control, Inspection, Maintenance):
    """An in-memory lease queue.  Not thread-safe; not durable.

    Time never goes backwards: a call whose ``now`` is below the highest time
    seen so far is handled at that highest time.
    """

    def __init__(
        self,
        lease_seconds: Number,
        max_attempts: int,
        *,
        retry: Retry | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        rng: random.Random | None = None,
        aging: float | None = DEFAULT_AGING,
        fair: bool = False,
    ) -> None:
        self.lease_seconds, self.max_attempts = check_settings(lease_seconds, max_attempts)
        self.aging = check_aging(aging)
        self.fair = check_flag(fair, "fair")
        self.retry = check_retry(retry)
        self._retry = _stored(self.retry)
        self.max_payload_bytes = payloads.check_limit(max_payload_bytes)
        self._rng = check_rng(rng)
        self._tasks: dict[str, Record] = {}
        self._line: deque[str] = deque()
        self._line_priority = 0
        self._others: dict[int, deque[str]] = {}
        self._fronts: list[tuple[Number, int, int]] = []
        self._leases: deque[Entry] = deque()
        self._extended: list[Entry] = []
        self._waiting: list[Entry] = []
        self._counter = 0
        self._now: Number = 0
        self._due: Number = MAX_TIME
        self._schedules: dict[str, Number] = {}  # schedule name -> ticks handled up to
        self._paused = False
        # No group, no priority but 0, no stop request and no pause so far: the lease
        # calls take the seed's paths (one FIFO, no slots, no stops).  Once False, it
        # stays False.
        self._plain = True
        # Kept apart from the records, so that tasks without them cost nothing more:
        self._results: dict[str, str] = {}  # task id -> stored result, if not None
        self._progress: dict[str, tuple[float | None, str | None]] = {}  # latest report
        self._keys: dict[str, list[str]] = {}  # dedupe key -> its tasks, the latest holder last
        self._key_of: dict[str, str] = {}  # task id -> its dedupe key
        # Per-key limits (see set_limit): empty until a task with a group is added.
        self._groups: dict[str, _Group] = {}
        self._limits: dict[str, Limit] = {}  # by group, '' for the default
        self._ready: list[tuple[Any, ...]] = []  # heap of (order..., group): see _push
