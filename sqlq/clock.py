"""The kernel's own clock, for checking a process's clock.

A process can run with a clock of its own (libfaketime and other LD_PRELOAD
shims, a debugger, a bad monkeypatch); every call that reads the default clock
trusts it.  sqlq checks such readings against the kernel now and then, through a
path that interposed clock functions do not touch:

* Linux (x86-64, arm64): the ``clock_gettime`` system call made directly, with
  ``syscall(2)``, so no wrapper of the C library's ``clock_gettime`` (nor the
  vDSO) sits in between.  ``CLOCK_REALTIME`` is the same in every time namespace
  and container.  (``/proc`` boot time plus uptime is not used: lxcfs shows a
  container's own uptime next to the host's boot time.)
* Elsewhere: the modification time the kernel stamps on a file sqlq owns when
  it is touched (``touch_path``).
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from collections.abc import Callable

_CLOCK_REALTIME = 0
#: The number of the clock_gettime system call, by machine.
_SYS_CLOCK_GETTIME = {"x86_64": 228, "amd64": 228, "aarch64": 113, "arm64": 113}


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


def _syscall_clock() -> Callable[[], float | None] | None:
    """A function reading CLOCK_REALTIME through the raw system call, or None."""
    number = _SYS_CLOCK_GETTIME.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long

    def read() -> float | None:
        ts = _Timespec()
        if syscall(number, _CLOCK_REALTIME, ctypes.byref(ts)) != 0:
            return None
        seconds: float = ts.tv_sec + ts.tv_nsec / 1e9
        return seconds

    return read


_read_kernel = _syscall_clock()


def _stamp_time(touch_path: str | None) -> float | None:
    if touch_path is None:
        return None
    try:
        os.utime(touch_path)  # the kernel stamps its own current time
        return os.stat(touch_path).st_mtime
    except OSError:
        return None


def kernel_time(touch_path: str | None = None) -> float | None:
    """The time by the kernel's clock, or None if it cannot be told."""
    if _read_kernel is not None:
        found = _read_kernel()
        if found is not None:
            return found
    return _stamp_time(touch_path)
