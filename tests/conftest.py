"""Shared fixtures: one conformance suite runs against every face of the queue."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import postgres
import pytest

import sqlq

Factory = Callable[..., Any]


@pytest.fixture(params=["memory", "sqlite"])
def make_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """make_queue(lease_seconds, max_attempts, **options) -> a WorkQueue or a Queue on a new file.

    ``options`` are those both faces take: retry, rng, max_payload_bytes.
    """
    opened: list[sqlq.Queue] = []

    def make(lease_seconds: float, max_attempts: int, **options: Any) -> Any:
        if request.param == "memory":
            return sqlq.WorkQueue(lease_seconds, max_attempts, **options)
        queue = sqlq.Queue(
            tmp_path / f"q{len(opened)}.db",
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            synchronous="normal",
            **options,
        )
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "queue.db"


@pytest.fixture(scope="session")
def migration_files() -> list[Path]:
    """The SQLite backend's migration files in order, listed by the test itself (not
    by sqlq.sqlite.migrate): the newest schema version is their number."""
    folder = Path(__file__).resolve().parent.parent / "sqlq" / "sqlite" / "migrations"
    return sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.sql"))


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The SQLAlchemy URL of a PostgreSQL server, one for the whole session (tests/postgres.py):
    a throwaway cluster, or the user's server named by SQLQ_TEST_POSTGRES_URL."""
    with postgres.server() as url:
        yield url
