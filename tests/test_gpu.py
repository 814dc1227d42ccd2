"""The GPU path (docs/stacked.md, "GPU"): skipped without a CUDA device; scripts/gpu_check.sh runs this tier.

With CUDA the datasets live on the device and mini-batches are drawn there, and the step loop makes no host
synchronisation between evaluations and records: the steps below run under
``torch.cuda.set_sync_debug_mode("error")``, which raises on any synchronizing CUDA call.
"""

from __future__ import annotations

import pytest
import torch

from bnexp.config.schema import compose_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

# 100 steps per epoch (batch 600), so the loop below crosses an epoch boundary (a new permutation)
GPU_RUN = ["trainer.progress=false", "trainer.device=cuda", "trainer.batch_size=600", "trainer.max_steps=1000",
           "trainer.eval_every=1000", "trainer.hist_every=1000", "trainer.log_every=1000", "trainer.ckpt_every=1000"]


@pytest.fixture
def no_sync():
    """Any synchronizing CUDA call in the body raises RuntimeError."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def _trainer(tmp_path, data_root, monkeypatch, overrides):
    from bnexp.train.trainer import Trainer

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    return Trainer(compose_config(GPU_RUN + overrides), tmp_path)


def test_auto_device_is_cuda():
    from bnexp.train.runtime import resolve_device

    assert resolve_device("auto").type == "cuda"


@pytest.mark.parametrize("overrides", [[], ["bn=noisy", "model.dropout=0.2"], ["+experiment=bn_baseline"]])
def test_trainer_steps_make_no_host_sync(tmp_path, data_root, monkeypatch, overrides):
    """The trainer's own step (mini-batch drawn on the device, augmentation, forward, loss, backward, SGD,
    the train-loss observer) for 150 steps, across an epoch boundary, without one host synchronisation."""
    from bnexp.train.measurements import Schedule

    t = _trainer(tmp_path, data_root, monkeypatch, overrides)
    assert t.data.train_x.is_cuda and t.sampler.perm.is_cuda
    schedule = Schedule(t.measurements, t.max_steps)
    schedule.reset(1)
    ctx = t._context()
    x, y, _ = t._next_batch()
    t._update(x, y)  # the first step initializes cuBLAS/cuDNN (which may synchronize)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(2, 152):
            ctx.x, ctx.y, ctx.epoch = t._next_batch()
            ctx.loss, ctx.logits, ctx.labels = t._update(ctx.x, ctx.y)
            ctx.step = step
            assert schedule.after_update(ctx) is None
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert t.sampler.epoch >= 1
    assert torch.isfinite(ctx.loss).item()


def test_stacked_steps_make_no_host_sync(tmp_path, data_root, monkeypatch):
    """A stack of 4 MLP runs (dropout masks from each run's own CUDA generator) steps without host syncs."""
    import dataclasses

    from bnexp.nets.data import load_data
    from bnexp.train.stacked import MemberTrainer
    from bnexp.train.stacked_net import StackedNet

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    cfgs = [compose_config(GPU_RUN + ["model.dropout=0.1", f"seed={s}", f"lr={0.1 * (s + 1)}"]) for s in range(4)]
    data = load_data(cfgs[0].data, torch.device("cuda"))
    members = [MemberTrainer(c, tmp_path / str(i), dataclasses.replace(data)) for i, c in enumerate(cfgs)]
    for m in members:
        m.keep_rng()
    net = StackedNet([m.model for m in members], [m.optimizer for m in members],
                     lambda i: members[i].own_rng(full=False))
    lr = torch.tensor([0.1, 0.2, 0.3, 0.4], device="cuda")

    def step():
        xs, ys = zip(*[m._next_batch()[:2] for m in members])
        return net.step(torch.stack(xs), torch.stack(ys), lr, None)

    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(150):
            loss, _ = step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.isfinite(loss).all().item()


def test_stacked_run_matches_the_run_alone_on_cuda(tmp_path, data_root, monkeypatch):
    """On the GPU (TF32 products where supported) each run of a stack of 2 ends near the run alone: the same
    data order and initial weights, kernels that may differ in rounding."""
    from bnexp.train.stacked import train_stack
    from bnexp.train.trainer import train

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    runs = [["seed=0", "lr=0.1"], ["seed=1", "lr=0.5"]]
    short = ["trainer.progress=false", "trainer.device=cuda", "trainer.max_steps=200", "trainer.eval_every=100",
             "trainer.hist_every=100"]
    cfgs = [compose_config(short + r) for r in runs]
    alone = [train(c, tmp_path / f"a{i}") for i, c in enumerate(cfgs)]
    stacked = train_stack([(c, tmp_path / f"s{i}", True) for i, c in enumerate(cfgs)])
    for a, s in zip(alone, stacked):
        assert isinstance(s, dict) and s["status"] == "finished"
        assert abs(a["final_test_accuracy"] - s["final_test_accuracy"]) <= 5e-3
