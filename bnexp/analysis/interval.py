"""The one interval method for seed-mean claims: a Student-t interval over seeds, with censored seeds.

A two-sided ``level`` (95%) interval of the mean of n per-seed values (Student 1908; Casella & Berger,
Statistical Inference, Sec. 9.2.2): ``mean +- t_{(1 + level) / 2, n - 1} * s / sqrt(n)``, s the sample std.
``scale="raw"`` for differences; ``scale="log"`` for ratios (speedups): the interval of the mean per-seed
*log* ratio, exponentiated, so the estimate is the geometric mean (a ratio of steps is skewed; its log is
nearer normal). The percentile bootstrap is not used: with 3 seeds it lies inside the per-seed range, which
covers the median only 1 - 2 * 0.5^n of the time (75% at n = 3); the t interval's coverage at n = 3 and 5 is
checked by simulation in tests/test_interval.py.

Censored seeds: a run that never reached the target gives only a bound. A lower-bound seed (">=") opens
the interval's upper side (``high`` None, ``high_open``) and makes the estimate a lower bound; an
upper-bound seed ("<=") opens the lower side; an unknown seed ("?") or bounds in both directions open both
(no interval). The closed side is the t bound with the bounds at their values (its coverage is part of the
simulation test); an open side is never written as a number. Fewer than 2 seeds: no interval. The per-seed
range (``seed_min``, ``seed_max``, with their bound marks) is returned beside the interval, and why a side is
open or there is none as a code of :data:`REASONS` (the report words it: templates/verdicts.md.j2).

Entry points: :func:`seed_mean_interval` (the method), :func:`seed_values` (per-seed values that may be
:class:`bnexp.analysis.rules.Censored` bounds -> values, bounds and the interval: a claim's input) and
:func:`seed_interval` (the mean, sample std and interval of plain per-seed values: a table's cell); how an
interval is written is the report's (:func:`bnexp.report.fmt.format_interval`, ``interval_cell``, ``short_text``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Mapping, Sequence

import numpy as np

from bnexp.analysis.rules import DDOF, Bound, Censored, finite, stat

LEVEL = 0.95
EXACT, LOWER, UPPER, UNKNOWN = (Bound(n) for n in Bound.MARKS)  # the bounds a seed may carry
SCALES = ("raw", "log")
# why an interval has an open side or none (SeedInterval.reason): none, a seed's value unknown, bounds in both
# directions, fewer than 2 seeds, lower-bound seeds (the upper side open), upper-bound seeds (the lower side open)
REASONS = ("", "unknown", "both_sides", "few_seeds", "lower_bounds", "upper_bounds")


@lru_cache(maxsize=None)
def t_quantile(q: float, df: int) -> float:
    """The q quantile of Student's t with ``df`` degrees of freedom (:func:`scipy.stats.t.ppf`): 4.303 for
    (0.975, 2), 2.776 for (0.975, 4). Raises ValueError for df < 1 or q outside (0, 1)."""
    if df < 1 or not 0.0 < q < 1.0:
        raise ValueError(f"t quantile needs df >= 1 and 0 < q < 1, got df={df}, q={q}")
    from scipy import stats as sps

    return float(sps.t.ppf(q, df))


def t_bounds(values: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised Student-t interval of the mean over the last axis.

    Args:
        values: (..., n) float array, n >= 2, finite (one row per study, one column per seed).
        level: two-sided confidence level in (0, 1).

    Returns:
        (mean, low, high), each of shape (...): mean -+ t_{(1+level)/2, n-1} * s / sqrt(n), s the sample
        std (ddof=1), in the units of ``values``.

    Raises:
        ValueError: n < 2, non-finite values or a level outside (0, 1).
    """
    x = np.asarray(values, dtype=float)
    if x.ndim < 1 or x.shape[-1] < 2:
        raise ValueError(f"a t interval needs at least 2 values per study, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("a t interval needs finite values")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = x.shape[-1]
    mean = x.mean(axis=-1)
    half = t_quantile((1.0 + level) / 2.0, n - 1) * x.std(axis=-1, ddof=DDOF) / math.sqrt(n)
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class SeedInterval:
    """A seed-mean estimate with its interval and the per-seed range (module docstring): ``method``
    ("student-t, raw" / "student-t, log ratio"), ``scale``, ``level``, ``n`` seeds (bounds included) of
    which ``n_censored`` are bounds or unknown; ``estimate`` (mean or geometric mean, None when both sides
    are open) and its ``estimate_bound`` ("", ">=", "<=", "?"); ``low``, ``high`` on the claim's scale (None
    where open or n < 2) and ``low_open``, ``high_open``; the per-seed range ``seed_min``, ``seed_max`` and
    their marks ``seed_min_bound``, ``seed_max_bound``; ``reason``: why a side is open or there is no interval, a
    code of :data:`REASONS` ("" for none; the bounds it names are ``n_censored``), which the report words
    (:func:`bnexp.report.fmt.interval_reason`: a SeedInterval read back from report.json holds the words)."""

    method: str
    scale: str
    level: float
    n: int
    n_censored: int
    estimate: float | None
    estimate_bound: str
    low: float | None
    high: float | None
    low_open: bool
    high_open: bool
    seed_min: float | None
    seed_max: float | None
    seed_min_bound: str
    seed_max_bound: str
    reason: str

    def as_dict(self) -> dict:
        """The fields as a JSON-ready dict (report.json)."""
        return asdict(self)

    def side_of(self, threshold: float) -> str:
        """Where the interval lies against ``threshold`` (claim's scale, e.g. 1 for a ratio):
        "above" (low > threshold), "below" (high < threshold), else "straddles" (an open side, or
        n < 2, never lies on either side by itself)."""
        if self.low is not None and self.low > threshold:
            return "above"
        if self.high is not None and self.high < threshold:
            return "below"
        return "straddles"


def _marks(censored, n: int) -> list[Bound]:
    if censored is None:
        return [EXACT] * n
    if len(censored) != n:
        raise ValueError(f"censored has {len(censored)} entries for {n} values")
    try:
        return [Bound(c) for c in censored]
    except ValueError as exc:
        raise ValueError(f"censored entries must be one of '', '>=', '<=', '?' (or a bound's name) or None: {exc}") from None


def seed_mean_interval(values: Sequence[float | None], censored: Sequence[str | None] | None = None,
                       scale: str = "raw", level: float = LEVEL) -> SeedInterval:
    """The Student-t interval of a seed mean, censored seeds as bounds (module docstring).

    Args:
        values: one value per seed on the claim's scale (a ratio for ``scale="log"``, > 0; a difference
            or any additive quantity for "raw"). An unknown seed's value ("?") is ignored (may be None).
        censored: per seed a :class:`bnexp.analysis.rules.Bound`, by name or mark: None/"" (exact), ">=" or
            "lower" (the true value is at least this), "<=" or "upper" (at most this), "?" or "unknown"; None: every
            seed exact.
        scale: "raw" (interval of the mean) or "log" (of the mean log, exponentiated).
        level: the two-sided confidence level.

    Returns:
        a :class:`SeedInterval`.

    Raises:
        ValueError: no seeds; an unknown scale or censoring mark; a known value that is not finite, or
            not > 0 for ``scale="log"``; a level outside (0, 1).
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    marks = _marks(censored, len(values))
    if not marks:
        raise ValueError("an interval needs at least one seed")
    known = [(float(v), c) for v, c in zip(values, marks) if c != UNKNOWN]
    for v, _ in known:
        if not math.isfinite(v) or (scale == "log" and not v > 0):
            raise ValueError(f"per-seed values must be finite{' and > 0 for ratios' if scale == 'log' else ''}, "
                             f"got {v!r}")
    lower_bounds, upper_bounds = LOWER in marks, UPPER in marks
    unknown = UNKNOWN in marks
    low_open = upper_bounds or unknown
    high_open = lower_bounds or unknown
    n, n_cens = len(marks), sum(c != EXACT for c in marks)
    method = "student-t, log ratio" if scale == "log" else "student-t, raw"
    fwd, back = (np.log, np.exp) if scale == "log" else (np.asarray, lambda a: a)

    seed_min = seed_max = None
    min_mark = max_mark = EXACT
    if known:
        lo_v, lo_c = min(known, key=lambda vc: vc[0])
        hi_v, hi_c = max(known, key=lambda vc: vc[0])
        seed_min, seed_max, min_mark, max_mark = lo_v, hi_v, lo_c, hi_c

    estimate, bound = None, UNKNOWN
    if low_open and high_open:
        reason = "unknown" if unknown else "both_sides"
    else:
        x = fwd(np.array([v for v, _ in known]))
        estimate = float(back(x.mean()))
        bound = LOWER if high_open else UPPER if low_open else EXACT
        reason = ""
    low = high = None
    if estimate is not None and n < 2:
        reason = "few_seeds"
    elif estimate is not None:
        _, lo, hi = t_bounds(x, level)
        with np.errstate(over="ignore"):  # exp of a log-scale bound far out (a p-value's level near 1): inf
            low = None if low_open else float(back(lo))
            high = None if high_open else float(back(hi))
        if high_open:  # lower bounds only (both kinds open both sides): n_censored of them
            reason = "lower_bounds"
        elif low_open:
            reason = "upper_bounds"
    return SeedInterval(method=method, scale=scale, level=float(level), n=n, n_censored=n_cens,
                        estimate=estimate, estimate_bound=bound.mark, low=low, high=high, low_open=low_open,
                        high_open=high_open, seed_min=seed_min, seed_max=seed_max, seed_min_bound=min_mark.mark,
                        seed_max_bound=max_mark.mark, reason=reason)


def row_interval(row: dict) -> SeedInterval | None:
    """The :class:`SeedInterval` a claims row (live or read back from report.json) holds under "interval",
    None without one."""
    return SeedInterval(**row["interval"]) if row.get("interval") else None


def seed_interval(values, confidence: float = LEVEL) -> dict:
    """{"n", "mean", "std", "ci_low", "ci_high"} of per-seed values (NaN/None dropped): the mean, the sample
    std and the Student-t interval of the mean (:func:`bnexp.analysis.interval.seed_mean_interval`, raw scale);
    std and interval None for n < 2, every entry None for n = 0."""
    x = finite(values)
    out = {**stat(x), "ci_low": None, "ci_high": None}
    if x.size >= 2:
        iv = seed_mean_interval(list(x), level=confidence)
        out["ci_low"], out["ci_high"] = iv.low, iv.high
    return out


def seed_values(per_seed: Mapping, scale: str = "raw") -> tuple[dict, dict, SeedInterval | None]:
    """(values, bounds, interval) of per-seed values that may be :class:`bnexp.analysis.rules.Censored`
    bounds: values {seed: float or None (missing: not counted)}, bounds {seed: "lower" | "upper" |
    "unknown"}, and :func:`bnexp.analysis.interval.seed_mean_interval` of the counted seeds on ``scale``
    ("log" for ratios: a value <= 0 is not counted), None without any."""
    vals, bounds = {}, {}
    for s, v in per_seed.items():
        c = v if isinstance(v, Censored) else Censored(None if v is None or not math.isfinite(float(v)) else float(v))
        ok = c.value is not None and (scale == "raw" or c.value > 0)
        vals[int(s)] = c.value if ok else None
        if c.bound != "exact" and (ok or c.bound == "unknown"):
            bounds[int(s)] = c.bound
    counted = [s for s in vals if vals[s] is not None or bounds.get(s) == "unknown"]
    iv = seed_mean_interval([vals[s] for s in counted], [bounds.get(s) for s in counted],
                            scale) if counted else None
    return vals, bounds, iv
