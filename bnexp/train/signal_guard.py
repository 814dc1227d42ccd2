"""SIGINT/SIGTERM during a run: the first signal asks the step loop to stop at the end of its step (with a
checkpoint), a second one exits at once. The cluster's preemption signal is :mod:`bnexp.train.preemption`'s;
Ctrl-C in a sweep of worker processes is :mod:`bnexp.runfolders.sweepsignals`'."""

from __future__ import annotations

import os
import signal

from bnexp import interrupts


class SignalGuard:
    """Context: the first SIGINT/SIGTERM only sets :attr:`requested` (and :attr:`signum`); the step
    loop stops at the end of that step and saves a checkpoint, so a checkpoint never holds a
    half-done step, and data-parallel replicas all stop at the same step, never inside a collective.
    A second signal exits at once (exit code 128 + signal), after :attr:`on_exit` (when set) has had
    its say: the trainer's records the run as ``interrupted`` and removes the temporary files of writes
    cut short (:func:`bnexp.runfolders.start.abandon_run`), so no exit leaves ``running`` behind. Only in
    the main thread; elsewhere (some launchers) signals are left alone. Re-entrant: entering a guard
    already in place (the training function's, handed to the loop) changes nothing.

    Attributes:
        on_exit: None, or a callable of the signal number run before the second signal's exit;
            its errors are ignored (the process is leaving).
    """

    def __init__(self):
        self.requested = False
        self.signum = int(signal.SIGTERM)
        self.saved: dict = {}
        self._depth = 0
        self.on_exit = None

    def __enter__(self):
        self._depth += 1
        if self._depth > 1:
            return self
        self.saved = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self._first)
        except ValueError:  # not the main thread (e.g. some launchers): leave signals alone
            self.saved = {}
        if self.saved and (signum := interrupts.pending()) is not None:  # a Ctrl-C a finalizer swallowed:
            self._first(signum, None)                                       # stop before step 1
        return self

    def _first(self, signum, frame):
        for sig in self.saved:
            signal.signal(sig, self._second)
        self.requested, self.signum = True, int(signum)

    def _second(self, signum, frame):
        for sig in self.saved:  # a third signal while on_exit runs: leave at once
            signal.signal(sig, lambda n, f: os._exit(128 + n))
        if self.on_exit is not None:
            try:
                self.on_exit(signum)
            except BaseException:
                pass
        os._exit(128 + signum)

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            for sig, handler in self.saved.items():
                signal.signal(sig, handler)
            self.saved = {}
        return False
