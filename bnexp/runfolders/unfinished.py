"""An unfinished sweep: some of its runs are incomplete (interrupted, or still running) or some jobs of its
``bnexp train -m`` call never started (Ctrl-C before they began), read from its run folders and its
``multirun.yaml``. ``bnexp report`` then advises the command that resumes it, the one Ctrl-C printed
(:func:`bnexp.runfolders.resumecmd.sweep_resume_command`), not more seeds: a seed added in a new folder would
leave the sweep's own runs undone (docs/reliability.md, resuming a sweep).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from bnexp.runfolders.resumecmd import resume_command, sweep_resume_command
from bnexp.runfolders.neutral_keys import IGNORED_FOR_RESUME
from bnexp.runfolders.rundir import run_overrides
from bnexp.runfolders.runnames import read_sweep_overrides

MULTIRUN = "multirun.yaml"
NAMED = 3  # incomplete runs named in the advice; the rest are counted


def job_key(overrides: list[str]) -> frozenset | None:
    """One job's overrides as a comparable set of (key, value): ``hydra.*`` overrides and result-neutral keys
    left out (:data:`bnexp.runfolders.neutral_keys.IGNORED_FOR_RESUME`: a complete sweep run again with
    ``trainer.num_threads=1`` skips its runs, whose folders keep the first call's overrides), quotes and case
    dropped (a job's ``bn='true'`` is ``bn=true``), a deletion's value None. None when Hydra's override
    grammar refuses them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(
            [o for o in overrides if not o.lstrip("+~").startswith((*IGNORED_FOR_RESUME, "hydra/"))])
        return frozenset((o.get_key_element(), None if o.is_delete() else
                          str(o.get_value_element_as_str()).strip("'\"").lower()) for o in parsed)
    except Exception:  # a grammar error: this run cannot be matched to a job
        return None


def sweep_jobs(sweep_dir: Path) -> list[frozenset] | None:
    """The jobs of the last ``bnexp train -m`` call into ``sweep_dir`` (its ``multirun.yaml``,
    :func:`bnexp.runfolders.runnames.read_sweep_overrides`), expanded as Hydra's basic sweeper expands them
    (every combination of the swept values), each as :func:`job_key`; None without a readable multirun.yaml
    or when its overrides cannot be expanded."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = read_sweep_overrides(sweep_dir)
    if overrides is None:
        return None
    try:
        parsed = OverridesParser.create().parse_overrides(
            [o for o in overrides if not o.lstrip("+~").startswith(("hydra.", "hydra/"))])
        jobs = [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]
    except Exception:  # a grammar error or a sweep the basic sweeper cannot expand: jobs unknown
        return None
    keys = [job_key(job) for job in jobs]
    return None if None in keys else keys


def _sweep_root(run_dir: Path) -> Path | None:
    """The nearest folder above ``run_dir`` with a multirun.yaml: the sweep that started the run (None: a
    single run)."""
    return next((p for p in Path(run_dir).absolute().parents if (p / MULTIRUN).is_file()), None)


def unfinished_advice(runs, sweep_dir: Path) -> str | None:
    """The advice for a sweep folder whose sweeps are unfinished, else None.

    Args:
        runs: the runs the report counts (:class:`bnexp.analysis.runs.Run`, one per configuration and seed).
        sweep_dir: the folder ``bnexp report`` was given.

    Returns:
        e.g. "The sweep is unfinished: 1 run incomplete (bn=true,seed=1); 2 jobs not started. Resume it with:
        bnexp train -m bn=true,false seed=0,1 hydra.sweep.dir=/tmp/sw4, then bnexp report /tmp/sw4." A run is
        incomplete when its status is (:func:`bnexp.analysis.runs.load_run`); a job has not started when its
        sweep's multirun.yaml lists it (:func:`sweep_jobs`) and no run folder of that sweep holds its
        ``.hydra/overrides.yaml`` (checked only when some run of the sweep has one). The command is the sweep's
        resume command (:func:`bnexp.runfolders.resumecmd.sweep_resume_command`: every job finds its folder
        again, skips it when complete, resumes it when interrupted), a single run's own
        (:func:`bnexp.runfolders.resumecmd.resume_command`) when it belongs to no sweep; one per sweep.
    """
    by_root: dict[Path | None, list] = {}
    for run in runs:
        by_root.setdefault(_sweep_root(run.path), []).append(run)
    incomplete, unstarted, commands = [], 0, []
    for root, members in by_root.items():
        bad = [r for r in members if r.status == "incomplete"]
        seen = {job_key(o) for r in members if (o := run_overrides(r.path)) is not None}
        jobs = sweep_jobs(root) if root is not None and seen else None
        missing = len([j for j in jobs if j not in seen]) if jobs else 0
        incomplete += bad
        unstarted += missing
        if not bad and not missing:
            continue
        cmd = sweep_resume_command(root) if root is not None else None
        cmds = [cmd] if cmd else [resume_command(r.path, run_overrides(r.path)) for r in bad]
        commands += [c for c in cmds if c not in commands]
    if not commands:
        return None
    names = [Path(r.path).name for r in incomplete[:NAMED]] + (
        [f"and {len(incomplete) - NAMED} more"] if len(incomplete) > NAMED else [])
    parts = ([f"{len(incomplete)} run{'' if len(incomplete) == 1 else 's'} incomplete ({', '.join(names)})"]
             if incomplete else []) + (
        [f"{unstarted} job{'' if unstarted == 1 else 's'} not started"] if unstarted else [])
    return (f"The sweep is unfinished: {'; '.join(parts)}. Resume it with: {'; '.join(commands)}, then bnexp "
            f"report {shlex.quote(str(sweep_dir))}.")
