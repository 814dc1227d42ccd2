"""One count per seed: a sweep folder can hold two runs of the same configuration and seed (a seed retrained
by a second ``bnexp train -m`` call into the same folder, a copied run folder). Their results are one sample,
not two, so the report keeps one of them (:func:`drop_duplicate_seeds`) and says which it dropped.

The rule: among the runs of one configuration (:class:`bnexp.report.groups.ConfigGroup`) with one seed (and one
step budget), keep
the completed run (finished or diverged) with the most SGD steps, then the newest summary.json; the others
are dropped, each with one warning naming both folders, and listed in report.json's ``duplicate_runs``.
"""

from __future__ import annotations

import logging
from pathlib import Path

from bnexp.report.load import Run
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
    """The run's step budget (``trainer.max_steps``, else the summary's ``max_steps``): runs of one group that
    differ in it (a budget ladder whose config files lack the key) are not duplicates."""
    v = run.config.get("trainer.max_steps", run.summary.get("max_steps"))
    return None if v is None else float(v) if isinstance(v, (int, float)) else str(v)


def keep_order(run: Run) -> tuple:
    """Sort key, best first: completed, then most steps, then newest summary.json, then path."""
    return (not run.completed, -_steps(run), -_mtime(run), str(run.path))


def drop_duplicate_seeds(groups) -> list[dict]:
    """Remove from each group's ``runs`` every run whose seed and step budget another run of the group has
    (runs without a known seed are left alone), keeping the best by :func:`keep_order`.

    Args:
        groups: :class:`bnexp.report.groups.ConfigGroup` list; changed in place.

    Returns:
        One ``{"configuration", "seed", "kept", "dropped"}`` record per dropped run (folders as strings),
        each also logged as one warning on the ``bnexp`` logger.
    """
    dropped = []
    for g in groups:
        by_seed: dict[tuple, list[Run]] = {}
        for r in g.runs:
            if r.seed is not None:
                by_seed.setdefault((r.seed, _budget(r)), []).append(r)
        for (seed, _), runs in by_seed.items():
            if len(runs) < 2:
                continue
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
