"""Cross-replica BN (2 gloo processes), ghost-batch BN, the replicas' batch split, the preemption guard.

Independent expectation: Algorithm 1 (``bnexp.bn.batch_norm_train``, itself tested against the
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

from bnexp.bn import batch_norm_train
from bnexp.bn.distributed import (CrossReplicaBatchNorm, GhostBatchNorm, convert_batch_norm, ghost_batch_norm,
                           replica_local, sync_batch_norm)
from bnexp.distributed import Replicas, per_replica_batch_size, replica_share
from bnexp.errors import ConfigError, UserError
from bnexp.preemption import Preempted, PreemptionGuard

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
