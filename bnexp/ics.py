"""Measurements of internal covariate shift (ICS), from two views.

1. The distribution view of the BN paper (Ioffe & Szegedy 2015, Sec. 1-2): ICS is
   "the change in the distribution of network activations due to the change in
   network parameters during training". :func:`wasserstein1`, :func:`per_unit_shift`
   and :class:`DistributionShiftTracker` quantify how far the distribution of a
   layer's values (e.g. the input to its nonlinearity, as captured by
   :meth:`bnexp.monitor.ShiftMonitor.capture` on a fixed probe set) moved since the
   previous and since the first snapshot. Cheap: one sort of at most ``max_values``
   values and one pass over the activations per layer.

2. The optimization view of Santurkar, Tsipras, Ilyas & Madry, "How Does Batch
   Normalization Help Optimization?" (NeurIPS 2018):

   * :func:`gradient_ics` -- their Def. 2.1 (Sec. 2.2, Fig. 3): how much the gradient
     of a layer's weights changes when the layers before it take their update.
   * :func:`landscape_probe` -- the loss-landscape smoothness of Sec. 3.1, Fig. 4:
     loss variation, gradient predictiveness and "effective" beta-smoothness along
     the gradient direction.
   * :class:`NoisyBatchNorm` -- the "noisy BN" of Sec. 2.1, Fig. 2: BN followed by
     per-activation noise whose distribution changes every step, i.e. BN with
     deliberately injected distributional instability.

The gradient-based measurements work on ``copy.deepcopy`` copies of the model in
training mode (BN with batch statistics, dropout active) and leave the model, its
gradients, its BN running buffers, the optimizer and torch's global RNG state as
they found them.

Shapes: a fully-connected activation is (P, d) -- the units are the d features; a
convolutional activation is (P, C, H, W) -- the units are the C channels, each
pooled over (P, H, W), as BN normalizes them (BN paper Sec. 3.2).
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Sequence

import torch
from torch import nn

from bnexp.models import hidden_layers

__all__ = [
    "wasserstein1",
    "unit_moments",
    "per_unit_shift",
    "DistributionShiftTracker",
    "gradient_ics",
    "layer_param_groups",
    "landscape_probe",
    "sample_noise",
    "NoisyBatchNorm",
]


# ----------------------------------------------------------------------------------------------
# 1. Distribution-shift metrics
# ----------------------------------------------------------------------------------------------

def _w1_sorted(a: torch.Tensor, b: torch.Tensor) -> float:
    """W1 between two sorted, non-empty 1-D float64 tensors on the same device."""
    n, m = a.numel(), b.numel()
    if n == m:
        return float((a - b).abs().mean())
    z = torch.cat([a, b]).sort().values
    dz = z[1:] - z[:-1]
    left = z[:-1]
    # On [z_k, z_{k+1}) both empirical CDFs are constant: F(z_k) = #{values <= z_k} / size.
    fa = torch.searchsorted(a, left, right=True).to(torch.float64) / n
    fb = torch.searchsorted(b, left, right=True).to(torch.float64) / m
    return float(((fa - fb).abs() * dz).sum())


def _check_1d(name: str, t: torch.Tensor) -> None:
    if t.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values")


def wasserstein1(a: torch.Tensor, b: torch.Tensor) -> float:
    """1-D Wasserstein-1 (earth mover's) distance between two empirical distributions.

    With F_a, F_b the empirical CDFs of the samples ``a`` and ``b``,

        W1(a, b) = integral_0^1 |F_a^{-1}(u) - F_b^{-1}(u)| du = integral |F_a(t) - F_b(t)| dt,

    computed exactly: the merged sorted samples split the real line into intervals
    on which both CDFs are constant. For equal sizes this reduces to
    mean_i |sort(a)_i - sort(b)_i|. In the units of the values (for pre-activations:
    activation units); W1(a, a + c) = |c|. Used as the distribution-shift measure of
    ICS in the BN paper's sense (Ioffe & Szegedy 2015, Sec. 2: the change of a
    layer's input distribution during training).

    Args:
        a: (n,) sample, any float dtype/device.
        b: (m,) sample; n and m may differ. Computed in float64 on a's device.

    Returns:
        W1 as a Python float, >= 0.

    Raises:
        ValueError: if an input is not 1-D, is empty, or holds NaN/inf.

    Cost: O((n + m) log(n + m)) time, O(n + m) memory (one sort of each input and,
    for n != m, one of the merged sample).
    """
    _check_1d("a", a)
    _check_1d("b", b)
    a64 = a.detach().to(torch.float64).sort().values
    b64 = b.detach().to(device=a64.device, dtype=torch.float64).sort().values
    return _w1_sorted(a64, b64)


def _units_last(x: torch.Tensor) -> torch.Tensor:
    """(P, d) -> (P, d); (P, C, H, W) -> (P*H*W, C): one column per unit."""
    if x.dim() == 2:
        return x
    if x.dim() == 4:
        return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
    raise ValueError(f"expected a (P, d) or (P, C, H, W) activation, got shape {tuple(x.shape)}")


def unit_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-unit mean and (biased, population) standard deviation of an activation.

    Args:
        x: (P, d) -- units are the d features, statistics over the P rows; or
            (P, C, H, W) -- units are the C channels, statistics over (P, H, W)
            (the BN paper's convolutional pooling, Sec. 3.2).

    Returns:
        (mean, std): two float64 (d,) or (C,) tensors on x's device, in the units of x.

    Raises:
        ValueError: for other ranks or when there are no values per unit.

    Cost: one pass over x.
    """
    v = _units_last(x.detach()).to(torch.float64)
    if v.shape[0] == 0:
        raise ValueError("no values per unit (P = 0)")
    mean = v.mean(dim=0)
    std = v.std(dim=0, unbiased=False)
    return mean, std


def _shift_from_moments(mean_ref, std_ref, mean_now, std_now, eps: float) -> dict[str, float]:
    if mean_ref.shape != mean_now.shape:
        raise ValueError(f"unit counts differ: reference has {tuple(mean_ref.shape)}, "
                         f"current has {tuple(mean_now.shape)}")
    mean_now = mean_now.to(mean_ref.device)
    std_now = std_now.to(mean_ref.device)
    sr = std_ref.clamp_min(eps)
    sn = std_now.clamp_min(eps)
    return {"mean_shift": float(((mean_now - mean_ref).abs() / sr).mean()),
            "log_std_ratio": float(torch.log(sn / sr).abs().mean())}


def per_unit_shift(x_ref: torch.Tensor, x_now: torch.Tensor, eps: float = 1e-6) -> dict[str, float]:
    """Per-unit shift of the first two moments of an activation (BN paper view of ICS).

    For every unit j (feature of a (P, d) activation, channel of a (P, C, H, W) one,
    pooled over P, H, W) with mean mu_j and population std sigma_j:

        mean_shift    = mean_j |mu_now_j - mu_ref_j| / max(sigma_ref_j, eps)
        log_std_ratio = mean_j |log(max(sigma_now_j, eps) / max(sigma_ref_j, eps))|

    ``mean_shift`` is in units of the reference std (dimensionless); ``log_std_ratio``
    is in nats (log(2) ~ 0.69 means the spread doubled or halved). These are exactly
    the first- and second-moment changes that BN removes (Ioffe & Szegedy 2015,
    Sec. 2-3: "fixed means and variances of layer inputs").

    Args:
        x_ref: reference activation, (P, d) or (P, C, H, W).
        x_now: current activation with the same number of units; P (and H, W) may differ.
        eps: floor for the stds, so constant units give finite values.

    Returns:
        {"mean_shift": float, "log_std_ratio": float}, both >= 0.

    Raises:
        ValueError: for ranks other than 2 and 4, or if the unit counts differ.

    Cost: one pass over each input.
    """
    mr, sr = unit_moments(x_ref)
    mn, sn = unit_moments(x_now)
    return _shift_from_moments(mr, sr, mn, sn, eps)


def _pooled_subsample(x: torch.Tensor, max_values: int) -> torch.Tensor:
    """At most ``max_values`` of x's values, by a fixed stride over the examples (dim 0), so
    every unit stays equally represented; a flat stride only if one example alone is too big."""
    x = x.detach()
    per_example = max(1, x[0].numel()) if x.shape[0] > 0 else 1
    if x.numel() > max_values and x.shape[0] > 1:
        keep = max(1, max_values // per_example)
        stride = -(-x.shape[0] // keep)
        x = x[::stride]
    flat = x.reshape(-1)
    if flat.numel() > max_values:
        flat = flat[:: -(-flat.numel() // max_values)]
    return flat


class DistributionShiftTracker:
    """Distribution shift of each layer's values since the previous and the first snapshot.

    Keeps per layer name two snapshots -- the first one and the previous one -- each
    holding the sorted pooled values (at most ``max_values``, a fixed stride subsample
    over the examples, so feed the same probe set every time) and the per-unit means
    and stds. Each :meth:`update` compares the new values against both snapshots with
    :func:`wasserstein1` (all units pooled; in activation units) and :func:`per_unit_shift`
    (per unit; dimensionless / nats), then makes the new values the previous snapshot.
    This measures ICS in the sense of the BN paper (Ioffe & Szegedy 2015, Sec. 2: the
    change in the distributions of internal nodes during training), e.g. on the
    inputs to the nonlinearities captured by :meth:`bnexp.monitor.ShiftMonitor.capture`.

    Args:
        max_values: cap on the pooled values stored per snapshot (>= 1).
        eps: std floor of :func:`per_unit_shift`.

    Snapshots live on the CPU (float32 values, float64 moments): memory per layer is
    about 2 * (4 * max_values + 16 * units) bytes.

    Raises:
        ValueError: for max_values < 1.
    """

    KEYS = ("w1_prev", "w1_first", "mean_shift_prev", "mean_shift_first",
            "log_std_ratio_prev", "log_std_ratio_first")

    def __init__(self, max_values: int = 100_000, eps: float = 1e-6):
        if max_values < 1:
            raise ValueError(f"max_values must be >= 1, got {max_values}")
        self.max_values = int(max_values)
        self.eps = float(eps)
        self.first: dict[str, dict] = {}
        self.prev: dict[str, dict] = {}

    def _snapshot(self, x: torch.Tensor, step: int) -> dict:
        mean, std = unit_moments(x)
        values = _pooled_subsample(x, self.max_values).to(torch.float32).sort().values
        if values.numel() == 0:
            raise ValueError("a layer has no values")
        if not bool(torch.isfinite(values).all()):
            raise ValueError("a layer's values contain NaN or infinite values")
        return {"values": values.cpu(), "mean": mean.cpu(), "std": std.cpu(), "step": int(step)}

    def _compare(self, ref: dict, now: dict) -> tuple[float, dict[str, float]]:
        w1 = _w1_sorted(ref["values"].to(torch.float64), now["values"].to(torch.float64))
        return w1, _shift_from_moments(ref["mean"], ref["std"], now["mean"], now["std"], self.eps)

    def update(self, layer_values: dict[str, torch.Tensor], step: int) -> dict[str, dict[str, float]]:
        """Compare new values of each layer with its previous and first snapshots.

        Args:
            layer_values: {layer name: (P, d) or (P, C, H, W) tensor}, any device.
                A name seen for the first time gets its first snapshot now.
            step: the training step (recorded with the snapshots).

        Returns:
            {layer name: {"w1_prev", "w1_first", "mean_shift_prev", "mean_shift_first",
            "log_std_ratio_prev", "log_std_ratio_first"}} (floats); for a layer's first
            update all six are 0.0 (the first snapshot is the current one).

        Raises:
            ValueError: bad rank, NaN/inf values, or a layer whose unit count changed.

        Cost per layer: one pass over the values, a sort of <= max_values values
        and two W1 evaluations (O(max_values log max_values)).
        """
        out: dict[str, dict[str, float]] = {}
        for name, x in layer_values.items():
            snap = self._snapshot(x, step)
            if name not in self.first:
                self.first[name] = snap
                self.prev[name] = snap
                out[name] = {k: 0.0 for k in self.KEYS}
                continue
            w1_p, sh_p = self._compare(self.prev[name], snap)
            w1_f, sh_f = self._compare(self.first[name], snap)
            out[name] = {"w1_prev": w1_p, "w1_first": w1_f,
                         "mean_shift_prev": sh_p["mean_shift"], "mean_shift_first": sh_f["mean_shift"],
                         "log_std_ratio_prev": sh_p["log_std_ratio"],
                         "log_std_ratio_first": sh_f["log_std_ratio"]}
            self.prev[name] = snap
        return out

    def layer_names(self) -> list[str]:
        """Names of the layers with a snapshot, in first-seen order."""
        return list(self.first)

    def state_dict(self) -> dict:
        """Snapshots and settings for checkpoints (all tensors cloned, on the CPU)."""
        def snap_state(s: dict) -> dict:
            return {"values": s["values"].detach().cpu().clone(), "mean": s["mean"].detach().cpu().clone(),
                    "std": s["std"].detach().cpu().clone(), "step": int(s["step"])}
        return {"max_values": self.max_values, "eps": self.eps,
                "first": {k: snap_state(v) for k, v in self.first.items()},
                "prev": {k: snap_state(v) for k, v in self.prev.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (tensors moved to the CPU).

        Raises:
            KeyError: if a key is missing.
        """
        self.max_values = int(state["max_values"])
        self.eps = float(state["eps"])

        def snap(s: dict) -> dict:
            return {"values": s["values"].detach().cpu().to(torch.float32).clone(),
                    "mean": s["mean"].detach().cpu().to(torch.float64).clone(),
                    "std": s["std"].detach().cpu().to(torch.float64).clone(), "step": int(s["step"])}
        self.first = {k: snap(v) for k, v in state["first"].items()}
        self.prev = {k: snap(v) for k, v in state["prev"].items()}


# ----------------------------------------------------------------------------------------------
# Shared helpers for the gradient-based measurements
# ----------------------------------------------------------------------------------------------

class _RngKeeper:
    """Saves torch's global CPU (and initialized CUDA) RNG states; :meth:`reset` puts them back.

    Resetting before every forward pass gives each pass the same dropout masks, so the
    compared gradients differ only by the parameters; resetting at the end leaves the
    caller's RNG as it was."""

    def __init__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = (torch.cuda.get_rng_state_all()
                     if torch.cuda.is_available() and torch.cuda.is_initialized() else None)

    def reset(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def _fresh_copy(model: nn.Module) -> nn.Module:
    """A deep copy in training mode with no gradients."""
    m = copy.deepcopy(model)
    m.train()
    for p in m.parameters():
        p.grad = None
    return m


def _loss_and_grads(m: nn.Module, loss_fn: Callable, x, y, rng: _RngKeeper) -> torch.Tensor:
    rng.reset()
    loss = loss_fn(m(x), y)
    if loss.dim() != 0:
        raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
    loss.backward()
    return loss.detach()


# ----------------------------------------------------------------------------------------------
# 2. Gradient-based ICS (Santurkar et al. 2018, Def. 2.1)
# ----------------------------------------------------------------------------------------------

def _replica_optimizer(optimizer: torch.optim.Optimizer, model: nn.Module,
                       copy_model: nn.Module) -> torch.optim.Optimizer:
    """An optimizer of the same class over ``copy_model``'s parameters with the same param
    groups, hyper-parameters and (deep-copied) state as ``optimizer`` over ``model``."""
    names = {id(p): n for n, p in model.named_parameters()}
    copy_params = dict(copy_model.named_parameters())
    groups = []
    for g in optimizer.param_groups:
        params = []
        for p in g["params"]:
            if id(p) not in names:
                raise ValueError("the optimizer holds a parameter that is not in the model")
            params.append(copy_params[names[id(p)]])
        groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": params})
    cls = type(optimizer)
    try:
        replica = cls(groups, **optimizer.defaults)
    except TypeError:
        replica = cls(groups)
    # Deep copy: Optimizer.state_dict() returns the live state tensors (e.g. momentum
    # buffers), which the replica's step would otherwise update in place.
    replica.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return replica


def gradient_ics(model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 x: torch.Tensor, y: torch.Tensor, optimizer: torch.optim.Optimizer,
                 layer_param_names: Sequence[Sequence[str]], weight_names: Sequence[str]) -> list[dict]:
    """Gradient-based internal covariate shift of every layer (Santurkar et al. 2018, Def. 2.1).

    For layer i with weight W_i (Sec. 2.2, Fig. 3):

        G_i  = dL/dW_i (W_0, ..., W_{k-1}; x, y)                 at the current parameters
        G'_i = dL/dW_i (W'_0, ..., W'_{i-1}, W_i, ..., W_{k-1}; x, y)

    where W'_j are the parameters after ONE step of ``optimizer`` from the current
    parameters on the batch (x, y): the gradient layer i sees after the layers before
    it have been updated, with its own and later layers unchanged. The ICS of layer i
    is ||G_i - G'_i||_2 (plus the cosine of the angle between them). "Layer j's
    parameters" are all names in ``layer_param_names[j]`` (e.g. the affine weight and
    the BN gamma/beta); parameters in no layer keep their current values.

    The update is the optimizer's real one: an optimizer of the same class with the same
    param groups and hyper-parameters is built over a copy of the model and loaded with
    ``optimizer.state_dict()`` (so momentum buffers, Adam moments, step counts, weight
    decay and the current lr are reproduced), then stepped on the gradient of the batch.
    Gradient clipping or other gradient edits done outside the optimizer are not applied.

    All passes run on ``copy.deepcopy(model)`` copies in training mode (BN with batch
    statistics), each starting from the same global RNG state (identical dropout masks)
    and the same module state (e.g. :class:`NoisyBatchNorm` generators), so G and G'
    differ only by the parameters. Afterwards the model's parameters, gradients, BN
    running buffers and training flag, the optimizer (param groups and state) and
    torch's global RNG state are unchanged.

    Args:
        model: the network.
        loss_fn: loss_fn(model(x), y) -> scalar loss L.
        x, y: the mini-batch (on the model's device).
        optimizer: the optimizer training ``model`` (its params must be model parameters).
        layer_param_names: layer_param_names[i] = names (from ``model.named_parameters()``)
            of the parameters of layer i, input to output; see :func:`layer_param_groups`.
        weight_names: weight_names[i] = name of W_i, one of layer_param_names[i].

    Returns:
        one dict per layer, input to output: {"l2": ||G_i - G'_i||_2, "cos": cos(G_i, G'_i)
        (NaN if either is zero), "g_norm": ||G_i||_2} -- floats in gradient units (loss per
        weight unit), computed in float64. For layer 0, G'_0 = G_0 exactly (nothing before
        it changes): l2 = 0, cos = 1.

    Raises:
        ValueError: mismatched list lengths, unknown or repeated parameter names, a weight
            not in its layer, a weight with no gradient, a non-scalar loss, or an optimizer
            parameter that is not in the model.

    Cost: k forward/backward passes on the batch for k layers (one for G, one for each
    G'_i with i >= 1; G'_0 reuses G), one optimizer step and k deep copies of the model
    (one alive at a time, plus a copy of the updated parameters of layers 0..k-2 and of
    the optimizer state) -- roughly k training steps.
    """
    if len(layer_param_names) != len(weight_names):
        raise ValueError(f"{len(layer_param_names)} layers but {len(weight_names)} weight names")
    params = dict(model.named_parameters())
    seen: set[str] = set()
    for i, (names, w) in enumerate(zip(layer_param_names, weight_names)):
        for n in names:
            if n not in params:
                raise ValueError(f"layer {i}: no parameter named {n!r} in the model")
            if n in seen:
                raise ValueError(f"parameter {n!r} is assigned to more than one layer")
            seen.add(n)
        if w not in names:
            raise ValueError(f"layer {i}: weight {w!r} is not one of its parameters {list(names)}")

    rng = _RngKeeper()
    try:
        # G at the current parameters, then the real update on the same copy.
        work = _fresh_copy(model)
        _loss_and_grads(work, loss_fn, x, y, rng)
        work_params = dict(work.named_parameters())
        g_now = []
        for w in weight_names:
            grad = work_params[w].grad
            if grad is None:
                raise ValueError(f"weight {w!r} received no gradient")
            g_now.append(grad.detach().to(torch.float64).clone())
        replica = _replica_optimizer(optimizer, model, work)
        replica.step()
        updated = {n: work_params[n].detach().clone()
                   for names in layer_param_names[:-1] for n in names}
        del replica, work, work_params

        results = []
        for i, w in enumerate(weight_names):
            g = g_now[i]
            if i == 0:
                g_prime = g
            else:
                m = _fresh_copy(model)
                m_params = dict(m.named_parameters())
                with torch.no_grad():
                    for names in layer_param_names[:i]:
                        for n in names:
                            m_params[n].copy_(updated[n])
                _loss_and_grads(m, loss_fn, x, y, rng)
                if m_params[w].grad is None:
                    raise ValueError(f"weight {w!r} received no gradient")
                g_prime = m_params[w].grad.detach().to(torch.float64)
                del m, m_params
            gn, gpn = float(g.norm()), float(g_prime.norm())
            cos = (float((g * g_prime).sum()) / (gn * gpn)) if gn > 0 and gpn > 0 else math.nan
            results.append({"l2": float((g - g_prime).norm()),
                            "cos": max(-1.0, min(1.0, cos)) if not math.isnan(cos) else cos,
                            "g_norm": gn})
        return results
    finally:
        rng.reset()


def layer_param_groups(model: nn.Module) -> tuple[list[list[str]], list[str]]:
    """``layer_param_names`` and ``weight_names`` for :func:`gradient_ics` on a bnexp network.

    One group per :class:`bnexp.models.HiddenLayer` (input to output) holding all its
    parameters (affine weight/bias, BN gamma/beta), with the affine weight as W_i; then,
    if any parameters are left (the classifier), one last group of them whose W is the
    first left-over parameter with >= 2 dimensions (the group is dropped if there is none).

    Args:
        model: e.g. a :class:`bnexp.models.MLP` or :class:`bnexp.models.CNN`.

    Returns:
        (layer_param_names, weight_names), names as in ``model.named_parameters()``.

    Raises:
        ValueError: if the model has no hidden layers.

    Cost: negligible (walks the module tree).
    """
    qual = {id(m): n for n, m in model.named_modules()}
    groups: list[list[str]] = []
    weights: list[str] = []
    used: set[str] = set()
    layers = hidden_layers(model)
    if not layers:
        raise ValueError("the model has no hidden layers")
    for _, layer in layers:
        prefix = qual[id(layer)]
        names = [f"{prefix}.{n}" if prefix else n for n, _ in layer.named_parameters()]
        groups.append(names)
        used.update(names)
        wprefix = qual[id(layer.affine)]
        weights.append(f"{wprefix}.weight")
    rest = [(n, p) for n, p in model.named_parameters() if n not in used]
    cands = [n for n, p in rest if p.dim() >= 2]
    if cands:
        groups.append([n for n, _ in rest])
        weights.append(cands[0])
    return groups, weights


# ----------------------------------------------------------------------------------------------
# 3. Landscape smoothness (Santurkar et al. 2018, Sec. 3.1, Fig. 4)
# ----------------------------------------------------------------------------------------------

def landscape_probe(model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    x: torch.Tensor, y: torch.Tensor, step_sizes: Sequence[float]) -> dict:
    """Smoothness of the loss landscape along the gradient (Santurkar et al. 2018, Sec. 3.1, Fig. 4).

    With w all trainable parameters (flattened), L the loss on the batch (x, y) and
    g = grad L(w), for each step size eta the loss and gradient at w - eta g are taken:

        loss_variation      = max - min of {L(w - eta g) : eta in {0} + step_sizes}
        grad_predictiveness = max_eta ||grad L(w) - grad L(w - eta g)||_2
        beta_smoothness     = max_eta ||grad L(w) - grad L(w - eta g)||_2 / ||eta g||_2

    The first is the "variation in loss" (Lipschitzness of the loss), the second the
    "l2 changes in gradient" (gradient predictiveness) and the third the "effective
    beta-smoothness" of Fig. 4. For a quadratic L = 1/2 w^T A w, beta_smoothness = ||A g|| / ||g||
    <= lambda_max(A). Units: loss units; loss per parameter unit; loss per parameter unit^2.

    Every evaluation runs on a fresh ``copy.deepcopy(model)`` in training mode (BN with
    batch statistics) starting from the same global RNG state (same dropout masks); the
    model, its gradients, BN buffers and training flag and torch's RNG state are unchanged
    afterwards, and no optimizer is involved.

    Args:
        model: the network.
        loss_fn: loss_fn(model(x), y) -> scalar loss.
        x, y: the mini-batch.
        step_sizes: the etas, each finite and >= 0 (eta = 0 adds nothing new).

    Returns:
        {"loss_variation": float, "grad_predictiveness": float, "beta_smoothness": float
        (NaN if g = 0 or no eta > 0), "loss": L(w), "grad_norm": ||g||_2,
        "step_sizes": [0.0, *step_sizes], "losses": [L(w), L(w - eta_1 g), ...]} -- the
        lists aligned, their first entry the current point. Norms in float64.

    Raises:
        ValueError: empty or negative/non-finite step sizes, a non-scalar loss, or a model
            with no trainable parameters.

    Cost: 1 + len(step_sizes) forward/backward passes and deep copies (one alive at a time).
    """
    etas = [float(e) for e in step_sizes]
    if not etas:
        raise ValueError("step_sizes is empty")
    if any(not math.isfinite(e) or e < 0 for e in etas):
        raise ValueError(f"step sizes must be finite and >= 0, got {etas}")
    rng = _RngKeeper()
    try:
        m = _fresh_copy(model)
        trainable = [p for p in m.parameters() if p.requires_grad]
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        loss0 = float(_loss_and_grads(m, loss_fn, x, y, rng))
        g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                       for p in trainable])
        w = torch.cat([p.detach().reshape(-1) for p in trainable])
        g64 = g.to(torch.float64)
        g_norm = float(g64.norm())
        del m, trainable

        losses = [loss0]
        diffs, betas = [], []
        for eta in etas:
            m = _fresh_copy(model)
            trainable = [p for p in m.parameters() if p.requires_grad]
            with torch.no_grad():
                torch.nn.utils.vector_to_parameters(w - eta * g, trainable)
            losses.append(float(_loss_and_grads(m, loss_fn, x, y, rng)))
            g_eta = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                               for p in trainable]).to(torch.float64)
            diff = float((g64 - g_eta).norm())
            diffs.append(diff)
            if eta > 0 and g_norm > 0:
                betas.append(diff / (eta * g_norm))
            del m, trainable
        return {"loss_variation": max(losses) - min(losses),
                "grad_predictiveness": max(diffs),
                "beta_smoothness": max(betas) if betas else math.nan,
                "loss": loss0, "grad_norm": g_norm,
                "step_sizes": [0.0] + etas, "losses": losses}
    finally:
        rng.reset()


# ----------------------------------------------------------------------------------------------
# 4. Noisy BN (Santurkar et al. 2018, Sec. 2.1, Fig. 2)
# ----------------------------------------------------------------------------------------------

def sample_noise(shape: Sequence[int], unit_dim: int, generator: torch.Generator, a: float = 0.5,
                 b: float = 1.25, c: float = 0.1, d: float = 0.1, dtype: torch.dtype = torch.float32
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw one step's "noisy BN" noise (Santurkar et al. 2018, Sec. 2.1, Fig. 2).

    Per unit j (index along ``unit_dim``) the step's noise distribution is drawn,

        mu_t[j] ~ U(-a, a),   sigma_t[j] ~ U(1, b),

    then independently per activation (every example and position of unit j)

        m ~ U(mu_t[j] - c, mu_t[j] + c),   s ~ N(sigma_t[j], d^2)  (d is the std),

    so that the noisy output s * y + m has a non-zero mean and non-unit scale that
    change every step.

    Args:
        shape: shape of the activation, e.g. (N, d) or (N, C, H, W).
        unit_dim: the unit (feature / channel) dimension, usually 1.
        generator: the torch.Generator to draw from; the tensors are made on its device.
        a, b, c, d: the noise ranges above (a, c, d >= 0, b >= 1).
        dtype: floating dtype of the returned tensors.

    Returns:
        (s, m, mu_t, sigma_t): s and m of ``shape``; mu_t and sigma_t of shape
        (shape[unit_dim],).

    Raises:
        ValueError: invalid ranges or unit_dim.

    Cost: 2 * prod(shape) + 2 * units random numbers (one uniform and one normal per activation).
    """
    _check_noise_ranges(a, b, c, d)
    shape = tuple(int(s) for s in shape)
    if not -len(shape) <= unit_dim < len(shape):
        raise ValueError(f"unit_dim {unit_dim} out of range for shape {shape}")
    unit_dim = unit_dim % len(shape)
    units = shape[unit_dim]
    dev = generator.device
    mu_t = (torch.rand(units, generator=generator, device=dev, dtype=dtype) * 2 - 1) * a
    sigma_t = 1 + torch.rand(units, generator=generator, device=dev, dtype=dtype) * (b - 1)
    view = [1] * len(shape)
    view[unit_dim] = units
    m = mu_t.view(view) + (torch.rand(shape, generator=generator, device=dev, dtype=dtype) * 2 - 1) * c
    s = sigma_t.view(view) + torch.randn(shape, generator=generator, device=dev, dtype=dtype) * d
    return s, m, mu_t, sigma_t


def _check_noise_ranges(a: float, b: float, c: float, d: float) -> None:
    if not (a >= 0 and b >= 1 and c >= 0 and d >= 0) or not all(math.isfinite(v) for v in (a, b, c, d)):
        raise ValueError(f"noisy BN needs finite a >= 0, b >= 1, c >= 0, d >= 0; got a={a}, b={b}, c={c}, d={d}")


class NoisyBatchNorm(nn.Module):
    """BN followed by time-varying noise: the "noisy BN" of Santurkar et al. 2018, Sec. 2.1, Fig. 2.

    In training mode, y = bn(x) and then y <- s * y + m with the noise of
    :func:`sample_noise` drawn afresh at every forward call: per unit j (feature of a
    (N, d) input, channel of an (N, C, H, W) one) mu_t ~ U(-a, a), sigma_t ~ U(1, b); per
    activation m ~ U(mu_t - c, mu_t + c), s ~ N(sigma_t, d^2). The noise is a constant
    for autograd. In eval mode the output is exactly bn(x) (running statistics, no noise).

    The noise comes from the module's own seeded ``torch.Generator`` (never torch's
    global RNG), created lazily on the device of the first training input. If a later
    input is on another device, a new generator is made there, seeded from the old
    one (deterministic, but not the same stream as on the first device).

    The wrapped BN is the sub-module ``bn``, so the state_dict holds exactly the BN's
    parameters and buffers under a ``bn.`` prefix (no noise state): the generator is
    saved and restored with :meth:`noise_state` / :meth:`load_noise_state`.

    Args:
        bn: the BN module to wrap (``nn.BatchNorm1d``/``2d`` or ``ReferenceBatchNorm``).
        a, b, c, d: noise ranges (defaults 0.5, 1.25, 0.1, 0.1), a, c, d >= 0, b >= 1.
        seed: seed of the noise generator.

    Attributes:
        last_mu, last_sigma: the (units,) mu_t and sigma_t of the latest training
            forward call (None before the first).

    Raises:
        ValueError: invalid ranges; inputs with fewer than 2 dimensions (in forward).

    Cost: BN's cost plus 2 random numbers and 2 multiply-adds per activation per step.
    """

    def __init__(self, bn: nn.Module, a: float = 0.5, b: float = 1.25, c: float = 0.1, d: float = 0.1,
                 seed: int = 0):
        super().__init__()
        _check_noise_ranges(a, b, c, d)
        self.bn = bn
        self.a, self.b, self.c, self.d = float(a), float(b), float(c), float(d)
        self.seed = int(seed)
        self._generator: torch.Generator | None = None
        self.last_mu: torch.Tensor | None = None
        self.last_sigma: torch.Tensor | None = None

    def _generator_for(self, device: torch.device) -> torch.Generator:
        g = self._generator
        if g is None:
            g = torch.Generator(device=device)
            g.manual_seed(self.seed)
        elif g.device != device:
            new_seed = int(torch.randint(0, 2**62, (1,), generator=g, device=g.device).item())
            g = torch.Generator(device=device)
            g.manual_seed(new_seed)
        self._generator = g
        return g

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(x)
        if not self.training:
            return y
        if x.dim() < 2:
            raise ValueError(f"expected an input with a unit dimension 1, got shape {tuple(x.shape)}")
        gen = self._generator_for(y.device)
        s, m, mu_t, sigma_t = sample_noise(y.shape, 1, gen, self.a, self.b, self.c, self.d, dtype=y.dtype)
        self.last_mu, self.last_sigma = mu_t.detach(), sigma_t.detach()
        return s * y + m

    def noise_state(self) -> dict:
        """The generator's state for checkpoints: {"seed": int, "device": str or None,
        "state": CPU ByteTensor or None} (None before the first training forward)."""
        g = self._generator
        return {"seed": self.seed, "device": None if g is None else str(g.device),
                "state": None if g is None else g.get_state().clone()}

    def load_noise_state(self, state: dict) -> None:
        """Restore :meth:`noise_state`: the next training step draws what it would have drawn.

        Raises:
            KeyError: missing keys; RuntimeError (from torch) if the saved device is unavailable.
        """
        self.seed = int(state["seed"])
        if state["state"] is None:
            self._generator = None
            return
        g = torch.Generator(device=torch.device(state["device"]))
        g.set_state(state["state"].cpu())
        self._generator = g

    def extra_repr(self) -> str:
        return f"a={self.a}, b={self.b}, c={self.c}, d={self.d}, seed={self.seed}"
