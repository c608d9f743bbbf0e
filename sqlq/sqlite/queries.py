"""The one home of sqlq's SQLite statements: the named blocks of queries.sql."""

from __future__ import annotations

from ..sqlfile import Query, load, parse

__all__ = ["Q", "Query", "parse"]

Q = load("sqlq.sqlite")
