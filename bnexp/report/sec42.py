"""The tuned baseline of a single-budget CIFAR-10 rate grid (the issue 11 sweeps, superseded by the
budget-accuracy frontier of issue 19, :mod:`bnexp.report.frontier`): :func:`tuned_first` puts the
baseline configuration with the highest plateau accuracy first, for the Sec. 4.2 steps-to-target table
(:func:`bnexp.report.stats.sec42_table`, which takes the first ``baseline`` configuration it finds).

* *plateau accuracy* of a run: the mean of its last :data:`PLATEAU_EVALS` evaluations; of a
  configuration: the mean of that over its finished seeds.
* *the baseline*: among the configurations of experiment ``baseline``, the one with the highest
  plateau accuracy; :func:`baseline_grid` also says whether its rate lies inside the grid or at an edge.
"""

from __future__ import annotations

import numpy as np

from bnexp.report.groups import ConfigGroup
from bnexp.report.load import Run
from bnexp.report.stats import finite

PLATEAU_EVALS = 3


def curve(run: Run) -> tuple[list[int], list[float]]:
    """(steps, test accuracies) of a run's evaluations, by step (non-finite values left out)."""
    pts = [(int(r["step"]), float(r["test_accuracy"])) for r in run.metrics
           if isinstance(r.get("step"), int) and finite([r.get("test_accuracy")])]
    pts.sort()
    return [s for s, _ in pts], [a for _, a in pts]


def plateau(accs: list[float], k: int = PLATEAU_EVALS) -> float | None:
    """Mean of the last ``k`` values (None for an empty curve)."""
    return float(np.mean(accs[-k:])) if accs else None


def _finished(g: ConfigGroup) -> list[Run]:
    return [r for r in g.runs if r.status == "finished" and r.metrics]


def baseline_grid(groups: list[ConfigGroup]) -> dict | None:
    """The baseline's rate grid: every ``baseline`` configuration's rate and plateau; the best.

    Returns:
        None without baseline runs; else {"rates": [{"lr", "plateau", "seeds", "label"}] by rate,
        "best_lr", "best_label", "position": "inside" | "low edge" | "high edge" | "single rate"}.
    """
    rows = []
    for g in groups:
        runs = _finished(g)
        if g.experiment != "baseline" or not runs:
            continue
        per_seed = [plateau(curve(r)[1]) for r in runs]
        rows.append({"lr": g.lr, "plateau": float(np.mean(per_seed)), "seeds": len(runs), "label": g.label,
                     "key": g.key})
    if not rows:
        return None
    rows.sort(key=lambda r: (r["lr"] is None, r["lr"] or 0.0))
    best = max(range(len(rows)), key=lambda i: rows[i]["plateau"])
    position = ("single rate" if len(rows) == 1 else "low edge" if best == 0
                else "high edge" if best == len(rows) - 1 else "inside")
    return {"rates": rows, "best_lr": rows[best]["lr"], "best_label": rows[best]["label"],
            "best_key": rows[best]["key"], "position": position}


def tuned_first(groups: list[ConfigGroup]) -> list[ConfigGroup]:
    """``groups`` with the tuned baseline first among the baseline configurations (for
    :func:`bnexp.report.stats.sec42_table`, which takes the first ``baseline`` it finds)."""
    grid = baseline_grid(groups)
    if grid is None:
        return groups
    return sorted(groups, key=lambda g: g.key != grid["best_key"])


__all__ = ["PLATEAU_EVALS", "baseline_grid", "curve", "plateau", "tuned_first"]
