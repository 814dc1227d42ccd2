"""One count per seed: two runs of one configuration, seed and step budget (a seed retrained into the same
sweep folder, a copied run folder) are one sample, not two. The report keeps the best by :func:`keep_order`
(completed, most SGD steps, newest summary.json) and drops the others, each with one warning naming both folders,
listed in report.json's ``duplicate_runs`` (:func:`drop_duplicate_seeds`).
"""

from __future__ import annotations

import logging
from pathlib import Path

from bnexp.analysis.runs import Run
from bnexp.runfolders.rundir import SUMMARY

log = logging.getLogger("bnexp.report")


def _steps(run: Run) -> float:
    """The SGD steps a run trained: summary.json's ``step``, else its last evaluation's, else 0."""
    step = run.summary.get("step")
    if step is None and run.metrics:
        step = run.metrics[-1].get("step")
    return float(step or 0)


def _mtime(run: Run) -> float:
    """When the run last wrote its summary.json (its folder's time without one); 0 when unreadable."""
    for p in (Path(run.path) / SUMMARY, Path(run.path)):
        try:
            return p.stat().st_mtime
        except OSError:
            continue
    return 0.0


def _budget(run: Run):
    """``trainer.max_steps``, else the summary's ``max_steps`` (a budget ladder whose configs lack the key)."""
    v = run.config.get("trainer.max_steps", run.summary.get("max_steps"))
    return None if v is None else float(v) if isinstance(v, (int, float)) else str(v)


def keep_order(run: Run) -> tuple:
    """Sort key, best first: completed, then most steps, then newest summary.json, then path."""
    return (not run.completed, -_steps(run), -_mtime(run), str(run.path))


def drop_duplicate_seeds(groups) -> list[dict]:
    """Remove from each group's ``runs`` (:class:`bnexp.report.groups.ConfigGroup`, changed in place) every run
    whose seed and step budget another run of the group has, keeping the best by :func:`keep_order` (runs
    without a known seed are left alone). Returns one ``{"configuration", "seed", "kept", "dropped"}`` record
    per dropped run (folders as strings), each also logged as one warning."""
    dropped = []
    for g in groups:
        by_seed: dict[tuple, list[Run]] = {}
        for r in g.runs:
            if r.seed is not None:
                by_seed.setdefault((r.seed, _budget(r)), []).append(r)
        for (seed, _), runs in by_seed.items():
            keep, *rest = sorted(runs, key=keep_order)
            for r in rest:
                log.warning("%s and %s are both seed %d of %s: counted once, kept %s (%s, %d steps), dropped %s "
                            "(%s, %d steps)", keep.path, r.path, seed, g.label or "the configuration", keep.path,
                            keep.status, _steps(keep), r.path, r.status, _steps(r))
                dropped.append({"configuration": g.label, "seed": seed, "kept": str(keep.path),
                                "dropped": str(r.path)})
            gone = {id(r) for r in rest}
            g.runs = [r for r in g.runs if id(r) not in gone]
    return dropped
