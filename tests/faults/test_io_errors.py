"""I/O errors under sqlq, injected with the LD_PRELOAD fault shim (shim.c).

Each test runs one scenario of scenario.py in a process of its own under the
shim; the scenario arms a fault (a failing write of the -wal file, a failing
fsync, a failing read of the database, ...), makes calls, disarms it, looks at
what is left, and prints what it saw as JSON.  The tests check the promises of
sqlq.errors: every failure is a typed StorageError keeping SQLite's error as
its cause (with no second error from a blind ROLLBACK chained to it), the
call's transaction did not take effect, the database file is never replaced,
deleted or "repaired", and the same Queue works again once the fault is gone.

pysqlite3 0.6.1 reports primary result codes only (SQLITE_IOERR = 10, not
SQLITE_IOERR_WRITE = 778), so the tests accept the primary code or the one
extended code each fault should give.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import sqlq

if TYPE_CHECKING:
    from conftest import FaultShim, Integrity, RunScenario

pytestmark = [pytest.mark.faults]

SQLITE_IOERR, SQLITE_CORRUPT = 10, 11
SQLITE_IOERR_READ, SQLITE_IOERR_WRITE, SQLITE_IOERR_FSYNC = 266, 778, 1034


def expect_error(result: dict[str, Any], error: str | tuple[str, ...], *codes: int) -> None:
    """``result`` (a scenario's record of one call) is a raise of ``error`` translated
    from a DB-API error with one of ``codes``, and with nothing chained to that cause."""
    errors = (error,) if isinstance(error, str) else error
    assert not result["ok"], f"the call succeeded: {result}"
    assert result["error"] in errors, result
    assert result["storage_error"], result
    assert result["cause"] is not None, f"no DB-API error kept as __cause__: {result}"
    assert result["code"] in codes, result
    assert result["cause_context"] == "None", f"a second error was chained: {result}"


def expect_ok(result: dict[str, Any], value: Any) -> None:
    assert result == {"ok": True, "value": value}


def test_shim_counts_flips_and_shifts_the_clock(fault_shim: FaultShim, tmp_path: Path) -> None:
    """The shim itself: ``after``/``count`` pick exactly the calls that fail, ``flip``
    inverts what a read returns, a rewritten file re-arms its rules, and
    ``clock_offset`` shifts time.time() but not time.monotonic()."""
    control, target, log = tmp_path / "ctl", tmp_path / "target.bin", tmp_path / "log"
    probe = f"""
import json, os, sys, time
control, target = {str(control)!r}, {str(target)!r}
def write(text):
    with open(control + ".tmp", "w") as f:
        f.write(text)
    os.replace(control + ".tmp", control)
out = {{}}
write("log={log}\\nfault op=write path=target.bin$ errno=ENOSPC after=2 count=2\\n")
fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
results = []
for _ in range(6):
    try:
        results.append(os.write(fd, b"ab"))
    except OSError as exc:
        results.append(exc.errno)
out["writes"] = results
write("# again\\nfault op=pwrite path=target.bin$ errno=EIO count=1\\n")
try:
    os.pwrite(fd, b"x", 0)
except OSError as exc:
    out["pwrite"] = exc.errno
write("fault op=read path=target.bin$ action=flip min_offset=2\\n")
out["flipped"] = [os.pread(fd, 2, 0).hex(), os.pread(fd, 2, 2).hex()]
write("")
out["plain"] = os.pread(fd, 2, 2).hex()
wall, mono = time.time(), time.monotonic()
write("clock_offset=-86400.5\\n")
out["shift"] = time.time() - wall
out["mono"] = time.monotonic() - mono
write("")
out["back"] = time.time() - wall
print(json.dumps(out))
"""
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env=fault_shim.env(control),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["writes"] == [2, 2, 28, 28, 2, 2]  # ENOSPC for the 3rd and 4th write
    assert out["pwrite"] == 5
    assert out["flipped"] == ["6162", "9e9d"]  # "ab" as is, then "ab" inverted
    assert out["plain"] == "6162"
    assert -86400.5 - 1 < out["shift"] < -86400.5 + 1
    assert 0 <= out["mono"] < 1
    assert 0 <= out["back"] < 1
    assert log.read_text().count("write fd=") == 2


def test_wal_write_error(fault_shim: FaultShim, run_scenario: RunScenario) -> None:
    """Writes of the -wal file fail (EIO) while add, add_many and complete commit: each
    raises StorageIOError with SQLite's error as the cause, nothing of it is stored,
    and once the writes work again the same Queue does everything it refused."""
    out = run_scenario("wal-write", shim=fault_shim)
    for call in ("add", "add_many", "complete"):
        expect_error(out[call], "StorageIOError", SQLITE_IOERR, SQLITE_IOERR_WRITE)
    assert out["faults"] and all(_on(line, "queue.db-wal") for line in out["faults"])
    assert out["in_transaction"] is False
    assert out["counts_unchanged"]

    after = out["after"]
    assert after["x1"]["state"] is None and after["b1"]["state"] is None
    assert after["leased"] == {"state": "RESERVED", "token": after["lease_token"]}
    assert after["counts_unchanged"]

    expect_ok(out["retry"]["add"], True)
    expect_ok(out["retry"]["add_many"], [True, True])
    expect_ok(out["retry"]["complete"], True)
    assert out["missing"] == [] and out["missing_after_reopen"] == []
    assert out["integrity"] == "ok"
    assert out["leased_after_reopen"]["state"] == "COMPLETED"


def test_commit_fsync_error_then_retry(fault_shim: FaultShim, run_scenario: RunScenario) -> None:
    """The fsync of the -wal file fails while complete commits: StorageIOError.  The
    commit's frames are in the -wal file, but SQLite did not publish them (the
    same and a second connection still see the task RESERVED); complete retried
    with the same lease token returns True, and True again after that."""
    out = run_scenario("commit-fsync", shim=fault_shim)
    expect_error(out["complete"], "StorageIOError", SQLITE_IOERR, SQLITE_IOERR_FSYNC)
    assert out["faults"] and all(
        _on(line, "queue.db-wal", "fsync", "fdatasync") for line in out["faults"]
    )
    assert out["in_transaction"] is False
    assert out["wal_grew"]
    token = out["lease_token"]
    assert out["same_queue_sees"] == {"state": "RESERVED", "token": token}
    assert out["other_connection_sees"] == {"state": "RESERVED", "token": token}
    expect_ok(out["retry"], True)
    expect_ok(out["retry_again"], True)
    assert out["final"] == {"state": "COMPLETED", "token": token}
    assert out["missing"] == [] and out["integrity"] == "ok"


def test_commit_fsync_error_then_crash(
    fault_shim: FaultShim, run_scenario: RunScenario, tmp_path: Path, integrity: Integrity
) -> None:
    """The outcome of a commit whose fsync failed is unknown: the process dies right
    after the StorageIOError, and the next process to open the file rebuilds the
    WAL index from the -wal file, which may hold that commit's frames (with SQLite
    3.53 it does: the "failed" complete took effect).  Either way, complete
    retried with the same lease token says True, and another token False."""
    out = run_scenario("commit-fsync-crash", shim=fault_shim)
    expect_error(out["complete"], "StorageIOError", SQLITE_IOERR, SQLITE_IOERR_FSYNC)
    assert out["faults"]
    db = tmp_path / "run" / "queue.db"
    with sqlq.Queue(db, lease_seconds=300, max_attempts=5) as queue:
        info = queue.info(out["task_id"])
        assert info is not None
        # Either outcome is allowed; the retry must say True in both.  (With SQLite
        # 3.53 and a page cache that kept the frames, it is COMPLETED.)
        assert (info.state, info.token) in {("COMPLETED", out["token"]), ("RESERVED", out["token"])}
        assert queue.complete(out["task_id"], token=out["token"]) is True
        assert queue.status(out["task_id"]) == "COMPLETED"
        assert queue.complete(out["task_id"], token=out["token"] + 1000) is False
        found = {t.task_id for t in queue.tasks(limit=100)}
        assert set(out["acked"]) <= found
    print(f"\nstate found after the crash: {info.state}")
    assert integrity(db) == "ok"


def test_checkpoint_errors(fault_shim: FaultShim, run_scenario: RunScenario) -> None:
    """A checkpoint whose write, or whose fsync, of the database file fails raises
    StorageIOError from Queue.checkpoint(); the -wal file still holds everything, so
    no task is lost, and the next checkpoint succeeds.  The checkpoints sqlq runs
    by itself after commits fail the same way, but never fail the call that
    committed."""
    out = run_scenario("checkpoint", shim=fault_shim)
    for leg, codes in (("write", SQLITE_IOERR_WRITE), ("sync", SQLITE_IOERR_FSYNC)):
        result = out[leg]
        expect_error(result, "StorageIOError", SQLITE_IOERR, codes)
        assert result["faults"] and all(_on(line, "queue.db") for line in result["faults"])
        assert result["in_transaction"] is False
        assert result["missing"] == [] and result["integrity"] == "ok"
        expect_ok(result["add_after"], True)
    assert out["clean_checkpoint"]["ok"], out["clean_checkpoint"]
    periodic = out["periodic"]
    assert periodic["failed_calls"] == []
    assert periodic["faults"] >= 1, "sqlq ran no checkpoint of its own after the commits"
    assert periodic["missing"] == [] and periodic["integrity"] == "ok"
    assert out["missing_after_reopen"] == [] and out["integrity_after_reopen"] == "ok"


def test_read_error(fault_shim: FaultShim, run_scenario: RunScenario) -> None:
    """Reads of the database file fail: calls of an open queue, and opening one, raise
    a typed error (EIO is reported by SQLite as SQLITE_CORRUPT, so Corrupt; another
    errno as StorageIOError), the file is left byte for byte as it was, and once
    reads work again the same Queue finds every task."""
    out = run_scenario("read-error", shim=fault_shim)
    for errno, kind, codes in (
        ("EIO", ("Corrupt", "StorageIOError"), (SQLITE_CORRUPT, SQLITE_IOERR, SQLITE_IOERR_READ)),
        ("EINVAL", ("StorageIOError",), (SQLITE_IOERR, SQLITE_IOERR_READ)),
    ):
        leg = out[errno]
        for call in ("status", "add", "counts"):
            expect_error(leg[call], kind, *codes)
        expect_error(leg["open"], ("StorageIOError", "Corrupt", "CannotOpen"), *codes, 14)
        assert len(leg["faults"]) >= 4 and all(_on(line, "queue.db") for line in leg["faults"])
        assert leg["in_transaction"] is False
        assert leg["file"]["unchanged"], leg["file"]
        assert leg["same_queue_after"]["missing"] == []
        expect_ok(leg["same_queue_after"]["status"], "AVAILABLE")
    expect_ok(out["add_after"], True)
    assert out["missing_after_reopen"] == [] and out["integrity"] == "ok"


def test_corrupt_read(fault_shim: FaultShim, run_scenario: RunScenario) -> None:
    """Reads of the database file return damaged pages (the file itself is fine):
    calls and opening raise Corrupt, and sqlq neither writes, replaces nor deletes
    the file while the damage is seen.  Once reads are sound again the same Queue
    works (sqlq dropped the connection that cached the damage), and a new Queue on
    the file finds everything intact."""
    out = run_scenario("read-corrupt", shim=fault_shim)
    for call in ("status", "add", "claim", "open"):
        expect_error(out[call], "Corrupt", SQLITE_CORRUPT)
    assert out["faults"] >= 1
    assert out["in_transaction"] is False
    assert out["file"]["unchanged"], out["file"]
    # Written again once it works (below), but the same file: never replaced or deleted.
    after_close = out["file_after_close"]["after"]
    assert after_close["exists"] and after_close["inode"] == out["file"]["after"]["inode"]
    # The same Queue works again: after Corrupt sqlq drops the connection (whose page
    # cache held the damaged pages), never the file, and the next call reads afresh.
    after = out["same_queue_after"]
    assert after["ok"], after
    assert out["integrity"] == "ok"
    assert out["missing_after_reopen"] == []


def _on(line: str, file: str, *functions: str) -> bool:
    """Is a line of the shim's log (shortened by scenario.py) a fault on ``file``
    (and, if given, of one of ``functions``)?"""
    function, _fd, name, *_ = line.split()
    return name == file and (not functions or function in functions)
