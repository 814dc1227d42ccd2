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
range (``seed_min``, ``seed_max``, with their bound marks) is returned beside the interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from bnexp.analysis.rules import DDOF

LEVEL = 0.95
EXACT, LOWER, UPPER, UNKNOWN = "", ">=", "<=", "?"
CENSOR_MARKS = (EXACT, LOWER, UPPER, UNKNOWN)
SCALES = ("raw", "log")


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
    their marks ``seed_min_bound``, ``seed_max_bound``; ``reason``: "" or why a side is open / no interval."""

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


def _marks(censored, n: int) -> list[str]:
    if censored is None:
        return [EXACT] * n
    marks = [EXACT if c is None else str(c) for c in censored]
    if len(marks) != n:
        raise ValueError(f"censored has {len(marks)} entries for {n} values")
    bad = sorted({c for c in marks if c not in CENSOR_MARKS})
    if bad:
        raise ValueError(f"censored entries must be one of '', '>=', '<=', '?' or None; got {bad}")
    return marks


def seed_mean_interval(values: Sequence[float | None], censored: Sequence[str | None] | None = None,
                       scale: str = "raw", level: float = LEVEL) -> SeedInterval:
    """The Student-t interval of a seed mean, censored seeds as bounds (module docstring).

    Args:
        values: one value per seed on the claim's scale (a ratio for ``scale="log"``, > 0; a difference
            or any additive quantity for "raw"). An unknown seed's value ("?") is ignored (may be None).
        censored: per seed None/"" (exact), ">=" (the true value is at least this), "<=" (at most
            this) or "?" (unknown); None: every seed exact.
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
        reason = "a seed's value is unknown" if unknown else "seeds bounded from both sides"
    else:
        x = fwd(np.array([v for v, _ in known]))
        estimate = float(back(x.mean()))
        bound = LOWER if high_open else UPPER if low_open else EXACT
        reason = ""
    low = high = None
    if estimate is not None and n < 2:
        reason = "fewer than 2 seeds"
    elif estimate is not None:
        _, lo, hi = t_bounds(x, level)
        low = None if low_open else float(back(lo))
        high = None if high_open else float(back(hi))
        if high_open:
            reason = f"{marks.count(LOWER)} seed(s) only a lower bound: the upper side is open"
        elif low_open:
            reason = f"{marks.count(UPPER)} seed(s) only an upper bound: the lower side is open"
    return SeedInterval(method=method, scale=scale, level=float(level), n=n, n_censored=n_cens,
                        estimate=estimate, estimate_bound=bound, low=low, high=high, low_open=low_open,
                        high_open=high_open, seed_min=seed_min, seed_max=seed_max, seed_min_bound=min_mark,
                        seed_max_bound=max_mark, reason=reason)


def _num(v: float, digits: int) -> str:
    return f"{v:.{digits}g}"


def format_interval(iv: SeedInterval, unit: str = "", digits: int = 3) -> str:
    """One line for a page: estimate, interval, per-seed range and n, e.g.

    "1.98x, 95% t interval [0.76x, 5.18x]; per seed 1.5x to 3.08x (n = 3)",
    ">= 2.3x, 95% t interval [1.21x, open: 1 seed(s) only a lower bound]; per seed 1.5x to >= 4x (n = 3)".

    Args:
        iv: the interval.
        unit: appended to every number ("x" for ratios, "" or " points" otherwise).
        digits: significant digits.
    """
    def num(v, mark=EXACT):
        return f"{mark + ' ' if mark else ''}{_num(v, digits)}{unit}"

    if iv.estimate is None:
        head = "unknown"
    else:
        head = num(iv.estimate, iv.estimate_bound)
    pct = f"{100 * iv.level:g}%"
    if iv.n < 2 or (iv.low_open and iv.high_open):
        body = f"no {pct} interval ({iv.reason})"
    else:
        lo = "open" if iv.low_open else num(iv.low)
        hi = "open" if iv.high_open else num(iv.high)
        note = f": {iv.reason.split(':')[0]}" if iv.reason else ""
        body = f"{pct} t interval [{lo}, {hi}{note}]" if iv.high_open else (
            f"{pct} t interval [{lo}{note}, {hi}]" if iv.low_open else f"{pct} t interval [{lo}, {hi}]")
    rng = ("per seed n/a" if iv.seed_min is None else
           f"per seed {num(iv.seed_min, iv.seed_min_bound)} to {num(iv.seed_max, iv.seed_max_bound)}")
    return f"{head}, {body}; {rng} (n = {iv.n})"


def interval_cell(row: dict, digits: int = 3, unit: str = "") -> str:
    """The interval of a claims row (``ci_low``, ``ci_high``; None where open or n < 2) as a table cell:
    "[0.76, 5.16]", "[1.21, open]" (a side open because of censored seeds), "-" without an interval."""
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if lo is None and hi is None:
        return "-"
    return "[" + ", ".join("open" if v is None else f"{_num(v, digits)}{unit}" for v in (lo, hi)) + "]"


def row_interval(row: dict) -> SeedInterval | None:
    """The :class:`SeedInterval` a claims row (live or read back from report.json) holds under "interval",
    None without one."""
    return SeedInterval(**row["interval"]) if row.get("interval") else None


def short_text(iv: SeedInterval | None, digits: int = 3) -> str:
    """The estimate and its interval in a sentence of several: "1.62 [1.6, 1.67]", ">= 2.3 [1.21, open]",
    "n/a" without a value (:func:`format_interval` adds the per-seed range and n)."""
    if iv is None or iv.estimate is None:
        return "n/a"
    head = f"{iv.estimate_bound + ' ' if iv.estimate_bound else ''}{_num(iv.estimate, digits)}"
    cell = interval_cell({"ci_low": iv.low, "ci_high": iv.high}, digits)
    return head if cell == "-" else f"{head} {cell}"
