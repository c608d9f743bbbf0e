"""Which tests are heavy (seconds each), and the order the xdist workers take them in:
conftest.py's collection hook and fixtures use these.

Not a test module; imported as ``import heavy`` (tests/ is on ``sys.path``).
"""

from __future__ import annotations

from typing import Any

import pytest

#: Marks of the tests that take seconds each (real processes, faults, long histories):
#: they run first, so that under pytest-xdist each worker ends on short tests and
#: both cores stay busy until the end of the run.
HEAVY = ("processes", "faults", "slow")


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


def heavy_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The ``processes`` and ``slow`` tests, then the others with the ``faults`` tests
    spread evenly among them (each waits for the other worker's heavy test to end:
    _fault_tests_alone), each part in collection order."""
    heavy, faults, light = [], [], []
    for item in items:
        if item.get_closest_marker("faults"):
            faults.append(item)
        elif any(item.get_closest_marker(m) for m in HEAVY):
            heavy.append(item)
        else:
            light.append(item)
    step = len(light) / max(1, len(faults))
    places = [(i, 1) for i in range(len(light))] + [(j * step, 0) for j in range(len(faults))]
    parts = [*light, *faults]
    order = sorted(range(len(parts)), key=lambda k: places[k])
    return heavy + [parts[k] for k in order]
