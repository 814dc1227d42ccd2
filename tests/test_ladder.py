"""The ladder overrides of scripts/reproduce_cifar.sh (``LADDER="key=value;..."``, bnexp.designs.ladder.parse_ladder):
the values they set, and one message naming the item for a value that is not what its key takes."""

from __future__ import annotations

import pytest

from bnexp.designs.ladder import LADDERS, parse_ladder


def test_overrides_set_the_ladder_and_keep_the_rest():
    lad = parse_ladder("cpu", "tune=16; lrs=0.025,0.05; baseline=32,8,16; cap=64; bn_x5=4; seeds=0,2")
    assert (lad.tune_budget, lad.tune_lrs, lad.baseline, lad.baseline_cap, lad.seeds) == (
        16, (0.025, 0.05), (8, 16, 32), 64, (0, 2))
    assert lad.starts["bn_x5"] == 4 and lad.starts["bn_baseline"] == LADDERS["cpu"].starts["bn_baseline"]
    assert lad.tune_dropouts == LADDERS["cpu"].tune_dropouts
    assert parse_ladder("gpu", None) == LADDERS["gpu"]


@pytest.mark.parametrize("spec, words", [
    ("bn_x5=4,8", "'bn_x5=4,8': bn_x5 takes one whole number"),
    ("tune=1e3", "'tune=1e3': tune takes one whole number"),
    ("lrs=0.1,fast", "'lrs=0.1,fast': lrs takes a comma-separated list of numbers"),
    ("baseline=8;cap=", "'cap=': cap takes one whole number"),
    ("bn_x50=4", "unknown key 'bn_x50'"),
])
def test_bad_items_are_named(spec, words):
    with pytest.raises(ValueError) as err:
        parse_ladder("cpu", spec)
    assert words in str(err.value) and str(err.value).startswith("--ladder: ")


def test_unknown_scale():
    with pytest.raises(ValueError, match="unknown scale 'tpu'"):
        parse_ladder("tpu", None)


# ----------------------------------------------------------------------------- plan version 2: the ladders' rules
# Synthetic results only (no training): a loaded-sweep table with the columns the planner reads.

import pandas as pd  # noqa: E402

from bnexp.designs import ladder as L  # noqa: E402

CPU = L.LADDERS["cpu"]
LR, D = 0.025, 0.0  # the tuning winner below


def runs_of(spec: dict, seeds=(0, 1)) -> pd.DataFrame:
    """spec = {(preset, budget): seed-mean accuracy} at the winner's rate (dropout 0 for every preset here),
    plus the tuning grid; each seed gets the same accuracy unless spec's value is a {seed: acc} dict."""
    tune = {("baseline", 6000, 0.025, 0.0): 0.61, ("baseline", 6000, 0.025, 0.3): 0.56,
            ("baseline", 6000, 0.04, 0.0): 0.59, ("baseline", 6000, 0.04, 0.3): 0.33}
    full = {**tune, **{(p, b, LR, D): a for (p, b), a in spec.items()}}
    rows = []
    for (p, b, lr, d), a in full.items():
        per = a if isinstance(a, dict) else {s: a for s in seeds}
        rows += [{"preset": p, "budget_steps": b, "seed": s, "final_test_accuracy": v, "final_train_accuracy": v,
                  "base_lr": lr, "dropout": d} for s, v in per.items()]
    return pd.DataFrame(rows)


# the committed CPU results of plan version 1 (docs/cifar/plan_v1/report.json, seed means): the baseline's ladder
# stopped at the old cap (48k) while its last doubling gained 3.2 points
BASE_V1 = {("baseline", 3000): 0.5388, ("baseline", 12000): 0.6975, ("baseline", 24000): 0.75215,
           ("baseline", 48000): 0.78415}


def nxt(spec, presets=L.PRESET_SETS["all"], extra=()):
    msgs, batches = L.next_batches(runs_of(spec), CPU, presets, (0, 1), extra)
    return msgs, [(b.preset, b.budget, b.seeds) for b in batches]


def stops(spec, presets=L.PRESET_SETS["all"]):
    return dict(line.split(": ", 1) for line in L.ladder_stops(runs_of(spec), CPU, presets, (0, 1)))


def test_cpu_cap_is_at_least_192k_and_reached_by_doubling_the_last_fixed_rung():
    assert CPU.baseline_cap >= 192000 and CPU.baseline_cap in L._doublings(CPU.baseline[-1], CPU.baseline_cap)


def test_baseline_keeps_doubling_while_a_doubling_gains_half_a_point_up_to_the_cap():
    # plan version 1's results: 48k gained 3.2 points over 24k, so the 96k rung is next (the old runs are reused)
    msgs, batches = nxt(BASE_V1)
    assert batches == [("baseline", 96000, (0, 1))] and "stage 2" in msgs[-1]
    # 96k gains 0.6 points: 192k
    assert nxt({**BASE_V1, ("baseline", 96000): 0.79015})[1] == [("baseline", 192000, (0, 1))]
    # 96k gains 0.4 points: converged; a* = 0.78815 and the headline starts
    conv = {**BASE_V1, ("baseline", 96000): 0.78815}
    msgs, batches = nxt(conv)
    assert batches == [("bn_x5", 375, (0, 1))]
    assert "stopped by converged: the doubling to 96,000 steps gained 0.40 < 0.5 points" in msgs[1]
    assert "a* = 78.81%" in msgs[1]
    # still gaining at 192k: the cap stops it, no 384k rung
    capped = {**BASE_V1, ("baseline", 96000): 0.80, ("baseline", 192000): 0.82}
    assert nxt(capped)[1] == [("bn_x5", 375, (0, 1))]
    assert stops(capped)["baseline"] == "stopped by cap: 192,000 steps is its largest budget (82.00%)"
    # a decision waits for every decision seed of the rung
    one_seed = {**BASE_V1, ("baseline", 96000): {0: 0.79}}
    assert nxt(one_seed)[1] == [("baseline", 96000, (0, 1))]


def test_headline_first_then_the_others_in_order_each_stopped_by_its_rule():
    base = {**BASE_V1, ("baseline", 96000): 0.78815}  # a* = 0.78815, the presets' cap 96k
    # bn_x5's ladder toward the new a*: plan version 1's rungs are done, 24k (79.35%) reaches a*
    x5 = {("bn_x5", b): a for b, a in ((375, .4279), (750, .4961), (1500, .5827), (3000, .6559), (6000, .7182),
                                        (12000, .7588), (24000, .7935))}
    assert nxt({**base, **{k: v for k, v in x5.items() if k[1] < 24000}})[1] == [("bn_x5", 24000, (0, 1))]
    st = stops({**base, **x5})
    assert st["bn_x5"] == "stopped by a*: 79.35% at 24,000 steps reaches a* = 78.81%"
    # then every other preset's first rung, in the run order of PRESET_SETS["all"]
    msgs, batches = nxt({**base, **x5})
    assert [b[:2] for b in batches] == [("bn_baseline", 1500), ("baseline_x5", 3000), ("baseline_sigmoid", 3000),
                                        ("bn_x5_sigmoid", 375), ("bn_x30", 375)]
    assert "stage 4" in msgs[-1]


def test_a_net_at_chance_or_diverged_runs_to_12k_and_stops_there():
    # bn_x5's ladder stopped below a* (converged): the control's "decided" rule has no budget to compare with
    base = {**BASE_V1, ("baseline", 96000): 0.78815, ("bn_x5", 375): 0.60, ("bn_x5", 750): 0.602}
    # baseline_x5 diverged (a diverged run counts as chance, 10%): a doubling that gains nothing at chance
    # does not stop it before 12k ...
    div = {**base, ("baseline_x5", 3000): 0.10, ("baseline_x5", 6000): 0.10}
    assert ("baseline_x5", 12000, (0, 1)) in nxt(div, ("bn_x5", "baseline_x5"))[1]
    # ... and at chance at 12k it stops: no 24k rung
    st = stops({**div, ("baseline_x5", 12000): 0.1004}, ("bn_x5", "baseline_x5"))
    assert st["baseline_x5"].startswith("stopped by chance: 10.04% at 12,000 steps")
    assert nxt({**div, ("baseline_x5", 12000): 0.1004}, ("bn_x5", "baseline_x5"))[1] == []
    # one seed diverged, the other trains: the seed mean (35%) is above chance + 5 points, the ladder goes on
    mixed = {**div, ("baseline_x5", 12000): {0: 0.10, 1: 0.60}}
    assert nxt(mixed, ("bn_x5", "baseline_x5"))[1] == [("baseline_x5", 24000, (0, 1))]
    # chance + 5 points is the line: 14.9% is at chance, 15.1% trains (and then gains > 0.5 points)
    assert "chance" in stops({**div, ("baseline_x5", 12000): 0.149}, ("bn_x5", "baseline_x5"))["baseline_x5"]
    assert nxt({**div, ("baseline_x5", 12000): 0.151}, ("bn_x5", "baseline_x5"))[1] == [
        ("baseline_x5", 24000, (0, 1))]


def test_sigmoid_pair_is_decided_by_12k():
    base = {**BASE_V1, ("baseline", 96000): 0.78815, ("bn_x5", 375): 0.80}
    pair = ("bn_x5", "baseline_sigmoid", "bn_x5_sigmoid")
    # baseline_sigmoid: its first rung above chance + 5 points refutes "does not train": stop
    st = stops({**base, ("baseline_sigmoid", 3000): 0.20}, pair)
    assert st["baseline_sigmoid"].startswith("stopped by trains: 20.00% at 3,000 steps")
    # at chance through 12k: stopped by the chance rule (never a 24k rung)
    sig = {**base, **{("baseline_sigmoid", b): 0.10 for b in (3000, 6000, 12000)}}
    assert stops(sig, pair)["baseline_sigmoid"].startswith("stopped by chance")
    # bn_x5_sigmoid trains and still gains at 12k: the early cap stops it (its claim is decided)
    climb = {("bn_x5_sigmoid", 375 * 2 ** i): 0.30 + 0.05 * i for i in range(6)}  # 375 .. 12k
    st = stops({**sig, **climb}, pair)
    assert st["bn_x5_sigmoid"] == "stopped by cap: 12,000 steps is its largest budget (55.00%)"
    assert nxt({**sig, **climb}, pair)[1] == []


def test_bn_ladders_follow_the_new_a_star_and_stop_at_the_baselines_largest_budget():
    base = {**BASE_V1, ("baseline", 96000): 0.80, ("baseline", 192000): 0.82}  # a* = 0.82 at the cap
    x5 = {("bn_x5", 375 * 2 ** i): 0.40 + 0.04 * i for i in range(10)}  # 375 .. 192k, 0.40 .. 0.76
    assert nxt({**base, **{k: v for k, v in x5.items() if k[1] < 48000}}, ("bn_x5",))[1] == [
        ("bn_x5", 48000, (0, 1))]
    assert stops({**base, **x5}, ("bn_x5",))["bn_x5"] == "stopped by cap: 192,000 steps is its largest budget (76.00%)"


def test_extra_seeds_rerun_the_rungs_the_ladders_ran_and_change_no_decision():
    base = {**BASE_V1, ("baseline", 96000): 0.78815}
    done = {**base, ("bn_x5", 375): 0.70, ("bn_x5", 750): 0.80, ("bn_baseline", 1500): 0.79}
    assert nxt(done, ("bn_x5", "bn_baseline"))[1] == []
    msgs, batches = nxt(done, ("bn_x5", "bn_baseline"), extra=(2,))
    assert "stage 5" in msgs[-1]
    assert batches == [("baseline", b, (2,)) for b in (3000, 6000, 12000, 24000, 48000, 96000)] + [
        ("bn_x5", 375, (2,)), ("bn_x5", 750, (2,)), ("bn_baseline", 1500, (2,))]
    # seed 2's results (here far lower) decide nothing: the ladders and the winner stay as they were
    rows = runs_of(done)
    low = rows[rows.seed == 0].assign(seed=2, final_test_accuracy=0.2)
    both = pd.concat([rows, low], ignore_index=True)
    assert L.winner(both, CPU, (0, 1))[:2] == (0.025, 0.0)
    assert L.next_batches(both, CPU, ("bn_x5", "bn_baseline"), (0, 1), (2,))[1] == []


def test_a_later_call_for_fewer_presets_keeps_the_stop_rules_of_every_ladder_in_the_folder():
    """PRESETS=bn_x5 EXTRA_SEEDS=2 after PRESETS=all: ladders.txt (the report's "rule that stopped each ladder")
    still names bn_baseline's ladder, which that call did not run."""
    done = runs_of({**BASE_V1, ("baseline", 96000): 0.78815, ("bn_x5", 375): 0.70, ("bn_x5", 750): 0.80,
                    ("bn_baseline", 1500): 0.79})
    shown = L.presets_in_folder(done, CPU, ("bn_x5",))
    assert shown == ("bn_x5", "bn_baseline")
    lines = L.ladder_stops(done, CPU, shown, (0, 1))
    assert [line.split(":")[0] for line in lines] == ["baseline", "bn_x5", "bn_baseline"]
    assert L.presets_in_folder(done, CPU, L.PRESET_SETS["all"]) == L.PRESET_SETS["all"]  # nothing added twice


def test_plan_table_with_extra_seeds_and_the_rule_lines(tmp_path, capsys):
    t = L.plan_table(runs_of({}), CPU, L.PRESET_SETS["default"], (0, 1), (2,))
    extra = t[t.stage == "5 extra seeds"]
    decided = t[t.stage.isin(["2 baseline", "3 headline", "4 presets"])]
    assert len(extra) == len(decided) + 1 and set(extra.runs) == {1}  # + the tuning winner's run, one seed
    assert int(extra.steps.sum()) == int(decided.steps.sum()) // 2 + 6000
    assert L.main(["plan", str(tmp_path / "none"), "--presets", "all", "--extra-seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert "ladders (the rule that stopped each, or what it runs next):" in out
    assert "  baseline: waits for the tuning stage" in out and "  baseline_x5: waits for the baseline's ladder" in out
    assert L.main(["plan", str(tmp_path), "--extra-seeds", "two"]) == 2
    assert "--extra-seeds: 'two' is not a comma-separated list of whole numbers" in capsys.readouterr().err


def test_baseline_x5_is_the_tuned_baseline_at_5x_its_rate_and_nothing_else():
    """The control, composed as the ladder runs it: every resolved key equals the baseline's at the same rung
    (dropout and weight decay included) except the rate, 5x, and the preset's name."""
    from omegaconf import OmegaConf

    from bnexp.config.schema import compose_config

    def flat(preset, dropout):
        ov = [o for o in L.Batch(preset, 12000, (0.025,), (dropout,), (0,)).overrides() if not o.startswith("hydra.")]
        return pd.json_normalize(OmegaConf.to_container(compose_config(ov), resolve=True)).iloc[0].to_dict()

    for dropout in (0.0, 0.3):
        base, x5 = flat("baseline", dropout), flat("baseline_x5", dropout)
        assert base.keys() == x5.keys()
        diff = {k for k in base if base[k] != x5[k]}
        assert diff == {"lr", "experiment"}, diff
        assert x5["lr"] == pytest.approx(5 * base["lr"]) and base["lr"] == pytest.approx(0.025)
        assert x5["model.dropout"] == dropout and x5["optim.weight_decay"] == base["optim.weight_decay"] > 0


def test_the_control_stops_once_its_question_is_decided():
    """baseline_x5 that trains: "the rate alone is BN-x5's speedup" needs B_baseline_x5(a*) <= 1.25 x B_bn_x5(a*);
    a rung past that budget still below a* decides "no", so no further rung is needed."""
    import math

    a_star = 0.78815
    base = {**BASE_V1, ("baseline", 96000): a_star}
    x5 = {("bn_x5", b): a for b, a in ((375, .4279), (750, .4961), (1500, .5827), (3000, .6559), (6000, .7182),
                                        (12000, .7588), (24000, .7935))}
    # bn_x5 crosses a* between 12k and 24k, linear in log2(budget)
    decided_at = 1.25 * 2 ** (math.log2(12000) + (a_star - .7588) / (.7935 - .7588))
    assert 24000 < decided_at < 48000
    ctl = {**base, **x5, **{("baseline_x5", b): a for b, a in ((3000, .50), (6000, .60), (12000, .68), (24000, .74))}}
    pair = ("bn_x5", "baseline_x5")
    assert nxt(ctl, pair)[1] == [("baseline_x5", 48000, (0, 1))]  # 24k is below 1.25 x B_bn_x5(a*)
    st = stops({**ctl, ("baseline_x5", 48000): 0.77}, pair)["baseline_x5"]
    assert st == (f"stopped by decided: 77.00% at 48,000 steps >= 1.25 x B_bn_x5(a*) = {decided_at:,.0f} is below a*, "
                  "so the rate alone is not BN-x5's speedup")
    assert stops({**ctl, ("baseline_x5", 48000): 0.79}, pair)["baseline_x5"].startswith("stopped by a*")
    # without bn_x5's crossing (its ladder stopped below a*) the control climbs by the other rules
    low = {k: (v if k[1] < 24000 else 0.7590) for k, v in ctl.items() if k[0] == "bn_x5"}
    assert nxt({**ctl, **low, ("baseline_x5", 48000): 0.77}, pair)[1] == [("baseline_x5", 96000, (0, 1))]
