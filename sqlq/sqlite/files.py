"""The files of a SQLite queue, their permissions, and why one cannot be written.

A queue is the database file plus files beside it: ``-wal`` and ``-shm``
(SQLite's write-ahead log and its index), ``.sqlq-gate`` (the fair write turn,
see gate.py) and ``.migrate-lock`` (held while the database is created or
migrated).

Permissions: sqlq creates a new database with ``file_mode`` (0o600 by default:
only its owner can read the tasks).  SQLite gives ``-wal`` and ``-shm`` the
database file's permissions (and, when root creates them, its owner and
group), and sqlq does the same for its own two files, so sharing a queue
between users means creating it with, say, ``file_mode=0o660`` in a folder
those users can write, owned by a group they share (or ``chmod``-ing an
existing database and its files alike).
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress

from ..errors import CannotOpen, ReadOnly

#: The files SQLite and sqlq create beside a database, by suffix.
SIDE_FILES = ("-wal", "-shm", ".sqlq-gate", ".migrate-lock")

DEFAULT_FILE_MODE = 0o600


def check_mode(mode: object) -> int:
    from ..errors import InvalidConfig

    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o777:
        raise InvalidConfig(f"file_mode must be a permission mode such as 0o600, not {mode!r}")
    if not mode & stat.S_IRUSR or not mode & stat.S_IWUSR:
        raise InvalidConfig(f"file_mode {mode:#o} must let the owner read and write")
    return mode & 0o666  # sqlq's files are never executable


def create_database_file(path: str, mode: int) -> None:
    """Create an empty database file with exactly ``mode`` (if it does not exist)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        return  # a database, or an empty file in which ensure_schema creates one
    except OSError as exc:
        raise CannotOpen(
            f"{path}: cannot create the database file: {_reason(os.path.dirname(path), exc)}"
        ) from exc
    try:
        os.fchmod(fd, mode)  # the umask does not narrow what the caller asked for
    finally:
        os.close(fd)


def file_mode(path: str, missing: int = DEFAULT_FILE_MODE) -> int:
    """The permission bits sqlq gives the files beside the database ``path``;
    ``missing`` while there is no database file yet."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode) & 0o666 | stat.S_IRUSR | stat.S_IWUSR
    except OSError:
        return missing


def open_side_file(path: str, mode: int) -> int:
    """Open one of sqlq's own files beside a database, creating it if missing with
    exactly ``mode`` and, in a process running as root, the owner and group of the
    database file, as SQLite does for -wal and -shm: a command that root runs on a
    service user's queue must not leave a file that user cannot open."""
    flags = os.O_RDWR | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return os.open(path, flags)
    try:
        os.fchmod(fd, mode)
        if os.geteuid() == 0:
            _give_to_database_owner(fd, path)
    except OSError:
        os.close(fd)
        raise
    return fd


def _give_to_database_owner(fd: int, path: str) -> None:
    """Chown a new side file to the database's owner and group.  The database is
    the side file's name without its suffix (how SQLite finds it, too); a database
    not created yet will be this process's, like the side file already is."""
    for suffix in SIDE_FILES:
        if path.endswith(suffix):
            with suppress(FileNotFoundError):
                owner = os.stat(path.removesuffix(suffix))
                os.fchown(fd, owner.st_uid, owner.st_gid)
            return


def check_writable(path: str) -> None:
    """Before a queue opens ``path`` for writing: can this process write the file and
    create or write the files beside it?  Raises ReadOnly / CannotOpen naming the
    file and the reason, instead of SQLite's "unable to open database file" later."""
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        raise CannotOpen(f"{path}: the folder {folder} does not exist")
    problem = diagnose(path)
    if problem is None:
        return
    where, reason = problem
    if where == path:
        raise ReadOnly(f"{path}: the database file cannot be written: {reason}")
    if where == folder:
        raise CannotOpen(
            f"{path}: cannot create files in the folder {folder} ({reason}); sqlq and "
            f"SQLite keep {', '.join(os.path.basename(path) + s for s in SIDE_FILES[:3])} "
            "beside the database"
        )
    raise ReadOnly(f"{path}: {where} cannot be written: {reason}")


def diagnose(path: str) -> tuple[str, str] | None:
    """The first of the database's files (or its folder) that this process cannot
    write, and why; None if all can be.

    Uses ``access(2)`` only, never open-and-close: closing any descriptor of the
    database or its ``-shm`` file drops every POSIX lock this process's SQLite
    connections hold on it.
    """
    folder = os.path.dirname(path)
    # .migrate-lock is left out: it is only taken to migrate (ensure_schema says so then).
    for name in (path, *(path + suffix for suffix in SIDE_FILES[:3])):
        if os.path.exists(name):
            if not _access(name, os.R_OK | os.W_OK):
                return name, _reason(folder)
        elif not _access(folder, os.W_OK | os.X_OK):  # creating needs no read permission
            return folder, _reason(folder)
    return None


def _access(name: str, mode: int) -> bool:
    effective = os.access in os.supports_effective_ids
    return os.access(name, mode, effective_ids=effective)


def describe_problem(path: str) -> str:
    """A sentence for an error message about ``path``'s files, or ''."""
    problem = diagnose(path)
    if problem is None:
        return ""
    where, reason = problem
    return f"; {where} cannot be written: {reason}"


def _reason(folder: str, exc: OSError | None = None) -> str:
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    if exc is not None and exc.errno not in (errno.EACCES, errno.EPERM):
        return exc.strerror or str(exc)
    if hasattr(os, "geteuid"):
        if os.geteuid() == 0:  # root passes permission checks: immutable (chattr +i)?
            return "not writable even by root (an immutable file or a mount refusing writes)"
        return f"permission denied for user id {os.geteuid()}"
    return "permission denied"


def wal_bytes(path: str) -> int | None:
    """The size of the database's write-ahead log file (0 if there is none, None if
    it cannot be looked at)."""
    try:
        return os.stat(path + "-wal").st_size
    except FileNotFoundError:
        return 0
    except OSError:
        return None
