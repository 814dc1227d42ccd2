"""Run the blocks of a sweep script (``bnexp train -m ...`` commands) one after another and stop them all
when told: the process side of :mod:`bnexp.designs.orchestrate`.

Each command starts in its own session (``start_new_session``), so its process group holds the command and
every process it starts (Hydra's joblib/loky workers included) and nothing else: a terminal's Ctrl-C then
reaches the supervisor only, and the supervisor sends the signal on once, to the whole group. A second
delivery would matter: a run that gets a second SIGINT/SIGTERM exits at once without its checkpoint
(:class:`bnexp.train.runtime.SignalGuard`).

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

GRACE_S = 8.0  # seconds a signalled group gets to save its checkpoints before SIGKILL
POLL_S = 0.05


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

    def run(self, command: list[str], env: dict | None = None) -> int:
        """Run ``command`` in a new session and wait for it (stdin from /dev/null; stdout and stderr are
        this process's).

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
            rc = self._wait(child)
        finally:
            self._child = None
        return self.exit_code if self.signum is not None else rc

    def _wait(self, child: subprocess.Popen) -> int:
        """Wait for ``child``; after a signal, also for the rest of its group, SIGKILL after the grace time."""
        while True:
            try:
                rc = child.wait(timeout=POLL_S * 4)
            except subprocess.TimeoutExpired:
                rc = None
            if self.signum is None:
                if rc is not None:
                    return rc
                continue
            if rc is not None and not group_alive(child.pid):
                return rc
            if time.monotonic() - self._since > self.grace_s:
                break
            if rc is not None:
                time.sleep(POLL_S)
        self.killed += 1
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        rc = child.wait()
        deadline = time.monotonic() + 2.0
        while group_alive(child.pid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return rc
