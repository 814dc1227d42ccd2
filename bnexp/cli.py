"""The ``bnexp`` command line: ``bnexp train [-m] [overrides]`` and ``bnexp report SWEEP_DIR``.

``bnexp train`` is a Hydra application: Hydra owns the override syntax, multirun (``-m``) and
launchers. Before Hydra sees the arguments, bnexp reads them itself (:mod:`bnexp.config.explain`): the
values of ``bn=...`` overrides are quoted (``bn`` is a config group whose options are named
``true`` and ``false``, which Hydra's grammar would read as booleans), an override Hydra cannot
read is named with a hint to quote it, a key given twice is refused, and ``--help`` lists every
key with its default and description (from the schemas in :mod:`bnexp.config.schema`).

Errors: :func:`main` is the one place that turns an error into one ``bnexp: error: ...`` line:
a :class:`~bnexp.errors.UserError`, or an error of Hydra's composition or OmegaConf (a wrong
type, an unknown key or group option), worded by :func:`bnexp.config.explain.explain`.
Exit codes: 0 success; 1 a sweep with failed jobs (listed at its end, :mod:`bnexp.runfolders.sweepjobs`),
or an internal error, with its traceback; 2 a user error; 130 Ctrl-C (one line, no traceback,
at any phase), 128 + N another signal N.

The module imports only the standard library at load time, so that even a Ctrl-C during the
imports of a starting ``bnexp`` (Hydra, torch) is caught by :func:`main`.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

import bnexp
from bnexp import interrupts
from bnexp.errors import UserError
from bnexp.runfolders.paths import check_output_location  # noqa: F401  (standard library only; was defined here)

log = logging.getLogger("bnexp")
#: the sweep resume commands this process has printed (a stack's interrupted runs print it once)
_SWEEPS_TOLD: set[str] = set()


def _hydra_train():
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from bnexp.config.schema import CONF_DIR

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def train_app(cfg):
        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        return run_job(cfg, Path(hc.runtime.output_dir), multirun, list(hc.overrides.task))

    return train_app


def _print_error(msg: str, label: str = "error: ") -> None:
    """Print ``bnexp: error: MSG`` once on stderr -- on a terminal wrapped at word boundaries to its
    width (a path or key is never split across lines), else as one line -- and copy it into the
    run's train.log. ``label=""``: ``bnexp: MSG`` (an interruption, which is no error:
    :func:`_print_interrupted`)."""
    import shutil
    import textwrap

    from rich.console import Console
    from rich.markup import escape

    head = "bnexp: " + label
    text = head + msg
    if sys.stderr.isatty():  # a terminal: wrap at word boundaries; piped (logs, CI): one line to grep
        width = max(40, shutil.get_terminal_size((100, 24)).columns)
        text = textwrap.fill(text, width=width, break_long_words=False, break_on_hyphens=False)
    style = "bold red" if label else "bold yellow"
    Console(stderr=True).print(f"[{style}]{escape(head.rstrip())}[/]{escape(text[len(head.rstrip()):])}",
                               highlight=False, soft_wrap=True, markup=True)
    _log_to_file_only(logging.ERROR if label else logging.WARNING, msg)


def _print_interrupted(msg: str) -> None:
    """``bnexp: interrupted (...) ...``: a stop the user asked for (Ctrl-C, SIGTERM), said once on stderr like
    an error line but not called one."""
    _print_error(msg, label="")


def _log_to_file_only(level: int, msg: str) -> None:
    """Write a record to the log files (the run's train.log) but not to the console."""
    record = logging.getLogger("bnexp").makeRecord("bnexp", level, __file__, 0, "%s", (msg,), None)
    for h in logging.getLogger().handlers + logging.getLogger("bnexp").handlers:
        if isinstance(h, logging.FileHandler):
            h.handle(record)


FS_ERRNOS = ("ENOSPC", "EDQUOT", "EACCES", "EPERM", "EROFS", "ENAMETOOLONG", "EFBIG", "EIO")


def _as_user_error(exc: BaseException, run_dir: Path):
    """The :class:`UserError` an exception means for the user, or None for an internal error.

    File-system errors (permission, full disk, name too long) become an
    :class:`~bnexp.errors.OutputError` naming the path and the fix.
    """
    import errno

    from bnexp.errors import OutputError, UserError

    if isinstance(exc, UserError):
        return exc
    if isinstance(exc, OSError) and exc.errno in {getattr(errno, n) for n in FS_ERRNOS if hasattr(errno, n)}:
        return OutputError(exc.filename or run_dir, exc, resumable=(Path(run_dir) / "checkpoint.pt").exists())
    return None


def _is_fresh(run_dir: Path) -> bool:
    """True when ``run_dir`` holds nothing but what Hydra and bnexp put in before training starts."""
    try:
        return all(p.name in (".hydra", "train.log", ".lock", ".write_test") for p in Path(run_dir).iterdir())
    except OSError:
        return False


def run_job(cfg, run_dir: Path, multirun: bool, overrides: list[str] | None = None):
    """Run one job (one training run) in ``run_dir``; the Hydra task function's body.

    - a run folder holds one configuration: a folder whose run is complete or resumable and was
      made with a different result-changing value is refused (:func:`_refuse_other_config`);
      the keys of ``bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS`` never count;
    - a run whose summary.json says it is complete (finished or diverged) is skipped, so a
      re-run of a sweep does only what is left and never overwrites a finished run;
    - an unfinished run with a checkpoint (killed, interrupted) resumes from it; a failed
      run starts over; ``trainer.resume=false`` always starts over (a complete run too),
      ``trainer.resume=true`` also looks for the newest unfinished run with the same overrides
      beside ``run_dir``;
    - a lock file keeps two processes out of one run directory.

    User errors: single run -> one message and exit code 2; in a multirun the job is
    recorded as ``failed``, returns a :class:`~bnexp.runfolders.sweepjobs.FailedRun` and the sweep goes
    on. Internal errors: recorded as ``failed`` with the traceback in summary.json; re-raised
    in a single run (traceback kept). Ctrl-C before training: one line, exit code 130.
    SIGINT/SIGTERM: checkpoint saved, status ``interrupted``, exit code 128 + signal.
    Under torchrun (N replicas) rank 0 does all of the above and tells the other replicas
    whether to train; they train in rank 0's run directory and write nothing.
    """
    if os.environ.get("WORLD_SIZE", "1").strip() == "1":  # one process (no torchrun): torch comes after validation
        return _lead(cfg, run_dir, multirun, overrides, lambda go: None)
    from bnexp.runfolders.start import HeldLog
    from bnexp.train import distributed
    from bnexp.train.device import resolve_device

    def refused_start() -> None:  # nothing of a start refused before it joined its peers stays behind
        fresh = _is_fresh(run_dir)
        HeldLog(run_dir).drop()
        if fresh:
            _remove_refused_run_dir(run_dir, None)

    try:
        replicas = (distributed.setup(resolve_device(cfg.trainer.device), on_give_up=refused_start)
                    if distributed.env_world_size() > 1 else distributed.Replicas())
    except UserError as exc:
        _print_error(str(exc))
        refused_start()
        raise SystemExit(2)
    told = [False]

    def tell_followers(go: bool) -> None:
        if replicas.distributed and not told[0]:
            told[0] = True
            distributed.broadcast_object(go, replicas)

    try:
        if replicas.distributed:
            # torchrun: rank 0 owns the run directory and decides; the other replicas follow it.
            run_dir = Path(distributed.broadcast_object(str(run_dir), replicas))
            if not replicas.is_main:
                return _follow(cfg, run_dir, replicas)
        try:
            return _lead(cfg, run_dir, multirun, overrides, tell_followers)
        finally:
            tell_followers(False)
    finally:
        distributed.teardown()


def _follow(cfg, run_dir: Path, replicas):
    """A replica of rank > 0 (torchrun): train beside rank 0 if it says go; write nothing."""
    from bnexp.train import distributed
    from bnexp.config.schema import validate
    from bnexp.train.replica_endings import a_collective_failed, record_lost_rank0, replica_refusal_line
    from bnexp.train.signal_guard import SignalGuard
    from bnexp.train.trainer import Interrupted, train

    if not distributed.broadcast_object(None, replicas):
        return None
    # The guard outlives training: when rank 0 dies, torchrun's agent sends this replica SIGTERM at about the
    # moment its collective fails, and that signal must not end the process while it records the run.
    with SignalGuard() as guard:
        try:
            validate(cfg)
            distributed.check_bn_config(cfg)
            return train(cfg, run_dir, resume=cfg.trainer.resume is not False)
        except UserError as exc:  # rank 0 refuses it too and prints the one line
            line = replica_refusal_line(replicas.rank, str(exc), lambda: guard.requested)
            if line is not None:
                _print_error(line)
            raise SystemExit(2)
        except Interrupted as exc:
            raise SystemExit(128 + exc.signum)
        except Exception as exc:  # a collective failed: if rank 0 died, its status is this replica's to correct
            line = record_lost_rank0(run_dir, replicas.rank, exc)
            if line is not None:
                _print_error(line)
                raise SystemExit(1)
            if a_collective_failed(exc):  # another replica ended and rank 0 lives: rank 0 says it, once
                raise SystemExit(1)
            raise


def _lead(cfg, run_dir: Path, multirun: bool, overrides, tell_followers):
    """:func:`run_job` in the process that writes the run directory (the only one, or rank 0).

    Nothing is written into the run folder -- neither Hydra's ``.hydra/``
    (:func:`bnexp.runfolders.start.save_hydra_files`) nor ``train.log`` (:class:`bnexp.runfolders.start.HeldLog`),
    summary.json or a cleared record -- until bnexp has decided to train there: the config is valid, the folder holds no other configuration's run or checkpoint
    (:func:`_refuse_other_config`, :func:`bnexp.train.resume.refuse_foreign_checkpoint`), it is not
    complete, its lock is free, and the data and the model are ready (``on_begin`` of
    :func:`bnexp.train.trainer.train`). A start refused before then leaves an existing folder exactly as
    it was (and removes a folder Hydra made for it).
    """
    from bnexp.config.schema import validate
    from bnexp.errors import Interrupted
    from bnexp.runfolders import start
    from bnexp.runfolders.resumecmd import resume_hint, sweep_resume_command
    from bnexp.runfolders.sweepjobs import FailedRun
    from bnexp.train import replica_endings

    logging.raiseExceptions = False  # a full disk must not print a logging traceback per record
    resume, hydra_dir, began = cfg.trainer.resume, run_dir, []
    held = start.HeldLog(hydra_dir)
    run_dir = start.resume_target(hydra_dir, resume, multirun, overrides)
    fresh = run_dir == hydra_dir and _is_fresh(run_dir)

    def begin() -> None:
        """bnexp decides to train in ``run_dir``: from here on the folder is written."""
        began.append(True)
        start.begin_training(hydra_dir, run_dir, cfg, held, resume)

    lock = None
    try:
        validate(cfg)  # before anything in the run directory changes (a refused attempt keeps it as it is)
        from bnexp.train import distributed  # torch: only once the config is valid (a typo is refused fast)
        from bnexp.train.stack_loop import member_train  # train(), or this run's share of a stack

        distributed.check_bn_config(cfg)  # BN settings against the number of torchrun replicas
        if resume is not False:
            _refuse_other_config(cfg, run_dir)
        done = start.complete_summary(run_dir, resume)
        if done is not None:
            return done
        lock = start.lock_or_refuse(run_dir, _print_error)
        if lock is None:
            if multirun:
                return None
            raise SystemExit(2)
        done = start.complete_summary(run_dir, resume, meanwhile=True)  # by another process while we waited
        if done is not None:
            return done
        if resume is not False:
            from bnexp.config.schema import resolved
            from bnexp.train.resume import refuse_foreign_checkpoint

            refuse_foreign_checkpoint(run_dir, resolved(cfg), distributed.env_world_size(),
                                      trust=bool(cfg.trainer.get("trust_checkpoint", False)))
        interrupts.raise_if_pending()  # a Ctrl-C that a finalizer swallowed during the imports above
        tell_followers(True)
        summary = member_train(cfg, run_dir, resume=resume is not False, on_begin=begin)  # alone, or in a stack
        if multirun:  # one line per job; the sweep ends on one table (bnexp.runfolders.sweepsummary)
            log.info("%s: %s, final test accuracy %s", run_dir.name, summary.get("status"),
                     summary.get("final_test_accuracy"))
        else:
            from bnexp.runfolders.sweepsummary import print_summary

            print_summary(summary)
        return summary
    except Interrupted as exc:
        sweep = sweep_resume_command(run_dir) if multirun else None
        if sweep in _SWEEPS_TOLD:  # a stack's runs stop together: the sweep's command once, not per run
            hint = "The sweep's resume command is above."
        elif sweep:
            _SWEEPS_TOLD.add(sweep)
            hint = f"Resume the sweep with: {sweep}"
        else:
            hint = resume_hint(run_dir, overrides, replicas=distributed.env_world_size())  # torchrun: N replicas
        _print_interrupted(f"interrupted ({exc}): checkpoint saved in {run_dir}. {hint}")
        raise SystemExit(128 + exc.signum)
    except KeyboardInterrupt:
        lock = _interrupted_before_training(run_dir, cfg, fresh, lock, overrides)
        raise SystemExit(130)
    except Exception as exc:
        user = _as_user_error(exc, run_dir)
        if user is not None:
            _print_error(str(user))
            if not began:  # refused before it began: an existing folder stays as it was
                if fresh and not (run_dir / "summary.json").exists():
                    _remove_refused_run_dir(run_dir, lock)  # leave no folder
                    lock = None
            else:
                _record_failure(run_dir, cfg, str(user), None)
                if (run_dir / "checkpoint.pt").exists() and not multirun:
                    print(resume_hint(run_dir, overrides, replicas=distributed.env_world_size()), file=sys.stderr)
            if multirun:
                return FailedRun(str(run_dir), str(user))
            raise SystemExit(2)
        tb = traceback.format_exc()
        if began and distributed.env_world_size() > 1 and replica_endings.a_collective_failed(exc):
            if not multirun:  # another replica ended: one line, not the collective's traceback; a sweep's
                replica_endings.hold_signals()  # next jobs keep their Ctrl-C
            _record_failure(run_dir, cfg, replica_endings.lost_replica_error(exc), tb)
            _print_error(replica_endings.lost_replica_line(run_dir, exc))
            if multirun:
                return FailedRun(str(run_dir), replica_endings.lost_replica_error(exc))
            raise SystemExit(1)
        if began or fresh:  # internal error: keep the traceback
            held.release()
            _record_failure(run_dir, cfg, f"{type(exc).__name__}: {exc}", tb)
        if multirun:
            log.error("run failed with an internal error; the sweep goes on:\n%s", tb)
            return FailedRun(str(run_dir), f"internal error {type(exc).__name__}: {exc}")
        raise
    finally:
        if not began:
            held.drop()
        if lock is not None:
            lock.release()


def _refuse_other_config(cfg, run_dir: Path) -> None:
    """:func:`bnexp.config.oneconfig.refuse_other_config` (a run folder holds one configuration)."""
    from bnexp.config.oneconfig import refuse_other_config

    refuse_other_config(cfg, run_dir)


def _interrupted_before_training(run_dir: Path, cfg, fresh: bool, lock, overrides=None):
    """Ctrl-C before the training loop took over the signal (validation, data loading): one line;
    a folder holding nothing yet is removed, an attempt in a kept folder is recorded. Returns the
    lock still to release (None once released)."""
    from bnexp.runfolders import rundir

    summary = rundir.read_summary(run_dir) or {}
    if fresh and not summary:
        _print_interrupted("interrupted (Ctrl-C) before training began; nothing was written.")
        _remove_refused_run_dir(run_dir, lock)
        return None
    if summary.get("status") == "running":
        _record_failure(run_dir, cfg, "interrupted (Ctrl-C) before training began", None)
    from bnexp.runfolders.resumecmd import resume_hint

    _print_interrupted(f"interrupted (Ctrl-C) before training began; {run_dir} is kept. "
                 + resume_hint(run_dir, overrides, "Resume or start it with"))
    return lock


def _remove_refused_run_dir(run_dir: Path, lock) -> None:
    """Remove the folder Hydra made for a run that was refused before it began."""
    import shutil

    if lock is not None:
        lock.release()
    for h in list(logging.getLogger().handlers):  # the run's train.log: detached, or a later record reopens it
        if isinstance(h, logging.FileHandler) and Path(h.baseFilename).parent == Path(run_dir).resolve():
            h.close(), logging.getLogger().removeHandler(h)
    shutil.rmtree(run_dir, ignore_errors=True)


def _record_failure(run_dir: Path, cfg, message: str, tb: str | None) -> None:
    """Record a failed attempt in summary.json, without ever losing checkpointed work.

    A run directory holding a checkpoint stays resumable: its status becomes (or stays)
    ``interrupted``, never ``failed``, and the attempt's error is kept under ``error``;
    re-running the original command resumes from the checkpoint. Without a checkpoint the
    status is ``failed`` (a sweep re-run starts that run over). A complete summary.json
    (``finished`` or ``diverged``) is never overwritten: the attempt's error goes to the log only.
    """
    from bnexp.runfolders import rundir

    try:
        prev = rundir.read_summary(run_dir) or {}
        if prev.get("status") in rundir.COMPLETE_STATUSES:  # the console has the message already
            _log_to_file_only(logging.WARNING, f"{run_dir} is complete (status {prev['status']}); its summary.json "
                                               f"is kept, this attempt's error was: {message}")
            return
        if (Path(run_dir) / "checkpoint.pt").exists():
            status = prev.get("status") if prev.get("status") == "interrupted" else "interrupted"
            prev.update({"status": status, "resumable": True, "error": message, "traceback": tb})
        else:
            prev.update({"status": "failed", "error": message, "traceback": tb})
        for k in ("lr", "seed"):
            prev.setdefault(k, cfg.get(k))
        rundir.write_json(run_dir / "summary.json", prev)
    except Exception:
        pass


_HYDRA_FLAGS = ("help", "hydra-help", "version", "cfg", "resolve", "package", "run", "multirun", "shell-completion",
                "config-path", "config-name", "config-dir", "experimental-rerun", "info")


def _parse_flags(args: list[str]):
    """Hydra's own command-line flags and the overrides, read with Hydra's parser; flags and
    overrides may come in any order (``bnexp train lr=0.1 -m seed=0,1``).

    Returns:
        (the parsed flags, the arguments for Hydra: the flags, each as ``--name`` or ``--name=value``,
        then the overrides).

    Raises:
        UserError: an unknown flag, or flags that do not go together (``-m`` with ``--cfg``).
    """
    import contextlib
    import io

    from hydra._internal.utils import get_args_parser

    err = io.StringIO()
    parser = get_args_parser()
    try:
        with contextlib.redirect_stderr(err):
            parsed = parser.parse_intermixed_args(args)
    except SystemExit:
        why = err.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1] if err.getvalue().strip() else "?"
        from bnexp.config.explain import dashed_key_hint

        hint = dashed_key_hint(args, _HYDRA_FLAGS)
        if hint:
            raise UserError(f"{why}: {hint}") from None
        raise UserError(f"{why} (bnexp train --help lists the options)") from None
    if parsed.multirun and (parsed.cfg or parsed.info or parsed.shell_completion):
        flag = "--cfg" if parsed.cfg else "--info" if parsed.info else "--shell-completion"
        raise UserError(f"{flag} shows one run's config and cannot be combined with -m/--multirun: drop -m and "
                        "give one value per key to see a sweep job's config.")
    flags = []
    for action in parser._actions:
        value = getattr(parsed, action.dest, None)
        if action.option_strings and action.dest != "overrides" and value not in (None, False, action.default):
            name = next((o for o in action.option_strings if o.startswith("--")), action.option_strings[0])
            flags.append(name if value is True else f"{name}={value}")
    return parsed, flags + list(parsed.overrides)


def train_main(args: list[str]) -> int:
    """``bnexp train ARGS``: read the arguments, then run the Hydra app.

    Raises:
        UserError, Hydra's and OmegaConf's errors: for :func:`main` to show as one line.
    """
    from bnexp.config.schema import CONF_DIR, hydra_overrides
    from bnexp.config.explain import parse_overrides
    from bnexp.runfolders.sweepjobs import sweep_failures

    if not CONF_DIR.is_dir():
        raise UserError(f"the config folder {CONF_DIR} is missing: reinstall bnexp from its source checkout "
                        "(pip install . or pip install -e .)")
    flags, args = _parse_flags(hydra_overrides(args))
    parse_overrides(flags.overrides)  # Hydra's grammar, with hints; a key given twice is refused
    if flags.help:
        from bnexp.config.usage import train_help

        print(train_help(flags.overrides))
        return 0
    if not (flags.hydra_help or flags.cfg or flags.info or flags.shell_completion):
        problem = check_output_location(args)  # bnexp.runfolders.paths
        if problem:
            raise UserError(problem)
    args, replica_dir = replica_arguments(args)
    if not (flags.hydra_help or flags.cfg or flags.info or flags.shell_completion):
        from bnexp.runfolders.start import hold_hydra_output_subdir

        args = hold_hydra_output_subdir(args)
    app = _hydra_train()
    saved, full_error = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv = ["bnexp train"] + args
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its errors to main() instead of printing them
    try:
        app()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
        if replica_dir is not None:
            import shutil

            shutil.rmtree(replica_dir, ignore_errors=True)
    return 1 if sweep_failures() else 0


def replica_arguments(args: list[str]) -> tuple[list[str], str | None]:
    """Adapt ``bnexp train`` arguments to a torchrun replica (``WORLD_SIZE`` > 1).

    Rank 0 runs as usual. A replica of rank > 0 gets Hydra settings that keep it from
    writing: an empty scratch folder as its Hydra run dir (deleted afterwards), no ``.hydra/``
    copy and no log file; it learns rank 0's run directory over the process group.

    Returns:
        (arguments, the scratch folder or None).

    Raises:
        UserError: ``-m`` under torchrun (a sweep of data-parallel runs: launch one torchrun per
            run, e.g. through hydra/launcher=slurm), or a malformed WORLD_SIZE/RANK.
    """
    if os.environ.get("WORLD_SIZE", "1").strip() == "1":  # not under torchrun: torch is not imported yet,
        return args, None                                    # so that a config error is refused fast
    from bnexp.train import distributed

    if distributed.env_world_size() <= 1:
        return args, None
    if "-m" in args or "--multirun" in args:
        raise UserError("bnexp train -m cannot run under torchrun: torchrun starts the replicas of ONE run. "
                        "Start one `python -m bnexp.train.torchrun ...` per run (or sweep single-process runs "
                        "with -m).")
    if distributed.env_rank() == 0:
        return args, None
    import tempfile

    scratch = tempfile.mkdtemp(prefix="bnexp-replica-")
    return args + [f"hydra.run.dir={scratch}", "hydra.output_subdir=null", "hydra/job_logging=disabled"], scratch


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bnexp`` console script: the one place errors become one line.

    A :class:`UserError` or an error of Hydra's composition or OmegaConf
    (:func:`bnexp.config.explain.explain`) -> ``bnexp: error: ...`` and exit code 2; Ctrl-C at any phase
    -> one line and exit code 130; any other exception is internal and keeps its traceback.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        with interrupts.caught():  # a Ctrl-C that lands in a finalizer is not lost
            code = _main(args)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's final flush
            return code
    except BrokenPipeError:  # the reader went away (`bnexp train --help | head -1`): nothing more to say
        return _reader_gone()
    except KeyboardInterrupt:
        _print_interrupted("interrupted (Ctrl-C).")
        return 130
    except Exception as exc:
        if _raised_by_ctrl_c(exc):  # e.g. a library's cleanup failing half-way (argparse's, on Python 3.11)
            _print_interrupted("interrupted (Ctrl-C).")
            return 130
        from bnexp.config.explain import explain

        message = None if _raised_in_a_job(exc) else explain(exc, args)  # overrides named as typed
        if message is None:  # an internal error: its traceback
            raise
        from bnexp.runfolders.sweepconfig import restore_refused_sweep  # a refused sweep ran no job:
        restore_refused_sweep()  # its folder keeps the multirun.yaml it had (nothing to do for other refusals)
        from bnexp.train.replica_endings import replica_refusal_line, silent_replica_rank

        rank = silent_replica_rank()
        line = message if rank is None else replica_refusal_line(rank, message)
        if line is not None:
            _print_error(line)
        return 2


def _reader_gone() -> int:
    """Exit code 1 when stdout's reader closed the pipe, without a traceback: stdout is pointed at
    ``os.devnull`` so that the interpreter's last flush of it cannot fail again (the recipe of Python's
    ``signal`` documentation, "Note on SIGPIPE")."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind sys.stdout (an embedding): nothing to redirect
        pass
    return 1


def _raised_by_ctrl_c(exc: BaseException) -> bool:
    """True when ``exc`` was raised while a KeyboardInterrupt was being handled (it is in ``exc``'s context
    chain): a ``finally`` block that fails because Ctrl-C stopped the code before it half-way."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def _raised_in_a_job(exc: BaseException) -> bool:
    """True when ``exc`` came out of :func:`run_job`, which handles every user error itself: what
    escapes it is internal, even an OmegaConf error."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code is run_job.__code__:
            return True
        tb = tb.tb_next
    return False


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        from bnexp.config.usage import usage

        print(usage())
        return 0 if argv else 2
    if argv[0] in ("--version", "-V"):
        print(f"bnexp {bnexp.__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if os.environ.get("WORLD_SIZE", "1") not in ("", "0", "1"):
        # a replica: torch's C++ side would print a stack of frames for a peer that does not come; bnexp
        # says it in one line (bnexp.train.distributed.setup). Read when torch loads; a user's value wins.
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    if cmd == "train":
        return train_main(rest)
    if cmd == "report":
        from bnexp.report import report_main

        return report_main(rest)
    raise UserError(f"unknown command {cmd!r}; the commands are train and report (see bnexp --help).")


if __name__ == "__main__":
    sys.exit(main())
