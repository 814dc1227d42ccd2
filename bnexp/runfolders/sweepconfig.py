"""A refused sweep leaves its sweep folder's ``multirun.yaml`` as it was.

Hydra's sweeper saves ``<hydra.sweep.dir>/multirun.yaml`` (the sweep's overrides, which the report and
TensorBoard read: :mod:`bnexp.runfolders.runnames`) before it composes each job's config and before
the launcher starts: ``bnexp train -m lr=0.1,abc hydra.sweep.dir=EXISTING`` is refused (one line,
exit code 2) but would leave EXISTING/multirun.yaml describing a call that never ran. So
:class:`KeepSweepConfig`, a Hydra callback registered in ``conf/config.yaml`` under
``hydra.callbacks``, notes the file's bytes when the sweep starts (``on_multirun_start``, in the main
process), and :func:`restore_refused_sweep`, called by :func:`bnexp.cli.main` for any refusal (exit
code 2), puts them back -- or removes the file, and the sweep folder if Hydra made it and it is empty.

Only before any job started in this process (``on_job_start``): once a job ran, the saved file is
the record of the call that ran it. With a launcher that runs jobs in other processes (joblib,
submitit), a refusal after some jobs ran -- possible only with ``hydra.sweeper.max_batch_size`` --
also restores the old file.

Standard library and Hydra only (no torch): Hydra instantiates callbacks before the config is checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

_NAME = "multirun.yaml"
_saved: dict | None = None  # {"dir": Path, "dir_existed": bool, "data": bytes | None}, this process's sweep


class KeepSweepConfig(Callback):
    """Hydra callback: remembers the sweep folder's ``multirun.yaml`` as it was (module docstring)."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        remember(Path(str(config.hydra.sweep.dir)))

    def on_job_start(self, config: Any, **kwargs: Any) -> None:
        forget()  # a job of this sweep runs: Hydra's new multirun.yaml is its record

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        forget()


def remember(sweep_dir: Path) -> None:
    """Note ``sweep_dir/multirun.yaml``'s bytes (None: no such file) for :func:`restore_refused_sweep`."""
    global _saved
    try:
        data = (sweep_dir / _NAME).read_bytes()
    except FileNotFoundError:
        data = None
    except OSError:  # unreadable: nothing to put back, and nothing of it to remove
        _saved = None
        return
    _saved = {"dir": sweep_dir, "dir_existed": sweep_dir.is_dir(), "data": data}


def forget() -> None:
    """Drop what :func:`remember` noted (a job started, or the sweep ended)."""
    global _saved
    _saved = None


def restore_refused_sweep() -> None:
    """Put ``multirun.yaml`` back as :func:`remember` found it: its old bytes, or no file (and no sweep
    folder when Hydra created it and it holds nothing else). Nothing when nothing was noted; then forgets.

    Errors of the file system are not raised: the sweep's own refusal is what the user is told.
    """
    saved = _saved
    forget()
    if saved is None:
        return
    path = saved["dir"] / _NAME
    try:
        if saved["data"] is not None:
            if not path.is_file() or path.read_bytes() != saved["data"]:
                tmp = path.with_name(f".{_NAME}.restore")
                tmp.write_bytes(saved["data"])
                tmp.replace(path)
            return
        path.unlink(missing_ok=True)
        if not saved["dir_existed"]:
            saved["dir"].rmdir()  # only when empty (OSError otherwise)
    except OSError:
        pass
