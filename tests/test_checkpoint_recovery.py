"""What the trainer does with the checkpoint.pt it finds, and when it cannot write one.

Class 1 -- anything that is not a readable checkpoint of this run (truncated, not a checkpoint,
keys missing, a network of other layers or shapes, another optimizer, a value of the wrong kind)
is set aside (kept under a new name), with one warning saying so, and the run starts over: it ends
exactly as a run that never saw the file, with no step recorded twice. A checkpoint of a
*different config* is refused (CheckpointMismatch) and left where it is.

Class 2 -- a checkpoint that cannot be written says truthfully whether an earlier one remains.
"""

from __future__ import annotations

import errno
import json
import logging

import pytest
import torch

from bnexp.runfolders import rundir
from bnexp.config.schema import compose_config
from bnexp.errors import CheckpointMismatch, UserError
from bnexp.train.trainer import train

from conftest import SHORT_RUN, before_call, steps_of, train_in_process

BASE = [*SHORT_RUN, "seed=5"]


def _cfg(*extra):
    return compose_config(BASE + list(extra))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_root):
    """A run that never saw a bad checkpoint: its final state and records."""
    run_dir = tmp_path_factory.mktemp("reference")
    summary = train_in_process(run_dir, data_root, BASE)
    assert summary["status"] == "finished"
    state = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    return {"dir": run_dir, "state": state, "metrics": (run_dir / "metrics.jsonl").read_text()}


def _damage(state: dict, how: str):
    """A copy of a real checkpoint state made unusable in one way."""
    state = {k: v for k, v in state.items()}
    if how == "not_a_dict":
        return [1, 2, 3]
    if how == "missing_key":
        del state["optimizer"]
        return state
    model = dict(state["model"])
    if how == "renamed_layer":
        k = next(k for k in model if k.endswith("affine.weight"))
        model[k.replace("affine", "linear")] = model.pop(k)
    elif how == "other_shape":
        k = next(k for k in model if k.endswith("affine.weight"))
        model[k] = torch.zeros(model[k].shape[0] + 1, model[k].shape[1])
    elif how == "other_optimizer":
        opt = dict(state["optimizer"])
        opt["param_groups"] = [dict(g, params=g["params"][:-1]) for g in opt["param_groups"]]
        state["optimizer"] = opt
    elif how == "wrong_kind_late":  # passes every check, fails half-way through loading
        state["sampler"] = {"epoch": 0}
    state["model"] = model
    return state


DAMAGE = ["truncated", "not_a_dict", "missing_key", "renamed_layer", "other_shape", "other_optimizer",
          "wrong_kind_late"]


@pytest.mark.slow  # each trains 20 steps in this process, after the module's reference run (~2.5 s of CPU)
@pytest.mark.parametrize("how", DAMAGE)
def test_unusable_checkpoint_is_set_aside_and_the_run_starts_over(how, reference, tmp_path, caplog, data_root,
                                                                  monkeypatch):
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ckpt = run_dir / "checkpoint.pt"
    if how == "truncated":
        data = (reference["dir"] / "checkpoint.pt").read_bytes()
        ckpt.write_bytes(data[: len(data) // 2])
    else:
        mid = dict(reference["state"], step=10)
        torch.save(_damage(mid, how), ckpt)
    # an earlier attempt's records, which must not survive into the new run
    (run_dir / "metrics.jsonl").write_text(reference["metrics"])
    original = ckpt.read_bytes()
    with caplog.at_level(logging.WARNING, logger="bnexp"):
        summary = train(_cfg(), run_dir)
    assert summary["status"] == "finished" and summary["resumed_from_step"] is None
    kept = list(run_dir.glob("checkpoint.unreadable-*.pt"))
    assert len(kept) == 1 and kept[0].read_bytes() == original  # set aside, byte for byte
    warnings = [r.getMessage() for r in caplog.records if "not a readable checkpoint of this run" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    # the run is the one that never saw the file: same records, same final weights
    assert (run_dir / "metrics.jsonl").read_text().count('"step": 10') == 1
    assert steps_of(run_dir / "metrics.jsonl") == [0, 10, 20] and steps_of(run_dir / "shift.jsonl") == [0, 10, 20]
    final = torch.load(ckpt, map_location="cpu", weights_only=False)["model"]
    for k, v in reference["state"]["model"].items():
        assert torch.equal(final[k], v), k


@pytest.mark.slow  # the module's reference run, then a resume
def test_checkpoint_of_another_config_is_refused_and_left_alone(reference, tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ckpt = run_dir / "checkpoint.pt"
    ckpt.write_bytes((reference["dir"] / "checkpoint.pt").read_bytes())
    with pytest.raises(CheckpointMismatch, match=r"differs in: lr\).*trainer.resume=false"):
        train(_cfg("lr=0.5"), run_dir)
    assert ckpt.read_bytes() == (reference["dir"] / "checkpoint.pt").read_bytes()
    assert not list(run_dir.glob("checkpoint.unreadable-*"))
    # a key that cannot change results does not block the resume
    assert train(_cfg("data.verify_checksums=false"), run_dir)["resumed_from_step"] == 20


@pytest.mark.parametrize("fail_at", [1, 2])
def test_a_checkpoint_that_cannot_be_written_says_whether_one_remains(fail_at, tmp_path, data_root, monkeypatch):
    """A full disk at the first checkpoint write: no earlier checkpoint to claim; at the second: the
    first is intact. Either way the run is recorded failed, with the message."""
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))

    def full_disk():
        raise OSError(errno.ENOSPC, "No space left on device")

    before_call(monkeypatch, rundir, "save_checkpoint", full_disk, fail_at)
    run_dir = tmp_path / "run"
    with pytest.raises(UserError) as exc:
        train(_cfg("trainer.ckpt_every=5"), run_dir)
    msg = str(exc.value)
    assert "No space left on device" in msg
    if fail_at == 1:
        assert "intact" not in msg and "no checkpoint of this run exists yet" in msg
        assert not (run_dir / "checkpoint.pt").exists()
    else:
        assert "the previous checkpoint is intact" in msg
        assert torch.load(run_dir / "checkpoint.pt", weights_only=False)["step"] == 5
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == msg


@pytest.mark.slow  # the module's reference run, then two resumes
@pytest.mark.parametrize("earlier_wall", [None, 1500.0])
def test_a_resumed_runs_wall_time_covers_its_train_time(reference, tmp_path, data_root, monkeypatch, earlier_wall):
    """train_time_s sums the step loop over every session (the checkpoint keeps it); wall_time_s does too, so a
    resumed run never reports more training than wall time: an earlier session of 1,000 s of training (and
    1,500 s of wall time, or unknown in a checkpoint written before wall time was kept) is in both."""
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    state = {k: v for k, v in reference["state"].items() if k != "wall_time"}
    state["train_time"] = 1000.0
    if earlier_wall is not None:
        state["wall_time"] = earlier_wall
    torch.save(state, run_dir / "checkpoint.pt")
    summary = train(_cfg(), run_dir)
    assert summary["resumed_from_step"] == 20
    assert summary["train_time_s"] >= 1000.0 and summary["wall_time_s"] >= summary["train_time_s"]
    assert summary["wall_time_s"] >= (earlier_wall or 1000.0)
    saved = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert saved["wall_time"] >= saved["train_time"] >= 1000.0
