"""The bf16 check of the CIFAR-10 ladder (bnexp.designs.precision_check; docs/cifar/PLAN.md, "Precision, amended
2026-11-29"): when it is ready, which runs it asks for, and its pass rule (bf16's bias over 4 cells inside its
Welch-Satterthwaite t interval or the 0.5-point floor), on synthetic runs tables (no training), with its
false-rejection rate simulated on data shaped like the check's."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bnexp.designs import ladder as L
from bnexp.designs import precision_check as P

CPU = L.LADDERS["cpu"]
TUNE = {("baseline", 6000, 0.025, 0.0): 0.61, ("baseline", 6000, 0.025, 0.3): 0.56,
        ("baseline", 6000, 0.04, 0.0): 0.59, ("baseline", 6000, 0.04, 0.3): 0.33}  # winner: 0.025, dropout 0


def table(cells: dict, precision="fp32", status="finished") -> pd.DataFrame:
    """A runs table: cells = {(preset, budget, lr, dropout): {seed: accuracy}}."""
    rows = [{"preset": p, "budget_steps": b, "seed": s, "final_test_accuracy": a, "base_lr": lr, "dropout": d,
             "status": status, "precision": precision, "steps_per_s": 30.0 if precision == "fp32" else 40.0}
            for (p, b, lr, d), per in cells.items() for s, a in per.items()]
    return pd.DataFrame(rows)


def fp32(base=None, x5=None) -> pd.DataFrame:
    """The sweep: the tuning grid, the baseline's fixed rungs and bn_x5's check rungs."""
    cells = {k: {0: v, 1: v} for k, v in TUNE.items()}
    cells.update({("baseline", b, 0.025, 0.0): {0: 0.5 + b / 1e5, 1: 0.5 + b / 1e5} for b in (3000, 12000, 24000)})
    cells.update(base or {})
    cells.update(x5 if x5 is not None else {("bn_x5", 6000, 0.025, 0.0): {0: 0.70, 1: 0.71},
                                            ("bn_x5", 24000, 0.025, 0.0): {0: 0.79, 1: 0.795}})
    return table(cells)


def bf16(shift=0.0, precision="bf16", status="finished", only=None) -> pd.DataFrame:
    """The check folder: every cell's fp32 values moved by ``shift`` (only in cell ``only`` when given)."""
    main = fp32()
    cells = {}
    for p, b, lr, d in P.cells(CPU, "cpu", L.winner(main, CPU, (0, 1))):
        m = main[(main.preset == p) & (main.budget_steps == b) & (main.base_lr == lr) & (main.dropout == d)]
        s = shift if only in (None, (p, b)) else 0.0
        cells[(p, b, lr, d)] = {int(r.seed): r.final_test_accuracy + s for r in m.itertuples()}
    return table(cells, precision, status)


def test_ready_only_after_tuning_and_the_baselines_fixed_rungs():
    main = fp32()
    assert P.ready(main, CPU, (0, 1))
    assert not P.ready(main[~((main.preset == "baseline") & (main.budget_steps == 24000))], CPU, (0, 1))
    assert not P.ready(main[~((main.base_lr == 0.04) & (main.dropout == 0.3))], CPU, (0, 1))  # tuning incomplete


def test_cells_are_the_winner_and_bn_x5_at_6k_and_24k_without_dropout_for_bn_x5():
    w = L.winner(fp32(), CPU, (0, 1))
    assert P.cells(CPU, "cpu", (0.04, 0.3, w[2])) == [("baseline", 6000, 0.04, 0.3), ("baseline", 24000, 0.04, 0.3),
                                                       ("bn_x5", 6000, 0.04, 0.0), ("bn_x5", 24000, 0.04, 0.0)]
    # both budgets are rungs of both ladders, at each scale
    for scale, lad in L.LADDERS.items():
        for b in P.BUDGETS[scale]:
            assert b in L._doublings(lad.starts["bn_x5"], lad.baseline_cap, True)
            assert b in lad.baseline or b in L._doublings(lad.baseline[-1], lad.baseline_cap)


def test_missing_asks_for_the_fp32_bn_x5_runs_in_the_sweep_and_every_bf16_run_in_the_check_folder():
    main = fp32(x5={})
    f, h = P.missing(main, table({}), CPU, "cpu", (0, 1))
    assert [(b.preset, b.budget, b.lrs, b.dropout, b.seeds) for b in f] == [
        ("bn_x5", 24000, (0.025,), (0.0,), (0, 1)), ("bn_x5", 6000, (0.025,), (0.0,), (0, 1))]
    assert [(b.preset, b.budget) for b in h] == [("baseline", 24000), ("bn_x5", 24000), ("baseline", 6000),
                                                 ("bn_x5", 6000)]
    assert P.missing(fp32(), bf16(), CPU, "cpu", (0, 1)) == ([], [])
    assert P.verdict(main, bf16(), CPU, "cpu", (0, 1)) is None  # a cell without fp32 runs: no verdict


def test_identical_bf16_passes_and_a_bias_beyond_the_interval_fails():
    v = P.verdict(fp32(), bf16(), CPU, "cpu", (0, 1))
    assert v["passed"] and v["bias"] == 0 and all(c["difference"] == 0 for c in v["cells"])
    # by hand: only bn_x5 at 6k has seed variance, (0.71 - 0.70)^2 / 2 = 5e-5 in each precision, and
    # bn_x5 at 24k 0.005^2 / 2; Var(d_c) = that (2 seeds); SE = sqrt(sum) / 4; df = (sum)^2 / sum(v^2 / 2)
    a = np.array([0.01 ** 2 / 2, 0.005 ** 2 / 2])
    se, df = math.sqrt(a.sum()) / 4, a.sum() ** 2 / np.sum(a ** 2 / 2)
    assert v["bias_se"] == pytest.approx(se) and v["df"] == pytest.approx(df)
    half = stats.t.ppf(0.975, df) * se
    assert v["high"] == pytest.approx(half) and v["tolerance"] == pytest.approx(max(half, P.FLOOR))
    # the tolerance here: t(2.9 df) x SE = 0.64 points, above the 0.5-point floor. A bias of 0.6 points
    # everywhere passes; 0.8 points fails
    assert half == pytest.approx(0.0064, abs=2e-4)
    assert P.verdict(fp32(), bf16(0.006), CPU, "cpu", (0, 1))["passed"]
    v = P.verdict(fp32(), bf16(-0.008), CPU, "cpu", (0, 1))
    assert not v["passed"] and v["bias"] == pytest.approx(-0.008) and "-0.80 points" in v["why"]
    # one cell moved by 2.4 points moves the bias by 0.6 points: a pass; by 3 points (0.75): a fail
    assert P.verdict(fp32(), bf16(0.024, only=("bn_x5", 24000)), CPU, "cpu", (0, 1))["passed"]
    assert not P.verdict(fp32(), bf16(0.03, only=("bn_x5", 24000)), CPU, "cpu", (0, 1))["passed"]
    assert "NOT adopted" in P.table_text(v) and "bias -0.80 points" in P.table_text(v)


def test_a_diverged_or_fp32_fallback_run_fails_even_at_equal_accuracy():
    v = P.verdict(fp32(), bf16(status="diverged"), CPU, "cpu", (0, 1))
    assert not v["passed"] and "diverged" in v["why"]
    v = P.verdict(fp32(), bf16(precision="fp32"), CPU, "cpu", (0, 1))
    assert not v["passed"] and "trained in fp32" in v["why"]
    with pytest.raises(ValueError, match="at least 2 decision seeds"):
        P.verdict(fp32(), bf16(), CPU, "cpu", (0,))


def _simulated_rejections(sds, bias=0.0, n=40_000, seed=0) -> float:
    """The share of simulated checks that reject bf16: 4 cells with seed SDs ``sds``, 2 seeds per precision,
    bf16 shifted by ``bias``; each check goes through :func:`verdict` on tables built like the sweep's."""
    rng = np.random.default_rng(seed)
    sds = np.asarray(sds)
    f = 0.6 + rng.normal(0, 1, (n, 4, 2)) * sds[None, :, None]
    h = 0.6 + bias + rng.normal(0, 1, (n, 4, 2)) * sds[None, :, None]
    # the verdict's arithmetic, vectorised; one draw also goes through verdict() itself below
    v = ((f[..., 0] - f[..., 1]) ** 2 / 2 + (h[..., 0] - h[..., 1]) ** 2 / 2) / 2
    se, df = np.sqrt(v.sum(1)) / 4, v.sum(1) ** 2 / (v ** 2 / 2).sum(1)
    d = (h.mean(2) - f.mean(2)).mean(1)
    return float(np.mean(np.abs(d) > np.maximum(stats.t.ppf(0.975, df) * se, P.FLOOR)))


def test_simulated_false_rejection_of_an_exact_bf16_stays_near_5_percent_and_a_gross_bias_is_caught():
    """On data shaped like the check's (4 cells, 2 seeds, seed SDs of 0.2-3 points, plan version 1's spread at
    3k-24k steps), an exact bf16 is rejected in <= 6% of checks, and a 3-point bias in most."""
    for sds in ([0.015] * 4, [0.026, 0.016, 0.01, 0.004], [0.03, 0.002, 0.002, 0.002], [0.003] * 4):
        assert _simulated_rejections(sds) <= 0.06
    assert _simulated_rejections([0.015] * 4, bias=0.03) > 0.8
    assert _simulated_rejections([0.003] * 4, bias=0.01) > 0.99
    # the rule it replaced (per cell |d| <= max(fp32 range, 0.5 points)) rejected an exact bf16 most of the time
    rng = np.random.default_rng(1)
    f, h = rng.normal(0, 0.015, (40_000, 4, 2)), rng.normal(0, 0.015, (40_000, 4, 2))
    old = (np.abs(h.mean(2) - f.mean(2)) > np.maximum(np.abs(f[..., 0] - f[..., 1]), P.FLOOR)).any(1)
    assert old.mean() > 0.8


def test_the_vectorised_simulation_is_the_verdicts_arithmetic():
    rng = np.random.default_rng(2)
    main, check = fp32(), bf16()
    for frame in (main, check):
        sel = frame.preset.isin(["baseline", "bn_x5"]) & frame.budget_steps.isin([6000, 24000]) & (frame.dropout == 0)
        frame.loc[sel, "final_test_accuracy"] = 0.6 + rng.normal(0, 0.02, sel.sum())
    v = P.verdict(main, check, CPU, "cpu", (0, 1))
    f = np.array([[c["fp32"][0], c["fp32"][1]] for c in v["cells"]])
    h = np.array([[c["bf16"][0], c["bf16"][1]] for c in v["cells"]])
    var = ((f[:, 0] - f[:, 1]) ** 2 / 2 + (h[:, 0] - h[:, 1]) ** 2 / 2) / 2
    assert v["bias_se"] == pytest.approx(np.sqrt(var.sum()) / 4)
    assert v["df"] == pytest.approx(var.sum() ** 2 / (var ** 2 / 2).sum())
    assert v["bias"] == pytest.approx((h.mean(1) - f.mean(1)).mean())


def test_check_dir_is_beside_the_sweep(tmp_path):
    assert P.check_dir(tmp_path / "cifar_frontier_cpu") == tmp_path / "cifar_frontier_cpu_bf16_check"
    path = P.write(tmp_path, P.verdict(fp32(), bf16(), CPU, "cpu", (0, 1)))
    assert path.name == "precision_check.json" and '"passed": true' in path.read_text()


def test_cli_without_runs_exits_2(tmp_path, capsys):
    assert P.main([str(tmp_path)]) == 2 and "not all complete" in capsys.readouterr().err
    assert P.main([]) == 2


# ----- the report's side: which rungs ran in which precision, and the check's verdict on the page -----

def _summaries():
    """Summaries of a sweep: the tuning and fixed rungs in fp32, later rungs in bf16 (steps/s per run)."""
    out = []
    for budget, precision, sps in ((3000, "fp32", 30.0), (6000, "fp32", 30.0), (12000, "fp32", 28.0),
                                   (24000, "fp32", 26.0), (48000, "bf16", 40.0), (96000, "bf16", 42.0)):
        out += [{"experiment": "baseline", "max_steps": budget, "status": "finished", "precision": precision,
                 "steps_per_s": sps, "seed": s} for s in (0, 1)]
    out += [{"experiment": "bn_x5", "max_steps": b, "status": "finished", "precision": "fp32", "steps_per_s": 22.0}
            for b in (375, 750, 1500, 6000)]
    out.append({"experiment": "bn_x5", "max_steps": 12000, "status": "running", "precision": "bf16"})
    return out


def test_precision_record_lists_each_presets_rungs_per_precision_and_reads_the_verdict(tmp_path):
    from bnexp.report.frontier_plan_v2 import precision_record

    P.write(tmp_path, P.verdict(fp32(), bf16(0.004), CPU, "cpu", (0, 1)))
    rec = precision_record(_summaries(), tmp_path)
    assert rec["rungs"] == [
        {"preset": "baseline", "precision": "bf16", "budgets": "48k-96k", "runs": 4},
        {"preset": "baseline", "precision": "fp32", "budgets": "3k-24k", "runs": 8},
        {"preset": "bn_x5", "precision": "fp32", "budgets": "375-1.5k, 6k", "runs": 4}]  # the running run is left out
    assert [(s["preset"], s["precision"], s["steps_per_s"]) for s in rec["speed"]] == [
        ("baseline", "bf16", pytest.approx(41.0)), ("baseline", "fp32", pytest.approx(28.5)),
        ("bn_x5", "fp32", pytest.approx(22.0))]
    assert rec["check"]["passed"] and rec["check"]["bias"] == pytest.approx(0.004)
    # an all-fp32 sweep without a check (plan version 1's) has no record: its report is unchanged
    fp32_only = [s for s in _summaries() if s["precision"] == "fp32"]
    assert precision_record(fp32_only, tmp_path / "elsewhere") is None
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "precision_check.json").write_text("{cut off")
    assert precision_record(_summaries(), tmp_path / "broken")["check"] is None


def test_the_page_says_the_verdict_its_cells_and_the_rungs_by_precision(tmp_path):
    from bnexp.report.fmt import render_template
    from bnexp.report.frontier_plan_v2 import precision_record

    P.write(tmp_path, P.verdict(fp32(), bf16(-0.03), CPU, "cpu", (0, 1)))
    report = {"frontier_analysis": {"precision": json.loads(json.dumps(precision_record(_summaries(), tmp_path)))}}
    text = render_template("frontier_v2.md.j2", report, {})
    assert "bf16's bias over its 4 cells is -3.00 points" in text
    assert "failed (bias -3.00 points" in text and "the sweep stays fp32" in text
    assert "| bn_x5 | 24,000 | 79.25% (79.00, 79.50) | 76.25% (76.00, 76.50) | -3.00 |" in text
    assert "baseline bf16 at 48k-96k (4 runs); baseline fp32 at 3k-24k (8 runs)" in text
    assert "baseline bf16 41.0; baseline fp32 28.5; bn_x5 fp32 22.0." in text
