"""Fault scenarios for tests/faults, each run in a process of its own.

    python tests/faults/scenario.py NAME DIR [--mode tmpfs|shim]

NAME is one of the functions in SCENARIOS; DIR is an empty folder for the
database (queue.db) and the fault log.  The I/O-error scenarios run under the
fault shim (LD_PRELOAD=libsqlqfault.so, SQLQ_FAULT_CTL=<control file>; see
shim.c): they arm and disarm faults themselves by rewriting the control file.
``disk-full --mode tmpfs`` must run as root in a private mount namespace
(``unshare -m --propagation private``): it mounts a small tmpfs on DIR.

The scenario prints one JSON object on stdout: what each call returned or
raised, and what was found afterwards.  It asserts nothing itself (the tests
do), except that the setup worked; an unexpected exception ends it with a
traceback and exit status 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlq
from sqlq.sqlite import backend as sqlite_backend
from sqlq.sqlite import driver

LEASE = 300.0  # no lease runs out during a scenario
PAYLOAD = "p" * 3000  # about one WAL frame's worth of a 4 KiB page per task

Result = dict[str, Any]


# --- faults ---------------------------------------------------------------------


def control_path() -> Path:
    return Path(os.environ["SQLQ_FAULT_CTL"])


def write_control(text: str) -> None:
    """Replace the shim's control file atomically (it is read on every call)."""
    path = control_path()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)


_generation = 0


def arm(log: Path, *rules: str) -> None:
    """Fail the calls matching ``rules`` (``fault ...`` lines, see shim.c) from now on."""
    global _generation
    _generation += 1  # new contents: the shim's counters start from zero
    lines = [f"# arm {_generation}", f"log={log}", *(f"fault {rule}" for rule in rules)]
    write_control("\n".join(lines) + "\n")


def disarm() -> None:
    write_control("")


def logged(log: Path) -> list[str]:
    """The faults the shim acted on so far (its log lines, with paths shortened)."""
    if not log.exists():
        return []
    lines = log.read_text("utf-8").splitlines()
    return [" ".join(Path(w).name if w.startswith("/") else w for w in ln.split()) for ln in lines]


# --- observing calls --------------------------------------------------------------


def describe_error(exc: BaseException) -> Result:
    """The error a call raised: its type, and the SQLite error it was translated from."""
    cause = exc.__cause__
    out: Result = {
        "ok": False,
        "error": type(exc).__name__,
        "storage_error": isinstance(exc, sqlq.errors.StorageError),
        "message": str(exc),
        "cause": None if cause is None else type(cause).__name__,
        "code": getattr(cause, "sqlite_errorcode", None),
        "name": getattr(cause, "sqlite_errorname", None),
        # A second error (a blind ROLLBACK after SQLite rolled back) would show here.
        "cause_context": None if cause is None else repr(cause.__context__),
        "cause_is_context": exc.__context__ is cause,
    }
    return out


def attempt(call: Callable[[], Any]) -> Result:
    """Run ``call``: {"ok": True, "value": ...} or the description of its error."""
    try:
        value = call()
    except sqlq.errors.SqlqError as exc:
        return describe_error(exc)
    return {"ok": True, "value": jsonable(value)}


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def attempt_open(db: Path) -> Result:
    """Open a second queue on ``db`` (closed again at once if that works)."""

    def open_and_close() -> bool:
        open_queue(db).close()
        return True

    return attempt(open_and_close)


def in_transaction(queue: sqlq.Queue) -> bool:
    """Is the queue's connection left inside a transaction (it must not be)?"""
    conn = queue._backend._conn  # None after sqlq dropped it (after Corrupt)
    return conn is not None and bool(conn.in_transaction)


def integrity(db: Path) -> str:
    """PRAGMA integrity_check on a connection of its own (same SQLite library as sqlq)."""
    conn = driver.dbapi.connect(str(db))
    try:
        rows = conn.execute("PRAGMA integrity_check").fetchall()
    finally:
        conn.close()
    return "; ".join(str(row[0]) for row in rows)


def missing(queue: sqlq.Queue, tasks: dict[str, Any]) -> list[str]:
    """Tasks (id -> payload) that are not in the queue or hold another payload.  One
    call (one small commit), so that it also works on a disk with little room."""
    found = {info.task_id: info.payload for info in queue.tasks(limit=10_000)}
    return [t for t, payload in tasks.items() if t not in found or found[t] != payload]


def state(queue: sqlq.Queue, task_id: str) -> Result:
    info = queue.info(task_id)
    if info is None:
        return {"state": None, "token": None}
    return {"state": info.state, "token": info.token}


def file_facts(path: Path) -> Result:
    """Whether the file exists, and its inode and sha256 (read with faults disarmed)."""
    if not path.exists():
        return {"exists": False, "inode": None, "sha256": None}
    return {
        "exists": True,
        "inode": path.stat().st_ino,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }


def open_queue(db: Path, synchronous: str = "full") -> sqlq.Queue:
    return sqlq.Queue(db, lease_seconds=LEASE, max_attempts=5, synchronous=synchronous)  # type: ignore[arg-type]


def seed(queue: sqlq.Queue, n: int, prefix: str = "t") -> dict[str, Any]:
    """Add n tasks, each with a payload; returns the acknowledged ones (id -> payload)."""
    acked: dict[str, Any] = {}
    for i in range(n):
        task_id, payload = f"{prefix}{i:03d}", {"n": i, "pad": "x" * 500}
        if not queue.add(task_id, payload=payload):
            raise AssertionError(f"setup: add({task_id}) returned False")
        acked[task_id] = payload
    return acked


# --- the scenarios ----------------------------------------------------------------


def wal_write(folder: Path, _mode: str) -> Result:
    """Writes of the -wal file fail with EIO while add and complete commit."""
    db, log = folder / "queue.db", folder / "faults.log"
    queue = open_queue(db)
    acked = seed(queue, 5)
    lease = queue.claim()
    assert lease is not None
    before = queue.counts()

    arm(log, "op=write path=-wal errno=EIO")
    out: Result = {
        "add": attempt(lambda: queue.add("x1", payload="new")),
        "add_many": attempt(lambda: queue.add_many([("b1", 1), ("b2", 2)])),
        "complete": attempt(lambda: queue.complete(lease.task_id, token=lease.token)),
        "in_transaction": in_transaction(queue),
        "counts_unchanged": queue.counts() == before,  # reads only: works while armed
    }
    disarm()
    out["faults"] = logged(log)
    out["after"] = {
        "x1": state(queue, "x1"),
        "b1": state(queue, "b1"),
        "leased": state(queue, lease.task_id),
        "lease_token": lease.token,
        "counts_unchanged": queue.counts() == before,
    }
    out["retry"] = {
        "add": attempt(lambda: queue.add("x1", payload="new")),
        "add_many": attempt(lambda: queue.add_many([("b1", 1), ("b2", 2)])),
        "complete": attempt(lambda: queue.complete(lease.task_id, token=lease.token)),
    }
    acked.update({"x1": "new", "b1": 1, "b2": 2})
    out["missing"] = missing(queue, acked)
    out["integrity"] = integrity(db)
    queue.close()
    with open_queue(db) as again:
        out["missing_after_reopen"] = missing(again, acked)
        out["leased_after_reopen"] = state(again, lease.task_id)
    return out


def commit_fsync(folder: Path, _mode: str) -> Result:
    """The fsync of the -wal file fails while complete commits; complete is retried."""
    db, log, wal = folder / "queue.db", folder / "faults.log", folder / "queue.db-wal"
    queue = open_queue(db)
    acked = seed(queue, 5)
    lease = queue.claim()
    assert lease is not None
    wal_before = wal.stat().st_size

    arm(log, "op=sync path=-wal errno=EIO")
    out: Result = {
        "complete": attempt(lambda: queue.complete(lease.task_id, token=lease.token)),
        "in_transaction": in_transaction(queue),
    }
    disarm()
    out["faults"] = logged(log)
    out["wal_grew"] = wal.stat().st_size > wal_before  # the frames were written
    out["same_queue_sees"] = state(queue, lease.task_id)
    with open_queue(db) as other:  # a second connection, as another process would see it
        out["other_connection_sees"] = state(other, lease.task_id)
    out["lease_token"] = lease.token
    out["retry"] = attempt(lambda: queue.complete(lease.task_id, token=lease.token))
    out["retry_again"] = attempt(lambda: queue.complete(lease.task_id, token=lease.token))
    out["final"] = state(queue, lease.task_id)
    out["missing"] = missing(queue, acked)
    out["integrity"] = integrity(db)
    queue.close()
    return out


def commit_fsync_crash(folder: Path, _mode: str) -> Result:
    """As commit_fsync, but the process dies right after the failed complete (no close,
    no checkpoint): the next process to open the file decides what the WAL holds."""
    db, log = folder / "queue.db", folder / "faults.log"
    queue = open_queue(db)
    acked = seed(queue, 5)
    lease = queue.claim()
    assert lease is not None
    arm(log, "op=sync path=-wal errno=EIO")
    out: Result = {
        "complete": attempt(lambda: queue.complete(lease.task_id, token=lease.token)),
        "in_transaction": in_transaction(queue),
        "task_id": lease.task_id,
        "token": lease.token,
        "acked": sorted(acked),
    }
    out["faults"] = logged(log)
    print(json.dumps(out), flush=True)
    os._exit(0)  # like a crash: no close, no checkpoint, the -wal and -shm stay


def checkpoint(folder: Path, _mode: str) -> Result:
    """Writes, then the fsync, of the main database file fail during Queue.checkpoint()."""
    db, log = folder / "queue.db", folder / "faults.log"
    queue = open_queue(db)
    acked = seed(queue, 20)
    out: Result = {}
    for leg, rule in (
        ("write", "op=write path=queue.db$ errno=EIO"),
        ("sync", "op=sync path=queue.db$ errno=EIO"),
    ):
        acked.update(seed(queue, 10, prefix=f"{leg}-"))  # frames the checkpoint must copy
        arm(log, rule)
        result = attempt(queue.checkpoint)  # type: ignore[attr-defined]
        result["in_transaction"] = in_transaction(queue)
        disarm()
        result["faults"] = logged(log)
        log.unlink(missing_ok=True)
        result["missing"] = missing(queue, acked)
        result["integrity"] = integrity(db)
        result["add_after"] = attempt(lambda leg=leg: queue.add(f"{leg}-after"))
        acked[f"{leg}-after"] = None
        out[leg] = result
    out["clean_checkpoint"] = attempt(queue.checkpoint)  # type: ignore[attr-defined]

    # The checkpoints sqlq runs by itself after commits: their writes fail, but each
    # call has committed by then and must return its answer, not an error.
    arm(log, "op=write path=queue.db$ errno=EIO")
    # Enough to pass the -wal size at which a process checkpoints, and then some.
    payload = "x" * 60_000
    calls = queue._backend.wal_limit // len(payload) + 2 * sqlite_backend.WAL_CHECK_EVERY  # type: ignore[attr-defined]
    periodic = [
        attempt(lambda i=i: queue.add(f"periodic-{i:03d}", payload=payload)) for i in range(calls)
    ]
    disarm()
    acked.update({f"periodic-{i:03d}": payload for i in range(calls)})
    out["periodic"] = {
        "calls": len(periodic),
        "failed_calls": [r for r in periodic if not r["ok"] or r["value"] is not True],
        "faults": len(logged(log)),
        "missing": missing(queue, acked),
        "integrity": integrity(db),
    }
    queue.close()
    with open_queue(db) as again:
        out["missing_after_reopen"] = missing(again, acked)
    out["integrity_after_reopen"] = integrity(db)
    return out


def _read_setup(folder: Path) -> tuple[Path, Path, dict[str, Any]]:
    """A closed database (checkpointed, no -wal) with 40 tasks; one of them COMPLETED."""
    db, log = folder / "queue.db", folder / "faults.log"
    with open_queue(db) as queue:
        acked = seed(queue, 40)
        lease = queue.claim()
        assert lease is not None and queue.complete(lease.task_id, token=lease.token)
    assert not (folder / "queue.db-wal").exists()
    return db, log, acked


def _untouched(db: Path, before: Result) -> Result:
    after = file_facts(db)
    return {"after": after, "unchanged": after == before}


def read_error(folder: Path, _mode: str) -> Result:
    """Reads of the main database file fail: on the calls of an open queue (its page
    cache emptied first), and while a queue opens.  Once with EIO (which SQLite
    reports as SQLITE_CORRUPT: see SQLITE_IOERR_CORRUPTFS), once with EINVAL."""
    db, log, acked = _read_setup(folder)
    out: Result = {}
    for errno in ("EIO", "EINVAL"):
        before = file_facts(db)
        queue = open_queue(db)
        queue._backend._connection().execute("PRAGMA shrink_memory")  # nothing cached
        arm(log, f"op=read path=queue.db$ errno={errno}")
        leg: Result = {
            "status": attempt(lambda queue=queue: queue.status("t007")),
            "add": attempt(lambda queue=queue: queue.add("new", payload=1)),
            "counts": attempt(queue.counts),
            "in_transaction": in_transaction(queue),
        }
        leg["open"] = attempt_open(db)
        disarm()
        leg["faults"] = logged(log)
        log.unlink(missing_ok=True)
        leg["file"] = _untouched(db, before)  # nothing written or replaced in between
        leg["same_queue_after"] = {
            "missing": missing(queue, acked),
            "status": attempt(lambda queue=queue: queue.status("t007")),
        }
        queue.close()
        out[errno] = leg
    with open_queue(db) as again:
        out["add_after"] = attempt(lambda: again.add("new", payload=1))
        acked["new"] = 1
        out["missing_after_reopen"] = missing(again, acked)
    out["integrity"] = integrity(db)
    return out


def read_corrupt(folder: Path, _mode: str) -> Result:
    """Reads of the main database file beyond page 1 return inverted bytes, so SQLite
    sees corrupt b-tree pages: sqlq must raise Corrupt and leave the file alone."""
    db, log, acked = _read_setup(folder)
    before = file_facts(db)
    queue = open_queue(db)
    queue._backend._connection().execute("PRAGMA shrink_memory")
    arm(log, "op=read path=queue.db$ action=flip min_offset=4096")
    out: Result = {
        "status": attempt(lambda: queue.status("t007")),
        "add": attempt(lambda: queue.add("new", payload=1)),
        "claim": attempt(queue.claim),
        "in_transaction": in_transaction(queue),
    }
    out["open"] = attempt_open(db)
    disarm()
    out["faults"] = len(logged(log))
    out["file"] = _untouched(db, before)
    # The same queue after the fault is gone: sqlq dropped the connection whose page
    # cache held the flipped pages, so the call reads afresh (and writes the file again).
    out["same_queue_after"] = attempt(lambda: queue.status("t007"))
    queue.close()
    out["file_after_close"] = _untouched(db, before)
    out["integrity"] = integrity(db)
    with open_queue(db) as again:
        out["missing_after_reopen"] = missing(again, acked)
    return out


# --- disk full --------------------------------------------------------------------

TMPFS_SIZE = "2m"
TMPFS_BIGGER = "4m"
# Deleting the filler must free more than the log the queue wrote while filling the
# disk: until a checkpoint can copy that log into the database file, the -wal file
# only grows (one frame, a 4 KiB page, for every call).
FILLER_BYTES = 1024 * 1024
FILL_LIMIT = 2000  # adds before giving up on filling the disk
DRAIN_LIMIT = 100


def disk_full(folder: Path, mode: str) -> Result:
    """The disk fills up while tasks are added, twice, and space comes back.

    mode "tmpfs": a real ENOSPC.  A tmpfs of TMPFS_SIZE is mounted on ``folder``
    (this process must be root in a private mount namespace); the first time space
    comes back by deleting a filler file, the second time by remounting bigger.
    mode "shim": every write of the -wal file fails with ENOSPC while armed.
    """
    log = folder / "faults.log"
    if mode == "tmpfs":
        folder = folder / "mnt"
        folder.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "sqlq-full", folder],
            check=True,
        )
        filler = folder / "filler"
        filler.write_bytes(b"\0" * FILLER_BYTES)
    db = folder / "queue.db"
    queue = open_queue(db)
    acked = seed(queue, 10)
    first, second = queue.claim(), queue.claim()  # held across the full disk
    assert first is not None and second is not None
    out: Result = {"leases": [first.token, second.token]}

    def fill(round_: int) -> Result:
        if mode == "shim":
            arm(log, "op=write path=-wal errno=ENOSPC")
        for i in range(FILL_LIMIT):
            task_id = f"fill{round_}-{i:04d}"
            try:
                queue.add(task_id, payload=PAYLOAD)
            except sqlq.errors.SqlqError as exc:
                return {"added": i, "missing": task_id, "error": describe_error(exc)}
            acked[task_id] = PAYLOAD
        raise AssertionError(f"the disk did not fill up within {FILL_LIMIT} adds")

    def drain() -> Result:
        """Use up what the failed add left allocated at the end of the -wal file (its
        frames were partly written): a status() writes one frame (the database
        clock); once one fails, no call that writes anything fits any more."""
        for i in range(DRAIN_LIMIT):
            try:
                queue.status("t000")
            except sqlq.errors.SqlqError as exc:
                return {"calls": i, "error": describe_error(exc)}
        raise AssertionError(f"{DRAIN_LIMIT} status() calls did not fill the -wal file")

    out["fill1"] = fill(1)
    out["drain1"] = drain()
    counts = queue.counts()
    batch = [(f"batch-{i}", {"i": i}) for i in range(5)]
    out["while_full"] = {
        "add": attempt(lambda: queue.add("late", payload="small")),
        "add_many": attempt(lambda: queue.add_many(batch)),
        "complete": attempt(lambda: queue.complete(first.task_id, token=first.token)),
        "fail": attempt(lambda: queue.fail(second.task_id, token=second.token, error="boom")),
        "claim": attempt(queue.claim),
        "status": attempt(lambda: queue.status("t005")),
        "in_transaction": in_transaction(queue),
        "counts_unchanged": queue.counts() == counts,
    }
    if mode == "tmpfs":
        filler.unlink()
    else:
        disarm()
    out["freed"] = {
        "fill_missing": state(queue, out["fill1"]["missing"]),
        "late": state(queue, "late"),
        "batch": [state(queue, task_id)["state"] for task_id, _ in batch],
        "first": state(queue, first.task_id),
        "second": state(queue, second.task_id),
        "counts_unchanged": queue.counts() == counts,
    }
    out["retry"] = {
        "complete": attempt(lambda: queue.complete(first.task_id, token=first.token)),
        "complete_again": attempt(lambda: queue.complete(first.task_id, token=first.token)),
        "fail": attempt(lambda: queue.fail(second.task_id, token=second.token, error="boom")),
        "add": attempt(lambda: queue.add("late", payload="small")),
        "add_many": attempt(lambda: queue.add_many(batch)),
    }
    acked.update({"late": "small", **dict(batch)})
    out["first_final"] = state(queue, first.task_id)
    out["second_final"] = state(queue, second.task_id)
    out["missing"] = missing(queue, acked)
    out["integrity"] = integrity(db)

    out["fill2"] = fill(2)
    out["drain2"] = drain()
    if mode == "tmpfs":
        remount = ["mount", "-o", f"remount,size={TMPFS_BIGGER}", folder]
        subprocess.run(remount, check=True)
    else:
        disarm()
    out["after_fill2"] = attempt(lambda: queue.add(out["fill2"]["missing"], payload=PAYLOAD))
    acked[out["fill2"]["missing"]] = PAYLOAD
    out["missing2"] = missing(queue, acked)
    out["integrity2"] = integrity(db)
    out["counts"] = queue.counts()
    queue.close()
    with open_queue(db) as again:
        out["missing_after_reopen"] = missing(again, acked)
    out["integrity_after_reopen"] = integrity(db)
    out["acked"] = len(acked)
    if mode == "tmpfs":
        subprocess.run(["umount", folder], check=True)
    return out


SCENARIOS: dict[str, Callable[[Path, str], Result]] = {
    "wal-write": wal_write,
    "commit-fsync": commit_fsync,
    "commit-fsync-crash": commit_fsync_crash,
    "checkpoint": checkpoint,
    "read-error": read_error,
    "read-corrupt": read_corrupt,
    "disk-full": disk_full,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("name", choices=sorted(SCENARIOS))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--mode", choices=("tmpfs", "shim"), default="shim")
    args = parser.parse_args(argv)
    result = SCENARIOS[args.name](args.folder, args.mode)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
