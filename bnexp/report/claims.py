"""Claims instead of a tally (every section of the report): each statement the report makes is one row with
its quantity, direction and threshold fixed in code before the run, the per-seed values, the seed mean with a
bootstrap 95% interval over seeds, the sample std (ddof=1), and a verdict.

Verdicts (:func:`evaluate`):

* ``premise not met`` -- the comparison the claim needs does not exist (e.g. no noisy-BN strength
  shifts more than no BN), so the claim counts for no account;
* ``inconclusive`` -- a measure the claim needs is not in the records (runs written before it
  existed), fewer than ``min_seeds`` seeds, a seed whose run never left chance, or the interval
  straddles the threshold;
* ``supported`` -- the whole interval lies on the claimed side of the threshold;
* ``not supported`` -- the whole interval lies on the other side (or on the threshold).

The interval is the percentile bootstrap of the mean over seeds (:func:`scipy.stats.bootstrap`, fixed
random state, so a report is reproducible). With 3 seeds it is necessarily wide: that is the point,
a 3-seed verdict is only "supported" when every resample of the seeds agrees.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping

import numpy as np
import pandas as pd
from scipy import stats as sps

from bnexp.report.fmt import md_table
from bnexp.report.rules import PREFIX, Censored, finite, stat

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
PREMISE_NOT_MET = "premise not met"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, PREMISE_NOT_MET)
MIN_SEEDS = 3
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Claim:
    """One statement, fixed before the run.

    Attributes:
        name: what the report says, e.g. "BN reduces shift".
        quantity: what each seed contributes, e.g. "no-BN / BN scale-free W1 from start, last layer".
        direction: ">" (the claim holds when the quantity exceeds ``threshold``) or "<".
        threshold: the value the interval must clear, in the quantity's units (e.g. 1.0 for a ratio).
        min_seeds: fewer seeds than this give ``inconclusive``.

    Raises:
        ValueError: a direction other than ">" or "<", or a non-finite threshold.
    """

    name: str
    quantity: str
    direction: str
    threshold: float
    min_seeds: int = MIN_SEEDS

    def __post_init__(self):
        if self.direction not in (">", "<"):
            raise ValueError(f"claim {self.name!r}: direction must be '>' or '<', got {self.direction!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"claim {self.name!r}: threshold must be finite, got {self.threshold!r}")


def seed_interval(values, confidence: float = CONFIDENCE, n_resamples: int = 9999,
                  random_state: int = 0) -> dict:
    """Mean, sample std (ddof=1) and percentile-bootstrap interval of the mean of per-seed values.

    Args:
        values: the per-seed values (floats; NaN/None are dropped).
        confidence: the interval's confidence level (0.95).
        n_resamples: bootstrap resamples.
        random_state: the bootstrap's seed (a report is reproducible).

    Returns:
        {"n", "mean", "std", "ci_low", "ci_high"}; std is None for n < 2, the interval None for n < 2;
        equal values give a zero-width interval at the value. Every entry None for n = 0.
    """
    x = finite(values)
    out = {**stat(x), "ci_low": None, "ci_high": None}
    if x.size < 2 or np.all(x == x[0]):
        if x.size >= 2:
            out["ci_low"] = out["ci_high"] = float(x[0])
        return out
    res = sps.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                        method="percentile", random_state=np.random.default_rng(random_state))
    out["ci_low"], out["ci_high"] = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return out


def evaluate(claim: Claim, per_seed: Mapping[int, float | Censored | None], never_learned: list[int] | None = None,
             premise: str | None = None, missing: str | None = None) -> dict:
    """One claims-table row: the claim's fields, per-seed values, :func:`seed_interval`, verdict, reason.

    Args:
        claim: the claim, fixed before the run.
        per_seed: seed -> the quantity for that seed (None or NaN when missing: not counted), or a
            :class:`bnexp.report.rules.Censored` value: a bound enters only where it decides the side of the
            threshold (:meth:`~bnexp.report.rules.Censored.usable`); the reason names the seeds whose value
            is a bound ("bounds") and those left out because of one.
        never_learned: seeds whose run(s) never left chance; any makes the verdict ``inconclusive``.
        premise: a reason the comparison does not exist; makes the verdict ``premise not met``.
        missing: what the records lack for this claim (e.g. "ks_first is not in the records");
            makes the verdict ``inconclusive`` with that reason (after ``premise``).

    Returns:
        dict with the keys of :class:`Claim` and "per_seed", "bounds" ({seed: "lower" | "upper"} of the
        values that are bounds), "n", "mean", "std", "ci_low", "ci_high", "verdict" (one of
        :data:`VERDICTS`), "reason" (one sentence).
    """
    vals, bounds, dropped = {}, {}, {}
    for s, v in per_seed.items():
        c = v if isinstance(v, Censored) else Censored(None if v is None or not math.isfinite(float(v)) else float(v))
        vals[int(s)] = c.usable(claim.direction, claim.threshold)
        if c.bound != "exact" and vals[int(s)] is not None:
            bounds[int(s)] = c.bound
        elif c.bound != "exact":
            dropped[int(s)] = c.why or "no value"
    row = asdict(claim) | {"per_seed": vals, "bounds": bounds} | seed_interval(list(vals.values()))
    bad = sorted(never_learned or [])
    if premise:
        verdict, reason = PREMISE_NOT_MET, premise
    elif missing:
        verdict, reason = INCONCLUSIVE, missing
    elif bad:
        verdict, reason = INCONCLUSIVE, (f"seed(s) {', '.join(map(str, bad))} never left chance: train longer "
                                         "(trainer.max_steps) or at a higher rate (lr) so that every run learns")
    elif row["n"] < claim.min_seeds:
        verdict, reason = INCONCLUSIVE, f"{row['n']} seed(s), fewer than {claim.min_seeds}"
    else:
        lo, hi, t = row["ci_low"], row["ci_high"], claim.threshold
        good = lo > t if claim.direction == ">" else hi < t
        bad_side = hi <= t if claim.direction == ">" else lo >= t
        if good:
            verdict, reason = SUPPORTED, f"the 95% interval lies {'above' if claim.direction == '>' else 'below'} {t:g}"
        elif bad_side:
            verdict, reason = NOT_SUPPORTED, f"the 95% interval lies on the wrong side of {t:g}"
        else:
            verdict, reason = INCONCLUSIVE, f"the 95% interval straddles {t:g}"
    if not premise and not missing:  # the bounds used are marked ">=" / "<=" in the per-seed values
        reason += "".join(f"; seed {s} left out: {why}, a bound that does not decide the side of the threshold"
                          for s, why in dropped.items())
    row.update(verdict=verdict, reason=reason)
    return row


def by_seed(per_seed: Mapping) -> list[tuple]:
    """(seed, value) pairs of a per-seed map in seed order; the seeds are ints, or strings after a JSON round
    trip (report.json), so they are ordered as numbers (10 after 9)."""
    return sorted(per_seed.items(), key=lambda kv: int(kv[0]))


def per_seed_text(row: dict, fmt=lambda v: f"{v:.3g}", unit: str = "") -> str:
    """The per-seed values of a claims row, live or read back from report.json: "1: 2.80, 2: >= 3.00, 3: -"
    (">=" / "<=": a bound, :data:`bnexp.report.rules.PREFIX`; "-": no value); "-" without seeds."""
    bounds = row.get("bounds") or {s: "lower" for s in row.get("lower_bound_seeds", [])}  # older rows: lower only
    bounds = {str(k): b for k, b in bounds.items()}
    return ", ".join(f"{s}: " + ("-" if v is None else f"{PREFIX[bounds.get(str(s), 'exact')]}{fmt(v)}{unit}")
                     for s, v in by_seed(row["per_seed"])) or "-"


def claims_frame(rows: list[dict]) -> pd.DataFrame:
    """The claims table as a DataFrame, one row per claim: setting (when a row names one), claim, quantity,
    rule, per seed, mean, 95% interval, std (ddof=1), verdict, reason (numbers with 3 significant digits)."""
    def g(v):
        return "-" if v is None else f"{v:.3g}"

    settings = any(r.get("setting") for r in rows)  # rows of several settings (e.g. learning rates)
    return pd.DataFrame([{
        **({"setting": r.get("setting") or "-"} if settings else {}),
        "claim": r["name"], "quantity": r["quantity"], "rule": f"{r['direction']} {r['threshold']:g}",
        "per seed": per_seed_text(r, g),
        "mean": g(r["mean"]),
        "95% interval": "-" if r["ci_low"] is None else f"[{g(r['ci_low'])}, {g(r['ci_high'])}]",
        "std (ddof=1)": g(r["std"]), "verdict": r["verdict"], "reason": r["reason"]} for r in rows])


def claims_md(rows: list[dict]) -> list[str]:
    """report.md lines of the claims table (pandas ``to_markdown`` through :func:`bnexp.report.fmt.md_table`,
    "|" escaped), or [] without rows."""
    if not rows:
        return []
    frame = claims_frame(rows)
    return [*md_table(list(frame.columns), frame.values.tolist()), ""]
