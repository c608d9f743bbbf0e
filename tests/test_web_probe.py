"""The web dashboard (sqlq.web) probed as an attacker and a new user would: query
parameters no form sends, requests another site makes, tokens that guard nothing.
Each test here failed on the dashboard as first merged (issue 14)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import sqlq
from sqlq.web import create_app

LOCAL = ("127.0.0.1", 50000)
REMOTE = ("192.0.2.7", 50000)


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite database with no task (what these tests probe is the web app's own)."""
    path = str(tmp_path / "jobs.db")
    sqlq.Queue(path, lease_seconds=30, max_attempts=1).close()
    return path


@pytest.fixture
def client(db: str) -> Iterator[TestClient]:
    with TestClient(create_app(db), base_url="http://127.0.0.1:8470", client=LOCAL) as c:
        yield c


@pytest.mark.parametrize(
    "params",
    [
        {"limit": "²"},  # str.isdigit() says yes, int() says no
        {"limit": "\u0661\u0660"},  # int() reads Arabic-Indic digits: still not what a form sends
        {"after": "².1"},
        {"after": "1.\u0661"},
    ],
)
def test_digits_other_than_ascii_are_refused_with_the_reason(
    client: TestClient, params: dict[str, str]
) -> None:
    for path in ("/tasks", "/api/tasks"):
        answer = client.get(path, params=params)
        assert answer.status_code == 400, (path, params, answer.status_code)
        assert "InvalidArgument" in answer.text

