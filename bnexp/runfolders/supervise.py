"""Run the blocks of a sweep script (``bnexp train -m ...`` commands) one after another and stop them all
when told: the process side of :mod:`bnexp.designs.orchestrate`.

Each command starts in its own session (``start_new_session``), so its process group holds the command and
every process it starts (Hydra's joblib/loky workers included) and nothing else: a terminal's Ctrl-C then
reaches the supervisor only, and the supervisor sends the signal on once, to the whole group. A second
delivery would matter: a run that gets a second SIGINT/SIGTERM exits at once without its checkpoint
(:class:`bnexp.train.signal_guard.SignalGuard`).

On the first SIGINT or SIGTERM the supervisor forwards it to the running command's group (and SIGCONT, so
a stopped member takes it), waits up to ``grace_s`` seconds for the group to empty (each run saves its
checkpoint and records ``interrupted``), then sends SIGKILL to what is left, and starts no further command.
A second signal is forwarded as well (the runs then exit at once, as bnexp does on a second Ctrl-C).
POSIX only (process groups); the group's members are read from ``/proc`` where it exists.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

GRACE_S = 8.0  # seconds a signalled group gets to save its checkpoints before SIGKILL
POLL_S = 0.05
HEARTBEAT_S = 60.0  # seconds between the heartbeats of a running command (Supervisor.run)


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie.

    Reads ``/proc/PID/stat`` (state and process group) where ``/proc`` exists; elsewhere asks the kernel
    (``killpg(pgid, 0)``, which also counts zombies).
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "(comm)": state, ppid, pgrp, ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _proc_locked_inodes() -> set[int] | None:
    """Inode numbers of the files with a lock held now (``/proc/locks``), or None where it cannot be read."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    out = set()
    for line in text.splitlines():
        fields = line.split()
        dev = next((f for f in fields if f.count(":") == 2), None)  # MAJOR:MINOR:INODE
        if dev is not None:
            try:
                out.add(int(dev.rsplit(":", 1)[1]))
            except ValueError:
                pass
    return out


def runs_holding_locks(sweep_dir: Path) -> list[Path]:
    """The run folders under ``sweep_dir`` whose ``.lock`` a process holds (a run is training or saving in
    it: :class:`bnexp.runfolders.runlock.RunLock`). Read from ``/proc/locks`` without touching the locks; where that
    cannot be read, each lock is probed with a non-blocking flock."""
    import fcntl

    locks = list(Path(sweep_dir).glob("**/.lock")) if Path(sweep_dir).is_dir() else []
    held = _proc_locked_inodes()
    out = []
    for lock in locks:
        if held is not None:
            try:
                if lock.stat().st_ino in held:
                    out.append(lock.parent)
            except OSError:
                pass
            continue
        try:
            fd = os.open(lock, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            out.append(lock.parent)
        finally:
            os.close(fd)
    return out


class Supervisor:
    """Context manager: SIGINT/SIGTERM handlers of this process for the time of a script's blocks.

    Attributes:
        signum: the first signal received (None until one comes); the script then exits 128 + signum.
        grace_s: seconds between forwarding a signal and SIGKILL of what is left of the group.

    Only the main thread may enter it (Python delivers signals there).
    """

    def __init__(self, grace_s: float = GRACE_S):
        self.grace_s = grace_s
        self.signum: int | None = None
        self.killed = 0  # groups that needed SIGKILL
        self._child: subprocess.Popen | None = None
        self._forwarded: set[int] = set()  # pids of the children the first signal reached
        self._saved: dict = {}
        self._since = 0.0

    def __enter__(self) -> "Supervisor":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._saved[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> bool:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved = {}
        return False

    @property
    def exit_code(self) -> int | None:
        """128 + the first signal's number (130 for SIGINT, 143 for SIGTERM), or None without one."""
        return None if self.signum is None else 128 + self.signum

    def _send(self, child: subprocess.Popen, signum: int) -> None:
        for sig in (signum, signal.SIGCONT):
            try:
                os.killpg(child.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _on_signal(self, signum, frame) -> None:
        first = self.signum is None
        if first:
            self.signum, self._since = int(signum), time.monotonic()
        child = self._child
        if child is not None and (not first or child.pid not in self._forwarded):
            self._forwarded.add(child.pid)
            self._send(child, int(signum))

    def run(self, command: list[str], env: dict | None = None, watch: Path | None = None,
            heartbeat: Callable[[], object] | None = None, every: float = HEARTBEAT_S) -> int:
        """Run ``command`` in a new session and wait for it (stdin from /dev/null; stdout and stderr are
        this process's). While it runs, ``heartbeat`` (if given) is called about every ``every`` seconds, until a
        signal comes (a study's measured wall time is written as it goes, so a SIGKILL loses at most that much).

        After a signal, the group is done when it is empty; or, with ``watch`` (the sweep folder), as soon
        as ``command`` itself has ended and no run folder under ``watch`` is locked any more (every run has
        saved): what is left then (the launcher's idle worker processes and resource trackers, which outlive
        their parent) gets SIGKILL at once instead of after the grace time.

        Returns:
            its exit code (a negative number: killed by that signal); :attr:`exit_code` instead when a
            signal came (before it started, the command is not started at all).

        Raises:
            OSError: the command cannot be started (e.g. not found).
        """
        if self.signum is not None:
            return self.exit_code
        sys.stdout.flush()
        sys.stderr.flush()
        child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        self._child = child
        try:
            if self.signum is not None and child.pid not in self._forwarded:  # the signal came while it started
                self._forwarded.add(child.pid)
                self._send(child, self.signum)
            rc = self._wait(child, watch, heartbeat, every)
        finally:
            self._child = None
        return self.exit_code if self.signum is not None else rc

    def _wait(self, child: subprocess.Popen, watch: Path | None, heartbeat: Callable[[], object] | None = None,
              every: float = HEARTBEAT_S) -> int:
        """Wait for ``child``, calling ``heartbeat`` about every ``every`` seconds; after a signal, also for the
        rest of its group (see :meth:`run`)."""
        beat = time.monotonic()
        while True:
            try:
                rc = child.wait(timeout=POLL_S * 4)
            except subprocess.TimeoutExpired:
                rc = None
            if self.signum is None:
                if rc is not None:
                    return rc
                if heartbeat is not None and time.monotonic() - beat >= every:
                    heartbeat()
                    beat = time.monotonic()
                continue
            if rc is not None and not group_alive(child.pid):
                return rc
            if rc is not None and watch is not None and not runs_holding_locks(watch):
                break  # every run has saved: the rest are idle helpers
            if time.monotonic() - self._since > self.grace_s:
                self.killed += 1
                break
            if rc is not None:
                time.sleep(POLL_S)
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rc = child.wait()
        deadline = time.monotonic() + 2.0
        while group_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return rc
