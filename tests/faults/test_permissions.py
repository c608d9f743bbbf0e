"""Permissions: who can read a queue's files, and what a caller sees when it cannot write.

* Files sqlq creates are not world-readable: a new database gets ``file_mode``
  (0o600 by default, whatever the umask), and ``-wal``, ``-shm``,
  ``.sqlq-gate`` and ``.migrate-lock`` get the database file's mode.
* A database, a side file or a folder that cannot be written gives a typed
  error (``ReadOnly`` / ``CannotOpen``) naming the path and the reason, before
  SQLite's vaguer "unable to open database file", and changes nothing.
* Sharing between users: ``file_mode=0o660`` in a group-writable folder.

Root ignores plain file modes, so the cases that need a refusal run the queue
as another user (``setpriv``) or use an immutable file (``chattr +i``); they
skip, saying why, where that is not possible.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from needs import need

import sqlq
from sqlq.errors import InvalidConfig, ReadOnly
from sqlq.sqlite import migrate

pytestmark = [pytest.mark.faults]

NOBODY = 65534
SIDE = ("", "-wal", "-shm", ".sqlq-gate", ".migrate-lock")


def modes(db: Path) -> dict[str, int]:
    return {
        suffix or "db": stat.S_IMODE(os.stat(f"{db}{suffix}").st_mode)
        for suffix in SIDE
        if os.path.exists(f"{db}{suffix}")
    }


def use(db: Path, **options: object) -> None:
    """Open a queue, write through it (creating -wal, -shm and the gate), keep it open
    while the caller looks at the files."""
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3, **options)  # type: ignore[arg-type]
    q.add("t")
    lease = q.claim()
    assert lease is not None and q.complete("t", token=lease.token)
    q.close()


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_new_files_are_readable_by_their_owner_only(tmp_path: Path, umask_022: None) -> None:
    db = tmp_path / "q.db"
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3)
    q.add("t")
    found = modes(db)  # while the queue is open: -wal and -shm exist
    q.close()
    assert set(found) == {"db", "-wal", "-shm", ".sqlq-gate", ".migrate-lock"}, found
    assert all(mode == 0o600 for mode in found.values()), {k: oct(v) for k, v in found.items()}


def test_a_permissive_umask_does_not_widen_them(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        db = tmp_path / "q.db"
        q = sqlq.Queue(db, lease_seconds=30, max_attempts=3)
        q.add("t")
        found = modes(db)
        q.close()
    finally:
        os.umask(old)
    assert all(mode == 0o600 for mode in found.values()), {k: oct(v) for k, v in found.items()}


def test_file_mode_shares_a_queue_with_a_group(tmp_path: Path, umask_022: None) -> None:
    db = tmp_path / "shared.db"
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3, file_mode=0o660)
    q.add("t")
    found = modes(db)
    q.close()
    assert all(mode == 0o660 for mode in found.values()), {k: oct(v) for k, v in found.items()}


def test_side_files_follow_an_existing_databases_mode(tmp_path: Path, umask_022: None) -> None:
    db = tmp_path / "q.db"
    use(db)
    for suffix in SIDE[1:]:
        with_suffix = Path(f"{db}{suffix}")
        if with_suffix.exists():
            with_suffix.unlink()
    os.chmod(db, 0o640)
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3)  # file_mode is for new files only
    q.add("u")
    found = modes(db)
    q.close()
    assert found["db"] == 0o640
    assert found[".sqlq-gate"] == 0o640 and found["-wal"] == 0o640, found


@pytest.mark.parametrize("bad", [0o200, 0o400, -1, 0o1777, "600", True, 1.5])
def test_a_bad_file_mode_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidConfig, match="file_mode"):
        sqlq.Queue(tmp_path / "q.db", lease_seconds=30, max_attempts=3, file_mode=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "q.db").exists()


# --- refusals, as another user ---------------------------------------------------------

CHILD = """
import json, sys
import sqlq
from sqlq.errors import SqlqError
db, action = sys.argv[1], sys.argv[2]
try:
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3)
    if action == "add":
        q.add("from-" + str(__import__("os").getuid()))
    elif action == "work":
        q.add("w")
        lease = q.claim()
        q.complete(lease.task_id, token=lease.token)
    q.close()
    print(json.dumps({"ok": True}))
except SqlqError as exc:
    print(json.dumps({"ok": False, "type": type(exc).__name__, "message": str(exc),
                      "cause": type(exc.__cause__).__name__}))
"""


def as_user(uid: int, gid: int, db: Path, action: str = "add") -> dict[str, object]:
    """Run CHILD as ``uid:gid`` (no supplementary groups) and return what it printed."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={gid}",
            "--clear-groups",
            "--",
            sys.executable,
            "-c",
            CHILD,
            str(db),
            action,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.fixture
def world(tmp_path: Path) -> Iterator[Path]:
    """A folder another user can reach (pytest's own tmp folders are 0700)."""
    need(
        os.geteuid() == 0 and shutil.which("setpriv"),
        "needs root and setpriv to run the queue as another user",
    )
    folder = Path(tempfile.mkdtemp(prefix="sqlq-perm-", dir="/tmp"))
    os.chmod(folder, 0o755)
    probe = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "--",
            sys.executable,
            "-c",
            "import sqlq",
        ],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    if probe.returncode != 0:
        shutil.rmtree(folder)
        need(False, f"user {NOBODY} cannot run this Python and sqlq: {probe.stderr[-200:]!r}")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_folder_that_cannot_be_written_names_it(world: Path) -> None:
    result = as_user(NOBODY, NOBODY, world / "new.db")
    assert result["ok"] is False and result["type"] == "CannotOpen", result
    message = str(result["message"])
    assert str(world / "new.db") in message and "permission denied" in message, message
    assert not (world / "new.db").exists()


def test_a_database_whose_wal_cannot_be_created_names_the_folder(world: Path) -> None:
    db = world / "q.db"
    use(db)  # as root; closing it removed -wal and -shm
    os.chmod(db, 0o666)  # the file itself is writable by everyone
    assert not Path(f"{db}-wal").exists()
    before = digest(db)
    result = as_user(NOBODY, NOBODY, db)
    assert result["ok"] is False and result["type"] == "CannotOpen", result
    message = str(result["message"])
    assert str(world) in message and "-wal" in message and "permission denied" in message
    assert digest(db) == before


def test_a_database_file_that_cannot_be_written_is_read_only(world: Path) -> None:
    db = world / "q.db"
    use(db)
    os.chmod(world, 0o777)  # the folder is writable, the file is not (0600, root's)
    os.chmod(db, 0o644)
    before = digest(db)
    result = as_user(NOBODY, NOBODY, db)
    assert result["ok"] is False and result["type"] == "ReadOnly", result
    message = str(result["message"])
    assert str(db) in message and f"user id {NOBODY}" in message, message
    assert digest(db) == before


def test_a_group_shares_a_queue_created_with_file_mode_0660(world: Path) -> None:
    db = world / "shared.db"
    os.chown(world, 0, NOBODY)
    os.chmod(world, 0o2770)  # group-writable, new files inherit the group
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3, file_mode=0o660)
    q.add("from-root")
    q.close()
    result = as_user(4242, NOBODY, db, "work")  # another user, in the group
    assert result == {"ok": True}
    q = sqlq.Queue(db, lease_seconds=30, max_attempts=3)
    assert q.status("from-root") == "COMPLETED" and q.status("w") == "AVAILABLE"
    q.close()
    assert as_user(4343, 4343, db)["type"] in ("CannotOpen", "ReadOnly")  # not in the group


def owners(db: Path) -> dict[str, tuple[int, int]]:
    return {
        suffix: (os.stat(f"{db}{suffix}").st_uid, os.stat(f"{db}{suffix}").st_gid)
        for suffix in SIDE
        if os.path.exists(f"{db}{suffix}")
    }


def test_root_using_a_service_users_queue_leaves_it_usable(world: Path) -> None:
    """As SQLite does for -wal and -shm, the files sqlq creates beside a database get
    the database file's owner and group when root creates them."""
    os.chown(world, NOBODY, NOBODY)  # the service user's folder
    db = world / "q.db"
    assert as_user(NOBODY, NOBODY, db, "open") == {"ok": True}  # creates the queue
    assert not Path(f"{db}.sqlq-gate").exists()  # nothing written yet
    added = subprocess.run(
        [sys.executable, "-m", "sqlq", "add", str(db), "from-root-cli"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        timeout=60,
    )
    assert added.returncode == 0, added.stderr
    with sqlq.Queue(db, lease_seconds=30, max_attempts=3) as q:
        q.add("from-root")
        found = owners(db)  # while open: -wal and -shm exist too
    assert set(found) == set(SIDE), found
    assert set(found.values()) == {(NOBODY, NOBODY)}, found
    assert as_user(NOBODY, NOBODY, db, "work") == {"ok": True}


def test_root_migrating_a_service_users_queue_leaves_it_usable(
    world: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The migration lock file that root creates to migrate is the owner's too."""
    db = world / "q.db"
    with monkeypatch.context() as m:  # a database of the schema before the latest
        older = migrate.migrations()[:-1]
        m.setattr(migrate, "migrations", lambda: older)
        sqlq.Queue(db, lease_seconds=30, max_attempts=3).close()  # no tasks: they need 0005
    for suffix in SIDE[1:]:
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    os.chown(db, NOBODY, NOBODY)
    os.chown(world, NOBODY, NOBODY)
    with sqlq.Queue(db, lease_seconds=30, max_attempts=3) as q:  # as root: migrates
        q.add("from-root")
    assert owners(db) == {"": (NOBODY, NOBODY), ".sqlq-gate": (NOBODY, NOBODY),
                          ".migrate-lock": (NOBODY, NOBODY)}  # fmt: skip
    assert as_user(NOBODY, NOBODY, db, "work") == {"ok": True}


# --- immutable files: refused even for root ---------------------------------------------


def test_an_immutable_database_is_refused_with_its_path(tmp_path: Path) -> None:
    need(os.geteuid() == 0 and shutil.which("chattr"), "chattr +i needs root and chattr")
    db = tmp_path / "q.db"
    use(db)
    done = subprocess.run(["chattr", "+i", str(db)], capture_output=True)
    need(done.returncode == 0, f"this file system ({tmp_path}) does not support chattr +i")
    try:
        before = digest(db)
        with pytest.raises(ReadOnly) as caught:
            sqlq.Queue(db, lease_seconds=30, max_attempts=3)
        assert str(db) in str(caught.value) and "immutable" in str(caught.value)
        assert digest(db) == before
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)


def test_a_read_only_mount_is_refused_with_its_reason(tmp_path: Path) -> None:
    """A read-only bind mount, in a private mount namespace (undone when it exits)."""
    need(
        os.geteuid() == 0 and shutil.which("unshare"),
        "a read-only bind mount needs root and unshare",
    )
    db = tmp_path / "q.db"
    use(db)
    script = (
        "import sys, sqlq\n"
        "from sqlq.errors import SqlqError\n"
        "try:\n"
        "    sqlq.Queue(sys.argv[1], lease_seconds=30, max_attempts=3)\n"
        "    print('opened')\n"
        "except SqlqError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    shell = (
        'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && '
        f'{sys.executable} -c "$2" "$1/q.db"'
    )
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            shell,
            "sh",
            str(tmp_path),
            script,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        timeout=60,
    )
    need(
        done.returncode == 0 or "mount" not in done.stderr,
        f"cannot make a read-only bind mount here: {done.stderr.strip()}",
    )
    assert done.stdout.startswith(("ReadOnly", "CannotOpen")), (done.stdout, done.stderr)
    assert "read-only file system" in done.stdout and str(db) in done.stdout


def test_a_folder_others_may_write_but_not_list_is_enough(world: Path) -> None:
    """Creating files takes write and search permission on the folder, not read."""
    os.chmod(world, 0o733)
    result = as_user(NOBODY, NOBODY, world / "drop.db", "work")
    assert result == {"ok": True}, result
    assert stat.S_IMODE(os.stat(world / "drop.db").st_mode) == 0o600
