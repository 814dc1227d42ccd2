"""Process-level helpers of a training run: device choice, seeding and RNG state,
learning-rate schedules, the progress bar and the SIGINT/SIGTERM guard.
"""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np
import torch

from bnexp.errors import ConfigError


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


class Progress:
    """A rich progress bar (step, steps/s, ETA, loss, latest test accuracy), or nothing.

    Args:
        enabled: show it (``trainer.progress``).
        total: ``trainer.max_steps``.
        start: the step the run starts (or resumes) at; steps/s count from there.
    """

    def __init__(self, enabled: bool, total: int, start: int = 0):
        self.enabled = enabled
        self.t0, self.step0 = time.time(), start
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        import rich

        console: Console = rich.get_console()
        self.progress = Progress(
            TextColumn("step"), MofNCompleteColumn(), BarColumn(),
            TextColumn("{task.fields[sps]:>6.0f} steps/s"), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("loss {task.fields[loss]:.4f}"), TextColumn("test acc {task.fields[acc]}"),
            console=console, transient=False, refresh_per_second=4,
        )
        self.task = self.progress.add_task("train", total=total, sps=0.0, loss=float("nan"), acc="-")
        self.progress.start()

    def update(self, step: int, **fields) -> None:
        """Move the bar to ``step``; ``loss=`` (also refreshes steps/s) and ``acc=`` set those columns."""
        if self.enabled:
            if "loss" in fields:
                fields["sps"] = (step - self.step0) / max(time.time() - self.t0, 1e-9)
            self.progress.update(self.task, completed=step, **fields)

    def stop(self) -> None:
        if self.enabled:
            self.progress.stop()


class Interrupted(Exception):
    """Raised inside the step loop by SIGINT/SIGTERM; carries the signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGuard:
    """Context: the first SIGINT/SIGTERM only sets :attr:`requested` (and :attr:`signum`); the step
    loop stops at the end of that step and saves a checkpoint, so a checkpoint never holds a
    half-done step, and data-parallel replicas all stop at the same step, never inside a collective.
    A second signal exits at once (exit code 128 + signal). Only in the main thread; elsewhere
    (some launchers) signals are left alone.
    """

    def __init__(self):
        self.requested = False
        self.signum = int(signal.SIGTERM)

    def __enter__(self):
        self.saved = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self._first)
        except ValueError:  # not the main thread (e.g. some launchers): leave signals alone
            self.saved = {}
        return self

    def _first(self, signum, frame):
        for sig in self.saved:
            signal.signal(sig, self._second)
        self.requested, self.signum = True, int(signum)

    @staticmethod
    def _second(signum, frame):
        os._exit(128 + signum)

    def __exit__(self, *exc):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        return False


def rng_state(device: torch.device) -> dict:
    """Python, numpy, torch CPU (and CUDA) generator states, for checkpoints."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)
