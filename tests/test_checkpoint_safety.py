"""A checkpoint is read to the CPU with tensors and plain data only (bnexp.train.checkpoint).

* Loaded to the CPU, each part moving itself to its device: a run whose device is not the CPU
  resumes from its checkpoint's step (its generator states stay CPU ByteTensors, which
  ``Generator.set_state`` requires) and ends as the uninterrupted run.
* ``weights_only=True``: a checkpoint that carries a pickled callable is refused with one line naming
  the file and the flag that trusts it, before anything runs; what bnexp writes needs nothing more
  than tensors, and an earlier version's checkpoint (numpy's RNG state as an ndarray) still resumes.
* Resumed in the same arithmetic: a checkpoint records what its run computed in (fp32, tf32, bf16); a
  command that would compute in another (TF32 on one device and not on another) is refused as a run of a
  different config, before anything in the folder changes. summary.json says the precision truly.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch

from bnexp.config.schema import compose_config
from bnexp.errors import UntrustedCheckpoint
from bnexp.runfolders import rundir
from bnexp.train.checkpoint import load_checkpoint
from bnexp.train.trainer import Trainer, train

from conftest import SHORT_RUN, steps_of

BASE = [*SHORT_RUN, "seed=11"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_root):
    """A 20-step run (checkpoints at 10 and 20): its run folder, final state and its step-10 checkpoint."""
    run_dir = tmp_path_factory.mktemp("reference")
    at_10 = run_dir.parent / f"{run_dir.name}-step10.pt"
    real = rundir.save_checkpoint

    def save_and_keep(path, state):
        real(path, state)
        if state["step"] == 10:
            shutil.copyfile(path, at_10)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BNEXP_DATA_ROOT", str(data_root))
        mp.setattr(rundir, "save_checkpoint", save_and_keep)
        summary = train(compose_config(BASE), run_dir)
    assert summary["status"] == "finished" and at_10.is_file()
    return {"dir": run_dir, "at_10": at_10, "final": load_checkpoint(run_dir / "checkpoint.pt")}


def _resume_and_finish(trainer: Trainer) -> dict:
    assert trainer.try_resume() and trainer.step == 10
    return trainer.run()


def _same_weights(run_dir, reference) -> None:
    final = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    for k, v in reference["final"]["model"].items():
        assert torch.equal(final[k], v), k


@pytest.mark.slow  # the module's reference run, then 10 resumed steps
def test_a_run_whose_device_is_not_the_cpu_resumes_from_its_step(reference, tmp_path, data_root, monkeypatch):
    """The trainer's device stands for a GPU here ('meta': its tensors have no data): a checkpoint mapped
    onto it would carry no usable generator state and no weights. Loaded to the CPU, every part takes its
    values and the run continues from step 10, ending as the uninterrupted run."""
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copyfile(reference["at_10"], run_dir / "checkpoint.pt")
    trainer = Trainer(compose_config(BASE), run_dir)
    cpu, trainer.device = trainer.device, torch.device("meta")
    assert trainer.try_resume(), "the checkpoint was set aside: it was loaded onto the run's device"
    assert trainer.step == 10 and trainer.resumed_from == 10
    assert not list(run_dir.glob("checkpoint.unreadable-*"))
    assert trainer.sampler.generator.get_state().device.type == "cpu"
    trainer.device = cpu
    summary = trainer.run()
    assert summary["status"] == "finished" and summary["resumed_from_step"] == 10
    assert steps_of(run_dir / "metrics.jsonl") == [0, 10, 20]
    _same_weights(run_dir, reference)


@pytest.mark.slow  # the module's reference run (20 steps) comes first
def test_what_bnexp_writes_needs_nothing_beyond_tensors(reference):
    """Every checkpoint bnexp writes loads with weights_only=True and no extra globals (numpy's RNG state
    is a tensor); its generator states are CPU uint8 tensors."""
    for path in (reference["at_10"], reference["dir"] / "checkpoint.pt"):
        assert torch.serialization.get_unsafe_globals_in_checkpoint(path) == []
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert state["rng"]["torch"].dtype == torch.uint8 and state["sampler"]["generator"].dtype == torch.uint8
        assert isinstance(state["rng"]["numpy"][1], torch.Tensor)


class _Callable:
    """Unpickles by calling ``os.makedirs(path)``: what any pickled callable could do instead."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.makedirs, (self.path,)


def _checkpoint_with_a_callable(reference, path, marker) -> None:
    state = load_checkpoint(reference["at_10"])
    state["measurements"] = {**state["measurements"], "extra": _Callable(marker)}
    torch.save(state, path)


@pytest.mark.slow  # the module's reference run (20 steps) comes first
def test_a_checkpoint_with_a_pickled_callable_is_refused_and_nothing_runs(reference, tmp_path, bnexp_main):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    marker = tmp_path / "the-callable-ran"
    ckpt = run_dir / "checkpoint.pt"
    _checkpoint_with_a_callable(reference, ckpt, marker)
    before = ckpt.read_bytes()
    code, err, _ = bnexp_main("train", *BASE, f"hydra.run.dir={run_dir}")
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "error:" in lines[0], err
    assert str(ckpt) in lines[0] and "trainer.trust_checkpoint=true" in lines[0] and "os.makedirs" in lines[0]
    assert not marker.exists(), "the checkpoint's callable ran"
    assert ckpt.read_bytes() == before and sorted(p.name for p in run_dir.iterdir()) == ["checkpoint.pt"]


@pytest.mark.slow  # the module's reference run (20 steps) comes first
def test_trusting_a_checkpoint_is_explicit(reference, tmp_path):
    """Refused without trust (naming the file and the callable); with trust it is unpickled in full."""
    marker = tmp_path / "the-callable-ran"
    ckpt = tmp_path / "checkpoint.pt"
    _checkpoint_with_a_callable(reference, ckpt, marker)
    with pytest.raises(UntrustedCheckpoint, match=r"trainer\.trust_checkpoint=true") as exc:
        load_checkpoint(ckpt)
    assert exc.value.path == ckpt and exc.value.names == ["os.makedirs"]
    assert not marker.exists()
    assert load_checkpoint(ckpt, trust=True)["step"] == 10 and marker.is_dir()


@pytest.mark.slow  # the module's reference run, then 10 resumed steps
def test_an_earlier_versions_checkpoint_still_resumes_exactly(reference, tmp_path, data_root, monkeypatch):
    """Earlier versions saved numpy's RNG state as an ndarray: it loads without trust (numpy's array
    reconstruction is allowed, nothing else) and the run ends as the uninterrupted one."""
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    state = load_checkpoint(reference["at_10"])
    kind, keys, *rest = state["rng"]["numpy"]
    state["rng"]["numpy"] = (kind, keys.numpy().astype(np.uint32), *rest)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    torch.save(state, run_dir / "checkpoint.pt")
    assert "numpy.ndarray" in torch.serialization.get_unsafe_globals_in_checkpoint(run_dir / "checkpoint.pt")
    summary = _resume_and_finish(Trainer(compose_config(BASE), run_dir))
    assert summary["resumed_from_step"] == 10
    _same_weights(run_dir, reference)


@pytest.mark.slow  # the module's reference run (20 steps) comes first
@pytest.mark.parametrize("asked", ["fp32", "tf32"])
def test_a_checkpoint_computed_in_tf32_is_not_resumed_in_fp32(asked, reference, tmp_path, bnexp_main):
    """The checkpoint of a run that computed in TF32 (a GPU run, with either config: ``fp32`` recorded as
    such since TF32 is off there, so this file stands for a run that had TF32 on): this CPU computes in
    fp32 whatever ``trainer.precision`` says, so the command is refused as a different config and the
    folder stays as it was."""
    state = load_checkpoint(reference["at_10"])
    state["precision"] = "tf32"
    state["config"]["trainer"]["precision"] = asked
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ckpt = run_dir / "checkpoint.pt"
    torch.save(state, ckpt)
    before = ckpt.read_bytes()
    code, err, _ = bnexp_main("train", *BASE, f"trainer.precision={asked}", f"hydra.run.dir={run_dir}")
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "differs in: precision, tf32 there, fp32 here" in lines[0], err
    assert ckpt.read_bytes() == before and sorted(p.name for p in run_dir.iterdir()) == ["checkpoint.pt"]


@pytest.mark.slow  # the module's reference run (20 steps) comes first
def test_summary_and_checkpoint_say_what_the_run_computed_in(reference, tmp_path, data_root, monkeypatch):
    """A CPU run computes in fp32: its summary.json and checkpoint say so; tf32 asked for on the CPU falls
    back to fp32 with a warning and is recorded as fp32."""
    summary = json.loads((reference["dir"] / "summary.json").read_text())
    assert summary["precision"] == "fp32" and reference["final"]["precision"] == "fp32"
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    with pytest.warns(UserWarning, match="no native TF32"):
        trainer = Trainer(compose_config([*BASE, "trainer.precision=tf32"]), tmp_path / "run")
    assert trainer.amp_dtype is None and trainer._base_summary()["precision"] == "fp32"
    assert trainer.state_dict()["precision"] == "fp32"
