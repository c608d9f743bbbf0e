"""What a SQLite backend does around ``fork()``: no connection of sqlq's is open at
the moment of fork (each backend closes its own just before), the parent and the
child each open a new one on first use, and the child its own gate files.  The
backends register themselves here (``live``); a child keeps the connections it
inherited open and unused (``inherited``).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol


class Forking(Protocol):
    """What the fork hooks call on each live backend (see connections.py)."""

    def _close_before_fork(self) -> None: ...

    def _resume_after_fork(self) -> None: ...

    def _start_in_child(self) -> None: ...


#: Connections a forked child inherited open (see Connections._close_before_fork):
#: kept alive, never closed or finalised there, because closing them would act on
#: the file as if the child held the parent's locks.
inherited: list[Any] = []
live: weakref.WeakSet[Forking] = weakref.WeakSet()


def _before_fork() -> None:
    for backend in list(live):
        backend._close_before_fork()


def _after_fork_in_parent() -> None:
    for backend in list(live):
        backend._resume_after_fork()


def _after_fork_in_child() -> None:
    for backend in list(live):
        backend._start_in_child()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
