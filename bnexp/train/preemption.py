"""The cluster's "time is nearly up" signal: checkpoint at the current step, then let submitit requeue.

hydra-submitit-launcher runs each job under submitit, which installs its own handler for the
preemption/timeout signal (SIGUSR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` names another; sent
``signal_delay_s`` seconds before the time limit, by SLURM or by the ``submitit_local``
controller). That handler re-pickles the job and requeues it (``scontrol requeue`` on SLURM,
a special exit code locally), but offers the application no hook to save its state first.

:class:`PreemptionGuard` chains in front of it: the signal only sets a flag; the training loop
checks :attr:`PreemptionGuard.requested` between steps, writes a checkpoint of that step
(atomically), and then calls :meth:`PreemptionGuard.hand_over`, which runs the previous
handler (submitit's: requeue and exit). The requeued job runs the same command with the same
overrides in the same run directory and resumes from that checkpoint. Outside submitit
(no previous Python handler) :meth:`hand_over` raises :class:`Preempted` so the run ends as
``interrupted`` with its checkpoint, as for SIGTERM.
"""

from __future__ import annotations

import os
import signal
import threading

from bnexp.errors import Interrupted


class Preempted(Interrupted):
    """The preemption signal arrived and the job was not requeued (no submitit handler, or
    submitit's ``max_num_timeout`` used up): the run ends ``interrupted`` with its checkpoint."""


def preemption_signal() -> signal.Signals:
    """The signal submitit uses: ``SIG`` + ``$SUBMITIT_PREEMPT_SIGNAL`` (default SIGUSR2).

    Raises:
        ValueError: the environment names a signal this system does not have.
    """
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    sig = getattr(signal, name, None)
    if not isinstance(sig, signal.Signals):
        raise ValueError(f"SUBMITIT_PREEMPT_SIGNAL names an unknown signal {name}")
    return sig


class PreemptionGuard:
    """Context manager: turn the preemption signal into a flag checked between training steps.

    Only in the main thread (signal handlers cannot be installed elsewhere; then the guard is
    inert and :attr:`requested` stays False). The previous handler is restored on exit.

    Attributes:
        requested: True once the signal arrived.
        signum: the signal handled.
    """

    def __init__(self, signum: int | None = None):
        self.signum = preemption_signal() if signum is None else signal.Signals(signum)
        self.requested = False
        self._previous = None
        self._installed = False

    def __enter__(self) -> "PreemptionGuard":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(self.signum, self._on_signal)
            self._installed = True
        return self

    def _on_signal(self, signum, frame) -> None:
        self.requested = True

    def __exit__(self, *exc) -> bool:
        if self._installed:
            signal.signal(self.signum, self._previous)
            self._installed = False
        return False

    @property
    def chained(self) -> bool:
        """True if a Python handler (submitit's) was installed before this guard."""
        return callable(self._previous)

    def hand_over(self) -> None:
        """After the checkpoint is written: restore and run the previous handler.

        Under submitit this requeues the job and exits the process (``SystemExit``, passed
        on). When submitit refuses to requeue (``UncompletedJobError``: the job timed out
        ``max_num_timeout`` times) or there is no previous Python handler, raises
        :class:`Preempted`, so the run is recorded ``interrupted`` with its checkpoint.
        """
        previous = self._previous
        self.__exit__(None, None, None)
        if callable(previous):
            try:
                previous(self.signum, None)
            except Exception as exc:  # submitit: "Job not requeued because: ..."
                raise Preempted(self.signum) from exc
        raise Preempted(self.signum)
