"""Ctrl-C at any phase of a ``bnexp`` process, even one that lands in a finalizer.

Python turns SIGINT into a KeyboardInterrupt wherever the main thread is at that moment. When that is a
finalizer (a ``__del__`` method or a weakref callback, which the garbage collector may run during any
import), CPython cannot raise it: it prints ``Exception ignored in ... KeyboardInterrupt`` and goes on,
so a Ctrl-C of a starting ``bnexp train`` could be lost and the run would train to its last step.
:func:`caught` makes a Ctrl-C stick: its handler records the signal before raising, a KeyboardInterrupt
that a finalizer swallowed is not printed, and :func:`raise_if_pending` raises it again at the next
point that can handle it (``bnexp train`` asks just before training; the training loop's
:class:`bnexp.train.signal_guard.SignalGuard` takes a pending one over as a stop before step 1).

Standard library only: :func:`bnexp.cli.main` enters :func:`caught` before anything else is imported.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

_pending: list[int] = []


def _on_sigint(signum, frame):
    _pending.append(signum)
    raise KeyboardInterrupt


@contextlib.contextmanager
def caught():
    """Context: SIGINT is recorded (:func:`pending`) as well as raised as KeyboardInterrupt, and a
    KeyboardInterrupt swallowed by a finalizer is not printed. Only in the main thread and only over
    Python's default SIGINT handler (a process that ignores SIGINT, e.g. a sweep's launcher, or has its
    own handler is left alone); the previous handler and ``sys.unraisablehook`` come back on exit."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    _pending.clear()
    previous_hook = sys.unraisablehook

    def unraisable(info) -> None:
        if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
            return  # recorded by the handler: raise_if_pending raises it where it can be handled
        previous_hook(info)

    signal.signal(signal.SIGINT, _on_sigint)
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = previous_hook


def pending() -> int | None:
    """The number of a SIGINT received under :func:`caught` (2), or None without one."""
    return _pending[0] if _pending else None


def raise_if_pending() -> None:
    """Raise KeyboardInterrupt if a SIGINT was received under :func:`caught`, even one that a finalizer
    swallowed.

    Raises:
        KeyboardInterrupt: a Ctrl-C was received.
    """
    if _pending:
        raise KeyboardInterrupt
