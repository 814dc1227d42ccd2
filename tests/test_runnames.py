"""Sweep run-folder names: the swept keys only."""

from __future__ import annotations

from omegaconf import OmegaConf

from bnexp.runfolders.runnames import safe_dirname, swept_keys, swept_name, sweep_subdir


def test_swept_keys_follow_hydra_sweep_grammar_and_last_override_wins():
    assert swept_keys(["bn='true','false'", "lr=0.6", "trainer.max_steps=3000"]) == {"bn"}
    assert swept_keys(["seed=range(0,3)", "+experiment=bn_x5,baseline", "act=choice(relu)"]) == \
        {"seed", "+experiment", "act"}
    # scripts append "$@" last: `lr=0.12,0.6 ... lr=0.12` runs one lr, so lr is not swept
    assert swept_keys(["lr=0.12,0.6", "seed=0,1", "lr=0.12"]) == {"seed"}
    assert swept_keys(["model.hidden=[100,100]"]) == set()  # a list value is not a sweep


def test_job_name_has_only_the_swept_keys_sorted():
    job = ["bn='false'", "trainer.max_steps=3000", "lr=0.6", "trainer.eval_every=250"]
    assert swept_name(job, {"bn", "lr"}) == "bn=false,lr=0.6"
    assert swept_name(job, {"bn"}) == "bn=false"
    assert swept_name(["+experiment=bn_x5", "seed=1"], {"+experiment", "seed"}) == "+experiment=bn_x5,seed=1"
    assert swept_name(job, set()) == ""


def test_sweep_subdir_reads_the_sweeps_multirun_yaml(tmp_path):
    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"task": ["bn='true','false'", "lr=0.6",
                                                                       "trainer.max_steps=3000"]}}}),
                   tmp_path / "multirun.yaml")
    names = [sweep_subdir(str(tmp_path), [f"bn='{b}'", "lr=0.6", "trainer.max_steps=3000"],
                          f"bn={b},lr=0.6,trainer.max_steps=3000") for b in ("true", "false")]
    assert names == ["bn=true", "bn=false"]
    # deterministic: the same sweep gives the same names again
    assert sweep_subdir(str(tmp_path), ["bn='true'", "lr=0.6", "trainer.max_steps=3000"], "x") == "bn=true"
    # no multirun.yaml, or nothing swept: Hydra's full override name, made portable
    assert sweep_subdir(str(tmp_path / "none"), ["lr=0.6"], "lr=0.6,data.root=/a/b") == "lr=0.6,data.root=-a-b"


def test_long_names_are_cut_with_a_hash():
    a = "+experiment=bn_baseline,bn='true'," + ",".join(f"monitor.option_{i}=value_{i}" for i in range(20))
    na, nb = safe_dirname(a), safe_dirname(a.replace("value_19", "value_X"))
    assert len(na) == len(nb) == 150 and na != nb and na == safe_dirname(a)
