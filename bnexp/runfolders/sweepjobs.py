"""The failed jobs of a sweep, collected by a Hydra callback and listed when the sweep ends.

A sweep (``bnexp train -m ...``) runs every job even when some fail: a job that fails returns a
:class:`FailedRun` (its run folder and the error) instead of its summary. :class:`FailedJobs`,
registered in ``conf/config.yaml`` under ``hydra.callbacks``, sees each job end
(``on_job_end``, in the process that ran the job: the main process, a joblib worker or a cluster
job) and appends the failure to a record in the sweep folder; when the sweep ends
(``on_multirun_end``, in the main process) it prints the list and removes the record, and
``bnexp train`` exits with code 1 (:func:`sweep_failures`).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

_failures: list[dict] = []  # the failed jobs of the last sweep this process ran


@dataclass
class FailedRun:
    """What the task function of a failed sweep job returns.

    Args:
        run_dir: the job's run folder.
        error: the message (a user error) or ``internal error <type>: <message>``.
    """

    run_dir: str
    error: str


def sweep_failures() -> list[dict]:
    """The failed jobs ({"run_dir", "error"}) of the last sweep that ended in this process."""
    return list(_failures)


class FailedJobs(Callback):
    """Hydra callback: collects the failed jobs of a multirun and lists them at its end.

    The record is ``<sweep dir>/.failed_jobs.<pid>-<time>.jsonl``, named when the sweep starts;
    the name travels to the jobs with this object (launchers pickle the callbacks after
    ``on_multirun_start``), so two sweeps into one folder never mix their lists.
    """

    def __init__(self) -> None:
        self.record: str | None = None

    def on_multirun_start(self, config, **kwargs: Any) -> None:
        _failures.clear()
        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        self.record = str(sweep_dir / f".failed_jobs.{os.getpid()}-{time.time_ns()}.jsonl")

    def on_job_end(self, config, job_return, **kwargs: Any) -> None:
        from hydra.core.utils import JobStatus

        value = job_return._return_value
        if job_return.status == JobStatus.FAILED:  # an exception the task function did not catch
            value = FailedRun(str(config.hydra.runtime.output_dir), f"{type(value).__name__}: {value}")
        if self.record is None or not isinstance(value, FailedRun):
            return
        try:
            Path(self.record).parent.mkdir(parents=True, exist_ok=True)
            with open(self.record, "a") as f:  # one short line per write: appends do not interleave
                f.write(json.dumps({"run_dir": value.run_dir, "error": value.error}) + "\n")
        except OSError:
            pass  # the job's own summary.json still says failed

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        if self.record is None:
            return
        try:
            lines = Path(self.record).read_text().splitlines()
            os.unlink(self.record)
        except OSError:
            lines = []
        _failures[:] = [json.loads(line) for line in lines if line.strip()]
        if not _failures:
            return
        from rich.console import Console

        listing = "\n".join(f"  {f['run_dir']}: {f['error']}" for f in _failures)
        Console(stderr=True).print(f"[bold red]bnexp: error:[/] {len(_failures)} job(s) of the sweep failed (the "
                                   f"others ran to the end); re-running the same command retries only them:\n"
                                   f"{listing}", highlight=False, soft_wrap=True)
