"""Evidence rules: warnings for runs that record too little, and (bnexp report) verdict thresholds."""

from __future__ import annotations

import pytest

from bnexp.config import compose_config, record_count, sparse_record_warnings, validate
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


def test_train_warns_at_start(run_bnexp, tmp_path):
    r = run_bnexp("train", "trainer.progress=false", "trainer.num_threads=1", "trainer.max_steps=20",
                  "trainer.eval_every=5", "trainer.hist_every=20", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "trainer.hist_every=20" in out and "fewer than 5" in out
    assert "trainer.eval_every" not in out  # 0, 5, 10, 15, 20: 5 records, enough


@pytest.mark.parametrize("key,value", [("monitor.bn_stats", "running"), ("bn.noise_scale", -1.0),
                                       ("monitor.landscape_rel_step_sizes", "[]")])
def test_new_keys_are_validated(key, value):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate(compose_config([f"{key}={value}"]))
