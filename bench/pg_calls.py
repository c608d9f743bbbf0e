"""Where the time of a call goes on PostgreSQL: sqlq against the raw reference.

    python -m bench.pg_calls [N]     # N tasks per operation (default 2000)

For each operation (add; reserve + complete; complete_and_claim; batches of
1,000), in one process with ``synchronous_commit`` off (NORMAL), per task:

* statements: ``psycopg.Cursor.execute`` calls, and round trips to the server
  (a statement, or a pipeline of several: sqlq sends a claim's BEGIN with its
  first statement), counted in a separate pass;
* client CPU: this process's user + system time (getrusage);
* server CPU: the time the connection's backend spent on a CPU
  (``/proc/<pid>/schedstat``; the server must run on this machine);
* wall: elapsed time.

Prints a table (markdown) to stdout.  The server is the bench's (bench/postgres.py).
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from . import postgres, systems

BATCH = 1000


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _backend_pids(path: str) -> set[int]:
    """The server processes of the connections to ``path``'s schema (this client's)."""
    with psycopg.connect(postgres.conninfo(path), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchall()
    return {pid for (pid,) in rows}


def _on_cpu(pids: set[int]) -> float:
    """Seconds the processes spent on a CPU (0 for one that is gone)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return total / 1e9


class _Counted:
    """Counts statements (psycopg's Cursor.execute calls) and round trips (a statement
    outside a pipeline, or a whole pipeline block) while active."""

    def __init__(self) -> None:
        self.statements = 0
        self.round_trips = 0
        self._in_pipeline = False
        self._execute = psycopg.Cursor.execute
        self._pipeline = psycopg.Connection.pipeline

    def __enter__(self) -> _Counted:
        execute, pipeline = self._execute, self._pipeline

        def counted_execute(cursor: Any, *args: Any, **kwargs: Any) -> Any:
            self.statements += 1
            self.round_trips += not self._in_pipeline
            return execute(cursor, *args, **kwargs)

        @contextlib.contextmanager
        def counted_pipeline(conn: Any) -> Any:
            self.round_trips += 1
            self._in_pipeline = True
            try:
                with pipeline(conn) as p:
                    yield p
            finally:
                self._in_pipeline = False

        psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign,assignment]
        psycopg.Connection.pipeline = counted_pipeline  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        psycopg.Cursor.execute = self._execute  # type: ignore[method-assign]
        psycopg.Connection.pipeline = self._pipeline  # type: ignore[method-assign]


Op = Callable[[systems.System, int], int]  # (system, n) -> tasks done


def _add(system: systems.System, n: int) -> int:
    for i in range(n):
        system.add(f"a{time.monotonic_ns()}-{i}")
    return n


def _reserve_complete(system: systems.System, n: int) -> int:
    done = 0
    while done < n and (claimed := system.reserve()) is not None:
        done += system.complete(claimed)
    return done


def _runner(system: systems.System, n: int) -> int:
    claimed, done = system.reserve(), 0
    while claimed is not None and done < n:
        ok, claimed = system.complete_and_claim(claimed)
        done += ok
    if claimed is not None:
        done += system.complete(claimed)
    return done


def _add_many(system: systems.System, n: int) -> int:
    stamp = time.monotonic_ns()
    for start in range(0, n, BATCH):
        system.add_many([f"b{stamp}-{i}" for i in range(start, start + BATCH)])
    return n - n % BATCH if n >= BATCH else 0


def _batches(system: systems.System, n: int) -> int:
    done = 0
    while done < n and (claimed := system.claim_many(BATCH)):
        done += system.complete_many(claimed)
    return done


OPS: dict[str, tuple[Op, bool]] = {  # name -> (operation, needs a filled queue)
    "add": (_add, False),
    "reserve + complete": (_reserve_complete, True),
    "complete_and_claim": (_runner, True),
    "add_many(1000)": (_add_many, False),
    "claim_many(1000) + complete_many": (_batches, True),
}


def measure(url: str, key: str, op: str, n: int) -> dict[str, float]:
    cls = systems.get(key)
    run, filled = OPS[op]
    figures: dict[str, float] = {}
    for counting in (True, False):
        path = postgres.new_schema(url, f"calls-{key}-{len(op)}-{counting}")
        if filled:
            cls.fill(path, [f"t{i}" for i in range(n + BATCH)])
        system = cls(path, "normal")
        run(system, 50)  # warm: connections made, statements prepared
        pids = _backend_pids(path)
        if counting:
            with _Counted() as counted:
                done = run(system, n)
            figures["statements"] = counted.statements / done
            figures["round trips"] = counted.round_trips / done
        else:
            cpu, server, wall = _cpu(), _on_cpu(pids), time.perf_counter()
            done = run(system, n)
            wall, cpu = time.perf_counter() - wall, _cpu() - cpu
            server = _on_cpu(pids) - server
            figures |= {"client": cpu / done, "server": server / done, "wall": wall / done}
        system.close()
        postgres.drop(path)
    return figures


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 2000
    rows = []
    with postgres.server() as url:
        for op in OPS:
            for key in ("sqlq-pg", "pg-reference"):
                f = measure(url, key, op, n)
                rows.append(
                    f"| {op} | {systems.get(key).label} | {f['statements']:.2f} | "
                    f"{f['round trips']:.2f} | "
                    f"{f['client'] * 1e6:.0f} | {f['server'] * 1e6:.0f} | {f['wall'] * 1e6:.0f} |"
                )
                print(rows[-1], file=sys.stderr, flush=True)
    print(
        "| operation | system | statements per task | round trips per task | "
        "client CPU us/task | server CPU us/task | wall us/task |"
    )
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
