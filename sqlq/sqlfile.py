"""Named SQL blocks: each backend keeps every statement it runs in one file,
``queries.sql`` beside its code, loaded with ``load(package)``.

A block starts with ``-- name: <name>``; the comment lines right after it say what
it does; it ends where the next block starts.  A block whose name starts with an
underscore is a fragment, not a statement: other blocks include its text where
they say ``{{_name}}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_NAME = re.compile(r"^-- name: (\w+)\s*$")
_INCLUDE = re.compile(r"\{\{(_\w+)\}\}")


@dataclass(frozen=True)
class Query:
    name: str
    doc: str
    sql: str


def parse(text: str) -> dict[str, Query]:
    """Split ``-- name: x`` blocks into queries; comment lines right after the name are its doc."""
    queries: dict[str, Query] = {}
    name: str | None = None
    doc: list[str] = []
    body: list[str] = []

    def finish() -> None:
        if name is None:
            return
        sql = "\n".join(body).strip()
        if not sql or not doc:
            raise ValueError(f"query {name!r} needs a description and a statement")
        queries[name] = Query(name, " ".join(doc), sql)

    for line in text.splitlines():
        match = _NAME.match(line)
        if match:
            finish()
            name, doc, body = match.group(1), [], []
            if name in queries:
                raise ValueError(f"query {name!r} is defined twice")
        elif name is not None:
            if line.startswith("--") and not body:
                doc.append(line.lstrip("- ").strip())
            elif line.strip() or body:
                body.append(line)
    finish()
    return {
        name: _included(query, queries)
        for name, query in queries.items()
        if not name.startswith("_")  # fragments are only included
    }


def _included(query: Query, queries: dict[str, Query]) -> Query:
    """The query with the fragments it includes in its text (one level deep)."""

    def fragment(match: re.Match[str]) -> str:
        found = queries.get(match.group(1))
        if found is None:
            raise ValueError(f"query {query.name!r} includes an unknown {match.group(1)!r}")
        return found.sql

    return Query(query.name, query.doc, _INCLUDE.sub(fragment, query.sql))


class Queries:
    """Attribute access to the SQL text of each named query: ``Q.claim_front``."""

    def __init__(self, queries: dict[str, Query]) -> None:
        self.all = queries
        # Plain instance attributes: a query looked up on the hot path is a dict hit,
        # never the AttributeError that a miss raises before __getattr__ runs.
        for name, query in queries.items():
            if name != "all":
                setattr(self, name, query.sql)

    def __getattr__(self, name: str) -> str:
        try:
            return self.all[name].sql
        except KeyError:
            raise AttributeError(f"no query named {name!r} in queries.sql") from None


def load(package: str) -> Queries:
    """The queries of ``package``'s queries.sql."""
    return Queries(parse(resources.files(package).joinpath("queries.sql").read_text("utf-8")))
