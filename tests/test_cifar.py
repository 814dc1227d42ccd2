"""CIFAR-10: loading the real copy (opt-in for non-canonical copies), augmentation, presets."""

from __future__ import annotations

import json
import logging
import pickle
import warnings
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bnexp.config.schema import compose_config, validate
from bnexp.nets.datasets import CIFAR_FILES, Augmenter, load_cifar10, make_augmenter
from bnexp.errors import DataError

from conftest import FAST

PRESETS = ["baseline", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "baseline_x5", "baseline_sigmoid"]


@pytest.fixture(scope="module")
def cifar(data_root):
    return load_cifar10(data_root, download=False, verify_checksums=False)


@pytest.mark.slow  # md5 of the real 180 MB batch files (~2.5 s of CPU)
def test_checksum_refusal_explains_the_option(data_root):
    with pytest.raises(DataError) as err:
        load_cifar10(data_root, download=False, verify_checksums=True)
    msg = str(err.value)
    assert "data.verify_checksums=false" in msg and "md5" in msg and "cifar-10-batches-py" in msg


def test_non_canonical_copy_loads_with_one_warning(data_root, caplog, recwarn):
    with caplog.at_level(logging.WARNING, logger="bnexp"):
        d = load_cifar10(data_root, download=False, verify_checksums=False)
    said = [r.getMessage() for r in caplog.records if "verify_checksums=false" in r.getMessage()]
    assert len(said) == 1 and "WITHOUT checking" in said[0]  # once, in the log (terminal and train.log) ...
    assert not [w for w in recwarn if "verify_checksums" in str(w.message)]  # ... not again as a Python warning
    assert d.train_x.shape == (50000, 3, 32, 32) and d.test_x.shape == (10000, 3, 32, 32)
    assert d.train_x.dtype == torch.float32 and 0 <= float(d.train_x.min()) and float(d.train_x.max()) <= 255
    assert torch.bincount(d.train_y, minlength=10).tolist() == [5000] * 10
    assert torch.bincount(d.test_y, minlength=10).tolist() == [1000] * 10
    assert int(d.train_y[0]) == 6  # the first training image is a frog, as in the official set


@pytest.mark.slow  # md5 of the real 180 MB batch files (~2.5 s of CPU)
def test_checked_and_unchecked_copies_load_through_one_reader(cifar, data_root, monkeypatch):
    # Declared official (its own md5s in place of torchvision's list), the same copy loads through the
    # checked path without a warning and gives exactly the tensors of the unchecked path.
    import bnexp.nets.datasets as data
    from torchvision.datasets.utils import calculate_md5

    md5 = {n: calculate_md5(str(data_root / "cifar-10-batches-py" / n)) for n in CIFAR_FILES}
    monkeypatch.setattr(data, "_cifar_md5s", lambda: md5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        checked = load_cifar10(data_root, download=False, verify_checksums=True)
    for key in ("train_x", "train_y", "test_x", "test_y"):
        assert torch.equal(getattr(checked, key), getattr(cifar, key)), key


def _copy_cifar(data_root: Path, dest: Path) -> Path:
    folder = dest / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in CIFAR_FILES:
        (folder / name).symlink_to(data_root / "cifar-10-batches-py" / name)
    return folder


def test_truncated_batch_file_is_named(data_root, tmp_path):
    folder = _copy_cifar(data_root, tmp_path)
    (folder / "data_batch_3").unlink()
    src = data_root / "cifar-10-batches-py" / "data_batch_3"
    (folder / "data_batch_3").write_bytes(src.read_bytes()[:1_000_000])
    with pytest.raises(DataError, match="data_batch_3.*unreadable"):
        load_cifar10(tmp_path, download=False, verify_checksums=False)


def test_missing_batch_file_is_named(data_root, tmp_path):
    folder = _copy_cifar(data_root, tmp_path)
    (folder / "test_batch").unlink()
    with pytest.raises(DataError, match="missing: test_batch"):
        load_cifar10(tmp_path, download=False, verify_checksums=False)


def test_wrong_shape_batch_is_refused(data_root, tmp_path):
    folder = _copy_cifar(data_root, tmp_path)
    (folder / "data_batch_1").unlink()
    with open(folder / "data_batch_1", "wb") as f:
        pickle.dump({"data": [[0] * 3072] * 10, "labels": [0] * 10}, f)
    with pytest.raises(DataError, match="data_batch_1.*expected"):
        load_cifar10(tmp_path, download=False, verify_checksums=False)


def test_cli_refuses_non_canonical_copy_without_opt_in(run_bnexp, tmp_path):
    r = run_bnexp("train", *FAST, "data=cifar10", "model=cnn", "trainer.max_steps=2",
                  f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2
    assert "data.verify_checksums=false" in r.stderr and "Traceback" not in r.stderr


def _is_crop_or_flip(orig: torch.Tensor, aug: torch.Tensor, pad: int) -> bool:
    padded = torch.nn.functional.pad(orig, (pad, pad, pad, pad))
    h, w = orig.shape[1:]
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            window = padded[:, dy:dy + h, dx:dx + w]
            if torch.equal(window, aug) or torch.equal(window.flip(2), aug):
                return True
    return False


def test_augmentation_is_batched_crop_and_flip_label_preserving_and_seeded(cifar):
    x = cifar.train_x[:16]
    aug = Augmenter(pad=4, flip=True, seed=3)
    out = aug(x)
    assert out.shape == x.shape and out.dtype == x.dtype
    for i in range(16):  # every output is a 4-pixel-padded crop of ITS OWN image, maybe mirrored
        assert _is_crop_or_flip(x[i], out[i], 4)
    assert not torch.equal(out, x)
    again = Augmenter(pad=4, flip=True, seed=3)(x)
    assert torch.equal(out, again)  # seeded
    assert not torch.equal(out, Augmenter(pad=4, flip=True, seed=4)(x))
    light = Augmenter(pad=0, flip=True, seed=0)(x)
    for i in range(16):
        assert torch.equal(light[i], x[i]) or torch.equal(light[i], x[i].flip(2))
    # state round trip continues the same random sequence
    a = Augmenter(seed=1)
    a(x)
    state = a.state_dict()
    nxt = a(x)
    b = Augmenter(seed=99)
    b.load_state_dict(state)
    assert torch.equal(b(x), nxt)


def test_make_augmenter_modes():
    cfg = OmegaConf.create({"augment": "false"})
    assert make_augmenter(cfg, 0, torch.device("cpu")) is None
    assert make_augmenter(OmegaConf.create({"augment": "standard"}), 0, torch.device("cpu")).pad == 4
    assert make_augmenter(OmegaConf.create({"augment": "light"}), 0, torch.device("cpu")).pad == 0


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_composes_and_matches_its_definition(preset):
    cfg = compose_config([f"+experiment={preset}", "data.verify_checksums=false"])
    validate(cfg)
    base = compose_config(["+experiment=baseline"])
    assert cfg.experiment == preset and cfg.data.name == "cifar10" and cfg.model.name == "cnn"
    mult = {"bn_x5": 5, "bn_x30": 30, "bn_x5_sigmoid": 5, "baseline_x5": 5}.get(preset, 1)
    assert cfg.lr == pytest.approx(mult * base.lr)
    assert cfg.bn.enabled is preset.startswith("bn_")
    assert cfg.act.value == ("sigmoid" if "sigmoid" in preset else "relu")
    accelerated = preset in ("bn_x5", "bn_x30", "bn_x5_sigmoid")
    assert (cfg.model.dropout == 0.0) is accelerated
    assert cfg.optim.weight_decay == pytest.approx(base.optim.weight_decay / (5 if accelerated else 1))
    assert cfg.optim.decay_steps == round(base.optim.decay_steps / (6 if accelerated else 1))
    assert cfg.data.augment == "standard"  # crops and flips kept in every preset (docs/cifar/PLAN.md)
    gpu = compose_config([f"+experiment={preset}", "scale=gpu"])
    assert gpu.trainer.max_steps > cfg.trainer.max_steps and len(gpu.model.channels) >= len(cfg.model.channels)


# the preset network at its CPU scale once; the other presets (the same stages and layers, their own
# activation, BN, rate, dropout and schedule) with 4-8 channels: two test-set evaluations of the full
# network cost ~10 s of CPU each run
TINY = ("scale.channels=[4,8,8]", "scale.fc=16", "trainer.probe_size=100")


@pytest.mark.slow  # loads CIFAR-10 and trains in this process
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_runs_a_few_steps_on_real_cifar(preset, tmp_path, data_root):
    from bnexp.train.trainer import train

    cfg = compose_config([f"+experiment={preset}", "data.verify_checksums=false", f"data.root={data_root}",
                          *FAST, "trainer.max_steps=6", "trainer.eval_every=6", "trainer.hist_every=3",
                          "trainer.log_every=3", *(() if preset == "bn_baseline" else TINY)])
    validate(cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = train(cfg, tmp_path)
    assert s["status"] == "finished" and s["step"] == 6 and s["experiment"] == preset
    assert 0.0 <= s["final_test_accuracy"] <= 1.0
    shift = [json.loads(line) for line in (tmp_path / "shift.jsonl").read_text().splitlines()]
    assert len(shift[0]["layers"]) == len(cfg.model.channels) * cfg.model.convs_per_stage + 1


def test_a_preset_made_to_diverge_is_recorded(bnexp_train, tmp_path):
    _, s = bnexp_train(tmp_path / "div", "+experiment=baseline_x5", "data.verify_checksums=false", "lr=100",
                       "trainer.max_steps=200", "trainer.log_every=5", "trainer.eval_every=50", "trainer.hist_every=50")
    assert s["status"] == "diverged" and s["diverged_step"] <= 200
