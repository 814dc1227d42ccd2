"""BN statistics over more or fewer examples than one replica's mini-batch.

Two layers that change *which* examples Algorithm 1's mini-batch statistics are taken over:

- :class:`CrossReplicaBatchNorm` (``bn.sync=true`` on CPU): data-parallel training with N
  replicas, each holding m/N examples of the global mini-batch of m; mu_B and sigma2_B are
  computed over all m examples by all-reducing per-replica sums, so the run is the same
  computation as one process with the whole mini-batch. On GPU, torch's
  ``nn.SyncBatchNorm`` does the same (it refuses CPU tensors once a process group exists).
- :class:`GhostBatchNorm` (``bn.ghost_batch_size``): one process, the mini-batch split into
  virtual ("ghost") mini-batches of g examples, each normalized with its own statistics
  (Hoffer et al. 2017, "Train longer, generalize better", Sec. 4): the single-process
  equivalent of ``bn.sync=false`` across m/g replicas.

Both are subclasses of torch's ``_BatchNorm`` with the same parameters (``weight`` = gamma,
``bias`` = beta) and buffers (``running_mean``, ``running_var``, ``num_batches_tracked``) as
``nn.BatchNorm1d``/``2d``, so checkpoints and the shift monitor see the usual BN layer.
Inference (eval mode) uses the population statistics as in Algorithm 2, step 11.

Shapes: (m, d) activations (statistics per feature over m examples) or (N, C, H, W)
(statistics per channel over N*H*W values, paper Sec. 3.2).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnexp.nets.bn.functional import _per_feature, _reduce_dims


def _world(group) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


class _CrossReplicaBN(torch.autograd.Function):
    """Algorithm 1 over the union of all replicas' examples, with all-reduced sums.

    Forward (global m = sum of the replicas' m_r):
        mu_B     = (all-reduced sum_i x_i) / m
        sigma2_B = (all-reduced sum_i (x_i - mu_B)^2) / m        (two passes, as Alg. 1 writes it)
        y_i      = gamma (x_i - mu_B) / sqrt(sigma2_B + eps) + beta
    Backward, from the paper's Sec. 3 chain rule with every sum over the global mini-batch
    (the dl/dmu_B term through sigma2_B vanishes because sum_i (x_i - mu_B) = 0 globally):
        dl/dx_i  = gamma / sqrt(sigma2_B + eps) * (g_i - mean_j g_j - x_hat_i * mean_j g_j x_hat_j)
    where g = dl/dy and the means are all-reduced. dl/dgamma and dl/dbeta are the *local*
    sums; DDP's gradient all-reduce adds the replicas' parts (as for any parameter).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps, group):
        dims = _reduce_dims(x)
        local_count = x.numel() // x.shape[1]
        s = torch.cat([x.sum(dim=dims), x.new_tensor([float(local_count)])])
        dist.all_reduce(s, group=group)
        count = s[-1]
        mean = s[:-1] / count
        xc = x - _per_feature(mean, x)
        sq = (xc * xc).sum(dim=dims)
        dist.all_reduce(sq, group=group)
        var = sq / count
        invstd = torch.rsqrt(var + eps)
        x_hat = xc * _per_feature(invstd, x)
        y = x_hat * _per_feature(weight, x) + _per_feature(bias, x)
        ctx.save_for_backward(x_hat, weight, invstd, count)
        ctx.group = group
        ctx.mark_non_differentiable(mean, var, count)
        return y, mean, var, count

    @staticmethod
    def backward(ctx, grad_y, _gm, _gv, _gc):
        x_hat, weight, invstd, count = ctx.saved_tensors
        dims = _reduce_dims(grad_y)
        grad_beta = grad_y.sum(dim=dims)
        grad_gamma = (grad_y * x_hat).sum(dim=dims)
        sums = torch.cat([grad_beta, grad_gamma])
        dist.all_reduce(sums, group=ctx.group)
        c = weight.numel()
        mean_g = sums[:c] / count  # mean_j dl/dy_j over the global mini-batch
        mean_gx = sums[c:] / count  # mean_j dl/dy_j * x_hat_j
        grad_x = (grad_y - _per_feature(mean_g, grad_y) - x_hat * _per_feature(mean_gx, grad_y)) \
            * _per_feature(weight * invstd, grad_y)
        return grad_x, grad_gamma, grad_beta, None, None


def cross_replica_batch_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5,
                             group=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Algorithm 1 over the global mini-batch spread across the replicas of ``group``.

    Every replica calls this with its own share ``x`` of the global mini-batch; the statistics
    are those of the concatenation of all shares. Differentiable in x, weight and bias.

    Args:
        x: this replica's (m_r, d) or (N_r, C, H, W) activations (m_r may differ between replicas).
        weight, bias: gamma and beta, (d,) or (C,).
        eps: Alg. 1's epsilon.
        group: the process group (None: the default group).

    Returns:
        (y, mu_B, sigma2_B, m): y has x's shape; mu_B and the biased sigma2_B are (d,), the same
        on every replica; m is the global number of values per feature.

    Raises:
        RuntimeError: no process group is initialized (the caller must fall back to plain BN).
        ValueError: x is neither 2-d nor 4-d.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("cross_replica_batch_norm needs an initialized torch.distributed process group")
    y, mean, var, count = _CrossReplicaBN.apply(x, weight, bias, eps, group)
    return y, mean, var, int(count.item())


class CrossReplicaBatchNorm(_BatchNorm):
    """BN whose training-mode statistics are over all replicas' examples (``bn.sync=true``, CPU).

    With no process group, or a group of one process, it is exactly ``nn.BatchNorm1d/2d``. The
    running averages are updated from the global mu_B and unbiased m/(m-1) sigma2_B, identical on
    every replica (so DDP's buffer broadcast changes nothing).

    Args:
        num_features: d (or C).
        eps, momentum, affine, track_running_stats: as in ``nn.BatchNorm1d``.
        group: the process group (None: the default group).
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True, group=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.group = group

    def _check_input_dim(self, x: torch.Tensor) -> None:
        _reduce_dims(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or _world(self.group) == 1:
            return super().forward(x)
        weight = self.weight if self.affine else x.new_ones(self.num_features)
        bias = self.bias if self.affine else x.new_zeros(self.num_features)
        y, mean, var, m = cross_replica_batch_norm(x, weight, bias, self.eps, self.group)
        if self.track_running_stats:
            _update_running(self, mean, var * m / max(m - 1, 1))
        return y


def _update_running(bn: _BatchNorm, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
    """torch's running-average update: r <- (1 - momentum) r + momentum * batch value."""
    with torch.no_grad():
        bn.num_batches_tracked.add_(1)
        momentum = (1.0 / float(bn.num_batches_tracked)) if bn.momentum is None else bn.momentum
        bn.running_mean.mul_(1 - momentum).add_(momentum * mean.detach())
        bn.running_var.mul_(1 - momentum).add_(momentum * unbiased_var.detach())


def ghost_batch_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                     ghost_batch_size: int, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Algorithm 1 applied separately to each ghost batch of ``ghost_batch_size`` examples.

    The examples x[0:g], x[g:2g], ... form k = m/g virtual mini-batches; each is normalized with
    its own mu_B and sigma2_B (Hoffer et al. 2017, Sec. 4, "Ghost Batch Normalization").
    Differentiable; gradients flow through each ghost batch's own statistics.

    Args:
        x: (m, d) or (N, C, H, W) with m (or N) a multiple of g.
        weight, bias: gamma and beta, (d,) or (C,), or None for no affine step.
        ghost_batch_size: g >= 1 examples per ghost batch.
        eps: Alg. 1's epsilon.

    Returns:
        (y, mu, sigma2): y has x's shape; mu and the biased sigma2 are (k, d) per ghost batch.

    Raises:
        ValueError: g does not divide the number of examples, or x is neither 2-d nor 4-d.
    """
    dims = _reduce_dims(x)
    n, g = x.shape[0], int(ghost_batch_size)
    if g < 1 or n % g:
        raise ValueError(f"the ghost batch size {g} must divide the mini-batch of {n} examples")
    xg = x.reshape(n // g, g, *x.shape[1:])
    gdims = tuple(d + 1 for d in dims)  # statistics within each ghost batch
    mu = xg.mean(dim=gdims, keepdim=True)
    xc = xg - mu
    var = (xc * xc).mean(dim=gdims, keepdim=True)
    y = (xc * torch.rsqrt(var + eps)).reshape(x.shape)
    if weight is not None:
        y = y * _per_feature(weight, x)
    if bias is not None:
        y = y + _per_feature(bias, x)
    k = n // g
    return y, mu.reshape(k, -1), var.reshape(k, -1)


class GhostBatchNorm(_BatchNorm):
    """BN over ghost batches of ``ghost_batch_size`` examples in training (``bn.ghost_batch_size``).

    Training: :func:`ghost_batch_norm`. The running averages get one update per step from the
    average over the k ghost batches of mu_B and of the unbiased g'/(g'-1) sigma2_B (g' values per
    feature in one ghost batch): since the running average is linear, this is the average of the
    running statistics that k replicas with ``bn.sync=false`` would each keep. Eval: population
    statistics, as ``nn.BatchNorm1d/2d``. A mini-batch no larger than g is plain BN. A batch that
    g does not divide (training batches always are divisible, the config checks it; the shift
    monitor's probe may not be) has a last ghost batch of g to 2g - 1 examples. Statistics and transform
    are computed in float32 also for lower-precision input (bf16 autocast), y in the input's dtype.

    Args:
        num_features: d (or C).
        ghost_batch_size: g, examples per ghost batch.
        eps, momentum, affine, track_running_stats: as in ``nn.BatchNorm1d``.

    Raises:
        ValueError: g < 1.
    """

    def __init__(self, num_features: int, ghost_batch_size: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        if int(ghost_batch_size) < 1:
            raise ValueError(f"ghost_batch_size must be >= 1, got {ghost_batch_size}")
        self.ghost_batch_size = int(ghost_batch_size)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", ghost_batch_size={self.ghost_batch_size}"

    def _check_input_dim(self, x: torch.Tensor) -> None:
        _reduce_dims(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, g = x.shape[0], self.ghost_batch_size
        if not self.training or n <= g:
            return super().forward(x)
        dtype = x.dtype  # statistics in float32 also under bf16 autocast, as torch's BN (fp32, fp64 as they are)
        x = x.to(torch.promote_types(dtype, torch.float32))
        per_example = x[:1].numel() // x.shape[1]  # H*W values per example and channel (1 for (m, d))
        head = n if n % g == 0 else (n // g - 1) * g  # the rest forms the last, larger ghost batch
        parts, mus, uvars = [], [], []
        for lo, hi, size in ((0, head, g), (head, n, n - head)):
            if hi > lo:
                y, mu, var = ghost_batch_norm(x[lo:hi], self.weight, self.bias, size, self.eps)
                m = size * per_example
                parts.append(y)
                mus.append(mu)
                uvars.append(var * m / max(m - 1, 1))
        if self.track_running_stats:
            _update_running(self, torch.cat(mus).mean(0), torch.cat(uvars).mean(0))
        return (parts[0] if len(parts) == 1 else torch.cat(parts)).to(dtype)


def convert_batch_norm(model: nn.Module, make) -> nn.Module:
    """Replace every ``nn.BatchNorm1d``/``nn.BatchNorm2d`` in ``model`` by ``make(bn)``, in place.

    The new layer receives the old one's parameters and buffers (``load_state_dict``) and its
    device and dtype, so conversion at any point of training keeps gamma, beta and the
    running statistics exactly.

    Args:
        model: a network (a BN layer itself is converted too and returned).
        make: callable (old BN layer) -> new ``_BatchNorm`` layer with the same num_features.

    Returns:
        the model (or the new layer when ``model`` is itself a BN layer).
    """
    if type(model) in (nn.BatchNorm1d, nn.BatchNorm2d):
        ref = model.weight if model.weight is not None else model.running_mean
        new = make(model).to(device=ref.device, dtype=ref.dtype)  # the old layer's device and dtype
        new.load_state_dict(model.state_dict())
        new.train(model.training)
        return new
    for name, child in model.named_children():
        setattr(model, name, convert_batch_norm(child, make))
    return model


def sync_batch_norm(model: nn.Module, device: torch.device) -> nn.Module:
    """``bn.sync=true`` with N > 1 replicas: BN statistics over the global mini-batch.

    Converts every plain ``nn.BatchNorm1d``/``2d`` (ghost-batch layers stay per replica):
    on CUDA to torch's ``nn.SyncBatchNorm``, on other devices to :class:`CrossReplicaBatchNorm`.
    Call on every replica before DDP wraps the model and before the optimizer is built (the
    layers get new parameter objects).

    Raises:
        RuntimeError: no process group is initialized.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("sync_batch_norm needs an initialized torch.distributed process group")
    if device.type == "cuda":
        def make(b):
            return nn.SyncBatchNorm(b.num_features, b.eps, b.momentum, b.affine, b.track_running_stats)
    else:
        def make(b):
            return CrossReplicaBatchNorm(b.num_features, b.eps, b.momentum, b.affine, b.track_running_stats)
    return convert_batch_norm(model, make)


class _LocalCrossReplicaBatchNorm(CrossReplicaBatchNorm):
    """A :class:`CrossReplicaBatchNorm` inside :class:`replica_local`: plain BN of this replica's input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BatchNorm.forward(self, x)


class _LocalSyncBatchNorm(nn.SyncBatchNorm):
    """An ``nn.SyncBatchNorm`` inside :class:`replica_local`: plain BN of this replica's input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BatchNorm.forward(self, x)


_LOCAL_TWIN = {CrossReplicaBatchNorm: _LocalCrossReplicaBatchNorm, nn.SyncBatchNorm: _LocalSyncBatchNorm}


class replica_local:
    """Context: the synchronized BN layers of ``model`` normalize this replica's input alone.

    For rank 0's measurements (test evaluation, shift monitor, ICS probes, Alg. 2
    recomputation), which run in one process on the full model: in training mode a
    synchronized layer would otherwise wait for the other replicas' statistics. Rank 0 gives
    the probes the whole global mini-batch, so the statistics are still those of m examples.
    The layers' class is swapped for the duration (no process-group object is involved, so
    the probes may deep-copy the model); parameters and buffers are the same tensors.
    """

    def __init__(self, model: nn.Module):
        self.layers = [m for m in model.modules() if type(m) in _LOCAL_TWIN]

    def __enter__(self):
        for m in self.layers:
            m.__class__ = _LOCAL_TWIN[type(m)]
        return self

    def __exit__(self, *exc):
        back = {v: k for k, v in _LOCAL_TWIN.items()}
        for m in self.layers:
            m.__class__ = back.get(type(m), type(m))
        return False
