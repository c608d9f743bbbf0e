"""Each backend's numbered migrations: the files ``NNNN_name.sql`` of its folder of the
project's top-level ``migrations/`` (``migrations/sqlite/``, ``migrations/postgresql/``,
beside ``sqlq/``, ``tests/`` and ``bench/``), numbered 1, 2, 3, ... without gaps.
SQLite's on-demand migrations (``migrations/sqlite/on_demand/``, see
sqlq.sqlite.migrate) are read the same way.

The wheel carries that folder inside the package, as ``sqlq/migrations/`` (pyproject's
``[tool.hatch.build.targets.wheel.force-include]``); a source tree or an editable
install has it beside the package.  :func:`folder` is the one place that knows both:
the package resource when there is one, else the checkout's folder.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TypeVar

from .errors import SchemaError

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """What sqlq_migrations records: a changed file is not the migration applied."""
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


M = TypeVar("M", bound=Migration)


def folder(backend: str, *under: str) -> Traversable:
    """The folder of ``backend``'s migrations (``under`` it: a subfolder, such as
    SQLite's ``on_demand``): inside the installed package (a wheel's
    ``sqlq/migrations/``), else the top-level ``migrations/`` of the source tree that
    the package is imported from (a checkout or an editable install)."""
    installed = resources.files("sqlq").joinpath("migrations", backend, *under)
    if installed.is_dir():
        return installed
    checkout = Path(__file__).resolve().parent.parent / "migrations" / backend
    found = checkout.joinpath(*under)
    if not found.is_dir():
        raise SchemaError(
            f"sqlq's {backend} migrations are missing: neither {installed} nor {found} "
            "is a folder (reinstall sqlq)"
        )
    return found


def read_migrations(backend: str, kind: type[M], *under: str) -> tuple[M, ...]:
    """The migrations of ``backend`` (``under``: a subfolder of its folder), in order,
    as ``kind``."""
    found = []
    for entry in sorted(folder(backend, *under).iterdir(), key=lambda item: item.name):
        match = _FILE.match(entry.name)
        if match:
            found.append(kind(int(match[1]), match[2], entry.read_text("utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, 3, ... without gaps: {versions}")
    return tuple(found)
