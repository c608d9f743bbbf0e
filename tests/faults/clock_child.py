"""A process whose clock the fault shim moves, for tests/faults/test_clock.py.

    python clock_child.py DB MODE [--no-guard]

Runs with LD_PRELOAD=libsqlqfault.so and SQLQ_FAULT_CTL=<file> (``clock_offset=``
in that file shifts ``time.time()``; the kernel's clock is untouched).  Prints
one JSON object per line:

* ``calls``: reserve, add, then complete whatever it reserved; each outcome is
  ``{"call", "ok", "result" | "error"}``.
* ``loop SECONDS``: for SECONDS (by the monotonic clock), add a task, claim
  one and complete it, over and over; each outcome is printed as it happens,
  with ``t`` (monotonic seconds since the start).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import sqlq
from sqlq.errors import SqlqError


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def attempt(call: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        result = fn(*args, **kwargs)
    except SqlqError as exc:
        emit(call=call, ok=False, error=type(exc).__name__, message=str(exc))
        return None
    shown = result
    if isinstance(result, sqlq.Lease):
        shown = {"task_id": result.task_id, "token": result.token, "deadline": result.deadline}
    emit(call=call, ok=True, result=shown)
    return result


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    db, mode = sys.argv[1], sys.argv[2]
    step = None if "--no-guard" in sys.argv else 60.0
    q = sqlq.Queue(db, lease_seconds=20, max_attempts=100, max_clock_step=step)
    emit(call="clock", ok=True, result=time.time())
    if mode == "calls":
        lease = attempt("claim", q.claim)
        attempt("add", q.add, f"child-{time.monotonic_ns()}")
        if lease is not None:
            attempt("complete", q.complete, lease.task_id, token=lease.token)
    elif mode == "loop":
        seconds = float(sys.argv[3])
        start = time.monotonic()
        i = 0
        while (t := time.monotonic() - start) < seconds:
            i += 1
            try:
                added = q.add(f"loop-{i}")
                emit(call="add", ok=True, t=t, task=f"loop-{i}", result=added)
                lease = q.claim()
                if lease is not None:
                    done = q.complete(lease.task_id, token=lease.token)
                    emit(call="complete", ok=True, t=t, task=lease.task_id, result=done)
            except SqlqError as exc:
                emit(call="loop", ok=False, t=t, error=type(exc).__name__)
                time.sleep(0.01)
    q.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
