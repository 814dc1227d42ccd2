"""The ``bnexp`` command line: ``bnexp train [-m] [overrides]`` and ``bnexp report SWEEP_DIR``.

``bnexp train`` is a Hydra application: Hydra owns the override syntax, multirun
(``-m``), launchers and ``--help``. The one thing done before Hydra sees the
arguments: ``bn`` is a config group whose options are named ``true`` and
``false``, and Hydra's grammar would read a bare ``true`` as a boolean, so the
values of ``bn=...`` overrides are quoted (``bn=true,false`` -> ``bn='true','false'``).

Exit codes: 0 success; 2 a user error (bad override or config value, missing or
corrupt data, unwritable output folder), printed as one paragraph without a
traceback; 1 an internal error, with its traceback.
"""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

import bnexp
from bnexp.config import CONF_DIR, quote_bn_overrides

log = logging.getLogger("bnexp")

USAGE = """\
bnexp {version}: reproduce and explain Batch Normalization (Ioffe & Szegedy, 2015).

Usage:
  bnexp train [key=value ...]        one training run (defaults: the paper's Fig. 1 MNIST setup)
  bnexp train -m key=v1,v2 ...       a Hydra multirun (sweep) over the given values
  bnexp train --help                 every config group and option with its default
  bnexp report SWEEP_DIR             tables and figures from a sweep's run directories

Config groups:
{groups}
Top-level switches: bn=true|false|noisy  act=sigmoid|relu  lr=FLOAT  seed=INT
Examples:
  bnexp train
  bnexp train model=cnn bn=true act=relu lr=0.05
  bnexp train -m bn=true,false seed=0,1,2 trainer.max_steps=5000
  bnexp train +experiment=bn_x5 scale=cpu data.verify_checksums=false    (CIFAR-10, paper Sec. 4.2)
Sweep scripts: scripts/reproduce_mnist.sh, scripts/reproduce_cifar.sh, scripts/ics_study.sh
Data: data.root=PATH or BNEXP_DATA_ROOT=PATH (default ~/.cache/bnexp/data); data.download=true fetches.
Outputs: outputs/runs/... and outputs/sweeps/...; view with: tensorboard --logdir outputs
"""

_job_started = False


def config_groups() -> dict[str, list[str]]:
    """{group: [options]} from the YAML files under conf/ (hydra's own groups excluded)."""
    groups: dict[str, list[str]] = {}
    for d in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"):
        groups[d.name] = sorted(f.stem for f in d.glob("*.yaml"))
    return groups


def _hydra_train():
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    @hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
    def train_app(cfg):
        global _job_started
        _job_started = True
        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        return run_job(cfg, Path(hc.runtime.output_dir), multirun, list(hc.overrides.task))

    return train_app


def _print_error(msg: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]bnexp: error:[/] {msg}", highlight=False, soft_wrap=True)


def run_job(cfg, run_dir: Path, multirun: bool, overrides: list[str] | None = None):
    """Run one job (one training run) in ``run_dir``; the Hydra task function's body.

    - a run whose summary.json says it is complete (finished or diverged) is skipped, so a
      re-run of a sweep does only what is left and never overwrites a finished run;
    - an unfinished run with a checkpoint (killed, interrupted) resumes from it; a failed
      run starts over; ``trainer.resume=false`` always starts over, ``trainer.resume=true``
      also looks for the newest unfinished run with the same overrides beside ``run_dir``;
    - a lock file keeps two processes out of one run directory.

    User errors: single run -> one message and exit code 2; in a multirun the job is
    recorded as ``failed`` and the sweep goes on. Internal errors: recorded as ``failed``
    with the traceback in summary.json; re-raised in a single run (traceback kept).
    SIGINT/SIGTERM: checkpoint saved, status ``interrupted``, exit code 128 + signal.
    """
    from bnexp import rundir
    from bnexp.config import sparse_record_warnings, validate
    from bnexp.errors import UserError
    from bnexp.trainer import Interrupted, train

    resume = cfg.trainer.resume
    if resume and not multirun and not (run_dir / "checkpoint.pt").exists():
        found = rundir.find_resumable(run_dir, overrides or [])
        if found is not None:
            log.info("trainer.resume=true: continuing the unfinished run in %s", found)
            (run_dir / "RESUMED_IN.txt").write_text(f"this command resumed the run in {found}\n")
            run_dir = found
    if rundir.is_complete(run_dir):
        s = rundir.read_summary(run_dir)
        log.info("%s is already complete (status %s): skipped", run_dir, s.get("status"))
        return s
    lock = None
    try:
        try:
            rundir.check_writable(run_dir)
        except OSError as exc:
            raise UserError(f"cannot write the run directory {run_dir} ({exc.strerror or exc}). Choose a "
                            "writable place with hydra.run.dir=PATH (or hydra.sweep.dir=PATH), or free "
                            "disk space.") from None
        lock = rundir.RunLock(run_dir)
        if not lock.acquire():
            _print_error(f"{run_dir} is in use by another bnexp process (pid {lock.holder()}); "
                         "this job leaves it alone.")
            if multirun:
                return None
            raise SystemExit(2)
        previous = rundir.read_summary(run_dir) or {}
        if resume is False or previous.get("status") == "failed":
            rundir.clear_partial_outputs(run_dir, checkpoint=True)
        elif not (run_dir / "checkpoint.pt").exists():
            rundir.clear_partial_outputs(run_dir)
        validate(cfg)
        for warning in sparse_record_warnings(cfg):
            log.warning("%s", warning)
        summary = train(cfg, run_dir, resume=resume is not False)
        print_summary(summary)
        return summary
    except UserError as exc:
        _print_error(str(exc))
        logging.getLogger("bnexp").error("%s", exc)
        _record_failure(run_dir, cfg, str(exc), None)
        if multirun:
            return None
        raise SystemExit(2)
    except Interrupted as exc:
        _print_error(f"interrupted ({exc}): checkpoint saved in {run_dir}; re-run the same command to resume.")
        raise SystemExit(128 + exc.signum)
    except KeyboardInterrupt:
        raise SystemExit(130)
    except Exception as exc:  # internal error: keep the traceback
        tb = traceback.format_exc()
        _record_failure(run_dir, cfg, f"{type(exc).__name__}: {exc}", tb)
        if multirun:
            log.error("run failed with an internal error; the sweep goes on:\n%s", tb)
            return None
        raise
    finally:
        if lock is not None:
            lock.release()


def print_summary(summary: dict) -> None:
    """The end-of-run rich table: status, accuracies, steps-to-target, time."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bnexp run: {summary.get('status')}", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("run dir", str(summary.get("run_dir")))
    table.add_row("config", f"model={summary.get('model')} bn={str(summary.get('bn')).lower()} "
                            f"act={summary.get('act')} lr={summary.get('lr'):g} seed={summary.get('seed')}")
    table.add_row("steps", f"{summary.get('step'):,} / {summary.get('max_steps'):,}")
    if summary.get("diverged_step"):
        table.add_row("diverged at step", f"{summary['diverged_step']:,}")
    table.add_row("final test accuracy", f"{summary.get('final_test_accuracy', float('nan')):.4f}")
    table.add_row("best test accuracy", f"{summary.get('best_test_accuracy', float('nan')):.4f} "
                                        f"(step {summary.get('best_step', 0):,})")
    for target, step in (summary.get("steps_to_target") or {}).items():
        table.add_row(f"steps to {float(target):.0%}", f"{step:,}" if step is not None else "not reached")
    table.add_row("wall time", f"{summary.get('wall_time_s', 0):.1f} s ({summary.get('steps_per_s') or 0:.0f} steps/s)")
    Console().print(table)


def _record_failure(run_dir: Path, cfg, message: str, tb: str | None) -> None:
    from bnexp import rundir

    try:
        prev = rundir.read_summary(run_dir) or {}
        prev.update({"status": "failed", "error": message, "traceback": tb})
        for k in ("lr", "seed"):
            prev.setdefault(k, cfg.get(k))
        rundir.write_json(run_dir / "summary.json", prev)
    except Exception:
        pass


def check_output_location(args: list[str]) -> str | None:
    """Check, before Hydra creates it, that the run (or sweep) folder can be created.

    Looks at ``hydra.run.dir=``/``hydra.sweep.dir=`` overrides (default: ``outputs`` in the
    current folder). Returns an error message, or None when the location is usable.
    """
    import os

    multirun = "-m" in args or "--multirun" in args
    key = "hydra.sweep.dir=" if multirun else "hydra.run.dir="
    target = Path("outputs")
    for a in args:
        if a.startswith(key):
            target = Path(a[len(key):].strip("'\""))
    if "${" in str(target):
        return None
    p = target.resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        return (f"cannot create the output folder {target}: {p} is a file, not a folder. Choose another "
                f"place with {key}PATH.")
    if not os.access(p, os.W_OK):
        return (f"cannot create the output folder {target}: {p} is not writable (permissions or a "
                f"read-only disk). Choose another place with {key}PATH.")
    return None


def train_main(args: list[str]) -> int:
    """``bnexp train ARGS``: run the Hydra app; map Hydra's config errors to exit code 2."""
    if not CONF_DIR.is_dir():
        _print_error(f"the config folder {CONF_DIR} is missing: install bnexp from its source checkout "
                     "with pip install -e .")
        return 2
    if not any(a in ("--help", "-h", "--hydra-help", "--info", "--cfg", "-c") for a in args):
        problem = check_output_location(args)
        if problem:
            _print_error(problem)
            return 2
    global _job_started
    _job_started = False
    app = _hydra_train()
    saved = sys.argv
    sys.argv = ["bnexp train"] + quote_bn_overrides(args)
    try:
        app()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code == 1 and not _job_started:
            return 2  # Hydra already printed the composition/override error
        return code
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``bnexp`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        groups = "\n".join(f"  {g:11s} {('+' if g == 'experiment' else '') + g}={'|'.join(opts)}"
                           for g, opts in config_groups().items() if g != "schema")
        print(USAGE.format(version=bnexp.__version__, groups=groups))
        return 0 if argv else 2
    if argv[0] in ("--version", "-V"):
        print(f"bnexp {bnexp.__version__}")
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "train":
        return train_main(rest)
    if cmd == "report":
        from bnexp.report import report_main

        return report_main(rest)
    _print_error(f"unknown command {cmd!r}; the commands are train and report (see bnexp --help).")
    return 2


if __name__ == "__main__":
    sys.exit(main())
