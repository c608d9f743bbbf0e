"""A forked child is safe whatever its parent does next (on every durable backend: no
driver lets a connection be shared across fork()).

SQLite forbids carrying a connection across fork(): the child would inherit the
parent's per-file lock bookkeeping, take no real locks, and the parent's close()
would then checkpoint and delete the -wal the child still commits into.  These
tests fork for real (os.fork and multiprocessing's fork start method), let the
parent close its queue while the child is half-way through its adds, and count
what a fresh process sees.  The processes synchronise through pipes.  The gate
and the lock of the SQLite backend have tests of their own here.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

import sqlq

pytestmark = [pytest.mark.processes]

CHILD_ADDS = 40

# A fresh process: adds the tasks named in argv[2:], then prints how many tasks the file holds.
FRESH = """
import sys, sqlq
with sqlq.Queue(sys.argv[1], lease_seconds=30, max_attempts=1) as q:
    for name in sys.argv[2:]:
        q.add(name)
    print(sum(q.counts().values()))
"""


def fresh_count(db: Path | str, *adds: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", FRESH, str(db), *adds], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def send(fd: int, word: bytes) -> None:
    os.write(fd, word + b"\n")


def expect(fd: int, word: bytes) -> None:
    got = b""
    while not got.endswith(b"\n"):
        chunk = os.read(fd, 1)
        assert chunk, f"the other process closed the pipe instead of sending {word!r}"
        got += chunk
    assert got == word + b"\n", got


def child(db: str, inherited: sqlq.Queue, which: str, out: int, into: int) -> None:
    """Adds CHILD_ADDS tasks; after the 20th waits until the parent has closed its
    queue; at the end waits for the word to close (or for SIGKILL)."""
    q = inherited if which == "inherited" else sqlq.Queue(db, lease_seconds=30, max_attempts=1)
    for i in range(CHILD_ADDS):
        assert q.add(f"child-{i}")
        if i == 19:
            send(out, b"20")
            expect(into, b"parent closed")
    send(out, b"40")
    expect(into, b"close")
    q.close()


def run_child(*args: object) -> None:
    """The child of os.fork(): never returns into pytest."""
    code = 1
    try:
        child(*args)  # type: ignore[arg-type]
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def start(method: str, args: tuple[object, ...]) -> tuple[Callable[[], None], Callable[[], int]]:
    """Fork a child running ``child(*args)``; returns (SIGKILL it, wait for its exit code)."""
    if method == "os.fork":
        pid = os.fork()
        if pid == 0:
            run_child(*args)

        def wait() -> int:
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

        return lambda: os.kill(pid, signal.SIGKILL), wait
    proc = multiprocessing.get_context("fork").Process(target=child, args=args)
    proc.start()

    def join() -> int:
        proc.join(60)
        assert proc.exitcode is not None
        return proc.exitcode

    return proc.kill, join


@pytest.mark.parametrize(
    ("method", "which", "ending"),
    [
        ("os.fork", "inherited", "sigkill"),
        ("os.fork", "inherited", "close"),
        ("os.fork", "new", "sigkill"),
        ("os.fork", "new", "close"),
        ("multiprocessing", "inherited", "sigkill"),
    ],
)
def test_the_parent_closing_loses_nothing_the_child_added(
    queue_url: str, method: str, which: str, ending: str
) -> None:
    q = sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1)
    assert q.add("parent")  # the parent's connection is open when it forks
    from_child, child_out = os.pipe()
    child_in, to_child = os.pipe()
    kill, wait = start(method, (queue_url, q, which, child_out, child_in))
    os.close(child_out)  # the child's ends: a child that dies is then an end of file here
    os.close(child_in)
    exited = False
    try:
        expect(from_child, b"20")
        q.close()  # the parent believes it may hold the file's last connection
        send(to_child, b"parent closed")
        expect(from_child, b"40")
        assert fresh_count(queue_url) == 1 + CHILD_ADDS
        if ending == "sigkill":
            kill()
            exited = True
            assert wait() == -signal.SIGKILL
            assert fresh_count(queue_url) == 1 + CHILD_ADDS
        else:
            assert fresh_count(queue_url, "fresh-1", "fresh-2") == 3 + CHILD_ADDS
            send(to_child, b"close")
            exited = True
            assert wait() == 0
            assert fresh_count(queue_url) == 3 + CHILD_ADDS
    finally:
        if not exited:
            kill()
            wait()
        os.close(from_child)
        os.close(to_child)


def test_the_child_takes_its_own_turns_at_the_gate(tmp_path: Path) -> None:
    """The child does not share the parent's gate files: while the parent holds the
    gate, the child's write waits (here: Busy after its busy_timeout), and the
    child's closing of its copies does not let go of the parent's turn."""
    db = tmp_path / "q.db"
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=1, busy_timeout=0.2)
    assert q.add("parent")
    gate = q._backend._gate
    assert gate is not None and gate.acquire(0)
    from_child, child_out = os.pipe()
    pid = os.fork()
    if pid == 0:
        outcome = b"?"
        try:
            try:
                q.add("child")
                outcome = b"added"
            except sqlq.errors.Busy:
                outcome = b"busy"
        finally:
            os.write(child_out, outcome)
            os._exit(0)
    os.close(child_out)
    try:
        assert os.read(from_child, 10) == b"busy"
    finally:
        os.waitpid(pid, 0)
        gate.release()
        os.close(from_child)
    assert q.add("after")
    assert fresh_count(db) == 2
    q.close()


def test_a_fork_during_a_long_call_in_another_thread_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue's lock stays taken past busy_timeout (standing in for a call in
    another thread): the connection cannot be closed before the fork, which the
    parent logs; the parent's queue works on afterwards."""
    q = sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=1, busy_timeout=0.05)
    assert q.add("parent")
    q._backend._lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    finally:
        q._backend._lock.release()
    assert "the child must not use this file" in caplog.text
    assert q.add("after")
    assert q.counts()["AVAILABLE"] == 2
    q.close()
