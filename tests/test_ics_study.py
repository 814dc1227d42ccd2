"""scripts/ics_study.sh's design (bnexp/designs/ics.py, orchestrate.ics_parts; docs/ics/PLAN.md): each MNIST
network at the rate chosen on the MNIST reproduction's tuning seeds, 5 MNIST and 3 CIFAR-10 evaluation seeds,
a clear error when the tuning grids are incomplete, the lr= override, and the design record the report reads.
The runs are faked (tests/test_orchestrate.py's ``script`` fixture)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

from bnexp.designs import ics, mnist
from bnexp.report.ics_verdicts import main_target

from conftest import shell_words

sys.path.insert(0, str(Path(__file__).parent))
from test_orchestrate import script, trains  # noqa: E402,F401  (the fixture)
from test_report import make_run  # noqa: E402

# steps to (90%, 95%) on every tuning seed: BN lr 4 and no BN lr 2 are the fastest to 95%; both at the top of
# their grids, so the grid-edge rule adds 8 and 4 (slower), and 0.5 below (no rate reaches 97%: every rate failed,
# the tie went to the smallest)
STEPS = {(True, 1.0): (500, 1500), (True, 4.0): (250, 1000), (False, 1.0): (2000, 4000), (False, 2.0): (1500, 3000),
         (True, 8.0): (500, 1500), (True, 0.5): (1000, 3000), (False, 4.0): (2000, 4000), (False, 0.5): (3000, 5000)}
ADDED = {True: (0.5, 8.0), False: (0.5, 4.0)}
ENV = dict(MNIST_DIR="im", CIFAR_DIR="ic", NOISE_SCALES="1,3", VERIFY_CHECKSUMS="false")


@pytest.fixture
def tuning(tmp_path, monkeypatch) -> Path:
    """The MNIST reproduction's stage 1 of the normal-init grids (BN lr 1, 4; no BN lr 1, 2) on seeds 100-102."""
    sweep = tmp_path / "tuning"
    blocks = {k: mnist.replace(b, rates=(1.0, 4.0) if b.bn else (1.0, 2.0)) for k, b in ics.TUNED_BLOCKS.items()}
    monkeypatch.setattr(ics, "TUNED_BLOCKS", blocks)
    for b in blocks.values():
        for lr in b.rates + ADDED[b.bn]:
            for seed in mnist.SEEDS:
                s90, s95 = STEPS[b.bn, lr]
                d = make_run(sweep, mnist.run_name(b, lr, seed), bn=b.bn, lr=lr, seed=seed,
                             knots=[(0, 0.1), (s90, 0.9), (s95, 0.95)], max_steps=6000, every=250,
                             targets=[0.9, 0.95, 0.97])
                cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
                cfg["model"]["init"] = b.init
                (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return sweep


def test_the_target_is_the_reports_main_target_on_mnist():
    assert main_target([0.9, 0.95, 0.97, 0.98]) == ics.TARGET
    assert ics.MNIST_SEEDS == (0, 1, 2, 3, 4) and len(ics.CIFAR_SEEDS) >= 3
    assert not set(ics.MNIST_SEEDS) & set(mnist.SEEDS)  # evaluation seeds never tuned


def test_held_out_rates_are_the_fastest_to_95_percent_on_the_tuning_seeds(tuning):
    rates, lines = ics.held_out_rates(tuning)
    assert rates == {"BN": 4.0, "no BN": 2.0, "noisy BN": 4.0}
    assert lines[0].startswith("  BN: lr 4, chosen for 95% on the tuning seeds 100, 101, 102")
    # the grid-edge rule's added rates count as part of the grid: one missing, no choice
    (tuning / mnist.run_name(ics.TUNED_BLOCKS["BN"], 8.0, 100) / "summary.json").unlink()
    with pytest.raises(ValueError, match=r"BN, normal init: the grid-edge rule's added rate\(s\) lr 8 not complete"):
        ics.held_out_rates(tuning)


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
def test_the_mnist_part_runs_each_network_at_its_chosen_rate_on_seeds_0_to_4(script, tuning, tmp_path):
    code, out, err, ran = script("ics", "trainer.max_steps=20", DRY_RUN="1", MNIST_TUNING_DIR=str(tuning), **ENV)
    assert code == 0 and ran == [], err
    printed = [shell_words(line[2:]) for line in out.splitlines() if line.startswith("$ ")]
    mnist_cmds, cifar_cmds = printed[:4], printed[4:]
    picked = [([a for a in c if a.startswith("bn=")][-1], [a for a in c if a.startswith("lr=")][-1],
               [a for a in c if a.startswith("seed=")][-1]) for c in mnist_cmds]
    # the fourth block: BN at no BN's rate, for the equal-rate matching (docs/ics/PLAN.md, amendment)
    assert picked == [("bn=true", "lr=4", "seed=0,1,2,3,4"), ("bn=false", "lr=2", "seed=0,1,2,3,4"),
                      ("bn=noisy", "lr=4", "seed=0,1,2,3,4"), ("bn=true", "lr=2", "seed=0,1,2,3,4")]
    assert "bn.noise_scale=1,3" in mnist_cmds[2] and any(a.startswith("hydra.sweep.subdir=") for a in mnist_cmds[0])
    # CIFAR-10: BN and no BN, noisy BN, and BN and no BN at a constant rate in folders of their own
    assert len(cifar_cmds) == 3 and all("seed=0,1,2" in c for c in cifar_cmds)
    assert "optim.schedule=constant" in cifar_cmds[1] and not any("optim.schedule" in a for a in cifar_cmds[0])
    assert any("schedule=constant," in a for a in cifar_cmds[1] if a.startswith("hydra.sweep.subdir="))
    assert "rates: each network at its own rate, chosen on held-out tuning seeds" in out
    assert "ICS study, MNIST part, noisy BN: 10 runs of 20 steps, 10 to run" in out
    # the run: exactly these commands, and the design record the report reads (report.json's seeds)
    code, out, err, ran = script("ics", "trainer.max_steps=20", MNIST_TUNING_DIR=str(tuning), **ENV)
    assert code == 0 and trains(ran) == printed, err
    design = json.loads((tmp_path / "im" / "ics_design.json").read_text())
    assert design["rates"] == {"BN": 4.0, "no BN": 2.0, "noisy BN": 4.0} and design["own_rates"] is True
    assert design["tuning_seeds"] == [100, 101, 102] and design["evaluation_seeds"] == [0, 1, 2, 3, 4]
    assert design["equal_rate_lr"] == 2.0
    cifar = json.loads((tmp_path / "ic" / "ics_design.json").read_text())
    assert cifar["tuning_seeds"] == [] and cifar["evaluation_seeds"] == [0, 1, 2] and cifar["own_rates"] is False


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
def test_an_incomplete_tuning_folder_is_one_error_line_and_dry_run_still_plans(script, tuning, tmp_path):
    (tuning / mnist.run_name(ics.TUNED_BLOCKS["no BN"], 2.0, 101) / "summary.json").unlink()
    code, out, err, ran = script("ics", MNIST_TUNING_DIR=str(tuning), **ENV)
    assert code == 2 and ran == [] and err.count("error:") == 1 and err.startswith("error: MNIST_TUNING_DIR:")
    assert "no BN, normal init: 1 tuning run(s) not complete" in err and "lr=RATE" in err
    code, out, err, ran = script("ics", "trainer.max_steps=20", MNIST_TUNING_DIR=str(tuning), DRY_RUN="1", **ENV)
    assert code == 0 and "the MNIST part's rates come from the MNIST reproduction's tuning grids: MNIST_TUNING_DIR" in out
    assert "cannot" not in out.split("commands")[0]
    assert "ICS study, MNIST part: estimated wall time:" in out and "(20 runs;" in out  # 5 + 5 + 2 x 5
    code, out, err, ran = script("ics", MNIST_TUNING_DIR=str(tmp_path / "nowhere"), **ENV)
    assert code == 2 and "MNIST_TUNING_DIR" in err


def test_an_lr_override_replaces_the_held_out_choice(script, tmp_path):
    code, out, err, ran = script("ics", "trainer.max_steps=20", "lr=0.12", MNIST_TUNING_DIR="nowhere", **ENV)
    assert code == 0, err
    mnist_cmds = [c for c in trains(ran) if "'hydra.sweep.dir='\"'\"'im'\"'\"''" in shlex.join(c)]
    assert len(mnist_cmds) == 3 and all(c[-1] == "lr=0.12" for c in mnist_cmds)
    design = json.loads((tmp_path / "im" / "ics_design.json").read_text())
    assert design["own_rates"] is False and design["tuning_seeds"] == [] and design["rates"] == {}
