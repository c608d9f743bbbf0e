"""Queue: the lease queue of sqlq.contract, durable in a database shared by processes.

The queue is one class made of parts of one job each: ``engine`` (what a call's
transaction decides about tasks), ``calls`` (each call's transaction at a checked
time), and the calls: ``adding``, ``leasing``, ``control``, ``inspection``,
``maintenance``, ``workers``; ``queue`` puts them together.
"""

from .calls import DEFAULT_MAX_CLOCK_STEP, LAG_WARNING_EVERY, log
from .inspection import _info
from .maintenance import PURGE_BATCH
from .queue import Queue

__all__ = ["DEFAULT_MAX_CLOCK_STEP", "LAG_WARNING_EVERY", "PURGE_BATCH", "Queue", "_info", "log"]
