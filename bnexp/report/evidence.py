"""Evidence thresholds: when the report may state a verdict, and what to add when it may not.

A Sec. 4.1 verdict (BN faster or slower, test accuracy higher or lower) is stated only when every
compared configuration has :data:`MIN_SEEDS` completed seeds (one run cannot separate an effect from
seed-to-seed variation) and the networks learned (final test accuracy above chance by
:data:`CHANCE_MARGIN`; the claims table, :mod:`bnexp.report.ics_verdicts`, applies the same chance
check per seed). Otherwise the sentence gives its numbers and ends in "insufficient evidence" with
the reasons; configurations with too few seeds are also listed at the top of the
verdicts with the seeds to add and the command that adds them (:func:`seed_advice`).
"""

from __future__ import annotations

from pathlib import Path

from bnexp.rundir import read_sweep_overrides

MIN_SEEDS = 2
CHANCE_MARGIN = 0.05
NUM_CLASSES = 10  # MNIST and CIFAR-10


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def seeds_to_add(present: list[int], min_seeds: int = MIN_SEEDS) -> list[int]:
    """The smallest non-negative seeds not in ``present`` that bring it to ``min_seeds``: [0] -> [1]."""
    return [s for s in range(len(present) + min_seeds) if s not in present][:max(0, min_seeds - len(present))]


def seed_gaps(sides: list[tuple], min_seeds: int = MIN_SEEDS) -> list[str]:
    """Reasons for too few seeds: [(label, completed seeds)] -> ["no BN has 1 seed (need 2)"]; a side
    given as (label, n, its seeds) also says which to add: "no BN has 1 seed (need 2): add seed=1"."""
    out = []
    for label, n, *seeds in sides:
        if n < min_seeds:
            add = seeds_to_add(seeds[0], min_seeds) if seeds else []
            out.append(f"{label} has {_plural(n, 'seed')} (need {min_seeds})"
                       + (f": add seed={','.join(map(str, add))}" if add else ""))
    return out


def sweep_command(sweep_dir: Path, seeds: list[int]) -> str:
    """The command that adds ``seeds`` to the sweep in ``sweep_dir``: its multirun.yaml's overrides
    (seed and hydra.* dropped), the seeds and a new sweep folder inside it (no run folder is reused)."""
    task = read_sweep_overrides(sweep_dir)
    keep = ([o for o in task if not o.lstrip("+~").startswith(("seed=", "hydra."))] if task
            else ["<the sweep's overrides>"])
    seed = f"seed={','.join(map(str, seeds))}"
    return " ".join(["bnexp train -m", *keep, seed, f"hydra.sweep.dir={Path(sweep_dir) / seed}"])


def seed_advice(groups, sweep_dir: Path, min_seeds: int = MIN_SEEDS) -> str | None:
    """The configurations with fewer than ``min_seeds`` completed seeds and how to add them ("Too few seeds
    for a verdict (...): bn=true has 1 seed (0); bn=false has 1 seed (0). Add seed=1: bnexp train -m
    bn=true,false seed=1 hydra.sweep.dir=SWEEP/seed=1, then bnexp report SWEEP."); None when all have."""
    short = [(g.label, sorted({r.seed for r in g.completed if r.seed is not None}), len(g.completed))
             for g in groups if g.config and len(g.completed) < min_seeds]
    if not short:
        return None
    add = sorted({s for _, seeds, _ in short for s in seeds_to_add(seeds, min_seeds)})
    names = "; ".join(f"{label} has {_plural(n, 'seed')}" + (f" ({', '.join(map(str, seeds))})" if seeds else "")
                      for label, seeds, n in short)
    return (f"Too few seeds for a verdict ({min_seeds} completed seeds per configuration needed): {names}. Add "
            f"seed={','.join(map(str, add))}: {sweep_command(sweep_dir, add)}, then bnexp report {sweep_dir}.")


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


def insufficient(reasons: list[str]) -> str:
    """The sentence tail for missing evidence: ": insufficient evidence (a; b)."."""
    return f": insufficient evidence ({'; '.join(reasons)})."
