"""The command that resumes one run folder, or a whole sweep, printed when a run stops early (Ctrl-C,
SIGTERM, a full disk).

A plain re-run of ``bnexp train ...`` does not resume: Hydra names a new, timestamped run folder
each time (``hydra.run.dir`` in ``conf/config.yaml``). The command that resumes a run is its own
overrides plus ``hydra.run.dir=<its folder>``: ``trainer.resume=null`` (the default) continues an
unfinished run found in the run folder (:func:`bnexp.cli.run_job`). A sweep (``-m``) is resumed by its
own command with ``hydra.sweep.dir=<its folder>``: every job then finds its folder again, skips it when
complete and resumes it when interrupted (docs/reliability.md).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

_BN = re.compile(r"^([+~]{0,2}bn=)(.*)$")
_PLAIN = re.compile(r"^[A-Za-z0-9_./+-]+$")  # a value Hydra's override grammar reads as it is


def as_typed(override: str) -> str:
    """An override as the user types it: without the quotes bnexp puts around ``bn``'s true/false values for
    Hydra (:func:`bnexp.config.schema.quote_bn_overrides`); ``bn='true','false'`` -> ``bn=true,false``."""
    m = _BN.match(override)
    return m.group(1) + re.sub(r"'(true|false)'", r"\1", m.group(2)) if m else override


def _hydra_value(value: str) -> str:
    """``value`` as one value in Hydra's override grammar: a run folder named by its overrides holds
    ``=`` and ``,``, which must be inside a quoted string (Hydra: backslash escapes a quote)."""
    if _PLAIN.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def launcher(replicas: int = 1) -> str:
    """What starts a run of ``replicas`` processes: ``bnexp train``, or for a data-parallel run (N > 1) torchrun
    through bnexp's wrapper with N replicas (``bnexp.train.torchrun.launch``'s command): a checkpoint resumes only
    with the number of replicas that wrote it."""
    if replicas <= 1:
        return "bnexp train"
    return f"python -m bnexp.train.torchrun --standalone --nproc-per-node={replicas} -m bnexp train"


def resume_command(run_dir: Path | str, overrides: list[str] | None, replicas: int = 1) -> str:
    """The shell command that resumes the run in ``run_dir``.

    Args:
        run_dir: the run's folder (made absolute, so the command works from any folder).
        overrides: the job's task overrides (Hydra's ``hydra.overrides.task``), e.g. ``["bn='false'", "seed=1"]``;
            ``hydra.*`` overrides are not among them, and ``hydra.run.dir`` is added.
        replicas: N of a data-parallel run (torchrun); the command then starts N replicas (:func:`launcher`).

    Returns:
        e.g. ``bnexp train bn=false seed=1 hydra.run.dir=/home/me/outputs/runs/2026-11-27_15-00-00_bn=false,seed=1``,
        each argument quoted for a POSIX shell only where it needs it, the folder also for Hydra's
        grammar when its name holds ``=``, ``,`` or other special characters.
    """
    args = [as_typed(o) for o in (overrides or [])]
    args.append(f"hydra.run.dir={_hydra_value(str(Path(run_dir).absolute()))}")
    return launcher(replicas) + " " + " ".join(shlex.quote(a) for a in args)


def sweep_resume_command(run_dir: Path | str) -> str | None:
    """The shell command that resumes the sweep ``run_dir`` belongs to (``run_dir``: one of its run folders, or
    the sweep folder itself): ``bnexp train -m`` with the sweep's overrides and Hydra overrides as its
    ``multirun.yaml`` holds them (in ``run_dir`` or the nearest folder above it that has one), less those bnexp
    and ``-m`` add (``hydra.mode``, ``hydra.output_subdir``, the output subdir's
    ``env_set``), and ``hydra.sweep.dir=<that folder>`` (absolute). Every override is given as the user wrote it,
    its interpolations unresolved (``hydra.sweep.subdir='lr=${lr},seed=${seed}'`` names each job's own folder).
    None when no readable multirun.yaml is found.
    """
    import yaml

    from bnexp.runfolders.start import OUTPUT_SUBDIR_ENV

    here = Path(run_dir).absolute()
    sweep = next((p for p in (here, *here.parents) if (p / "multirun.yaml").is_file()), None)
    if sweep is None:
        return None
    try:  # read as written, not through OmegaConf, which would resolve an override's interpolations: the
        # scripts' hydra.sweep.subdir='...,seed=${seed}' would name one job's folder for every job of the sweep
        overrides = yaml.safe_load((sweep / "multirun.yaml").read_text())["hydra"]["overrides"]
        task = [str(o) for o in overrides.get("task") or []]
        hydra = [str(o) for o in overrides.get("hydra") or []]
    except Exception:  # unreadable yaml: the caller says how to resume the one run instead
        return None
    added = ("hydra.mode=", "hydra.sweep.dir=", "hydra.output_subdir=", f"+hydra.job.env_set.{OUTPUT_SUBDIR_ENV}=")
    args = [as_typed(o) for o in task]
    args += [o for o in hydra if not o.startswith(added)]
    args.append(f"hydra.sweep.dir={_hydra_value(str(sweep))}")
    return "bnexp train -m " + " ".join(shlex.quote(a) for a in args)


def resume_hint(run_dir: Path | str, overrides: list[str] | None, what: str = "Resume this run with",
                replicas: int = 1) -> str:
    """The line that tells how to resume: ``"<what>: <the command of resume_command>"``."""
    return f"{what}: {resume_command(run_dir, overrides, replicas)}"
