"""The name sqlq is installed by, and the install line that messages give.

The distribution (what ``pip install`` is given) is ``sqlq-queue``: the name ``sqlq``
on the public package index belongs to an unrelated project. The import name and
the ``sqlq`` command stay ``sqlq``.
"""

from __future__ import annotations

#: The distribution name: pyproject.toml's ``[project] name``.
DISTRIBUTION = "sqlq-queue"


def pip_install(extra: str) -> str:
    """The command that installs sqlq with ``extra`` from the package index."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"
