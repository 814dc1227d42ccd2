"""Evidence thresholds: when a run has learned, and which seeds a sweep lacks for a verdict.

Every verdict of the report is a claims-table row (:mod:`bnexp.report.claims`), which needs
:data:`bnexp.report.claims.MIN_SEEDS` seeds and runs that left chance (final test accuracy above
``1 / NUM_CLASSES`` by :data:`CHANCE_MARGIN`). Configurations with fewer completed seeds are named at
the top of the claims, with the seeds to add and the command that adds them (:func:`seed_advice`).
"""

from __future__ import annotations

from pathlib import Path

from bnexp.report.claims import MIN_SEEDS
from bnexp.rundir import read_sweep_overrides

CHANCE_MARGIN = 0.05
NUM_CLASSES = 10  # MNIST and CIFAR-10


def seeds_to_add(present: list[int], min_seeds: int = MIN_SEEDS) -> list[int]:
    """The smallest non-negative seeds not in ``present`` that bring it to ``min_seeds``: [0] -> [1, 2]."""
    return [s for s in range(len(present) + min_seeds) if s not in present][:max(0, min_seeds - len(present))]


def sweep_command(sweep_dir: Path, seeds: list[int]) -> str:
    """The command that adds ``seeds`` to the sweep in ``sweep_dir``: its multirun.yaml's overrides
    (seed and hydra.* dropped), the seeds and a new sweep folder inside it (no run folder is reused)."""
    task = read_sweep_overrides(sweep_dir)
    keep = ([o for o in task if not o.lstrip("+~").startswith(("seed=", "hydra."))] if task
            else ["<the sweep's overrides>"])
    seed = f"seed={','.join(map(str, seeds))}"
    return " ".join(["bnexp train -m", *keep, seed, f"hydra.sweep.dir={Path(sweep_dir) / seed}"])


def seed_advice(groups, sweep_dir: Path, ladder: bool = False, min_seeds: int = MIN_SEEDS) -> str | None:
    """The configurations (:class:`bnexp.report.groups.ConfigGroup`) with fewer than ``min_seeds`` completed
    seeds and how to add them ("Too few seeds for a verdict (...): bn=true has 1 seed (0); bn=false has 1 seed
    (0). Add seed=1,2: bnexp train -m bn=true,false seed=1,2 hydra.sweep.dir=SWEEP/seed=1,2, then bnexp report
    SWEEP."; the first three named, then how many more); None when all have. A ``ladder`` sweep (the Sec. 4.2
    frontier of scripts/reproduce_cifar.sh, many multirun calls in one folder) is completed by that script."""
    short = [(g.label, sorted({r.seed for r in g.completed if r.seed is not None}), len(g.completed))
             for g in groups if g.config and len(g.completed) < min_seeds]
    if not short:
        return None
    add = sorted({s for _, seeds, _ in short for s in seeds_to_add(seeds, min_seeds)})
    names = "; ".join(f"{label} has {n} seed{'' if n == 1 else 's'}" + (f" ({', '.join(map(str, seeds))})" if seeds
                                                                       else "") for label, seeds, n in short[:3])
    names += f"; and {len(short) - 3} more configurations" if len(short) > 3 else ""
    have = sorted({r.seed for g in groups for r in g.completed if r.seed is not None} | set(add))
    how = (f"SEEDS={','.join(map(str, have))} SWEEP_DIR={sweep_dir} scripts/reproduce_cifar.sh with the extra "
           "overrides the sweep ran with (it skips the finished runs)" if ladder else sweep_command(sweep_dir, add))
    return (f"Too few seeds for a verdict ({min_seeds} completed seeds per configuration needed): {names}. Add "
            f"seed={','.join(map(str, add))}: {how}, then bnexp report {sweep_dir}.")
