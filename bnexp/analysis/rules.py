"""The report's rules, each stated once: when a run left chance, the std over seeds, how a value that is
only a bound (a target not reached within the budget) enters a ratio and a claim and how it is written,
the normalizer vocabulary and how a config option is read. Every section of the report uses these.

* **Chance** (:data:`CHANCE`): a run *left chance* when its best test accuracy is above
  ``1 / NUM_CLASSES + 0.05`` (15% for MNIST's and CIFAR-10's 10 classes: 5 points above guessing).
  A run that never did makes a claim about it inconclusive; a claim "does not train" uses it as threshold.
  A *diverged* run's final test and train accuracy are chance, ``1 / NUM_CLASSES``, in every section
  (:func:`bnexp.analysis.runs.run_table`); its best accuracy stays what it scored before it diverged.
* **Std** (:data:`DDOF`): every std over seeds is the sample std (ddof=1); one value has none ("(1 seed)").
* **Bounds** (:class:`Censored`): a run that never reached a target counts as its budget, a *lower* bound
  on its steps. A ratio of bounds is a bound (:meth:`Censored.__truediv__`); in a claim a bound opens that
  side of the seed interval (:mod:`bnexp.analysis.interval`); it is written ">= 3.00x" (:meth:`Bound.written`, the
  one way a bound becomes text). Against a threshold a bound decides only on its own side (:meth:`Censored.above`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bnexp.config.checks import option_value

NUM_CLASSES = 10  # MNIST and CIFAR-10
CHANCE = round(1 / NUM_CLASSES + 0.05, 12)  # best test accuracy at or below it: the run never left chance (15%)
DDOF = 1  # the sample std over seeds, in every table and claim (the report's words: templates/rules_and_bounds.md.j2)


def finite(values) -> np.ndarray:
    """The finite numbers among ``values`` (None, NaN, inf and non-numbers left out) as a float array."""
    out = []
    for v in values:
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f) and not isinstance(v, bool):
            out.append(f)
    return np.asarray(out, dtype=float)


def optional(v, kind=float):
    """``kind(v)``, or None for a missing value (None, NaN)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else kind(v)


def stat(values) -> dict:
    """{"n", "mean", "std"} of the finite ``values`` (seeds): std is the sample std (:data:`DDOF`), None
    for fewer than two values; mean None without values."""
    x = finite(values)
    return {"n": int(x.size), "mean": float(x.mean()) if x.size else None,
            "std": float(x.std(ddof=DDOF)) if x.size > DDOF else None}


class Bound(str):
    """Which side of a value is known, the one type every section uses: "exact", "lower" (the true value is at least
    the number), "upper" (at most) or "unknown" (bounds on both sides of a ratio: no side is known). A bound is its
    name (a ``str``: ``Bound("lower") == "lower"``, and JSON writes the name); report.json's intervals record it by
    its :attr:`mark` ("", ">=", "<=", "?"), and ``Bound(">=")`` reads a mark back. :meth:`written` is the one way a
    bound is written into text.

    Raises:
        ValueError: neither a bound's name nor its mark (None and "" are "exact").
    """

    MARKS = {"exact": "", "lower": ">=", "upper": "<=", "unknown": "?"}
    _PREFIX = {"exact": "", "lower": ">= ", "upper": "<= ", "unknown": "~"}

    def __new__(cls, v: str | None = None) -> Bound:
        name = "exact" if v in (None, "") else next((n for n, m in cls.MARKS.items() if v in (n, m)), None)
        if name is None:
            raise ValueError(f"a bound is one of {', '.join(cls.MARKS)} or a mark {', '.join(map(repr, cls.MARKS.values()))}"
                             f"; got {v!r}")
        return super().__new__(cls, name)

    @property
    def mark(self) -> str:
        """The bound's mark in report.json's intervals: "" (exact), ">=", "<=" or "?"."""
        return self.MARKS[self]

    def flipped(self) -> Bound:
        """The bound of the reciprocal: lower <-> upper (exact and unknown stay)."""
        return Bound({"lower": "upper", "upper": "lower"}.get(self, self))

    def written(self, number: str) -> str:
        """``number`` (already formatted, with its unit) as the pages write this bound: ">= 3.00x", "<= 0.50x",
        "~3.00x" (unknown), "3.00x" (exact)."""
        return self._PREFIX[self] + number


@dataclass(frozen=True)
class Censored:
    """A per-seed value that may be only a bound.

    Attributes:
        value: the number (steps, examples, a ratio), None when unknown.
        bound: "exact", "lower" (the true value is at least ``value``), "upper" (at most) or "unknown"
            (bounds on both sides of a ratio: no side is known).
        cause: why the value is a bound or missing, as a code: "budget" (a target not reached within ``budget``
            steps), "first_evaluation" (reached by the run's first evaluation after step 0, at step ``budget``:
            the evaluations cannot tell how early, so the steps are only an upper bound), "no_budget" (not
            reached, budget unknown) or None. The report writes it (:func:`bnexp.report.fmt.censored_why`,
            templates/rules_and_bounds.md.j2).
        budget: the steps behind ``cause``: the budget ("budget"), the first evaluation's step
            ("first_evaluation"); None otherwise.
    """

    value: float | None
    bound: Bound = Bound("exact")
    cause: str | None = None
    budget: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "bound", Bound(self.bound))  # "lower" or ">=" alike: one type

    @classmethod
    def steps(cls, reached: float | None, budget: float | None, scale: float = 1.0,
              first_eval: float | None = None) -> Censored:
        """Steps (or examples with ``scale`` = m) to a target, a target being reached at the first evaluation at
        or above it: exact when reached after an earlier evaluation below it; an upper bound when reached at
        ``first_eval``, the run's first evaluation after step 0 (the target was met somewhere in (0, first_eval]:
        a ratio of two such values is set by the evaluation interval, not by training); else the ``budget`` as a
        lower bound ("censored at the budget"); unknown without a budget."""
        if reached is not None and not (isinstance(reached, float) and math.isnan(reached)):
            if first_eval is not None and not math.isnan(float(first_eval)) and float(reached) <= float(first_eval):
                return cls(float(reached) * scale, "upper", "first_evaluation", float(first_eval))
            return cls(float(reached) * scale)
        if budget is None or (isinstance(budget, float) and math.isnan(budget)) or not budget:
            return cls(None, "unknown", "no_budget")
        return cls(float(budget) * scale, "lower", "budget", budget)

    def __truediv__(self, other: Censored) -> Censored:
        """The ratio of two values: a bound in the numerator stays that bound, one in the denominator flips
        (a lower bound below makes an upper bound); bounds on both sides that disagree make it "unknown"; a
        missing value (None, NaN, a zero denominator) makes no value. The cause (and its budget) is the
        numerator's, else the denominator's."""
        if self.value is None or other.value is None or not other.value or not math.isfinite(self.value / other.value):
            return Censored(None)  # a missing value on either side: no value, nothing to say about bounds
        kinds = {self.bound, other.bound.flipped()} - {"exact"}
        bound = "exact" if not kinds else kinds.pop() if len(kinds) == 1 else "unknown"
        why = self if self.cause else other
        return Censored(self.value / other.value, bound, why.cause, why.budget)

    def above(self, threshold: float, strict: bool = False) -> bool | None:
        """Whether the true value lies above ``threshold`` (``>`` if ``strict``, else ``>=``), as far as the bound
        says: an exact value decides both ways; a lower bound decides only where it already lies above (True),
        an upper bound only where it already lies below (False); None otherwise, and without a value."""
        if self.value is None or self.bound == "unknown":
            return None
        hit = self.value > threshold if strict else self.value >= threshold
        if self.bound == "exact":
            return hit
        return (True if hit else None) if self.bound == "lower" else (None if hit else False)


def option_text(v) -> str | None:
    """A config option as text (:func:`bnexp.config.checks.option_value`): an Enum's value, and an Enum
    written out by name ("Normalizer.layer") as its value ("layer"); None stays None."""
    return None if v is None else str(option_value(v)).rsplit(".", 1)[-1]


# The normalizer vocabulary: the code of a run's normalizer and its name in every table, claim and figure. Every
# name the report gives a normalizer comes from this table: a normalizer's own (:func:`normalizer_label`), the BN
# variant it counts as where BN is compared with no BN (:func:`variant`), the colour family a figure draws it in
# (:func:`colour_family`).
NORMALIZERS = {"none": "no BN", "batch": "BN", "noisy": "noisy BN", "ghost": "ghost BN", "layer": "LayerNorm",
               "group": "GroupNorm"}
# the ``bn=`` options that name a BN variant (conf/bn/), as a legend tells them from a configuration's label
BN_OPTIONS = {"noisy": "noisy", "false": "none", "true": "batch"}


def normalizer(config: dict) -> str | None:
    """The normalizer code (:data:`NORMALIZERS`) of a flattened config: "none" (``bn.enabled`` false),
    "layer" or "group" (``bn.norm``), "noisy" (``bn.noise``), "ghost" (``bn.ghost_batch_size`` set) or
    "batch"; None when ``bn.enabled`` is unknown. Keys an older run lacks take their defaults."""
    enabled = config.get("bn.enabled")
    if enabled is None:
        return None
    if not enabled:
        return "none"
    norm = option_text(config.get("bn.norm")) or "batch"
    if norm in ("layer", "group"):
        return norm
    if config.get("bn.noise"):
        return "noisy"
    return "ghost" if config.get("bn.ghost_batch_size") not in (None, "null") else "batch"


def variant(code: str | None) -> str | None:
    """The name of the BN variant a normalizer ``code`` (:data:`NORMALIZERS`) counts as where BN is compared with
    no BN (the ICS study's claims, its figures' line styles): "no BN" (``none``), "noisy BN" (``noisy``), "BN"
    (``batch`` and every other normalizer); None for None (``bn.enabled`` unknown)."""
    if code is None:
        return None
    return NORMALIZERS[code if code in ("none", "noisy") else "batch"]


def colour_family(code: str | None) -> str | None:
    """The name of the colour family a figure draws normalizer ``code`` in: LayerNorm and GroupNorm by their own
    name, every other normalizer by its :func:`variant`; None for None."""
    return NORMALIZERS[code] if code in ("layer", "group") else variant(code)


def normalizer_label(config: dict) -> str | None:
    """The label of a run's normalizer and its place: "BN", "noisy BN", "LayerNorm after g", ...; None when
    ``bn.enabled`` is unknown."""
    code = normalizer(config)
    if code is None:
        return None
    after = code != "none" and option_text(config.get("bn.position")) == "after"
    return NORMALIZERS[code] + (" after g" if after else "")


def format_target(t: float) -> str:
    """An accuracy target as the report writes it: 0.95 -> "95%", 0.975 -> "97.5%"."""
    return f"{100 * t:g}%"
