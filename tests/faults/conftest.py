"""Fixtures of the fault tests: the LD_PRELOAD fault shim and the scenario runner.

The shim (shim.c, compiled once per session by ``fault_shim``) makes chosen file
operations of a process fail and shifts its wall clock.  Start the process with
``fault_shim.env(control)`` and steer it by rewriting the control file with
``FaultShim.write_control`` (atomically; the shim reads it on every intercepted
call, so faults can be armed and disarmed while the process runs).  A missing
or empty control file means no faults and no clock shift.  One directive per
line, ``#`` starts a comment (shim.c has the full description):

    fault op=<ops> path=<pattern> [errno=<E>] [after=<N>] [count=<M>]
          [action=fail|flip] [min_offset=<bytes>]
        ops:     write (write, pwrite(64), writev, pwritev(64)), read (read,
                 pread(64), readv, preadv(64)), sync (fsync, fdatasync),
                 truncate (ftruncate(64)), or a function name (pwrite means
                 pwrite and pwrite64; pwrite64 just that); comma-separated.
        pattern: a substring of the file's path; a trailing '$' anchors it at
                 the end ("queue.db$" is the database, not queue.db-wal).
        errno:   EIO (default), ENOSPC, EDQUOT, EROFS, EFBIG, ... or a number.
        after/count: let N matching calls through, then act on M (default: all).
        action:  fail (default), or flip: a read returns its bytes inverted.
        min_offset: only positioned calls at this file offset or beyond.
    clock_offset=<seconds>
        added to CLOCK_REALTIME (clock_gettime, gettimeofday, time); a float,
        may be negative; Python's time.time() follows it, time.monotonic() not.
    log=<path>
        one line appended per fault acted on: "<function> fd=<n> <path> rule=<i> ...".

The counters of every rule restart whenever the file's contents change.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from needs import need

SHIM_SOURCE = Path(__file__).with_name("shim.c")
SCENARIO = Path(__file__).with_name("scenario.py")


@dataclass(frozen=True)
class FaultShim:
    """The compiled shim: ``library`` is the .so to put in LD_PRELOAD."""

    library: Path

    def env(self, control: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a child process under the shim, steered by ``control``."""
        env = dict(os.environ if base is None else base)
        preload = env.get("LD_PRELOAD")
        env["LD_PRELOAD"] = f"{self.library}:{preload}" if preload else str(self.library)
        env["SQLQ_FAULT_CTL"] = str(control)
        return env

    @staticmethod
    def write_control(control: Path, text: str) -> None:
        """Replace the control file atomically (write a temporary file, rename it)."""
        tmp = control.with_name(control.name + ".tmp")
        tmp.write_text(text, "utf-8")
        os.replace(tmp, control)


@pytest.fixture(scope="session")
def fault_shim(tmp_path_factory: pytest.TempPathFactory) -> FaultShim:
    """The LD_PRELOAD fault shim, compiled from shim.c with gcc (skips without gcc).

    See this module's docstring (or the top of shim.c) for the control-file format.
    """
    need(sys.platform.startswith("linux"), "the fault shim needs Linux (LD_PRELOAD, /proc/self/fd)")
    compiler = shutil.which("gcc") or shutil.which("cc")
    need(compiler, "the fault shim needs gcc (or cc) to compile shim.c")
    library = tmp_path_factory.mktemp("fault-shim") / "libsqlqfault.so"
    command = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-o", str(library)]
    command += [str(SHIM_SOURCE), "-ldl", "-pthread"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"compiling shim.c failed:\n{proc.stderr}"
    return FaultShim(library)


RunScenario = Callable[..., dict[str, Any]]


@pytest.fixture
def run_scenario(tmp_path: Path) -> RunScenario:
    """run_scenario(name, *args, shim=None, prefix=()) -> the JSON scenario.py printed.

    Runs ``scenario.py NAME <tmp_path>/run ARGS`` in a new process: under the fault
    shim when ``shim`` is given (its control file is ``<tmp_path>/fault.ctl``), and
    behind ``prefix`` (e.g. ``unshare -m ...``).  Fails the test on a non-zero exit.
    """

    def run(
        name: str,
        *args: str,
        shim: FaultShim | None = None,
        prefix: Sequence[str] = (),
        timeout: float = 60,
    ) -> dict[str, Any]:
        folder = tmp_path / "run"
        folder.mkdir(exist_ok=True)
        env = shim.env(tmp_path / "fault.ctl") if shim is not None else dict(os.environ)
        command = [*prefix, sys.executable, str(SCENARIO), name, str(folder), *args]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, f"scenario {name} failed:\n{proc.stdout}\n{proc.stderr}"
        lines = proc.stdout.strip().splitlines()
        assert lines, f"scenario {name} printed nothing:\n{proc.stderr}"
        result: dict[str, Any] = json.loads(lines[-1])
        return result

    return run


Integrity = Callable[[Path], str]


@pytest.fixture
def integrity() -> Integrity:
    """integrity(db) -> what PRAGMA integrity_check says of a database file ("ok")."""
    from sqlq.sqlite import driver

    def check(db: Path) -> str:
        conn = driver.dbapi.connect(str(db))
        try:
            return "; ".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
        finally:
            conn.close()

    return check
