"""A full disk under sqlq.

The promise (issue 5): the call fails with a typed sqlq error (StorageFull),
nothing of it is half-applied, integrity_check passes, every call that returned
before is still there, and the same Queue object works again once space is
freed.  Three ways to fill the disk:

* a real ENOSPC: scenario.py mounts a 2 MiB tmpfs inside a private mount
  namespace (root and ``unshare`` needed) and adds tasks until it is full;
  space comes back by deleting a filler file, later by remounting bigger;
* the fault shim (shim.c) failing every write of the -wal file with ENOSPC;
* ``PRAGMA max_page_count`` on the queue's own connection (no root, no shim).

While full, the scenarios also call complete, fail, claim and add_many: a
complete that fails leaves the task RESERVED under the same lease token, so the
same complete succeeds once there is room again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from needs import need

import sqlq

if TYPE_CHECKING:
    from conftest import FaultShim, Integrity, RunScenario

pytestmark = [pytest.mark.faults]

SQLITE_FULL = 13
PAYLOAD = "p" * 3000


@pytest.fixture
def private_mounts(tmp_path: Path) -> Iterator[list[str]]:
    """The command prefix that runs a process in a private mount namespace, where it
    may mount a tmpfs; skips unless root with a working ``unshare -m``."""
    need(sys.platform.startswith("linux"), "mount namespaces are Linux only")
    need(os.geteuid() == 0, "mounting a small tmpfs needs root")
    unshare = shutil.which("unshare")
    need(unshare and shutil.which("mount"), "needs unshare and mount (util-linux)")
    prefix = [unshare, "-m", "--propagation", "private"]
    probe = tmp_path / "probe"
    probe.mkdir()
    script = f"mount -t tmpfs -o size=64k sqlq-probe '{probe}' && umount '{probe}'"
    proc = subprocess.run([*prefix, "sh", "-c", script], capture_output=True, text=True)
    need(
        proc.returncode == 0,
        f"cannot mount a tmpfs in a private mount namespace: {proc.stderr.strip()}",
    )
    yield prefix


def expect_full(result: dict[str, Any]) -> None:
    """One call's record: StorageFull from SQLITE_FULL, nothing chained to the cause."""
    assert not result["ok"], f"the call succeeded: {result}"
    assert result["error"] == "StorageFull", result
    assert result["cause"] is not None and result["code"] == SQLITE_FULL, result
    assert result["cause_context"] == "None", f"a second error was chained: {result}"


def expect_ok(result: dict[str, Any], value: Any) -> None:
    assert result == {"ok": True, "value": value}


def check_disk_full(out: dict[str, Any]) -> None:
    """What scenario.py's disk-full records must show, however the disk filled up."""
    first, second = out["leases"]
    for fill in ("fill1", "drain1", "fill2", "drain2"):
        expect_full(out[fill]["error"])

    full = out["while_full"]
    for call in ("add", "add_many", "complete", "fail", "claim", "status"):
        expect_full(full[call])
    assert full["in_transaction"] is False
    assert full["counts_unchanged"]

    # Space is back: nothing of the refused calls was applied ...
    freed = out["freed"]
    assert freed["fill_missing"]["state"] is None
    assert freed["late"]["state"] is None
    assert freed["batch"] == [None] * 5
    assert freed["first"] == {"state": "RESERVED", "token": first}
    assert freed["second"] == {"state": "RESERVED", "token": second}
    assert freed["counts_unchanged"]
    # ... and the same Queue does all of them now.
    retry = out["retry"]
    expect_ok(retry["complete"], True)
    expect_ok(retry["complete_again"], True)
    expect_ok(retry["fail"], "AVAILABLE")
    expect_ok(retry["add"], True)
    expect_ok(retry["add_many"], [True] * 5)
    assert out["first_final"] == {"state": "COMPLETED", "token": first}
    assert out["second_final"] == {"state": "AVAILABLE", "token": second}
    assert out["missing"] == [] and out["integrity"] == "ok"

    # Full a second time, space back a second time.
    expect_ok(out["after_fill2"], True)
    assert out["missing2"] == [] and out["integrity2"] == "ok"
    assert out["missing_after_reopen"] == [] and out["integrity_after_reopen"] == "ok"
    assert sum(out["counts"].values()) == out["acked"]


def test_disk_full_tmpfs(private_mounts: list[str], run_scenario: RunScenario) -> None:
    """A real ENOSPC: a queue on a 2 MiB tmpfs is filled by its own adds until SQLite
    reports SQLITE_FULL; every call then fails with StorageFull and changes nothing;
    after a filler file is deleted (and, the second time, after the tmpfs is
    remounted bigger) the same Queue completes, fails and adds what it refused."""
    out = run_scenario("disk-full", "--mode", "tmpfs", prefix=private_mounts)
    check_disk_full(out)
    assert out["fill1"]["added"] > 0 and out["fill2"]["added"] > 0


def test_disk_full_shim(fault_shim: FaultShim, run_scenario: RunScenario) -> None:
    """ENOSPC from every write of the -wal file (the fault shim): the same promises as
    on a real full disk, without root."""
    out = run_scenario("disk-full", "--mode", "shim", shim=fault_shim)
    check_disk_full(out)


def _missing(queue: sqlq.Queue, tasks: dict[str, Any]) -> list[str]:
    found = {info.task_id: info.payload for info in queue.tasks(limit=10_000)}
    return [t for t, payload in tasks.items() if t not in found or found[t] != payload]


def _cause_ok(exc: BaseException) -> None:
    cause = exc.__cause__
    assert cause is not None and getattr(cause, "sqlite_errorcode", None) == SQLITE_FULL
    assert cause.__context__ is None, "a second error was chained to SQLite's"


def test_disk_full_max_page_count(tmp_path: Path, integrity: Integrity) -> None:
    """The database at its size limit (PRAGMA max_page_count on the queue's own
    connection): adds that need a new page fail with StorageFull and leave no trace,
    add_many is all or nothing, a fail() whose error text needs room leaves the task
    RESERVED under its token; once the limit is raised the same Queue does it all."""
    db = tmp_path / "queue.db"
    with sqlq.Queue(db, lease_seconds=300, max_attempts=5) as queue:
        acked: dict[str, Any] = {}
        for i in range(10):
            acked[f"t{i}"] = {"n": i}
            assert queue.add(f"t{i}", payload={"n": i})
        first, second = queue.claim(), queue.claim()
        assert first is not None and second is not None
        conn = queue._backend._connection()
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages + 8}")

        refused = None
        for i in range(1000):
            try:
                queue.add(f"fill-{i}", payload=PAYLOAD)
            except sqlq.errors.StorageFull as exc:
                _cause_ok(exc)
                refused = f"fill-{i}"
                break
            acked[f"fill-{i}"] = PAYLOAD
        assert refused is not None, "the database never reached max_page_count"
        assert queue.status(refused) is None  # rewrites the clock in place: fits
        counts = queue.counts()

        batch = [(f"batch-{j}", PAYLOAD) for j in range(3)]
        with pytest.raises(sqlq.errors.StorageFull) as caught:
            queue.add_many(batch)
        _cause_ok(caught.value)
        assert [queue.status(task_id) for task_id, _ in batch] == [None] * 3

        with pytest.raises(sqlq.errors.StorageFull) as caught:
            queue.fail(second.task_id, token=second.token, error="e" * 4000)
        _cause_ok(caught.value)
        info = queue.info(second.task_id)
        assert info is not None and (info.state, info.token) == ("RESERVED", second.token)
        assert queue.counts() == counts

        # complete rewrites the task's row in place, so it may fit even now; if it
        # does not, the task stays RESERVED under the same token.
        try:
            done: bool | None = queue.complete(first.task_id, token=first.token)
        except sqlq.errors.StorageFull as exc:
            _cause_ok(exc)
            done = None
            info = queue.info(first.task_id)
            assert info is not None and (info.state, info.token) == ("RESERVED", first.token)
        assert done in (True, None)

        conn.execute(f"PRAGMA max_page_count = {pages + 100_000}")
        assert queue.complete(first.task_id, token=first.token) is True
        assert queue.fail(second.task_id, token=second.token, error="e" * 4000) == "AVAILABLE"
        assert queue.add_many(batch) == [True] * 3
        assert queue.add(refused, payload=PAYLOAD) is True
        acked.update({**dict(batch), refused: PAYLOAD})
        assert queue.status(first.task_id) == "COMPLETED"
        assert _missing(queue, acked) == []
    assert integrity(db) == "ok"
    with sqlq.Queue(db, lease_seconds=300, max_attempts=5) as queue:
        assert _missing(queue, acked) == []
