"""Which file a SQLite location names: a plain path or a ``sqlite:///path`` URL,
resolved as SQLite uses it (the first step of opening a database, and what
sqlq.backends asks for a location's file).
"""

from __future__ import annotations

import os

from ..errors import InvalidConfig, NoDatabase

#: What an empty database argument is told (NoDatabase): every path and URL sqlq is
#: given that names no server comes here (a plain path, even empty, is SQLite's).
NO_DATABASE = (
    "no database given: pass a SQLite file path or a postgresql:// URL (is $DATABASE_URL set?)"
)


def database_path(path_or_url: str | os.PathLike[str]) -> str:
    """The file path of a plain path or a ``sqlite:///path`` URL.

    A URL names the file and nothing else: query options (``?mode=ro``, ...)
    are refused, since the queue always opens its file read-write.
    """
    if isinstance(path_or_url, os.PathLike):
        path_or_url = os.fspath(path_or_url)
    if not isinstance(path_or_url, str):
        raise InvalidConfig(f"expected a path or sqlite:/// URL, not {type(path_or_url).__name__}")
    if "://" in path_or_url:
        import sqlalchemy as sa  # a URL: SQLAlchemy reads it

        try:
            url = sa.engine.make_url(path_or_url)
        except sa.exc.ArgumentError as exc:
            raise InvalidConfig(f"not a database URL: {path_or_url!r}") from exc
        if url.get_backend_name() != "sqlite":
            raise InvalidConfig(
                f"{url.get_backend_name()!r} URLs are not supported yet; use a sqlite:/// URL"
            )
        if url.query or url.host or url.port or url.username or url.password:
            raise InvalidConfig(
                f"{path_or_url!r}: a sqlite URL may only name the file (sqlite:///path); "
                "sqlq takes no options from it and always opens the file read-write"
            )
        path = url.database or ""
    else:
        path = path_or_url
    if not path.strip():  # sqlite:/// (an empty path) too
        raise NoDatabase(NO_DATABASE)
    if "\x00" in path:
        raise InvalidConfig(f"a database path must not contain NUL ('\\x00'): {path!r}")
    if path in ("", ":memory:") or path.startswith("file:"):
        raise InvalidConfig(
            "sqlq needs a database file that several processes can share; "
            "for a queue in memory use sqlq.WorkQueue"
        )
    # The resolved path, as SQLite itself uses it: processes naming one database through
    # different symlinks must share one gate file.
    return os.path.realpath(path)
