"""Evidence thresholds: when the report may state a verdict, and why it says "insufficient evidence".

A verdict (BN faster or slower, reduces or does not reduce the shift, supports an account)
is stated only when

* every compared configuration has at least :data:`MIN_SEEDS` completed seeds (one run
  cannot separate an effect from seed-to-seed variation);
* every measurement it rests on has at least :data:`MIN_RECORDS` records per seed (a
  "shift since the start" from two monitor records is one difference, not a trend);
* the compared networks learned: their final test accuracy is above chance by
  :data:`CHANCE_MARGIN` (a network stuck at chance has no meaningful speed or landscape);
* the measurement is present in every compared configuration.

Otherwise the sentence names the numbers it has and ends in "insufficient evidence" with
the reasons, and such a comparison counts as "not measured" in the "what this sweep
supports" paragraph.
"""

from __future__ import annotations

from bnexp.records import MIN_RECORDS

MIN_SEEDS = 2
CHANCE_MARGIN = 0.05
NUM_CLASSES = 10  # MNIST and CIFAR-10


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def seed_gaps(sides: list[tuple[str, int]], min_seeds: int = MIN_SEEDS) -> list[str]:
    """Reasons for too few seeds: [(label, completed seeds)] -> ["no BN has 1 seed (need 2)"]."""
    return [f"{label} has {_plural(n, 'seed')} (need {min_seeds})" for label, n in sides if n < min_seeds]


def chance_gaps(sides: list[tuple[str, float | None]], num_classes: int = NUM_CLASSES,
                margin: float = CHANCE_MARGIN) -> list[str]:
    """Reasons for networks that did not learn: [(label, mean final test accuracy in [0, 1])] ->
    ["no BN is at chance (final test accuracy 10.3% <= 15%)"]; None accuracies are reported missing."""
    bar = 1.0 / num_classes + margin
    out = []
    for label, acc in sides:
        if acc is None:
            out.append(f"{label} has no test accuracy")
        elif acc <= bar:
            out.append(f"{label} is at chance (final test accuracy {100 * acc:.1f}% <= {100 * bar:g}%)")
    return out


def record_gaps(sides: list[tuple[str, list[int] | None]], what: str, min_records: int = MIN_RECORDS) -> list[str]:
    """Reasons for too few records: [(label, records per seed)] -> ["BN has 2 monitor records per seed
    (need 5)"]; None or [] means the measurement is absent."""
    out = []
    for label, per_seed in sides:
        if not per_seed:
            out.append(f"{label} has no {what}")
        elif min(per_seed) < min_records:
            out.append(f"{label} has {min(per_seed)} {what} in a seed (need {min_records})")
    return out


def insufficient(reasons: list[str]) -> str:
    """The sentence tail for missing evidence: ": insufficient evidence (a; b)."."""
    return f": insufficient evidence ({'; '.join(reasons)})."
