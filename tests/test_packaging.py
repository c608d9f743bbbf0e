"""What sqlq reads at run time ships inside the package: each backend's
``queries.sql``, and the numbered migrations, which live in the project's top-level
``migrations/`` (``migrations/sqlite/``, ``migrations/postgresql/``, beside ``sqlq/``)
and which the wheel carries inside the package as ``sqlq/migrations/`` (pyproject's
wheel ``sources``), so the wheel that ``pip install .`` builds carries them, and a
plain (non-editable) install in a fresh virtualenv creates a queue whose
``sqlq_migrations`` rows carry the same checksums as the source files.  An editable
install reads the checkout's ``migrations/`` itself, through the same function
(sqlq.migration_files.folder), and leaves no copy of them in site-packages.

The fresh virtualenv gets sqlq from the wheel only; its required dependencies
(SQLAlchemy, pysqlite3, ... and theirs, none of an extra's) come from this
interpreter's site-packages, linked into a folder that a ``.pth`` file names, so
the test needs no package index and the extras are missing as on a fresh machine.

The distribution is ``sqlq-queue`` (``sqlq`` on the public index is an unrelated
project): the installed distribution carries that name and every install line
that sqlq prints (a missing extra, ``--help``) or documents names it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = ROOT / "migrations"
#: SQLite's on-demand migrations (sqlq.sqlite.migrate.on_demand), in order.
ON_DEMAND = sorted((MIGRATIONS / "sqlite" / "on_demand").glob("[0-9]*_*.sql"))
#: PostgreSQL's migrations, in order.
POSTGRESQL = sorted((MIGRATIONS / "postgresql").glob("[0-9][0-9][0-9][0-9]_*.sql"))

pytestmark = pytest.mark.processes

#: Run by the fresh virtualenv's Python: where sqlq was imported from, a task
#: through one lease, the migrations recorded in the new database (after a
#: grouped add and a keyed add: the on-demand migrations of the group triggers and of
#: the key indexes too), and each backend's migration folder as sqlq finds it, with
#: every file in it and its checksum.
CHILD = """
import hashlib, json, sqlite3, sys
import sqlq
from sqlq import migration_files

def listing(folder):
    return {entry.name: hashlib.sha256(entry.read_bytes()).hexdigest()
            for entry in folder.iterdir() if entry.is_file()}

folders = {"sqlite": migration_files.folder("sqlite"),
           "on_demand": migration_files.folder("sqlite", "on_demand"),
           "postgresql": migration_files.folder("postgresql")}

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
           "migrations": recorded, "folders": {k: str(v) for k, v in folders.items()},
           "files": {k: listing(v) for k, v in folders.items()}}, sys.stdout)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(out)]
    subprocess.run(command, check=True)
    (built,) = out.glob("*.whl")
    return built


def _required(requirement: str) -> str | None:
    """The distribution a Requires-Dist line names, or None for one of an extra."""
    if "extra ==" in requirement:
        return None
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return match.group(0)


def _dependencies(wheel: Path) -> set[Path]:
    """The top-level modules of the wheel's required distributions, and of theirs, as
    installed for this interpreter (those not installed here, for another platform,
    are left out)."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = (n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    wanted = [_required(line) for line in re.findall(r"^Requires-Dist: (.+)$", text, re.M)]
    names = {name for name in wanted if name}
    found: set[Path] = set()
    seen: set[str] = set()
    while names:
        name = names.pop()
        if name.lower() in seen:
            continue
        seen.add(name.lower())
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        names.update(n for n in map(_required, dist.requires or []) if n)
        for file in dist.files or []:
            top = file.parts[0]
            if top not in ("..", "__pycache__") and not top.endswith((".dist-info", ".pth")):
                found.add(Path(dist.locate_file(top)))
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with sqlq from the wheel and its required dependencies
    only; its Python."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = ["install", "--no-deps", "--no-index", "-q", str(wheel)]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *install], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    linked = venv / "dependencies"
    linked.mkdir()
    for path in _dependencies(wheel):
        (linked / path.name).symlink_to(path)
    (site_packages / "dependencies.pth").write_text(f"{linked}\n")
    return python


def test_the_wheel_carries_every_backends_queries_and_migrations(
    wheel: Path, migration_files: list[Path]
) -> None:
    assert migration_files, "no migration files in migrations/sqlite/"
    assert ON_DEMAND
    assert POSTGRESQL
    # the top-level migrations/ goes into the package: sqlq/migrations/<backend>/...
    sources = {
        f"sqlq/{path.relative_to(ROOT).as_posix()}": path
        for path in [*migration_files, *ON_DEMAND, *POSTGRESQL]
    }
    for backend in ("sqlite", "postgresql"):
        sources[f"sqlq/{backend}/queries.sql"] = ROOT / "sqlq" / backend / "queries.sql"
    with zipfile.ZipFile(wheel) as archive:
        inside = {name for name in archive.namelist() if name.endswith(".sql")}
        assert inside == set(sources)
        for name, path in sources.items():
            assert archive.read(name) == path.read_bytes()


def test_a_fresh_virtualenv_with_the_wheel_creates_a_queue(
    venv: Path, tmp_path: Path, migration_files: list[Path]
) -> None:
    run = subprocess.run(
        [str(venv), "-c", CHILD], cwd=tmp_path, capture_output=True, text=True, env={}
    )
    assert run.returncode == 0, run.stderr
    facts = json.loads(run.stdout)
    (site_packages,) = venv.parent.parent.glob("lib/python*/site-packages")
    assert Path(facts["module"]).is_relative_to(site_packages)  # the wheel's, not the source's
    assert facts["folders"] == {
        "sqlite": str(site_packages / "sqlq" / "migrations" / "sqlite"),
        "on_demand": str(site_packages / "sqlq" / "migrations" / "sqlite" / "on_demand"),
        "postgresql": str(site_packages / "sqlq" / "migrations" / "postgresql"),
    }
    assert facts["files"] == _files()  # every migration file, as in the checkout
    assert (facts["task"], facts["completed"]) == ("t1", True)
    assert facts["migrations"] == [
        [number, hashlib.sha256(path.read_bytes()).hexdigest()]
        for number, path in [
            *((-n, path) for n, path in reversed(list(enumerate(ON_DEMAND, start=1)))),
            *enumerate(migration_files, start=1),
        ]
    ]


def _files() -> dict[str, dict[str, str]]:
    """The checkout's migration files of each folder, with their checksums."""

    def listing(paths: list[Path]) -> dict[str, str]:
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}

    folders = {"sqlite": "sqlite", "on_demand": "sqlite/on_demand", "postgresql": "postgresql"}
    return {
        name: listing([p for p in sorted((MIGRATIONS / folder).iterdir()) if p.is_file()])
        for name, folder in folders.items()
    }


def test_an_editable_install_reads_the_checkouts_migrations(tmp_path: Path) -> None:
    """pip install -e: sqlq and its migrations come from the checkout, through the
    same function; site-packages holds no copy of them that could go stale."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = ["install", "--no-deps", "-q", "-e", str(ROOT)]
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *install], check=True)
    (site_packages,) = venv.glob("lib/python*/site-packages")
    # the dependencies of this interpreter (the editable sqlq itself left out)
    paths = [p for p in sys.path if p and Path(p).is_dir() and Path(p) != ROOT]
    (site_packages / "dependencies.pth").write_text("".join(f"{p}\n" for p in paths))
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run([str(python), "-c", CHILD], cwd=work, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    facts = json.loads(run.stdout)
    assert facts["module"] == str(ROOT / "sqlq" / "__init__.py")
    assert facts["folders"] == {
        "sqlite": str(MIGRATIONS / "sqlite"),
        "on_demand": str(MIGRATIONS / "sqlite" / "on_demand"),
        "postgresql": str(MIGRATIONS / "postgresql"),
    }
    assert facts["files"] == _files()
    assert [v for v, _ in facts["migrations"] if v > 0][-1] == max(
        int(name[:4]) for name in facts["files"]["sqlite"]
    )
    assert not list(site_packages.rglob("*.sql"))  # no copy beside the editable install


#: Run by the fresh virtualenv's Python: the installed distribution of the module
#: sqlq, and what sqlq says when an extra is missing (none is installed there).
HINTS = """
import contextlib, importlib.metadata, json, subprocess, sys
import sqlq, sqlq.errors

(name,) = importlib.metadata.packages_distributions()["sqlq"]
metadata = importlib.metadata.metadata(name)
said = {}
def tell(what, call):
    try:
        call()
    except sqlq.errors.SqlqError as exc:
        said[what] = str(exc)
tell("postgresql", lambda: sqlq.Queue("postgresql://127.0.0.1:9/x", lease_seconds=30,
                                      max_attempts=3))
with sqlq.Queue("queue.db", lease_seconds=30, max_attempts=3) as queue:
    tell("metrics", lambda: sqlq.Worker(queue, print, metrics_port=0))
    tell("tracing", lambda: sqlq.Worker(queue, print, tracing=True))
for command in (["web", "queue.db"], ["web", "--help"], ["metrics", "--help"]):
    run = subprocess.run([sys.executable, "-m", "sqlq", *command], capture_output=True, text=True)
    said[" ".join(command)] = run.stdout + run.stderr
json.dump({"name": metadata["Name"], "extras": metadata.get_all("Provides-Extra"),
           "requires": metadata.get_all("Requires-Dist"), "said": said}, sys.stdout)
"""

#: An install line: ``pip install`` and what it installs, quoted or not.
INSTALL = re.compile(r"pip install (?:-[-\w]+ )*(['\"]?)([^\s'\"`]+)\1")


def test_the_installed_distribution_is_the_one_every_install_line_names(
    venv: Path, tmp_path: Path
) -> None:
    run = subprocess.run(
        [str(venv), "-c", HINTS], cwd=tmp_path, capture_output=True, text=True, env={}
    )
    assert run.returncode == 0, run.stderr
    facts = json.loads(run.stdout)
    assert facts["name"] == "sqlq-queue"  # "sqlq" on the public index is another project
    extras = set(facts["extras"])
    assert {"postgresql", "web", "otel"} <= extras
    # the extras that pull in others (test: postgresql, web, otel) name this
    # distribution, so that the build expands them, never the other "sqlq"
    requires = facts["requires"]
    assert not [r for r in requires if re.match(r"sqlq\b(?!-queue)", r)], requires
    assert "psycopg[binary]>=3.1; extra == 'test'" in requires, requires

    # every message that tells how to install an extra, as sqlq says it there
    said = facts["said"]
    wanted = {"postgresql": "postgresql", "metrics": "web", "tracing": "otel"}
    wanted |= {"web queue.db": "web", "web --help": "web", "metrics --help": "web"}
    assert said.keys() == wanted.keys(), said
    for what, extra in wanted.items():
        text = " ".join(said[what].split())  # --help wraps its lines
        assert [m.group(2) for m in INSTALL.finditer(text)] == [f"sqlq-queue[{extra}]"], text

    # and every install line written in the installed code, the README and the site's pages
    (site_packages,) = venv.parent.parent.glob("lib/python*/site-packages")
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for path in [*sorted((site_packages / "sqlq").rglob("*.py")), *pages]:
        for match in INSTALL.finditer(path.read_text()):
            target = match.group(2)
            if target.startswith("{"):  # sqlq.install's template: what it gives is above
                continue
            if target.startswith("."):  # from a clone: ".", ".[web]"
                found = re.fullmatch(r"\.(?:\[(\w+(?:,\w+)*)\])?", target)
            else:
                found = re.fullmatch(r"sqlq-queue(?:\[(\w+(?:,\w+)*)\])?", target)
            assert found, (path, target)
            named = set(found.group(1).split(",")) if found.group(1) else set()
            assert named <= extras, (path, target)
