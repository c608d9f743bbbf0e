"""A PostgreSQL server for the tests: ``server()`` yields its SQLAlchemy URL.

``SQLQ_TEST_POSTGRES_URL`` set: the suite uses that server (a plain ``postgresql://`` URL
gets the psycopg 3 driver) and starts nothing.  Otherwise ``server()`` makes a throwaway
cluster: ``initdb`` in a fresh temporary folder, then ``postgres`` itself as a child of
this process, listening only on a unix socket in that folder, with ``fsync`` off (the
folder outlives no test run).  It yields once the server accepts connections, and at the
end shuts it down (fast mode) and removes the folder.

``postgres`` runs as a child rather than daemonised by ``pg_ctl start`` so that it dies
with the test run: its parent-death signal is SIGQUIT (PostgreSQL's immediate shutdown),
so a test run killed with SIGKILL leaves no server behind, only its folder in the
temporary directory.  initdb refuses to run as root, so under root (as in CI) the cluster
belongs to the ``postgres`` user, or ``nobody`` where there is none.

Without PostgreSQL's binaries (on ``PATH``, or where Debian puts them:
``/usr/lib/postgresql/<version>/bin``) the tests that need the server skip, or fail under
CI (tests/needs.py).

A test that restarts the server, or changes its settings, takes ``restartable()``
instead: a throwaway cluster of its own (a :class:`Cluster`, whose ``restart()`` is
``pg_ctl restart -m immediate``), so that the session's server never restarts under
the other tests, and a user's server is never restarted at all.  Without the binaries
such a test skips, or fails under CI, whatever ``SQLQ_TEST_POSTGRES_URL`` says.

Not a test module; the ``postgres_url`` fixture of conftest.py wraps ``server()``.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy
from needs import need

URL_VARIABLE = "SQLQ_TEST_POSTGRES_URL"
BINARIES = ("initdb", "postgres")
DEBIAN_BINARIES = Path("/usr/lib/postgresql")
STARTUP_SECONDS = 60.0
TEST_SETTINGS = {"fsync": "off"}  # no flushes
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@contextmanager
def server(settings: Mapping[str, str] = TEST_SETTINGS) -> Iterator[str]:
    """The user's server (``SQLQ_TEST_POSTGRES_URL``), else a throwaway cluster started
    with ``settings`` (``postgres -c name=value``)."""
    url = os.environ.get(URL_VARIABLE)
    if url:
        yield psycopg_url(url)
        return
    binaries = binary_folder()
    need(binaries, f"needs PostgreSQL's initdb and postgres, or {URL_VARIABLE}")
    assert binaries is not None
    with throwaway_cluster(binaries, settings) as cluster:
        yield cluster.url


def psycopg_url(url: str) -> str:
    """``url`` for SQLAlchemy with psycopg 3: a plain ``postgresql://`` names no driver,
    and SQLAlchemy's default for it is psycopg2."""
    parsed = sqlalchemy.make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def binary_folder() -> Path | None:
    """The folder of initdb and postgres: the one on ``PATH``, else Debian's newest."""
    on_path = shutil.which(BINARIES[0])
    folders = [Path(on_path).resolve().parent] if on_path else []
    folders += sorted(
        (path.parent for path in DEBIAN_BINARIES.glob(f"*/bin/{BINARIES[0]}")),
        key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0,
        reverse=True,
    )
    return next(
        (folder for folder in folders if all((folder / name).is_file() for name in BINARIES)),
        None,
    )


@contextmanager
def throwaway_cluster(
    binaries: Path, settings: Mapping[str, str] = TEST_SETTINGS
) -> Iterator[Cluster]:
    """A new cluster, running until the block ends; then stopped and its folder removed."""
    base = Path(tempfile.mkdtemp(prefix="sqlq-pg-"))
    try:
        as_owner = server_owner()
        if as_owner:
            os.chown(base, as_owner["user"], as_owner["group"])
        data = str(base / "data")
        initdb = [str(binaries / "initdb"), "-D", data, "-U", "postgres", "--auth=trust"]
        subprocess.run(
            [*initdb, "--encoding=UTF8", "--locale=C", "--no-sync"],
            check=True,
            capture_output=True,
            **as_owner,
        )
        cluster = Cluster(binaries, base, as_owner, settings)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def restartable() -> Iterator[Cluster]:
    """A throwaway cluster of the caller's own, for a test that restarts it: never the
    session's server (other tests use it), nor the user's (SQLQ_TEST_POSTGRES_URL)."""
    binaries = binary_folder()
    need(
        binaries,
        "restarts its server, so needs PostgreSQL's initdb and postgres for a throwaway "
        f"cluster ({URL_VARIABLE}'s server is never restarted)",
    )
    assert binaries is not None
    with throwaway_cluster(binaries) as cluster:
        yield cluster


class Cluster:
    """A throwaway cluster in ``base``: its data folder, its socket and its log."""

    def __init__(
        self,
        binaries: Path,
        base: Path,
        as_owner: dict[str, Any],
        settings: Mapping[str, str] = TEST_SETTINGS,
    ) -> None:
        self.binaries = binaries
        self.settings = settings
        self.base = base
        self.as_owner = as_owner
        self.url = f"postgresql+psycopg://postgres@/postgres?host={base}"
        self.postmaster: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Run ``postgres`` on the data folder; return once it accepts connections."""
        command = [str(self.binaries / "postgres"), "-D", str(self.base / "data")]
        with (self.base / "server.log").open("ab") as log:
            self.postmaster = subprocess.Popen(
                [*command, "-k", str(self.base), *options(self.settings)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C of the test run is for pytest only
                preexec_fn=die_with_parent if sys.platform == "linux" else None,
                **self.as_owner,
            )
        wait_until_ready(self.postmaster, self.base)

    def restart(self) -> None:
        """What ``pg_ctl restart -m immediate`` does: SIGQUIT (every session ends at
        once, nothing is flushed or checkpointed), then start again on the same data
        folder and socket (crash recovery replays the WAL)."""
        assert self.postmaster is not None
        self.postmaster.send_signal(signal.SIGQUIT)
        self.postmaster.wait()
        self.start()

    def stop(self) -> None:
        """Fast shutdown (SIGINT); immediate (SIGQUIT) if that hangs."""
        if self.postmaster is None:
            return
        self.postmaster.send_signal(signal.SIGINT)
        try:
            self.postmaster.wait(timeout=STARTUP_SECONDS)
        except subprocess.TimeoutExpired:
            self.postmaster.send_signal(signal.SIGQUIT)
            self.postmaster.wait()


def options(settings: Mapping[str, str]) -> list[str]:
    """``postgres`` options: a unix socket only, then ``settings``."""
    pairs = {"listen_addresses": "", **settings}
    return [f"-c{name}={value}" for name, value in pairs.items()]


def server_owner() -> dict[str, Any]:
    """``subprocess`` options that run the server as an unprivileged user under root."""
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        user = pwd.getpwnam("nobody")
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def die_with_parent() -> None:
    """In the server's process, before exec: SIGQUIT when the test run dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGQUIT) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")


def wait_until_ready(postmaster: subprocess.Popen[bytes], base: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            psycopg.connect(host=str(base), user="postgres", dbname="postgres").close()
            return
        except psycopg.OperationalError:
            if postmaster.poll() is not None or time.monotonic() > deadline:
                log = (base / "server.log").read_text(errors="replace")
                raise RuntimeError(f"the test PostgreSQL server did not start:\n{log}") from None
            time.sleep(0.05)
