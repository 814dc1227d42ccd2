"""Evidence rules: warnings for runs that record too little, and (bnexp report) verdict thresholds."""

from __future__ import annotations

import pytest

from bnexp.config.schema import compose_config, validate
from bnexp.runfolders.record_counts import record_count, sparse_record_warnings
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


def test_a_single_run_does_not_warn_about_the_report_and_a_sweep_says_it_once_at_its_end(run_bnexp, tmp_path):
    """The record cadence matters only to bnexp report (a sweep's verdicts): a single run trains without the
    warning; a sweep names the key and the value to use once, after its summary table, not once per job."""
    few = ["trainer.progress=false", "trainer.num_threads=1", "trainer.max_steps=20", "trainer.eval_every=5",
           "trainer.hist_every=20"]
    r = run_bnexp("train", *few, f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr
    assert "fewer than 5" not in r.stdout + r.stderr and "WARNING" not in r.stdout + r.stderr
    sweep = tmp_path / "sweep"
    r = run_bnexp("train", "-m", "seed=0,1", *few, f"hydra.sweep.dir={sweep}", env_extra={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert out.count("trainer.hist_every=20 with trainer.max_steps=20") == 1  # two jobs, one note
    assert "trainer.hist_every<=5" in out and "trainer.eval_every=5 with" not in out  # 0, 5, .., 20: 5 records
    assert out.count("bnexp run:") == 0  # no per-run tables: the sweep's one table
    table = out[out.index("bnexp sweep: 2 run(s)"):]
    assert [line.split()[0] for line in table.splitlines() if line.strip().startswith("seed=")] == ["seed=0", "seed=1"]
    assert f"bnexp report {sweep}" in out


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
def test_one_seed_sweep_gives_no_verdict(tmp_path):
    root = _ics_sweep(tmp_path / "one", [0])
    data = build_report(root).data
    assert data["seed_advice"].startswith("Too few seeds for a verdict (3 completed seeds per configuration "
                                          "needed): BN has 1 seed (0); noisy BN has 1 seed (0); no BN has 1 seed (0)."
                                          " Add seed=1,2: ")
    rows = data["claims"]  # the claims table needs 3 seeds: every row says so
    assert len(rows) == 15 and {r["verdict"] for r in rows} == {"inconclusive"}  # 11 claims (Def. 2.1 raw rows too), 4 with a second view
    assert all(r["reason"].startswith("1 seed(s), fewer than 3") for r in rows), [r["reason"] for r in rows]
    assert report_main([str(root)]) == 0
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "**Too few seeds for a verdict" in md.split("## Claims")[1].split("## Results")[0]
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
    assert build_report(root).data["seed_advice"] == (
        f"Too few seeds for a verdict (3 completed seeds per configuration needed): bn=true has 1 seed (0); "
        f"bn=false has 1 seed (0). Add seed=1,2: bnexp train -m bn=true,false trainer.max_steps=20000 seed=1,2 "
        f"hydra.sweep.dir={root / 'more_seeds' / 'seed_1_2'}, then bnexp report {root}.")
    # that command's runs (in the new folder) make the verdicts real
    for seed in (1, 2):
        make_run(root / "more_seeds" / "seed_1_2", f"bn=true,{seed}", bn=True, lr=0.12, seed=seed, knots=BN_05[seed])
        make_run(root / "more_seeds" / "seed_1_2", f"bn=false,{seed}", bn=False, lr=0.12, seed=seed, knots=NOBN_05[seed])
    data = build_report(root).data
    assert data["seed_advice"] is None
    speed = next(r for r in data["claims"] if r["name"] == "BN trains in fewer steps")
    # main target 97%: 10x in seeds 0 and 1; no BN never reaches it in seed 2, so its budget stands in
    assert speed["per_seed"] == pytest.approx({0: 15000 / 1500, 1: 18000 / 1800, 2: 20000 / 2100})
    assert speed["n"] == 3 and speed["verdict"] == "supported"  # a lower bound can only understate a ">" claim


def test_a_folder_of_two_calls_gets_one_command_per_configuration(tmp_path):
    """scripts/ics_study.sh makes two bnexp train -m calls in one folder; multirun.yaml keeps the last one's
    overrides, which would add seeds to noisy BN only. A configuration of the earlier call is recognised from
    its runs' .hydra/overrides.yaml (as Hydra writes a job's values: bn='false'), and the commands come from
    the configurations' own overrides."""
    import yaml

    root = tmp_path / "two_calls"
    jobs = {"BN": ["bn='true'", "seed=0", "trainer.max_steps=20000"],
            "no BN": ["bn='false'", "seed=0", "trainer.max_steps=20000"],
            "noisy BN": ["bn=noisy", "bn.noise_scale=3", "seed=0", "trainer.max_steps=20000"]}
    for variant, overrides in jobs.items():
        d = make_ics_run(root, variant, 0.5, 0)
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    multirun = "hydra:\n  overrides:\n    hydra: [hydra.mode=MULTIRUN]\n    task: [{}]\n"
    # the last call as its one run was started (a job of multirun.yaml that no folder holds is an unfinished
    # sweep, which gets the command that resumes it instead: tests/test_unfinished_sweep.py)
    (root / "multirun.yaml").write_text(multirun.format("bn=noisy, bn.noise_scale=3, seed=0, trainer.max_steps=20000"))
    advice = build_report(root).data["seed_advice"]
    # one command per call, as the script made them: BN and no BN form the grid bn=true,false
    assert advice.endswith(
        f"run these: bnexp train -m bn=true,false trainer.max_steps=20000 seed=1,2 hydra.sweep.dir="
        f"{root / 'more_seeds' / '1'}; bnexp train -m bn=noisy bn.noise_scale=3 trainer.max_steps=20000 seed=1,2 "
        f"hydra.sweep.dir={root / 'more_seeds' / '2'}, then bnexp report {root}."), advice
    # the same folder as one call that trained everything: the multirun.yaml command, sweep lists included
    for d in root.iterdir():
        if d.is_dir():
            job = yaml.safe_load((d / ".hydra" / "overrides.yaml").read_text())
            job = [o for o in job if not o.startswith("bn.noise_scale")] + ["bn.noise_scale=3"]
            (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(job))
    one_call = "'bn=true,false,noisy', bn.noise_scale=3, seed=0, trainer.max_steps=20000"
    (root / "multirun.yaml").write_text(multirun.format(one_call))
    advice = build_report(root).data["seed_advice"]
    assert f"Add seed=1,2: bnexp train -m bn=true,false,noisy bn.noise_scale=3 trainer.max_steps=20000 seed=1,2 " \
        f"hydra.sweep.dir={root / 'more_seeds' / 'seed_1_2'}, then" in advice, advice


def test_configurations_share_a_command_only_when_their_values_form_a_full_grid(tmp_path):
    """bn=true,false lr=0.1,0.2 would also train the two combinations nobody ran: such configurations get
    a command each; a full grid, or configurations with other seeds to add, are told apart as well."""
    from types import SimpleNamespace as NS

    import yaml

    from bnexp.report.seed_advice import grid_commands, own_overrides

    def group(name, *overrides):
        d = tmp_path / name / ".hydra"
        d.mkdir(parents=True)
        (d / "overrides.yaml").write_text(yaml.safe_dump([*overrides, "seed=0", "hydra.job.chdir=false"]))
        return own_overrides(NS(runs=[NS(path=tmp_path / "none"), NS(path=d.parent)]))  # the first readable

    diagonal = [group("a", "bn='true'", "lr=0.1"), group("b", "bn='false'", "lr=0.2")]
    assert grid_commands(diagonal, [[0], [0]], tmp_path) == [
        f"bnexp train -m bn=true lr=0.1 seed=1,2 hydra.sweep.dir={tmp_path / 'more_seeds' / '1'}",
        f"bnexp train -m bn=false lr=0.2 seed=1,2 hydra.sweep.dir={tmp_path / 'more_seeds' / '2'}"]
    full = diagonal + [group("c", "bn='true'", "lr=0.2"), group("d", "bn='false'", "lr=0.1")]
    assert grid_commands(full, [[0]] * 4, tmp_path) == [
        f"bnexp train -m bn=true,false lr=0.1,0.2 seed=1,2 hydra.sweep.dir={tmp_path / 'more_seeds' / '1'}"]
    # the same four with other seeds to add for no BN: two grids of their own
    assert [c.split(" hydra.")[0] for c in grid_commands(full, [[0], [0, 1], [0], [0, 1]], tmp_path)] == [
        "bnexp train -m bn=true lr=0.1,0.2 seed=1,2", "bnexp train -m bn=false lr=0.2,0.1 seed=2"]


def test_a_tuning_configuration_lacks_its_missing_tuning_seeds():
    """In a held-out sweep (tuning seeds 100-102), a configuration run on tuning seeds alone completes its tuning
    grid first; a configuration with an evaluation seed, or a sweep without tuning seeds, takes the smallest
    seeds it lacks."""
    from bnexp.report.seed_advice import seeds_to_add

    tune = (100, 101, 102)
    assert seeds_to_add([100, 102], 3, tune) == [101] and seeds_to_add([101], 3, tune) == [100, 102]
    assert seeds_to_add([100], 5, tune) == [101, 102, 0, 1]
    assert seeds_to_add([0, 1], 3, tune) == [2] and seeds_to_add([0, 100], 3, tune) == [1]
    assert seeds_to_add([100, 102], 3) == [0] and seeds_to_add([], 3, tune) == [0, 1, 2]


def test_advice_names_three_configurations_then_counts_the_rest(tmp_path):
    from bnexp.report.seed_advice import seeds_to_add

    assert seeds_to_add([0]) == [1, 2] and seeds_to_add([1, 5]) == [0] and seeds_to_add([0, 1, 2]) == []
    root = tmp_path / "many"
    for lr in (0.1, 0.2, 0.3, 0.4, 0.5):
        make_run(root, f"lr={lr}", bn=True, lr=lr, seed=0, knots=BN_05[0])
    advice = build_report(root).data["seed_advice"]
    assert advice.count(" has 1 seed (0)") == 3 and "; and 2 more configurations. Add seed=1,2: " in advice


def test_a_ladder_sweep_is_completed_by_its_script(tmp_path):
    """The Sec. 4.2 ladder is many multirun calls in one folder: no single multirun.yaml re-runs it, the script does."""
    from types import SimpleNamespace as NS

    from bnexp.report.seed_advice import seed_advice

    groups = [NS(label=f"bn_x5 trainer.max_steps={b}", config={"experiment": "bn_x5"},
                 completed=[NS(seed=0), NS(seed=1)], runs=[]) for b in (375, 750)]
    advice = seed_advice(groups, tmp_path / "sweep", ladder=True)
    # docs/cifar/PLAN.md's way to add seed 2: EXTRA_SEEDS (SEEDS=0,1,2 would change the seeds that decide the ladders)
    assert advice.endswith(f"Add seed=2: `EXTRA_SEEDS=2 SWEEP_DIR={tmp_path / 'sweep'} scripts/reproduce_cifar.sh` "
                           "(with the Hydra overrides the sweep ran with, if any; it skips the finished runs, reruns "
                           "the rungs the ladders ran for each extra seed, and the ladders' decisions keep their "
                           f"seeds), then bnexp report {tmp_path / 'sweep'}.")
    assert "bnexp train -m" not in advice
    assert seed_advice(groups, tmp_path / "sweep", ladder=True, min_seeds=2) is None


def test_two_seed_sweep_gives_per_seed_values_but_no_verdict(tmp_path):
    root = _ics_sweep(tmp_path / "two", [0, 1])
    data = build_report(root).data
    assert " Add seed=2: " in data["seed_advice"]
    # the claims table asks for 3 seeds: 2 give per-seed values but no verdict
    assert {r["reason"].split(";")[0] for r in data["claims"]} == {"2 seed(s), fewer than 3"}
    speed = next(r for r in data["claims"] if r["name"] == "BN trains in fewer steps")
    assert speed["per_seed"] == pytest.approx({0: 15000 / 1500, 1: 18000 / 1800}) and speed["target"] == 0.97


def test_chance_accuracy_gives_no_verdict(tmp_path):
    # a plain network at chance: no speed verdict
    chance = tmp_path / "chance"
    for seed in (0, 1, 2):
        make_run(chance, f"bn,{seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
        make_run(chance, f"nobn,{seed}", bn=False, lr=0.5, seed=seed, knots=[(0, 0.1), (500, 0.11)])
    speed = next(r for r in build_report(chance).data["claims"] if r["name"] == "BN trains in fewer steps")
    assert speed["verdict"] == "inconclusive" and speed["reason"].startswith("seed(s) 0, 1, 2 never left chance")


# ------------------------------------------------------------------ each at its best learning rate

def test_best_rate_skips_diverged_and_unreached_rates(tmp_path):
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
    row = next(r for r in build_report(root).data["best_rate_speedups"] if r["target"] == 0.95)
    # BN: 5.0 is fastest (800 steps) and the edge of the grid; no BN: 0.1 never reaches 95%, 5 diverges
    assert (row["bn_lr"], row["bn_edge"], row["no_bn_lr"], row["no_bn_edge"]) == (5.0, "highest", 0.5, None)
    assert row["bn_steps"] == {0: 800, 1: 800} and row["no_bn_steps"] == {0: 10000, 1: 12000}
    assert row["per_seed"] == pytest.approx({0: 10000 / 800, 1: 12000 / 800})
