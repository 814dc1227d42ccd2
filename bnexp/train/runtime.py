"""Process-level helpers of a training run: device choice, seeding and RNG state,
learning-rate schedules and the current rate, the progress bar, the SIGINT/SIGTERM guard,
TensorBoard's writer thread, and Ctrl-C in a sweep whose launcher runs the jobs in worker
processes (hydra/launcher=joblib, :class:`SweepSignals`, from :mod:`bnexp.runfolders.sweepsignals`).
"""

from __future__ import annotations

import datetime
import logging
import os
import random
import signal
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import torch

from bnexp import interrupts
from bnexp.errors import ConfigError, Interrupted  # noqa: F401  (Interrupted: re-exported)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available, else cpu; other names as given.

    Raises:
        ConfigError: when the named device is not available on this machine.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("trainer.device", name, "CUDA is not available on this machine; use auto or cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device", name, "MPS is not available on this machine; use auto or cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def lr_lambda(schedule: str, decay_rate: float, decay_steps: int):
    """Multiplier of the base learning rate at a step: constant, exponential or step decay."""
    if schedule == "exponential":
        return lambda step: decay_rate ** (step / decay_steps)
    if schedule == "step":
        return lambda step: decay_rate ** (step // decay_steps)
    return lambda step: 1.0


def learning_rate(optimizer: torch.optim.Optimizer) -> float:
    """The learning rate of the optimizer's next update: the one source of the current rate.

    The scheduler (:func:`lr_lambda`) writes it into the optimizer's parameter groups at each of
    its steps; all groups share it here. The step loop reads it once per step, after the
    scheduler's step, into the measurements' context.
    """
    return optimizer.param_groups[0]["lr"]


def shares_terminal() -> bool:
    """True in a parallel sweep's job: a process started by another (Hydra's joblib launcher runs each job in a
    worker process), whose terminal other jobs write to at the same time."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


class Progress:
    """A rich progress bar (step, steps/s, ETA, loss, latest test accuracy), plain progress lines, or nothing.

    The bar fits an 80-column terminal up to 1,000,000 steps (``step 49500/50000 ━━━━━━━ 850/s ETA 0:00:52 loss
    0.1234 test acc 0.9712``); loss and accuracy read ``-`` until their first value (no NaN before the first
    logged loss). A run that shares the terminal with other runs (a parallel sweep's job: ``label`` set) prints
    instead one line per tenth of its steps, led by its label (``bn=true,seed=1: step 2000/4000 (50%), 850/s,
    ETA 0:00:02, loss 0.1234, test acc 0.9712``): two live bars on one terminal overwrite each other.

    Args:
        enabled: show it (``trainer.progress``).
        total: ``trainer.max_steps``.
        start: the step the run starts (or resumes) at; steps/s count from there.
        console: the rich console to draw on (default: rich's global console, i.e. the terminal).
        label: the run's name (its folder's), for plain lines; None: the live bar.
    """

    BAR_WIDTH = 7  # columns of the bar itself
    LINES = 10  # plain lines per run (one per tenth of its steps), besides the first

    def __init__(self, enabled: bool, total: int, start: int = 0, console=None, label: str | None = None):
        self.enabled, self.label, self.total = enabled, label, total
        self.t0, self.step0 = time.time(), start
        self.fields = {"sps": "-", "loss": "-", "acc": "-"}
        self.next_line = start
        if not enabled:
            return
        import rich

        self.console = console or rich.get_console()
        if label is not None:
            self._line(start)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("step"), MofNCompleteColumn(), BarColumn(bar_width=self.BAR_WIDTH),
            TextColumn("{task.fields[sps]}/s"), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("test acc {task.fields[acc]}"),
            console=self.console, transient=False, refresh_per_second=4,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, **self.fields)
        self.progress.start()

    def update(self, step: int, **fields) -> None:
        """Move to ``step``; ``loss=`` (a float; also refreshes steps/s) and ``acc=`` (text) set those
        columns."""
        if not self.enabled:
            return
        if "loss" in fields:
            fields["sps"] = f"{(step - self.step0) / max(time.time() - self.t0, 1e-9):.0f}"
            fields["loss"] = f"{fields['loss']:.4f}"
        self.fields.update(fields)
        if self.label is None:
            self.progress.update(self.task, completed=step, **fields)
        elif step >= self.next_line:
            self._line(step)

    def _line(self, step: int) -> None:
        """One plain progress line, and the step of the next one (the next tenth of the run)."""
        f = self.fields
        eta = "-"
        if f["sps"] != "-" and float(f["sps"]) > 0:
            eta = str(datetime.timedelta(seconds=round((self.total - step) / float(f["sps"]))))
        self.console.print(f"{self.label}: step {step}/{self.total} ({100 * step / max(self.total, 1):.0f}%), "
                           f"{f['sps']}/s, ETA {eta}, loss {f['loss']}, test acc {f['acc']}",
                           markup=False, highlight=False, soft_wrap=True)
        tenth = max(1, self.total // self.LINES)
        self.next_line = (step // tenth + 1) * tenth

    def stop(self) -> None:
        """Remove the bar (idempotent)."""
        if self.enabled and self.label is None:
            self.progress.stop()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


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


def rng_state(device: torch.device) -> dict:
    """Python, numpy, torch CPU (and CUDA) generator states, for checkpoints: tensors and plain data only
    (numpy's key array as an int64 tensor), so that a checkpoint loads with ``weights_only=True``
    (:mod:`bnexp.train.checkpoint`)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                     int(has_gauss), float(gauss)),
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore :func:`rng_state` (also an earlier version's, whose numpy keys were an ``ndarray``). The
    generator states are CPU ``ByteTensor`` s whatever device they were loaded to."""
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    if isinstance(keys, torch.Tensor):
        keys = keys.cpu().numpy().astype(np.uint32)
    np.random.set_state((kind, keys, *rest))
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


# ----- TensorBoard's writer thread -------------------------------------------------------------
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


# ----- Ctrl-C in a sweep of worker processes: torch-free, in bnexp.runfolders.sweepsignals (re-exported here) -----
from bnexp.runfolders.sweepsignals import SWEEP_ENV, SweepSignals, wait_for_sweep_siblings  # noqa: E402,F401
