"""The start and the abrupt end of a run in its folder.

Start: where a job trains (:func:`resume_target`), whether it skips a complete run (:func:`complete_summary`),
takes the folder's lock or leaves a folder in use alone (:func:`lock_or_refuse`) and what it writes once it
begins (:func:`begin_training`). A run folder holds one configuration
(:func:`bnexp.config.oneconfig.refuse_other_config`), and nothing is written into it -- Hydra's ``.hydra/``
files, ``train.log`` -- before ``bnexp train`` has decided to train there (:func:`bnexp.cli.run_job`): Hydra is
told to write no ``.hydra/`` (:func:`hold_hydra_output_subdir`) and :func:`save_hydra_files` writes the same files at the
decision; the log records meant for the folder wait in :class:`HeldLog`. A run that starts removes the
temporary files an earlier attempt killed in mid-write left (:func:`remove_stale_temporaries`).

Abrupt end: a second Ctrl-C, or rank 0 of a data-parallel run killed outright, leaves no ``running``
status and no temporary file (:func:`abandon_run`; for replicas, :mod:`bnexp.train.replica_endings`).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Callable

from bnexp.runfolders import rundir

log = logging.getLogger("bnexp")


OUTPUT_SUBDIR_ENV = "BNEXP_OUTPUT_SUBDIR"


def hold_hydra_output_subdir(args: list[str]) -> list[str]:
    """Keep Hydra from writing a job's ``.hydra/`` before bnexp has decided to run in its folder.

    Hydra's ``run_job`` saves ``config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` into
    ``hydra.output_subdir`` before it calls the task function, so a refused second command would
    rewrite the ``.hydra/`` of a folder whose results came from another config. The arguments get
    ``hydra.output_subdir=null`` (Hydra writes nothing) and the subdir the user asked for (default
    ``.hydra``; a user's ``hydra.output_subdir=X`` is taken out and carried over) travels to the job
    as ``hydra.job.env_set.BNEXP_OUTPUT_SUBDIR`` -- through every launcher, as Hydra sets
    ``env_set`` around each job; :func:`save_hydra_files` writes the same three files once the job
    has decided to train.
    """
    subdir, kept = ".hydra", []
    for a in args:
        if a.startswith("hydra.output_subdir="):
            subdir = a.split("=", 1)[1].strip("'\"")
        else:
            kept.append(a)
    if subdir in ("null", "None", "~", ""):
        return kept + ["hydra.output_subdir=null"]
    return kept + ["hydra.output_subdir=null", f"+hydra.job.env_set.{OUTPUT_SUBDIR_ENV}='{subdir}'"]


def save_hydra_files(run_dir: Path, task_cfg) -> None:
    """Write Hydra's ``config.yaml`` (``task_cfg``), ``hydra.yaml`` and ``overrides.yaml`` into the
    run's output subdir (held back by :func:`hold_hydra_output_subdir`) with Hydra's own writer, as
    ``run_job`` would have; ``hydra.yaml`` shows the subdir and the overrides the user gave. No-op when
    nothing was held (no ``BNEXP_OUTPUT_SUBDIR``: Hydra wrote them itself, or the user chose none)."""
    import copy

    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import _save_config
    from omegaconf import OmegaConf, open_dict, read_write

    subdir = os.environ.get(OUTPUT_SUBDIR_ENV)
    if not subdir or not HydraConfig.initialized():
        return
    hydra_cfg = copy.deepcopy(HydraConfig.instance().cfg)
    with read_write(hydra_cfg.hydra), open_dict(hydra_cfg.hydra):
        hydra_cfg.hydra.output_subdir = subdir
        hydra_cfg.hydra.job.env_set.pop(OUTPUT_SUBDIR_ENV, None)
        # read unresolved: an override may hold an interpolation of the task's config (hydra.sweep.subdir=${seed})
        given = OmegaConf.to_container(hydra_cfg.hydra.overrides.hydra, resolve=False)
        hydra_cfg.hydra.overrides.hydra = [o for o in given if not o.startswith(
            ("hydra.output_subdir=", f"+hydra.job.env_set.{OUTPUT_SUBDIR_ENV}="))]
    out = Path(run_dir) / subdir
    _save_config(task_cfg, "config.yaml", out)
    _save_config(hydra_cfg, "hydra.yaml", out)
    _save_config(hydra_cfg.hydra.overrides.task, "overrides.yaml", out)


class HeldLog:
    """Hold back the records bound for the log files inside a run folder (its ``train.log``) until
    bnexp has decided to run there: :meth:`release` writes them, :meth:`drop` forgets them (a refused
    or skipped start writes nothing into the folder). The file handler opens its file lazily
    (``delay: true`` in conf/hydra/job_logging), so a held folder gets no empty ``train.log``."""

    def __init__(self, run_dir: Path):
        self.records: list[logging.LogRecord] = []
        self.handlers = [h for h in logging.getLogger().handlers + logging.getLogger("bnexp").handlers
                         if isinstance(h, logging.FileHandler)
                         and Path(h.baseFilename).parent == Path(run_dir).resolve()]
        for h in self.handlers:
            h.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if not any(r is record for r in self.records[-2:]):  # one record reaches each held handler
            self.records.append(record)
        return False

    def _stop(self) -> None:
        for h in self.handlers:
            h.removeFilter(self)

    def release(self) -> None:
        """Write the held records to their files and stop holding (idempotent)."""
        self._stop()
        records, self.records = self.records, []
        for h in self.handlers:
            for r in records:
                h.handle(r)

    def drop(self) -> None:
        """Forget the held records and stop holding; a file not yet opened stays uncreated."""
        self._stop()
        self.records = []


def resume_target(run_dir: Path, resume, multirun: bool, overrides: list[str] | None) -> Path:
    """Where one ``bnexp train`` job trains: ``run_dir``, or with ``trainer.resume=true`` (a single run whose
    new folder holds no checkpoint) the unfinished run :func:`bnexp.runfolders.rundir.find_resumable` finds
    beside it (logged)."""
    if resume and not multirun and not (Path(run_dir) / "checkpoint.pt").exists():
        found = rundir.find_resumable(run_dir, overrides or [])
        if found is not None:
            log.info("trainer.resume=true: continuing the unfinished run in %s", found)
            return found
    return run_dir


def complete_summary(run_dir: Path, resume, meanwhile: bool = False) -> dict | None:
    """The summary.json of the complete run (finished or diverged) in ``run_dir`` that a start skips (logged:
    "already complete", or ``meanwhile``: completed by another process while this one waited for the
    lock); None when the run is not complete or ``trainer.resume=false`` starts it over."""
    s = rundir.read_summary(run_dir) if resume is not False else None
    if not s or s.get("status") not in rundir.COMPLETE_STATUSES:
        return None
    log.info("%s was completed meanwhile (status %s): skipped" if meanwhile else
             "%s is already complete (status %s): skipped", run_dir, s.get("status"))
    return s


def lock_or_refuse(run_dir: Path, say: Callable[[str], None]) -> rundir.RunLock | None:
    """This process's lock on ``run_dir``, taken after the folder proved writable; None when another bnexp
    process holds it: ``say`` gets one line naming the holder's pid, and the job leaves the folder alone.

    Raises:
        OutputError: ``run_dir`` cannot be written (:func:`bnexp.runfolders.rundir.check_writable`).
    """
    from bnexp.errors import OutputError

    try:
        rundir.check_writable(run_dir)
    except OSError as exc:
        raise OutputError(run_dir, exc) from None
    lock = rundir.RunLock(run_dir)
    if lock.acquire():
        return lock
    say(f"{run_dir} is in use by another bnexp process (pid {lock.holder()}); this job leaves it alone.")
    return None


def begin_training(hydra_dir: Path, run_dir: Path, cfg, held: HeldLog, resume) -> None:
    """``bnexp train`` decided to train in ``run_dir`` (``on_begin`` of :func:`bnexp.train.trainer.train`): from
    here on the folder is written -- Hydra's files into ``hydra_dir`` (:func:`save_hydra_files`), the held log
    records, ``RESUMED_IN.txt`` when the job resumes another folder (``trainer.resume=true``), an earlier
    attempt's partial outputs cleared (``trainer.resume=false``: its checkpoint and summary too, a complete run
    starting over is logged) and stale temporaries removed (:func:`remove_stale_temporaries`)."""
    save_hydra_files(hydra_dir, cfg)
    held.release()
    if run_dir != hydra_dir:
        (hydra_dir / "RESUMED_IN.txt").write_text(f"this command resumed the run in {run_dir}\n")
    if resume is False:
        if rundir.is_complete(run_dir):
            log.warning("trainer.resume=false: the complete run in %s starts over; its results are replaced", run_dir)
        rundir.clear_partial_outputs(run_dir, checkpoint=True)
    elif not (run_dir / "checkpoint.pt").exists():
        rundir.clear_partial_outputs(run_dir)
    remove_stale_temporaries(run_dir)


def remove_stale_temporaries(run_dir: Path) -> list[Path]:
    """Remove the temporary files (``.NAME.*.tmp``, :func:`bnexp.runfolders.rundir.atomic_write_bytes`) that a process killed
    in the middle of a write left in ``run_dir``; call it only while holding the folder's lock.

    Returns:
        the files removed.
    """
    removed = []
    for p in Path(run_dir).glob(".*.tmp"):
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
    if removed:
        log.info("removed %d temporary file(s) of an earlier attempt cut short: %s", len(removed),
                 ", ".join(p.name for p in removed))
    return removed


def abandon_run(run_dir: Path, signum: int | None = None, error: str | None = None) -> bool:
    """The run ends without its trainer recording it (a second SIGINT/SIGTERM exits at once; rank 0 of a
    data-parallel run died): a summary.json still saying ``running`` becomes ``interrupted``
    (``resumable`` when a checkpoint.pt is there, else the re-run starts over) with ``error`` saying why,
    and the temporary files of writes cut short are removed. Call it only from the process that holds,
    or has just taken, the folder's lock. Never raises.

    Returns:
        True when it changed the status.
    """
    changed = False
    try:
        summary = rundir.read_summary(run_dir)
        if summary is not None and summary.get("status") == "running":
            name = signal.Signals(signum).name if signum is not None else None
            summary.update({"status": "interrupted", "resumable": (Path(run_dir) / rundir.CHECKPOINT).exists(),
                            "error": error or f"stopped at once by a second {name}: the work since the last "
                                              "checkpoint is lost"})
            if name:
                summary["signal"] = name
            rundir.write_summary_even_on_a_full_disk(Path(run_dir) / rundir.SUMMARY, summary)
            changed = True
    except Exception:
        pass
    for p in Path(run_dir).glob(".*.tmp"):
        try:
            p.unlink()
        except OSError:
            pass
    return changed
