"""Evidence rules: warnings for runs that record too little, and (bnexp report) verdict thresholds."""

from __future__ import annotations

import pytest

from bnexp.config import compose_config, validate
from bnexp.records import record_count, sparse_record_warnings
from bnexp.errors import ConfigError


def test_record_count_by_hand():
    assert record_count(1000, 1000) == 2  # steps 0 and 1000
    assert record_count(1000, 300) == 5  # 0, 300, 600, 900 and the last step 1000
    assert record_count(1000, 250) == 5  # 0, 250, 500, 750, 1000


def test_sparse_record_warnings_name_the_key():
    cfg = compose_config(["trainer.max_steps=1000"])  # eval_every = hist_every = 1000: 2 records
    warnings = sparse_record_warnings(cfg)
    assert len(warnings) == 2
    assert "trainer.eval_every=1000" in warnings[0] and "only 2" in warnings[0]
    assert "trainer.hist_every=1000" in warnings[1] and "trainer.hist_every<=250" in warnings[1]
    assert sparse_record_warnings(compose_config(["trainer.max_steps=1000", "trainer.eval_every=250",
                                                  "trainer.hist_every=250"])) == []


def test_train_warns_at_start(run_bnexp, tmp_path):
    r = run_bnexp("train", "trainer.progress=false", "trainer.num_threads=1", "trainer.max_steps=20",
                  "trainer.eval_every=5", "trainer.hist_every=20", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "trainer.hist_every=20" in out and "fewer than 5" in out
    assert "trainer.eval_every" not in out  # 0, 5, 10, 15, 20: 5 records, enough


@pytest.mark.parametrize("key,value", [("monitor.bn_stats", "running"), ("bn.noise_scale", -1.0),
                                       ("monitor.landscape_rel_step_sizes", "[]")])
def test_new_keys_are_validated(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose_config([f"{key}={value}"]))


# ------------------------------------------------------------------ bnexp report: evidence rule

from test_report import BN_05, NOBN_05, has_row, make_ics_run, make_run  # noqa: E402  (synthetic run builders)

from bnexp.report import build_report, report_main  # noqa: E402


def _ics_sweep(root, seeds):
    for variant in ("BN", "noisy BN", "no BN"):
        for seed in seeds:
            make_ics_run(root, variant, 0.5, seed)
    return root


@pytest.mark.slow  # renders the report's figures (> 3 s of CPU)
def test_one_seed_sweep_says_insufficient_evidence(tmp_path):
    root = _ics_sweep(tmp_path / "one", [0])
    data = build_report(root).data
    speed = [v for v in data["verdicts"] if v.startswith("BN reached 95%")]
    assert speed == ["BN reached 95% in 1,000 steps (1 seed), no BN in 10,000 (1 seed): insufficient "
                     "evidence (BN has 1 seed (need 2): add seed=1; no BN has 1 seed (need 2): add seed=1)."]
    assert not any("fewer steps" in v or "higher by" in v for v in data["verdicts"])
    rows = data["claims"]  # the claims table needs 3 seeds: every row says so
    assert len(rows) == 9 and {r["verdict"] for r in rows} == {"inconclusive"}
    assert all(r["reason"].startswith("1 seed(s), fewer than 3") for r in rows), [r["reason"] for r in rows]
    assert report_main([str(root)]) == 0
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "± 0.00" not in md and "(1 seed)" in md
    # a unit goes with its number, before "(1 seed)": never "95.57 (1 seed)%" or "1,000 (1 seed) steps"
    assert "(1 seed)%" not in md and "(1 seed) steps" not in md
    assert has_row(md, "BN", "1", "98.50 (1 seed)", "98.50 (1 seed)")  # max and final test accuracy
    assert has_row(md, "BN", "1", "0.05 (1 seed)")  # KS from start


def test_too_few_seeds_say_which_settings_and_the_command_that_adds_them(tmp_path):
    # the README's first sweep, `bnexp train -m bn=true,false`: one seed per setting
    root = tmp_path / "readme"
    make_run(root, "bn=true", bn=True, lr=0.12, seed=0, knots=BN_05[0])
    make_run(root, "bn=false", bn=False, lr=0.12, seed=0, knots=NOBN_05[0])
    (root / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    hydra: [hydra.mode=MULTIRUN]\n    task: ['bn=true,false', trainer.max_steps=20000]\n")
    first = build_report(root).data["verdicts"][0]
    assert first == (f"Too few seeds for a verdict (2 completed seeds per configuration needed): bn=true has 1 seed (0); "
                     f"bn=false has 1 seed (0). Add seed=1: bnexp train -m bn=true,false trainer.max_steps=20000 seed=1 "
                     f"hydra.sweep.dir={root / 'seed=1'}, then bnexp report {root}.")
    assert any(v.endswith("insufficient evidence (BN has 1 seed (need 2): add seed=1; no BN has 1 seed (need 2): "
                          "add seed=1).") for v in build_report(root).data["verdicts"])
    # that command's runs (in the new folder) make the verdicts real
    make_run(root / "seed=1", "bn=true", bn=True, lr=0.12, seed=1, knots=BN_05[1])
    make_run(root / "seed=1", "bn=false", bn=False, lr=0.12, seed=1, knots=NOBN_05[1])
    verdicts = build_report(root).data["verdicts"]
    assert not any("Too few seeds" in v or "insufficient evidence" in v for v in verdicts)
    assert "BN reached 95% in 1,100 ± 100 steps, no BN in 11,000 ± 1,000: 10.0x fewer steps." in verdicts


def test_two_seed_sweep_gives_verdicts(tmp_path):
    root = _ics_sweep(tmp_path / "two", [0, 1])
    data = build_report(root).data
    assert ("BN reached 95% in 1,100 ± 100 steps, no BN in 11,000 ± 1,000: 10.0x fewer steps."
            in data["verdicts"])
    assert not any("insufficient evidence" in v for v in data["verdicts"])
    # the claims table asks for 3 seeds: 2 give per-seed values but no verdict
    assert {r["reason"].split(";")[0] for r in data["claims"]} == {"2 seed(s), fewer than 3"}
    speed = next(r for r in data["claims"] if r["name"] == "BN trains in fewer steps")
    assert speed["per_seed"] == pytest.approx({0: 15000 / 1500, 1: 18000 / 1800}) and speed["target"] == 0.97


def test_chance_accuracy_is_insufficient(tmp_path):
    # a plain network at chance: no speed verdict
    chance = tmp_path / "chance"
    for seed in (0, 1):
        make_run(chance, f"bn,{seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
        make_run(chance, f"nobn,{seed}", bn=False, lr=0.5, seed=seed, knots=[(0, 0.1), (500, 0.11)])
    data = build_report(chance).data
    lines = data["verdicts"]
    assert any("no BN is at chance (final test accuracy 11.0% <= 15%)" in v for v in lines)
    assert not any("fewer steps" in v for v in lines)
    speed = next(r for r in data["claims"] if r["name"] == "BN trains in fewer steps")
    assert speed["verdict"] == "inconclusive" and speed["reason"].startswith("seed(s) 0, 1 never left chance")


# ------------------------------------------------------------------ each at its best learning rate

@pytest.mark.slow  # renders the report's figures (> 3 s of CPU)
def test_best_rate_section(tmp_path):
    root = tmp_path / "grid"
    bn_knots = {0.1: [(0, 0.1), (3000, 0.95), (6000, 0.98)], 0.5: None, 5.0: [(0, 0.1), (800, 0.95), (2000, 0.98)]}
    nb_knots = {0.1: [(0, 0.1), (19000, 0.9)], 0.5: None}
    for seed in (0, 1):
        for lr, k in bn_knots.items():
            make_run(root, f"bn,lr={lr},{seed}", bn=True, lr=lr, seed=seed, knots=k or BN_05[seed])
        for lr, k in nb_knots.items():
            make_run(root, f"nobn,lr={lr},{seed}", bn=False, lr=lr, seed=seed, knots=k or NOBN_05[seed])
        make_run(root, f"nobn,lr=5,{seed}", bn=False, lr=5.0, seed=seed, knots=[(0, 0.1)], status="diverged",
                 diverged_step=300)
    sec = build_report(root).data["best_rate"]
    fams = {f["variant"]: f for f in sec["families"]}
    assert fams["BN"]["best_lr"] == 5.0 and fams["BN"]["edge"] == "highest"
    assert fams["BN"]["best_steps"]["mean"] == 800
    assert fams["no BN"]["best_lr"] == 0.5 and fams["no BN"]["edge"] is None
    assert [r["status"] for r in fams["no BN"]["rates"]] == ["not reached in every seed", "ok", "diverged (too high)"]
    (comp,) = sec["comparisons"]
    assert comp["speedup"] == pytest.approx(11000 / 800) and comp["verdict"] == "faster"
    line = sec["verdicts"][0]
    assert line.startswith("Each at its best rate: BN (lr=5, the highest rate of the grid 0.1, 0.5, 5: "
                           "a better rate may lie outside it) reached 95% in 800 ± 0 steps, no BN (lr=0.5) in "
                           "11,000 ± 1,000 steps: 13.8x fewer steps.")
    assert report_main([str(root)]) == 0
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "## Each at its best learning rate" in md and has_row(md, "0.5 (best)", "11,000 ± 1,000 steps", "ok")
