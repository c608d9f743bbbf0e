"""python -m bench: run the workloads, write RESULTS.md, print the targets.

    python -m bench                 # the full suite (under 15 minutes on 2 cores)
    python -m bench --quick         # smaller N, one run each, no 10^6 rows (under 2 minutes)
    python -m bench --smoke         # every workload once on tiny sizes (for the tests)
    python -m bench --out DIR       # write RESULTS.md, plots and results.json to DIR
    python -m bench -n 5000         # N: tasks per run (default 20,000; --quick 2,000)
    python -m bench --only reserve,processes --systems sqlq,reference
    python -m bench --report-from bench/results.json   # rewrite RESULTS.md, measure nothing

Progress goes to stderr; the targets (met / not met) are printed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from sqlq.install import DISTRIBUTION
from sqlq.sqlite.driver import describe

from . import postgres, report, systems
from .config import WORKLOADS, Config, Results, log
from .workloads import RUNNERS

HERE = Path(__file__).resolve().parent


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller N, one run each (< 2 min)")
    mode.add_argument("--smoke", action="store_true", help="every workload once, tiny sizes")
    parser.add_argument("-n", "--tasks", type=int, help="N: tasks per run (default 20000)")
    parser.add_argument("--repeats", type=int, help="runs of every measurement")
    parser.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md goes (bench/)")
    parser.add_argument("--workdir", help="folder for the queue files (default: a temp folder)")
    parser.add_argument(
        "--only", help=f"comma-separated workloads, of: {', '.join(WORKLOADS)}", default=None
    )
    parser.add_argument(
        "--systems", help=f"comma-separated systems, of: {', '.join(systems.ALL)}", default=None
    )
    parser.add_argument(
        "--sync", default="full,normal", help="durability settings (default full,normal)"
    )
    parser.add_argument(
        "--worker-options",
        metavar="JSON",
        help="options of sqlq's Worker in the drains, a JSON object (default: its defaults)",
    )
    parser.add_argument(
        "--report-from",
        type=Path,
        metavar="JSON",
        help="measure nothing: write RESULTS.md and the plots from an earlier results.json",
    )
    args = parser.parse_args(argv)
    if args.tasks is not None and args.tasks < 1:
        parser.error("--tasks must be positive")
    for name in (args.only or "").split(","):
        if name and name not in WORKLOADS:
            parser.error(f"unknown workload {name!r}")
    for key in (args.systems or "").split(","):
        if key and key not in systems.ALL:
            parser.error(f"unknown system {key!r}")
    for sync in args.sync.split(","):
        if sync not in ("full", "normal"):
            parser.error(f"unknown durability {sync!r}")
    if args.worker_options is not None:
        try:
            options = json.loads(args.worker_options)
        except ValueError as exc:
            parser.error(f"--worker-options is not JSON: {exc}")
        if not isinstance(options, dict):
            parser.error("--worker-options must be a JSON object")
    return args


def machine(workdir: str) -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "?"
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    try:
        version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    return {
        "cpu": cpu,
        "cores": f"{os.cpu_count()} ({usable} usable by this process)",
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "sqlite": describe(),
        "sqlite_peers": f"SQLite {sqlite3.sqlite_version} (stdlib sqlite3)",
        "sqlq": version,
        "workdir": _filesystem(workdir),
        "load_start": _load(),
    }


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _filesystem(path: str) -> str:
    """'ext4 on /dev/vda (/tmp/sqlq-bench-...)': where the queue files live."""
    best = ("", "?", "?")
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount, kind, *_ = line.split()
            if (path == mount or path.startswith(mount.rstrip("/") + "/")) and len(mount) > len(
                best[0]
            ):
                best = (mount, kind, device)
    except OSError:
        return path
    return f"{best[1]} on {best[2]} ({path})"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report_from:
        args.out.mkdir(parents=True, exist_ok=True)
        results = Results.load(args.report_from)
        print(report.summary(results))
        print(f"Results: {report.write(results, args.out)}")
        return 0
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    cfg = Config.for_mode(mode, args.tasks)
    if args.repeats:
        cfg.repeats = args.repeats
        cfg.mixed_sqlite_repeats = min(cfg.mixed_sqlite_repeats, args.repeats)
    if args.only:
        cfg.workloads = tuple(w for w in WORKLOADS if w in args.only.split(","))
    cfg.syncs = tuple(s for s in ("full", "normal") if s in args.sync.split(","))
    cfg.pg_syncs = tuple(s for s in cfg.pg_syncs if s in cfg.syncs)
    wanted = args.systems.split(",") if args.systems else list(systems.ALL)
    if args.worker_options is not None:  # (read by the drains' worker processes)
        os.environ[systems.WORKER_OPTIONS] = args.worker_options
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    results = Results()
    for key in wanted:
        why = systems.get(key).missing()
        if why:
            results.skipped[key] = why
            log(f"skipping {key}: {why}")
    cfg.systems = tuple(k for k in systems.ALL if k in wanted)
    failed: list[str] = []
    with contextlib.ExitStack() as stack:
        workdir = stack.enter_context(
            tempfile.TemporaryDirectory(prefix="sqlq-bench-", dir=args.workdir)
        )
        cfg.workdir = workdir
        results.machine = machine(workdir)
        if any(systems.get(k).on_postgres for k in cfg.systems if k not in results.skipped):
            cfg.postgres_url = stack.enter_context(postgres.server())
            results.machine["postgresql"] = postgres.settings(cfg.postgres_url)
            log(f"PostgreSQL {results.machine['postgresql']['server_version']} is up")
        results.config = dataclasses.asdict(cfg)
        results.config["postgres_url"] = postgres.shown_url(cfg.postgres_url)
        results.config["command"] = (
            "python -m bench"
            + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
        )
        running = ", ".join(k for k in cfg.systems if k not in results.skipped)
        log(
            f"{mode} run: N={cfg.tasks:,}, {cfg.repeats} run(s) each, systems {running}; "
            f"queue files in {workdir}"
        )
        for name in cfg.workloads:
            log(f"== {name}")
            try:
                RUNNERS[name](cfg, results)
            except Exception as exc:
                traceback.print_exc()
                failed.append(name)
                results.note(f"the {name} workload failed: {exc!r}")
    results.finished = time.time()
    results.machine["load_end"] = _load()
    results.dump(out / "results.json")
    path = report.write(results, out)
    log(f"wrote {path}")
    print(report.summary(results))
    print(f"Results: {path} ({(results.finished - results.started) / 60:.1f} min)")
    if failed:
        print(f"FAILED workloads: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
