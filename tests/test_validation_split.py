"""The validation split (``data.validation=N``, bnexp.nets.datasets.hold_out; docs/configuration.md): N training
images, one fixed seeded draw, are evaluated instead of the test set, which the run then never reads; the rest
train. Checked on synthetic tensors against the definition, on real MNIST against the raw files, and through a
real run's summary.json."""

from __future__ import annotations

import json

import pytest
import torch

from bnexp.errors import DataError
from bnexp.nets import datasets as D


def _toy(n=50) -> D.TensorData:
    """Image i is filled with the value i (so an image's identity is its value); labels i % 10."""
    x = torch.arange(n, dtype=torch.float32).view(n, 1, 1, 1).expand(n, 1, 2, 2).clone()
    return D.TensorData(x, torch.arange(n) % 10, -torch.ones(5, 1, 2, 2), torch.zeros(5, dtype=torch.long), 10, "toy")


def _ids(x: torch.Tensor) -> list[int]:
    return x[:, 0, 0, 0].long().tolist()


def test_hold_out_partitions_the_training_set_in_order_and_drops_the_test_set():
    d = D.hold_out(_toy(), 12)
    train, val = _ids(d.train_x), _ids(d.test_x)
    assert len(train) == 38 and len(val) == 12 and sorted(train + val) == list(range(50))
    assert train == sorted(train) and val == sorted(val)  # original order kept in both parts
    assert d.train_y.tolist() == [i % 10 for i in train] and d.test_y.tolist() == [i % 10 for i in val]
    assert d.eval_split == "validation" and -1 not in _ids(d.test_x)  # no test image left anywhere
    # the draw is the documented permutation, the same for every call (and so every run and seed)
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(D.VALIDATION_SPLIT_SEED))
    assert val == sorted(perm[:12].tolist()) and _ids(D.hold_out(_toy(), 12).test_x) == val
    same = D.hold_out(_toy(), 0)
    assert same.eval_split == "test" and torch.equal(same.train_x, _toy().train_x) and _ids(same.test_x) == [-1] * 5


@pytest.mark.parametrize("n", [50, 51, -1])
def test_a_split_that_leaves_no_training_image_is_one_message_naming_the_key(n):
    with pytest.raises(DataError, match=rf"data.validation={n}: .*between 1 and 49 of toy's 50 training images"):
        D.hold_out(_toy(), n)


@pytest.mark.slow  # reads real MNIST three times: over the fast tier's 2.5 s of CPU
def test_real_mnist_validation_images_are_training_images_and_standardize_uses_the_kept_ones(data_root):
    from omegaconf import OmegaConf
    cfg = OmegaConf.create({"name": "mnist", "root": str(data_root), "download": False, "verify_checksums": True,
                            "scaling": "unit", "validation": 10000})
    full = D.load_data(OmegaConf.merge(cfg, {"validation": 0}), torch.device("cpu"))
    d = D.load_data(cfg, torch.device("cpu"))
    assert (len(d.train_y), len(d.test_y), d.eval_split, full.eval_split) == (50000, 10000, "validation", "test")
    perm = torch.randperm(60000, generator=torch.Generator().manual_seed(D.VALIDATION_SPLIT_SEED))
    val = perm[:10000].sort().values
    assert torch.equal(d.test_x, full.train_x[val]) and torch.equal(d.test_y, full.train_y[val])
    keep = torch.ones(60000, dtype=torch.bool)
    keep[val] = False
    assert torch.equal(d.train_x, full.train_x[keep])
    std = D.load_data(OmegaConf.merge(cfg, {"scaling": "standardize"}), torch.device("cpu"))
    kept = full.train_x[keep]
    mean, sd = kept.mean(dim=(0, 2, 3), keepdim=True), kept.std(dim=(0, 2, 3), keepdim=True)
    assert torch.allclose(std.test_x, (full.train_x[val] - mean) / sd, atol=1e-5)


@pytest.mark.slow  # a real (20-step) run
def test_a_run_with_a_validation_split_says_so_in_its_summary(bnexp_main, tmp_path):
    code, err, _ = bnexp_main("train", "data.validation=5000", "trainer.max_steps=20", "trainer.eval_every=10",
                              "trainer.hist_every=10", "trainer.progress=false", f"hydra.run.dir={tmp_path / 'r'}")
    assert code == 0, err
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["evaluated_on"] == "validation"
    assert "5000 validation images held out" in (tmp_path / "r" / "train.log").read_text()


def test_a_negative_split_is_refused_before_the_run(bnexp_main):
    code, err, _ = bnexp_main("train", "data.validation=-5")
    assert code == 2 and "data.validation" in err and len(err.strip().splitlines()) == 1
