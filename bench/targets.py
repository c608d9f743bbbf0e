"""Issue 10's targets (SQLite), issue 12's (PostgreSQL) and issue 24's (the worker's drains),
judged from a run's records:
met, NOT MET, or not measured.

Each target compares figures of the same run (ratios, never absolute times from
another day), except the instruction counts, which come from the latest
``python -m bench.instructions`` (callgrind counts do not move between runs) and
say when they were counted.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .config import Record, Results

SYNC_NAMES = {"full": "FULL", "normal": "NORMAL"}
#: Where ``python -m bench.instructions`` leaves its counts for the report.
INSTRUCTIONS = Path(__file__).with_name("instructions.json")
#: Seconds ``python -m bench --quick`` may take (60 for SQLite alone; its PostgreSQL rows add
#: a server start and a reduced set of rows).
QUICK_SECONDS = 90.0


@dataclass
class Target:
    name: str
    measured: str
    against: str
    met: bool | None  # None: not measured in this run

    @property
    def verdict(self) -> str:
        return "not measured" if self.met is None else ("met" if self.met else "NOT MET")


def _rate(x: float) -> str:
    return f"{x:,.0f}"


class _Judge:
    def __init__(self, results: Results) -> None:
        self.results = results
        self.out: list[Target] = []

    def add(self, name: str, against: str, measured: str | None, met: bool | None) -> None:
        self.out.append(Target(name, "-" if measured is None else measured, against, met))

    def drain(self, system: str, sync: str, workers: int) -> Record | None:
        rec = self.results.one("processes", system, sync, str(workers))
        return rec if rec is not None and rec.values else None

    def ratio(
        self,
        name: str,
        ours: Record | None,
        theirs: Record | None,
        floor: float,
        whose: str,
    ) -> None:
        if ours is None or theirs is None or not theirs.values:
            self.add(name, f">= {floor}x {whose}", None, None)
            return
        r = ours.median / theirs.median
        self.add(
            name,
            f">= {floor}x {whose}",
            f"{_rate(ours.median)}/s vs {_rate(theirs.median)}/s = {r:.2f}x",
            r >= floor,
        )

    def at_least(self, name: str, rec: Record | None, floor: float, unit: str) -> None:
        if rec is None or not rec.values:
            self.add(name, f">= {floor:,} {unit}", None, None)
            return
        self.add(name, f">= {floor:,} {unit}", f"{_rate(rec.median)} {unit}", rec.median >= floor)


def targets(results: Results, instructions: Path = INSTRUCTIONS) -> list[Target]:
    j = _Judge(results)
    _drains(j)
    _single_calls(j)
    _instructions(j, instructions)
    for sync in ("full", "normal"):
        s = SYNC_NAMES[sync]
        adds = results.one("enqueue", "sqlq", sync, "batch")
        j.at_least(f"batches of 1,000: adds, {s}", adds, 150_000, "tasks/s")
        pairs = results.one("reserve", "sqlq", sync, "batch")
        j.at_least(f"batches of 1,000: reserve + complete, {s}", pairs, 80_000, "tasks/s")
    _growth(j)
    _idle(j)
    mem = results.one("mixed", "sqlq", "-", "memory")
    j.at_least("in memory: bench/seed_calls.py's mixed calls", mem, 1_000_000, "calls/s")
    _quick(j)
    _postgres(j)
    return j.out


#: Issue 24's drain targets by durability: 8 processes against huey's storage at 8,
#: the most CPU per task (microseconds, all worker processes) at 8.
VS_HUEY = {"full": 3.0, "normal": 2.0}
CPU_PER_TASK = {"full": 60.0, "normal": 40.0}
#: Each step of 1 -> 2 -> 4 -> 8 processes at least this much of the one before.
NEVER_FALLS = 0.95
#: Tasks per commit of a deep queue, at 8 processes.
PER_COMMIT = 16.0
#: The least-served of 4 processes, of a fair share.
LEAST_SERVED = 0.8


def _drains(j: _Judge) -> None:
    for sync in ("full", "normal"):
        _scaling(j, sync)
    eight = j.drain("sqlq", "full", 8)
    floor = j.results.one("floor", "sqlite", "full", "write transaction")
    if eight is None or floor is None or not floor.values:
        j.add("8 processes, FULL, vs the FULL commit floor", ">= 3x commits/s", None, None)
    else:
        commits = 1e6 / floor.median
        r = eight.median / commits
        j.add(
            "8 processes, FULL, vs the FULL commit floor",
            ">= 3x commits/s",
            f"{_rate(eight.median)} tasks/s vs {_rate(commits)} commits/s = {r:.2f}x",
            r >= 3,
        )
    j.add(
        "a 16-process row in the drain table",
        "measured",
        "yes" if j.drain("sqlq", "full", 16) else None,
        True if j.drain("sqlq", "full", 16) else None,
    )
    for sync in ("full", "normal"):
        four = j.drain("sqlq", sync, 4)
        if four is None:
            j.add(
                f"least-served of 4 workers, {SYNC_NAMES[sync]}",
                f">= {LEAST_SERVED} of a fair share",
                None,
                None,
            )
            continue
        shares = four.extra["least_share"]
        m = statistics.median(shares)
        j.add(
            f"least-served of 4 workers, {SYNC_NAMES[sync]}",
            f">= {LEAST_SERVED} of a fair share",
            f"{m:.2f} (runs: {', '.join(f'{x:.2f}' for x in shares)})",
            m >= LEAST_SERVED,
        )
    runs = j.results.find("processes", "sqlq")
    keys = ("duplicates", "double_completed", "lost", "lock_errors", "other_errors")
    if not runs:
        j.add("sqlq drains: duplicates, losses, lock errors", "all 0", None, None)
        return
    bad = {k: sum(r.extra[k] for r in runs) for k in keys}
    j.add(
        "sqlq drains: duplicates, losses, lock errors",
        "all 0",
        ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in bad.items())
        + f" (over {sum(len(r.values) for r in runs)} drains)",
        not any(bad.values()),
    )


def _scaling(j: _Judge, sync: str) -> None:
    """Issue 24's rules for one durability: drains never fall from 1 to 8 processes, and
    8 processes against huey's storage, in CPU per task and in tasks per commit."""
    s = SYNC_NAMES[sync]
    counts = sorted(
        int(r.case) for r in j.results.find("processes", "sqlq", sync) if r.case.isdigit()
    )
    steps = [k for k in (1, 2, 4, 8) if k in counts]
    figures = [j.drain("sqlq", sync, k) for k in steps]
    name = f"{s} drains never fall, {' -> '.join(map(str, steps or (1, 2, 4, 8)))} processes"
    against = f"each >= {NEVER_FALLS}x the one before"
    if len(steps) < 2 or any(f is None for f in figures):
        j.add(name, against, None, None)
    else:
        medians = [f.median for f in figures if f is not None]
        text = " -> ".join(f"{_rate(m)}" for m in medians) + " tasks/s"
        ok = all(b >= NEVER_FALLS * a for a, b in itertools.pairwise(medians))
        j.add(name, against, text, ok)
    eight = j.drain("sqlq", sync, 8)
    j.ratio(
        f"8 processes, {s}, vs huey's storage at 8",
        eight,
        j.drain("huey", sync, 8),
        VS_HUEY[sync],
        "huey",
    )
    _figure(j, f"8 processes, {s}, CPU us per task", eight, "cpu_per_task", CPU_PER_TASK[sync])
    _figure(j, f"8 processes, {s}, tasks per commit", eight, "tasks_per_commit", -PER_COMMIT)


def _figure(j: _Judge, name: str, rec: Record | None, key: str, bound: float) -> None:
    """A drain's median figure ``key`` at most ``bound`` (at least ``-bound`` if negative)."""
    runs = [x for x in ((rec.extra.get(key) if rec else None) or []) if x is not None]
    against = f"<= {bound:g}" if bound >= 0 else f">= {-bound:g}"
    if not runs:
        j.add(name, against, None, None)
        return
    m = statistics.median(runs)
    j.add(name, against, f"{m:.1f}", m <= bound if bound >= 0 else m >= -bound)


def _single_calls(j: _Judge) -> None:
    for sync in ("full", "normal"):
        s = SYNC_NAMES[sync]
        for workload, case, what in (
            ("enqueue", "single", "add"),
            ("reserve", "single", "reserve + complete"),
            ("reserve", "runner", "complete_and_claim"),
        ):
            ours = j.results.one(workload, "sqlq", sync, case)
            ref = j.results.one(workload, "reference", sync, case)
            j.ratio(f"single calls: {what}, {s}", ours, ref, 0.9, "the reference")


def _instructions(j: _Judge, path: Path) -> None:
    counted: dict[str, Any] = json.loads(path.read_text("utf-8")) if path.exists() else {}
    ops = counted.get("ops", {})
    for op, what in (
        ("add", "add"),
        ("claim_complete", "reserve + complete"),
        ("runner", "complete_and_claim"),
    ):
        name = f"instructions per call: {what} (NORMAL)"
        if op not in ops:
            j.add(name, "<= 1.1x the reference", None, None)
            continue
        ours, ref = ops[op]["sqlq"], ops[op]["reference"]
        j.add(
            name,
            "<= 1.1x the reference",
            f"{ours:,.0f} vs {ref:,.0f} = {ours / ref:.2f}x (counted {counted['when']})",
            ours <= 1.1 * ref,
        )


def _growth(j: _Judge, system: str = "sqlq", title: str = "growth") -> None:
    grow = sorted(j.results.find("growth", system), key=lambda r: int(r.case))
    if len(grow) < 2 or int(grow[-1].case) <= int(grow[0].case):
        j.add(f"{title}: cost per task at 10^6 rows vs 10^3", "<= 1.3x", None, None)
        return
    big, small = grow[-1], grow[0]
    r = big.median / small.median
    note = "" if int(big.case) >= 1_000_000 else " (10^6 not run: largest size measured)"
    j.add(
        f"{title}: cost per task at {int(big.case):,} rows vs {int(small.case):,}{note}",
        "<= 1.3x",
        f"{big.median:.0f} us vs {small.median:.0f} us = {r:.2f}x",
        r <= 1.3,
    )


def _idle(j: _Judge) -> None:
    cpu = j.results.one("idle", "sqlq", "full", "cpu")
    p99 = j.results.one("idle", "sqlq", "full", "p99")
    if cpu is None or p99 is None or not p99.values:
        j.add("idle worker: CPU and pick-up p99", "< 1% and <= 50 ms", None, None)
        return
    j.add("idle worker: CPU", "< 1% of a core", f"{cpu.median:.2f}%", cpu.median < 1)
    j.add(
        "idle worker: pick-up p99",
        "<= 50 ms",
        f"{p99.median:.1f} ms",
        p99.median <= 50 and not p99.extra.get("missed"),
    )


def _quick(j: _Judge) -> None:
    r = j.results
    if r.config.get("mode") != "quick" or r.finished is None:
        j.add("python -m bench --quick", f"<= {QUICK_SECONDS:.0f} s", None, None)
        return
    took = r.finished - r.started
    j.add(
        "python -m bench --quick",
        f"<= {QUICK_SECONDS:.0f} s",
        f"{took:.0f} s",
        took <= QUICK_SECONDS,
    )


# --- PostgreSQL (issue 12) --------------------------------------------------------------

PG, PG_REF, PEER = "sqlq-pg", "pg-reference", "procrastinate"


def _postgres(j: _Judge) -> None:
    for sync in ("full", "normal"):
        s = SYNC_NAMES[sync]
        for workload, case, what in (
            ("enqueue", "single", "add"),
            ("reserve", "single", "reserve + complete"),
            ("reserve", "runner", "complete_and_claim"),
        ):
            ours = j.results.one(workload, PG, sync, case)
            ref = j.results.one(workload, PG_REF, sync, case)
            j.ratio(f"PostgreSQL single calls: {what}, {s}", ours, ref, 0.8, "the raw reference")
        j.ratio(
            f"PostgreSQL drains: 4 processes vs 1, {s}",
            j.drain(PG, sync, 4),
            j.drain(PG, sync, 1),
            1.8,
            "one process",
        )
    runs = j.results.find("processes", PG)
    keys = ("duplicates", "double_completed", "lost")
    name = "PostgreSQL drains: duplicates, losses"
    if not runs:
        j.add(name, "all 0", None, None)
    else:
        bad = {k: sum(r.extra[k] for r in runs) for k in keys}
        j.add(
            name,
            "all 0",
            ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in bad.items())
            + f" (over {sum(len(r.values) for r in runs)} drains)",
            not any(bad.values()),
        )
    _growth(j, PG, "PostgreSQL growth")
    for workload in ("enqueue", "reserve", "processes", "growth"):
        _versus_peer(j, workload)


def _versus_peer(j: _Judge, workload: str) -> None:
    """sqlq on PostgreSQL against procrastinate in every row both measured."""
    name = f"PostgreSQL {workload}: faster than procrastinate per task, every row"
    pairs = []
    for theirs in j.results.find(workload, PEER):
        ours = j.results.one(workload, PG, theirs.sync, theirs.case)
        if ours is not None and ours.values and theirs.values:
            better = (
                theirs.median / ours.median if ours.unit == "us" else ours.median / theirs.median
            )
            pairs.append((better, f"{SYNC_NAMES.get(theirs.sync, theirs.sync)} {theirs.case}"))
    if not pairs:
        j.add(name, "> 1x procrastinate", None, None)
        return
    worst = min(pairs)
    j.add(
        name,
        "> 1x procrastinate",
        f"{len(pairs)} rows, least {worst[0]:.2f}x ({worst[1]})",
        worst[0] > 1,
    )
