"""Loop-mounted ext4 images and fsfreeze, inside a private mount namespace.

A helper for fault tests that need a real block device under the database
without touching the machine's own disks.  Nothing here is a test; import it
with ``sys.path`` as the other helpers in tests/ are (tests/ is not a package).

Why a private mount namespace, and not mounts in the test process?

* Nothing is left behind if the test process dies.  The namespace is held by a
  small process (``unshare -m --propagation private cat``) that reads a pipe
  from the test process: when the test process exits for any reason, SIGKILL
  included, the pipe closes, the holder exits, and once the last process in the
  namespace is gone the kernel unmounts every mount in it; the loop devices,
  set up by ``mount -o loop`` with autoclear, then detach themselves.  Mounts
  made in the test process would stay on the machine's mount table instead.
  (Processes started in the namespace keep it, and its mounts, alive until
  they exit: make them exit when the test process goes, as crash_worker.py
  does by watching its parent.)
* The machine's mount table never changes, so nothing else (another test run,
  a desktop automounter) sees or reacts to the images.
* Processes run with :meth:`MountNamespace.popen` (``nsenter``) see the mounts;
  the test process reaches them through ``/proc/<holder>/root`` (see
  :meth:`MountNamespace.path`), so it can read, write and copy files there with
  plain Python -- but not open a SQLite database there (SQLite resolves that
  magic link to ``/`` and escapes the namespace; see ``path``).

One hazard is a frozen filesystem whose namespace dies: the kernel's unmount
then waits for the thaw that can no longer be asked for, and whatever tears the
namespace down hangs in D state (seen on 6.18).  :meth:`MountNamespace.frozen`
therefore starts a watchdog in the namespace before every freeze, in its own
session so that it outlives the test process, which thaws the filesystem after
a deadline; while it lives it also keeps the namespace alive, so the namespace
is torn down only after the thaw (checked: a process SIGKILLed while frozen
leaves no mount and no loop device once the deadline has passed).  Normally the
test thaws first and kills the watchdog.

A loop device is global (not per namespace): :func:`attached` tells which of the
loop devices a namespace used are still attached, so a test can check that it
left none behind.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOLS = ("unshare", "nsenter", "mount", "umount", "mkfs.ext4", "fsfreeze", "losetup")


@dataclass(frozen=True)
class Loop:
    """A loop device as it was while mounted: its name and its backing file's identity."""

    device: str
    back_dev: str  # "major:minor" of the filesystem holding the backing file
    back_ino: int


class MountError(RuntimeError):
    """A mount, unmount, freeze or thaw failed (stderr of the tool in the message)."""


def _check(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if proc.returncode != 0:
        raise MountError(f"{what}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


class MountNamespace:
    """A private mount namespace held open by a helper process; a context manager.

    Mount points and images are named by their ordinary absolute paths, which
    mean the same in the namespace (it starts as a copy of the machine's mounts).
    """

    def __init__(self) -> None:
        self._holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "cat"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.pid = self._holder.pid
        self._mounts: list[Path] = []  # mounted by us and not yet unmounted, oldest first
        self.loops: list[Loop] = []  # every loop device our mounts used
        # unshare execs cat once the namespace exists; wait until it has.
        mine = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while True:
            if self._holder.poll() is not None:
                err = self._holder.stderr.read().decode() if self._holder.stderr else ""
                raise MountError(f"unshare failed: {err.strip()}")
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{self.pid}/ns/mnt") != mine:
                    break
            if time.monotonic() > deadline:
                self._stop_holder()
                raise MountError("unshare did not create a mount namespace")
            time.sleep(0.005)

    # --- running things in the namespace -------------------------------------------

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the namespace (nsenter; the working directory becomes /)."""
        return ["nsenter", "--target", str(self.pid), "--mount", "--", *argv]

    def run(self, argv: Sequence[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in the namespace and wait; raise MountError if it fails."""
        proc = subprocess.run(
            self.command(argv), capture_output=True, text=True, timeout=timeout, check=False
        )
        return _check(proc, " ".join(argv))

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the namespace (Popen keyword arguments pass through)."""
        return subprocess.Popen(self.command(argv), **kwargs)

    def path(self, path: str | os.PathLike[str]) -> Path:
        """The test process's way to ``path`` as the namespace sees it.

        Fine for Python's own file calls; NOT for SQLite, which resolves symbolic
        links in a database's path: ``/proc/<pid>/root`` reads as ``/``, so SQLite
        would silently open (or create) the file of that name outside the
        namespace.  Open databases in the namespace only from processes started
        with :meth:`popen`, or copy their files out first.
        """
        return Path(f"/proc/{self.pid}/root") / Path(path).relative_to("/")

    # --- mounts ----------------------------------------------------------------------

    def mount_loop(self, image: Path, mountpoint: Path, options: Sequence[str] = ()) -> Loop:
        """Mount the filesystem image ``image`` (a file) on ``mountpoint`` through a
        new loop device that detaches itself once unmounted."""
        opts = ",".join(("loop", *options))
        self.run(["mount", "-t", "ext4", "-o", opts, str(image), str(mountpoint)])
        self._mounts.append(mountpoint)
        device = self._source(mountpoint)
        st = os.stat(self.path(image))
        loop = Loop(device, f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}", st.st_ino)
        self.loops.append(loop)
        return loop

    def _source(self, mountpoint: Path) -> str:
        for line in Path(f"/proc/{self.pid}/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            if left.split()[4] == str(mountpoint):
                return right.split()[1]
        raise MountError(f"{mountpoint} is not mounted in namespace {self.pid}")

    def umount(self, mountpoint: Path) -> None:
        self.run(["umount", str(mountpoint)])
        self._mounts.remove(mountpoint)

    @contextlib.contextmanager
    def frozen(self, mountpoint: Path, watchdog: float = 20.0) -> Iterator[None]:
        """``fsfreeze -f`` the filesystem on ``mountpoint`` for the block; thawed on
        the way out, whatever happens (see the module docstring for the watchdog)."""
        guard = self.popen(
            ["sh", "-c", f'sleep {watchdog}; exec fsfreeze -u "$0"', str(mountpoint)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        frozen = False
        try:
            self.run(["fsfreeze", "--freeze", str(mountpoint)])
            frozen = True
            try:
                yield
            finally:
                if guard.poll() is not None:
                    raise MountError(f"{mountpoint} stayed frozen past the {watchdog} s watchdog")
                self.run(["fsfreeze", "--unfreeze", str(mountpoint)])
                frozen = False
        finally:
            # Still frozen only if the thaw failed: then the watchdog stays, to thaw
            # at its deadline.  Otherwise it goes, with the sleep its shell started.
            if not frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(guard.pid, signal.SIGKILL)
                guard.wait()

    # --- the end -----------------------------------------------------------------------

    def close(self) -> None:
        """Unmount what is still mounted (newest first), then let the namespace go."""
        errors: list[str] = []
        for mountpoint in reversed(list(self._mounts)):
            try:
                self.umount(mountpoint)
            except (MountError, subprocess.TimeoutExpired) as exc:
                errors.append(str(exc))
        self._stop_holder()
        if errors:
            raise MountError("; ".join(errors))

    def _stop_holder(self) -> None:
        if self._holder.stdin is not None:
            with contextlib.suppress(OSError):
                self._holder.stdin.close()
        try:
            self._holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._holder.send_signal(signal.SIGKILL)
            self._holder.wait()
        if self._holder.stderr is not None:
            self._holder.stderr.close()

    def __enter__(self) -> MountNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- images --------------------------------------------------------------------------


def make_ext4(image: Path, size_mib: int, ns: MountNamespace | None = None) -> None:
    """A new sparse file of ``size_mib`` MiB holding an empty ext4 filesystem (4 KiB
    blocks, inode tables and journal written now rather than lazily after mount).
    With ``ns``, ``image`` is a path in that namespace."""
    where = ns.path(image) if ns else image
    with open(where, "wb") as f:
        f.truncate(size_mib << 20)
    argv = ["mkfs.ext4", "-q", "-F", "-b", "4096"]
    argv += ["-E", "lazy_itable_init=0,lazy_journal_init=0", str(image)]
    if ns:
        ns.run(argv)
    else:
        _check(subprocess.run(argv, capture_output=True, text=True, check=False), "mkfs.ext4")


def copy_sparse(src: Path, dst: Path, chunk: int = 1 << 20) -> int:
    """Copy ``src`` to ``dst`` keeping its holes; returns the bytes of data copied."""
    copied = 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            end = os.lseek(fin.fileno(), start, os.SEEK_HOLE)
            fin.seek(start)
            fout.seek(start)
            while start < end:
                block = fin.read(min(chunk, end - start))
                if not block:
                    break
                fout.write(block)
                start += len(block)
                copied += len(block)
            offset = end
        fout.truncate(size)
    return copied


def attached(loops: Sequence[Loop], wait: float = 5.0) -> list[str]:
    """Those of ``loops`` still attached to the same backing file after ``wait``
    seconds at most (autoclear may run a moment after the unmount returns)."""
    deadline = time.monotonic() + wait
    while True:
        out = subprocess.run(
            ["losetup", "--list", "--json", "--output", "NAME,BACK-MAJ:MIN,BACK-INO"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        devices = json.loads(out)["loopdevices"] if out.strip() else []
        now = {(d["name"], d["back-maj:min"], int(d["back-ino"] or 0)) for d in devices}
        left = [lp.device for lp in loops if (lp.device, lp.back_dev, lp.back_ino) in now]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


@functools.cache
def unavailable() -> str | None:
    """Why loop mounts and fsfreeze cannot be used here, or None if they can.

    Tries the real thing once per process: a 16 MiB ext4 image mounted in a
    private namespace, frozen and thawed.
    """
    if os.geteuid() != 0:
        return "needs root (loop mounts, mkfs.ext4 and fsfreeze)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"missing tools: {', '.join(missing)}"
    with tempfile.TemporaryDirectory(prefix="sqlq-mount-probe-") as tmp:
        image, mnt = Path(tmp) / "probe.img", Path(tmp) / "mnt"
        mnt.mkdir()
        try:
            make_ext4(image, 16)
            with MountNamespace() as ns:
                ns.mount_loop(image, mnt)
                (ns.path(mnt) / "probe").write_text("probe")
                with ns.frozen(mnt, watchdog=10):
                    pass
        except (MountError, OSError, subprocess.SubprocessError) as exc:
            return f"cannot loop-mount and freeze an ext4 image here: {exc}"
    return None
