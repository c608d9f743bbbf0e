"""What a run measures (sizes, repeats, time budgets) and where its figures go."""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WORKLOADS = ("floor", "enqueue", "reserve", "processes", "growth", "mixed", "idle")


@dataclass
class Config:
    mode: str  # "full", "quick" or "smoke"
    tasks: int  # N: tasks per enqueue / reserve+complete run (a cap when time runs out first)
    repeats: int  # runs of every measurement; medians are quoted
    budget: float  # seconds a single timed loop may run before it stops early
    workers: tuple[int, ...]  # worker-process counts
    proc_budget: float  # seconds a drain by one worker should take (sets tasks per drain)
    proc_time_limit: float  # a drain stops after this many seconds whatever happens
    growth_sizes: tuple[int, ...]  # finished rows already in the table
    growth_ops: int  # reserve+complete measured at each size
    mixed_calls: int  # the mixed calls of the core contract
    mixed_sqlite_calls: int  # the first this many of them on the SQLite face
    mixed_sqlite_repeats: int
    idle_seconds: float  # idle window per repeat
    latency_adds: int  # adds per repeat for the pick-up latency
    pg_workers: tuple[int, ...]  # worker-process counts on PostgreSQL
    pg_syncs: tuple[str, ...]  # durability settings measured on PostgreSQL
    pg_growth_sizes: tuple[int, ...]  # finished rows already in the table, on PostgreSQL
    batch: int = 1000
    syncs: tuple[str, ...] = ("full", "normal")
    systems: tuple[str, ...] = ()
    workloads: tuple[str, ...] = WORKLOADS
    workdir: str = ""  # where the queue files of the runs live (a temporary folder)
    postgres_url: str = ""  # the run's PostgreSQL server (bench/postgres.py)

    @classmethod
    def for_mode(cls, mode: str, tasks: int | None = None) -> Config:
        if mode == "full":
            return cls(
                mode=mode,
                tasks=tasks or 20_000,
                repeats=3,
                budget=2.5,
                workers=(1, 2, 4, 8, 16),
                proc_budget=1.5,
                proc_time_limit=60.0,
                growth_sizes=(1_000, 100_000, 1_000_000),
                growth_ops=2_000,
                mixed_calls=200_000,
                mixed_sqlite_calls=200_000,
                mixed_sqlite_repeats=3,
                idle_seconds=3.0,
                latency_adds=50,
                pg_workers=(1, 2, 4, 8, 16),
                pg_syncs=("full", "normal"),
                pg_growth_sizes=(1_000, 100_000, 1_000_000),
            )
        if mode == "quick":
            return cls(
                mode=mode,
                tasks=tasks or 2_000,
                repeats=1,
                budget=0.5,
                workers=(1, 2, 4, 8),
                proc_budget=0.4,
                proc_time_limit=20.0,
                growth_sizes=(1_000, 100_000),
                growth_ops=500,
                mixed_calls=200_000,
                mixed_sqlite_calls=50_000,
                mixed_sqlite_repeats=1,
                idle_seconds=1.5,
                latency_adds=30,
                pg_workers=(1, 4),
                pg_syncs=("normal",),  # the queue's own work: no wait for the disk
                pg_growth_sizes=(1_000, 10_000),
            )
        if mode == "smoke":
            return cls(
                mode=mode,
                tasks=tasks or 200,
                repeats=1,
                budget=0.2,
                workers=(1, 2),
                proc_budget=0.1,
                proc_time_limit=10.0,
                growth_sizes=(1_000,),
                growth_ops=100,
                mixed_calls=5_000,
                mixed_sqlite_calls=5_000,
                mixed_sqlite_repeats=1,
                idle_seconds=0.5,
                latency_adds=5,
                pg_workers=(1, 2),
                pg_syncs=("full", "normal"),
                pg_growth_sizes=(1_000,),
            )
        raise ValueError(mode)


@dataclass
class Record:
    workload: str
    system: str
    sync: str  # "full", "normal" or "-"
    case: str
    values: list[float]  # one per repeat
    unit: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")


class Results:
    def __init__(self) -> None:
        self.records: list[Record] = []
        self.notes: list[str] = []
        self.skipped: dict[str, str] = {}  # system key -> why it did not run
        self.machine: dict[str, Any] = {}
        self.config: dict[str, Any] = {}
        self.started = time.time()
        self.finished: float | None = None

    def add(
        self,
        workload: str,
        system: str,
        sync: str,
        case: str,
        values: list[float],
        unit: str,
        **extra: Any,
    ) -> Record:
        record = Record(workload, system, sync, case, list(values), unit, extra)
        self.records.append(record)
        return record

    def find(
        self,
        workload: str,
        system: str | None = None,
        sync: str | None = None,
        case: str | None = None,
    ) -> list[Record]:
        return [
            r
            for r in self.records
            if r.workload == workload
            and (system is None or r.system == system)
            and (sync is None or r.sync == sync)
            and (case is None or r.case == case)
        ]

    def one(self, workload: str, system: str, sync: str, case: str) -> Record | None:
        found = self.find(workload, system, sync, case)
        return found[0] if found else None

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            log(f"note: {text}")

    @classmethod
    def load(cls, path: Path) -> Results:
        """The results of an earlier run, from its results.json."""
        data = json.loads(path.read_text())
        results = cls()
        results.machine, results.config = data["machine"], data["config"]
        results.started, results.finished = data["started"], data["finished"]
        results.notes, results.skipped = data["notes"], data["skipped"]
        results.records = [Record(**r) for r in data["records"]]
        return results

    def dump(self, path: Path) -> None:
        data = {
            "machine": self.machine,
            "config": self.config,
            "started": self.started,
            "finished": self.finished,
            "notes": self.notes,
            "skipped": self.skipped,
            "records": [asdict(r) for r in self.records],
        }
        path.write_text(json.dumps(data, indent=1, default=str) + "\n")


_T0 = time.monotonic()


def log(message: str) -> None:
    """Progress, to stderr."""
    elapsed = time.monotonic() - _T0
    print(f"[{int(elapsed // 60):2d}:{elapsed % 60:04.1f}] {message}", file=sys.stderr, flush=True)
