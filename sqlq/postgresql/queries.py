"""The one home of sqlq's PostgreSQL statements: the named blocks of queries.sql."""

from __future__ import annotations

from ..sqlfile import load

Q = load("sqlq.postgresql")
