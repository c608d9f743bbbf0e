"""The gate's lock beside filelock's, side by side in one run (issue 26: use
``filelock`` for sqlq's lock files where it serves).

Two figures, each for sqlq.sqlite.gate.Gate and filelock.FileLock on a file of
their own in one temporary folder:

- ``cpu``: CPU seconds (getrusage: user + system) of ROUNDS uncontended
  acquire + release pairs, and per pair; run it under ``strace -c -f`` with
  ``--only gate`` / ``--only filelock`` for the system calls of each.
- ``handoff``: a second process holds the lock and lets go while this one waits
  for it: the time from its release to this process's acquisition, the median of
  HANDOFFS, the holder's release time being written to a pipe just before.
- ``gate after import filelock``: the gate's ``cpu`` in a new process of this
  Python that has imported filelock first, beside one that has not (filelock 4
  installs a process-wide audit hook on Python 3.12+, which every later audited
  call pays, fcntl.flock among them).

    python -m bench.locks [--only gate|filelock] [--rounds N] [--handoffs N] [--folder DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlq.sqlite.gate import Gate


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _pair(kind: str, path: Path) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], Any]]:
    """acquire (blocking), release and close of ``kind`` on ``path``."""
    if kind == "gate":
        gate = Gate(str(path))
        return (lambda: gate.acquire(time.monotonic() + 60)), gate.release, gate.close
    import filelock  # only here: importing it changes what the gate costs (see above)

    lock = filelock.FileLock(str(path), thread_local=False, mode=0o600)
    return (lambda: lock.acquire(timeout=60)), lock.release, (lambda: None)


def cpu(kind: str, folder: Path, rounds: int) -> float:
    acquire, release, close = _pair(kind, folder / f"{kind}.lock")
    try:
        acquire(), release()  # the files opened, the modules warm
        before = _cpu()
        for _ in range(rounds):
            acquire()
            release()
        return _cpu() - before
    finally:
        close()


def gate_in_new_process(folder: Path, rounds: int, import_filelock: bool) -> float:
    """The gate's ``cpu`` in a new process, which imports filelock first or not."""
    code = (
        ("import filelock\n" if import_filelock else "")
        + "import sys\nfrom pathlib import Path\nfrom bench.locks import cpu\n"
        + "print(cpu('gate', Path(sys.argv[1]), int(sys.argv[2])))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(rounds)],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(run.stdout)


def _holder(kind: str, path: Path, handoffs: int, ready: Any, released: Any) -> None:
    acquire, release, close = _pair(kind, path)
    for _ in range(handoffs):
        acquire()
        ready.send(True)  # the waiter goes to wait for the lock
        ready.recv()  # the waiter is about to wait
        time.sleep(0.02)  # and is waiting: blocked in flock, or polling
        released.send(time.perf_counter())
        release()
        ready.recv()  # the waiter had its turn and let go
    close()


def handoff(kind: str, folder: Path, handoffs: int) -> float:
    """Median seconds from the holder's release to this process's acquisition."""
    path = folder / f"{kind}-handoff.lock"
    ready, theirs = multiprocessing.Pipe()
    released, their_released = multiprocessing.Pipe()
    holder = multiprocessing.get_context("fork").Process(
        target=_holder, args=(kind, path, handoffs, theirs, their_released)
    )
    holder.start()
    acquire, release, close = _pair(kind, path)
    gaps = []
    try:
        for _ in range(handoffs):
            ready.recv()
            ready.send(True)
            acquire()
            got = time.perf_counter()
            gaps.append(got - released.recv())
            release()
            ready.send(True)
    finally:
        close()
        holder.join(30)
    return statistics.median(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["gate", "filelock"])
    parser.add_argument("--rounds", type=int, default=10_000)
    parser.add_argument("--handoffs", type=int, default=100)
    parser.add_argument("--folder", type=Path, help="for the lock files (default: a new one)")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["gate", "filelock"]  # the gate before the import
    with tempfile.TemporaryDirectory(dir=args.folder) as tmp:
        folder = Path(tmp)
        for kind in kinds:
            spent = cpu(kind, folder, args.rounds)
            print(
                f"{kind:9} cpu: {spent:.3f} s for {args.rounds:,} acquire + release "
                f"({spent / args.rounds * 1e6:.1f} us each)"
            )
        if args.only != "filelock":
            for imported in (False, True):
                spent = gate_in_new_process(folder, args.rounds, imported)
                how = "imported" if imported else "not imported"
                print(
                    f"gate      cpu in a new process, filelock {how}: "
                    f"{spent / args.rounds * 1e6:.1f} us each"
                )
        if args.handoffs:
            for kind in kinds:
                gap = handoff(kind, folder, args.handoffs)
                print(f"{kind:9} hand-off: median {gap * 1e3:.3f} ms over {args.handoffs}")
    print(f"(pid {os.getpid()})")


if __name__ == "__main__":
    main()
