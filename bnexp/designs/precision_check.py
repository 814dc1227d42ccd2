"""The bf16 check of the CIFAR-10 ladder (docs/cifar/PLAN.md, "Precision, amended 2026-11-29"): may the rest of
the sweep train in bfloat16?

bf16 autocast (``scale.precision=bf16``, :mod:`bnexp.train.precision`) changes the arithmetic of every
convolution and matrix product, so the ladder adopts it only after this check, which compares it with fp32
where both presets of the headline claim already have fp32 runs:

* **Runs**: the tuned baseline (the tuning winner's rate and dropout) and bn_x5, each at :data:`BUDGETS`
  (6,000 and 24,000 steps: rungs of both ladders), on the decision seeds, in fp32 (the ladder's own runs in
  the sweep folder) and in bf16 (the same overrides plus ``scale.precision=bf16``, in :func:`check_dir`, a
  folder beside the sweep's, so that a bf16 check run never enters a frontier).
* **Pass rule**: per cell c (preset x budget, 4 cells) d_c = bf16 seed-mean final test accuracy - fp32
  seed-mean and v_c = the cell's seed variance pooled over both precisions (2 degrees of freedom), which
  estimates Var(d_c). bf16's bias D = mean of the d_c, SE = sqrt(sum v_c) / 4, and its 95% Student-t interval
  on Welch-Satterthwaite's degrees of freedom. bf16 passes when no bf16 run diverged or fell back to fp32
  (summary.json's ``precision``: a CPU without native bfloat16 trains in fp32) and |D| <= max(t x SE,
  :data:`FLOOR`), FLOOR being the ladders' convergence threshold (0.5 points).

``python -m bnexp.designs.precision_check SWEEP_DIR`` prints the table and the verdict (exit 0 whatever the
verdict, 2 when a run is missing).
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from bnexp.designs.ladder import HEADLINE, NO_DROPOUT, Batch, Ladder, LADDERS, complete_runs, winner
from bnexp.analysis.frontier import BASELINE, GAIN, load_runs

PRESETS = (BASELINE, HEADLINE)  # the two presets of the headline claim S_bn_x5(a*)
BUDGETS = {"cpu": (6000, 24000), "gpu": (10000, 40000)}  # rungs of both presets' ladders at each scale
FLOOR = GAIN  # 0.5 points, the ladders' convergence threshold
RESULT = "precision_check.json"  # the verdict, in the sweep folder
BF16_OVERRIDE = "scale.precision=bf16"


def check_dir(sweep: str | Path) -> Path:
    """The folder of the check's bf16 runs: ``<sweep>_bf16_check`` beside the sweep folder."""
    sweep = Path(sweep)
    return sweep.with_name(sweep.name + "_bf16_check")


def ready(runs: pd.DataFrame, lad: Ladder, seeds) -> bool:
    """True once the check can run: the tuning stage and the baseline's fixed rungs are complete on ``seeds``
    (the check comes before any rung above them)."""
    w = winner(runs, lad, tuple(seeds))
    return w is not None and all(_seed_values(runs, BASELINE, b, w[0], w[1], seeds) is not None
                                 for b in lad.baseline)


def _seed_values(runs: pd.DataFrame, preset: str, budget: int, lr: float, dropout: float, seeds) -> pd.DataFrame | None:
    """The complete runs of one cell on ``seeds`` (one row per seed; the ladder's own selection of a rung,
    :func:`bnexp.designs.ladder.complete_runs`), None until every seed is complete."""
    d = complete_runs(runs, preset, budget, lr, dropout)
    if d.empty:
        return None
    d = d[d.seed.isin(list(seeds))].drop_duplicates("seed")
    return d if set(d.seed) >= set(seeds) else None


def cells(lad: Ladder, scale: str, w: tuple[float, float, float]) -> list[tuple[str, int, float, float]]:
    """(preset, budget, base rate, dropout) of every cell, for the tuning winner ``w`` = (rate, dropout, _)."""
    return [(p, b, w[0], 0.0 if p in NO_DROPOUT else w[1]) for p in PRESETS for b in BUDGETS[scale]]


def missing(main: pd.DataFrame, check: pd.DataFrame, lad: Ladder, scale: str, seeds) -> tuple[list[Batch], list[Batch]]:
    """(fp32 batches to run in the sweep folder, bf16 batches to run in :func:`check_dir`): the cells whose
    runs on ``seeds`` are not all complete. Call after :func:`ready`."""
    w = winner(main, lad, tuple(seeds))
    fp32, bf16 = [], []
    for p, b, lr, d in cells(lad, scale, w):
        if _seed_values(main, p, b, lr, d, seeds) is None:
            fp32.append(Batch(p, b, (lr,), (d,), tuple(seeds)))
        if _seed_values(check, p, b, lr, d, seeds) is None:
            bf16.append(Batch(p, b, (lr,), (d,), tuple(seeds)))
    longest_first = lambda bs: sorted(bs, key=lambda x: -x.budget)  # noqa: E731
    return longest_first(fp32), longest_first(bf16)


def verdict(main: pd.DataFrame, check: pd.DataFrame, lad: Ladder, scale: str, seeds) -> dict | None:
    """The check's table and verdict (docs/cifar/PLAN.md), None while a run of a cell is missing.

    Args:
        main, check: :func:`bnexp.analysis.frontier.runs_table` of the sweep folder (fp32 runs) and of
            :func:`check_dir` (bf16 runs), with ``status`` and ``precision`` columns.
        lad, scale, seeds: the ladder, its scale and the decision seeds.

    Returns:
        {"passed", "why" (None when passed), "bias", "bias_se", "df", "low", "high" (the 95% interval of the
        bias), "tolerance" (max(t x SE, FLOOR)), "floor", "seeds", "winner": {"lr", "dropout"}, "cells":
        [{"preset", "budget", "fp32": {seed: acc}, "bf16": {seed: acc}, "fp32_mean", "bf16_mean",
        "difference", "variance", "fp32_steps_per_s", "bf16_steps_per_s"}]}; accuracies are fractions of
        the test set, steps/s per job.

    Raises:
        ValueError: fewer than 2 seeds (no seed variance).
    """
    seeds = tuple(seeds)
    if len(seeds) < 2:
        raise ValueError(f"the bf16 check needs at least 2 decision seeds, got {list(seeds)}")
    w = winner(main, lad, seeds)
    if w is None:
        return None
    out, bad = [], []
    for p, b, lr, d in cells(lad, scale, w):
        f, h = _seed_values(main, p, b, lr, d, seeds), _seed_values(check, p, b, lr, d, seeds)
        if f is None or h is None:
            return None
        fa = {int(s): float(a) for s, a in zip(f.seed, f.final_test_accuracy)}
        ha = {int(s): float(a) for s, a in zip(h.seed, h.final_test_accuracy)}
        if (h.status == "diverged").any():
            bad.append(f"a bf16 run of {p} at {b:,} steps diverged")
        if "precision" in h and (h.precision != "bf16").any():
            bad.append(f"a bf16 run of {p} at {b:,} steps trained in fp32 (no native bfloat16 here)")
        var = (np.var(list(fa.values()), ddof=1) + np.var(list(ha.values()), ddof=1)) / 2
        out.append({"preset": p, "budget": b, "fp32": fa, "bf16": ha, "fp32_mean": float(np.mean(list(fa.values()))),
                    "bf16_mean": float(np.mean(list(ha.values()))), "variance": float(var),
                    "fp32_steps_per_s": _mean_col(f, "steps_per_s"), "bf16_steps_per_s": _mean_col(h, "steps_per_s")})
        out[-1]["difference"] = out[-1]["bf16_mean"] - out[-1]["fp32_mean"]
    n = len(seeds)
    v = np.array([2 * c["variance"] / n for c in out])  # Var(d_c) = sigma_c^2 / n + sigma_c^2 / n
    dfs = 2 * (n - 1)  # each cell's pooled variance: n - 1 degrees of freedom per precision
    bias = float(np.mean([c["difference"] for c in out]))
    se = float(np.sqrt(v.sum()) / len(out))
    df = float(v.sum() ** 2 / np.sum(v ** 2 / dfs)) if v.sum() > 0 else math.inf
    half = float(stats.t.ppf(0.975, df) * se) if se > 0 else 0.0
    tol = max(half, FLOOR)
    why = "; ".join(bad) or (None if abs(bias) <= tol else
                             f"bias {100 * bias:+.2f} points, outside +-{100 * tol:.2f} (its 95% interval excludes 0)")
    return {"passed": why is None, "why": why, "bias": bias, "bias_se": se, "df": df, "low": bias - half,
            "high": bias + half, "tolerance": tol, "floor": FLOOR, "seeds": list(seeds),
            "winner": {"lr": w[0], "dropout": w[1]}, "cells": out}


def _mean_col(d: pd.DataFrame, col: str) -> float | None:
    v = pd.to_numeric(d[col], errors="coerce").dropna() if col in d else pd.Series(dtype=float)
    return float(v.mean()) if len(v) else None


def table_text(v: dict) -> str:
    """The verdict as text: one line per cell, the bias with its interval, then the verdict (accuracies in
    points, speeds in steps/s per job)."""
    sps = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = [f"bf16 check (docs/cifar/PLAN.md): the tuned baseline (lr={v['winner']['lr']:g}, dropout="
             f"{v['winner']['dropout']:g}) and bn_x5, seeds {', '.join(map(str, v['seeds']))}"]
    for c in v["cells"]:
        lines.append(f"  {c['preset']:<9} {c['budget']:>6,} steps: fp32 {100 * c['fp32_mean']:.2f}%, bf16 "
                     f"{100 * c['bf16_mean']:.2f}%, d = {100 * c['difference']:+.2f} points; steps/s per job "
                     f"fp32 {sps(c['fp32_steps_per_s'])}, bf16 {sps(c['bf16_steps_per_s'])}")
    lines.append(f"  bias {100 * v['bias']:+.2f} points, 95% interval [{100 * v['low']:+.2f}, {100 * v['high']:+.2f}] "
                 f"(t on {v['df']:.1f} df); passes when |bias| <= max(half-width, {100 * v['floor']:.1f} points)")
    lines.append("verdict: bf16 adopted for every later run" if v["passed"] else
                 f"verdict: bf16 NOT adopted ({v['why']}); the sweep stays fp32")
    return "\n".join(lines)


def write(sweep: str | Path, v: dict) -> Path:
    """Write the verdict to ``<sweep>/precision_check.json``; returns its path."""
    path = Path(sweep) / RESULT
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(v, indent=2) + "\n")
    return path


def load_pair(sweep: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs tables of the sweep folder and of its check folder (warnings about runs in progress off)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_runs(sweep), load_runs(check_dir(sweep))


def main(argv: list[str] | None = None) -> int:
    """The CLI of the module docstring."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (1, 2) or args[0].startswith("-"):
        print("usage: python -m bnexp.designs.precision_check SWEEP_DIR [cpu|gpu]", file=sys.stderr)
        return 2
    scale = args[1] if len(args) == 2 else "cpu"
    if scale not in LADDERS:
        print(f"error: scale {scale!r}: use cpu or gpu", file=sys.stderr)
        return 2
    main_runs, check_runs = load_pair(args[0])
    lad = LADDERS[scale]
    v = verdict(main_runs, check_runs, lad, scale, lad.seeds)
    if v is None:
        print(f"error: {args[0]}: the check's runs are not all complete (fp32 in the sweep folder, bf16 in "
              f"{check_dir(args[0])})", file=sys.stderr)
        return 2
    print(table_text(v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
