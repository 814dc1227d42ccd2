"""The study section of the report (docs/studies/, bnexp/report/study_section.py, study_claims.py): synthetic run
folders with known numbers -> the claim verdicts each study must give, computed by hand below; the
section in report.json / report.md and its figure."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import yaml

from bnexp.report.claims import INCONCLUSIVE, NOT_SUPPORTED, PREMISE_NOT_MET, SUPPORTED
from bnexp.report.figstyle import figure_png
from bnexp.report.figures_studies import study_figure
from bnexp.analysis.runs import find_run_dirs, load_sweep
from bnexp.analysis.tuning import best_rate
from bnexp.analysis.rules import Censored
from bnexp.report.fmt import censored_why
from bnexp.report.frontier_text import speedup_text
from bnexp.analysis.study_runs import cells
from bnexp.report.study_section import MARKER
from bnexp.report.study_claims import study_section
from bnexp.report.claims import Claim
from bnexp.runfolders.rundir import dumps


def make_run(sweep: Path, folder: str, *, seed: int, norm: str = "batch", m: int = 60, lr: float = 0.6,
             reach: int | None = None, final: float = 0.97, budget: int = 4000, every: int = 100,
             status: str = "finished", momentum: float = 0.1, position: str = "before", act: str = "sigmoid",
             model: str = "mlp", depth: int = 3, ghost: int | None = None, inference: dict | None = None,
             validation: int | None = None) -> Path:
    """A finished run folder: config.yaml, summary.json and metrics.jsonl whose test accuracy is 0.5 before
    ``reach`` and ``final`` from ``reach`` on (``final`` throughout, below 0.95, when ``reach`` is None).
    ``validation``: ``data.validation`` and the summary's ``evaluated_on`` as the trainer writes them (N > 0:
    "validation", 0: "test"); None: neither (a run from before the key existed, which read the test set)."""
    d = sweep / folder
    d.mkdir(parents=True)
    assert reach is not None or final < 0.95 or model == "cnn"
    bn = {"enabled": norm != "none", "norm": norm if norm in ("layer", "group") else "batch",
          "ghost_batch_size": ghost, "momentum": momentum, "position": position, "noise": False}
    net = {"name": "mlp", "hidden": [100] * depth} if model == "mlp" else {"name": "cnn", "channels": [8, 16]}
    cfg = {"seed": seed, "lr": lr, "act": act, "model": net, "bn": bn,
           "data": {"name": "mnist", **({} if validation is None else {"validation": validation})},
           "trainer": {"batch_size": m, "max_steps": budget, "eval_every": every}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    recs = [{"step": s, "test_accuracy": 0.1 if s == 0 else (final if reach is None or s >= reach else 0.5)}
            for s in range(0, budget + 1, every)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "summary.json").write_text(json.dumps({"status": status, "seed": seed, "step": budget,
                                                "final_test_accuracy": recs[-1]["test_accuracy"],
                                                "wall_time_s": 10.0,
                                                **({} if validation is None else
                                                   {"evaluated_on": "validation" if validation else "test"})}))
    if inference is not None:
        (d / "inference_stats.json").write_text(json.dumps({"m": m, "accuracy": inference}))
    return d


def section(sweep: Path, name: str) -> dict:
    (sweep / MARKER).write_text(json.dumps({"study": name, "wall_time_s": 600, "jobs": 2, "calls": 1}))
    sec = study_section(sweep, load_sweep(find_run_dirs(sweep)))
    # the figure draws from the JSON alone
    assert figure_png(study_figure(json.loads(dumps(sec))), 40)[:4] == b"\x89PNG"
    return sec


def verdicts(sec: dict) -> list[str]:
    return [c["verdict"] for c in sec["claims"]]


# --- the shared rules ----------------------------------------------------------------------------------

def test_censored_ratio_and_the_bounds_a_claim_may_use():
    assert Censored(300.0) / Censored(100.0) == Censored(3.0)
    assert Censored(400.0, "lower") / Censored(100.0) == Censored(4.0, "lower")   # true ratio >= 4
    assert Censored(100.0) / Censored(400.0, "lower") == Censored(0.25, "upper")  # true ratio <= 0.25
    assert (Censored(400.0, "lower") / Censored(400.0, "lower")).bound == "unknown"
    assert Censored.steps(None, 4000, 60) == Censored(240000.0, "lower", "budget", 4000)
    assert censored_why(Censored.steps(None, 4000, 60)) == "not reached within 4,000 steps"
    assert censored_why(Censored(3.0) / Censored.steps(None, 4000)) == "not reached within 4,000 steps"
    assert censored_why(Censored.steps(None, None)) == "not reached, budget unknown" and censored_why(Censored(3.0)) is None
    assert speedup_text(3.0, "lower") == ">= 3.00x" and speedup_text(None) == "not reached"
    assert speedup_text(3.0, "unknown") == "~3.00x (both bounds)" and speedup_text(1234.5) == "1,234.50x"


def test_best_rate_fewest_steps_then_highest_final(tmp_path):
    for s in range(3):
        make_run(tmp_path, f"a{s}", seed=s, lr=0.9, reach=3000)
        make_run(tmp_path, f"b{s}", seed=s, lr=3.6, reach=[1000, 2000, 1200][s])
        make_run(tmp_path, f"c{s}", seed=s, lr=14.4, reach=500 if s else None, final=0.97 if s else 0.5)
    c = cells(load_sweep(find_run_dirs(tmp_path)), 0.95)
    assert best_rate(c) == (3.6, "fewest steps")  # 14.4 is faster but one seed never reached 95%
    assert best_rate(c[c["lr"] == 14.4]) == (14.4, "highest final accuracy")
    assert best_rate(c.iloc[0:0]) == (None, "no runs")


# --- the five studies ----------------------------------------------------------------------------------

def test_batch_size_claims(tmp_path):
    for s in range(3):
        # m = 60: BN reaches 95% at 60,000-72,000 examples, no BN never within 240,000
        make_run(tmp_path, f"bn60_{s}", seed=s, m=60, reach=[1000, 1100, 1200][s], budget=4000)
        make_run(tmp_path, f"nobn60_{s}", seed=s, norm="none", m=60, final=0.93, budget=4000)
        # m = 4: no BN is faster (60-80k examples vs BN's 80-100k)
        make_run(tmp_path, f"bn4_{s}", seed=s, m=4, reach=[20000, 25000, 22500][s], budget=60000, every=500)
        make_run(tmp_path, f"nobn4_{s}", seed=s, norm="none", m=4, reach=[15000, 17500, 20000][s], budget=60000,
                 every=500)
        # m = 2 and 16 final accuracies (hand-computed differences in the asserts)
        make_run(tmp_path, f"bn2_{s}", seed=s, m=2, final=[0.90, 0.91, 0.89][s], budget=120000, every=3000)
        make_run(tmp_path, f"ln2_{s}", seed=s, norm="layer", m=2, final=[0.93, 0.93, 0.94][s], budget=120000,
                 every=3000)
        make_run(tmp_path, f"bn16_{s}", seed=s, m=16, final=0.95, reach=15000, budget=15000, every=375)
        make_run(tmp_path, f"ln16_{s}", seed=s, norm="layer", m=16, final=[0.97, 0.98, 0.995][s], reach=375,
                 budget=15000, every=375)
    sec = section(tmp_path, "batch_size")
    adv60, adv4, ln2, drop, ghost = sec["claims"]
    assert adv60["per_seed"] == pytest.approx({0: 4.0, 1: 240 / 66, 2: 240 / 72})  # censored no BN: lower bounds
    assert adv60["verdict"] == SUPPORTED
    # below 1 in every seed, but the 3-seed t interval of the log ratios, exp(-0.254 -+ 4.303 * 0.123 / sqrt(3))
    # = exp([-0.559, 0.051]) = [0.572, 1.053], reaches past 1
    assert adv4["per_seed"] == pytest.approx({0: 0.75, 1: 0.7, 2: 80 / 90}) and adv4["verdict"] == INCONCLUSIVE
    assert (adv4["ci_low"], adv4["ci_high"]) == pytest.approx((0.5715, 1.0527), abs=1e-3)
    # 10/3 -+ 4.303 * 1.528 / sqrt(3) = [-0.461, 7.128]: every seed is higher, but 3 seeds this spread straddle 0
    assert ln2["per_seed"] == pytest.approx({0: 3.0, 1: 2.0, 2: 5.0}) and ln2["verdict"] == INCONCLUSIVE
    assert (ln2["ci_low"], ln2["ci_high"]) == pytest.approx((-0.461, 7.128), abs=1e-3)
    # drops BN 5, 4, 6 points; LayerNorm 4, 5, 5.5: differences 1, -1, 0.5 straddle 0
    assert drop["per_seed"] == pytest.approx({0: 1.0, 1: -1.0, 2: 0.5}) and drop["verdict"] == INCONCLUSIVE
    assert ghost["verdict"] == PREMISE_NOT_MET  # no ghost-BN runs
    assert ln2["mean"] == pytest.approx(10 / 3) and ln2["std"] == pytest.approx(statistics.stdev([3, 2, 5]))
    row = next(r for r in sec["table"] if r["norm"] == "batch" and r["m"] == 60)
    assert row["seeds"] == 3 and row["reached"] == 3 and row["to_target"]["mean"] == pytest.approx(66000)
    assert any("m = 60" in f and "no BN / BN" in f for f in sec["findings"])
    assert sec["runs"] == 24 and sec["wall_time_s"] == 600 and sec["figure"] == "study_batch_size.png"
    assert sec["jobs"] == 2 and sec["calls"] == 1


def _inference(batch, ema, pop):
    return {"batch": batch, "ema": ema, "population": pop}


def test_inference_statistics_claims(tmp_path):
    for s in range(3):
        make_run(tmp_path, f"m60_{s}", seed=s, m=60, reach=1000,
                 inference=_inference(0.970, [0.971, 0.972, 0.9715][s], [0.974, 0.976, 0.9765][s]))
        make_run(tmp_path, f"m2_{s}", seed=s, m=2, reach=3000, budget=120000, every=3000,
                 inference=_inference(0.930, [0.960, 0.970, 0.980][s], [0.970, 0.990, 0.995][s]))
        make_run(tmp_path, f"m2slow_{s}", seed=s, m=2, momentum=0.01, reach=3000, budget=120000, every=3000,
                 inference=_inference(0.930, 0.960, [0.972, 0.978, 0.976][s]))
    sec = section(tmp_path, "inference_statistics")
    agree, grows, pop60, pop2, slow = sec["claims"]
    assert agree["per_seed"] == pytest.approx({0: 0.1, 1: 0.2, 2: 0.15}) and agree["verdict"] == SUPPORTED
    assert grows["per_seed"] == pytest.approx({0: 2.9, 1: 3.8, 2: 4.85}) and grows["verdict"] == SUPPORTED
    # 0.4 -+ 4.303 * 0.1 / sqrt(3) = [0.152, 0.648] straddles the 0.2 tolerance
    assert pop60["per_seed"] == pytest.approx({0: 0.3, 1: 0.4, 2: 0.5}) and pop60["verdict"] == INCONCLUSIVE
    assert (pop60["ci_low"], pop60["ci_high"]) == pytest.approx((0.152, 0.648), abs=1e-3)
    assert pop2["per_seed"] == pytest.approx({0: 1.0, 1: 2.0, 2: 1.5}) and pop2["verdict"] == SUPPORTED
    assert slow["per_seed"] == pytest.approx({0: -0.2, 1: 0.2, 2: -0.1}) and slow["verdict"] == INCONCLUSIVE
    row = next(r for r in sec["table"] if r["m"] == 2 and r["momentum"] == 0.1)
    assert row["gap"]["mean"] == pytest.approx(4.0) and row["acc_batch"]["mean"] == pytest.approx(93.0)


def test_inference_statistics_without_the_evaluation_is_premise_not_met(tmp_path):
    for s in range(3):
        make_run(tmp_path, f"m60_{s}", seed=s, m=60, reach=1000)
    sec = section(tmp_path, "inference_statistics")
    assert set(verdicts(sec)) == {PREMISE_NOT_MET}
    assert "bnexp.train.inference_eval" in sec["claims"][0]["reason"]


def test_inference_statistics_without_a_completed_run_is_premise_not_met(tmp_path):
    """Every run failed or was interrupted (no completed run, so no inference_stats.json column): each claim says
    the premise is not met and the table is empty, where the section used to raise a KeyError."""
    for s in range(3):
        make_run(tmp_path, f"m60_{s}", seed=s, m=60, reach=1000, status="failed" if s else "interrupted",
                 inference=_inference(0.970, 0.971, 0.974))
    sec = section(tmp_path, "inference_statistics")
    assert set(verdicts(sec)) == {PREMISE_NOT_MET} and sec["table"] == [] and sec["runs"] == 0
    assert sec["claims"][0]["reason"] == "no completed runs of this configuration"


def test_a_hand_edited_inference_stats_json_is_a_warning_naming_the_file_and_key(tmp_path, caplog):
    """inference_stats.json whose accuracy is a list, or one of whose accuracies is text (it used to end the report
    in AttributeError): a warning naming the file and the key, and those runs count as not evaluated; seed 0's
    correct file still gives its accuracies."""
    from bnexp.train.inference_eval import RESULT

    for s, acc in enumerate([_inference(0.970, 0.971, 0.974), [0.97, 0.971, 0.974],
                             _inference(0.970, "0.971", 0.974)]):
        make_run(tmp_path, f"m60_{s}", seed=s, m=60, reach=1000, inference=acc)
    sec = section(tmp_path, "inference_statistics")
    assert f"{tmp_path / 'm60_1' / RESULT}: key accuracy is not an object of accuracies; ignored" in caplog.text
    assert f"{tmp_path / 'm60_2' / RESULT}: key accuracy.ema is not a number; ignored" in caplog.text
    row = sec["table"][0]
    assert row["acc_batch"]["n"] == 2 and row["acc_ema"]["n"] == 1 and row["acc_ema"]["mean"] == pytest.approx(97.1)


def test_an_inference_stats_json_that_is_not_an_object_is_a_warning_naming_it(tmp_path, caplog):
    """inference_stats.json cut off, or a list: it was passed over without a word (the run not evaluated, and
    inference_eval, seeing the file, does not evaluate it again); now a warning names the file."""
    from bnexp.train.inference_eval import RESULT

    for s in range(3):
        make_run(tmp_path, f"m60_{s}", seed=s, m=60, reach=1000, inference=_inference(0.970, 0.971, 0.974))
    (tmp_path / "m60_1" / RESULT).write_text('{"m": 60, "accuracy": {"ba')
    (tmp_path / "m60_2" / RESULT).write_text("[0.97, 0.971, 0.974]")
    row = section(tmp_path, "inference_statistics")["table"][0]
    for s in (1, 2):
        assert (f"{tmp_path / f'm60_{s}' / RESULT}: not a readable JSON object; ignored (the run counts as not "
                "evaluated)") in caplog.text
    assert row["acc_batch"]["n"] == 1


def test_placement_claims_each_position_at_its_best_rate(tmp_path):
    for s in range(3):
        # MLP sigmoid: before is 2x faster at each one's best rate (0.6); after diverges at 2.4
        make_run(tmp_path, f"ms/b06_{s}", seed=s, lr=0.6, reach=[1000, 1200, 1000][s])
        make_run(tmp_path, f"ms/b015_{s}", seed=s, lr=0.15, reach=[3000, 3000, 3200][s])
        make_run(tmp_path, f"ms/a06_{s}", seed=s, lr=0.6, position="after", reach=[2000, 2400, 2200][s])
        make_run(tmp_path, f"ms/a24_{s}", seed=s, lr=2.4, position="after", final=0.1, status="diverged")
        # MLP relu: after is faster
        make_run(tmp_path, f"mr/b_{s}", seed=s, act="relu", reach=[2000, 2000, 2200][s])
        make_run(tmp_path, f"mr/a_{s}", seed=s, act="relu", position="after", reach=[1000, 1200, 1000][s])
    for s in range(2):  # CNN sigmoid: 2 seeds only (target 97%)
        make_run(tmp_path, f"cs/b_{s}", seed=s, model="cnn", lr=0.08, reach=300, final=0.98, budget=1500, every=150)
        make_run(tmp_path, f"cs/a_{s}", seed=s, model="cnn", lr=0.08, position="after", reach=600, final=0.98,
                 budget=1500, every=150)
    sec = section(tmp_path, "placement")
    sig, relu, cnn_sig, cnn_relu = sec["claims"]
    assert sig["per_seed"] == pytest.approx({0: 2.0, 1: 2.0, 2: 2.2}) and sig["verdict"] == SUPPORTED
    assert relu["per_seed"] == pytest.approx({0: 0.5, 1: 0.6, 2: 1000 / 2200}) and relu["verdict"] == NOT_SUPPORTED
    assert cnn_sig["per_seed"] == pytest.approx({0: 2.0, 1: 2.0}) and cnn_sig["verdict"] == INCONCLUSIVE
    assert cnn_relu["verdict"] == PREMISE_NOT_MET
    best = {(r["model"], r["act"], r["position"], r["lr"]): r["best"] for r in sec["table"]}
    assert best[("mlp", "sigmoid", "before", 0.6)].startswith("yes") and best[("mlp", "sigmoid", "before", 0.15)] == ""
    assert best[("mlp", "sigmoid", "after", 2.4)] == ""  # diverged: not a best rate


def test_normalizer_claims_with_a_censored_groupnorm_seed(tmp_path):
    for s in range(3):
        make_run(tmp_path, f"bn36_{s}", seed=s, lr=3.6, reach=[1600, 1800, 1600][s], budget=8000, every=200)
        make_run(tmp_path, f"bn09_{s}", seed=s, lr=0.9, reach=[3000, 3200, 3000][s], budget=8000, every=200)
        make_run(tmp_path, f"no36_{s}", seed=s, norm="none", lr=3.6, reach=[5000, 6000, 4000][s], budget=8000,
                 every=200)
        make_run(tmp_path, f"no144_{s}", seed=s, norm="none", lr=14.4, final=0.1, budget=8000, every=200)
        make_run(tmp_path, f"ln36_{s}", seed=s, norm="layer", lr=3.6, reach=[2000, 2200, 2400][s], budget=8000,
                 every=200)
        # GroupNorm: seed 2 never reaches 95% -> counted as its 8,000 steps, a lower bound
        make_run(tmp_path, f"gn36_{s}", seed=s, norm="group", lr=3.6, reach=[1400, 1600, None][s],
                 final=[0.97, 0.97, 0.9][s], budget=8000, every=200)
    sec = section(tmp_path, "normalizer")
    bn_nobn, ln_nobn, bn_ln, bn_gn = sec["claims"]
    assert bn_nobn["per_seed"] == pytest.approx({0: 5000 / 1600, 1: 6000 / 1800, 2: 4000 / 1600})
    assert bn_nobn["verdict"] == SUPPORTED
    assert ln_nobn["per_seed"] == pytest.approx({0: 2.5, 1: 6000 / 2200, 2: 4000 / 2400})
    assert ln_nobn["verdict"] == SUPPORTED
    # above 1 in every seed; the t interval of the log ratios, exp(0.276 -+ 4.303 * 0.112 / sqrt(3)), starts at 0.998
    assert bn_ln["per_seed"] == pytest.approx({0: 1.25, 1: 2200 / 1800, 2: 1.5}) and bn_ln["verdict"] == INCONCLUSIVE
    assert bn_ln["ci_low"] == pytest.approx(0.998, abs=2e-3)
    assert bn_gn["per_seed"] == pytest.approx({0: 0.875, 1: 1600 / 1800, 2: 5.0}) and bn_gn["verdict"] == INCONCLUSIVE
    # LayerNorm keeps (5000 - 2200) / (5000 - 5000/3) = 84% of the steps BN saves
    assert any("84%" in f for f in sec["findings"])
    assert any("GroupNorm: best rate 3.6 (highest final accuracy)" in f for f in sec["findings"])


def test_depth_claims(tmp_path):
    for s in range(3):
        make_run(tmp_path, f"d12/bn36_{s}", seed=s, depth=12, lr=3.6, reach=[3000, 3500, 4000][s], budget=10000,
                 every=250)
        make_run(tmp_path, f"d12/bn09_{s}", seed=s, depth=12, lr=0.9, reach=9000, budget=10000, every=250)
        make_run(tmp_path, f"d12/no09_{s}", seed=s, depth=12, norm="none", lr=0.9, final=[0.1135, 0.098, 0.1135][s],
                 budget=10000, every=250)
        make_run(tmp_path, f"d12/no36_{s}", seed=s, depth=12, norm="none", lr=3.6, final=0.0958, budget=10000,
                 every=250)
        make_run(tmp_path, f"d6/bn_{s}", seed=s, depth=6, lr=3.6, reach=[1000, 1250, 1000][s], budget=10000,
                 every=250)
        make_run(tmp_path, f"d6/no_{s}", seed=s, depth=6, norm="none", lr=3.6, final=0.9, budget=10000, every=250)
        make_run(tmp_path, f"d3/bn_{s}", seed=s, depth=3, lr=3.6, reach=1000, budget=10000, every=250)
    sec = section(tmp_path, "depth")
    bn12, nobn12, adv6, slowdown = sec["claims"]
    assert bn12["per_seed"] == pytest.approx({0: 97.0, 1: 97.0, 2: 97.0}) and bn12["verdict"] == SUPPORTED
    # no BN's best rate at 12 layers is the one with the highest final accuracy (0.9: 10.8% mean)
    assert nobn12["per_seed"] == pytest.approx({0: 11.35, 1: 9.8, 2: 11.35}) and nobn12["verdict"] == SUPPORTED
    assert adv6["per_seed"] == pytest.approx({0: 10.0, 1: 8.0, 2: 10.0}) and adv6["verdict"] == SUPPORTED
    assert slowdown["per_seed"] == pytest.approx({0: 3.0, 1: 3.5, 2: 4.0}) and slowdown["verdict"] == NOT_SUPPORTED
    # best rates on the grid's edge are flagged (a better rate may lie outside it); a one-rate grid has no edge
    assert any("best rate 0.9 (highest final accuracy; the lowest rate of its grid, so a lower one might be better)"
               in f for f in sec["findings"])
    assert any("best rate 3.6 (fewest steps; the highest rate of its grid, so a higher one might be better)" in f
               for f in sec["findings"])
    assert not any("grid" in f for f in sec["findings"] if "6" in f.split(":")[0])  # depth 6: one rate


def test_the_report_carries_the_study_section(tmp_path):
    from bnexp.report.build import build_report
    from bnexp.report.command import write_report

    for s in range(3):
        make_run(tmp_path, f"d3/bn_{s}", seed=s, depth=3, lr=3.6, reach=1000, budget=2000)
        make_run(tmp_path, f"d3/no_{s}", seed=s, depth=3, norm="none", lr=3.6, reach=1500, budget=2000)
    (tmp_path / MARKER).write_text(json.dumps({"study": "depth"}))
    write_report(build_report(tmp_path))
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["study"]["name"] == "depth" and len(data["study"]["claims"]) == 4
    assert data["study"]["claims"][0]["verdict"] == PREMISE_NOT_MET  # no 12-layer runs
    assert {r["depth"] for r in data["study"]["table"]} == {3}
    assert (tmp_path / "study_depth.png").stat().st_size > 0 and "study_depth.png" in data["files"]
    md = (tmp_path / "report.md").read_text()
    assert "## Study: Depth" in md and "premise not met" in md
    # a sweep without study.json has no study section
    (tmp_path / MARKER).unlink()
    assert build_report(tmp_path).data["study"] is None


def test_a_hand_edited_study_json_is_a_warning_naming_the_file_and_key(tmp_path, caplog):
    """study.json with a wall time that is not a number (it used to fail rendering report.md with a TypeError):
    one warning naming the file and the key, and the page says the wall time is not recorded; a study.json that
    is not JSON is a warning and no study section."""
    from bnexp.report.build import build_report
    from bnexp.report.render import render_files

    for s in range(3):
        make_run(tmp_path, f"bn_{s}", seed=s, lr=3.6, reach=1000, budget=2000)
    (tmp_path / MARKER).write_text(json.dumps({"study": "depth", "wall_time_s": "10 min", "jobs": 2}))
    report = build_report(tmp_path)
    assert report.data["study"]["wall_time_s"] is None and report.data["study"]["jobs"] == 2
    assert f"{tmp_path / MARKER}: key wall_time_s is \"10 min\", not a number; ignored" in caplog.text
    assert "Runs: 3 completed; wall time not recorded." in render_files(report)["report.md"].decode()
    (tmp_path / MARKER).write_text('{"study": "depth",')
    caplog.clear()
    assert build_report(tmp_path).data["study"] is None
    assert f"{tmp_path / MARKER} is unreadable" in caplog.text and "no study section" in caplog.text


def test_a_run_whose_lr_is_text_is_left_out_of_the_study_with_a_warning(tmp_path, caplog):
    """A run config with ``lr: fast`` (a hand edit) used to end the report in ValueError (float('fast')): the run
    is left out of the study's cells with one warning naming it, and the other five runs are the study."""
    from bnexp.report.build import build_report

    for s in range(3):
        make_run(tmp_path, f"bn_{s}", seed=s, lr=3.6, reach=1000, budget=2000)
        make_run(tmp_path, f"plain_{s}", seed=s, norm="none", lr="fast" if s == 1 else 3.6, reach=1500, budget=2000)
    c = cells(load_sweep(find_run_dirs(tmp_path)), 0.95)
    assert sorted(Path(r).name for r in c["run"]) == ["bn_0", "bn_1", "bn_2", "plain_0", "plain_2"]
    assert set(c["lr"]) == {3.6}
    assert f'{tmp_path / "plain_1"}: key lr is "fast", not a number; the run is left out of the study' in caplog.text
    (tmp_path / MARKER).write_text(json.dumps({"study": "normalizer"}))
    assert build_report(tmp_path).data["study"]["runs"] == 5
