"""Which database a ``postgresql://`` URL names, for psycopg 3, and how messages
show it (never with its password).
"""

from __future__ import annotations

import sqlalchemy as sa

from ..errors import InvalidConfig


def engine_url(url: str) -> sa.engine.URL:
    """The SQLAlchemy URL for psycopg 3 of a ``postgresql://`` (or
    ``postgresql+psycopg://``) URL; other drivers are refused."""
    try:
        parsed = sa.engine.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise InvalidConfig(f"not a database URL: {url!r}") from exc
    if parsed.get_backend_name() != "postgresql" or parsed.get_driver_name() not in (
        "psycopg",
        "psycopg2",  # what SQLAlchemy calls a URL without a driver
    ):
        raise InvalidConfig(
            f"{shown(parsed)}: sqlq talks to PostgreSQL "
            "through psycopg 3; use a postgresql:// or postgresql+psycopg:// URL"
        )
    if "+" in parsed.drivername and parsed.get_driver_name() != "psycopg":
        raise InvalidConfig(f"{parsed.drivername}: sqlq uses psycopg 3 (postgresql+psycopg://)")
    return parsed.set(drivername="postgresql+psycopg")


def shown(url: sa.engine.URL) -> str:
    """The URL as messages show it: without its password, the user's or a ``password``
    query parameter (which libpq takes too)."""
    if "password" in url.query:
        url = url.update_query_dict({"password": "***"})
    return url.render_as_string(hide_password=True)
