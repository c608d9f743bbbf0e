"""The operating system's own idea of the time, for checking a process's clock.

A process can run with a clock of its own (libfaketime, a time namespace, a
debugger, a bad monkeypatch); every call that reads the default clock trusts
it.  When such a reading would move the queue's time far ahead, sqlq asks the
kernel instead, through a path the process's clock functions do not touch:

* Linux: ``/proc/stat``'s boot time plus ``/proc/uptime`` (both computed by the
  kernel when read; about one second of precision, ample for a check in
  minutes).
* Elsewhere: the modification time the kernel stamps on a file sqlq owns when
  it is touched (``touch_path``).
"""

from __future__ import annotations

import os


def _proc_time() -> float | None:
    try:
        with open("/proc/uptime", "rb") as f:
            uptime = float(f.read().split()[0])
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1]) + uptime
    except (OSError, ValueError, IndexError):
        return None
    return None


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
    found = _proc_time()
    return found if found is not None else _stamp_time(touch_path)
