"""RESULTS.md, the plots, and the targets (met / not met) from a run's records."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Any

from . import systems
from .config import Record, Results
from .targets import SYNC_NAMES, targets

CASE_NAMES = {
    "single": "one by one",
    "batch": "batches of 1,000",
    "batch, single completes": "batch claim, then one complete per task",
    "runner": "runner loop: `complete_and_claim`",
}


def label(key: str) -> str:
    return systems.ALL[key].label if key in systems.ALL else key


def rate(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:,.0f}"


def ratio_text(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}x"


def ratio_to_ref(results: Results, record: Record, *, cost: bool = False) -> float | None:
    """The figure over its reference's (the raw queue of the same storage: SQLite's or
    PostgreSQL's) in the same workload, case and durability.

    For costs (lower is better) it is the reference's over the figure, so that
    above 1 always means faster than the reference.
    """
    cls = systems.ALL.get(record.system)
    reference = cls.reference if cls is not None else "reference"
    ref = results.one(record.workload, reference, record.sync, record.case)
    if ref is None or not ref.values or not record.values:
        return None
    return ref.median / record.median if cost else record.median / ref.median


# --- plots --------------------------------------------------------------------------------


def plots(results: Results, out: Path) -> list[str]:
    """Write the PNGs; returns their file names (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        results.note("matplotlib is not installed: no plots (pip install -e '.[bench]')")
        return []
    written = []
    procs = results.find("processes")
    if procs:
        syncs = [s for s in ("full", "normal") if any(r.sync == s for r in procs)]
        fig, axes = plt.subplots(1, len(syncs), figsize=(6 * len(syncs), 4.2), squeeze=False)
        for ax, sync in zip(axes[0], syncs, strict=True):
            for key in dict.fromkeys(r.system for r in procs):
                recs = sorted(
                    (r for r in procs if r.system == key and r.sync == sync),
                    key=lambda r: int(r.case),
                )
                if recs:
                    ax.plot(
                        [int(r.case) for r in recs],
                        [r.median for r in recs],
                        marker="o",
                        label=label(key),
                    )
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({int(r.case) for r in procs}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("worker processes")
            ax.set_ylabel("tasks completed per second (all workers)")
            ax.set_title(f"One queue, synchronous={SYNC_NAMES[sync]}")
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "throughput_vs_workers.png", dpi=110)
        plt.close(fig)
        written.append("throughput_vs_workers.png")
    grow = results.find("growth")
    if grow:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for key in dict.fromkeys(r.system for r in grow):
            recs = sorted((r for r in grow if r.system == key), key=lambda r: int(r.case))
            ax.plot(
                [int(r.case) for r in recs], [r.median for r in recs], marker="o", label=label(key)
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:,.0f}"))
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("finished tasks already in the table")
        ax.set_ylabel("microseconds per reserve + complete")
        ax.set_title("Cost per task against table size (synchronous=NORMAL)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "cost_vs_table_size.png", dpi=110)
        plt.close(fig)
        written.append("cost_vs_table_size.png")
    return written


# --- RESULTS.md --------------------------------------------------------------------------------


def _per_commit(values: list[float | None] | None) -> str:
    """Median tasks per commit of the runs; "-" where the system does not count commits."""
    known = [v for v in values or [] if v is not None]
    return f"{statistics.median(known):.2f}" if known else "-"


def _median_text(values: list[float] | None, fmt: str) -> str:
    return "-" if not values else fmt.format(statistics.median(values))


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _drain_costs(records: list[Record], ks: list[int]) -> list[str]:
    """The drains of one durability setting again, a row per number of processes: for
    every system its tasks/s, CPU microseconds per task (getrusage of every worker
    process) and tasks per commit (medians of the runs; "-" where not counted)."""
    keys = list(dict.fromkeys(r.system for r in records))
    found = {(r.system, int(r.case)): r for r in records}
    header = ["processes"]
    for key in keys:
        header += [f"{label(key)} tasks/s", "CPU us/task", "tasks/commit"]
    rows = []
    for k in ks:
        row = [str(k)]
        for key in keys:
            rec = found.get((key, k))
            if rec is None:
                row += ["-", "-", "-"]
                continue
            row += [
                rate(rec.median),
                _median_text(rec.extra.get("cpu_per_task"), "{:.1f}"),
                _per_commit(rec.extra.get("tasks_per_commit")),
            ]
        rows.append(row)
    lines = ["The same drains, a row per number of processes:", ""]
    return [*lines, *_table(header, rows), ""]


def _n_text(records: list[Record | None]) -> str:
    ns = sorted({n for r in records if r is not None for n in r.extra.get("n", [])})
    if not ns:
        return "-"
    return f"{ns[0]:,}" if len(ns) == 1 else f"{ns[0]:,}-{ns[-1]:,}"


def _throughput_section(results: Results, workload: str, cases: list[str]) -> list[str]:
    syncs = [s for s in ("full", "normal") if results.find(workload, sync=s)]
    header = ["system", "how"]
    for sync in syncs:
        header += [f"{SYNC_NAMES[sync]} tasks/s", "x ref"]
    header.append("tasks per run")
    rows = []
    keys = list(dict.fromkeys(r.system for r in results.find(workload)))
    for case in cases:
        for key in keys:
            recs = [results.one(workload, key, sync, case) for sync in syncs]
            if not any(recs):
                continue
            row = [label(key), CASE_NAMES.get(case, case)]
            for rec in recs:
                if rec is None:
                    row += ["n/a", "-"]
                else:
                    row += [rate(rec.median), ratio_text(ratio_to_ref(results, rec))]
            row.append(_n_text(recs))
            rows.append(row)
    return _table(header, rows)


def _postgres_section(shown: dict[str, str] | None, cfg: dict[str, Any]) -> list[str]:
    """The server of the PostgreSQL rows: its version and the settings that matter."""
    if not shown:
        return []
    lines = ["", "## PostgreSQL server", ""]
    lines += _table(["setting (SHOW)", "value"], [[k, f"`{v}`"] for k, v in shown.items()])
    where = cfg.get("postgres_url") or "?"
    lines += [
        "",
        f"Server: `{where}`. Unless `SQLQ_BENCH_POSTGRES_URL` names a server of the user's, "
        "the bench starts a throwaway cluster on this machine (tests/postgres.py's "
        "`server()`: `initdb`, then `postgres` on a unix socket only) with `fsync` on, and "
        "every setting above at its default but `listen_addresses`. `synchronous_commit` is "
        "set by each system on its own connections: FULL rows run with it `on` (each commit "
        "waits for the WAL flush), NORMAL rows with it `off`; the value above is the "
        "server's default. Every measurement gets a fresh schema, dropped after it. "
        "The client and the server share the machine's cores.",
    ]
    return lines


def write(results: Results, out: Path) -> Path:
    cfg = results.config
    m = results.machine
    png = plots(results, out)
    lines: list[str] = ["# sqlq benchmarks", ""]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(results.started))
    took = (results.finished or time.time()) - results.started
    lines += [
        f"Written by `{cfg.get('command', 'python -m bench')}` on {started} "
        f"({cfg.get('mode')} mode, N = {cfg.get('tasks'):,}, {cfg.get('repeats')} run(s) of "
        f"every measurement; the run took {took / 60:.1f} min).",
        "",
        "Every figure is the median of its runs. **x ref** divides it by the raw-SQLite "
        "reference queue (`bench/reference.py`) measured in the same run with the same "
        "durability setting, or for the PostgreSQL rows by the raw PostgreSQL reference "
        "(`bench/pg_reference.py`) on the same server with the same `synchronous_commit` "
        "(FULL: on, NORMAL: off); above 1 is faster than the reference. "
        "A timed loop stops after "
        f"N tasks or {cfg.get('budget')} s, whichever comes first; *tasks per run* says how "
        "many tasks are behind a figure. The runs of a workload are interleaved (run 1 of "
        "every system and setting, then run 2, ...), so that load from elsewhere on the "
        "machine falls on all of them alike. Timings on a shared machine are still noisy: "
        "compare figures of one run with each other, not across runs; the load average below "
        "says how busy the machine was.",
        "",
        "## Machine",
        "",
    ]
    lines += _table(
        ["", ""],
        [
            ["CPU", m.get("cpu", "?")],
            ["cores", str(m.get("cores", "?"))],
            [
                "load average (start / end)",
                f"{m.get('load_start', '?')} / {m.get('load_end', '?')}",
            ],
            ["OS", m.get("os", "?")],
            ["Python", m.get("python", "?")],
            ["SQLite of sqlq and the reference", m.get("sqlite", "?")],
            ["SQLite of the peers", m.get("sqlite_peers", "?")],
            ["file system of the queue files", m.get("workdir", "?")],
            ["sqlq", m.get("sqlq", "?")],
            ["date", started],
        ],
    )
    lines += _postgres_section(m.get("postgresql"), cfg)
    lines += ["", "## Targets", ""]
    tgts = targets(results)
    lines += _table(
        ["target", "measured", "threshold", "result"],
        [[t.name, t.measured, t.against, f"**{t.verdict}**"] for t in tgts],
    )

    floor = {r.sync: r for r in results.find("floor")}
    if floor:
        lines += ["", "## The floor: one write transaction", ""]
        rows = [
            [SYNC_NAMES[s], f"{r.median:.1f}", rate(1e6 / r.median)]
            for s, r in sorted(floor.items())
        ]
        lines += _table(
            ["synchronous", "us per empty single-row write transaction", "transactions/s"], rows
        )
        lines += [
            "",
            "`BEGIN IMMEDIATE; UPDATE t SET v = v + 1 WHERE id = 1; COMMIT` in WAL mode with the "
            "SQLite of sqlq. Under FULL each commit waits for one fsync of the WAL. A queue that "
            "commits once per call does at most that many calls per second on this machine; "
            "reserve + complete as two calls is at most half as many tasks per second, and "
            "the runner loop (one transaction per task) at most as many:",
            "",
        ]
        for s, r in sorted(floor.items()):
            lines.append(
                f"- {SYNC_NAMES[s]}: at most {rate(1e6 / r.median)} single calls/s, "
                f"{rate(0.5e6 / r.median)} reserve+complete tasks/s."
            )

    if results.find("enqueue"):
        lines += ["", "## 1. Enqueue", ""]
        lines += _throughput_section(results, "enqueue", ["single", "batch"])
        lines += [
            "",
            "One by one: one `add` per task, each its own transaction. Batches: `add_many` of "
            "1,000 ids per transaction (systems without a batch call have no batch row).",
        ]

    if results.find("reserve"):
        lines += ["", "## 2. Reserve + complete, one process", ""]
        lines += _throughput_section(
            results, "reserve", ["single", "batch", "batch, single completes", "runner"]
        )
        lines += [
            "",
            "The queue is filled first (not timed), then emptied. One by one: reserve, then "
            "complete (two transactions per task). Batches: `claim_many(1000)` in one "
            "transaction, then completions: one transaction per task where there is no batch "
            "complete (sqlq), one transaction per batch where there is (the reference). "
            "The reference's *batch claim, then one complete per task* row is the like-for-like "
            "figure for sqlq's batch row. Runner loop: complete the task and claim the next in "
            "one transaction; for the reference, its own equivalent (the target compares "
            "sqlq's runner loop with the reference's one-by-one row).",
        ]

    procs = results.find("processes")
    if procs:
        lines += ["", "## 3. Worker processes draining one file", ""]
        ks = sorted({int(r.case) for r in procs})
        for sync in ("full", "normal"):
            sub = [r for r in procs if r.sync == sync]
            if not sub:
                continue
            lines += [
                f"synchronous={SYNC_NAMES[sync]}: tasks completed per second, all workers:",
                "",
            ]
            header = ["system", "tasks per drain"]
            for k in ks:
                header += [f"{k} worker{'s' if k > 1 else ''}", "x ref"]
            rows = []
            for key in dict.fromkeys(r.system for r in sub):
                recs = {int(r.case): r for r in sub if r.system == key}
                row = [label(key), f"{next(iter(recs.values())).extra['tasks']:,}"]
                for k in ks:
                    rec = recs.get(k)
                    row += (
                        ["-", "-"]
                        if rec is None
                        else [rate(rec.median), ratio_text(ratio_to_ref(results, rec))]
                    )
                rows.append(row)
            lines += _table(header, rows)
            lines.append("")
            lines += _drain_costs(sub, ks)
        if "throughput_vs_workers.png" in png:
            lines += ["![throughput against worker processes](throughput_vs_workers.png)", ""]
        lines += [
            "Correctness and fairness, summed over the runs (each worker records every task it "
            "received and every completion that was accepted; the parent checks them against "
            "the tasks it added). *duplicates*: deliveries beyond the first; *lost*: tasks no "
            'worker completed; *lock errors*: `sqlq.errors.Busy` or "database is locked" that '
            "reached the worker (counted, not retried silently); *least-served*: the fewest "
            "tasks one worker got, over a fair share (tasks / workers), median of the runs.",
            "",
        ]
        rows = []
        for r in procs:
            x = r.extra
            rows.append(
                [
                    label(r.system),
                    SYNC_NAMES[r.sync],
                    r.case,
                    f"{x['tasks']:,} x {len(r.values)}",
                    str(x["duplicates"]),
                    str(x["double_completed"]),
                    str(x["lost"]),
                    str(x["lock_errors"]),
                    str(x["other_errors"]) + (" (timed out)" if x.get("timed_out") else ""),
                    f"{statistics.median(x['least_share']):.2f}",
                    _per_commit(x.get("tasks_per_commit")),
                    _median_text(x.get("cpu_per_task"), "{:.0f}"),
                    _median_text(x.get("switches_per_task"), "{:.2f}"),
                ]
            )
        lines += _table(
            [
                "system",
                "sync",
                "workers",
                "tasks x runs",
                "duplicates",
                "completed twice",
                "lost",
                "lock errors",
                "other errors",
                "least-served",
                "tasks per commit",
                "CPU us per task",
                "context switches per task",
            ],
            rows,
        )
        samples = [s for r in procs for s in r.extra.get("error_samples", [])]
        if samples:
            lines += ["", "Examples of other errors: " + "; ".join(f"`{s}`" for s in samples[:3])]
        lines += [
            "",
            "Workers are started once (multiprocessing, spawn) and reused for every drain; a "
            "drain starts when every worker has opened the file, and ends when the last worker "
            "finds the queue empty. Handlers do no work, so a worker goes straight from one "
            "transaction to the next: the worst case for sharing SQLite's write lock, whose "
            "waiters poll with sleeps (SQLite's busy handler) and can lose to a writer that "
            "never pauses. Tasks per drain are set so that one worker takes about "
            f"{cfg.get('proc_budget')} s (from the one-process figure; at most N), the same for "
            "every worker count of a system. On PostgreSQL the workers share one queue in one "
            "schema of the server and claim concurrently (`FOR UPDATE SKIP LOCKED`); sqlq's "
            "workers run `sqlq.Worker` there too, the reference and procrastinate a reserve, "
            "complete loop; the server's backends share the machine's cores with the workers.",
        ]

    grow = results.find("growth")
    if grow:
        sizes = sorted({int(r.case) for r in grow})
        lines += ["", "## 4. Growth: cost per task against table size", ""]
        header = ["system"]
        for size in sizes:
            header += [f"{size:,} rows: us/task", "x ref"]
        header.append(f"{sizes[-1]:,} vs {sizes[0]:,}")
        rows = []
        for key in dict.fromkeys(r.system for r in grow):
            recs = {int(r.case): r for r in grow if r.system == key}
            row = [label(key)]
            for size in sizes:
                rec = recs.get(size)
                row += (
                    ["-", "-"]
                    if rec is None
                    else [f"{rec.median:,.0f}", ratio_text(ratio_to_ref(results, rec, cost=True))]
                )
            first, last = recs.get(sizes[0]), recs.get(sizes[-1])
            row.append(ratio_text(None if not first or not last else last.median / first.median))
            rows.append(row)
        lines += _table(header, rows)
        lines += [
            "",
            "Microseconds per reserve + complete (synchronous=NORMAL, so that the figure is "
            "the queue's work and not the fsync), with that many COMPLETED tasks already in the "
            f"table, written straight into it in one transaction. {cfg.get('growth_ops'):,} "
            "tasks are added (not timed) and then reserved and completed one by one, at most "
            f"{cfg.get('budget')} s. *x ref* is the reference's cost over the system's (above 1: "
            "cheaper than the reference). On PostgreSQL (synchronous_commit off) the finished "
            "rows are written with one `INSERT ... SELECT FROM generate_series` into the "
            "system's own table, which is then vacuumed and analyzed (as autovacuum would), "
            "at the sizes "
            + ", ".join(f"{size:,}" for size in cfg.get("pg_growth_sizes", ()))
            + " (a 10^6 row only where the table says so).",
        ]
        if "cost_vs_table_size.png" in png:
            lines += ["", "![cost per task against table size](cost_vs_table_size.png)"]

    mixed = results.find("mixed")
    if mixed:
        lines += ["", "## 5. The mixed calls of the core contract", ""]
        rows = []
        for r in mixed:
            face = "WorkQueue (memory)" if r.case == "memory" else "Queue (SQLite, NORMAL)"
            same = r.extra.get("same")
            rows.append(
                [
                    face,
                    rate(r.median),
                    f"{len(r.values)}",
                    "-" if same is None else ("yes" if all(same) else "**NO**"),
                ]
            )
        lines += _table(["face", "calls/s", "runs", "same answers as memory"], rows)
        calls = {r.case: r.extra["calls"] for r in mixed}
        prefix = (
            f" (the SQLite face runs the first {calls['sqlite']:,} of them, and is compared "
            "with memory on those)"
            if "sqlite" in calls and calls["sqlite"] < calls.get("memory", 0)
            else ""
        )
        lines += [
            "",
            f"`bench/seed_calls.py`: {max(calls.values()):,} calls (adds, reserves, completes, "
            f"fails and status reads at rising times, seed 7) on each face{prefix}; both must "
            "give the same answer to every call.",
        ]

    idle = {r.case: r for r in results.find("idle")}
    if idle:
        cpu, p50, p99 = idle.get("cpu"), idle.get("p50"), idle.get("p99")
        lines += ["", "## 6. A waiting worker", ""]
        rows = []
        if cpu:
            rows.append(["CPU while idle", f"{cpu.median:.2f}% of one core"])
        if p50 and p50.values:
            rows.append(["pick-up latency p50", f"{p50.median:.1f} ms"])
        if p99 and p99.values:
            rows.append(["pick-up latency p99", f"{p99.median:.1f} ms"])
        lines += _table(["", "median of runs"], rows)
        ref = cpu or p50
        if ref:
            x = ref.extra
            lines += [
                "",
                f"The worker: {x['worker']}, in its own process, on a sqlq queue "
                f"(synchronous=FULL). CPU: its process CPU time over {x['idle_seconds']} s of "
                f"idling. Latency: {x['adds']} adds per run from the parent, spaced randomly "
                "20-100 ms apart; from `add` returning (the task is committed) to the handler "
                "starting (`time.time()` in both processes). An idle worker polls `ready()` "
                "every `poll_max` at most, so its p99 is about `poll_max` plus one claim.",
            ]

    lines += ["", "## Systems compared", ""]
    lines += _table(
        ["system", "storage", "how it maps onto reserve / complete"],
        [
            [cls.label, cls.library, cls.semantics]
            for key, cls in systems.ALL.items()
            if key in cfg.get("systems", ()) and key not in results.skipped
        ],
    )
    if results.skipped:
        lines += ["", "Skipped:", ""]
        lines += [f"- {label(k)}: {why}" for k, why in results.skipped.items()]
    lines += [
        "",
        "The peers use Python's own `sqlite3` (their code imports it), sqlq and the reference "
        "use the SQLite of `sqlq.sqlite.driver` (see Machine). Durability is set on every "
        "system's connection with `PRAGMA synchronous` after it opens, WAL mode everywhere.",
    ]
    bounds = Path(__file__).with_name("bounds.md")
    if bounds.exists() and any(not t.met for t in tgts if t.met is not None):
        lines += ["", "## What bounds the targets that are not met", ""]
        lines += bounds.read_text("utf-8").rstrip().splitlines()
    apart = Path(__file__).with_name("apart.md")
    if apart.exists():  # the benches run on their own (python -m bench.startup, ...)
        lines += ["", *apart.read_text("utf-8").rstrip().splitlines()]
    if results.notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {n}" for n in results.notes]
    lines.append("")
    path = out / "RESULTS.md"
    path.write_text("\n".join(lines))
    return path


def summary(results: Results) -> str:
    """The targets, as printed at the end of a run."""
    out = ["Targets:"]
    for t in targets(results):
        out.append(f"  [{t.verdict:^12}] {t.name}: {t.measured} (target {t.against})")
    return "\n".join(out)
