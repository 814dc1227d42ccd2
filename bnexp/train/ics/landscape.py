"""Loss-landscape smoothness along the gradient (Santurkar, Tsipras, Ilyas & Madry, "How Does Batch
Normalization Help Optimization?", NeurIPS 2018, Sec. 3.1, Fig. 4), in three parametrizations:

* raw -- steps in multiples of the learning rate along -grad L (their Fig. 4);
* per-tensor relative (``rel_*``) -- every parameter tensor moves by a fraction of its own norm;
* filter-normalized (``fn_*``) -- the filter normalization of Li, Xu, Taylor, Studer &
  Goldstein, "Visualizing the Loss Landscape of Neural Nets" (NeurIPS 2018, Sec. 4): the
  direction is rescaled per filter so that every filter moves by a fraction of its own norm,
  along the gradient and along a fixed random direction.

The probe works on ``copy.deepcopy`` copies of the model in training mode (BN with batch
statistics, dropout active) and leaves the model, its gradients, BN running buffers, training
flag and torch's global RNG state as it found them.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from bnexp.train.ics.gradient import _fresh_copy, _loss_and_grads, _RngKeeper


def _grads_of(trainable: list[torch.Tensor]) -> list[torch.Tensor]:
    return [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().to(torch.float64) for p in trainable]


def _check_steps(name: str, etas: list[float]) -> None:
    if not etas:
        raise ValueError(f"{name} is empty")
    if any(not math.isfinite(e) or e < 0 for e in etas):
        raise ValueError(f"{name} must be finite and >= 0, got {etas}")


def filter_norms(w: torch.Tensor) -> torch.Tensor:
    """Per-filter L2 norms of a weight tensor (Li et al. 2018, Sec. 4).

    A filter is a slice along dim 0: a row of a ``Linear`` weight (out, in) -- the weights
    that produce one output unit -- or one output channel of a ``Conv2d`` weight
    (out, in, kh, kw).

    Args:
        w: a tensor with >= 2 dimensions.

    Returns:
        (w.shape[0],) norms, float64, on w's device.

    Raises:
        ValueError: for a tensor with fewer than 2 dimensions (it has no filters).
    """
    if w.dim() < 2:
        raise ValueError(f"a tensor with shape {tuple(w.shape)} has no filters (needs >= 2 dimensions)")
    return w.detach().to(torch.float64).reshape(w.shape[0], -1).norm(dim=1)


def _per_filter(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(out,) per-filter values shaped to broadcast against ``like`` (out, ...)."""
    return values.reshape(-1, *([1] * (like.dim() - 1)))


def filter_normalize(direction: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Filter normalization of a direction in parameter space (Li et al. 2018, Sec. 4, Eq. in Sec. 4).

    For every tensor with >= 2 dimensions and every filter f of it (see :func:`filter_norms`):

        d_f <- d_f / ||d_f|| * ||w_f||,

    so each filter of the direction has the norm of the corresponding weight filter (a filter
    with ||d_f|| = 0 or ||w_f|| = 0 gets d_f = 0). Tensors with <= 1 dimension (biases, BN
    gamma and beta) get a zero direction, Li et al.'s "ignore biasbn" choice: they are not
    moved. A step w + alpha d then moves every filter by alpha times its own norm, which
    removes the scale invariance of ReLU networks (W_i -> c W_i, W_{i+1} -> W_{i+1} / c) and of
    BN networks (any filter before BN -> c_f w_f) from the picture.

    Args:
        direction: tensors shaped like ``weights``, any float dtype.
        weights: the parameters w, in the same order.

    Returns:
        the normalized direction, float64 tensors on the weights' devices.

    Raises:
        ValueError: if the lists differ in length or a pair of tensors differs in shape.
    """
    if len(direction) != len(weights):
        raise ValueError(f"{len(direction)} direction tensors for {len(weights)} weights")
    out = []
    for d, w in zip(direction, weights):
        if d.shape != w.shape:
            raise ValueError(f"direction shape {tuple(d.shape)} differs from weight shape {tuple(w.shape)}")
        d = d.detach().to(device=w.device, dtype=torch.float64)
        if w.dim() < 2:
            out.append(torch.zeros_like(d))
            continue
        dn, wn = filter_norms(d), filter_norms(w)
        scale = torch.where(dn > 0, wn / torch.where(dn > 0, dn, torch.ones_like(dn)), torch.zeros_like(dn))
        out.append(d * _per_filter(scale, d))
    return out


def landscape_probe(model: nn.Module, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    x: torch.Tensor, y: torch.Tensor, step_sizes: Sequence[float],
                    rel_step_sizes: Sequence[float] | None = None, fn_step_sizes: Sequence[float] | None = None,
                    fn_seed: int = 0) -> dict:
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

    Filter-normalized (``fn_step_sizes``; Li et al. 2018, Sec. 4). Every weight tensor with
    >= 2 dimensions is read per filter f (a row of a Linear weight, an output channel of a
    Conv weight): w_f = n_f q_f with n_f = ||w_f|| held fixed, so grad_q_f = n_f grad_w_f
    (biases and BN gamma/beta stay put and are left out of these gradients, Li et al.'s
    "ignore biasbn"). Along the filter-normalized gradient direction
    d = :func:`filter_normalize` (grad L(w)) -- every filter of the gradient rescaled to its
    weight filter's norm -- with steps alpha in ``fn_step_sizes`` (each filter moves by alpha
    times its own norm):

        fn_loss_variation      = max - min of {L(w - alpha d) : alpha in {0} + fn_step_sizes}
        fn_grad_predictiveness = max_alpha ||grad_q L(w) - grad_q L(w - alpha d)||_2
        fn_beta_smoothness     = max_alpha ||grad_q L(w) - grad_q L(w - alpha d)||_2 / (alpha ||d_q||_2)

    where d_q (d_q,f = d_f / n_f) is the direction in q, ||d_q|| = sqrt(number of filters with
    n_f > 0 and a non-zero gradient). And along a fixed random direction (a standard normal
    draw per parameter from a generator seeded with ``fn_seed``, filter-normalized; the same
    draw at every probe of a network, torch's global RNG untouched), the losses at
    w + alpha d_rand and their range ``fn_random_loss_variation``: how the loss varies in a
    typical direction rather than the steepest one (Li et al.'s 1-D plots). All fn_* values
    are unchanged when a ReLU layer's weights (and bias) are multiplied by c > 0 and the next
    layer's weights by 1 / c, and when any filter feeding a BN layer is multiplied by its own
    c_f > 0 (both leave the network's function unchanged); the raw values change. Units: loss
    units; loss per relative change of a filter; the same per relative change^2.

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
        fn_step_sizes: the alphas of the filter-normalized probes, each finite and >= 0;
            None skips them.
        fn_seed: seed of the random direction's generator.

    Returns:
        {"loss_variation": float, "grad_predictiveness": float, "beta_smoothness": float
        (NaN if g = 0 or no eta > 0), "loss": L(w), "grad_norm": ||g||_2,
        "step_sizes": [0.0, *step_sizes], "losses": [L(w), L(w - eta_1 g), ...]} -- the
        lists aligned, their first entry the current point; with ``rel_step_sizes`` also
        "rel_loss_variation", "rel_grad_predictiveness", "rel_beta_smoothness" (NaN if
        grad_q = 0 or no rho > 0), "rel_grad_norm": ||grad_q||_2, "rel_step_sizes",
        "rel_losses"; with ``fn_step_sizes`` also "fn_loss_variation", "fn_grad_predictiveness",
        "fn_beta_smoothness" (NaN if the gradient of every filter is 0 or no alpha > 0),
        "fn_step_sizes": [0.0, *fn_step_sizes], "fn_losses": [L(w), L(w - alpha_1 d), ...],
        "fn_random_loss_variation" and "fn_random_losses": [L(w), L(w + alpha_1 d_rand), ...].
        Norms in float64.

    Raises:
        ValueError: empty or negative/non-finite step sizes, a non-scalar loss, a model
            with no trainable parameters, or ``fn_step_sizes`` for a model without a
            parameter of >= 2 dimensions (no filters).

    Cost: 1 + len(step_sizes) + len(rel_step_sizes) + len(fn_step_sizes) forward/backward
    passes, len(fn_step_sizes) forward passes (the random direction) and as many deep
    copies (one alive at a time).
    """
    etas = [float(e) for e in step_sizes]
    _check_steps("step_sizes", etas)
    rhos = None if rel_step_sizes is None else [float(r) for r in rel_step_sizes]
    if rhos is not None:
        _check_steps("rel_step_sizes", rhos)
    alphas = None if fn_step_sizes is None else [float(a) for a in fn_step_sizes]
    if alphas is not None:
        _check_steps("fn_step_sizes", alphas)
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

        if alphas is not None and not any(p.dim() >= 2 for p in params):
            raise ValueError("fn_step_sizes: filter normalization needs a parameter with >= 2 dimensions")

        def at(deltas: list[torch.Tensor], with_grads: bool = True) -> tuple[float, list[torch.Tensor] | None]:
            """Loss and per-tensor gradients (None without ``with_grads``) at params + deltas, on a fresh copy."""
            mm = _fresh_copy(model)
            tr = [p for p in mm.parameters() if p.requires_grad]
            with torch.no_grad():
                for p, p0, d in zip(tr, params, deltas):
                    p.copy_((p0.to(torch.float64) + d).to(p.dtype))
            if not with_grads:
                rng.reset()
                with torch.no_grad():
                    return float(loss_fn(mm(x), y)), None
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
        if alphas is not None:
            out.update(_filter_normalized_probe(at, params, grads, loss0, alphas, fn_seed))
        return out
    finally:
        rng.reset()


def _filter_normalized_probe(at: Callable, params: list[torch.Tensor], grads: list[torch.Tensor], loss0: float,
                             alphas: list[float], seed: int) -> dict:
    """The ``fn_*`` values of :func:`landscape_probe` (see there); ``at(deltas, with_grads)`` evaluates."""
    norms = [filter_norms(p) if p.dim() >= 2 else None for p in params]
    inv = [None if n is None else torch.where(n > 0, 1 / torch.where(n > 0, n, torch.ones_like(n)),
                                              torch.zeros_like(n)) for n in norms]

    def in_q(gs: list[torch.Tensor]) -> torch.Tensor:
        """grad_q = n_f grad_w_f of the filters of every tensor with >= 2 dims, flattened."""
        return torch.cat([(g * _per_filter(n, g)).reshape(-1) for g, n in zip(gs, norms) if n is not None])

    gq = in_q(grads)
    d = filter_normalize(grads, params)
    dq_norm = float(torch.cat([(di * _per_filter(v, di)).reshape(-1)
                               for di, v in zip(d, inv) if v is not None]).norm())
    losses, diffs, betas = [loss0], [], []
    for a in alphas:
        loss, g_a = at([-a * di for di in d])
        losses.append(loss)
        diff = float((gq - in_q(g_a)).norm())
        diffs.append(diff)
        if a > 0 and dq_norm > 0:
            betas.append(diff / (a * dq_norm))
    gen = torch.Generator().manual_seed(int(seed))
    rand = filter_normalize([torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params], params)
    rand_losses = [loss0] + [at([a * di for di in rand], with_grads=False)[0] for a in alphas]
    return {"fn_loss_variation": max(losses) - min(losses), "fn_grad_predictiveness": max(diffs),
            "fn_beta_smoothness": max(betas) if betas else math.nan, "fn_step_sizes": [0.0] + alphas,
            "fn_losses": losses, "fn_random_loss_variation": max(rand_losses) - min(rand_losses),
            "fn_random_losses": rand_losses}
