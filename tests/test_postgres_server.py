"""The PostgreSQL server of the tests (tests/postgres.py): it answers, it is gone after the
session (even one killed with SIGKILL), SQLQ_TEST_POSTGRES_URL replaces it, and without
PostgreSQL's binaries its tests skip, or fail under CI.

The lifecycle tests run a tiny pytest session of their own, with conftest.py's
``postgres_url`` fixture, in a subprocess, and look for the server's processes afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import databases
import postgres
import pytest
import sqlalchemy
from needs import need

TESTS = Path(__file__).resolve().parent
DEADLINE_SECONDS = 60.0

PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider")
INNER_TEST = """
import os
import signal
from pathlib import Path

import sqlalchemy


def test_inner(postgres_url):
    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as connection:
        listening = connection.exec_driver_sql("SHOW listen_addresses").scalar()
    engine.dispose()
    Path(os.environ["REPORT"]).write_text(postgres_url + "\\n" + listening)
    if os.environ.get("BLOCK"):
        signal.pause()  # until the outer test kills this session
"""


def inner_session(tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    """A pytest session in a subprocess running INNER_TEST with conftest.py's fixtures."""
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    environment = {**os.environ, "PYTHONPATH": str(TESTS), "REPORT": str(tmp_path / "report")}
    environment.pop(postgres.URL_VARIABLE, None)
    return subprocess.Popen(
        [*PYTEST, "test_inner.py"],
        cwd=tmp_path,
        env={**environment, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def report(tmp_path: Path) -> list[str]:
    """The inner test's URL and the server's listen_addresses."""
    return (tmp_path / "report").read_text().split("\n")


def cluster_folder(url: str) -> Path:
    """The throwaway cluster's folder: its socket directory, the URL's host."""
    host = sqlalchemy.make_url(url).query["host"]
    assert isinstance(host, str)
    return Path(host)


def running_in(folder: Path) -> list[int]:
    """The live processes whose working directory is inside ``folder``: PostgreSQL's
    processes all work in their data directory (a zombie has no working directory)."""
    found = []
    for process in Path("/proc").glob("[0-9]*"):
        try:
            cwd = os.readlink(process / "cwd")
        except OSError:  # gone, a zombie, or not ours to see
            continue
        if cwd.startswith(f"{folder}/"):
            found.append(int(process.name))
    return found


@pytest.fixture
def throwaway(tmp_path: Path) -> None:
    """What the lifecycle tests need: PostgreSQL's binaries, /proc to look for processes."""
    need(postgres.binary_folder(), "needs PostgreSQL's initdb and postgres")
    need(Path("/proc/self/cwd").exists(), "needs /proc")


def test_server_answers_through_sqlalchemy_and_psycopg(postgres_url: str) -> None:
    engine = sqlalchemy.create_engine(postgres_url)
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT 1").scalar() == 1
            assert connection.dialect.driver == "psycopg"
            assert connection.dialect.server_version_info >= (13,)
    finally:
        engine.dispose()


@pytest.mark.usefixtures("throwaway")
def test_cluster_is_gone_after_the_session(tmp_path: Path) -> None:
    session = inner_session(tmp_path)
    output, _ = session.communicate(timeout=DEADLINE_SECONDS)
    assert session.returncode == 0, output
    url, listening = report(tmp_path)
    assert listening == ""  # a unix socket only
    folder = cluster_folder(url)
    assert not folder.exists()
    assert running_in(folder) == []


@pytest.mark.usefixtures("throwaway")
def test_cluster_is_gone_after_a_killed_session(tmp_path: Path) -> None:
    session = inner_session(tmp_path, BLOCK="1")
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not (tmp_path / "report").exists():
        assert session.poll() is None, session.communicate()[0]
        assert time.monotonic() < deadline, "the inner session did not start its server"
        time.sleep(0.05)
    folder = cluster_folder(report(tmp_path)[0])
    try:
        assert running_in(folder) != []
        session.kill()
        session.communicate()
        while running_in(folder):
            assert time.monotonic() < deadline, f"left running: {running_in(folder)}"
            time.sleep(0.05)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # left behind by the killed session


def test_url_variable_names_the_server(monkeypatch: pytest.MonkeyPatch, postgres_url: str) -> None:
    """SQLQ_TEST_POSTGRES_URL, even without a driver, is the server the fixture yields."""
    plain = sqlalchemy.make_url(postgres_url).set(drivername="postgresql")
    monkeypatch.setenv(postgres.URL_VARIABLE, plain.render_as_string(hide_password=False))
    with postgres.server() as url:
        assert sqlalchemy.make_url(url) == sqlalchemy.make_url(postgres_url)
        assert start_time(url) == start_time(postgres_url)


def start_time(url: str) -> str:
    """When the server at ``url`` started: two URLs with the same one name the same server."""
    return str(column(url, "SELECT pg_postmaster_start_time()::text")[0])


def test_binaries_where_debian_puts_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Off PATH, the newest version folder that has both initdb and postgres."""
    both = postgres.BINARIES
    for version, names in [("9", both), ("15", both), ("16", ("initdb",)), ("tmp", both)]:
        (tmp_path / version / "bin").mkdir(parents=True)
        for name in names:
            (tmp_path / version / "bin" / name).touch()
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(postgres, "DEBIAN_BINARIES", tmp_path)
    assert postgres.binary_folder() == tmp_path / "15" / "bin"


@pytest.mark.parametrize("ci", ["", "true"])
def test_no_server_skips_locally_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str
) -> None:
    monkeypatch.delenv(postgres.URL_VARIABLE, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(postgres, "DEBIAN_BINARIES", tmp_path)
    monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="initdb"), postgres.server():
        pass


def test_fresh_schemas_are_isolated_and_dropped_after(postgres_url: str) -> None:
    """Two URLs of databases.fresh_schema on one server: a table written through one is
    not seen through the other, and both schemas are gone after."""
    with (
        databases.fresh_schema(postgres_url) as first,
        databases.fresh_schema(postgres_url) as second,
    ):
        schemas = [column(url, "SELECT current_schema()")[0] for url in (first, second)]
        assert schemas[0] != schemas[1]
        for url, value in [(first, "one"), (second, "two")]:
            engine = sqlalchemy.create_engine(url)
            with engine.begin() as connection:
                connection.exec_driver_sql("CREATE TABLE notes (note TEXT)")
                connection.exec_driver_sql(f"INSERT INTO notes VALUES ('{value}')")
            engine.dispose()
        assert [column(url, "SELECT note FROM notes") for url in (first, second)] == [
            ["one"],
            ["two"],
        ]
    find = "SELECT nspname FROM pg_namespace WHERE nspname = ANY(%(names)s)"
    assert column(postgres_url, find, names=schemas) == []


def column(url: str, sql: str, **parameters: object) -> list[Any]:
    """The first column of what ``sql`` answers, read through a connection of ``url``."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.exec_driver_sql(sql, parameters).scalars())
    finally:
        engine.dispose()
