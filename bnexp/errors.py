"""User-facing errors, and the divergence signal of the measurements.

A :class:`UserError` is a problem with the user's input (a config value, a data
folder, an output folder). The CLI prints its message as one paragraph and exits
with code 2, without a traceback. Any other exception is an internal error and
keeps its traceback. :class:`Diverged` is not an error: it tells the training
loop that a value became non-finite, so the run ends with status ``diverged``.
"""

from __future__ import annotations

import errno as _errno
import signal as _signal


class Interrupted(Exception):
    """Raised inside the step loop by SIGINT/SIGTERM; carries the signal number (raised by
    :mod:`bnexp.train.trainer` once :class:`bnexp.train.signal_guard.SignalGuard` saw the signal; defined
    here, without torch, so that ``bnexp train`` can catch it before torch is imported)."""

    def __init__(self, signum: int):
        super().__init__(_signal.Signals(signum).name)
        self.signum = signum


class UserError(Exception):
    """An error caused by the user's input; its message says what to change."""


class ConfigError(UserError):
    """A config value is out of its allowed range.

    Args:
        key: the dotted config key, e.g. ``trainer.batch_size``.
        value: the offending value.
        allowed: what is allowed, in words.
    """

    def __init__(self, key: str, value: object, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"invalid config value {key}={value!r}: {allowed}.")


class DataError(UserError):
    """A dataset is missing, truncated, corrupt or fails its checksum."""


class OutputError(UserError):
    """A file or folder of the outputs could not be written (permissions, full disk, long name).

    Args:
        path: the file or folder that could not be written.
        exc: the underlying :class:`OSError`.
        resumable: say how to resume from the last checkpoint.
    """

    def __init__(self, path, exc: OSError, resumable: bool = False):
        self.path, self.errno = path, exc.errno
        what = exc.strerror or str(exc)
        if exc.errno in (_errno.ENOSPC, _errno.EDQUOT):
            fix = "the disk (or your quota) is full: free disk space, or choose another output folder"
        elif exc.errno in (_errno.EACCES, _errno.EPERM, _errno.EROFS):
            fix = ("the folder is not writable (permissions or a read-only disk): fix its permissions, or "
                   "choose a writable output folder")
        elif exc.errno == _errno.ENAMETOOLONG:
            fix = ("the name is too long for the file system: choose a shorter output folder, or fewer or "
                   "shorter overrides (they name the run folder)")
        else:
            fix = "check the disk and the folder, or choose another output folder"
        where = " with hydra.run.dir=PATH (hydra.sweep.dir=PATH for sweeps)"
        then = (" Then resume from the last checkpoint: the same bnexp train command with hydra.run.dir set to the "
                "run's folder (a plain re-run starts a new folder)." if resumable else "")
        super().__init__(f"could not write {path} ({what}): {fix}{where}.{then}")


class Diverged(Exception):
    """A non-finite value (NaN or inf) appeared in training or in a measurement.

    Raised by the measurements (e.g. the shift monitor) and caught by the training
    loop, which ends the run with status ``diverged`` at ``step``.

    Args:
        step: the training step at which the value appeared.
        what: where, in words (e.g. ``"pre-activations of layer2"``).
    """

    def __init__(self, step: int, what: str):
        self.step, self.what = int(step), what
        super().__init__(f"non-finite {what} at step {step}")


class CheckpointMismatch(UserError):
    """The run directory holds a checkpoint this command cannot resume (another config, or
    another number of data-parallel replicas). Its checkpoint is kept (the run is recorded ``interrupted``),
    so the right command can still resume it."""


class UntrustedCheckpoint(CheckpointMismatch):
    """A ``checkpoint.pt`` that only a full unpickling could load: it names Python objects beyond
    tensors and plain data (a pickled callable can run any code while it loads). Refused before
    anything runs, and kept; ``trainer.trust_checkpoint=true`` loads it when the user trusts it.

    Args:
        path: the checkpoint file.
        names: the globals the file asks for (``module.name``), as torch lists them.
    """

    def __init__(self, path, names: list[str]):
        self.path, self.names = path, list(names)
        shown = ", ".join(self.names[:3]) + (" ..." if len(self.names) > 3 else "")
        super().__init__(
            f"{path} needs more than tensors to load ({shown}), and loading it could run code; it is "
            "refused and left as it is. If you trust this file (your own run, a colleague's), resume with "
            "trainer.trust_checkpoint=true; otherwise use a new run directory or trainer.resume=false.")
