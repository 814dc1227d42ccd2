"""The report never changes a number silently and counts each seed once: a run whose summary.json and
metrics.jsonl disagree, or one of which is empty or malformed, is one warning naming the run and the file,
and its numbers come from the intact file (summary.json, written last, when both are readable); two runs of
one configuration and seed count once, the dropped folder named; the seed advice runs as printed."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_report import BN_05, NOBN_05, make_run

from bnexp.report import build_report, report_main

# a run that first reaches 90% at step 600 and ends at 0.9082 test accuracy
KNOTS_90 = [(0, 0.1), (600, 0.9), (1000, 0.9082)]


def _config(data: dict, label: str) -> dict:
    return next(c for c in data["configurations"] if c["label"] == label)


def _summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def _edit_summary(run: Path, **changes) -> None:
    (run / "summary.json").write_text(json.dumps({**_summary(run), **changes}))


@pytest.fixture
def sweep(tmp_path) -> Path:
    root = tmp_path / "sweep"
    for seed in (0, 1):
        make_run(root, f"bn=true,seed={seed}", bn=True, lr=0.5, seed=seed, knots=KNOTS_90, max_steps=1000,
                 targets=[0.9])
        make_run(root, f"bn=false,seed={seed}", bn=False, lr=0.5, seed=seed, knots=KNOTS_90, max_steps=1000,
                 targets=[0.9])
    return root


def _err(capsys) -> str:
    return capsys.readouterr().err.replace("\n", "")


@pytest.mark.parametrize("empty", ["empty", "missing"])
def test_an_empty_metrics_file_keeps_the_summarys_numbers_and_says_so(sweep, capsys, empty):
    run = sweep / "bn=true,seed=0"
    s = _summary(run)
    assert s["final_test_accuracy"] == pytest.approx(0.9082) and s["steps_to_target"] == {"0.9": 600}
    if empty == "empty":
        (run / "metrics.jsonl").write_text("")
    else:
        (run / "metrics.jsonl").unlink()
    assert report_main([str(sweep), "--targets", "0.9"]) == 0
    err = _err(capsys)
    assert err.count("bnexp report: warning:") == 1 and f"{run}: metrics.jsonl is missing or empty" in err
    assert "taken from summary.json" in err and "Traceback" not in err
    seed0 = _config(json.loads((sweep / "report.json").read_text()), "bn=true")["seeds"][0]
    assert seed0["path"] == str(run) and seed0["status"] == "finished"
    assert seed0["final_test_accuracy"] == pytest.approx(0.9082) and seed0["steps_to_target"] == {"0.9": 600}
    assert seed0["max_test_accuracy"] == pytest.approx(0.9082)  # the summary's best_test_accuracy



@pytest.mark.slow  # draws the report's figures (~3 s of CPU)
def test_an_unreadable_overrides_file_leaves_the_report_and_its_seed_advice_whole(sweep, capsys):
    """A run's .hydra/overrides.yaml cut off mid-write or edited by hand (not YAML; YAML but not a list of
    strings) used to end the report in a yaml ParserError (the seed advice) or a TypeError (the figures'
    labels); the report is written and its seed advice still names the missing seed."""
    for run, text in (("bn=true,seed=0", "- bn=true\n- lr: [0.5\n"), ("bn=false,seed=0", "[1, 2, null]\n")):
        (sweep / run / ".hydra" / "overrides.yaml").write_text(text)
    assert report_main([str(sweep), "--targets", "0.9"]) == 0
    assert "Traceback" not in _err(capsys)
    advice = json.loads((sweep / "report.json").read_text())["seed_advice"]
    assert "bn=true has 2 seeds (0, 1)" in advice and "Add seed=2" in advice

def test_an_empty_metrics_file_without_a_final_accuracy_stays_a_failed_run(sweep, capsys):
    run = sweep / "bn=true,seed=0"
    (run / "metrics.jsonl").write_text("")
    _edit_summary(run, final_test_accuracy=None)
    data = build_report(sweep, [0.9]).data
    assert _config(data, "bn=true")["completed"] == 1
    assert _config(data, "bn=true")["seeds"][0]["error"] == "metrics.jsonl missing or empty"


def test_disagreeing_files_are_one_warning_and_the_summary_wins(sweep, capsys):
    # summary.json says 90% at step 500 and a final 0.95; the evaluations say step 600 and 0.9082
    run = sweep / "bn=false,seed=1"
    _edit_summary(run, steps_to_target={"0.9": 500}, final_test_accuracy=0.95)
    assert report_main([str(sweep), "--targets", "0.9"]) == 0
    err = _err(capsys)
    assert err.count("bnexp report: warning:") == 1
    assert f"{run}: summary.json and metrics.jsonl disagree" in err
    assert "final test accuracy 0.95 vs 0.9082" in err and "steps to 0.9: 500 vs 600" in err
    seed1 = _config(json.loads((sweep / "report.json").read_text()), "bn=false")["seeds"][1]
    assert seed1["steps_to_target"] == {"0.9": 500} and seed1["final_test_accuracy"] == pytest.approx(0.95)


def test_agreeing_files_and_recomputed_population_statistics_are_no_warning(sweep, capsys):
    # Alg. 2's recomputed statistics replace the final accuracy; the last evaluation is the EMA's one
    _edit_summary(sweep / "bn=true,seed=1", final_test_accuracy=0.91, final_test_accuracy_ema=0.9082)
    assert report_main([str(sweep), "--targets", "0.9"]) == 0
    assert "warning" not in _err(capsys)


@pytest.mark.parametrize("key,value,number", [
    ("final_test_accuracy", "0.9082", "final_test_accuracy"),  # a string: the last evaluation (0.9082) is used
    ("best_test_accuracy", [0.9], "max_test_accuracy"),
    ("steps_to_target", {"0.9": "600"}, "steps_to_target.0.9"),  # the first evaluation at 90% (600) is used
    ("steps_to_target", {"0.9": 600.5}, "steps_to_target.0.9"),
    ("steps_to_target", [600], "steps_to_target"),
    ("step", "all", "step"),
    ("seed", {"a": 1}, "seed"),
    ("max_steps", True, "max_steps"),
    ("status", ["finished"], "status"),
])
def test_a_malformed_summary_value_is_one_warning_naming_file_and_key(sweep, capsys, key, value, number):
    run = sweep / "bn=true,seed=0"
    _edit_summary(run, **{key: value})
    assert report_main([str(sweep), "--targets", "0.9"]) == 0
    err = _err(capsys)
    shown = key if key != "steps_to_target" or not isinstance(value, dict) else "steps_to_target.0.9"
    assert err.count("bnexp report: warning:") == 1 and "Traceback" not in err
    assert f"{run / 'summary.json'}: key {shown} is " in err
    data = json.loads((sweep / "report.json").read_text())
    seed0 = next(s for s in _config(data, "bn=true")["seeds"] if s["path"] == str(run))
    if key == "status":  # no status: the run cannot count, and says why
        assert seed0["status"] == "failed" and "unknown status None" in seed0["error"]
        return
    assert seed0["status"] == "finished"
    assert seed0["final_test_accuracy"] == pytest.approx(0.9082) and seed0["max_test_accuracy"] == pytest.approx(0.9082)
    assert seed0["steps_to_target"] == {"0.9": 600}


def _copy_run(src: Path, dst: Path, steps: int | None = None, status: str | None = None) -> None:
    import shutil

    shutil.copytree(src, dst)
    if steps is not None or status is not None:
        s = _summary(dst)
        _edit_summary(dst, step=steps if steps is not None else s["step"], status=status or s["status"])


def test_a_seed_trained_twice_counts_once_and_the_dropped_folder_is_named(tmp_path, capsys):
    root = tmp_path / "sweep"
    for seed in (0, 1, 2):
        make_run(root, f"bn=true,seed={seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
        make_run(root, f"bn=false,seed={seed}", bn=False, lr=0.5, seed=seed, knots=NOBN_05[seed])
    once = build_report(root).data
    # seed 0 of BN retrained into another folder (fewer steps recorded: it keeps the original), and seed 1 of
    # no BN copied as an interrupted run (a completed run is kept over it, whatever its steps)
    _copy_run(root / "bn=true,seed=0", root / "more" / "bn=true,seed=0", steps=10)
    _copy_run(root / "bn=false,seed=1", root / "more" / "bn=false,seed=1", steps=10 ** 6, status="interrupted")
    capsys.readouterr()
    assert report_main([str(root)]) == 0
    err = _err(capsys)
    assert err.count("bnexp report: warning:") == 2 and "Traceback" not in err
    assert (f"{root / 'bn=true,seed=0'} and {root / 'more' / 'bn=true,seed=0'} are both seed 0 of bn=true: counted "
            f"once, kept {root / 'bn=true,seed=0'}") in err
    assert f"dropped {root / 'more' / 'bn=false,seed=1'} (incomplete" in err
    data = json.loads((root / "report.json").read_text())
    assert data["runs"] == 6 and sorted(d["dropped"] for d in data["duplicate_runs"]) == [
        str(root / "more" / "bn=false,seed=1"), str(root / "more" / "bn=true,seed=0")]
    for label in ("bn=true", "bn=false"):  # the same numbers as before the copies
        assert _config(data, label)["steps_to_target"] == _config(once, label)["steps_to_target"]
        assert [s["seed"] for s in _config(data, label)["seeds"]] == [0, 1, 2]


def test_of_two_finished_copies_the_newer_is_kept(tmp_path, capsys):
    root = tmp_path / "sweep"
    make_run(root, "a", bn=True, lr=0.5, seed=0, knots=BN_05[0])
    make_run(root, "b", bn=True, lr=0.5, seed=0, knots=BN_05[1])
    os.utime(root / "a" / "summary.json", (1_000_000, 1_000_000))
    data = build_report(root).data
    assert data["duplicate_runs"] == [{"configuration": data["configurations"][0]["label"], "seed": 0,
                                       "kept": str(root / "b"), "dropped": str(root / "a")}]
    assert data["configurations"][0]["steps_to_target"]["0.95"]["per_seed"] == [1200]  # b's curve


def test_configurations_lacking_different_seeds_get_commands_that_retrain_none(tmp_path):
    """bn=true has seed 0 and bn=false seed 1 (the sweep's other two jobs failed): one command with seed=0,1,2
    would retrain a seed each has."""
    root = tmp_path / "sweep"
    for bn, seed in ((True, 0), (False, 1), (True, 1), (False, 0)):
        d = make_run(root, f"bn={str(bn).lower()},seed={seed}", bn=bn, lr=0.5, seed=seed, knots=BN_05[seed],
                     status="finished" if bn == (seed == 0) else "failed")
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"bn={str(bn).lower()}", f"seed={seed}"]))
    (root / "multirun.yaml").write_text("hydra:\n  overrides:\n    hydra: [hydra.mode=MULTIRUN]\n"
                                        "    task: ['bn=true,false', 'seed=0,1']\n")
    advice = build_report(root).data["seed_advice"]
    assert "Add the seeds each lacks: the configurations lack different seeds" in advice, advice
    assert (f"bnexp train -m bn=true seed=1,2 hydra.sweep.dir={root / 'more_seeds' / '1'}; "
            f"bnexp train -m bn=false seed=0,2 hydra.sweep.dir={root / 'more_seeds' / '2'}, then") in advice, advice


def test_advice_for_a_folder_with_odd_characters_parses_in_the_shell_and_in_hydra(tmp_path):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bnexp.report.seed_advice import sweep_command

    folder = tmp_path / "sweeps" / "bn=true,lr=0.5 it's"
    cmd = sweep_command(folder, [1, 2], ["bn=true,false", "model.channels=[4,8]", "seed=0"])
    words = shlex.split(cmd)
    assert words[:6] == ["bnexp", "train", "-m", "bn=true,false", "model.channels=[4,8]", "seed=1,2"]
    parsed = OverridesParser.create().parse_overrides(words[3:])
    assert parsed[-1].key_or_group == "hydra.sweep.dir"
    assert parsed[-1].value() == str(folder / "more_seeds" / "seed_1_2")


@pytest.mark.e2e
def test_the_printed_seed_advice_runs_and_completes_the_sweep(tmp_path, data_root):
    """A real 1-seed MNIST sweep (20 steps): the command the report prints exits 0 and the next report has
    no advice and no duplicate run."""
    sweep = tmp_path / "sweep"
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), HYDRA_FULL_ERROR="")
    env.pop("HYDRA_FULL_ERROR")
    exe = Path(sys.executable).with_name("bnexp")
    bnexp = [str(exe)] if exe.exists() else [sys.executable, "-m", "bnexp.cli"]
    few = ["trainer.progress=false", "trainer.num_threads=1", "trainer.max_steps=20", "trainer.eval_every=5",
           "trainer.hist_every=5", "trainer.targets=[0.2]"]
    r = subprocess.run(bnexp + ["train", "-m", "bn=true,false", "seed=0", *few, f"hydra.sweep.dir={sweep}"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(bnexp + ["report", str(sweep)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    advice = json.loads((sweep / "report.json").read_text())["seed_advice"]
    cmd = advice.split(": ", 2)[2].rsplit(", then bnexp report ", 1)[0]
    assert cmd.startswith("bnexp train -m bn=true,false ") and "seed=1,2" in cmd, advice  # as typed
    env["PATH"] = f"{exe.parent}{os.pathsep}{env['PATH']}"
    r = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(bnexp + ["report", str(sweep)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((sweep / "report.json").read_text())
    assert data["seed_advice"] is None and data["duplicate_runs"] == [] and data["runs"] == 6
    assert sorted(s["seed"] for c in data["configurations"] for s in c["seeds"]) == [0, 0, 1, 1, 2, 2]
    assert "warning" not in r.stderr
