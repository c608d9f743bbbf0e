"""How long a `sqlq` command takes to start: the medians of N runs of `sqlq --help`,
`import sqlq` and `sqlq stats` on a small SQLite file, against their targets (issue 23).

    python -m bench.startup                  # 21 runs of each
    python -m bench.startup --runs 1         # a smoke run
    python -m bench.startup --instructions   # and each command's instructions (callgrind)

Each run is a fresh process, as a shell starts it; the commands take turns, run by
run, so that a change in the machine's load falls on all of them alike. Two rows
without a target show what every run pays: the interpreter's start (``python -c
pass``) and importing SQLAlchemy, which anything that opens a database needs. The
CPU time (user + system, from getrusage) is printed beside the wall clock: on a
shared machine it moves less.

The modules' bytecode is written once, to a folder of its own (PYTHONPYCACHEPREFIX),
before the runs that are measured: an installed package has it (pip compiles it), a
source tree run with PYTHONDONTWRITEBYTECODE would not. The commands run in that
folder, so that the sqlq imported is the one installed for this Python.

With ``--instructions``, each command also runs once under valgrind's callgrind,
which counts the instructions it executes: a figure that the machine's load does not
move, to compare two versions by.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import sqlq


class Command(NamedTuple):
    label: str
    argv: list[str]
    #: The target for the median wall-clock time, in seconds (None: shown for reference).
    target: float | None


def commands(db: str) -> list[Command]:
    python = sys.executable
    script = shutil.which("sqlq", path=str(Path(python).parent))
    sqlq_command = [script] if script else [python, "-m", "sqlq"]
    return [
        Command("`python -c pass` (the interpreter alone)", [python, "-c", "pass"], None),
        Command("`import sqlalchemy`", [python, "-c", "import sqlalchemy"], None),
        Command("`sqlq --help`", [*sqlq_command, "--help"], 0.1),
        Command("`import sqlq`", [python, "-c", "import sqlq"], 0.15),
        Command("`sqlq stats` (a small SQLite file)", [*sqlq_command, "stats", db], 0.3),
    ]


def _fill(db: str) -> None:
    """A small queue: a few tasks in each of a few states."""
    with sqlq.Queue(db, lease_seconds=30, max_attempts=1) as queue:
        queue.add_many([f"t{n}" for n in range(20)])
        for _ in range(5):
            lease = queue.claim()
            assert lease is not None
            queue.complete(lease.task_id, token=lease.token)
        lease = queue.claim()
        assert lease is not None
        queue.fail(lease.task_id, token=lease.token, error="once")


class Timing(NamedTuple):
    wall: float
    cpu: float


def _run(argv: list[str], env: dict[str, str]) -> Timing:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        argv, env=env, cwd=env["PYTHONPYCACHEPREFIX"], stdout=subprocess.DEVNULL, check=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(wall, cpu)


def _instructions(argv: list[str], env: dict[str, str]) -> int:
    """The instructions ``argv`` executes, counted by callgrind."""
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env,
        cwd=env["PYTHONPYCACHEPREFIX"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    found = re.search(r"refs:\s+([\d,]+)", run.stderr)
    assert found, run.stderr
    return int(found.group(1).replace(",", ""))


def _environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    os.makedirs(env["PYTHONPYCACHEPREFIX"], exist_ok=True)
    return env


def _prepared(folder: Path, db: str) -> tuple[list[Command], dict[str, str]]:
    """The commands on a new small queue ``db``, and their environment, each run once
    (which writes the bytecode; not measured)."""
    _fill(db)
    env = _environment(folder)
    todo = commands(db)
    for command in todo:
        _run(command.argv, env)
    return todo, env


def count(folder: Path) -> dict[str, int]:
    """The instructions of each command, one run each under callgrind."""
    todo, env = _prepared(folder, str(folder / "counted.db"))
    return {c.label: _instructions(c.argv, env) for c in todo}


def measure(runs: int, folder: Path) -> list[tuple[Command, Timing]]:
    """The median wall-clock and CPU time of each command over ``runs`` runs."""
    todo, env = _prepared(folder, str(folder / "small.db"))
    timings: dict[str, list[Timing]] = {c.label: [] for c in todo}
    for _ in range(runs):
        for command in todo:
            timings[command.label].append(_run(command.argv, env))
    return [
        (
            c,
            Timing(
                statistics.median(t.wall for t in timings[c.label]),
                statistics.median(t.cpu for t in timings[c.label]),
            ),
        )
        for c in todo
    ]


def table(results: list[tuple[Command, Timing]], counted: dict[str, int] | None = None) -> str:
    extra = " instructions |" if counted else ""
    lines = [
        f"| command | target (median) | median wall clock | median CPU | met |{extra}",
        "| --- | ---: | ---: | ---: | --- |" + (" ---: |" if counted else ""),
    ]
    for command, timing in results:
        if command.target is None:
            target = met = "-"
        else:
            target = f"<= {command.target:.2f} s"
            met = "yes" if timing.wall <= command.target else "no"
        line = f"| {command.label} | {target} | {timing.wall:.3f} s | {timing.cpu:.3f} s | {met} |"
        if counted:
            line += f" {counted[command.label] / 1e6:,.0f}M |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="runs of each command (21)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions too (valgrind)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be positive")
    if args.instructions and not shutil.which("valgrind"):
        parser.error("--instructions needs valgrind")
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="sqlq-startup-") as folder:
        results = measure(args.runs, Path(folder))
        counted = count(Path(folder)) if args.instructions else None
    print(table(results, counted))
    print(
        f"\n{args.runs} runs of each; load average {load:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after ({os.cpu_count()} cores)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
