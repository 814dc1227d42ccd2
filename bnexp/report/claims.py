"""Claims instead of a tally (issue 20): each statement the report makes is one row with its quantity,
direction and threshold fixed in code before the run, the per-seed values, the seed mean with a
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
    x = np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)
    out = {"n": int(x.size), "mean": None, "std": None, "ci_low": None, "ci_high": None}
    if x.size == 0:
        return out
    out["mean"] = float(x.mean())
    if x.size < 2:
        return out
    out["std"] = float(x.std(ddof=1))
    if np.all(x == x[0]):
        out["ci_low"] = out["ci_high"] = float(x[0])
        return out
    res = sps.bootstrap((x,), np.mean, confidence_level=confidence, n_resamples=n_resamples,
                        method="percentile", random_state=np.random.default_rng(random_state))
    out["ci_low"], out["ci_high"] = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return out


def evaluate(claim: Claim, per_seed: Mapping[int, float | None], never_learned: list[int] | None = None,
             premise: str | None = None, missing: str | None = None) -> dict:
    """One claims-table row: the claim's fields, per-seed values, :func:`seed_interval`, verdict, reason.

    Args:
        claim: the claim, fixed before the run.
        per_seed: seed -> the quantity for that seed (None or NaN when missing: not counted).
        never_learned: seeds whose run(s) never left chance; any makes the verdict ``inconclusive``.
        premise: a reason the comparison does not exist; makes the verdict ``premise not met``.
        missing: what the records lack for this claim (e.g. "ks_first is not in the records");
            makes the verdict ``inconclusive`` with that reason (after ``premise``).

    Returns:
        dict with the keys of :class:`Claim` and "per_seed", "n", "mean", "std", "ci_low", "ci_high",
        "verdict" (one of :data:`VERDICTS`), "reason" (one sentence).
    """
    vals = {int(s): (None if v is None or not math.isfinite(float(v)) else float(v)) for s, v in per_seed.items()}
    row = asdict(claim) | {"per_seed": vals} | seed_interval(list(vals.values()))
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
        above, below = lo > t, hi < t
        if claim.direction == ">":
            good, bad_side = above, hi <= t
        else:
            good, bad_side = below, lo >= t
        if good:
            verdict, reason = SUPPORTED, f"the 95% interval lies {'above' if claim.direction == '>' else 'below'} {t:g}"
        elif bad_side:
            verdict, reason = NOT_SUPPORTED, f"the 95% interval lies on the wrong side of {t:g}"
        else:
            verdict, reason = INCONCLUSIVE, f"the 95% interval straddles {t:g}"
    row.update(verdict=verdict, reason=reason)
    return row


def by_seed(per_seed: Mapping) -> list[tuple]:
    """(seed, value) pairs of a per-seed map in seed order; the seeds are ints, or strings after a JSON round
    trip (report.json), so they are ordered as numbers (10 after 9)."""
    return sorted(per_seed.items(), key=lambda kv: int(kv[0]))


def claims_frame(rows: list[dict]) -> pd.DataFrame:
    """The claims table as a DataFrame, one row per claim: setting (when a row names one), claim, quantity,
    rule, per seed, mean, 95% interval, std (ddof=1), verdict, reason (numbers with 3 significant digits)."""
    def g(v):
        return "-" if v is None else f"{v:.3g}"

    settings = any(r.get("setting") for r in rows)  # rows of several settings (e.g. learning rates)
    return pd.DataFrame([{
        **({"setting": r.get("setting") or "-"} if settings else {}),
        "claim": r["name"], "quantity": r["quantity"], "rule": f"{r['direction']} {r['threshold']:g}",
        "per seed": ", ".join(f"{s}: {g(v)}" for s, v in by_seed(r["per_seed"])) or "-",
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
