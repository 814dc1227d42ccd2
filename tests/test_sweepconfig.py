"""A refused sweep leaves an existing sweep folder's multirun.yaml as it was, and makes no new sweep
folder (bnexp.runfolders.sweepconfig); a sweep whose jobs ran (and failed) records its call as Hydra does."""

from __future__ import annotations

import pytest

from bnexp.runfolders import sweepconfig

OLD = b"# the call that made this sweep\nhydra:\n  overrides:\n    task:\n    - optim.lr=0.1,0.2\n"


@pytest.mark.parametrize("refused", [
    ["trainer.batch_size=1,abc"],  # a sweep value Hydra cannot compose (after it saved multirun.yaml)
    ["hydra/launcher=stacked", "hydra.launcher.max_stack=0", "optim.lr=0.1,0.2"],  # refused by the launcher
])
def test_a_refused_sweep_leaves_the_existing_multirun_yaml(bnexp_main, tmp_path, refused):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_bytes(OLD)
    code, err, _ = bnexp_main("train", "-m", *refused, f"hydra.sweep.dir={sweep}")
    assert code == 2 and err.count("bnexp: error:") == 1 and "Traceback" not in err
    assert (sweep / "multirun.yaml").read_bytes() == OLD
    assert sorted(p.name for p in sweep.iterdir()) == ["multirun.yaml"]


def test_a_refused_new_sweep_leaves_no_folder(bnexp_main, tmp_path):
    sweep = tmp_path / "new"
    code, err, _ = bnexp_main("train", "-m", "trainer.batch_size=1,abc", f"hydra.sweep.dir={sweep}")
    assert code == 2 and "trainer.batch_size" in err
    assert not sweep.exists()


def test_a_sweep_whose_job_ran_keeps_hydras_multirun_yaml(bnexp_main, tmp_path):
    """A job refused inside a sweep is a failed run, not a refused sweep: multirun.yaml names this call."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_bytes(OLD)
    code, err, _ = bnexp_main("train", "-m", "trainer.batch_size=0", f"hydra.sweep.dir={sweep}")
    assert code == 1 and "trainer.batch_size=0" in err
    assert "trainer.batch_size=0" in (sweep / "multirun.yaml").read_text()


def test_restore_puts_back_only_what_was_noted(tmp_path):
    sweep = tmp_path / "s"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_bytes(OLD)
    sweepconfig.remember(sweep)
    (sweep / "multirun.yaml").write_text("new: true\n")
    sweepconfig.restore_refused_sweep()
    assert (sweep / "multirun.yaml").read_bytes() == OLD
    (sweep / "multirun.yaml").write_text("new: true\n")
    sweepconfig.restore_refused_sweep()  # noted once, restored once
    assert (sweep / "multirun.yaml").read_text() == "new: true\n"
    sweepconfig.remember(sweep)
    sweepconfig.forget()  # a job started
    (sweep / "multirun.yaml").write_text("newer: true\n")
    sweepconfig.restore_refused_sweep()
    assert (sweep / "multirun.yaml").read_text() == "newer: true\n"
    # a sweep folder Hydra made that holds more than multirun.yaml stays, without that file
    other = tmp_path / "other"
    sweepconfig.remember(other)
    other.mkdir()
    (other / "multirun.yaml").write_text("x: 1\n")
    (other / "kept.txt").write_text("")
    sweepconfig.restore_refused_sweep()
    assert sorted(p.name for p in other.iterdir()) == ["kept.txt"]
