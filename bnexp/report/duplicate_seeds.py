"""One count per seed: two runs of one configuration, seed and step budget (a seed retrained into the same
sweep folder, a copied run folder) are one sample, not two. The report keeps the best by :func:`keep_order`
(completed, most SGD steps, newest summary.json) and drops the others, each with one warning naming both folders,
listed in report.json's ``duplicate_runs`` (:func:`drop_duplicate_seeds`). Everything it compares is a column of
the per-run table (:func:`bnexp.analysis.runs.run_table`: seed, status, budget_set, steps_done, written, path).
"""

from __future__ import annotations

import logging

import pandas as pd

from bnexp.runfolders.rundir import COMPLETE_STATUSES

log = logging.getLogger("bnexp.report")


def _budget(v):
    """A run's ``budget_set`` as a comparable key: a number as a float, other values as text, None as None."""
    return None if v is None else float(v) if isinstance(v, (int, float)) else str(v)


def keep_order(row: dict) -> tuple:
    """Sort key of a per-run table row, best first: completed, then most steps, then newest summary.json, then
    path."""
    return (row["status"] not in COMPLETE_STATUSES, -row["steps_done"], -row["written"], str(row["path"]))


def drop_duplicate_seeds(groups, table: pd.DataFrame) -> list[dict]:
    """Remove from each group's ``runs`` (:class:`bnexp.report.groups.ConfigGroup`, changed in place) every run
    whose seed and step budget another run of the group has, keeping the best by :func:`keep_order` of its row
    in ``table`` (the sweep's per-run table, index :attr:`bnexp.analysis.runs.Run.id`); runs without a known seed
    are left alone. Returns one ``{"configuration", "seed", "kept", "dropped"}`` record per dropped run (folders
    as strings), each also logged as one warning."""
    dropped = []
    for g in groups:
        by_seed: dict[tuple, list[dict]] = {}
        for r in g.runs:
            row = {**table.loc[r.id].to_dict(), "id": r.id}
            if row["seed"] is not None and not pd.isna(row["seed"]):
                by_seed.setdefault((int(row["seed"]), _budget(row["budget_set"])), []).append(row)
        for (seed, _), rows in by_seed.items():
            keep, *rest = sorted(rows, key=keep_order)
            for r in rest:
                log.warning("%s and %s are both seed %d of %s: counted once, kept %s (%s, %d steps), dropped %s "
                            "(%s, %d steps)", keep["path"], r["path"], seed, g.label or "the configuration",
                            keep["path"], keep["status"], keep["steps_done"], r["path"], r["status"], r["steps_done"])
                dropped.append({"configuration": g.label, "seed": seed, "kept": keep["path"], "dropped": r["path"]})
            gone = {r["id"] for r in rest}
            g.runs = [r for r in g.runs if r.id not in gone]
    return dropped
