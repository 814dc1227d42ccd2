"""bnexp report on an unfinished sweep: the advice is the command that resumes it (the one Ctrl-C printed), not
more seeds; seeds are advised only once every run completed, in the form the user typed (bn=true,false)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml

from test_report import BN_05, NOBN_05, make_run

from bnexp.report import build_report, report_main

# multirun.yaml as `bnexp train -m bn=true,false seed=0,1 trainer.max_steps=20000 hydra.sweep.dir=ROOT` writes it:
# bnexp quotes bn's values for Hydra, and adds its own Hydra overrides
MULTIRUN = """hydra:
  overrides:
    hydra:
    - hydra.sweep.dir={root}
    - hydra.output_subdir=null
    - +hydra.job.env_set.BNEXP_OUTPUT_SUBDIR='.hydra'
    - hydra.mode=MULTIRUN
    task:
    - bn='true','false'
    - seed=0,1
    - trainer.max_steps=20000
"""


def _job(root: Path, bn: bool, seed: int, status: str = "finished") -> Path:
    """One job's run folder as the sweep writes it, with Hydra's .hydra/overrides.yaml."""
    knots = (BN_05 if bn else NOBN_05)[seed]
    d = make_run(root, f"bn={str(bn).lower()},seed={seed}", bn=bn, lr=0.12, seed=seed, knots=knots, status=status)
    (d / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"bn='{str(bn).lower()}'", f"seed={seed}", "trainer.max_steps=20000"]))
    return d


def _sweep(tmp_path: Path, jobs) -> Path:
    root = tmp_path / "sw4"
    root.mkdir()
    (root / "multirun.yaml").write_text(MULTIRUN.format(root=root))
    for job in jobs:
        _job(root, *job)
    return root


RESUME = "bnexp train -m bn=true,false seed=0,1 trainer.max_steps=20000 hydra.sweep.dir={root}"


def test_ctrl_c_in_the_second_job_advises_the_sweeps_resume_command_not_more_seeds(tmp_path, capsys):
    """Ctrl-C while bn=true,seed=1 ran: that run is interrupted and both bn=false jobs never started."""
    root = _sweep(tmp_path, [(True, 0), (True, 1, "interrupted")])
    advice = build_report(root).data["seed_advice"]
    assert advice == (f"The sweep is unfinished: 1 run incomplete (bn=true,seed=1); 2 jobs not started. Resume it "
                      f"with: {RESUME.format(root=root)}, then bnexp report {root}."), advice
    # the same command Ctrl-C prints (bnexp.cli: "Resume the sweep with: ...")
    from bnexp.runfolders.resumecmd import sweep_resume_command

    assert sweep_resume_command(root / "bn=true,seed=1") == RESUME.format(root=root)
    assert report_main([str(root)]) == 0
    out = capsys.readouterr().out
    md = (root / "report.md").read_text(encoding="utf-8")
    for text in (" ".join(out.split()), md):
        assert "The sweep is unfinished" in text and "more_seeds" not in text and "Add seed" not in text
    assert json.loads((root / "report.json").read_text())["seed_advice"] == advice


def test_jobs_that_never_started_make_the_sweep_unfinished(tmp_path):
    """Ctrl-C before the bn=false jobs began (a start cut short leaves no folder): every run there is complete,
    but multirun.yaml lists two jobs no run folder holds."""
    root = _sweep(tmp_path, [(True, 0), (True, 1)])
    assert build_report(root).data["seed_advice"] == (
        f"The sweep is unfinished: 2 jobs not started. Resume it with: {RESUME.format(root=root)}, then bnexp "
        f"report {root}.")


def test_a_complete_sweep_gets_the_seed_advice_as_typed(tmp_path):
    """Every job completed: 2 seeds per configuration, so seed=2 is advised, with bn=true,false as typed."""
    root = _sweep(tmp_path, [(True, 0), (True, 1), (False, 0), (False, 1)])
    advice = build_report(root).data["seed_advice"]
    more = root / "more_seeds" / "seed_2"
    assert advice.endswith(f"Add seed=2: bnexp train -m bn=true,false trainer.max_steps=20000 seed=2 "
                           f"hydra.sweep.dir={more}, then bnexp report {root}."), advice
    cmd = advice.split("Add seed=2: ")[1].rsplit(", then bnexp report ", 1)[0]
    assert shlex.split(cmd)[3:5] == ["bn=true,false", "trainer.max_steps=20000"]


def test_runs_of_a_nested_sweep_are_resumed_by_that_sweeps_command(tmp_path):
    """A seed sweep run into SWEEP/more_seeds/seed_2 (the advice's folder) and interrupted there: the command
    is that sweep's, from its own multirun.yaml; the outer sweep, complete, needs none."""
    root = _sweep(tmp_path, [(True, 0), (True, 1), (False, 0), (False, 1)])
    inner = root / "more_seeds" / "seed_2"
    inner.mkdir(parents=True)
    (inner / "multirun.yaml").write_text(MULTIRUN.format(root=inner).replace("seed=0,1", "seed=2"))
    _job(inner, True, 2, "interrupted")
    advice = build_report(root).data["seed_advice"]
    assert advice == (f"The sweep is unfinished: 1 run incomplete (bn=true,seed=2); 1 job not started. Resume it "
                      f"with: bnexp train -m bn=true,false seed=2 trainer.max_steps=20000 hydra.sweep.dir={inner}, "
                      f"then bnexp report {root}."), advice


def test_an_interrupted_single_run_gets_its_own_resume_command(tmp_path):
    run = make_run(tmp_path, "run", bn=True, lr=0.12, seed=0, knots=BN_05[0], status="interrupted")
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["bn='true'", "trainer.max_steps=20000"]))
    assert build_report(run).data["seed_advice"] == (
        f"The sweep is unfinished: 1 run incomplete (run). Resume it with: bnexp train bn=true "
        f"trainer.max_steps=20000 hydra.run.dir={run}, then bnexp report {run}.")


def test_a_complete_sweep_run_again_with_a_result_neutral_key_is_not_unfinished(tmp_path):
    """Its resume command run once more with trainer.num_threads=1 skips every complete run, whose folders keep
    the first call's overrides: no job is missing, so the advice is still the seeds'."""
    root = _sweep(tmp_path, [(True, 0), (True, 1), (False, 0), (False, 1)])
    (root / "multirun.yaml").write_text(MULTIRUN.format(root=root) + "    - trainer.num_threads=1\n")
    assert " Add seed=2: " in build_report(root).data["seed_advice"]
