"""The interpreter tests/test_django.py runs its Django project with: the suite's own
where it runs Django 6.1 (Python 3.12 or newer), else a virtual environment of its own,
made once per run with the newest Django from the package index and this sqlq
(editable, so a mutant of tests/mutation_check.py is what it runs).

Making that venv takes a minute or more of waiting on pip and little CPU, so it starts
in the background as soon as a run has collected a test that needs it (conftest.py's
``pytest_collection_finish`` calls ``start``), and those tests come last among the
heavy ones (heavy.heavy_first): by the time one asks for it (``interpreter``), it is
usually built.  Whoever gets the lock first builds it: the background build, or the
test itself if it came first or the build failed (then the test shows pip's error).
Every run builds its own, in its run's temporary folder, so CI on a new machine
installs Django for real.

Not a test module; imported as ``import django_venv`` (tests/ is on ``sys.path``), and
run as ``python tests/django_venv.py FOLDER BASE`` for the background build.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parent.parent

#: The fixture of tests/test_django.py that needs the venv: a collected test that
#: uses it starts the build (conftest.py) and runs after the other heavy tests.
FIXTURE = "django_python"


def runs_django(python: str) -> bool:
    probe = "import sys, django; sys.exit(django.VERSION < (6, 1))"
    try:
        return (
            subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0
        )
    except OSError:
        return False


def new_python() -> str | None:
    """An interpreter of Python 3.12 or newer on this machine (pyenv's included)."""
    found = [shutil.which(f"python3.{minor}") for minor in range(20, 11, -1)]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")))
    check = "import sys; sys.exit(sys.version_info < (3, 12))"
    for python in filter(None, found):
        try:
            if subprocess.run([python, "-c", check], capture_output=True).returncode == 0:
                return python
        except OSError:
            continue
    return None


def shared_folder(basetemp: Path) -> Path:
    """The folder every xdist worker of the run shares: their temporary folders'
    parent (a run without workers: its own temporary folder)."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def _folder(shared: Path) -> Path:
    return shared / "django-venv"


def build(shared: Path, base: str) -> str:
    """The venv's interpreter, once the venv is built (by whoever holds the lock)."""
    folder = _folder(shared)
    python = str(folder / "bin" / "python")
    with FileLock(shared / "django-venv.lock"):
        if not (folder / "built").exists():
            subprocess.run([base, "-m", "venv", "--clear", str(folder)], check=True)
            subprocess.run(
                [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e",
                 f"{ROOT}[django,postgresql]"],
                check=True,
                timeout=900,
            )  # fmt: skip
            (folder / "built").touch()
    return python


def start(shared: Path) -> None:
    """Start building the venv in a process of its own, once per run (the first
    caller of the run's xdist workers does), unless the suite's interpreter runs
    Django or no newer Python is here (then the test says so itself)."""
    try:
        os.close(os.open(shared / "django-venv.started", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    if runs_django(sys.executable) or (base := new_python()) is None:
        return
    with (shared / "django-venv.log").open("ab") as log:
        _started.append(
            subprocess.Popen(
                [sys.executable, __file__, str(shared), base],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        )


#: The background build (kept: a Popen dropped while its process runs warns).
_started: list[subprocess.Popen[bytes]] = []


if __name__ == "__main__":
    build(Path(sys.argv[1]), sys.argv[2])
