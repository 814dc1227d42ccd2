"""Gradient-based ICS: the optimization view of Santurkar, Tsipras, Ilyas & Madry, "How Does
Batch Normalization Help Optimization?" (NeurIPS 2018).

* :func:`gradient_ics` -- their Def. 2.1 (Sec. 2.2, Fig. 3): how much the gradient of a
  layer's weights changes when the layers before it take their update, absolute, relative
  to the gradient and per unit of the earlier layers' relative movement.

It works on ``copy.deepcopy`` copies of the model in training mode (BN with batch
statistics, dropout active) and leaves the model, its gradients, its BN running buffers,
the optimizer and torch's global RNG state as it found them. The loss-landscape smoothness
of their Sec. 3.1, Fig. 4 is in :mod:`bnexp.train.ics.landscape`, which shares this module's
copy and RNG helpers.
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Sequence

import torch
from torch import nn

from bnexp.nets.models import hidden_layers


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
    and the same module state (e.g. :class:`bnexp.nets.bn.NoisyBatchNorm` generators), so G and G'
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
        one dict per layer, input to output: {"l2": ||G_i - G'_i||_2 and "g_norm": ||G_i||_2
        (gradient units: loss per weight unit), "l2_rel": ||G_i - G'_i||_2 / ||G_i||_2
        (dimensionless; NaN if G_i = 0), "cos": cos(G_i, G'_i) (NaN if either is zero),
        "trivial": bool}, computed in float64. ``l2_rel`` is the scale-free number to compare
        across networks: ``l2`` shrinks with the gradient itself, so a network whose
        gradients vanish (a plateau) scores a small ``l2`` for scale reasons alone. For
        layer 0, G'_0 = G_0 by definition (nothing before it changes): l2 = l2_rel = 0,
        cos = 1, and "trivial" is True (the only such layer); leave it out of summaries.
        Per unit of movement: "move_rel" = ||W'_<i - W_<i||_2 / ||W_<i||_2, the relative
        movement of all parameters of layers 0..i-1 (every name in their
        ``layer_param_names``, flattened together) over the same update that gives G'_i
        (dimensionless; NaN for layer 0, which has no earlier layers, and when ||W_<i|| = 0),
        and "l2_rel_per_move" = l2_rel / move_rel (NaN when move_rel is 0 or NaN). ``l2_rel``
        grows with how far the earlier layers moved -- for a small step, G' - G is about
        (d^2 L / dW_i dW_<i) Delta W_<i -- so a network that barely moves them (a plateau, a
        small rate) scores a small ``l2_rel`` without being stable; ``l2_rel_per_move`` is the
        gradient change per relative movement of the earlier layers (docs/ics/measurements.md). It is
        unchanged when the loss is multiplied by k and the rate divided by k (same step), like
        ``l2_rel``; unlike ``l2_rel`` it does not fall to 0 as the step does.

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
        before = {n: work_params[n].detach().to(torch.float64).clone()
                  for names in layer_param_names[:-1] for n in names}
        replica = _replica_optimizer(optimizer, model, work)
        replica.step()
        updated = {n: work_params[n].detach().clone()
                   for names in layer_param_names[:-1] for n in names}
        del replica, work, work_params
        # ||Delta W_<i||^2 and ||W_<i||^2: sums over the layers before i of all their parameters
        moved_sq, norm_sq = [0.0], [0.0]
        for names in layer_param_names[:-1]:
            moved_sq.append(moved_sq[-1] + sum(float((updated[n].to(torch.float64) - before[n]).pow(2).sum())
                                               for n in names))
            norm_sq.append(norm_sq[-1] + sum(float(before[n].pow(2).sum()) for n in names))
        del before

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
            l2 = float((g - g_prime).norm())
            l2_rel = l2 / gn if gn > 0 else math.nan
            move_rel = math.sqrt(moved_sq[i]) / math.sqrt(norm_sq[i]) if norm_sq[i] > 0 else math.nan
            results.append({"l2": l2, "l2_rel": l2_rel,
                            "cos": max(-1.0, min(1.0, cos)) if not math.isnan(cos) else cos,
                            "g_norm": gn, "move_rel": move_rel,
                            "l2_rel_per_move": l2_rel / move_rel if move_rel > 0 else math.nan,
                            "trivial": i == 0})
        return results
    finally:
        rng.reset()


def layer_param_groups(model: nn.Module) -> tuple[list[list[str]], list[str]]:
    """``layer_param_names`` and ``weight_names`` for :func:`gradient_ics` on a bnexp network.

    One group per :class:`bnexp.nets.models.HiddenLayer` (input to output) holding all its
    parameters (affine weight/bias, BN gamma/beta), with the affine weight as W_i; then,
    if any parameters are left (the classifier), one last group of them whose W is the
    first left-over parameter with >= 2 dimensions (the group is dropped if there is none).

    Args:
        model: e.g. a :class:`bnexp.nets.models.MLP` or :class:`bnexp.nets.models.CNN`.

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
