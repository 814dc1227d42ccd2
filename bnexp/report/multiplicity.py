"""Multiplicity and power of a page's claims (docs/studies/PLAN.md, amendment items 3 and 4; docs/mnist/PLAN.md):
a Holm-adjusted verdict beside each claim's own, and the smallest effect each claim's seeds could detect.

* **p-value by interval inversion** (:func:`interval_p_value`): the smallest alpha at which the claim's own
  (1 - alpha) interval (:func:`bnexp.analysis.interval.seed_mean_interval`: the same method, seeds, scale and
  censoring; an open side never decides) lies wholly on one side of the threshold. It is found by bisection on
  the interval's level, so it is the project's interval inverted, not a second test. Without a closed side
  that could decide, or with fewer seeds than the claim needs, p = 1.
* **Holm's step-down procedure** (Holm 1979, "A simple sequentially rejective multiple test procedure"), the
  family being the page's claims (:func:`holm`): the i-th smallest of m p-values is adjusted to
  max_{j <= i} min(1, (m - j + 1) p_(j)).
* **Holm-adjusted verdict**: the claim's own verdict when its adjusted p-value is <= :data:`ALPHA`
  ("supported" or "not supported": the interval already lies on that side), else "inconclusive"; "premise not
  met" stays.
* **Detectable effect at 80% power** (:func:`detectable`): for n seeds with sample std s (of the log ratios for a
  ratio claim), the effect a two-sided one-sample Student-t test at 0.05 detects with 80% power,
  (t_{0.975, n-1} + t_{0.8, n-1}) s / sqrt(n) (the usual approximation, Cohen 1988 Ch. 2), as a ratio
  exp(...) on the log scale and as a difference on the raw scale.
"""

from __future__ import annotations

import math

import numpy as np

from bnexp.analysis.grid_edges import mark_of
from bnexp.analysis.interval import LEVEL, seed_mean_interval, t_quantile
from bnexp.analysis.rules import DDOF
from bnexp.report.claims import INCONCLUSIVE, MIN_SEEDS, NOT_SUPPORTED, PREMISE_NOT_MET, SUPPORTED, words
from bnexp.report.fmt import edge_mark

ALPHA = round(1 - LEVEL, 12)  # the family-wise error rate of a page: 0.05
POWER = 0.8
METHOD = words("holm_method", ALPHA)  # report.json's multiplicity "method", in templates/verdicts.md.j2
_MARK = {"lower": ">=", "upper": "<=", "unknown": "?"}


def _inputs(row: dict) -> tuple[list[float], list[str], str] | None:
    """(values, censoring marks, scale) of a claims row (:func:`bnexp.report.claims.evaluate`, live or read back
    from report.json), None without an interval."""
    iv = row.get("interval")
    if not iv:
        return None
    bounds = {str(k): b for k, b in (row.get("bounds") or {}).items()}
    vals, marks = [], []
    for s, v in row.get("per_seed", {}).items():
        b = bounds.get(str(s), "exact")
        if v is None and b != "unknown":
            continue
        vals.append(v)
        marks.append(_MARK.get(b, ""))
    return vals, marks, iv["scale"]


def interval_p_value(values, censored, scale: str, threshold: float, tol: float = 1e-7) -> float:
    """The smallest alpha at which the (1 - alpha) interval of
    :func:`bnexp.analysis.interval.seed_mean_interval` (``values``, ``censored``, ``scale``) lies wholly above or
    below ``threshold`` (the claim's scale: a ratio for "log"); 1.0 when no level's interval does (an open side
    faces the threshold, fewer than 2 seeds, no estimate).

    Args:
        values, censored, scale: as :func:`bnexp.analysis.interval.seed_mean_interval`.
        threshold: the claim's threshold (> 0 for "log").
        tol: the bisection's precision on alpha.

    Raises:
        ValueError: from :func:`bnexp.analysis.interval.seed_mean_interval`.
    """
    def outside(alpha: float) -> bool:
        return seed_mean_interval(values, censored, scale, level=1.0 - alpha).side_of(threshold) != "straddles"

    if not outside(1.0 - 1e-9):  # even the narrowest interval straddles: no alpha decides
        return 1.0
    lo, hi = 0.0, 1.0 - 1e-9  # outside(hi) holds; outside grows with alpha
    if outside(1e-15):
        return 0.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if outside(mid) else (mid, hi)
    return hi


def claim_p_value(row: dict) -> float | None:
    """:func:`interval_p_value` of a claims row at its threshold; None for a row that was not tested (premise
    not met, or no seeds); 1.0 for a row the records leave undecidable (a missing measure, a seed that never
    left chance, fewer than the claim's minimum seeds)."""
    if row.get("verdict") == PREMISE_NOT_MET:
        return None
    got = _inputs(row)
    if got is None:
        return None
    if row.get("verdict") == INCONCLUSIVE and row.get("n", 0) < row.get("min_seeds", MIN_SEEDS):
        return 1.0
    vals, marks, scale = got
    p = interval_p_value(vals, marks, scale, float(row["threshold"]))
    if row.get("verdict") == INCONCLUSIVE and p <= ALPHA:  # decided by something other than the interval
        return 1.0
    return p


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm-adjusted p-values of one family, in the input's order; None (not tested) stays None and is not
    counted in m."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m, out, running = len(tested), [None] * len(pvalues), 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def detectable(row: dict) -> float | None:
    """The smallest effect the claim's seeds could detect with :data:`POWER` (module docstring): a ratio for a
    log-scale claim, a difference in the claim's units otherwise; None under 2 seeds with a known value or
    without an interval."""
    got = _inputs(row)
    if got is None:
        return None
    vals, marks, scale = got
    x = np.array([float(v) for v, c in zip(vals, marks) if c != "?" and v is not None], dtype=float)
    if scale == "log":
        x = np.log(x[x > 0])
    n = x.size
    if n < 2:
        return None
    half = (t_quantile(1 - ALPHA / 2, n - 1) + t_quantile(POWER, n - 1)) * x.std(ddof=DDOF) / math.sqrt(n)
    return float(math.exp(half)) if scale == "log" else float(half)


def adjust_page(rows: list[dict]) -> dict:
    """Add to every claims row of one page (the family) "p_value", "holm_p", "holm_verdict" and "detectable"
    (module docstring), in place.

    Returns:
        report.json's ``multiplicity``: {"method", "alpha", "power", "claims", "claims_tested" (rows with a
        p-value: the family's m)}.
    """
    ps = [claim_p_value(r) for r in rows]
    for r, p, adj in zip(rows, ps, holm(ps)):
        v = r.get("verdict")
        held = adj is not None and adj <= ALPHA and v in (SUPPORTED, NOT_SUPPORTED)
        r.update(p_value=p, holm_p=adj, detectable=detectable(r),
                 holm_verdict=v if held or v == PREMISE_NOT_MET else INCONCLUSIVE)
    return {"method": METHOD, "alpha": ALPHA, "power": POWER, "claims": len(rows),
            "claims_tested": sum(p is not None for p in ps)}


EDGE_BOUND, BUDGET_BOUND, EVALUATION_BOUND = "edge-bound", "budget-bound", "evaluation-bound"


def _bound_causes(row: dict) -> set[str]:
    """The causes of a claims row's bounds when every seed with a value is only a bound ("budget" where a row
    records none: report.json written before the causes were), else the empty set."""
    bounds = {str(k): b for k, b in (row.get("bounds") or {}).items()}
    causes = {str(k): c for k, c in (row.get("causes") or {}).items()}
    seeds = [str(s) for s, v in (row.get("per_seed") or {}).items() if v is not None]
    if not seeds or any(bounds.get(s, "exact") == "exact" for s in seeds):
        return set()
    return {causes.get(s, "budget") for s in seeds}


def budget_bound(row: dict) -> bool:
    """Every seed with a value of a claims row is only a bound, and some seed's bound is a target missed within
    the budget: the claim's value is set by the step budget (docs/studies/PLAN.md, amendment item 2)."""
    return "budget" in _bound_causes(row)


def evaluation_bound(row: dict) -> bool:
    """Every seed with a value of a claims row is only a bound, and some seed's bound is a target met by a run's
    first evaluation after step 0 (:meth:`bnexp.analysis.rules.Censored.steps`): the claim's value is set by the
    evaluation interval, as :func:`budget_bound`'s by the budget."""
    return "first_evaluation" in _bound_causes(row)


def mark_claims(rows: list[dict], record: list[dict]) -> None:
    """Add to each claims row, in place, "marks" (the grid-edge marks of the rate choices it rests on:
    :func:`bnexp.analysis.grid_edges.mark_of` of its "bn_choice", "no_bn_choice" and "choices", with the designs'
    ``record``; :data:`BUDGET_BOUND` when :func:`budget_bound`, :data:`EVALUATION_BOUND` when
    :func:`evaluation_bound`) and "marked_verdict" (the verdict, with ", edge-bound", ", budget-bound" and / or ",
    evaluation-bound" after a "supported" or "not supported": never a plain verdict then)."""
    for r in rows:
        choices = [r.get(k) for k in ("bn_choice", "no_bn_choice")] + list(r.get("choices") or [])
        codes = [c for ch in choices if ch for c in [mark_of(ch, record)] if c]
        marks = list(dict.fromkeys(edge_mark(c) for c in codes))
        marks += [m for m, bound in ((BUDGET_BOUND, budget_bound), (EVALUATION_BOUND, evaluation_bound)) if bound(r)]
        kinds = ([EDGE_BOUND] if codes else []) + [m for m in (BUDGET_BOUND, EVALUATION_BOUND) if m in marks]
        v = r.get("verdict")
        r["marks"] = marks
        r["marked_verdict"] = words("marked_verdict", v, kinds) if kinds and v in (SUPPORTED, NOT_SUPPORTED) else v
