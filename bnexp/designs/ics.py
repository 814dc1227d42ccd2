"""The ICS study's MNIST part (scripts/ics_study.sh; docs/ics/PLAN.md), fixed before its results: BN, no BN and
noisy BN at NOISE_SCALES on the evaluation seeds :data:`MNIST_SEEDS`, each network at its own rate chosen on
the MNIST reproduction's held-out tuning seeds (:func:`held_out_rates`), or at an explicit ``lr=`` override.

The CIFAR-10 part (the ``bn_baseline`` preset's rate, seeds :data:`CIFAR_SEEDS`) is planned in
:mod:`bnexp.designs.orchestrate` from its configs.
"""

from __future__ import annotations

import math
from pathlib import Path

from bnexp.designs import mnist
from bnexp.analysis.tuning import EVALUATION_SEEDS, TUNING_SEEDS

MNIST_SEEDS = EVALUATION_SEEDS  # 0-4: disjoint from the tuning seeds 100-102
CIFAR_SEEDS = (0, 1, 2)  # a verdict needs >= 3 seeds (bnexp.report.claims.MIN_SEEDS)
TARGET = 0.95  # the ICS report's main target on MNIST: main_target([0.9, 0.95, 0.97, 0.98]) (ics_verdicts)
TUNING_DIR = "outputs/sweeps/mnist_fig1"  # reproduce_mnist.sh's SWEEP_DIR: its stage 1 holds the tuning grids
TUNED_BLOCKS = {"BN": mnist.BLOCKS[0], "no BN": mnist.BLOCKS[1]}  # the normal-init grids (the ICS study's init)
MAX_STEPS = 50_000  # the trainer's default budget, as in the first run
# each run's folder, named by its design coordinates (a second call finds and skips the complete ones)
SUBDIR = {"plain": "hydra.sweep.subdir='bn=${hydra:runtime.choices.bn},lr=${lr},seed=${seed}'",
          "noisy": "hydra.sweep.subdir='bn=noisy,noise_scale=${bn.noise_scale},lr=${lr},seed=${seed}'",
          # the CIFAR-10 part's constant-rate runs (docs/ics/PLAN.md, amendment): their own folders
          "constant": "hydra.sweep.subdir='schedule=constant,bn=${hydra:runtime.choices.bn},seed=${seed}'"}
# docs/ics/PLAN.md, amendment: BN also at no BN's chosen rate (MNIST), so the two nets meet at equal rates for the
# matched-progress rows; and BN and no BN at the preset's rate with a constant schedule (CIFAR-10)
EQUAL_RATE = "BN at no BN's rate"
CONSTANT = ("optim.schedule=constant",)


def held_out_rates(tuning_dir: Path, target: float = TARGET) -> tuple[dict[str, float], list[str]]:
    """Each network's rate for the ICS study: :func:`bnexp.designs.mnist.choose` (the MNIST report's rule,
    :func:`bnexp.analysis.tuning.choose_rates`) at ``target`` on the complete normal-init grid of BN and of no
    BN in ``tuning_dir`` (tuning seeds :data:`bnexp.analysis.tuning.TUNING_SEEDS`), grown by the grid-edge rule as
    the MNIST reproduction's stage 1 grows it (:func:`bnexp.designs.mnist.extend`); noisy BN at BN's rate
    (Santurkar et al. 2018, Sec. 2.1, train noisy BN as BN).

    Returns:
        ({"BN": lr, "no BN": lr, "noisy BN": lr}, one line per network saying what was chosen).

    Raises:
        ValueError: a tuning run of either grid, or of the rates the grid-edge rule added, is missing or
            unfinished (names the block and a run or the rates).
    """
    rates, lines = {}, []
    for name, block in TUNED_BLOCKS.items():
        grown = mnist.extend(tuning_dir, block, TUNING_SEEDS)  # the grid-edge rule's added rates, as MNIST's stage 1
        if grown.todo:
            raise ValueError(f"{block.name}: the grid-edge rule's added rate(s) lr "
                             f"{', '.join(f'{r:g}' for r in grown.todo)} not complete on the tuning seeds")
        c = grown.picks[target]
        rates[name] = float(c.rate)
        lines.append(f"  {name}: lr {c.rate:g}, chosen for {target:.0%} on the tuning seeds "
                     f"{', '.join(map(str, TUNING_SEEDS))} of {block.name} in {tuning_dir}"
                     + (" (censored: no rate reached the target on every tuning seed)" if c.censored else ""))
    rates["noisy BN"] = rates["BN"]
    return rates, lines


def override_value(extra: list[str], key: str) -> str | None:
    """The value of the last ``key=...`` override in ``extra`` (None: not given)."""
    vals = [o.split("=", 1)[1] for o in extra if o.split("=", 1)[0] == key]
    return vals[-1] if vals else None


def numbers(text: str | None, kind=float) -> tuple | None:
    """A plain comma list of numbers ("0,1,2") as a tuple of ``kind``; None for None or any other syntax."""
    try:
        return tuple(kind(v) for v in text.split(",")) if text is not None else None
    except ValueError:
        return None


def run_names(rates: dict[str, tuple[float, ...]], scales, seeds) -> dict[str, list[str]]:
    """The run folders of each block (:data:`SUBDIR`), e.g. "bn=true,lr=7.2,seed=0" and
    "bn=noisy,noise_scale=3.0,lr=7.2,seed=0"; with ``rates[EQUAL_RATE]`` also BN at no BN's rate (a block of its
    own, last)."""
    def f(x):
        return repr(float(x))

    equal = {EQUAL_RATE: [f"bn=true,lr={f(r)},seed={s}" for r in rates[EQUAL_RATE] for s in seeds]} \
        if rates.get(EQUAL_RATE) else {}
    return {"BN": [f"bn=true,lr={f(r)},seed={s}" for r in rates["BN"] for s in seeds],
            "no BN": [f"bn=false,lr={f(r)},seed={s}" for r in rates["no BN"] for s in seeds],
            "noisy BN": [f"bn=noisy,noise_scale={f(n)},lr={f(r)},seed={s}" for n in scales
                         for r in rates["noisy BN"] for s in seeds], **equal}


def plan_and_seconds(sweep_dir: Path, names: dict[str, list[str]], steps: int, jobs: int, head: list[str],
                     title: str = "ICS study, MNIST part") -> tuple[str, float]:
    """The DRY_RUN text of the MNIST part (the rates and how they were chosen: ``head``; each block's runs,
    "(done)" where complete) and its estimated wall time in seconds: per block ceil(runs to do / jobs) x one
    run's time (:func:`bnexp.designs.mnist.run_seconds`, probes not counted), the blocks one after another."""
    lines, total, runs = list(head), 0.0, 0
    for block, ns in names.items():
        ns = list(dict.fromkeys(ns))
        done = [n for n in ns if mnist.is_done(sweep_dir, n)]
        secs = math.ceil((len(ns) - len(done)) / max(1, jobs)) * mnist.run_seconds(block != "no BN", steps)
        total, runs = total + secs, runs + len(ns)
        lines.append(f"{title}, {block}: {len(ns)} runs of {steps:,} steps, {len(ns) - len(done)} to run, "
                     f"~{secs / 60:.1f} min")
        lines += [f"  {n}{'  (done)' if n in done else ''}" for n in ns]
    lines.append(f"{title}: estimated wall time: {total / 60:.0f} min with {jobs} parallel jobs, assuming an idle "
                 f"machine ({runs} runs; one core per job; the probes not counted)")
    return "\n".join(lines), total
