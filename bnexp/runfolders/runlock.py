"""The run-folder lock: one process trains in a run directory at a time.

:class:`RunLock` holds an exclusive ``flock`` on ``RUN_DIR/.lock`` while a process trains there and
removes the file when it ends (re-exported by :mod:`bnexp.runfolders.rundir`, which owns every other file of a
run folder).

Not the ``filelock`` package (installed with torch): its ``UnixFileLock`` is the same flock, but it keeps
the lock file on release by design (waiters share its inode) and writes nothing in it, while a finished
run folder here holds no ``.lock`` and a refusal names the holder's pid from it; both would need
filelock's private descriptor, for about the same code as this.
"""

from __future__ import annotations

import fcntl  # POSIX only, as the rest of bnexp
import os
from pathlib import Path


class RunLock:
    """An exclusive lock on a run directory (``.lock``, flock), so parallel jobs never share one.

    The operating system releases the flock when the process dies, even by SIGKILL (the
    file then stays until the next run of the folder takes and releases it).
    :meth:`release` removes the file, so a finished run folder holds no ``.lock``.

    Removing a lock file is safe against a concurrent :meth:`acquire` because of the
    protocol both follow: the holder unlinks ``.lock`` *before* it unlocks, and
    :meth:`acquire`, once it holds the flock, checks that ``.lock`` is still the file it
    locked (same device and inode); if the holder unlinked it in between, it drops that
    stale file and tries the new path again. So two processes never both hold the lock
    of one folder, one on the removed file and one on a new file.
    """

    # Attempts of acquire() when the file it opened keeps being removed under it.
    ATTEMPTS = 20

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self.fd: int | None = None

    def _same_file(self, fd: int) -> bool:
        """True if ``self.path`` is the file open as ``fd`` (not removed or replaced)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def acquire(self) -> bool:
        """True if this process now holds the lock, False if another process does.

        Raises:
            OSError: the lock file cannot be created (read-only folder, full disk).
        """

        for _ in range(self.ATTEMPTS):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                return False
            if not self._same_file(fd):  # the previous holder removed it as we opened it
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            self.fd = fd
            return True
        return False  # lost every race: some other process keeps taking the folder

    def holder(self) -> str:
        """The pid written by the holder, or '?'."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Remove ``.lock`` and release the lock (idempotent).

        The file is unlinked while the flock is still held (see the class docstring), and
        only if it is still this lock's file. A file that cannot be removed (read-only
        folder) is left; the lock is released all the same.
        """
        if self.fd is None:
            return

        try:
            if self._same_file(self.fd):
                os.unlink(self.path)
        except OSError:  # read-only or vanished folder: leave the file, still unlock
            pass
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
