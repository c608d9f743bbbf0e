"""The age of each queue's oldest waiting task over the last day, sampled by the
dashboard's process: the database keeps no history of it (a task's wait is known
only while it waits).  One read of the queues' figures a minute, without the write
lock; at most a day of samples is kept, so the memory it takes stays bounded.  The
history starts when the dashboard does."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ..errors import SqlqError
from ..records import QueueOverview

#: Seconds between two samples, and how many are kept (a day's).
SAMPLE_SECONDS = 60.0
KEPT = 1440

#: A sample: (time, {queue: seconds its oldest AVAILABLE task has waited, or None}).
Sample = tuple[float, dict[str, float | None]]


class History:
    """Samples ``read()`` (Backend.overview) every SAMPLE_SECONDS in a thread of its
    own, from the first ``samples()`` call on, until ``stop()``."""

    def __init__(self, read: Callable[[], dict[str, QueueOverview]]) -> None:
        self._read = read
        self._samples: deque[Sample] = deque(maxlen=KEPT)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def samples(self) -> list[Sample]:
        with self._lock:
            if self._thread is None and not self._stopped.is_set():
                self._sample()  # the first one at once: a chart has a point to show
                self._thread = threading.Thread(target=self._run, name="sqlq-web-history")
                self._thread.daemon = True
                self._thread.start()
            return list(self._samples)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(SAMPLE_SECONDS):
            with self._lock:
                self._sample()

    def _sample(self) -> None:
        now = time.time()
        try:
            found = self._read()
        except SqlqError:
            return  # a busy or unreachable database: no sample this time
        ages = {
            queue: None if f.available_since is None else max(0.0, now - f.available_since)
            for queue, f in found.items()
        }
        self._samples.append((now, ages))
