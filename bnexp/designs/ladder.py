"""The budget ladders of scripts/reproduce_cifar.sh (issue 19, items 1, 2 and 8; docs/cifar/PLAN.md): which
runs come next, decided from the runs already in the sweep folder.

Stages, each (preset, budget, seed) one run whose rate halves 5 times over its own budget:

1. *tune*: the baseline at ``tune_budget`` for every rate x dropout of the ladder, every seed; the winner
   is the highest seed-mean final test accuracy (the first of equals, in rate then dropout order).
2. *baseline*: the winner at the ``baseline`` rungs (the tuning run at ``tune_budget`` is the same run,
   same folder); then one doubling more while the last doubling gained >= 0.5 points, up to ``baseline_cap``.
3. *presets*: each of the other presets (5x the winner's rate for bn_x5, no dropout and weight decay / 5,
   from the presets in conf/experiment/) from its ``starts`` rung, doubling until its seed-mean frontier
   reaches a* (the baseline's best seed-mean accuracy) or its last doubling gained < 0.5 points, capped at
   the baseline's largest budget.

``python -m bnexp.designs.ladder next SWEEP_DIR [options]`` prints the next batch: ``#`` lines to show, then one
line of Hydra overrides per multirun (longest budget first; nothing when the sweep is complete).
``python -m bnexp.designs.ladder plan SWEEP_DIR [options]`` prints every planned run, what is done, and the
total steps and estimated wall time (the script's DRY_RUN=1). Options: --scale cpu|gpu, --presets
default|all|NAME,NAME, --seeds 0,1, --ladder "key=value;..." (overrides of the scale's ladder, e.g.
``tune=40;baseline=20,40;cap=80;bn_x5=10``), --jobs N, --steps-per-s X, --overhead-s X (plan only).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field, replace

import pandas as pd

from bnexp.report.frontier import BASELINE, GAIN, TOL, load_runs

NO_DROPOUT = ("bn_x5", "bn_x30", "bn_x5_sigmoid")  # Sec. 4.2.1: BN-x5 and its variants drop dropout
PRESET_SETS = {"default": ("bn_baseline", "bn_x5"),
               "all": ("bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "baseline_sigmoid")}
# each run's folder in the sweep: the tuning run at the tuning budget and the ladder's rung at that budget
# have the same overrides, hence the same folder, and bnexp skips it as complete
# (quoted: the value holds "," and "="; the quotes are part of the override Hydra parses)
SUBDIR = "hydra.sweep.subdir='${experiment},lr=${scale.base_lr},dropout=${model.dropout},steps=${trainer.max_steps},seed=${seed}'"


@dataclass(frozen=True)
class Ladder:
    """One scale's ladder (budgets in SGD steps).

    Attributes:
        tune_budget: the tuning stage's budget. tune_lrs, tune_dropouts: its grid.
        baseline: the baseline's rungs; baseline_cap: the largest budget a doubling may add to them.
        starts: the first rung of every other preset. seeds: the default seeds.
    """

    tune_budget: int
    tune_lrs: tuple[float, ...]
    tune_dropouts: tuple[float, ...]
    baseline: tuple[int, ...]
    baseline_cap: int
    starts: dict = field(default_factory=dict)
    seeds: tuple[int, ...] = (0, 1)


LADDERS = {
    "cpu": Ladder(6000, (0.025, 0.04), (0.0, 0.3), (3000, 6000, 12000, 24000), 48000,
                  {"bn_baseline": 1500, "bn_x5": 375, "bn_x30": 375, "bn_x5_sigmoid": 375,
                   "baseline_sigmoid": 3000, "baseline_x5": 3000}, (0, 1)),
    "gpu": Ladder(10000, (0.025, 0.04), (0.0, 0.4), (5000, 10000, 20000, 40000, 80000), 160000,
                  {"bn_baseline": 2500, "bn_x5": 625, "bn_x30": 625, "bn_x5_sigmoid": 625,
                   "baseline_sigmoid": 5000, "baseline_x5": 5000}, (0, 1, 2)),
}


def parse_ladder(scale: str, spec: str | None) -> Ladder:
    """The scale's ladder with the ``key=value;...`` overrides of ``spec`` (keys: tune, lrs, dropouts,
    baseline, cap, seeds, or a preset name for its first rung; lists comma-separated).

    Raises:
        ValueError: an unknown scale or key, or a value that is not a number.
    """
    if scale not in LADDERS:
        raise ValueError(f"unknown scale {scale!r}: use one of {sorted(LADDERS)}")
    lad = LADDERS[scale]
    nums = lambda v, t: tuple(t(x) for x in v.split(",") if x.strip())  # noqa: E731
    lists = ("lrs", "dropouts", "baseline", "seeds")
    for item in filter(None, (s.strip() for s in (spec or "").split(";"))):
        key, _, val = item.partition("=")
        key = key.strip()
        if key not in ("tune", "cap", *lists) and key not in lad.starts and key not in PRESET_SETS["all"]:
            raise ValueError(f"--ladder: unknown key {key!r} (tune, lrs, dropouts, baseline, cap, seeds or a preset)")
        try:
            if key == "tune":
                lad = replace(lad, tune_budget=int(val))
            elif key in ("lrs", "dropouts"):
                lad = replace(lad, **{f"tune_{key}": nums(val, float)})
            elif key == "baseline":
                lad = replace(lad, baseline=tuple(sorted(nums(val, int))))
            elif key == "cap":
                lad = replace(lad, baseline_cap=int(val))
            elif key == "seeds":
                lad = replace(lad, seeds=nums(val, int))
            else:
                lad = replace(lad, starts={**lad.starts, key: int(val)})
        except ValueError:
            what = "a comma-separated list of numbers" if key in lists else "one whole number (a budget in steps)"
            raise ValueError(f"--ladder: {item!r}: {key} takes {what}") from None
    return lad


@dataclass(frozen=True)
class Batch:
    """One multirun: a preset at one budget, over rates x dropouts x seeds."""

    preset: str
    budget: int
    lrs: tuple[float, ...]
    dropout: tuple[float, ...]
    seeds: tuple[int, ...]

    def overrides(self) -> list[str]:
        """Hydra overrides of the batch: the preset, its base rate and dropout, the budget and the schedule
        relative to it (decay_steps = budget / 5: the rate halves 5 times; 4 evaluations; 2 monitor records)."""
        b = self.budget
        j = lambda xs: ",".join(f"{x:g}" for x in xs)  # noqa: E731
        return [f"+experiment={self.preset}", f"scale.base_lr={j(self.lrs)}", f"model.dropout={j(self.dropout)}",
                f"trainer.max_steps={b}", "optim.decay_rate=0.5", f"optim.decay_steps={max(1, round(b / 5))}",
                f"trainer.eval_every={max(1, round(b / 4))}", f"trainer.hist_every={max(1, round(b / 2))}",
                f"trainer.ckpt_every={max(1, round(b / 4))}", f"seed={','.join(map(str, self.seeds))}", SUBDIR]

    def runs(self) -> int:
        return len(self.lrs) * len(self.dropout) * len(self.seeds)


def _done(runs: pd.DataFrame, preset: str, budget: int, lr: float, dropout: float) -> pd.DataFrame:
    """Complete runs (finished or diverged) of one rung and configuration."""
    if runs.empty:
        return runs
    m = ((runs.preset == preset) & (runs.budget_steps == budget) & ((runs.base_lr - lr).abs() < 1e-12)
         & ((runs.dropout - dropout).abs() < 1e-12))
    return runs[m]


def _mean(runs, preset, budget, lr, dropout, seeds) -> float | None:
    """Seed-mean final test accuracy of a rung, None until every seed is complete."""
    d = _done(runs, preset, budget, lr, dropout)
    if d.empty:
        return None
    d = d[d.seed.isin(seeds)]
    return float(d.final_test_accuracy.mean()) if set(d.seed) >= set(seeds) else None


def winner(runs: pd.DataFrame, lad: Ladder, seeds) -> tuple[float, float, float] | None:
    """(rate, dropout, seed-mean accuracy) of the tuning winner; None until the tuning stage is complete."""
    res = [(lr, d, _mean(runs, BASELINE, lad.tune_budget, lr, d, seeds)) for lr in lad.tune_lrs for d in lad.tune_dropouts]
    if any(r[2] is None for r in res):
        return None
    return max(res, key=lambda r: r[2])  # max keeps the first of equals


def _climb(accs: dict, first: int, cap: int, target: float | None, prev: float | None = None) -> int | None:
    """The next rung of a doubling ladder from ``first`` given the seed-mean accuracies found so far
    ({budget: acc or None}; ``prev``: the accuracy of the rung before ``first``); None when it stops: a rung
    reached ``target``, a doubling gained < GAIN, or the next rung would pass ``cap``."""
    b = first
    while True:
        a = accs.get(b)
        if a is None:
            return b if b <= cap else None
        if (target is not None and a >= target - TOL) or (prev is not None and a - prev < GAIN) or 2 * b > cap:
            return None
        b, prev = 2 * b, a


def _baseline_state(runs, lad: Ladder, seeds):
    """(winner or None, {budget: seed-mean accuracy or None} of the baseline's rungs and doublings, next
    doubling or None (None also while a base rung is missing))."""
    w = winner(runs, lad, seeds)
    if w is None:
        return None, {}, None
    accs = {b: _mean(runs, BASELINE, b, w[0], w[1], seeds)
            for b in list(lad.baseline) + _doublings(lad.baseline[-1], lad.baseline_cap)}
    if any(accs[b] is None for b in lad.baseline):
        return w, accs, None
    prev = accs[lad.baseline[-2]] if len(lad.baseline) > 1 else None
    return w, accs, _climb(accs, lad.baseline[-1], lad.baseline_cap, None, prev)


def next_batches(runs: pd.DataFrame, lad: Ladder, presets, seeds) -> tuple[list[str], list[Batch]]:
    """(messages, batches) of the next stage with missing runs; ([...], []) when the sweep is complete."""
    seeds = tuple(seeds)
    tune = [Batch(BASELINE, lad.tune_budget, (lr,), (d,), seeds) for lr in lad.tune_lrs for d in lad.tune_dropouts
            if _mean(runs, BASELINE, lad.tune_budget, lr, d, seeds) is None]
    if tune:
        return ([f"stage 1: tuning the baseline at {lad.tune_budget} steps: rates {list(lad.tune_lrs)} x dropout "
                 f"{list(lad.tune_dropouts)}, seeds {list(seeds)}"],
                [Batch(BASELINE, lad.tune_budget, lad.tune_lrs, lad.tune_dropouts, seeds)])
    (lr, d, acc), accs, ext = _baseline_state(runs, lad, seeds)
    msg = [f"the tuned baseline: lr={lr:g}, dropout={d:g} (seed-mean final test accuracy {100 * acc:.2f}% at "
           f"{lad.tune_budget} steps)"]
    missing = [b for b in lad.baseline if accs[b] is None] or ([ext] if ext is not None else [])
    if missing:
        return (msg + [f"stage 2: the baseline ladder: {sorted(missing, reverse=True)} steps"],
                [Batch(BASELINE, b, (lr,), (d,), seeds) for b in sorted(missing, reverse=True)])
    done = {b: a for b, a in accs.items() if a is not None}
    target, cap = max(done.values()), max(done)
    batches = []
    for p in presets:
        dp = 0.0 if p in NO_DROPOUT else d
        pa = {b: _mean(runs, p, b, lr, dp, seeds) for b in _doublings(lad.starts[p], cap, True)}
        nxt = _climb(pa, lad.starts[p], cap, target)
        if nxt is not None:
            batches.append(Batch(p, nxt, (lr,), (dp,), seeds))
    batches.sort(key=lambda x: -x.budget)
    if batches:
        msg.append(f"stage 3: the presets' ladders toward a* = {100 * target:.2f}% (cap {cap} steps): "
                   + ", ".join(f"{x.preset} at {x.budget}" for x in batches))
    return msg, batches


def _doublings(first: int, cap: int, inclusive_first: bool = False) -> list[int]:
    """``first`` (if ``inclusive_first``), 2 first, 4 first, ... up to ``cap``."""
    out, b = [], first if inclusive_first else 2 * first
    while b <= cap:
        out.append(b)
        b *= 2
    return out


def plan_table(runs: pd.DataFrame, lad: Ladder, presets, seeds) -> pd.DataFrame:
    """Every run the ladders may need, one row per (stage, preset, budget): "when" it runs (always, or the
    condition of a doubling), its runs and steps (budget x seeds x configurations), and its status: done,
    to run, or not needed (its ladder has stopped, from the results so far)."""
    seeds = tuple(seeds)
    rows = []
    w, accs, ext = _baseline_state(runs, lad, seeds)
    lr, d = (w[0], w[1]) if w else (None, None)

    def add(stage, p, b, lrs, ds, when, needed=True):
        n = len(lrs) * len(ds) * len(seeds)
        done = None not in lrs and all(_mean(runs, p, b, x, y, seeds) is not None for x in lrs for y in ds)
        rows.append({"stage": stage, "preset": p, "budget": b, "runs": n, "steps": n * b, "when": when,
                     "status": "done" if done else "to run" if needed else "not needed"})

    add("1 tune", BASELINE, lad.tune_budget, lad.tune_lrs, lad.tune_dropouts, "always")
    for b in lad.baseline:
        if b != lad.tune_budget:  # that rung is the tuning winner's run
            add("2 baseline", BASELINE, b, (lr,), (d,), "always")
    complete = bool(accs) and all(accs[b] is not None for b in lad.baseline)
    for b in _doublings(lad.baseline[-1], lad.baseline_cap):
        add("2 baseline", BASELINE, b, (lr,), (d,), f"if {b // 2} gains >= 0.5 points over {b // 4}",
            not complete or (ext is not None and b >= ext))
    final = complete and ext is None
    done = {b: a for b, a in accs.items() if a is not None}
    cap = max(done) if final else lad.baseline_cap
    for p in presets:
        dp = 0.0 if p in NO_DROPOUT else d
        nxt = None
        if final:
            pa = {b: _mean(runs, p, b, lr, dp, seeds) for b in _doublings(lad.starts[p], cap, True)}
            nxt = _climb(pa, lad.starts[p], cap, max(done.values()))
        for i, b in enumerate(_doublings(lad.starts[p], cap, True)):
            add("3 presets", p, b, (lr,), (dp,), "always" if i == 0 else
                "until a* is reached or a doubling gains < 0.5 points", not final or (nxt is not None and b >= nxt))
    return pd.DataFrame(rows)


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m bnexp.designs.ladder", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["next", "plan"])
    p.add_argument("sweep_dir")
    p.add_argument("--scale", default="cpu")
    p.add_argument("--presets", default="default")
    p.add_argument("--seeds", default=None)
    p.add_argument("--ladder", default=None)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--steps-per-s", type=float, default=15.0)
    p.add_argument("--overhead-s", type=float, default=40.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """The CLI (see the module docstring). Exit 2 with one message for a bad option."""
    try:
        a = _args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        lad = parse_ladder(a.scale, a.ladder)
        seeds = tuple(int(s) for s in a.seeds.split(",")) if a.seeds else lad.seeds
        presets = PRESET_SETS.get(a.presets) or tuple(x.strip() for x in a.presets.split(",") if x.strip())
        unknown = [x for x in presets if x not in lad.starts]
        if unknown:
            raise ValueError(f"--presets: unknown preset(s) {unknown}; use default, all or names of {sorted(lad.starts)}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # runs in progress or failed: the plan treats them as missing
        runs = load_runs(a.sweep_dir)  # an empty table for a folder that does not exist yet
    if a.command == "next":
        msgs, batches = next_batches(runs, lad, presets, seeds)
        if batches:
            print("\n".join([f"# {m}" for m in msgs] + [" ".join(b.overrides()) for b in batches]))
        return 0
    print(plan_text(plan_table(runs, lad, presets, seeds), a.jobs, a.steps_per_s, a.overhead_s)[0])
    return 0


def plan_text(t: pd.DataFrame, jobs: int, steps_per_s: float, overhead_s: float) -> tuple[str, float, float]:
    """The DRY_RUN text of a :func:`plan_table` (the table, what is to run always and at most, with the
    wall time on ``jobs`` parallel jobs at ``steps_per_s`` per job + ``overhead_s`` per run, and what is
    done), and the two estimates in seconds: (text, always, at most)."""
    lines, secs = [t.to_string(index=False)], []
    todo = t[t.status == "to run"]
    for label, sel in (("always", todo[todo.when == "always"]), ("at most", todo)):
        secs.append(float((sel.steps.sum() / steps_per_s + sel.runs.sum() * overhead_s) / max(1, jobs)))
        lines.append(f"to run, {label}: {int(sel.runs.sum())} runs, {int(sel.steps.sum()):,} steps: about "
                     f"{secs[-1] / 60:.0f} min with {jobs} jobs at {steps_per_s:g} steps/s per job + {overhead_s:g} s "
                     "per run (start-up, evaluations)")
    lines.append(f"done: {int(t[t.status == 'done'].runs.sum())} runs, {int(t[t.status == 'done'].steps.sum()):,} "
                 "steps")
    return "\n".join(lines), secs[0], secs[1]


if __name__ == "__main__":
    sys.exit(main())
