"""The claims table of `bnexp report` (bnexp/report/ics_verdicts.py) on synthetic sweeps written with the
run-directory writers of bnexp.runfolders.rundir (no training): each claim's verdict follows the per-seed values
it is given, the noisy-BN claims need their premise, and a rescaled copy of a run cannot make
"BN reduces shift" supported (the scale-free measures are computed here with scipy from samples)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from bnexp.report import build_report, report_main
from bnexp.report.claims import INCONCLUSIVE, NOT_SUPPORTED, PREMISE_NOT_MET, SUPPORTED, Claim, evaluate
from bnexp.report.ics_verdicts import CLAIMS, main_target
from bnexp.runfolders.rundir import write_jsonl, write_summary, write_text

MAX_STEPS = 10_000
TARGETS = [0.9, 0.95, 0.97]  # main target: 95%
LAYERS = ("layer1", "layer2", "layer3")
SHIFT_KEYS = ("ks_first", "w1_rel_first", "w1_first")


def write_run(root, variant: str, seed: int, *, shift: dict | None = None, knots=((0, 0.1), (2000, 0.96)),
              noise_scale: float = 1.0, grad: float | None = None, beta: float | None = None, old: bool = False,
              floor: float = 0.001):
    """One finished run of ``variant`` ("BN", "noisy BN", "no BN"): config, metrics.jsonl (test accuracy a
    step function through ``knots``, evaluated every 500 steps; train accuracy 1 point above it, train loss
    1 - test accuracy),
    shift.jsonl (step 0 and 4 later records; ``shift``: key -> per-layer values of the later records,
    default 0.1 for BN, 0.4 otherwise; ``old``: only the raw keys of runs written before the scale-free
    ones), ics.jsonl (``grad``: l2_rel_per_move of layers 2..K; ``beta``: fn_beta_smoothness) and summary.json."""
    d = root / f"{variant.replace(' ', '_')},ns={noise_scale:g},seed={seed}"
    cfg = {"model": {"name": "mlp"}, "data": {"name": "mnist"}, "act": "sigmoid", "lr": 0.5, "seed": seed,
           "bn": {"enabled": variant != "no BN", "noise": variant == "noisy BN", "noise_scale": noise_scale},
           "trainer": {"max_steps": MAX_STEPS, "targets": TARGETS}}
    (d / ".hydra").mkdir(parents=True)
    write_text(d / ".hydra" / "config.yaml", yaml.safe_dump(cfg))
    metrics = [{"step": s, "test_accuracy": (a := max(acc for k, acc in knots if k <= s)),
                "train_accuracy": None if s == 0 else a + 0.01, "train_loss": None if s == 0 else 1.0 - a}
               for s in range(0, MAX_STEPS + 1, 500)]
    write_jsonl(d / "metrics.jsonl", metrics)
    base = 0.1 if variant == "BN" else 0.4
    shift = {k: [base] * 3 for k in SHIFT_KEYS} | (shift or {})
    shift |= {f"{k.split('_first')[0]}_floor": [floor] * 3 for k in ("ks_first", "w1_rel_first", "w1_first")}
    shift["ks_prev"] = [v / 4 for v in shift["ks_first"]]
    keep = ("w1_first",) if old else tuple(shift)
    recs = [{"step": step, "shift_metrics": {layer: {k: (0.0 if step == 0 else v[i]) for k, v in shift.items()
                                                     if k in keep} for i, layer in enumerate(LAYERS)}}
            for step in (0, 2500, 5000, 7500, MAX_STEPS)]
    write_jsonl(d / "shift.jsonl", recs)
    ics = []
    for step in (1000, 2000, 3000):
        if grad is not None:  # layer1 is trivially 0, the classifier is no hidden layer: both left out
            ics.append({"step": step, "kind": "grad_ics", "layers": {
                "layer1": {"l2_rel": 0.0, "l2_rel_per_move": 0.0},
                "classifier": {"l2_rel": 9.0, "l2_rel_per_move": 99.0},
                **{layer: {"l2_rel": grad / 10, "l2_rel_per_move": grad, "move_rel": 0.1} for layer in LAYERS[1:]}}})
        if beta is not None:
            ics.append({"step": step, "kind": "landscape", "beta_smoothness": 100 * beta, "fn_beta_smoothness": beta,
                        "fn_step_sizes": [0.0, 0.1]})
    if ics:
        write_jsonl(d / "ics.jsonl", ics)
    write_summary(d, {"status": "finished", "step": MAX_STEPS, "max_steps": MAX_STEPS, "seed": seed,
                      "final_test_accuracy": metrics[-1]["test_accuracy"], "targets": TARGETS,
                      "bn_noise": variant == "noisy BN"})
    return d


def claims(root, name: str | None = None) -> list[dict]:
    rows = build_report(root).data["claims"]
    return [r for r in rows if name is None or r["name"] == name]


def shift_sweep(root, ratios: dict[int, float]):
    """BN (KS and W1/spread 0.1 in every layer) and no BN with ``ratios[seed]`` x BN's scale-free shift."""
    for seed, r in ratios.items():
        write_run(root, "BN", seed)
        write_run(root, "no BN", seed, shift={k: [0.1 * r] * 3 for k in SHIFT_KEYS})
    return root


@pytest.mark.parametrize("ratios, verdict", [
    ({0: 3.0, 1: 4.0, 2: 5.0}, SUPPORTED),        # BN's shift lower in all 3 seeds
    ({0: 0.5, 1: 0.6, 2: 0.7}, NOT_SUPPORTED),    # higher in all 3 seeds
    ({0: 0.5, 1: 1.5, 2: 3.0}, INCONCLUSIVE),     # mixed: the interval straddles 1
    ({0: 3.0, 1: 4.0}, INCONCLUSIVE),             # 2 seeds
])
def test_bn_reduces_shift_follows_the_seeds(tmp_path, ratios, verdict):
    rows = claims(shift_sweep(tmp_path / "s", ratios), "BN reduces shift")
    assert len(rows) == 4  # KS and W1/spread, last layer and mean over layers
    for row in rows:
        assert row["verdict"] == verdict, (row["quantity"], row["reason"])
        assert row["per_seed"] == pytest.approx(ratios)
        assert row["mean"] == pytest.approx(np.exp(np.mean(np.log(list(ratios.values())))))  # geometric mean
        if len(ratios) > 1:
            assert row["std"] == pytest.approx(np.std(list(ratios.values()), ddof=1))


def _samples(rng, n=4000):
    """Start and end samples of one unit's input: the distribution drifts and widens during training."""
    return rng.normal(0.0, 1.0, n), rng.normal(0.8, 1.6, n)


def test_a_rescaled_copy_cannot_manufacture_bn_reduces_shift(tmp_path):
    # No BN is BN's run with every pre-activation x8 (a net whose pre-activations merely grow; a power of
    # 2, so exact in floating point): raw W1 is 8x larger, while KS and W1 / initial p15-p85 spread,
    # computed here with scipy, are identical.
    root = tmp_path / "rescaled"
    raw = {}
    for seed in (0, 1, 2):
        for variant, c in (("BN", 1.0), ("no BN", 8.0)):
            x0, x1 = (c * x for x in _samples(np.random.default_rng(seed)))
            w1 = sps.wasserstein_distance(x0, x1)
            spread = np.percentile(x0, 85) - np.percentile(x0, 15)
            vals = {"ks_first": sps.ks_2samp(x0, x1).statistic, "w1_rel_first": w1 / spread, "w1_first": w1}
            raw[(variant, seed)] = w1
            write_run(root, variant, seed, shift={k: [v] * 3 for k, v in vals.items()})
    rows = claims(root, "BN reduces shift")
    assert [r["verdict"] for r in rows] == [NOT_SUPPORTED] * 4  # ratio 1 in every seed: not above 1
    for r in rows:
        assert r["per_seed"] == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0})
    # the raw W1 would have "supported" it: the verdict would then be made by the unit scale
    raw_ratio = {s: raw[("no BN", s)] / raw[("BN", s)] for s in (0, 1, 2)}
    assert raw_ratio == pytest.approx({0: 8.0, 1: 8.0, 2: 8.0})
    assert evaluate(Claim("raw", "no-BN / BN raw W1", ">", 1.0), raw_ratio, never_learned=[])["verdict"] == SUPPORTED
    conf = {c["label"]: c["ics"]["measures"] for c in build_report(root).data["configurations"]}
    assert conf["no BN"]["shift.w1_first"]["mean"] == pytest.approx(8 * conf["BN"]["shift.w1_first"]["mean"])


def test_noisy_bn_needs_its_premise(tmp_path):
    # noisy BN at noise_scale 1 and 3 shifts less than no BN (KS 0.2, 0.3 < 0.4): premise not met
    root = tmp_path / "noisy"
    for seed in (0, 1, 2):
        write_run(root, "BN", seed)
        write_run(root, "no BN", seed, knots=((0, 0.1), (8000, 0.96)))
        for ns, ks in ((1.0, 0.2), (3.0, 0.3)):
            write_run(root, "noisy BN", seed, noise_scale=ns, shift={"ks_first": [ks] * 3})
    rows = claims(root)
    noisy = [r for r in rows if "oisy" in r["name"]]
    assert [r["name"] for r in noisy] == ["Noisy BN keeps BN's speed", "Noisy BN still faster than no BN"]
    for r in noisy:
        assert r["verdict"] == PREMISE_NOT_MET and r["noise_scale"] is None
        assert "noise_scale 1, 3" in r["reason"] and r["per_seed"] == {}
    # x10 exceeds no BN in seeds 0 and 1 only, x30 in every seed: evaluated at 30, the weakest that does
    for seed, ks in ((0, 0.5), (1, 0.5), (2, 0.3)):
        write_run(root, "noisy BN", seed, noise_scale=10.0, shift={"ks_first": [ks] * 3})
    for seed in (0, 1, 2):  # 95% at 4,000 / 4,500 / 5,000 steps (BN: 2,000; no BN: 8,000)
        write_run(root, "noisy BN", seed, noise_scale=30.0, shift={"ks_first": [0.9] * 3},
                  knots=((0, 0.1), (4000 + 500 * seed, 0.96)))
    keep, faster = (r for r in claims(root) if "oisy" in r["name"])
    assert keep["noise_scale"] == faster["noise_scale"] == 30.0 and "noise_scale=30" in keep["reason"]
    assert keep["per_seed"] == pytest.approx({0: 0.5, 1: 2000 / 4500, 2: 0.4})  # BN / noisy-BN steps
    assert keep["threshold"] == 0.8 and keep["verdict"] == NOT_SUPPORTED
    assert faster["per_seed"] == pytest.approx({0: 2.0, 1: 8000 / 4500, 2: 1.6}) and faster["verdict"] == SUPPORTED


def test_steps_bounds_chance_and_missing_measures(tmp_path):
    root = tmp_path / "bounds"
    for seed in (0, 1, 2):
        write_run(root, "BN", seed, grad=0.5, beta=2.0)
        # no BN never reaches 95% within 10,000 steps: the budget stands in, the ratio is a lower bound
        write_run(root, "no BN", seed, knots=((0, 0.1), (500, 0.5)), grad=1.0, beta=1.0)
    rows = {r["name"]: r for r in claims(root) if r["name"] != "BN reduces shift"}
    speed = rows["BN trains in fewer steps"]
    assert speed["per_seed"] == pytest.approx({0: 5.0, 1: 5.0, 2: 5.0}) and speed["verdict"] == SUPPORTED
    assert speed["bounds"] == {0: "lower", 1: "lower", 2: "lower"}  # no BN's budget stands in: true ratio >= 5
    for grad in claims(root, "BN reduces gradient ICS"):  # matched progress and same steps: 0.5 / 1.0 at every probe
        assert grad["per_seed"] == pytest.approx({0: 0.5, 1: 0.5, 2: 0.5}) and grad["verdict"] == SUPPORTED
    # matched progress: BN's loss is 0.9 until step 2000, then 0.04; no BN's 0.5 from step 500: level
    # max(0.04, 0.5) = 0.5, BN first at or below it at its probe 2000, no BN at its first probe (1000)
    matched = claims(root, "BN reduces gradient ICS")[0]
    assert matched["view"] == "matched training progress" and matched["matched"][0] == pytest.approx(
        {"level": 0.5, "step_a": 2000, "step_b": 1000, "value_a": 0.5, "value_b": 1.0, "ratio": 0.5})
    for land in claims(root, "BN smooths the landscape"):  # raw (100 x beta) and filter-normalized: the same ratio
        assert land["per_seed"] == pytest.approx({0: 2.0, 1: 2.0, 2: 2.0}) and land["verdict"] == NOT_SUPPORTED
    # BN, not no BN, misses the target: upper bounds below the threshold count against the claim
    root2 = tmp_path / "bounds2"
    for seed in (0, 1, 2):
        write_run(root2, "BN", seed, knots=((0, 0.1), (500, 0.5)))
        write_run(root2, "no BN", seed, knots=((0, 0.1), (2500, 0.96)))
    speed = claims(root2, "BN trains in fewer steps")[0]
    assert speed["per_seed"] == pytest.approx({0: 0.25, 1: 0.25, 2: 0.25})
    assert speed["verdict"] == NOT_SUPPORTED and speed["bounds"] == {0: "upper", 1: "upper", 2: "upper"}
    # a network that never left chance in one seed: inconclusive, whatever the numbers
    write_run(root, "no BN", 3, knots=((0, 0.1), (500, 0.12)), grad=1.0, beta=1.0)
    write_run(root, "BN", 3, grad=0.5, beta=2.0)
    for r in claims(root):
        assert r["verdict"] == INCONCLUSIVE and "seed(s) 3 never left chance" in r["reason"], r
    # records written before the measures existed: every row still reports, "not in the records"
    old = tmp_path / "old"
    for seed in (0, 1, 2):
        write_run(old, "BN", seed, old=True)
        write_run(old, "no BN", seed, old=True, knots=((0, 0.1), (6000, 0.96)))
    rows = claims(old)
    assert [r["name"] for r in rows] == [c.name for c in CLAIMS[:9]]
    for r in rows[:4] + rows[5:]:
        assert r["verdict"] == INCONCLUSIVE and "is not in the records of" in r["reason"], r
    assert rows[4]["verdict"] == SUPPORTED  # steps need no new key


def test_floor_note_report_files_and_noise_table(tmp_path):
    root = tmp_path / "files"
    for seed in (0, 1, 2):
        write_run(root, "BN", seed, floor=0.08)  # BN's 0.1 is within 1.5x its floor
        write_run(root, "no BN", seed, knots=((0, 0.1), (6000, 0.96)))
        write_run(root, "noisy BN", seed, noise_scale=10.0, shift={"ks_first": [0.9] * 3},
                  knots=((0, 0.1),) if seed == 2 else ((0, 0.1), (3000, 0.96)))
    ks_last = claims(root, "BN reduces shift")[0]
    assert ks_last["verdict"] == SUPPORTED and ks_last["per_seed"] == pytest.approx({0: 4.0, 1: 4.0, 2: 4.0})
    assert "within 1.5x its sampling-noise floor (ks_floor) in seed(s) 0, 1, 2" in ks_last["reason"]
    assert report_main([str(root)]) == 0
    data = json.loads((root / "report.json").read_text())
    assert [r["name"] for r in data["claims"]] == [c.name for c in CLAIMS]
    assert data["claims"][0]["per_seed"] == {"0": 4.0, "1": 4.0, "2": 4.0}  # JSON keys are text
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "## Claims" in md and "The main target is 95%." in md
    assert "What this sweep supports" not in md and "favour" not in md
    noise = data["ics"]["noise_strength"]
    row = next(r for r in noise["rows"] if r["variant"] == "noisy BN")
    assert row["at_chance"] == [2] and row["exceeds_no_bn"] is True
    assert row["final_train_accuracy"]["mean"] == pytest.approx((0.97 + 0.97 + 0.11) / 3)
    assert set(row["steps_to_target"]) == {"0.9", "0.95", "0.97"}
    assert "(at chance: seed 2)" in md and "final train acc (%)" in md and "steps to 97%" in md


def test_main_target_is_the_lower_median():
    assert main_target([0.9, 0.95, 0.97, 0.98]) == 0.95
    assert main_target([0.8, 0.5, 0.7, 0.6]) == 0.6
    assert main_target([0.9]) == 0.9
