"""The GPU path (docs/stacked.md, "GPU"): skipped without a CUDA device; scripts/gpu_check.sh runs this tier.

With CUDA the datasets live on the device and mini-batches are drawn there, and the step loop makes no host
synchronisation between evaluations and records: the steps below run under
``torch.cuda.set_sync_debug_mode("error")``, which raises on any synchronizing CUDA call. ``Trainer.run()``
and the stacked loop run ~300 steps with every measurement and a checkpoint due at least once under
``set_sync_debug_mode("warn")``, each warning recorded against its step (:class:`conftest.StepSyncs`): no
sync at a step where nothing is due, and at a due step no more than the budget of what is due
(:data:`SYNC_BUDGET`). With ``BNEXP_GPU_SYNC_LOG`` set, the counts per due step and the lines that synced go to
that JSON file (scripts/gpu_check.sh keeps it). A run interrupted at its checkpoint resumes on CUDA from
that step and ends as the uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings

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
    from bnexp.train.device import resolve_device

    assert resolve_device("auto").type == "cuda"


# the CIFAR-10 preset: the shared copy of the data has no md5 files (as in benchmarks/bench_stacked.py)
CNN = ["+experiment=bn_baseline", "data.verify_checksums=false"]


@pytest.mark.parametrize("overrides", [[], ["bn=noisy", "model.dropout=0.2"], CNN])
def test_trainer_steps_make_no_host_sync(tmp_path, data_root, monkeypatch, overrides):
    """The trainer's own step (mini-batch drawn on the device, augmentation, forward, loss, backward, SGD,
    the train-loss observer) for 150 steps, across an epoch boundary, without one host synchronisation."""
    t = _trainer(tmp_path, data_root, monkeypatch, overrides)
    assert t.data.train_x.is_cuda and t.sampler.perm.is_cuda
    ctx = t._context()
    x, y, _ = t._next_batch()
    t._update(x, y)  # the first step initializes cuBLAS/cuDNN (which may synchronize)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step in range(2, 152):
            ctx.x, ctx.y, ctx.epoch = t._next_batch()
            ctx.loss, ctx.logits, ctx.labels = t._update(ctx.x, ctx.y)
            t.step = ctx.step = step
            assert t.measure_after_update(ctx) is None  # the step loop's own measuring (train loss observed)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert t.sampler.epoch >= 1
    assert torch.isfinite(ctx.loss).item()


def test_stacked_steps_make_no_host_sync(tmp_path, data_root, monkeypatch):
    """A stack of 4 MLP runs (dropout masks from each run's own CUDA generator) steps without host syncs."""
    import dataclasses

    from bnexp.nets.datasets import load_data
    from bnexp.train.stack_loop import MemberTrainer
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
    from bnexp.train.stack_loop import train_stack
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


# ~300 steps with every measurement and a checkpoint due at least once, all on the loop's thread
DUE_RUN = ["trainer.progress=false", "trainer.device=cuda", "trainer.max_steps=300", "trainer.log_every=25",
           "trainer.eval_every=100", "trainer.hist_every=150", "trainer.ckpt_every=100", "monitor.grad_ics=true",
           "monitor.grad_ics_every=150", "monitor.landscape=true", "monitor.landscape_every=150",
           "trainer.async_records=false"]
# Host syncs allowed at a step, per thing due there. train_loss: its one read of the logged sums; eval: the
# parameters' finiteness and the test loss/accuracy (one read each); checkpoint: one copy per tensor saved
# (counted per run: CHECKPOINT_PER_TENSOR x tensors in its state) and the sampler's permutation; the monitor
# record and the ICS probes write host values per layer and unit to TensorBoard and JSON (on the CPU stand-in,
# tests/test_host_syncs.py, 188 and 84 reads for the MNIST MLP): a first bound, to be tightened from the first
# GPU run's BNEXP_GPU_SYNC_LOG.
SYNC_BUDGET = {"train_loss": 1, "eval": 2, "monitor": 400, "grad_ics": 200, "landscape": 200, "checkpoint": 8}
CHECKPOINT_PER_TENSOR = 1


@contextlib.contextmanager
def cuda_syncs():
    """Every synchronizing CUDA call in the body, as 'file:line' of the Python line that made it (sync debug
    mode ``warn``); other warnings are shown as usual."""
    events: list[str] = []
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        show = warnings.showwarning

        def record(message, category, filename, lineno, file=None, line=None):
            if "synchroniz" in str(message):
                events.append(f"{os.path.relpath(filename)}:{lineno}")
            else:
                show(message, category, filename, lineno, file, line)

        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield events
        finally:
            torch.cuda.set_sync_debug_mode(0)


def _budget(trainer, kinds: set[str]) -> int:
    tensors = sum(1 for v in trainer.model.state_dict().values() if v.is_cuda) + len(
        trainer.optimizer.state_dict()["state"])
    return sum(SYNC_BUDGET[k] * (tensors * CHECKPOINT_PER_TENSOR if k == "checkpoint" else 1) for k in kinds)


def _check_syncs(case: str, trainer, syncs, events: list[str], first_counted: int) -> None:
    """No sync at a step where nothing is due; at a due step no more than its budget. Writes the counts to
    ``$BNEXP_GPU_SYNC_LOG`` (a JSON object per case) when set."""
    from conftest import due_kinds

    per_step = {s: n for s, n in syncs.per_step().items() if s >= first_counted}
    kinds = {s: due_kinds(trainer, s) for s in per_step}
    assert set().union(*kinds.values()) >= {"train_loss", "eval", "monitor", "grad_ics", "landscape", "checkpoint"}
    where = {}
    for i, (a, b) in enumerate(zip(syncs.marks, syncs.marks[1:])):
        where[syncs.first_step + i] = sorted(set(events[a:b]))
    if os.environ.get("BNEXP_GPU_SYNC_LOG"):
        path = os.environ["BNEXP_GPU_SYNC_LOG"]
        log = json.loads(open(path).read()) if os.path.exists(path) else {}
        log[case] = {str(s): {"due": sorted(kinds[s]), "syncs": n, "budget": _budget(trainer, kinds[s]),
                              "where": where[s][:20]} for s, n in per_step.items() if kinds[s] or n}
        with open(path, "w") as f:
            json.dump(log, f, indent=1)
    idle = {s: where[s] for s, n in per_step.items() if not kinds[s] and n}
    assert idle == {}, f"host syncs at steps where nothing is due: {idle}"
    over = {s: (n, _budget(trainer, kinds[s]), where[s][:10]) for s, n in per_step.items()
            if kinds[s] and n > _budget(trainer, kinds[s])}
    assert over == {}, f"host syncs over budget (count, budget, where): {over}"


@pytest.mark.parametrize("case, overrides", [("mlp", []), ("cnn", CNN)])
def test_a_run_syncs_only_where_something_is_due(case, overrides, tmp_path, data_root, monkeypatch):
    """``Trainer.run()`` for 300 steps: the first update (cuBLAS/cuDNN initialize and may synchronize) is not
    counted."""
    from conftest import StepSyncs

    from bnexp.train.trainer import Trainer

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    t = Trainer(compose_config(DUE_RUN + overrides), tmp_path)
    with cuda_syncs() as events:
        syncs = StepSyncs(events)
        syncs.wrap(monkeypatch, t, "_update")
        summary = t.run()
    assert summary["status"] == "finished" and summary["precision"] in ("fp32", "tf32")
    _check_syncs(case, t, syncs, events, first_counted=2)


def test_the_stacked_loop_syncs_only_where_something_is_due(tmp_path, data_root, monkeypatch):
    """Two MLP runs as one stack (hydra/launcher=stacked) for 300 steps, the same cadences."""
    from conftest import StepSyncs

    from bnexp.train import stack_loop as stacked
    from bnexp.train.stacked_net import StackedNet

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    members = []
    keep = stacked.MemberTrainer.keep_rng

    def kept(self):
        members.append(self)
        return keep(self)

    monkeypatch.setattr(stacked.MemberTrainer, "keep_rng", kept)
    cfgs = [compose_config(DUE_RUN + ["model.dropout=0.1", f"seed={s}", f"lr={0.1 * (s + 1)}"]) for s in range(2)]
    with cuda_syncs() as events:
        syncs = StepSyncs(events)
        syncs.wrap(monkeypatch, StackedNet, "step")
        results = stacked.train_stack([(c, tmp_path / str(i), True) for i, c in enumerate(cfgs)])
    assert [r["status"] for r in results] == ["finished", "finished"], results
    # both runs' due work falls in the same step: twice one run's budget
    for k in list(SYNC_BUDGET):
        monkeypatch.setitem(SYNC_BUDGET, k, 2 * SYNC_BUDGET[k])
    _check_syncs("stacked", members[0], syncs, events, first_counted=2)


def test_a_run_resumes_on_cuda_from_its_checkpoint(tmp_path, data_root, monkeypatch):
    """A 20-step run with ``trainer.ckpt_every=10``, its step-10 checkpoint copied into a new folder: the run
    there resumes from step 10 (the generator states load to the CPU, where ``set_state`` needs them) and
    ends as the uninterrupted run (the same kernels on the same device: equal up to float rounding)."""
    from bnexp.runfolders import rundir
    from bnexp.train.checkpoint import load_checkpoint
    from bnexp.train.trainer import train

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    cfg = compose_config(["trainer.progress=false", "trainer.device=cuda", "trainer.max_steps=20",
                          "trainer.eval_every=10", "trainer.hist_every=10", "trainer.ckpt_every=10", "seed=4",
                          "model.dropout=0.2"])
    at_10, real = tmp_path / "step10.pt", rundir.save_checkpoint

    def save_and_keep(path, state):
        real(path, state)
        if state["step"] == 10:
            shutil.copyfile(path, at_10)

    monkeypatch.setattr(rundir, "save_checkpoint", save_and_keep)
    (tmp_path / "whole").mkdir()
    (tmp_path / "resumed").mkdir()
    whole = train(cfg, tmp_path / "whole")
    shutil.copyfile(at_10, tmp_path / "resumed" / "checkpoint.pt")
    resumed = train(cfg, tmp_path / "resumed")
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] == 10
    assert not list((tmp_path / "resumed").glob("checkpoint.unreadable-*"))
    a = load_checkpoint(tmp_path / "whole" / "checkpoint.pt")["model"]
    b = load_checkpoint(tmp_path / "resumed" / "checkpoint.pt")["model"]
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=k)
    assert resumed["final_test_accuracy"] == pytest.approx(whole["final_test_accuracy"], abs=1e-3)
