"""Cross-replica BN (2 gloo processes), ghost-batch BN, the replicas' batch split, the preemption guard.

Independent expectation: Algorithm 1 (``bnexp.nets.bn.batch_norm_train``, itself tested against the
paper's formulas and torch) on the *concatenated* global mini-batch, in float64.
"""

from __future__ import annotations

import copy
import os
import signal

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from bnexp.nets.bn import batch_norm_train
from bnexp.nets.bn.sync_and_ghost import (CrossReplicaBatchNorm, GhostBatchNorm, convert_batch_norm, ghost_batch_norm,
                           replica_local, sync_batch_norm)
from bnexp.train.distributed import BNPlan, Replicas, per_replica_batch_size, replica_share, step_seed
from bnexp.errors import ConfigError, UserError
from bnexp.train.preemption import Preempted, PreemptionGuard

SHAPES = {"fc": (8, 5), "conv": (6, 3, 4, 4)}


def _global_data(shape):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 1.5
    w = torch.randn(*shape, generator=g, dtype=torch.float64)  # loss = sum(w * y)
    gamma = torch.rand(shape[1], generator=g, dtype=torch.float64) + 0.5
    beta = torch.randn(shape[1], generator=g, dtype=torch.float64)
    return x, w, gamma, beta


def _reference(shape, eps=1e-5):
    """Algorithm 1 on the whole batch: y, dl/dx, dl/dgamma, dl/dbeta, and the running stats."""
    x, w, gamma, beta = _global_data(shape)
    x, gamma, beta = x.requires_grad_(), gamma.requires_grad_(), beta.requires_grad_()
    y = batch_norm_train(x, gamma, beta, eps)
    (w * y).sum().backward()
    dims = (0,) if x.dim() == 2 else (0, 2, 3)
    m = x.numel() // x.shape[1]
    mu, var = x.detach().mean(dims), x.detach().var(dims, unbiased=True)
    return y.detach(), x.grad, gamma.grad, beta.grad, 0.1 * mu, 0.9 + 0.1 * var, m


# Per shape: an even and an uneven split of the global mini-batch between the 2 replicas.
SPLITS = {"fc": {"even": [4, 4], "uneven": [3, 5]}, "conv": {"even": [3, 3], "uneven": [2, 4]}}


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        res = {}
        for name, shape in SHAPES.items():
            for kind, splits in SPLITS[name].items():
                x, w, gamma, beta = _global_data(shape)
                lo, hi = sum(splits[:rank]), sum(splits[:rank + 1])
                xr = x[lo:hi].clone().requires_grad_()
                bn = CrossReplicaBatchNorm(shape[1]).double()
                with torch.no_grad():
                    bn.weight.copy_(gamma)
                    bn.bias.copy_(beta)
                bn.train()
                y = bn(xr)
                (w[lo:hi] * y).sum().backward()
                dg, db = bn.weight.grad.clone(), bn.bias.grad.clone()
                dist.all_reduce(dg)  # what DDP's gradient all-reduce adds up
                dist.all_reduce(db)
                res[name, kind] = (y.detach(), xr.grad, dg, db, bn.running_mean.clone(), bn.running_var.clone())
        # sync_batch_norm converts plain BN; replica_local lets rank 0 alone run it (no collective)
        net = sync_batch_norm(torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.BatchNorm1d(5)),
                              torch.device("cpu")).double()
        assert isinstance(net[1], CrossReplicaBatchNorm)
        if rank == 0:
            x = _global_data(SHAPES["fc"])[0]
            with replica_local(net):
                res["local"] = (net(x), torch.nn.functional.batch_norm(net[0](x), None, None, net[1].weight,
                                                                       net[1].bias, training=True))
                twin = copy.deepcopy(net)  # the ICS probes deep-copy the model: no process group inside
                res["copy"] = (twin(x), net(x))
            assert type(net[1]) is CrossReplicaBatchNorm  # synchronized again
        dist.barrier()
        torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # starts two gloo processes (~7 s of CPU)
def test_cross_replica_bn_equals_algorithm1_on_the_concatenated_batch(tmp_path):
    """2 gloo processes; forward, dl/dx, dl/dgamma, dl/dbeta (summed as DDP does) and running stats."""
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    out = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    torch.testing.assert_close(*out[0]["local"], rtol=0, atol=0)
    torch.testing.assert_close(*out[0]["copy"], rtol=0, atol=0)
    for name in SHAPES:
        y_ref, dx_ref, dg_ref, db_ref, rm_ref, rv_ref, _ = _reference(SHAPES[name])
        for kind in SPLITS[name]:
            y = torch.cat([out[r][name, kind][0] for r in range(2)])
            dx = torch.cat([out[r][name, kind][1] for r in range(2)])
            torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(dx, dx_ref, rtol=1e-10, atol=1e-10)
            for r in range(2):
                _, _, dg, db, rm, rv = out[r][name, kind]
                torch.testing.assert_close(dg, dg_ref, rtol=1e-10, atol=1e-10)
                torch.testing.assert_close(db, db_ref, rtol=1e-10, atol=1e-10)
                # the same global statistics on every replica
                torch.testing.assert_close(rm, rm_ref, rtol=1e-10, atol=1e-10)
                torch.testing.assert_close(rv, rv_ref, rtol=1e-10, atol=1e-10)


def test_cross_replica_bn_without_process_group_is_plain_bn():
    x, _, gamma, beta = _global_data(SHAPES["conv"])
    ref = torch.nn.BatchNorm2d(3).double()
    bn = convert_batch_norm(ref, lambda b: CrossReplicaBatchNorm(b.num_features, b.eps, b.momentum).double())
    assert isinstance(bn, CrossReplicaBatchNorm)
    with torch.no_grad():
        for m in (ref, bn):
            m.weight.copy_(gamma)
            m.bias.copy_(beta)
    torch.testing.assert_close(bn(x), ref(x), rtol=0, atol=0)
    torch.testing.assert_close(bn.running_var, ref.running_var, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["fc", "conv"])
def test_ghost_batch_norm_equals_bn_of_each_chunk(name):
    shape = (12, 5) if name == "fc" else (6, 3, 4, 4)
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 2 - 1).requires_grad_()
    w = torch.randn(*shape, generator=g, dtype=torch.float64)
    gamma = (torch.rand(shape[1], generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    beta = torch.randn(shape[1], generator=g, dtype=torch.float64).requires_grad_()
    ghost = shape[0] // 3
    y, mu, var = ghost_batch_norm(x, gamma, beta, ghost)
    (w * y).sum().backward()
    grads = [t.grad.clone() for t in (x, gamma, beta)]
    for t in (x, gamma, beta):
        t.grad = None
    chunks = [batch_norm_train(c, gamma, beta) for c in x.split(ghost)]
    (w * torch.cat(chunks)).sum().backward()
    torch.testing.assert_close(y, torch.cat(chunks), rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, (x.grad, gamma.grad, beta.grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    dims = (0,) if x.dim() == 2 else (0, 2, 3)
    torch.testing.assert_close(mu, torch.stack([c.mean(dims) for c in x.detach().split(ghost)]))
    # the module: one running-average update from the ghost batches' average statistics
    bn = GhostBatchNorm(shape[1], ghost).double()
    bn(x.detach())
    m = x[:ghost].numel() // shape[1]
    want_var = torch.stack([c.var(dims, unbiased=True) for c in x.detach().split(ghost)]).mean(0)
    assert m > 1
    torch.testing.assert_close(bn.running_mean, 0.1 * mu.mean(0))
    torch.testing.assert_close(bn.running_var, 0.9 + 0.1 * want_var)
    bn.eval()
    torch.testing.assert_close(bn(x.detach()), torch.nn.functional.batch_norm(
        x.detach(), bn.running_mean, bn.running_var, bn.weight, bn.bias, training=False))


def test_ghost_batch_norm_refuses_a_size_that_does_not_divide_the_batch():
    with pytest.raises(ValueError, match="ghost batch size 4 must divide the mini-batch of 6"):
        ghost_batch_norm(torch.randn(6, 2), None, None, 4)


def test_global_batch_split_across_replicas():
    assert per_replica_batch_size(60, 2, group_initialized=True) == 30
    assert per_replica_batch_size(60, 1, group_initialized=False) == 60
    with pytest.raises(ConfigError, match=r"trainer.batch_size=60.*3 replicas|trainer.batch_size"):
        per_replica_batch_size(60, 7, group_initialized=True)
    with pytest.raises(UserError, match="no torch.distributed process group"):
        per_replica_batch_size(60, 2, group_initialized=False)
    idx = torch.arange(12)
    assert replica_share(idx, Replicas()).tolist() == list(range(12))


def test_preemption_guard_defers_the_signal_and_chains_submitits_handler():
    calls = []
    sig = signal.SIGUSR2
    old = signal.signal(sig, lambda s, f: calls.append(s))  # stands in for submitit's handler
    try:
        with PreemptionGuard(sig) as guard:
            assert guard.chained and not guard.requested
            os.kill(os.getpid(), sig)
            assert guard.requested and calls == []  # only a flag: the step in progress finishes
            with pytest.raises(Preempted):
                guard.hand_over()  # the stand-in returns instead of exiting
            assert calls == [sig]
        signal.signal(sig, signal.SIG_DFL)
        with PreemptionGuard(sig) as guard:
            assert not guard.chained
            with pytest.raises(Preempted, match="SIGUSR2"):
                guard.hand_over()
        assert signal.getsignal(sig) == signal.SIG_DFL
    finally:
        signal.signal(sig, old)


# ----- the replicas' BN plan -------------------------------------------------------------------
def _cfg(*overrides):
    from bnexp.config.schema import compose_config

    return compose_config(list(overrides))


def test_bn_plan_per_choice():
    from bnexp.train.distributed import bn_plan

    two = Replicas(rank=0, world_size=2, backend="gloo")
    one = Replicas()
    # one process: as configured
    assert bn_plan(_cfg("trainer.batch_size=60"), one) == BNPlan(60, None, False, False)
    assert bn_plan(_cfg("bn.ghost_batch_size=15"), one) == BNPlan(60, 15, False, False)
    assert bn_plan(_cfg("bn=false"), one) == BNPlan(60, None, False, False)
    with _fake_group():
        # sync: synchronized layers over the global batch; no buffers to average (identical)
        assert bn_plan(_cfg(), two) == BNPlan(30, None, True, False)
        # per replica: the model normalizes ghost batches of m/N (what each replica sees)
        assert bn_plan(_cfg("bn.sync=false"), two) == BNPlan(30, 30, False, True)
        # ghost batches stay per replica whatever bn.sync; they must divide the share
        assert bn_plan(_cfg("bn.ghost_batch_size=10"), two) == BNPlan(30, 10, False, True)
        with pytest.raises(ConfigError, match=r"bn.ghost_batch_size=20.*trainer.batch_size/2 = 30"):
            bn_plan(_cfg("bn.ghost_batch_size=20"), two)
        with pytest.raises(ConfigError, match=r"trainer.batch_size=61.*2 replicas"):
            bn_plan(_cfg("trainer.batch_size=61"), two)
        with pytest.raises(ConfigError, match="noisy BN runs in one process only"):
            bn_plan(_cfg("bn=noisy"), two)
        with pytest.raises(ConfigError, match="bn.impl='reference'.*need bn.impl=torch"):
            bn_plan(_cfg("bn.impl=reference"), two)
    with pytest.raises(UserError, match="no torch.distributed process group"):
        bn_plan(_cfg(), two)  # N > 1 claimed without a process group


class _fake_group:
    """torch.distributed.is_initialized() -> True for plan checks (no collective is made)."""

    def __enter__(self):
        self.saved = dist.is_initialized
        dist.is_initialized = lambda: True

    def __exit__(self, *exc):
        dist.is_initialized = self.saved


def test_step_seed_differs_per_replica_and_step():
    seeds = {step_seed(0, r, s) for r in range(4) for s in range(1000)}
    assert len(seeds) == 4000 and all(0 <= s < 2**63 for s in seeds)
    assert step_seed(0, 1, 5) == step_seed(0, 1, 5) != step_seed(1, 1, 5)


# ----- end to end: torchrun with 2 gloo replicas on real MNIST -----------------------------------
RUN = ["trainer.num_threads=1", "trainer.progress=false", "trainer.max_steps=100", "trainer.eval_every=100",
       "trainer.hist_every=100", "trainer.probe_size=200", "trainer.batch_size=60"]


def _torchrun(tmp_path, data_root, name, *overrides):
    import subprocess
    import sys

    cwd = tmp_path / f"cwd_{name}"
    cwd.mkdir()
    # the overrides given here replace RUN's values of the same keys (bnexp refuses a key given twice otherwise)
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), OMP_NUM_THREADS="1", BNEXP_LAST_OVERRIDE_WINS="1")
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        "-m", "bnexp", "train", *RUN, *overrides, f"hydra.run.dir={tmp_path / name}"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert list(cwd.iterdir()) == []  # no replica wrote anything in its working folder
    return tmp_path / name


def _one_process(tmp_path, name, *overrides):
    from bnexp.train.trainer import train

    summary = train(_cfg(*RUN, *overrides), tmp_path / name)
    assert summary["status"] == "finished" and summary["replicas"] == 1
    return tmp_path / name


def _weights(run_dir):
    return torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)


def test_torchrun_sync_bn_matches_one_process_and_only_rank0_writes(tmp_path, data_root):
    two = _torchrun(tmp_path, data_root, "two", "bn.sync=true")
    one = _one_process(tmp_path, "one")
    a, b = _weights(one), _weights(two)
    assert (a["world_size"], b["world_size"]) == (1, 2)
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:  # the same computation: final weights and running statistics within 1e-5
        torch.testing.assert_close(b["model"][k], a["model"][k], rtol=0, atol=1e-5)
    # rank 0 alone wrote the run folder: one event file, one record per evaluation, one summary
    import json

    assert len(list(two.glob("events.out.tfevents.*"))) == 1
    metrics = [json.loads(line) for line in (two / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 100]
    summary = json.loads((two / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["replicas"] == 2 and summary["bn_sync"] is True
    # the train loss is over the global mini-batches (both shares), as in one process
    ref = [json.loads(line) for line in (one / "metrics.jsonl").read_text().splitlines()]
    assert metrics[1]["train_loss"] == pytest.approx(ref[1]["train_loss"], abs=1e-5)
    assert metrics[1]["train_accuracy"] == pytest.approx(ref[1]["train_accuracy"], abs=1e-3)


def test_torchrun_per_replica_bn_matches_ghost_batches_in_one_process(tmp_path, data_root):
    """bn.sync=false with 2 replicas = one process with bn.ghost_batch_size = batch_size/2."""
    from bnexp.nets.datasets import load_data
    from bnexp.nets.models import build_model

    two = _torchrun(tmp_path, data_root, "two", "bn.sync=false", "trainer.max_steps=50")
    one = _one_process(tmp_path, "one", "bn.ghost_batch_size=30", "trainer.max_steps=50")
    a, b = _weights(one), _weights(two)
    cfg = _cfg(*RUN, "bn.ghost_batch_size=30")
    data = load_data(cfg.data, torch.device("cpu"))
    x = data.test_x[:120]
    outs = []
    for state in (a, b):
        net = build_model(cfg, data.input_shape, data.num_classes)
        net.load_state_dict(state["model"])
        net.train()  # training mode: each ghost batch of 30 normalized with its own statistics
        with torch.no_grad():
            outs.append(net(x))
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=1e-4)
    # and the statistics really are per ghost batch / per replica: whole-batch BN differs clearly
    whole = build_model(_cfg(*RUN), data.input_shape, data.num_classes)
    whole.load_state_dict(a["model"])
    whole.train()
    with torch.no_grad():
        assert (whole(x) - outs[0]).abs().max() > 1e-2
    # the running averages: the replicas' average equals the ghost-batch layer's
    for k in a["model"]:
        if "running" in k:
            torch.testing.assert_close(b["model"][k], a["model"][k], rtol=0, atol=1e-4)


@pytest.mark.slow  # trains on MNIST in this process
def test_checkpoint_resumes_only_with_the_same_number_of_replicas(tmp_path, data_root):
    from bnexp.errors import CheckpointMismatch
    from bnexp.train.trainer import Trainer

    run = _one_process(tmp_path, "one", "trainer.max_steps=5", "trainer.eval_every=5", "trainer.hist_every=5")
    state = _weights(run)
    state["world_size"] = 2  # as written by rank 0 of a 2-replica run
    torch.save(state, run / "checkpoint.pt")
    before = (run / "checkpoint.pt").read_bytes()
    with pytest.raises(CheckpointMismatch, match=r"written by a run with 2 replica\(s\); this one has 1.*"
                                                 r"python -m bnexp\.train\.torchrun --standalone --nproc-per-node=2 "):
        Trainer(_cfg(*RUN, "trainer.max_steps=5", "trainer.eval_every=5", "trainer.hist_every=5"), run).try_resume()
    assert (run / "checkpoint.pt").read_bytes() == before  # left for the right command to resume



@pytest.mark.slow  # trains on MNIST in this process
def test_checkpoint_resumes_across_result_neutral_keys_only(tmp_path, data_root):
    """Keys that cannot change results (here data.verify_checksums, which also leaves the run folder's
    name unchanged) do not block a resume; a change of the learning rate does, naming the key."""
    from bnexp.errors import CheckpointMismatch
    from bnexp.train.trainer import Trainer

    short = ("trainer.max_steps=5", "trainer.eval_every=5", "trainer.hist_every=5")
    run = _one_process(tmp_path, "one", *short)
    assert Trainer(_cfg(*RUN, *short, "data.verify_checksums=false"), run).try_resume()
    with pytest.raises(CheckpointMismatch, match=r"differs in: lr\b"):
        Trainer(_cfg(*RUN, *short, "lr=0.5"), run).try_resume()

def test_convert_batch_norm_keeps_values_device_and_dtype():
    old = torch.nn.BatchNorm1d(4).double()
    with torch.no_grad():
        old.weight.copy_(torch.tensor([0.1, 0.2, 0.3, 1 / 3], dtype=torch.float64))
        old.running_var.fill_(1 / 7)
    new = convert_batch_norm(old, lambda b: CrossReplicaBatchNorm(b.num_features))  # built in float32
    assert new.weight.dtype == torch.float64 and new.running_var.dtype == torch.float64
    assert torch.equal(new.weight, old.weight) and torch.equal(new.running_var, old.running_var)


def test_ghost_batch_size_checked_before_a_run():
    from bnexp.train.distributed import check_bn_config

    check_bn_config(_cfg("bn.ghost_batch_size=15"), 1)
    check_bn_config(_cfg("bn=false", "bn.ghost_batch_size=7"), 1)  # no BN: nothing to split
    with pytest.raises(ConfigError, match=r"bn.ghost_batch_size=7: .*must divide trainer.batch_size=60"):
        check_bn_config(_cfg("bn.ghost_batch_size=7"), 1)
    with pytest.raises(ConfigError, match=r"bn.ghost_batch_size=1: a ghost batch needs >= 2 examples"):
        check_bn_config(_cfg("bn.ghost_batch_size=1"), 1)
    with pytest.raises(ConfigError, match="ghost batches need bn.impl=torch"):
        check_bn_config(_cfg("bn.ghost_batch_size=15", "bn.impl=reference"), 1)
