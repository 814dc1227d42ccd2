"""The budget ladders of scripts/reproduce_cifar.sh (the CIFAR-10 frontier design, docs/cifar/PLAN.md, plan
version 2): which runs come next, decided from the runs already in the sweep folder.

Stages, each (preset, budget, seed) one run whose rate halves 5 times over its own budget; every decision
uses the seed means of the *decision seeds* (``--seeds``, 0 and 1 on the CPU ladder):

1. *tune*: the baseline at ``tune_budget`` for every rate x dropout of the ladder, every seed; the winner
   is the highest seed-mean final test accuracy (the first of equals, in rate then dropout order).
2. *baseline*: the winner at the ``baseline`` rungs (the tuning run at ``tune_budget`` is the same run,
   same folder); then one doubling more while the last doubling gained >= 0.5 points (the convergence
   rule), up to ``baseline_cap`` (192k steps on the CPU ladder). a* is its best seed-mean accuracy.
3. *headline*: bn_x5 (5x the winner's rate, no dropout, weight decay / 5: conf/experiment/bn_x5.yaml)
   from its ``starts`` rung, doubling until it stops (rules below), before any other preset.
4. *presets*: the other presets of ``--presets`` in that order (bn_baseline, baseline_x5, baseline_sigmoid,
   bn_x5_sigmoid, bn_x30 for ``all``), each doubling from its ``starts`` rung until it stops.
5. *extra seeds* (``--extra-seeds``, none by default): the same rungs again for each extra seed, the
   baseline's first, then bn_x5's, then the others'; they never change a decision.

A preset ladder stops at the first complete rung b (seed-mean accuracy a) where, in this order:
``a*`` (a >= a*; the presets of :data:`TARGETED`), *decided* (baseline_x5 only, :data:`RATE_ALONE`: b >= 1.25 x
bn_x5's budget to a* and a < a*, so the rate alone is not BN-x5's speedup), *chance* (b >= ``early``, 12k steps
on the CPU ladder, and a <= rules.CHANCE (15%, chance + 5 points): it stayed at chance or diverged, a diverged run counting as
chance), *trains* (a > rules.CHANCE, for :data:`STOP_WHEN_TRAINS`: its claim is decided), *converged*
(the doubling to b gained < 0.5 points, above rules.CHANCE), *cap* (2b passes the baseline's largest
budget, or ``early`` for :data:`EARLY_CAPPED`). :func:`ladder_stops` names the rule that stopped each ladder.

``python -m bnexp.designs.ladder next SWEEP_DIR [options]`` prints the next batch: ``#`` lines to show, then one
line of Hydra overrides per multirun (nothing when the sweep is complete).
``python -m bnexp.designs.ladder plan SWEEP_DIR [options]`` prints every planned run, what is done, which rule
stopped each ladder, and the total steps and estimated wall time (the script's DRY_RUN=1). Options:
--scale cpu|gpu, --presets default|all|NAME,NAME, --seeds 0,1, --extra-seeds 2, --ladder "key=value;..."
(overrides of the scale's ladder, e.g. ``tune=40;baseline=20,40;cap=80;early=40;bn_x5=10``), --jobs N,
--steps-per-s X, --overhead-s X (plan only).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field, replace

import pandas as pd

from bnexp.analysis.frontier import (BASELINE, BASELINE_CAP, GAIN, PRESET_SETS, RATE_ALONE, TOL, budget_to_reach,
                                     load_runs)
from bnexp.analysis.rules import CHANCE

NO_DROPOUT = ("bn_x5", "bn_x30", "bn_x5_sigmoid")  # Sec. 4.2.1: BN-x5 and its variants drop dropout
HEADLINE = "bn_x5"  # the pass rule's preset: its ladder runs right after the baseline's, before the others
# per-preset stop rules (docs/cifar/PLAN.md, plan version 2): the presets whose claim is a speedup at a*
# climb to a*; the sigmoid pair's claims (trains / does not train) are decided by the ladder's early budget
TARGETED = ("bn_x5", "bn_baseline", "bn_x30", "baseline_x5")
EARLY_CAPPED = ("bn_x5_sigmoid", "baseline_sigmoid")
STOP_WHEN_TRAINS = ("baseline_sigmoid",)  # its claim "does not train" is refuted by one rung above chance + 5
# the baseline_x5 control (the tuned baseline at 5x its rate): "the rate alone is BN-x5's speedup" needs
# S_baseline_x5(a*) >= S_bn_x5(a*) / RATE_ALONE; a rung past RATE_ALONE x B_bn_x5(a*) still below a* decides "no"
# (RATE_ALONE lives in bnexp.analysis.frontier: the report states the control's verdict with the same factor)
CONTROL = "baseline_x5"
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
        starts: the first rung of every other preset. seeds: the default (decision) seeds.
        early: the budget by which a net at chance (or diverged) stops its ladder, and the cap of
        :data:`EARLY_CAPPED` presets.
    """

    tune_budget: int
    tune_lrs: tuple[float, ...]
    tune_dropouts: tuple[float, ...]
    baseline: tuple[int, ...]
    baseline_cap: int
    starts: dict = field(default_factory=dict)
    seeds: tuple[int, ...] = (0, 1)
    early: int = 12000


# CPU cap 192k = 24k x 2^3: three doublings past the fixed rungs (plan version 2; plan version 1 allowed one, 48k)
LADDERS = {
    "cpu": Ladder(6000, (0.025, 0.04), (0.0, 0.3), (3000, 6000, 12000, 24000), BASELINE_CAP["cpu"],
                  {"bn_baseline": 1500, "bn_x5": 375, "bn_x30": 375, "bn_x5_sigmoid": 375,
                   "baseline_sigmoid": 3000, "baseline_x5": 3000}, (0, 1), 12000),
    "gpu": Ladder(10000, (0.025, 0.04), (0.0, 0.4), (5000, 10000, 20000, 40000, 80000), BASELINE_CAP["gpu"],
                  {"bn_baseline": 2500, "bn_x5": 625, "bn_x30": 625, "bn_x5_sigmoid": 625,
                   "baseline_sigmoid": 5000, "baseline_x5": 5000}, (0, 1, 2), 20000),
}


def parse_ladder(scale: str, spec: str | None) -> Ladder:
    """The scale's ladder with the ``key=value;...`` overrides of ``spec`` (keys: tune, lrs, dropouts,
    baseline, cap, early, seeds, or a preset name for its first rung; lists comma-separated).

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
        if key not in ("tune", "cap", "early", *lists) and key not in lad.starts and key not in PRESET_SETS["all"]:
            raise ValueError(f"--ladder: unknown key {key!r} (tune, lrs, dropouts, baseline, cap, early, seeds "
                             "or a preset)")
        try:
            if key == "tune":
                lad = replace(lad, tune_budget=int(val))
            elif key in ("lrs", "dropouts"):
                lad = replace(lad, **{f"tune_{key}": nums(val, float)})
            elif key == "baseline":
                lad = replace(lad, baseline=tuple(sorted(nums(val, int))))
            elif key == "cap":
                lad = replace(lad, baseline_cap=int(val))
            elif key == "early":
                lad = replace(lad, early=int(val))
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


def complete_runs(runs: pd.DataFrame, preset: str, budget: int, lr: float, dropout: float) -> pd.DataFrame:
    """Complete runs (finished or diverged) of one rung and configuration."""
    if runs.empty:
        return runs
    m = ((runs.preset == preset) & (runs.budget_steps == budget) & ((runs.base_lr - lr).abs() < 1e-12)
         & ((runs.dropout - dropout).abs() < 1e-12))
    return runs[m]


def _mean(runs, preset, budget, lr, dropout, seeds) -> float | None:
    """Seed-mean final test accuracy of a rung, None until every seed is complete."""
    d = complete_runs(runs, preset, budget, lr, dropout)
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


def _pct(a: float) -> str:
    return f"{100 * a:.2f}%"


def _stop_rule(b: int, a: float, prev: float | None, target: float | None, early: int | None,
               stop_trains: bool, decided_at: float | None = None) -> str | None:
    """Why a ladder stops at its complete rung ``b`` (seed-mean accuracy ``a``; ``prev``: the rung before it),
    or None: the rules of the module docstring in their order, except the cap (see :func:`_climb`).
    ``early`` None: no chance rule, and the convergence rule applies at any accuracy (the baseline's ladder).
    ``decided_at``: the control's budget past which a rung below a* decides its question (:data:`RATE_ALONE`)."""
    if target is not None and a >= target - TOL:
        return f"a*: {_pct(a)} at {b:,} steps reaches a* = {_pct(target)}"
    if decided_at is not None and b >= decided_at and a > CHANCE:
        return (f"decided: {_pct(a)} at {b:,} steps >= {RATE_ALONE:g} x B_bn_x5(a*) = {decided_at:,.0f} is below a*, "
                "so the rate alone is not BN-x5's speedup")
    if early is not None and b >= early and a <= CHANCE:
        return f"chance: {_pct(a)} at {b:,} steps, at or below chance + 5 points (at chance or diverged by {early:,})"
    if stop_trains and a > CHANCE:
        return f"trains: {_pct(a)} at {b:,} steps, above chance + 5 points (its claim is decided)"
    if prev is not None and a - prev < GAIN and (early is None or a > CHANCE):
        return f"converged: the doubling to {b:,} steps gained {100 * (a - prev):.2f} < 0.5 points"
    return None


def _climb(accs: dict, first: int, cap: int, target: float | None = None, prev: float | None = None,
           early: int | None = None, stop_trains: bool = False, decided_at: float | None = None
           ) -> tuple[int | None, str]:
    """(next rung or None when the ladder stops, why) of a doubling ladder from ``first``, given the seed-mean
    accuracies found so far ({budget: acc or None}; ``prev``: the accuracy of the rung before ``first``).
    It stops at the first complete rung where :func:`_stop_rule` gives a rule, or where the next rung would
    pass ``cap`` (rule "cap")."""
    b = first
    while True:
        a = accs.get(b)
        if a is None:
            return (b, f"running: next rung {b:,} steps") if b <= cap else (None, f"cap: first rung {b:,} > {cap:,}")
        why = _stop_rule(b, a, prev, target, early, stop_trains, decided_at)
        if why is None and 2 * b > cap:
            why = f"cap: {b:,} steps is its largest budget ({_pct(a)})"
        if why:
            return None, why
        b, prev = 2 * b, a


def _baseline_state(runs, lad: Ladder, seeds):
    """(winner or None, {budget: seed-mean accuracy or None} of the baseline's rungs and doublings, next
    doubling or None (None also while a base rung is missing), why: the convergence rule's state)."""
    w = winner(runs, lad, seeds)
    if w is None:
        return None, {}, None, "waits for the tuning stage"
    accs = {b: _mean(runs, BASELINE, b, w[0], w[1], seeds)
            for b in list(lad.baseline) + _doublings(lad.baseline[-1], lad.baseline_cap)}
    if any(accs[b] is None for b in lad.baseline):
        return w, accs, None, "running: its fixed rungs"
    prev = accs[lad.baseline[-2]] if len(lad.baseline) > 1 else None
    return (w, accs, *_climb(accs, lad.baseline[-1], lad.baseline_cap, None, prev))


def _preset_ladder(runs, lad: Ladder, p: str, lr: float, d: float, seeds, target: float | None, cap: int):
    """(dropout, cap, {budget: seed-mean acc or None}, next rung or None, why) of preset ``p``'s ladder at
    the winner's rate ``lr`` and dropout ``d``, toward ``target`` (a*) under the baseline's largest budget
    ``cap`` (:data:`TARGETED`, :data:`EARLY_CAPPED`, :data:`STOP_WHEN_TRAINS` choose its rules; for
    :data:`CONTROL`, the rule "decided" once bn_x5's ladder has stopped at a*)."""
    dp = 0.0 if p in NO_DROPOUT else d
    pcap = min(cap, lad.early) if p in EARLY_CAPPED else cap
    accs = {b: _mean(runs, p, b, lr, dp, seeds) for b in _doublings(lad.starts[p], pcap, True)}
    decided_at = None
    if p == CONTROL and target is not None:
        _, _, x5, x5_next, _ = _preset_ladder(runs, lad, HEADLINE, lr, d, seeds, target, cap)
        got = sorted((b, a) for b, a in x5.items() if a is not None)
        b_x5, _ = budget_to_reach([b for b, _ in got], [a for _, a in got], target) if got else (None, False)
        decided_at = RATE_ALONE * b_x5 if x5_next is None and b_x5 is not None else None
    nxt, why = _climb(accs, lad.starts[p], pcap, target if p in TARGETED else None, None, lad.early,
                      p in STOP_WHEN_TRAINS, decided_at)
    return dp, pcap, accs, nxt, why


def _ordered(presets) -> list[str]:
    """The headline preset first, then the others in the given order."""
    return [p for p in presets if p == HEADLINE] + [p for p in presets if p != HEADLINE]


def presets_in_folder(runs: pd.DataFrame, lad: Ladder, presets) -> tuple[str, ...]:
    """``presets`` plus every other ladder preset (:data:`PRESET_SETS` "all" order) that has runs in the sweep
    folder: ladders.txt names the rule that stopped each of them, so a later call for fewer presets (PRESETS=bn_x5
    EXTRA_SEEDS=2, docs/cifar/PLAN.md's stage 5) does not drop the stop rules of the ladders it did not run."""
    have = set(runs["preset"]) if "preset" in runs else set()
    return tuple(presets) + tuple(p for p in PRESET_SETS["all"] if p in have and p in lad.starts and p not in presets)


def ladder_stops(runs: pd.DataFrame, lad: Ladder, presets, seeds) -> list[str]:
    """One line per ladder (the baseline's, then each preset's in run order): the rule that stopped it
    (a*, decided, chance, trains, converged, cap), or what it waits for / runs next."""
    seeds = tuple(seeds)
    w, accs, ext, why = _baseline_state(runs, lad, seeds)
    out = [f"baseline: {'stopped by ' if w and ext is None and not why.startswith('running') else ''}{why}"]
    if w is None or ext is not None or why.startswith("running"):
        return out + [f"{p}: waits for the baseline's ladder" for p in _ordered(presets)]
    done = {b: a for b, a in accs.items() if a is not None}
    head_done = True
    for p in _ordered(presets):
        if p != HEADLINE and not head_done:
            out.append(f"{p}: waits for the headline ({HEADLINE})")
            continue
        *_, nxt, pwhy = _preset_ladder(runs, lad, p, w[0], w[1], seeds, max(done.values()), max(done))
        out.append(f"{p}: {'stopped by ' if nxt is None else ''}{pwhy}")
        if p == HEADLINE:
            head_done = nxt is None
    return out


def _rungs_run(runs, lad: Ladder, presets, seeds) -> list[tuple[str, int, float, float]]:
    """(preset, budget, lr, dropout) of every rung the finished ladders ran on the decision seeds, the
    baseline's first, then the presets' in run order (ascending budget within each)."""
    w, accs, _, _ = _baseline_state(runs, lad, seeds)
    out = [(BASELINE, b, w[0], w[1]) for b in sorted(b for b, a in accs.items() if a is not None)]
    done = {b: a for b, a in accs.items() if a is not None}
    for p in _ordered(presets):
        dp, _, pa, _, _ = _preset_ladder(runs, lad, p, w[0], w[1], seeds, max(done.values()), max(done))
        out += [(p, b, w[0], dp) for b in sorted(b for b, a in pa.items() if a is not None)]
    return out


def next_batches(runs: pd.DataFrame, lad: Ladder, presets, seeds, extra_seeds=()) -> tuple[list[str], list[Batch]]:
    """(messages, batches) of the next stage with missing runs; ([...], []) when the sweep is complete.

    ``seeds`` decide every ladder; ``extra_seeds`` (stage 5) rerun the rungs the ladders ran, after them."""
    seeds = tuple(seeds)
    tune = [Batch(BASELINE, lad.tune_budget, (lr,), (d,), seeds) for lr in lad.tune_lrs for d in lad.tune_dropouts
            if _mean(runs, BASELINE, lad.tune_budget, lr, d, seeds) is None]
    if tune:
        return ([f"stage 1: tuning the baseline at {lad.tune_budget} steps: rates {list(lad.tune_lrs)} x dropout "
                 f"{list(lad.tune_dropouts)}, seeds {list(seeds)}"],
                [Batch(BASELINE, lad.tune_budget, lad.tune_lrs, lad.tune_dropouts, seeds)])
    (lr, d, acc), accs, ext, why = _baseline_state(runs, lad, seeds)
    msg = [f"the tuned baseline: lr={lr:g}, dropout={d:g} (seed-mean final test accuracy {100 * acc:.2f}% at "
           f"{lad.tune_budget} steps)"]
    missing = [b for b in lad.baseline if accs[b] is None] or ([ext] if ext is not None else [])
    if missing:
        return (msg + [f"stage 2: the baseline ladder (cap {lad.baseline_cap:,}): {sorted(missing, reverse=True)} "
                       "steps"], [Batch(BASELINE, b, (lr,), (d,), seeds) for b in sorted(missing, reverse=True)])
    done = {b: a for b, a in accs.items() if a is not None}
    target, cap = max(done.values()), max(done)
    msg.append(f"the baseline's ladder stopped by {why}: a* = {100 * target:.2f}%, its largest budget {cap:,}")
    head, rest = [], []
    for p in _ordered(presets):
        dp, _, _, nxt, _ = _preset_ladder(runs, lad, p, lr, d, seeds, target, cap)
        if nxt is not None:
            (head if p == HEADLINE else rest).append(Batch(p, nxt, (lr,), (dp,), seeds))
    if head:
        return msg + [f"stage 3: the headline {HEADLINE} toward a* at {head[0].budget:,} steps"], head
    if rest:
        return msg + ["stage 4: the other presets' ladders: " + ", ".join(f"{x.preset} at {x.budget:,}"
                                                                         for x in rest)], rest
    extra = tuple(s for s in extra_seeds if s not in seeds)
    todo = []
    for p, b, x, y in _rungs_run(runs, lad, presets, seeds):
        left = tuple(s for s in extra if _mean(runs, p, b, x, y, (s,)) is None)
        if left:
            todo.append(Batch(p, b, (x,), (y,), left))
    if todo:
        return msg + [f"stage 5: extra seeds {list(extra)} at the {len(todo)} rungs the ladders ran"], todo
    return msg + [f"complete: {line}" for line in ladder_stops(runs, lad, presets, seeds)], []


def _doublings(first: int, cap: int, inclusive_first: bool = False) -> list[int]:
    """``first`` (if ``inclusive_first``), 2 first, 4 first, ... up to ``cap``."""
    out, b = [], first if inclusive_first else 2 * first
    while b <= cap:
        out.append(b)
        b *= 2
    return out


def _rules_text(p: str, lad: Ladder) -> str:
    """The stop rules of preset ``p``'s ladder, short (the module docstring's names and order)."""
    rules = (["a*"] if p in TARGETED else []) + ([f"decided ({RATE_ALONE:g} x B_bn_x5(a*))"] if p == CONTROL else [])
    rules += [f"chance by {lad.early:,}"]
    rules += ["trains"] if p in STOP_WHEN_TRAINS else []
    rules += ["gain < 0.5", f"cap {lad.early:,}" if p in EARLY_CAPPED else "cap"]
    return "until " + " | ".join(rules)


def plan_table(runs: pd.DataFrame, lad: Ladder, presets, seeds, extra_seeds=()) -> pd.DataFrame:
    """Every run the ladders may need, one row per (stage, preset, budget): "when" it runs (always, or the
    condition of a doubling), its runs and steps (budget x seeds x configurations), and its status: done,
    to run, or not needed (its ladder has stopped, from the results so far). ``extra_seeds``: the stage-5
    rows, one per rung of stages 2-4 (and the tuning winner's run), with that rung's status until done."""
    seeds = tuple(seeds)
    extra = tuple(s for s in extra_seeds if s not in seeds)
    rows = []
    w, accs, ext, _ = _baseline_state(runs, lad, seeds)
    lr, d = (w[0], w[1]) if w else (None, None)

    def add(stage, p, b, lrs, ds, when, needed=True, on=seeds):
        n = len(lrs) * len(ds) * len(on)
        done = None not in lrs and all(_mean(runs, p, b, x, y, on) is not None for x in lrs for y in ds)
        rows.append({"stage": stage, "preset": p, "budget": b, "runs": n, "steps": n * b, "when": when,
                     "status": "done" if done else "to run" if needed else "not needed", "dropout": ds[0]})

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
    for p in _ordered(presets):
        nxt = None
        if final:
            dp, pcap, _, nxt, _ = _preset_ladder(runs, lad, p, lr, d, seeds, max(done.values()), cap)
        else:
            dp, pcap = (0.0 if p in NO_DROPOUT else d), (min(cap, lad.early) if p in EARLY_CAPPED else cap)
        for i, b in enumerate(_doublings(lad.starts[p], pcap, True)):
            add("3 headline" if p == HEADLINE else "4 presets", p, b, (lr,), (dp,),
                "always" if i == 0 else _rules_text(p, lad), not final or (nxt is not None and b >= nxt))
    if extra:
        decided = [dict(r) for r in rows if r["stage"] != "1 tune"]
        add("5 extra seeds", BASELINE, lad.tune_budget, (lr,), (d,), "always", True, extra)  # the tuning winner
        for r in decided:
            add("5 extra seeds", r["preset"], r["budget"], (lr,), (r["dropout"],), r["when"],
                r["status"] != "not needed", extra)
    return pd.DataFrame(rows).drop(columns="dropout")


def _args(argv):
    p = argparse.ArgumentParser(prog="python -m bnexp.designs.ladder", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["next", "plan"])
    p.add_argument("sweep_dir")
    p.add_argument("--scale", default="cpu")
    p.add_argument("--presets", default="default")
    p.add_argument("--seeds", default=None)
    p.add_argument("--extra-seeds", default="")
    p.add_argument("--ladder", default=None)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--steps-per-s", type=float, default=15.0)
    p.add_argument("--overhead-s", type=float, default=40.0)
    return p.parse_args(argv)


def _seeds(text: str, option: str) -> tuple[int, ...]:
    """Comma-separated whole numbers. Raises ValueError naming ``option`` otherwise."""
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise ValueError(f"{option}: {text!r} is not a comma-separated list of whole numbers") from None


def main(argv: list[str] | None = None) -> int:
    """The CLI (see the module docstring). Exit 2 with one message for a bad option."""
    try:
        a = _args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        lad = parse_ladder(a.scale, a.ladder)
        seeds = _seeds(a.seeds, "--seeds") if a.seeds else lad.seeds
        extra = tuple(s for s in _seeds(a.extra_seeds, "--extra-seeds") if s not in seeds)
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
        msgs, batches = next_batches(runs, lad, presets, seeds, extra)
        if batches:
            print("\n".join([f"# {m}" for m in msgs] + [" ".join(b.overrides()) for b in batches]))
        return 0
    t = plan_table(runs, lad, presets, seeds, extra)
    print(plan_text(t, a.jobs, a.steps_per_s, a.overhead_s)[0])
    print("ladders (the rule that stopped each, or what it runs next):")
    print("\n".join(f"  {line}" for line in ladder_stops(runs, lad, presets, seeds)))
    return 0


def plan_text(t: pd.DataFrame, jobs: int, steps_per_s: float, overhead_s: float) -> tuple[str, float, float]:
    """The DRY_RUN text of a :func:`plan_table` (the table, what is to run always and at most, with the
    wall time on ``jobs`` parallel jobs at ``steps_per_s`` per job + ``overhead_s`` per run, and what is
    done), and the two estimates in seconds: (text, always, at most). Each row is one multirun of its runs
    on min(jobs, runs) parallel jobs, the rows one after another."""
    lines, secs = [t.to_string(index=False)], []
    todo = t[t.status == "to run"]
    for label, sel in (("always", todo[todo.when == "always"]), ("at most", todo)):
        waves = -(-sel.runs // max(1, jobs))
        secs.append(float((waves * (sel.budget / steps_per_s + overhead_s)).sum()))
        lines.append(f"to run, {label}: {int(sel.runs.sum())} runs, {int(sel.steps.sum()):,} steps: about "
                     f"{secs[-1] / 3600:.1f} h ({secs[-1] / 60:.0f} min) with {jobs} jobs at {steps_per_s:g} steps/s "
                     f"per job + {overhead_s:g} s per run (start-up, evaluations)")
    lines.append(f"done: {int(t[t.status == 'done'].runs.sum())} runs, {int(t[t.status == 'done'].steps.sum()):,} "
                 "steps")
    return "\n".join(lines), secs[0], secs[1]


if __name__ == "__main__":
    sys.exit(main())
