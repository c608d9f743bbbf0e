"""Which tests are heavy (seconds each), the order the xdist workers take them in, and
the lock that runs a fault test alone: conftest.py's collection hook and fixtures use these.

For a new test: mark it ``slow`` if it takes seconds of CPU in this process, ``faults``
if it injects a fault whose bounds other workers' processes would upset (it then runs
while no other heavy test does: ``turn``); a test that starts processes is marked
``processes`` by conftest.py itself (``spawns``).  Heavy tests run first, one at a time
per worker, so that the run ends on short tests on every core.

Not a test module; imported as ``import heavy`` (tests/ is on ``sys.path``).
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django_venv
import pytest

#: Marks of the tests that take seconds each (real processes, faults, long histories):
#: they run first, so that under pytest-xdist each worker ends on short tests and
#: both cores stay busy until the end of the run.
HEAVY = ("processes", "faults", "slow")

#: The heavy tests that take ``turn``'s lock: those whose processes load the machine
#: (a fault test runs while none of them does).  Not ``slow``: a long history runs in
#: its test's process, one core, as a light test does; a fault test that waited for one
#: (up to 290 s at load 15) idled its worker's core all that time.
LOCKED = ("processes", "faults")


#: Names whose use in a test (or in a function or fixture of its module that it calls)
#: starts another process: ``subprocess.run``, ``Popen``, ``sys.executable``, ...
SPAWNS = frozenset({"subprocess", "Popen", "executable", "multiprocessing", "fork"})


def spawns(item: pytest.Item) -> bool:
    """Whether the test starts processes: its code, the nested functions in it and the
    functions and fixtures of its module it names (followed through their own names)
    use one of SPAWNS."""
    function = getattr(item, "function", None)
    module = getattr(item, "module", None)
    if function is None or module is None:
        return False
    names = vars(module)
    fixtures = getattr(item, "fixturenames", ())
    todo = [function.__code__] + [
        f.__wrapped__.__code__ if hasattr(f, "__wrapped__") else f.__code__
        for name in fixtures
        if callable(f := names.get(name)) and hasattr(getattr(f, "__wrapped__", f), "__code__")
    ]
    seen: set[Any] = set()
    while todo:
        code = todo.pop()
        if code in seen:
            continue
        seen.add(code)
        if SPAWNS.intersection(code.co_names):
            return True
        todo += [c for c in code.co_consts if hasattr(c, "co_names")]
        for name in code.co_names:
            called = names.get(name)
            if callable(called) and getattr(called, "__module__", None) == module.__name__:
                inner = getattr(getattr(called, "__wrapped__", called), "__code__", None)
                if inner is not None:
                    todo.append(inner)
    return False


#: Session fixtures built in the background from the start of the run (the Django
#: venv: tests/django_venv.py): the tests that take one come after the other heavy
#: tests, so that the build has had those minutes to finish.
BUILT_FIRST = frozenset({django_venv.FIXTURE})


def heavy_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The ``slow`` tests (the longest, minutes under load: first, so that none starts
    near the end of the run), then the ``processes`` tests, then those that take a
    fixture built in the background (BUILT_FIRST), then the others with the
    ``faults`` tests spread evenly among them (each waits for the other worker's
    processes test to end: _fault_tests_alone), each part in collection order."""
    slow, heavy, built, faults, light = [], [], [], [], []
    for item in items:
        if BUILT_FIRST & set(getattr(item, "fixturenames", ())):
            built.append(item)
        elif item.get_closest_marker("faults"):
            faults.append(item)
        elif item.get_closest_marker("slow"):
            slow.append(item)
        elif any(item.get_closest_marker(m) for m in HEAVY):
            heavy.append(item)
        else:
            light.append(item)
    step = len(light) / max(1, len(faults))
    places = [(i, 1) for i in range(len(light))] + [(j * step, 0) for j in range(len(faults))]
    parts = [*light, *faults]
    order = sorted(range(len(parts)), key=lambda k: places[k])
    return slow + heavy + built + [parts[k] for k in order]


#: The files of ``turn``'s two locks, in the folder the run's xdist workers share.
LOCK_NAME = "sqlq-heavy-tests.lock"
TURNSTILE_NAME = "sqlq-heavy-tests.turnstile"


@contextmanager
def turn(folder: Path, *, alone: bool) -> Iterator[None]:
    """The block runs while no ``alone`` block of another process (or open) runs; an
    ``alone`` block while no other block runs at all.  Readers and a writer on a flock:
    a shared lock for the others, an exclusive one for ``alone``.

    A turnstile (a second lock, held only while waiting for the first) keeps a waiting
    ``alone`` block from starving: once it waits, no new block starts before it.
    Without it, a worker running one heavy test after another takes the shared lock
    again the moment it lets it go (flock favours no waiter), and a fault test on the
    other worker waited for all of them while its core stood idle."""
    with (folder / LOCK_NAME).open("a") as lock, (folder / TURNSTILE_NAME).open("a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
