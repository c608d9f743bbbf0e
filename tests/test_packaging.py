"""What sqlq reads at run time ships inside the package: the SQLite backend's
``queries.sql`` and its numbered migrations (``sqlq/sqlite/migrations/``) are
package resources, so the wheel that ``pip install .`` builds carries them, and
a plain (non-editable) install in a fresh virtualenv creates a queue whose
``sqlq_migrations`` rows carry the same checksums as the source files.

The fresh virtualenv gets sqlq from the wheel only; its dependencies
(SQLAlchemy, pysqlite3) come from this interpreter's site-packages through a
``.pth`` file, so the test needs no package index.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import sqlalchemy

ROOT = Path(__file__).resolve().parent.parent
#: SQLite's on-demand migrations (sqlq.sqlite.migrate.on_demand), in order.
ON_DEMAND = sorted((ROOT / "sqlq" / "sqlite" / "migrations" / "on_demand").glob("[0-9]*_*.sql"))

pytestmark = pytest.mark.processes

#: Run by the fresh virtualenv's Python: where sqlq was imported from, a task
#: through one lease, and the migrations recorded in the new database (after a
#: grouped add and a keyed add: the on-demand migrations of the group triggers and of
#: the key indexes too).
CHILD = """
import json, sqlite3, sys
import sqlq

with sqlq.Queue("queue.db", lease_seconds=30, max_attempts=3) as q:
    q.add("t1", payload={"n": 1})
    lease = q.claim()
    completed = q.complete(lease.task_id, token=lease.token)
    q.add("g1", group="tenant")
    q.add("k1", key="nightly")
with sqlite3.connect("queue.db") as conn:
    recorded = conn.execute("SELECT version, checksum FROM sqlq_migrations ORDER BY version")
    recorded = recorded.fetchall()
json.dump({"module": sqlq.__file__, "task": lease.task_id, "completed": completed,
           "migrations": recorded}, sys.stdout)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)]
    subprocess.run(command, check=True)
    (built,) = out.glob("sqlq-*.whl")
    return built


def test_the_wheel_carries_every_backends_queries_and_migrations(
    wheel: Path, migration_files: list[Path]
) -> None:
    assert migration_files, "no migration files in sqlq/sqlite/migrations/"
    postgresql = ROOT / "sqlq" / "postgresql"
    assert sorted(postgresql.glob("migrations/[0-9][0-9][0-9][0-9]_*.sql"))
    sources = [
        ROOT / "sqlq" / "sqlite" / "queries.sql",
        *migration_files,
        *ON_DEMAND,
        postgresql / "queries.sql",
        *sorted(postgresql.glob("migrations/[0-9][0-9][0-9][0-9]_*.sql")),
    ]
    with zipfile.ZipFile(wheel) as archive:
        inside = {name for name in archive.namelist() if name.endswith(".sql")}
        assert inside == {path.relative_to(ROOT).as_posix() for path in sources}
        for path in sources:
            assert archive.read(path.relative_to(ROOT).as_posix()) == path.read_bytes()


def test_a_fresh_virtualenv_with_the_wheel_creates_a_queue(
    wheel: Path, tmp_path: Path, migration_files: list[Path]
) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = ["install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *install], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    dependencies = {Path(sqlalchemy.__file__).parent.parent}
    try:
        import pysqlite3  # type: ignore[import-not-found,unused-ignore]

        dependencies.add(Path(pysqlite3.__file__).parent.parent)
    except ImportError:  # where it has no wheel, sqlq uses the standard library's sqlite3
        pass
    (site_packages / "dependencies.pth").write_text("".join(f"{d}\n" for d in dependencies))

    run = subprocess.run(
        [str(python), "-c", CHILD], cwd=tmp_path, capture_output=True, text=True, env={}
    )
    assert run.returncode == 0, run.stderr
    facts = json.loads(run.stdout)
    assert Path(facts["module"]).is_relative_to(site_packages)  # the wheel's, not the source's
    assert (facts["task"], facts["completed"]) == ("t1", True)
    assert facts["migrations"] == [
        [number, hashlib.sha256(path.read_bytes()).hexdigest()]
        for number, path in [
            *((-n, path) for n, path in reversed(list(enumerate(ON_DEMAND, start=1)))),
            *enumerate(migration_files, start=1),
        ]
    ]
