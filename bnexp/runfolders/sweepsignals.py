"""Ctrl-C of a sweep whose launcher runs the jobs in worker processes (``hydra/launcher=joblib``, and
``hydra/launcher=stacked`` with ``n_jobs`` > 1): the Hydra callback :class:`SweepSignals`, the stacked
launcher's :func:`workers_stop_together`, and the wait of each interrupted job for its siblings
(:func:`wait_for_sweep_siblings`).

Standard library and Hydra only (no torch): Hydra instantiates its callbacks before the config is
validated, so that a typo in a ``bnexp train`` command is refused before torch is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path

SWEEP_ENV = "BNEXP_SWEEP_WORKERS_STOP_TOGETHER"


def _lock_held(lock: Path) -> bool:
    """True if another open file holds an flock on ``lock`` (a bnexp process runs in that folder)."""
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases a lock this probe took
    return False


def _saving(run_dir: Path) -> bool:
    import json

    try:
        status = json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return False
    return status == "running" and _lock_held(run_dir / ".lock")


def wait_for_sweep_siblings(run_dir: Path, timeout_s: float = 120.0, poll_s: float = 0.1) -> None:
    """In a sweep worker after Ctrl-C: wait until the other runs of the sweep have saved their checkpoints.

    Under :class:`SweepSignals` (``$BNEXP_SWEEP_WORKERS_STOP_TOGETHER`` names the sweep folder)
    every worker got the terminal's SIGINT and stops its run at the end of a step. The first job
    to end makes joblib's parent kill every worker, so each interrupted run first waits, after
    saving its own checkpoint, until no other run folder of the sweep is still ``running`` under
    a live lock (at most ``timeout_s`` seconds). Outside such a sweep: returns at once.

    Args:
        run_dir: this run's folder (inside the sweep folder).
        timeout_s: the longest wait, seconds.
        poll_s: seconds between looks.
    """
    sweep = os.environ.get(SWEEP_ENV)
    if not sweep:
        return
    run_dir = Path(run_dir).resolve()
    others = [p.parent for p in Path(sweep).glob("**/.lock") if p.parent.resolve() != run_dir]
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        busy = [d for d in others if _saving(d)]
        if not busy:
            return
        time.sleep(poll_s)
    logging.getLogger("bnexp").warning("stopped waiting for %d run(s) of the sweep to save their checkpoints",
                                       len(busy))


@contextlib.contextmanager
def workers_stop_together(sweep_dir: Path):
    """Context, in a launcher's main thread, around the part of a sweep that runs in worker processes (the
    stacked launcher's loky workers, ``hydra/launcher=stacked`` with ``n_jobs`` > 1): what :class:`SweepSignals`
    does for ``hydra/launcher=joblib``. The launching process ignores SIGINT (the workers it starts inherit
    that), and ``$BNEXP_SWEEP_WORKERS_STOP_TOGETHER`` names the sweep, so that one Ctrl-C to the terminal's
    process group stops each worker's runs at the end of a step with their checkpoints, each worker waiting
    for its siblings to save (:func:`wait_for_sweep_siblings`) before joblib ends the others. Elsewhere than
    in the main thread: changes nothing. Both are restored on exit.

    Args:
        sweep_dir: the sweep folder (``hydra.sweep.dir``).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    env_before = os.environ.get(SWEEP_ENV)
    os.environ[SWEEP_ENV] = str(Path(sweep_dir).resolve())
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved)
        if env_before is None:
            os.environ.pop(SWEEP_ENV, None)
        else:
            os.environ[SWEEP_ENV] = env_before


try:
    from hydra.experimental.callback import Callback as _Callback
except ImportError:  # pragma: no cover - hydra is a dependency
    _Callback = object


class SweepSignals(_Callback):
    """Hydra callback: Ctrl-C of a sweep run by worker processes (``hydra/launcher=joblib``)
    stops every running job at the end of its step, each with its checkpoint.

    Why it is needed: the terminal sends SIGINT to the launching process and to its joblib
    workers alike. Each worker's run stops at the end of its step and saves; but the launcher's
    own KeyboardInterrupt (or the first job to end) makes joblib kill every worker at once
    (SIGKILL), so the others were left at status ``running`` without the checkpoint their log
    announced. With this callback the launching process ignores SIGINT during the sweep (and its
    workers, started after, inherit that while they are between runs); a run in a worker takes
    the signal through its :class:`SignalGuard`, saves, and waits for its siblings to save
    (:func:`wait_for_sweep_siblings`) before its job ends and joblib stops the sweep. A second
    Ctrl-C still ends a run at once. Other launchers are left alone.

    Registered in the Hydra config as ``hydra.callbacks.sweep_signals._target_=bnexp.runfolders.sweepsignals.SweepSignals``.
    """

    def __init__(self) -> None:
        self._saved = None

    def on_multirun_start(self, config, **kwargs) -> None:
        """In the launching process, before the workers start: ignore SIGINT (joblib launcher only)."""
        launcher = str(config.hydra.launcher.get("_target_", ""))
        if "joblib" not in launcher.lower() or threading.current_thread() is not threading.main_thread():
            return
        os.environ[SWEEP_ENV] = str(Path(str(config.hydra.sweep.dir)).resolve())
        self._saved = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_multirun_end(self, config, **kwargs) -> None:
        """Restore the launching process's SIGINT handler."""
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)
            self._saved = None
        os.environ.pop(SWEEP_ENV, None)
