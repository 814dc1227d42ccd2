"""Speedups at each network's own best rate (docs/mnist/README.md "Design") on synthetic sweeps whose steps-to-target
are set by hand, and the MNIST sweep's fixed design (bnexp/designs/mnist.py, scripts/reproduce_mnist.sh)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from test_report import has_row, make_run  # noqa: E402  (synthetic run builders)

from bnexp.designs import mnist as design  # noqa: E402
from bnexp.report import build_report  # noqa: E402
from bnexp.analysis.tuning import EVERY_SEED, HIGHEST_FINAL, SPEEDUP_TARGETS  # noqa: E402
from bnexp.report.best_rate import SPEEDUP_THRESHOLD, init_of  # noqa: E402
from bnexp.analysis.rules import Censored  # noqa: E402
from bnexp.report.claims import INCONCLUSIVE, SUPPORTED  # noqa: E402
from bnexp.report.render import render_files  # noqa: E402

from conftest import REPO  # noqa: E402

EVERY, BUDGET, TARGETS = 250, 6000, [0.9, 0.95, 0.97]


def knots(at90, at95, at97):
    """An accuracy curve reaching 90%, 95% and 97% at the given steps (None: never)."""
    k = [(0, 0.1)] + [(s, a) for s, a in ((at90, 0.9), (at95, 0.95), (at97, 0.97)) if s is not None]
    return sorted(k)


def run(root: Path, bn: bool, init: str, lr: float, seed: int, k, **kw) -> None:
    d = make_run(root, f"bn={bn},init={init},lr={lr},seed={seed}", bn=bn, lr=lr, seed=seed, knots=k,
                 max_steps=BUDGET, every=EVERY, targets=TARGETS, **kw)
    cfg_file = d / ".hydra" / "config.yaml"
    cfg = yaml.safe_load(cfg_file.read_text())
    cfg["model"]["init"] = init
    cfg_file.write_text(yaml.safe_dump(cfg, sort_keys=False))


# seed -> (steps to 90%, 95%, 97%); None: never within the 6,000-step budget
NORMAL = {
    (True, 1.0): {1: (500, 1000, 2000), 2: (500, 1250, 2500), 3: (750, 1500, 3000)},
    (True, 4.0): {1: (250, 750, 2500), 2: (250, 1000, 2750), 3: (250, 1000, 3000)},
    (False, 1.0): {1: (2000, 4000, None), 2: (2500, 4500, None), 3: (3000, 5000, None)},
    (False, 2.0): {1: (1500, 3000, None), 2: (1750, 3500, None), 3: (2000, None, None)},
}
XAVIER = {
    (True, 1.0): {1: (250, 500, 4000), 2: (250, 500, 5000), 3: (250, 750, 6000)},
    (True, 2.0): {1: (500, 1000, 5000), 2: (500, 1000, 5500), 3: (500, 1000, None)},
    (False, 1.0): {1: (500, 1000, 2000), 2: (750, 1250, 2500), 3: (1000, 1500, None)},
    (False, 2.0): {1: (750, 1500, None), 2: (1000, 1750, None), 3: (1250, 2000, None)},
}


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> Path:
    """Two inits x BN / no BN x two rates x seeds 1-3, plus a no-BN rate that diverges (too high)."""
    root = tmp_path_factory.mktemp("speedups") / "grid"
    for init, table in (("normal", NORMAL), ("xavier", XAVIER)):
        for (bn, lr), seeds in table.items():
            for seed, steps in seeds.items():
                run(root, bn, init, lr, seed, knots(*steps))
    for seed in (1, 2, 3):
        run(root, False, "normal", 8.0, seed, [(0, 0.1)], status="diverged", diverged_step=300)
    return root


@pytest.fixture(scope="module")
def report(grid):
    """The report of :func:`grid`, built once (the machine is shared: each build takes a while)."""
    return build_report(grid)


def rows_by(report) -> dict:
    return {(r["init"], r["target"]): r for r in report.data["best_rate_speedups"]}


def test_targets_and_threshold_are_fixed():
    assert SPEEDUP_TARGETS == (0.90, 0.95, 0.97) and SPEEDUP_THRESHOLD == 1.0


def test_speedup_per_seed_at_each_ones_best_rate_per_target(report):
    rows = rows_by(report)
    assert list(rows) == [("normal", t) for t in SPEEDUP_TARGETS] + [("xavier", t) for t in SPEEDUP_TARGETS]
    # 95%: BN's best rate is 4 (mean 916.7 < 1,250 at lr 1), no BN's is 1 (lr 2 misses 95% in seed 3, lr 8 diverged)
    r = rows[("normal", 0.95)]
    assert (r["bn_lr"], r["no_bn_lr"]) == (4.0, 1.0) and r["bn_selection"] == r["no_bn_selection"] == EVERY_SEED
    assert r["bn_steps"] == {1: 750, 2: 1000, 3: 1000} and r["no_bn_steps"] == {1: 4000, 2: 4500, 3: 5000}
    assert r["per_seed"] == pytest.approx({1: 4000 / 750, 2: 4500 / 1000, 3: 5000 / 1000})
    logs = np.log([4000 / 750, 4.5, 5.0])  # the interval of the mean log ratio (scipy's t), exponentiated
    lo, hi = sps.t.interval(0.95, 2, loc=logs.mean(), scale=logs.std(ddof=1) / np.sqrt(3))
    assert r["mean"] == pytest.approx((4000 / 750 * 4.5 * 5) ** (1 / 3))  # the geometric mean
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((np.exp(lo), np.exp(hi)))
    assert r["verdict"] == SUPPORTED and r["lower_bound_seeds"] == [] and r["threshold"] == 1.0
    # 90%: no BN's best rate is now 2 (every seed reached 90% there, mean 1,750 < 2,500): chosen per target
    r = rows[("normal", 0.9)]
    assert (r["bn_lr"], r["no_bn_lr"]) == (4.0, 2.0)
    assert r["per_seed"] == pytest.approx({1: 6.0, 2: 7.0, 3: 8.0}) and r["verdict"] == SUPPORTED
    # 97%: BN's best rate is 1 (2,500 < 2,750); no BN reaches 97% at no rate: the highest mean final
    # accuracy picks the rate (lr 1 ends at 95% in every seed, lr 2 at 95, 95, 90%, lr 8 diverged)
    r = rows[("normal", 0.97)]
    assert r["bn_lr"] == 1.0 and r["bn_steps"] == {1: 2000, 2: 2500, 3: 3000}
    assert r["no_bn_selection"] == HIGHEST_FINAL and r["no_bn_lr"] == 1.0
    assert r["no_bn_steps"] == {1: None, 2: None, 3: None} and r["no_bn_budget"] == BUDGET


def test_lower_bounds_are_marked_and_never_count_against_bn(report):
    rows = rows_by(report)
    r = rows[("normal", 0.97)]  # every no-BN seed missed 97%: budget / BN steps, lower bounds, still > 1
    assert r["per_seed"] == pytest.approx({1: 3.0, 2: 2.4, 3: 2.0}) and r["lower_bound_seeds"] == [1, 2, 3]
    assert r["verdict"] == SUPPORTED and r["bounds"] == {1: "lower", 2: "lower", 3: "lower"}
    assert r["ci_high"] is None and r["ci_low"] > 1.0  # the upper side is open; the lower side decides
    # xavier, 97%: no BN is faster in seeds 1, 2 (0.5, 0.5) and its seed 3 missed 97% (6,000 / 6,000 = 1.0, a
    # lower bound): the interval's upper side is open, so it cannot lie below 1: inconclusive, not "not supported"
    r = rows[("xavier", 0.97)]
    assert r["no_bn_selection"] == HIGHEST_FINAL and r["no_bn_lr"] == 1.0  # final 97, 97, 95% vs 95% at lr 2
    assert r["per_seed"] == pytest.approx({1: 0.5, 2: 0.5, 3: 1.0}) and r["lower_bound_seeds"] == [3]
    assert r["left_out"] == {} and r["ci_high"] is None and r["ci_low"] < 1.0
    assert r["verdict"] == INCONCLUSIVE and "upper side is open" in r["reason"]


def test_seed_ratio_by_hand():
    assert Censored.steps(2000, 6000) / Censored.steps(500, 6000) == Censored(4.0)
    no_bn_missed = Censored.steps(None, 6000) / Censored.steps(500, 6000)  # no BN needs more than 6,000 steps
    assert (no_bn_missed.value, no_bn_missed.bound) == (12.0, "lower")
    bn_missed = Censored.steps(2000, 6000) / Censored.steps(None, 6000)  # only an upper bound
    assert (bn_missed.value, bn_missed.bound) == (2000 / 6000, "upper")
    assert (Censored.steps(None, 6000) / Censored.steps(None, 6000)).bound == "unknown"


def test_init_control_rows(report):
    rows = rows_by(report)
    for t, expected in ((0.9, {1: 2.0, 2: 3.0, 3: 4.0}), (0.95, {1: 2.0, 2: 2.5, 3: 2.0})):
        r = rows[("xavier", t)]
        assert r["init"] == "xavier" and r["name"] == f"BN trains in fewer steps to {t * 100:g}% (xavier init)"
        assert (r["bn_lr"], r["no_bn_lr"]) == (1.0, 1.0) and r["per_seed"] == pytest.approx(expected)
        assert r["verdict"] == SUPPORTED
    assert init_of({"model.init": "xavier"}) == "xavier"
    assert init_of({"model.init_std": 0.01, "model.name": "mlp"}) == "normal"  # older configs without the key


def test_report_files_carry_the_claims(report):
    files = render_files(report)
    rows = json.loads(files["report.json"])["best_rate_speedups"]
    assert len(rows) == 6 and {r["verdict"] for r in rows} == {SUPPORTED, INCONCLUSIVE}
    assert {"target", "init", "per_seed", "ci_low", "ci_high", "std", "verdict"} <= set(rows[0])
    assert rows[0]["bn"] == "BN model.init=normal" and rows[0]["no_bn"] == "no BN model.init=normal"
    md = files["report.md"].decode("utf-8")
    assert "## Speedup at each network's own best rate, per target (claims)" in md
    assert has_row(md, "BN trains in fewer steps to 95% (normal init)")
    assert has_row(md, "normal", "97%", "1 (lowest of grid)", "1: 2,000, 2: 2,500, 3: 3,000",
                   "1 (lowest of grid) (highest final accuracy)", "1: not reached, 2: not reached, 3: not reached",
                   "1: >= 3.00, 2: >= 2.40, 3: >= 2.00")


# ------------------------------------------------------------------------------ the sweep's design


def test_refined_grids_have_neighbours_at_most_1_5x_apart():
    by = {(b.bn, b.init): b for b in design.BLOCKS}
    nobn, bn = by[(False, "normal")], by[(True, "normal")]
    lo, hi = design.REFINED_RANGE
    assert (lo, hi) == (1.2, 7.2) and lo in nobn.rates and hi in nobn.rates
    for block in (nobn, bn):
        ratios = design.neighbour_ratios(block.rates, *block.refined)
        assert len(ratios) >= 4 and max(ratios) <= design.MAX_NEIGHBOUR_RATIO + 1e-9, block
    assert design.neighbour_ratios([1.2, 1.8, 2.4]) == pytest.approx([1.5, 4 / 3])
    # the outer rates that show the grid's edges: the paper's 0.12, 0.6, and 14.4 (no BN at chance)
    assert {0.12, 0.6, 14.4} <= set(nobn.rates) and {0.12, 0.6, 28.8} <= set(bn.rates)
    assert {b.init for b in design.BLOCKS} == {"normal", "xavier"} and len(design.BLOCKS) == 4


def test_tuning_seeds_exclude_the_pilot_and_the_evaluation_seeds_and_evaluation_every_250():
    """docs/mnist/PLAN.md: the grid runs on the tuning seeds 100-102, disjoint from the evaluation seeds (its
    amendment: the fresh 1000-1004, not the committed sweeps' 0-4; test_grid_edge_designs checks them against
    every committed report); the pilot seed 0 chose the grids' ranges (not a rate)."""
    assert design.SEEDS == (100, 101, 102) and design.PILOT_SEED not in design.SEEDS
    assert not set(design.SEEDS) & set(design.EVALUATION_SEEDS) and design.EVALUATION_SEEDS == (1000, 1001, 1002,
                                                                                               1003, 1004)
    assert design.EVAL_EVERY == 250
    ov = design.block_overrides(design.BLOCKS[2])
    assert "model.init=xavier" in ov and "seed=100,101,102" in ov and "trainer.eval_every=250" in ov


def test_script_header_states_the_design():
    """The header of scripts/reproduce_mnist.sh lists exactly the grids and seeds of bnexp/designs/mnist.py."""
    text = (REPO / "scripts" / "reproduce_mnist.sh").read_text()
    for b in design.BLOCKS:
        m = re.search(rf"^#\s+{'BN' if b.bn else 'no BN'},\s+{b.init} init.*?:\s+lr ([\d., ]+)$", text, re.M)
        assert m, b
        assert tuple(float(x) for x in m.group(1).split(",")) == b.rates
    seeds = lambda ss: ", ".join(map(str, ss))  # noqa: E731
    assert f"tuning seeds {seeds(design.TUNING_SEEDS)}" in text and design.TUNING_SEEDS == (100, 101, 102)
    assert f"evaluation seeds {seeds(design.EVALUATION_SEEDS)}" in text
    assert f"data.validation={design.VALIDATION}" in text and "data.validation=10000" in text
    assert "trainer.max_steps=30000" in text


def test_bn_rows_compare_batch_normalization_not_other_normalizers():
    """A setting with BN, LayerNorm and no BN families: the claim "BN trains in fewer steps" uses BN's family
    (per seed 400 / 100 = 4), never LayerNorm's (400 / 50 = 8), whichever family comes last."""
    import pandas as pd

    from bnexp.report.best_rate import best_rate_speedups
    from bnexp.report.groups import ConfigGroup
    from bnexp.analysis.runs import config_key

    steps = {("batch", True, 1.0): 100, ("batch", True, 2.0): 200, ("layer", True, 1.0): 50,
             ("layer", True, 2.0): 60, ("batch", False, 1.0): 400, ("batch", False, 2.0): 500}
    groups, rows = [], []
    for (norm, bn, lr), s in steps.items():
        cfg = {"bn.enabled": bn, "bn.norm": norm, "lr": lr, "trainer.max_steps": 1000, "model.init": "normal"}
        groups.append(ConfigGroup(config_key(cfg), cfg))
        rows += [{"group": groups[-1].key, "seed": seed, "status": "finished", "lr": lr, "steps_to_0.9": float(s),
                  "final_test_accuracy": 0.95, "left_chance": True} for seed in range(3)]
    (row,) = best_rate_speedups(groups, pd.DataFrame(rows), targets=(0.9,))
    assert (row["variant"], row["bn_lr"], row["no_bn_lr"]) == ("BN", 1.0, 1.0)
    assert row["per_seed"] == {0: 4.0, 1: 4.0, 2: 4.0} and row["verdict"] == SUPPORTED


# Held-out tuning (docs/mnist/PLAN.md): tuning seeds 100-102 over the grid, evaluation seeds 0-4 at chosen rates.
# Tuning, normal init, steps to (90%, 95%, 97%). BN: lr 1 has a failed 97% seed, lr 4 reaches everything
# faster at 90/95 -> lr 4 chosen for 95% (mean 1,000 vs 1,500) and for 97% (no failed seed at lr 4).
# no BN: at 95% lr 2 is faster on every seed (3,000 vs 4,000 mean) -> 2 chosen; at 97% lr 1 has one failed
# seed and lr 2 two -> lr 1 chosen (fewest failed), censored (every rate has a failed seed).
HELD_TUNING = {
    (True, 1.0): {100: (500, 1500, 3000), 101: (500, 1500, None), 102: (500, 1500, 3000)},
    (True, 4.0): {100: (250, 1000, 2000), 101: (250, 1000, 2000), 102: (250, 1000, 2000)},
    (False, 1.0): {100: (2000, 4000, 5000), 101: (2000, 4000, None), 102: (2000, 4000, 5000)},
    (False, 2.0): {100: (1500, 3000, None), 101: (1500, 3000, None), 102: (1500, 3000, 5500)},
}
# evaluation seeds: BN at lr 4; no BN at lr 2 (95%) and lr 1 (97%); also a BN run at the unchosen lr 1 on
# the evaluation seeds whose (very fast) steps must not be scored
HELD_EVAL = {
    (True, 4.0): {s: (250, 750 + 250 * (s % 2), 2000) for s in range(5)},
    (False, 2.0): {s: (1500, 3000 + 250 * s, None) for s in range(5)},
    (False, 1.0): {s: (2000, 4000, 5000 + 250 * (s % 3)) for s in range(5)},
    (True, 1.0): {s: (250, 250, 250) for s in range(5)},
}


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("held_out") / "grid"
    for table in (HELD_TUNING, HELD_EVAL):
        for (bn, lr), seeds in table.items():
            for seed, steps in seeds.items():
                run(root, bn, "normal", lr, seed, knots(*steps))
    rep = build_report(root)
    return rep, render_files(rep)["report.md"].decode()


def test_held_out_tuning_chooses_on_tuning_seeds_and_scores_only_evaluation_seeds(held_out):
    rep, md = held_out
    d = rep.data
    assert d["tuning_seeds"] == [100, 101, 102] and d["evaluation_seeds"] == [0, 1, 2, 3, 4]
    rows = {r["target"]: r for r in d["best_rate_speedups"] if r["init"] == "normal"}
    r95, r97 = rows[0.95], rows[0.97]
    assert (r95["bn_lr"], r95["no_bn_lr"]) == (4.0, 2.0) and (r97["bn_lr"], r97["no_bn_lr"]) == (4.0, 1.0)
    assert r97["no_bn_choice"]["censored"] and not r95["no_bn_choice"]["censored"]
    assert [g["rate"] for g in r97["no_bn_choice"]["grid"] if g["chosen"]] == [1.0]
    # only the evaluation seeds are scored, at the chosen rates
    assert sorted(r95["bn_steps"]) == [0, 1, 2, 3, 4]
    assert r95["bn_steps"] == {s: 750 + 250 * (s % 2) for s in range(5)}
    expected = {s: (3000 + 250 * s) / (750 + 250 * (s % 2)) for s in range(5)}
    got = {int(k): v for k, v in r95["per_seed"].items()}
    assert got == pytest.approx(expected)
    gm = float(np.exp(np.mean(np.log(list(expected.values())))))
    assert r95["mean"] == pytest.approx(gm) and r95["interval"]["n"] == 5
    # no-BN at 97% is reached on every evaluation seed: exact ratios 5,000-5,500 / 2,000
    assert {int(k): v for k, v in r97["per_seed"].items()} == pytest.approx(
        {s: (5000 + 250 * (s % 3)) / 2000 for s in range(5)})
    assert "Held-out tuning" in md and "Tuning grid (seeds 100, 101, 102" in md and "**4: 0/3 failed, 1,000**" in md


def test_a_held_out_sweep_without_a_recorded_budget_takes_the_runs_last_step(held_out, tmp_path):
    """A hand-edited sweep whose configs and summaries lack max_steps: the tuning's budget (a failed seed's
    steps) is the runs' last step, 6,000 here as trainer.max_steps was, so the choices and the scored seeds are
    the same (it used to end in ValueError: max() of an empty sequence)."""
    import shutil

    rep, _ = held_out
    root = tmp_path / "grid"
    shutil.copytree(rep.sweep_dir, root)
    for f in root.rglob(".hydra/config.yaml"):
        cfg = yaml.safe_load(f.read_text())
        del cfg["trainer"]["max_steps"]
        f.write_text(yaml.safe_dump(cfg, sort_keys=False))
    for f in root.rglob("summary.json"):
        summary = json.loads(f.read_text())
        assert summary.pop("max_steps") == summary["step"] == BUDGET
        f.write_text(json.dumps(summary))
    keys = ("target", "init", "bn_lr", "no_bn_lr", "per_seed", "mean")
    want = [{k: r[k] for k in keys} for r in rep.data["best_rate_speedups"]]
    assert [{k: r[k] for k in keys} for r in build_report(root).data["best_rate_speedups"]] == want


def test_the_claims_table_of_a_held_out_sweep_scores_only_the_evaluation_seeds(held_out):
    """BN and no BN both ran at lr 1 on the tuning seeds (95% at 1,500 and 4,000 steps) and on the evaluation
    seeds (250 and 4,000): the equal-rate claim "BN trains in fewer steps" pairs the evaluation seeds alone,
    4,000 / 250 = 16 on each, never a tuning seed's 4,000 / 1,500 (docs/mnist/PLAN.md: only these runs are
    scored); lr 2 and lr 4 ran one network each, so they make no claim."""
    rep, md = held_out
    steps = [c for c in rep.data["claims"] if c["name"] == "BN trains in fewer steps"]
    assert [c["setting"] for c in steps] == ["lr=1"] and steps[0]["target"] == 0.95
    assert {int(k): v for k, v in steps[0]["per_seed"].items()} == pytest.approx({s: 16.0 for s in range(5)})
    assert steps[0]["n"] == 5 and steps[0]["verdict"] == SUPPORTED
    assert {int(k) for c in rep.data["claims"] for k in c["per_seed"]} == {0, 1, 2, 3, 4}
    assert "**Held-out sweep:** only the runs on the evaluation seeds 0, 1, 2, 3, 4 are scored here" in md


def test_the_accuracy_figure_of_a_held_out_sweep_shows_each_network_at_its_rate_for_95(held_out):
    """The figure compares BN and no BN as the claims do: BN at lr 4 and no BN at lr 2 (their 95% choices),
    not every rate of the grids (BN lr 1 also ran on the evaluation seeds)."""
    from bnexp.report.figures import accuracy_figure, chosen_groups

    rep, _ = held_out
    shown, note = chosen_groups(rep)
    from bnexp.analysis.rules import normalizer_label
    assert sorted((normalizer_label(g.config), g.lr) for g in shown) == [("BN", 4.0), ("no BN", 2.0)]
    assert "95%" in note and len(rep.groups) == 4
    # the tuning seeds also ran at the chosen rates; the figure shows the evaluation seeds only, as the claims score
    whole = {g.key: g for g in rep.groups}
    assert all({r.seed for r in whole[g.key].completed} == {0, 1, 2, 3, 4, 100, 101, 102} for g in shown)
    assert all(sorted(r.seed for r in g.completed) == [0, 1, 2, 3, 4] for g in shown)
    assert note == "\neach network at the rate it chose for 95% on the tuning seeds; evaluation seeds 0, 1, 2, 3, 4"
    fig = accuracy_figure(rep)
    legend = fig.axes[0].get_legend_handles_labels()[1]
    assert legend == ["bn=false lr=2 (n=5)", "bn=true lr=4 (n=5)"]
    assert fig._suptitle.get_text() == "Test accuracy vs training steps (Sec. 4.1, Fig. 1(a))" + note
