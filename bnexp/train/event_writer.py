"""TensorBoard's event-file writer for a run folder, whose writer thread fails quietly: the exception that
stops it (a full disk) reaches the main thread at the writer's next call, as one message."""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

WRITER_QUEUE = 1000  # events the writer thread may lag behind the loop
_QUIET_THREADS: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()
_previous_excepthook = None


def _writer_threads(writer) -> list[threading.Thread]:
    """The background threads that write a ``SummaryWriter``'s event files (tensorboard's
    ``_AsyncWriterThread``; they keep the exception that stopped them in ``.exception``)."""
    out = []
    for fw in (getattr(writer, "all_writers", None) or {}).values():
        thread = getattr(getattr(getattr(fw, "event_writer", None), "_async_writer", None), "_worker", None)
        if thread is not None:
            out.append(thread)
    return out


def _quiet_hook(args) -> None:
    if args.thread in _QUIET_THREADS:  # the main thread raises it at the writer's next call or close
        return
    (_previous_excepthook or threading.__excepthook__)(args)


def open_writer(run_dir: Path, resumed_from: int | None = None):
    """A TensorBoard ``SummaryWriter`` for ``run_dir`` whose writer thread fails quietly.

    The writer thread of tensorboard's event files keeps the exception that stops it (a full
    disk) and the main thread gets it at the writer's next call; the thread's own traceback on
    stderr is suppressed, so a user sees one message. See :func:`writer_failure`.

    Args:
        run_dir: the folder of the event files.
        resumed_from: the checkpoint's step when resuming: the later events of earlier files are
            dropped (``purge_step``); None for a fresh run.
    """
    global _previous_excepthook
    from torch.utils.tensorboard import SummaryWriter

    kwargs = {} if resumed_from is None else {"purge_step": resumed_from + 1}
    # a long queue: a monitor record adds ~150 events at once, and with tensorboard's default of
    # 10 the loop would wait for the thread (pure-Python checksums, one open() per event) to write them
    writer = SummaryWriter(log_dir=str(run_dir), max_queue=WRITER_QUEUE, **kwargs)
    if threading.excepthook is not _quiet_hook:
        _previous_excepthook, threading.excepthook = threading.excepthook, _quiet_hook
    _QUIET_THREADS.update(_writer_threads(writer))
    return writer


def writer_failure(writer) -> BaseException | None:
    """The exception that stopped one of ``writer``'s event-file threads (e.g. ``OSError`` ENOSPC), or None."""
    for thread in _writer_threads(writer):
        if getattr(thread, "exception", None) is not None:
            return thread.exception
    return None
