"""Shared fixtures: one conformance suite runs against every face of the queue.

``make_queue`` gives the in-memory WorkQueue and a Queue on each durable backend;
``queue_url`` and ``new_url`` give databases of each durable backend (tests/databases.py)
for the tests of what only a durable queue does.  A test of the contract takes its
database from them and uses only public API, so that it runs on every backend.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import django_venv
import postgres
import pytest
from databases import DURABLE_KINDS, fresh_databases, queue_options
from heavy import LOCKED, heavy_first, spawns, turn
from hypothesis import Phase, settings

import sqlq

# Under the mutation check (tests/mutation_check.py sets SQLQ_MUTANT), a property test
# fails at its first failing example without shrinking it: the check needs a failure,
# not the smallest one, and shrinking a history that makes a PostgreSQL schema per
# example takes minutes. Tests that set their own settings keep them but for phases.
settings.register_profile(
    "mutant", phases=(Phase.explicit, Phase.reuse, Phase.generate), print_blob=False
)
if os.environ.get("SQLQ_MUTANT"):
    settings.load_profile("mutant")

Factory = Callable[..., Any]


@pytest.fixture(params=DURABLE_KINDS)
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """new_url() -> the URL of a new, empty database, each call another one, of each
    durable kind in turn (tests/databases.py): the registry every test of the durable
    queue's contract takes its databases from."""
    with fresh_databases(request.param, tmp_path, server(request)) as new:
        yield new


@pytest.fixture(params=DURABLE_KINDS)
def migrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """migrated_url() -> the URL of a new database that holds sqlq's current schema and
    no task, each call another one, of each durable kind in turn: new_url's, for tests
    that only use queues on it (a SQLite file is copied, a PostgreSQL schema comes from
    a pool and is emptied back afterwards: see tests/databases.py).  A test of creating,
    migrating or altering a database takes new_url.  ``with migrated_url.one() as url:``
    gives one back at the end of the block (one per hypothesis example)."""
    with fresh_databases(request.param, tmp_path, server(request), migrated=True) as new:
        yield new


@pytest.fixture
def queue_url(new_url: Callable[[], str]) -> str:
    """The URL of a new, empty database, of each durable kind in turn."""
    return new_url()


@pytest.fixture(params=["memory", *DURABLE_KINDS])
def make_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """make_queue(lease_seconds, max_attempts, **options) -> a WorkQueue, or a Queue on a
    new database of each durable kind (migrated_url's: SQLite's a copy of a migrated file).

    ``options`` are those both faces take: retry, rng, max_payload_bytes.
    """
    if request.param == "memory":
        yield sqlq.WorkQueue
        return
    with ExitStack() as opened:
        new = opened.enter_context(
            fresh_databases(request.param, tmp_path, server(request), migrated=True)
        )

        def make(lease_seconds: float, max_attempts: int, **options: Any) -> Any:
            url = new()
            queue = sqlq.Queue(
                url,
                lease_seconds=lease_seconds,
                max_attempts=max_attempts,
                **queue_options(url),
                **options,
            )
            opened.callback(queue.close)
            return queue

        yield make


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: two workers a core. The process tests spend much of their time waiting on
    the processes and servers they start, so one worker a core leaves the cores idle: the
    whole suite took 7:00 with 2 workers on two quiet cores, 6:17 with 4 (the same clone,
    back to back). --maxprocesses caps it."""
    return 2 * (os.cpu_count() or 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that starts processes (spawns()) is marked ``processes`` if it is not yet,
    so that ``-m "not processes"`` leaves out every test that waits for another process.

    In a pytest-xdist worker (only workers collect), the heavy tests first (heavy_first):
    every worker collects the same order, as xdist requires.  A run without workers
    (-n 0, as the mutation check's, whose -x stops at the first failure of the fast
    files it lists first) keeps the files' order."""
    for item in items:
        if not item.get_closest_marker("processes") and spawns(item):
            item.add_marker(pytest.mark.processes)
    if hasattr(config, "workerinput"):
        items[:] = heavy_first(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run that will run a Django test starts building the Django venv now, in the
    background, and runs those tests after the other heavy ones (tests/django_venv.py)."""
    if session.config.option.collectonly:
        return
    if any(django_venv.FIXTURE in getattr(item, "fixturenames", ()) for item in session.items):
        factory = session.config._tmp_path_factory  # type: ignore[attr-defined]
        django_venv.start(django_venv.shared_folder(factory.getbasetemp()))


@pytest.fixture(autouse=True)
def _fault_tests_alone(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A ``faults`` test runs while no other worker runs a ``processes`` test: it bounds
    what processes under stress do (a -wal file's size, a frozen writer's wait), which
    another worker's processes on the same two cores would starve.  heavy.turn: alone
    for it, shared for the ``processes`` tests (heavy.LOCKED), on files of the run's
    temporary folder, which its xdist workers share (without workers: no lock).  A
    waiting fault test holds back the processes tests that would start after it."""
    marks = {m for m in LOCKED if request.node.get_closest_marker(m)}
    if not marks or not hasattr(request.config, "workerinput"):
        yield
        return
    with turn(tmp_path_factory.getbasetemp().parent, alone="faults" in marks):
        yield


def server(request: pytest.FixtureRequest) -> Callable[[], str]:
    """The session's PostgreSQL server, started when a test first needs it."""
    return lambda: request.getfixturevalue("postgres_url")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "queue.db"


@pytest.fixture(scope="session")
def migration_files() -> list[Path]:
    """The SQLite backend's migration files in order, listed by the test itself (not
    by sqlq.sqlite.migrate): the newest schema version is their number."""
    folder = Path(__file__).resolve().parent.parent / "migrations" / "sqlite"
    return sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.sql"))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The SQLAlchemy URL of a PostgreSQL server, one for the whole session (tests/postgres.py):
    a throwaway cluster, or the user's server named by SQLQ_TEST_POSTGRES_URL."""
    with postgres.server() as url:
        yield url
