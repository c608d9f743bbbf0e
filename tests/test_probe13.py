"""Probing dedupe keys and priorities (issue 13) as a new user and as an attacker
would, on every face: each test is a problem found that way, fixed unless marked as
an expected failure (which then says why it is not fixed here).

Fixed: a PostgreSQL redrive racing a keyed add (sqlq/postgresql/backend.py), strict
priorities at the longest wait (sqlq/contract.py STRICT_AGING), ``sqlq add --aging
None`` (sqlq/cli/adding.py), ids and keys that PostgreSQL's indexes could not hold (a
limit of 1024 bytes of UTF-8 in the contract, sqlq/contract.py MAX_ID_BYTES).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import databases
import pytest
import sqlalchemy as sa

import sqlq
from sqlq import cli
from sqlq.contract import MAX_TIME, STRICT_AGING
from sqlq.errors import InvalidArgument, InvalidConfig, InvalidTaskId
from sqlq.keys import Added, Keyed

Factory = Callable[..., Any]  # the make_queue fixture of conftest.py


@pytest.fixture
def pg(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty schema on the test server (dropped afterwards)."""
    with databases.fresh_schema(postgres_url) as url:
        yield url


def _wait_for_a_lock_wait(engine: sa.Engine, process: subprocess.Popen[str]) -> None:
    """Until ``process``'s redrive waits for a lock (its update of the test's schema)."""
    deadline = time.monotonic() + 60
    with engine.connect() as conn:
        while time.monotonic() < deadline and process.poll() is None:
            waiting = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE '%%UPDATE sqlq_tasks%%'"
            ).scalar()
            if waiting:
                return
            conn.rollback()  # a transaction reads one snapshot of pg_stat_activity
            time.sleep(0.02)
    raise AssertionError(f"the redrive never waited for a lock: {process.communicate()}")


def test_a_redrive_racing_a_keyed_add_leaves_the_task_dead_on_postgresql(pg: str) -> None:
    """A DEAD task's key is free, so an add takes it; a redrive in another process,
    looking at the same moment, finds no holder yet (the add has not committed) and
    its update then meets the add's row in the unique index: it waits for the add,
    which commits.  The redrive must leave that task DEAD (as the README says) and
    still redrive the others, not fail the whole call with a StorageError."""
    with sqlq.Queue(pg, lease_seconds=30, max_attempts=1) as q:
        for task_id in ("keyed", "plain"):
            q.add(task_id, key="k" if task_id == "keyed" else None)
            assert q.reserve() == task_id and q.fail(task_id) == "DEAD"
        engine = sa.create_engine(pg)
        try:
            with engine.connect() as conn:
                conn.begin()
                assert q.add("new", key="k", conn=conn) == Added(Keyed.ADDED, "new")
                script = f"""
                    import sqlq
                    with sqlq.Queue({pg!r},
                                    lease_seconds=30, max_attempts=1, busy_timeout=120) as q:
                        print(q.redrive())
                """
                redrive = subprocess.Popen(
                    [sys.executable, "-c", textwrap.dedent(script)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                _wait_for_a_lock_wait(engine, redrive)
                conn.commit()
            out, err = redrive.communicate(timeout=120)
        finally:
            engine.dispose()
        assert redrive.returncode == 0, err
        assert out.split() == ["1"]
        states = {t.task_id: t.state for t in q.tasks()}
        assert states == {"keyed": "DEAD", "plain": "AVAILABLE", "new": "AVAILABLE"}
        assert q.add("again", key="k", on_key="merge") == Added(Keyed.MERGED, "new")


#: Text that no compression shrinks, of 4-byte characters in UTF-8: 1024 bytes (the
#: most an id, key, group, name or queue name may take), and one character more.
_FITS = "".join(chr(0x10000 + (n * 7919) % 0xEFFFF) for n in range(256))
_TOO_WIDE = _FITS + "a"


def test_ids_keys_groups_and_names_are_at_most_1024_bytes_on_every_face(
    make_queue: Factory,
) -> None:
    """PostgreSQL's indexes take entries of at most 2,704 bytes, and 1024 characters of
    a wide alphabet are 4 kB: an id or key that SQLite and the WorkQueue took was a
    StorageError there.  Every face now takes at most 1024 bytes of UTF-8 (ASCII: 1024
    characters, as before), and refuses more with a typed error, before any change."""
    q = make_queue(30, 1)
    added = q.add(_FITS, 0, key=_FITS, group=_FITS, name=_FITS)
    assert added == Added(Keyed.ADDED, _FITS)
    lease = q.claim(1)
    assert lease is not None and (lease.task_id, lease.name) == (_FITS, _FITS)
    assert q.complete(_FITS, 1, token=lease.token)
    for kwargs, error in [
        ({"task_id": _TOO_WIDE}, InvalidTaskId),
        ({"key": _TOO_WIDE}, InvalidArgument),
        ({"group": _TOO_WIDE}, InvalidArgument),
        ({"name": _TOO_WIDE}, InvalidArgument),
    ]:
        with pytest.raises(error, match="1025 bytes in UTF-8; the limit is 1024"):
            q.add(kwargs.pop("task_id", "x"), 2, **kwargs)
    with pytest.raises(InvalidTaskId, match="1025 bytes"):
        q.add_many(["y", _TOO_WIDE], 2)
    assert q.status("x", 2) is None and q.status("y", 2) is None
    assert q.status(_TOO_WIDE, 2) is None  # asking about such an id is no error


def test_a_queue_name_of_1024_wide_bytes_with_an_id_and_key_as_wide_fits_postgresql(
    queue_url: str,
) -> None:
    """The unique indexes pair the queue name with the id and with the key: both at
    the limit still fit one index entry on PostgreSQL; a wider queue name is refused."""
    options = databases.queue_options(queue_url)
    with sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1, queue=_FITS, **options) as q:
        assert q.add(_FITS, key=_FITS, group=_FITS) == Added(Keyed.ADDED, _FITS)
        assert q.add("other", key=_FITS) == Added(Keyed.REFUSED, _FITS)
        assert q.status(_FITS) == "AVAILABLE"
    with pytest.raises(InvalidConfig, match="queue name is 1025 bytes"):
        sqlq.Queue(queue_url, lease_seconds=30, max_attempts=1, queue=_TOO_WIDE, **options)


def test_strict_priorities_hold_across_the_longest_wait_there_can_be(make_queue: Factory) -> None:
    """aging=None: a lower priority waits while any higher one is AVAILABLE, however
    long it waited; the strict aging was exactly the longest wait (MAX_TIME), so a
    task of priority 0 added at time 0 tied one of priority 1 added at MAX_TIME, and
    went first, as the older of the two."""
    q = make_queue(10, 3, aging=None)
    q.add("low", 0)
    q.add("high", MAX_TIME, priority=1)
    assert q.reserve(MAX_TIME) == "high"


def test_sqlq_add_aging_none_as_python_spells_it_and_the_error_names_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's Python says aging=None: `--aging None` is strict priorities too,
    and a bad --aging says that 'none' is the other choice."""
    db = str(tmp_path / "q.db")
    assert cli.main(["add", db, "a", "--priority", "1", "--aging", "None"]) == 0
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT aging FROM sqlq_tasks").fetchall() == [(STRICT_AGING,)]
    assert cli.main(["add", db, "b", "--aging", "never"]) == 2
    assert "or 'none' for strict priorities" in capsys.readouterr().err
