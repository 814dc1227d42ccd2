"""Gradient-based ICS and loss-landscape smoothness: the optimization view of Santurkar,
Tsipras, Ilyas & Madry, "How Does Batch Normalization Help Optimization?" (NeurIPS 2018).

* :func:`gradient_ics` -- their Def. 2.1 (Sec. 2.2, Fig. 3): how much the gradient of a
  layer's weights changes when the layers before it take their update.
* :func:`landscape_probe` -- the loss-landscape smoothness of Sec. 3.1, Fig. 4.

Both work on ``copy.deepcopy`` copies of the model in training mode (BN with batch
statistics, dropout active) and leave the model, its gradients, its BN running buffers,
the optimizer and torch's global RNG state as they found them.
"""

from __future__ import annotations

import copy
import math
from typing import Callable, Sequence

import torch
from torch import nn

from bnexp.models import hidden_layers


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
    and the same module state (e.g. :class:`bnexp.bn.NoisyBatchNorm` generators), so G and G'
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
            l2 = float((g - g_prime).norm())
            results.append({"l2": l2, "l2_rel": l2 / gn if gn > 0 else math.nan,
                            "cos": max(-1.0, min(1.0, cos)) if not math.isnan(cos) else cos,
                            "g_norm": gn, "trivial": i == 0})
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

def _grads_of(trainable: list[torch.Tensor]) -> list[torch.Tensor]:
    return [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().to(torch.float64) for p in trainable]


def _check_steps(name: str, etas: list[float]) -> None:
    if not etas:
        raise ValueError(f"{name} is empty")
    if any(not math.isfinite(e) or e < 0 for e in etas):
        raise ValueError(f"{name} must be finite and >= 0, got {etas}")


def landscape_probe(model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    x: torch.Tensor, y: torch.Tensor, step_sizes: Sequence[float],
                    rel_step_sizes: Sequence[float] | None = None) -> dict:
    """Smoothness of the loss landscape along the gradient (Santurkar et al. 2018, Sec. 3.1, Fig. 4).

    Raw parametrization. With w all trainable parameters (flattened), L the loss on the
    batch (x, y) and g = grad L(w), for each step size eta the loss and gradient at
    w - eta g are taken:

        loss_variation      = max - min of {L(w - eta g) : eta in {0} + step_sizes}
        grad_predictiveness = max_eta ||grad L(w) - grad L(w - eta g)||_2
        beta_smoothness     = max_eta ||grad L(w) - grad L(w - eta g)||_2 / ||eta g||_2

    The first is the "variation in loss" (Lipschitzness of the loss), the second the
    "l2 changes in gradient" (gradient predictiveness) and the third the "effective
    beta-smoothness" of Fig. 4. For a quadratic L = 1/2 w^T A w, beta_smoothness = ||A g|| / ||g||
    <= lambda_max(A). Units: loss units; loss per parameter unit; loss per parameter unit^2.

    Scale-invariant parametrization (``rel_step_sizes``). A BN network's loss does not
    change when the weights W before a BN layer are multiplied by c > 0, while its
    gradient shrinks by 1/c and its raw beta-smoothness by 1/c^2: since such weight norms
    grow several-fold in training, raw numbers mix smoothness with weight growth. Here
    every parameter tensor p is measured relative to its current norm n_p = ||p||
    (p = n_p q, n_p held fixed): grad_q = n_p grad_p, and a step of length rho in q
    (Delta p = -rho n_p grad_q_p / ||grad_q||, i.e. each tensor moves by a fraction of
    its own norm; tensors with n_p = 0 stay put) gives

        rel_loss_variation      = max - min of {L(w + Delta(rho)) : rho in {0} + rel_step_sizes}
        rel_grad_predictiveness = max_rho ||grad_q L(w) - grad_q L(w + Delta(rho))||_2
        rel_beta_smoothness     = max_rho ||grad_q L(w) - grad_q L(w + Delta(rho))||_2 / rho

    all unchanged when any tensor is rescaled by c > 0 before a BN layer. rho is a
    relative weight change (sqrt of the sum over tensors of (||Delta p|| / ||p||)^2);
    for L = 1/2 w^T A w with one tensor, rel_beta_smoothness = ||w||^2 ||A g|| / ||g||.
    Units: loss units; loss per relative change; loss per relative change^2.

    Every evaluation runs on a fresh ``copy.deepcopy(model)`` in training mode (BN with
    batch statistics) starting from the same global RNG state (same dropout masks); the
    model, its gradients, BN buffers and training flag and torch's RNG state are unchanged
    afterwards, and no optimizer is involved.

    Args:
        model: the network.
        loss_fn: loss_fn(model(x), y) -> scalar loss.
        x, y: the mini-batch.
        step_sizes: the etas, each finite and >= 0 (eta = 0 adds nothing new).
        rel_step_sizes: the rhos of the scale-invariant probe, each finite and >= 0; None
            skips it.

    Returns:
        {"loss_variation": float, "grad_predictiveness": float, "beta_smoothness": float
        (NaN if g = 0 or no eta > 0), "loss": L(w), "grad_norm": ||g||_2,
        "step_sizes": [0.0, *step_sizes], "losses": [L(w), L(w - eta_1 g), ...]} -- the
        lists aligned, their first entry the current point; with ``rel_step_sizes`` also
        "rel_loss_variation", "rel_grad_predictiveness", "rel_beta_smoothness" (NaN if
        grad_q = 0 or no rho > 0), "rel_grad_norm": ||grad_q||_2, "rel_step_sizes",
        "rel_losses". Norms in float64.

    Raises:
        ValueError: empty or negative/non-finite step sizes, a non-scalar loss, or a model
            with no trainable parameters.

    Cost: 1 + len(step_sizes) + len(rel_step_sizes) forward/backward passes and deep
    copies (one alive at a time).
    """
    etas = [float(e) for e in step_sizes]
    _check_steps("step_sizes", etas)
    rhos = None if rel_step_sizes is None else [float(r) for r in rel_step_sizes]
    if rhos is not None:
        _check_steps("rel_step_sizes", rhos)
    rng = _RngKeeper()
    try:
        m = _fresh_copy(model)
        trainable = [p for p in m.parameters() if p.requires_grad]
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        loss0 = float(_loss_and_grads(m, loss_fn, x, y, rng))
        grads = _grads_of(trainable)
        params = [p.detach().clone() for p in trainable]
        del m, trainable

        def at(deltas: list[torch.Tensor]) -> tuple[float, list[torch.Tensor]]:
            """Loss and per-tensor gradients at params + deltas, on a fresh copy."""
            mm = _fresh_copy(model)
            tr = [p for p in mm.parameters() if p.requires_grad]
            with torch.no_grad():
                for p, p0, d in zip(tr, params, deltas):
                    p.copy_((p0.to(torch.float64) + d).to(p.dtype))
            loss = float(_loss_and_grads(mm, loss_fn, x, y, rng))
            return loss, _grads_of(tr)

        g64 = torch.cat([g.reshape(-1) for g in grads])
        g_norm = float(g64.norm())
        losses = [loss0]
        diffs, betas = [], []
        for eta in etas:
            loss, g_eta = at([-eta * g for g in grads])
            losses.append(loss)
            diff = float((g64 - torch.cat([g.reshape(-1) for g in g_eta])).norm())
            diffs.append(diff)
            if eta > 0 and g_norm > 0:
                betas.append(diff / (eta * g_norm))
        out = {"loss_variation": max(losses) - min(losses),
               "grad_predictiveness": max(diffs),
               "beta_smoothness": max(betas) if betas else math.nan,
               "loss": loss0, "grad_norm": g_norm,
               "step_sizes": [0.0] + etas, "losses": losses}
        if rhos is not None:
            norms = [float(p.to(torch.float64).norm()) for p in params]
            gq = [n * g for n, g in zip(norms, grads)]
            gq64 = torch.cat([g.reshape(-1) for g in gq])
            gq_norm = float(gq64.norm())
            rel_losses, rel_diffs, rel_betas = [loss0], [], []
            for rho in rhos:
                scale = rho / gq_norm if gq_norm > 0 else 0.0
                loss, g_rho = at([-scale * n * g for n, g in zip(norms, gq)])
                rel_losses.append(loss)
                diff = float((gq64 - torch.cat([(n * g).reshape(-1) for n, g in zip(norms, g_rho)])).norm())
                rel_diffs.append(diff)
                if rho > 0 and gq_norm > 0:
                    rel_betas.append(diff / rho)
            out.update({"rel_loss_variation": max(rel_losses) - min(rel_losses),
                        "rel_grad_predictiveness": max(rel_diffs),
                        "rel_beta_smoothness": max(rel_betas) if rel_betas else math.nan,
                        "rel_grad_norm": gq_norm, "rel_step_sizes": [0.0] + rhos, "rel_losses": rel_losses})
        return out
    finally:
        rng.reset()
