"""Claims instead of a tally (every section of the report): each statement the report makes is one row with
its quantity, direction and threshold fixed in code before the run, the per-seed values, the seed mean with
its 95% Student-t interval over seeds (:mod:`bnexp.analysis.interval`; on log ratios for speedups), the
per-seed range, the sample std (:data:`bnexp.analysis.rules.DDOF`), and a verdict (:func:`evaluate`):

* ``premise not met`` -- the comparison the claim needs does not exist, so the claim counts for no account;
* ``inconclusive`` -- a measure the claim needs is not in the records, fewer than ``min_seeds`` seeds, a seed
  whose run never left chance, or the interval straddles the threshold (an open, censored side counts only
  where the bound decides: it never lies on either side by itself);
* ``supported`` -- the whole interval lies on the claimed side of the threshold;
* ``not supported`` -- the whole interval lies on the other side (or on the threshold).

The reasons' words are templates/verdicts.md.j2's macros (:func:`words`); this module passes the numbers.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping

from bnexp.analysis.interval import seed_values
from bnexp.analysis.rules import Censored, stat
from bnexp.report.fmt import interval_reason, macro

SUPPORTED = "supported"
NOT_SUPPORTED = "not supported"
INCONCLUSIVE = "inconclusive"
PREMISE_NOT_MET = "premise not met"
VERDICTS = (SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, PREMISE_NOT_MET)
MIN_SEEDS = 3
WORDS = "verdicts.md.j2"  # the verdicts' words (bnexp/report/templates/)


def words(name: str, *args) -> str:
    """The text of the macro ``name`` of templates/verdicts.md.j2 (a claims row's reason, quantity or note) for
    ``args`` (numbers, seeds, labels, codes; each macro's comment names them)."""
    return macro(name, *args, template=WORDS)


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


def evaluate(claim: Claim, per_seed: Mapping[int, float | Censored | None], never_learned: list[int],
             premise: str | None = None, missing: str | None = None, scale: str = "raw") -> dict:
    """One claims-table row: the claim's fields, per-seed values, the seed interval, verdict (module docstring),
    reason.

    Args:
        claim: the claim, fixed before the run.
        per_seed: seed -> the quantity for that seed (None or NaN when missing: not counted), or a
            :class:`bnexp.analysis.rules.Censored` value: a bound enters the interval as a bound (it opens one
            side, :mod:`bnexp.analysis.interval`), a seed with no known side opens both.
        never_learned: seeds whose run(s) never left chance (:data:`bnexp.analysis.rules.CHANCE`); any makes the
            verdict ``inconclusive``. Required, so that no claim skips the chance rule: ``[]`` only where every
            run left chance, or where the claim's threshold is chance itself ("does not train").
        premise: a reason the comparison does not exist; makes the verdict ``premise not met``.
        missing: what the records lack for this claim; makes the verdict ``inconclusive`` (after ``premise``).
        scale: "raw" (differences, accuracies) or "log" (ratios: the interval of the mean log ratio).

    Returns:
        dict with the keys of :class:`Claim` and "per_seed", "bounds" ({seed: "lower" | "upper" | "unknown"}),
        "causes" ({seed: the :attr:`bnexp.analysis.rules.Censored.cause` of each bounded seed, e.g. "budget"}), "n",
        "mean" (the estimate: the geometric mean for ratios), "std" (the sample std on the raw scale,
        ratios as ratios, over the seeds whose side is known: a seed bounded on both sides says nothing about
        the spread; None under two such seeds), "ci_low", "ci_high" (None where open or n < 2), "interval"
        (:meth:`bnexp.analysis.interval.SeedInterval.as_dict` with its reason in words,
        :func:`bnexp.report.fmt.interval_reason`; None without seeds), "verdict" (one of :data:`VERDICTS`),
        "reason" (one sentence, templates/verdicts.md.j2).
    """
    vals, bounds, iv = seed_values(per_seed, scale)
    std = stat([v for s, v in vals.items() if v is not None and bounds.get(s) != "unknown"])["std"]
    causes = {s: v.cause for s, v in per_seed.items()
              if isinstance(v, Censored) and v.cause and bounds.get(s, "exact") != "exact"}
    row = asdict(claim) | {"per_seed": vals, "bounds": bounds, "causes": causes, "n": iv.n if iv else 0,
                           "mean": iv.estimate if iv else None, "std": std,
                           "ci_low": iv.low if iv else None, "ci_high": iv.high if iv else None,
                           "interval": iv.as_dict() | {"reason": interval_reason(iv)} if iv else None}
    bad, t, up = sorted(never_learned), claim.threshold, claim.direction == ">"
    if premise:
        verdict, reason = PREMISE_NOT_MET, premise
    elif missing:
        verdict, reason = INCONCLUSIVE, missing
    elif bad:
        verdict, reason = INCONCLUSIVE, words("never_left_chance", bad)
    elif row["n"] < claim.min_seeds:
        verdict, reason = INCONCLUSIVE, words("too_few_seeds", row["n"], claim.min_seeds)
    elif iv.estimate is None:
        verdict, reason = INCONCLUSIVE, words("no_interval", interval_reason(iv))
    else:
        lo, hi = iv.low, iv.high
        if (lo is not None and lo > t) if up else (hi is not None and hi < t):
            verdict, side = SUPPORTED, "above" if up else "below"
        elif (hi is not None and hi <= t) if up else (lo is not None and lo >= t):
            verdict, side = NOT_SUPPORTED, "wrong"
        else:
            verdict, side = INCONCLUSIVE, "straddles"
        reason = words("interval_side", side, t, interval_reason(iv))
    return row | {"verdict": verdict, "reason": reason}
