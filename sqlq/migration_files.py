"""Each backend's numbered migrations: the files ``NNNN_name.sql`` of its package's
``migrations/`` folder, read as package resources (so from a wheel, a source tree or
an editable install alike), numbered 1, 2, 3, ... without gaps.  SQLite's on-demand
migrations (``migrations/on_demand/``, see sqlq.sqlite.migrate) are read the same way."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import TypeVar

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


def read_migrations(package: str, kind: type[M], folder: str = "migrations") -> tuple[M, ...]:
    """The migrations in ``folder`` of ``package``, in order, as ``kind``."""
    files = resources.files(package).joinpath(*folder.split("/"))
    found = []
    for entry in sorted(files.iterdir(), key=lambda item: item.name):
        match = _FILE.match(entry.name)
        if match:
            found.append(kind(int(match[1]), match[2], entry.read_text("utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, 3, ... without gaps: {versions}")
    return tuple(found)
