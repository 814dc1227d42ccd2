"""The command that resumes a sweep (``bnexp.runfolders.resumecmd.sweep_resume_command``), printed by Ctrl-C or
SIGTERM and by ``bnexp report`` on an unfinished sweep: every override as the user gave it, interpolations
unresolved, so that each job of the re-run finds its own folder (docs/reliability.md, "No run left stuck")."""

from __future__ import annotations

import shlex

from bnexp.runfolders.resumecmd import sweep_resume_command

# multirun.yaml as Hydra writes it for a script's block (scripts/*.sh name each job's folder by interpolations of
# its own config): the overrides verbatim, beside the sweep's config, whose seed and lr are the defaults
MULTIRUN = """hydra:
  overrides:
    hydra:
    - hydra.sweep.dir={root}
    - hydra.sweep.subdir='bn=${{hydra:runtime.choices.bn}},lr=${{lr}},seed=${{seed}}'
    - hydra/launcher=stacked
    - hydra.mode=MULTIRUN
    task:
    - seed=0,1
    - lr=0.5
    - trainer.max_steps=${{oc.env:STEPS,20}}
lr: 0.1
seed: 0
trainer:
  max_steps: 20
"""


def test_the_sweeps_resume_command_keeps_the_per_job_subdir_unresolved(tmp_path):
    """The run seed=1 stopped: its command names no other job's folder (it used to carry
    hydra.sweep.subdir='...seed=0', multirun.yaml's own seed, for every job), and no interpolation bnexp cannot
    resolve outside a job (``${hydra:...}``) makes it give up on the sweep's command."""
    root = tmp_path / "sweep"
    run = root / "bn=true,lr=0.5,seed=1"
    run.mkdir(parents=True)
    (root / "multirun.yaml").write_text(MULTIRUN.format(root=root))
    cmd = sweep_resume_command(run)
    assert cmd is not None
    args = shlex.split(cmd)
    assert args[:3] == ["bnexp", "train", "-m"]
    assert args[3:] == ["seed=0,1", "lr=0.5", "trainer.max_steps=${oc.env:STEPS,20}",
                        "hydra.sweep.subdir='bn=${hydra:runtime.choices.bn},lr=${lr},seed=${seed}'",
                        "hydra/launcher=stacked", f"hydra.sweep.dir={root}"]


def test_a_data_parallel_run_is_resumed_with_its_number_of_replicas(tmp_path):
    """A checkpoint of N replicas resumes only with N: the command a torchrun run prints starts N replicas through
    bnexp's torchrun wrapper (the launch command of bnexp's messages), not a one-process ``bnexp train``."""
    from bnexp.runfolders.resumecmd import resume_command
    from bnexp.train.torchrun import launch

    run = tmp_path / "run"
    assert resume_command(run, ["lr=0.1"]) == f"bnexp train lr=0.1 hydra.run.dir={run}"
    cmd = resume_command(run, ["lr=0.1"], replicas=2)
    assert cmd == f"{launch(2).removesuffix(' ...')} lr=0.1 hydra.run.dir={run}"
    assert cmd.startswith("python -m bnexp.train.torchrun --standalone --nproc-per-node=2 -m bnexp train ")
