"""A run folder holds one configuration (docs/reliability.md): a folder whose run is finished or
resumable refuses a command with a different result-changing value, naming the keys and the two
ways out; the result-neutral keys (one list, ``bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS``) never block.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bnexp import cli
from bnexp.runfolders import neutral_keys, rundir
from bnexp.config.oneconfig import changed_keys
from bnexp.config.schema import compose_config, resolved
from bnexp.errors import UserError
from bnexp.runfolders.rundir import read_jsonl

from conftest import FAST

NEUTRAL_CHANGES = ["trainer.ckpt_every=7", "monitor.histograms=false", "trainer.progress=true", "trainer.num_threads=2",
                   "trainer.device=cpu", "data.root=/elsewhere", "data.verify_checksums=false",
                   "trainer.save_checkpoint=false"]


def _folder(tmp_path: Path, status: str, checkpoint: bool, *overrides: str) -> Path:
    """A run folder as the trainer leaves it: config.yaml (resolved), summary.json, maybe a checkpoint."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(resolved(compose_config(list(overrides)))))
    rundir.write_json(run_dir / "summary.json", {"status": status})
    if checkpoint:
        (run_dir / "checkpoint.pt").write_bytes(b"a checkpoint")
    return run_dir


def test_changed_keys_ignores_the_result_neutral_keys():
    old = resolved(compose_config(["trainer.max_steps=100"]))
    assert changed_keys(old, resolved(compose_config(["trainer.max_steps=100", *NEUTRAL_CHANGES]))) == []
    assert changed_keys(old, resolved(compose_config(["trainer.max_steps=200", "lr=0.5"]))) == [
        ("lr", 0.12, 0.5), ("trainer.max_steps", 100, 200)]
    # the old spelling of data.augment's default, and a key added to bnexp after the run was made
    old["data"]["augment"] = "False"
    del old["monitor"]["landscape_rel_step_sizes"]
    assert changed_keys(old, resolved(compose_config(["trainer.max_steps=100"]))) == []
    assert all(k in neutral_keys.RESULT_NEUTRAL_KEYS
               for k in ("trainer.ckpt_every", "monitor.histograms", "trainer.resume"))


@pytest.mark.parametrize("status,checkpoint,what", [("finished", False, "a finished"), ("diverged", True, "a finished"),
                                                    ("interrupted", True, "an unfinished (resumable)")])
def test_a_complete_or_resumable_folder_refuses_another_config(tmp_path, status, checkpoint, what):
    run_dir = _folder(tmp_path, status, checkpoint, "trainer.max_steps=1500")
    cli._refuse_other_config(compose_config(["trainer.max_steps=1500", *NEUTRAL_CHANGES]), run_dir)  # neutral: fine
    with pytest.raises(UserError) as e:
        cli._refuse_other_config(compose_config(["trainer.max_steps=2400"]), run_dir)
    msg = str(e.value)
    assert f"{run_dir} holds {what} run of another configuration" in msg
    assert "trainer.max_steps: 1500 there, 2400 now" in msg
    assert "new folder" in msg and "trainer.resume=false" in msg


def test_a_failed_folder_without_checkpoint_starts_over_with_any_config(tmp_path):
    run_dir = _folder(tmp_path, "failed", False, "trainer.max_steps=1500")
    cli._refuse_other_config(compose_config(["trainer.max_steps=2400"]), run_dir)


def test_result_neutral_keys_do_not_name_run_folders():
    from hydra import compose, initialize_config_dir

    from bnexp.config.schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    excluded = list(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert excluded == [k for k in neutral_keys.RESULT_NEUTRAL_KEYS if not k.startswith("hydra.")]


def test_rerunning_a_finished_folder(run_bnexp, tmp_path):
    run_dir = tmp_path / "run"
    short = [*FAST, "trainer.eval_every=10", "trainer.hist_every=10"]
    r = run_bnexp("train", *short, "trainer.max_steps=20", f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    done = (run_dir / "summary.json").read_bytes()

    # another result-changing value: refused, naming the keys and the two ways out; nothing changes
    r = run_bnexp("train", *short, "trainer.max_steps=30", "lr=0.5", f"hydra.run.dir={run_dir}")
    err = " ".join(r.stderr.split())
    assert r.returncode == 2, r.stderr
    assert "trainer.max_steps: 20 there, 30 now" in err and "lr: 0.12 there, 0.5 now" in err
    assert "new folder" in err and "trainer.resume=false" in err and "Traceback" not in err
    assert err.count("bnexp: error:") == 1 and "skipped" not in r.stdout + r.stderr
    assert (run_dir / "summary.json").read_bytes() == done

    # result-neutral changes: the same run, skipped
    r = run_bnexp("train", *short, "trainer.max_steps=20", "trainer.ckpt_every=7", "monitor.histograms=false",
                  f"hydra.run.dir={run_dir}")
    assert r.returncode == 0 and "skipped" in r.stdout + r.stderr, r.stderr
    assert (run_dir / "summary.json").read_bytes() == done

    # trainer.resume=false: the folder starts over with the new config
    r = run_bnexp("train", *short, "trainer.max_steps=30", "trainer.resume=false", f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "finished" and s["step"] == 30 and s["max_steps"] == 30
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [0, 10, 20, 30]
