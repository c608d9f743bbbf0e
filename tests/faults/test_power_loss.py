"""Power loss: block-level crash images of a queue that four processes are working.

The model.  The database lives on an ext4 filesystem (the *inner* one) in a
64 MiB sparse image file, loop-mounted; that image file lives on a second
loop-mounted ext4 filesystem (the *outer* one).  Whatever the inner
filesystem's block device is sent reaches the inner image file through the
outer filesystem, so freezing the outer filesystem (``fsfreeze -f``) stops the
inner device at once: a write or cache flush of the inner filesystem cannot
complete while the outer one is frozen (and neither can a commit waiting for
one).  Copying the inner image while the outer filesystem is frozen gives what
had reached the device, as if the power had been cut at that moment; what sat
in the inner filesystem's page cache (written but never flushed) is not in the
copy.  Copying the database files with ``cp`` while writers run would instead
read the page cache, which is not what survives a power cut.  The limit of the
model: the device keeps every write it completed, in order (no drive cache
that drops or reorders completed but unflushed writes).

What is checked.  crash_worker.py (four of them, on one queue) adds, claims and
completes, and after each call RETURNS appends a line to its log, which is on
the machine's own disk.  For each image the test, while the outer filesystem is
frozen, first notes how long every log is (every acknowledgement logged by then
was given before the freeze or, if during it, by a commit whose writes had
already reached the device), then copies the inner image, then thaws.  After the
run each copy is mounted (the inner filesystem's journal is replayed), the
database's files are copied out of it and opened with the standard library's
sqlite3 (the WAL is recovered):

* ``PRAGMA integrity_check`` is ``ok`` and sqlq opens the database and counts it;
* every acknowledged add is present, every acknowledged complete is COMPLETED,
  every acknowledged claim is RESERVED or COMPLETED under its token (a loss is
  counted for each that is not);
* at most one unacknowledged add and one unacknowledged complete per worker are
  in the image (a call that committed but had not been logged yet): more would
  mean the copy is not of the moment of the freeze, and the check above vacuous.

With synchronous="full" there must be no loss; with "normal" the losses are
measured and reported (they are allowed; an early image may even lack the
schema, when nothing had been synced yet).  The workers run flat out, apart from
1-5 ms of "work" per task, so the write lock is contended all the time.  The
figures of the last run of each mode go to tests/faults/.results/power_loss.json
for the README.

The mounts are made in a private mount namespace (see mounts.py for why and for
the freeze watchdog); the test checks that no loop device was left attached.
Set SQLQ_POWER_LOSS_SEED to replay the moments of a run (the seed is in every
assertion message); the scheduling of the workers is not replayable.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

import sqlq

sys.path.insert(0, str(Path(__file__).parent))  # tests/ is not a package
import mounts
from needs import need

pytestmark = [pytest.mark.processes, pytest.mark.faults]

WORKER_SCRIPT = Path(__file__).with_name("crash_worker.py")
RESULTS = Path(__file__).with_name(".results") / "power_loss.json"

WORKERS = 4
IMAGES = 32  # crash images per mode; at least MIN_IMAGES must be checked
MIN_IMAGES = 30
INNER_MIB, OUTER_MIB = 64, 96
WORK_MS = (1.0, 5.0)  # each worker's time on a task between claim and complete
WARMUP_ACKS = 20  # per worker, before the first image
GAP = (0.1, 0.4)  # seconds between a thaw and the next freeze, uniform
RUN_LIMIT = 60.0  # seconds the workers may run at most (they are stopped sooner)


@dataclass
class Acks:
    """What the workers' logs promised up to some moment."""

    adds: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    claims: dict[str, int] = field(default_factory=dict)
    bad: list[str] = field(default_factory=list)  # "false ..." and "dup ..." lines

    def total(self) -> int:
        return len(self.adds) + len(self.done) + len(self.claims)


@dataclass
class Image:
    number: int
    copy: Path
    sizes: list[int]  # each worker's log length at the freeze, in bytes
    frozen_ms: float
    data_bytes: int


@dataclass
class Check:
    """The verdict on one image."""

    number: int
    integrity: str
    sqlq_counts: dict[str, int]
    acks: dict[str, int]  # acknowledged adds/done/claims that were checked
    lost: dict[str, list[str]]  # the ids among them the image lost
    unacked: dict[str, int]  # adds/done in the image that no log line promised (in flight)
    schema: bool  # the image has the sqlq_tasks table
    wal_bytes: int  # the size of the WAL file in the image


@dataclass
class Worker:
    number: int
    process: subprocess.Popen[bytes]
    log: Path
    stderr_path: Path
    stderr: IO[bytes]


def read_acks(logs: list[Path], sizes: list[int] | None = None) -> Acks:
    """The acknowledgements in the logs (each cut at ``sizes``, if given)."""
    acks = Acks()
    for i, log in enumerate(logs):
        data = log.read_bytes() if log.exists() else b""
        if sizes is not None:
            data = data[: sizes[i]]
        for line in data.decode("ascii").split("\n")[:-1]:  # only whole lines
            kind, _, rest = line.partition(" ")
            if kind == "add":
                acks.adds.add(rest)
            elif kind == "done":
                acks.done.add(rest)
            elif kind == "claim":
                task, _, token = rest.partition(" ")
                acks.claims[task] = int(token)
            elif kind in ("false", "dup"):
                acks.bad.append(line)
    return acks


def check_image(ns: mounts.MountNamespace, image: Image, mnt: Path, out: Path, acks: Acks) -> Check:
    """Mount the copy, recover the database, and hold it to the acknowledgements.

    The database's files are copied out of the mounted image into ``out`` (nothing
    writes them any more: this is not the invalid copy of a live database) and
    opened there: SQLite cannot open them through ``ns.path`` (see mounts.py).
    """
    ns.mount_loop(image.copy, mnt)  # read-write: the journal is replayed
    try:
        found = sorted(p.name for p in ns.path(mnt).iterdir())
        assert "queue.db" in found, found
        for name in ("queue.db", "queue.db-wal"):
            if name in found:
                shutil.copyfile(ns.path(mnt / name), out / name)
    finally:
        ns.umount(mnt)
    wal = out / "queue.db-wal"
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    conn = sqlite3.connect(out / "queue.db", isolation_level=None)  # recovers the WAL
    try:
        integrity = "\n".join(r[0] for r in conn.execute("PRAGMA integrity_check"))
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        # Without the table, not even the schema had reached the device (that can
        # happen with synchronous="normal"): every acknowledgement is lost.
        rows = (
            conn.execute(
                "SELECT task_id, state, lease_id FROM sqlq_tasks WHERE queue = 'default'"
            ).fetchall()
            if "sqlq_tasks" in tables
            else []
        )
    finally:
        conn.close()
    with sqlq.Queue(out / "queue.db", lease_seconds=60, max_attempts=5) as queue:
        counts = queue.counts()
    for leftover in out.iterdir():
        leftover.unlink()
    state = {task: s for task, s, _ in rows}
    token = {task: t for task, _, t in rows}
    lost = {
        "adds": sorted(t for t in acks.adds if t not in state),
        "completes": sorted(t for t in acks.done if state.get(t) != "COMPLETED"),
        "claims": sorted(
            t
            for t, tok in acks.claims.items()
            if state.get(t) not in ("RESERVED", "COMPLETED") or token.get(t) != tok
        ),
    }
    unacked = {
        "adds": sum(1 for t in state if t not in acks.adds),
        "completes": sum(1 for t, s in state.items() if s == "COMPLETED" and t not in acks.done),
    }
    checked = {"adds": len(acks.adds), "completes": len(acks.done), "claims": len(acks.claims)}
    schema = "sqlq_tasks" in tables
    return Check(image.number, integrity, counts, checked, lost, unacked, schema, wal_bytes)


def start_worker(
    ns: mounts.MountNamespace, number: int, db: Path, tmp: Path, synchronous: str, seed: int
) -> Worker:
    log = tmp / f"worker{number}.log"
    stderr_path = tmp / f"worker{number}.stderr"
    stderr = stderr_path.open("wb")
    argv = [sys.executable, str(WORKER_SCRIPT), str(db), str(log), "--worker", str(number)]
    argv += ["--synchronous", synchronous, "--seed", str(seed * 10 + number)]
    argv += ["--stop", str(tmp / "stop"), "--max-seconds", str(RUN_LIMIT)]
    argv += ["--work-ms", *(str(ms) for ms in WORK_MS)]
    process = ns.popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
    return Worker(number, process, log, stderr_path, stderr)


def deaths(workers: list[Worker]) -> list[str]:
    """The workers that have exited, each with the last line of its stderr."""
    return [
        f"worker {w.number} exited ({w.process.returncode}): "
        + (w.stderr_path.read_text("utf-8", errors="replace").strip().splitlines() or [""])[-1]
        for w in workers
        if w.process.poll() is not None
    ]


def run(tmp: Path, synchronous: str, seed: int) -> tuple[dict[str, Any], list[Check]]:
    """Run the workers, take the crash images, check them; the figures and verdicts."""
    reason = mounts.unavailable()
    need(reason is None, str(reason))
    rng = random.Random(seed)
    where = f"(synchronous={synchronous}, SQLQ_POWER_LOSS_SEED={seed})"
    outer_img, outer, inner, check_mnt = (tmp / n for n in ("outer.img", "outer", "inner", "chk"))
    copies, check_out = tmp / "copies", tmp / "check"
    for d in (outer, inner, check_mnt, copies, check_out):
        d.mkdir()
    inner_img = outer / "inner.img"  # a path in the namespace only
    db = inner / "queue.db"
    workers: list[Worker] = []
    images: list[Image] = []
    checks: list[Check] = []
    progress: list[list[int]] = []  # per image: acks logged by each worker since the last
    started = time.monotonic()
    ns = mounts.MountNamespace()
    try:
        mounts.make_ext4(outer_img, OUTER_MIB)
        ns.mount_loop(outer_img, outer)
        mounts.make_ext4(inner_img, INNER_MIB, ns=ns)
        ns.mount_loop(inner_img, inner)
        workers = [start_worker(ns, n, db, tmp, synchronous, seed) for n in range(1, WORKERS + 1)]
        logs = [w.log for w in workers]

        def acked_per_worker() -> list[int]:
            return [read_acks([log]).total() for log in logs]

        while min(acked_per_worker()) < WARMUP_ACKS:
            assert not deaths(workers), f"{deaths(workers)} {where}"
            assert time.monotonic() - started < 30, f"the workers did not get going {where}"
            time.sleep(0.05)
        run_started = time.monotonic()
        before = acked_per_worker()

        for number in range(1, IMAGES + 1):
            time.sleep(rng.uniform(*GAP))
            assert not deaths(workers), f"{deaths(workers)} {where}"
            copy = copies / f"image{number:02d}.img"
            t0 = time.monotonic()
            with ns.frozen(outer):
                sizes = [w.log.stat().st_size for w in workers]
                data = mounts.copy_sparse(ns.path(inner_img), copy)
            images.append(Image(number, copy, sizes, (time.monotonic() - t0) * 1000, data))
            now = acked_per_worker()
            progress.append([a - b for a, b in zip(now, before, strict=True)])
            before = now
        run_seconds = time.monotonic() - run_started

        (tmp / "stop").touch()
        for w in workers:
            w.process.wait(timeout=30)
        for w in workers:
            err = w.stderr_path.read_text("utf-8", errors="replace")
            assert w.process.returncode == 0, f"worker {w.number} failed {where}: {err}"
            assert "Traceback" not in err, f"worker {w.number} {where}: {err}"
        final = read_acks(logs)
        ns.umount(inner)
        ns.umount(outer)

        for image in images:
            acks = read_acks(logs, image.sizes)
            checks.append(check_image(ns, image, check_mnt, check_out, acks))
            image.copy.unlink()
    finally:
        for w in workers:
            if w.process.poll() is None:
                w.process.kill()
                w.process.wait()
            w.stderr.close()
        try:
            ns.close()
        finally:
            outer_img.unlink(missing_ok=True)
            for image in images:
                image.copy.unlink(missing_ok=True)
    left = mounts.attached(ns.loops)
    assert not left, f"loop devices left attached: {left} {where}"

    lost = Counter({kind: sum(len(c.lost[kind]) for c in checks) for kind in checks[0].lost})
    figures: dict[str, Any] = {
        "synchronous": synchronous,
        "seed": seed,
        "workers": WORKERS,
        "images": len(checks),
        "images_with_loss": sum(1 for c in checks if any(c.lost.values())),
        "integrity_failures": sum(1 for c in checks if c.integrity != "ok"),
        "images_without_schema": sum(1 for c in checks if not c.schema),
        # Images holding a committed call whose acknowledgement was not logged yet:
        # the freeze caught a call between its commit and its return.
        "images_with_call_in_flight": sum(1 for c in checks if any(c.unacked.values())),
        # Summed over the images: each image is held to every call acknowledged before it.
        "acked_calls_per_image_min": min(sum(c.acks.values()) for c in checks),
        "acked_adds_checked": sum(c.acks["adds"] for c in checks),
        "acked_completes_checked": sum(c.acks["completes"] for c in checks),
        "acked_claims_checked": sum(c.acks["claims"] for c in checks),
        "lost_adds": lost["adds"],
        "lost_completes": lost["completes"],
        "lost_claims": lost["claims"],
        "lost_per_image_max": max(sum(map(len, c.lost.values())) for c in checks),
        "operations_acked": len(final.adds) + len(final.done) + len(final.claims),
        "run_seconds": round(run_seconds, 1),
        "ops_per_second": round(
            (len(final.adds) + len(final.done) + len(final.claims)) / run_seconds
        ),
        "frozen_ms_max": round(max(i.frozen_ms for i in images), 1),
        "wal_kib_max": max(c.wal_bytes for c in checks) // 1024,
        "image_data_mib_max": round(max(i.data_bytes for i in images) / 2**20, 1),
        "total_seconds": round(time.monotonic() - started, 1),
        "kernel": platform.release(),
        "sqlite_checker": sqlite3.sqlite_version,
    }
    record(synchronous, figures)
    print(f"\npower loss {where}: {json.dumps(figures)}")

    # The run was busy and contended, and the checks were not vacuous.
    assert not final.bad, f"{final.bad[:5]} {where}"
    for n, moved in enumerate(progress, 1):
        assert sum(moved) > 0, f"image {n}: no progress since the last image {where}"
    per_worker = [sum(moved) for moved in zip(*progress, strict=True)]
    assert min(per_worker) >= 2 * IMAGES, f"a worker hardly took part: {per_worker} {where}"
    for c in checks:
        assert sum(c.acks.values()) >= WORKERS * WARMUP_ACKS, (c, where)
        # Nothing in the image that was not promised, beyond one call in flight per worker.
        assert c.unacked["adds"] <= WORKERS, (c, where)
        assert c.unacked["completes"] <= WORKERS, (c, where)
        assert c.integrity == "ok", (c, where)
        assert sum(c.sqlq_counts.values()) >= c.acks["adds"] - len(c.lost["adds"]), (c, where)
    checked = [c.acks["adds"] + c.acks["completes"] for c in checks]
    assert checked == sorted(checked) and checked[0] < checked[-1], (checked, where)
    assert len(checks) >= MIN_IMAGES, where
    return figures, checks


def record(synchronous: str, figures: dict[str, Any]) -> None:
    """Keep the figures of the latest run of each mode in RESULTS."""
    RESULTS.parent.mkdir(exist_ok=True)
    try:
        results = json.loads(RESULTS.read_text("utf-8"))
    except (OSError, ValueError):
        results = {}
    results[synchronous] = figures
    tmp = RESULTS.with_name(RESULTS.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", "utf-8")
    os.replace(tmp, RESULTS)


def seed() -> int:
    return int(os.environ.get("SQLQ_POWER_LOSS_SEED") or random.SystemRandom().randrange(10**6))


def test_full_keeps_every_acknowledged_call(tmp_path: Path) -> None:
    s = seed()
    f, checks = run(tmp_path, "full", s)
    where = f"(synchronous=full, SQLQ_POWER_LOSS_SEED={s})"
    # (image, the first few ids lost of each kind), for the first few images with a loss
    lost = [(c.number, {k: v[:5] for k, v in c.lost.items() if v}) for c in checks]
    lost = [x for x in lost if x[1]][:10]
    assert f["lost_adds"] == 0, f"acknowledged adds lost: {lost} {where}"
    assert f["lost_completes"] == 0, f"acknowledged completes lost: {lost} {where}"
    assert f["lost_claims"] == 0, f"acknowledged claims lost: {lost} {where}"


def test_normal_reports_what_it_loses(tmp_path: Path) -> None:
    f, _ = run(tmp_path, "normal", seed())
    print(
        f"synchronous=normal: {f['images_with_loss']} of {f['images']} images lost "
        f"acknowledged calls: {f['lost_adds']} adds, {f['lost_completes']} completes, "
        f"{f['lost_claims']} claims (at most {f['lost_per_image_max']} in one image)"
    )
