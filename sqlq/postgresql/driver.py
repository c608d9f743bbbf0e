"""psycopg 3, the driver of the PostgreSQL backend, and its errors as sqlq's.

Errors are told apart by SQLSTATE class (https://www.postgresql.org/docs/current/
errcodes-appendix.html), the cause kept by the caller (``raise ... from exc``).
"""

from __future__ import annotations

from .. import errors
from ..install import pip_install

try:
    import psycopg
except ImportError as exc:  # pragma: no cover - the extra is part of the test setup
    raise errors.InvalidConfig(
        f"PostgreSQL databases need psycopg 3: {pip_install('postgresql')}"
    ) from exc

__all__ = ["Error", "psycopg", "translate"]

Error = psycopg.Error

#: Whole SQLSTATE classes -> sqlq errors.
_BY_CLASS: dict[str, type[errors.StorageError]] = {
    "08": errors.Unavailable,  # connection exception
    "57": errors.Unavailable,  # operator intervention: admin shutdown, crash (not 57014)
    "53": errors.StorageFull,  # insufficient resources: disk full, out of memory
    "58": errors.StorageIOError,  # system error: I/O error
    "28": errors.CannotOpen,  # invalid authorization specification
    "3D": errors.CannotOpen,  # invalid catalog name: no such database
    "40": errors.Busy,  # serialization failure, deadlock detected
    "55": errors.Busy,  # lock not available (lock_timeout)
    "XX": errors.Corrupt,  # internal error: data corrupted, index corrupted
}

#: Single SQLSTATEs that their class does not describe.
_BY_CODE: dict[str, type[errors.StorageError]] = {
    "57014": errors.Busy,  # query canceled: statement_timeout, or interrupt_waits
    "25006": errors.ReadOnly,  # read-only SQL transaction (a standby)
    "25P03": errors.Unavailable,  # idle-in-transaction timeout: the session was ended
    "XX000": errors.StorageError,  # internal error, not about the data
}


def translate(exc: BaseException, name: str, *, connecting: bool = False) -> errors.StorageError:
    """The sqlq error for a psycopg exception (``connecting``: raised while opening a
    connection, which a failure did not lose but never had)."""
    code = getattr(exc, "sqlstate", None) or ""
    kind = _BY_CODE.get(code) or _BY_CLASS.get(code[:2])
    if kind is None:
        broken = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        kind = errors.Unavailable if broken and not code else errors.StorageError
    text = str(exc).strip() or type(exc).__name__
    if kind is errors.Busy:
        why = (
            "the call conflicted with another transaction and was undone"  # 40: deadlock, ...
            if code.startswith("40")
            else "the database did not answer in time"
        )
        return errors.Busy(f"{name}: {why} ({code}: {text})")
    if kind is errors.Unavailable:
        what = "could not connect to" if connecting else "lost the connection to"
        return errors.Unavailable(f"{name}: {what} the server ({text})")
    return kind(f"{name}: {text} ({code or type(exc).__name__})")
