"""WorkQueue: the lease queue in memory, every call passing the current time.

The queue is one class made of parts of one job each: ``layout`` (a task's record
and the structures, described there), ``lines`` (where tasks wait), ``engine``
(time, due events, taking and ending leases), and the calls: ``adding``,
``leasing``, ``control``, ``inspection``, ``maintenance``; ``queue`` puts them
together.
"""

from .queue import WorkQueue

__all__ = ["WorkQueue"]
