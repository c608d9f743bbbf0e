"""need(): what a test needs of the machine (root, gcc, mounts, the sqlite3 shell ...).

Locally a test whose need is not met is skipped, saying why.  Under CI (the
``CI`` environment variable set, as .ci/run is run) it fails instead: CI runs
as root and installs every tool the tests use, so there a missing one is an
error, and must not hide a durability claim behind a skip.

Not a test module; imported as ``from needs import need`` (tests/ is on
``sys.path``, as for the other helpers here).
"""

from __future__ import annotations

import os

import pytest


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def need(condition: object, reason: str) -> None:
    """Go on if ``condition`` is true; else skip the test, or fail it under CI."""
    if condition:
        return
    if under_ci():
        pytest.fail(f"{reason} (CI must provide it: see .ci/run)", pytrace=False)
    pytest.skip(reason)
