"""A queue's settings stored with it (issue 23, item 7; sqlq.settings): opened without
them, a Queue, an AsyncQueue, `sqlq add` and `sqlq worker` use the stored ones;
`sqlq configure` (Queue.configure) changes them; `sqlq stats` shows them; a setting
given to a handle applies to that handle alone.  On every durable backend."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sqlq
from sqlq.errors import InvalidConfig
from sqlq.settings import DEFAULTS, QueueSettings

TESTS = str(Path(__file__).resolve().parent)  # runner_handlers, for the worker processes


def _sqlq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": TESTS},
    )


def _opened_elsewhere(url: str, queue: str = "default") -> dict[str, object]:
    """The settings a Queue opened without any has, in another process."""
    script = (
        "import json, sys, sqlq\n"
        "with sqlq.Queue(sys.argv[1], queue=sys.argv[2]) as q:\n"
        "    print(json.dumps([q.lease_seconds, q.max_attempts,\n"
        "                      [q.retry.kind, q.retry.base, q.retry.cap]]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, url, queue], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lease, attempts, retry = json.loads(done.stdout)
    return {"lease_seconds": lease, "max_attempts": attempts, "retry": retry}


def test_a_queue_opens_without_settings_with_the_defaults(queue_url: str) -> None:
    with sqlq.Queue(queue_url) as q:
        assert (q.lease_seconds, q.max_attempts, q.retry) == DEFAULTS
        assert q.settings() is None  # none stored
        assert q.add("t") and q.reserve() == "t"
        info = q.info("t")
        assert info is not None and info.max_attempts == DEFAULTS.max_attempts


def test_settings_configured_in_one_process_are_read_by_another(queue_url: str) -> None:
    configured = _sqlq(
        "configure", queue_url, "--lease", "1m", "--max-attempts", "5",
        "--retry", "exponential:1s:60s",
    )  # fmt: skip
    assert configured.returncode == 0, configured.stderr
    assert _opened_elsewhere(queue_url) == {
        "lease_seconds": 60.0,
        "max_attempts": 5,
        "retry": ["exponential_jitter", 1.0, 60.0],
    }
    # another queue of the same database keeps the defaults
    assert _opened_elsewhere(queue_url, "other")["max_attempts"] == DEFAULTS.max_attempts
    # a change keeps the settings not given
    assert _sqlq("configure", queue_url, "--max-attempts", "7").returncode == 0
    assert _opened_elsewhere(queue_url) == {
        "lease_seconds": 60.0,
        "max_attempts": 7,
        "retry": ["exponential_jitter", 1.0, 60.0],
    }


def test_an_explicit_setting_applies_to_its_handle_alone(queue_url: str) -> None:
    with sqlq.Queue(queue_url) as q:
        stored = q.configure(lease_seconds=45, max_attempts=4, retry=sqlq.Retry.fixed(2))
        assert stored == QueueSettings(45, 4, sqlq.Retry.fixed(2)) == q.settings()
    with sqlq.Queue(queue_url, max_attempts=9) as mine, sqlq.Queue(queue_url) as theirs:
        assert (mine.lease_seconds, mine.max_attempts, mine.retry) == (45, 9, sqlq.Retry.fixed(2))
        assert (theirs.lease_seconds, theirs.max_attempts) == (45, 4)
        mine.add("a")
        theirs.add("b")
        assert [mine.info(t).max_attempts for t in ("a", "b")] == [9, 4]  # type: ignore[union-attr]
        # configuring through a handle with an explicit setting keeps that handle's
        mine.configure(max_attempts=2, lease_seconds=50)
        assert (mine.lease_seconds, mine.max_attempts) == (50, 9)
    assert _opened_elsewhere(queue_url)["max_attempts"] == 2


def test_configure_keeps_each_stored_setting_it_is_not_given(queue_url: str) -> None:
    """configure is one statement that takes the settings given and keeps each stored one
    not given (lease, attempts and retry alike), or the default where none is stored."""
    fixed, immediate = sqlq.Retry.fixed(2), sqlq.Retry.immediate()
    with sqlq.Queue(queue_url) as q:
        assert q.configure(max_attempts=4) == QueueSettings(DEFAULTS.lease_seconds, 4, immediate)
        assert q.configure(lease_seconds=45, retry=fixed) == QueueSettings(45, 4, fixed)
        assert q.configure(lease_seconds=60) == QueueSettings(60, 4, fixed)
        assert q.configure(max_attempts=7) == QueueSettings(60, 7, fixed)
        assert q.configure(retry=immediate) == QueueSettings(60, 7, immediate)
        assert q.settings() == QueueSettings(60, 7, immediate)


def test_bad_settings_are_refused_and_nothing_is_stored(queue_url: str) -> None:
    with sqlq.Queue(queue_url) as q:
        with pytest.raises(InvalidConfig):
            q.configure(max_attempts=0)
        with pytest.raises(InvalidConfig):
            q.configure(lease_seconds=-1)
        assert q.settings() is None
    refused = _sqlq("configure", queue_url, "--max-attempts", "0")
    assert refused.returncode == 2 and "max-attempts" in refused.stderr


def test_an_async_queue_opens_with_the_stored_settings(queue_url: str) -> None:
    with sqlq.Queue(queue_url) as q:
        q.configure(lease_seconds=12, max_attempts=6)

    async def main() -> tuple[float, int]:
        async with sqlq.AsyncQueue(queue_url) as aq:
            return aq.sync.lease_seconds, aq.sync.max_attempts

    assert asyncio.run(main()) == (12, 6)


def test_sqlq_worker_and_add_without_flags_use_the_stored_settings(queue_url: str) -> None:
    assert _sqlq("configure", queue_url, "--lease", "40s", "--max-attempts", "4").returncode == 0
    added = _sqlq("add", queue_url, "t")
    assert added.returncode == 0, added.stderr
    worker = _sqlq(
        "worker", queue_url, "runner_handlers:settings", "--burst", "--summary-every", "0"
    )
    assert worker.returncode == 0, worker.stderr
    with sqlq.Queue(queue_url) as q:
        info = q.info("t")
    assert info is not None and info.max_attempts == 4
    assert info.result == {
        "lease_seconds": 40.0,
        "max_attempts": 4,
        "retry": ["immediate", 0.0, 0.0],
    }


def test_sqlq_stats_shows_the_settings(queue_url: str) -> None:
    with sqlq.Queue(queue_url) as q:
        q.add("t")
        q.configure(lease_seconds=90, retry=sqlq.Retry.fixed(30))
    with sqlq.Queue(queue_url, queue="plain") as q:
        q.add("u")
    shown = _sqlq("stats", queue_url, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["settings"] == {
        "default": {
            "lease_seconds": 90.0,
            "max_attempts": 5,
            "retry": {"kind": "fixed", "base": 30.0, "cap": 30.0},
            "stored": True,
        },
        "plain": {**DEFAULTS.as_json(), "stored": False},
    }
    text = _sqlq("stats", queue_url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert any(line.split() == ["default", "1m30s", "5", "fixed:30s", "stored"] for line in lines)
    assert any(line.split() == ["plain", "30s", "5", "immediate", "defaults"] for line in lines)


def test_a_work_queue_still_needs_its_settings() -> None:
    with pytest.raises(TypeError):
        sqlq.WorkQueue()  # type: ignore[call-arg]
