"""The functional Batch Normalization math (paper Sec. 3, Algorithms 1 and 2).

The mini-batch statistics and transform of Algorithm 1, the paper's Sec. 3
backward formulas, and the inference-time linear map of Algorithm 2, written from
the paper as plain tensor functions; :mod:`bnexp.nets.bn.reference` builds a layer on
them, and the tests check them against torch (forward, autograd gradients, inference).

Shapes: a fully-connected activation is (m, d) -- statistics per feature over the
m examples of the mini-batch; a convolutional activation is (N, C, H, W) --
statistics per channel over (N, H, W), i.e. over m = N*H*W values (Sec. 3.2).
"""

from __future__ import annotations

import torch


def _reduce_dims(x: torch.Tensor) -> tuple[int, ...]:
    if x.dim() == 2:
        return (0,)
    if x.dim() == 4:
        return (0, 2, 3)
    raise ValueError(f"expected a (m, d) or (N, C, H, W) activation, got shape {tuple(x.shape)}")


def _per_feature(v: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Reshape a (d,) vector to broadcast over x: (1, d) or (1, C, 1, 1)."""
    return v.view(1, -1) if x.dim() == 2 else v.view(1, -1, 1, 1)


def batch_statistics(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Mini-batch mean and biased variance per feature (Alg. 1, first two lines).

    Args:
        x: (m, d) or (N, C, H, W).

    Returns:
        (mu_B, sigma2_B, m): two (d,) tensors, sigma2_B = 1/m sum (x_i - mu_B)^2,
        and the number of values m each statistic is taken over.

    Raises:
        ValueError: for other ranks.
    """
    dims = _reduce_dims(x)
    m = x.numel() // x.shape[1]
    mu = x.mean(dim=dims)
    sigma2 = ((x - _per_feature(mu, x)) ** 2).mean(dim=dims)
    return mu, sigma2, m


def batch_norm_train(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                     eps: float = 1e-5) -> torch.Tensor:
    """The BN transform over a mini-batch (Algorithm 1).

    mu_B = 1/m sum x_i;  sigma2_B = 1/m sum (x_i - mu_B)^2;
    x_hat_i = (x_i - mu_B) / sqrt(sigma2_B + eps);  y_i = gamma * x_hat_i + beta.

    The statistics are computed from ``x`` inside the autograd graph, so gradients
    flow through mu_B and sigma2_B (Sec. 3).

    Args:
        x: (m, d) or (N, C, H, W) activations.
        gamma, beta: (d,) or (C,) learned scale and shift.
        eps: the constant added to the variance for numerical stability.

    Returns:
        y, same shape as x.
    """
    return batch_norm_train_with_statistics(x, gamma, beta, eps)[0]


def batch_norm_train_with_statistics(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5
                                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """:func:`batch_norm_train` that also returns the statistics it normalized with (Algorithm 1),
    so a layer updating running averages does not compute them a second time.

    Args:
        x: (m, d) or (N, C, H, W) activations.
        gamma, beta: (d,) or (C,) learned scale and shift.
        eps: the constant added to the variance for numerical stability.

    Returns:
        (y, mu_B, sigma2_B, m): y of x's shape; mu_B and the biased sigma2_B, two (d,) tensors inside
        the autograd graph (detach them for running averages); m values per statistic.

    Raises:
        ValueError: for inputs of another rank.
    """
    mu, sigma2, m = batch_statistics(x)
    x_hat = (x - _per_feature(mu, x)) / torch.sqrt(_per_feature(sigma2, x) + eps)
    return _per_feature(gamma, x) * x_hat + _per_feature(beta, x), mu, sigma2, m


def batch_norm_backward(dl_dy: torch.Tensor, x: torch.Tensor, gamma: torch.Tensor,
                        eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of the loss through the BN transform, by the paper's Sec. 3 formulas.

    dl/dx_hat_i = dl/dy_i * gamma
    dl/dsigma2_B = sum_i dl/dx_hat_i (x_i - mu_B) * -1/2 (sigma2_B + eps)^(-3/2)
    dl/dmu_B = (sum_i dl/dx_hat_i * -1/sqrt(sigma2_B + eps)) + dl/dsigma2_B * sum_i -2(x_i - mu_B) / m
    dl/dx_i = dl/dx_hat_i / sqrt(sigma2_B + eps) + dl/dsigma2_B * 2(x_i - mu_B)/m + dl/dmu_B / m
    dl/dgamma = sum_i dl/dy_i x_hat_i;   dl/dbeta = sum_i dl/dy_i

    Args:
        dl_dy: upstream gradient, same shape as x.
        x: the transform's input, (m, d) or (N, C, H, W).
        gamma: (d,) or (C,).
        eps: as in the forward pass.

    Returns:
        (dl/dx, dl/dgamma, dl/dbeta) with shapes of x, (d,), (d,).
    """
    dims = _reduce_dims(x)
    mu, sigma2, m = batch_statistics(x)
    mu_, var_eps = _per_feature(mu, x), _per_feature(sigma2 + eps, x)
    xc = x - mu_
    x_hat = xc / torch.sqrt(var_eps)
    dl_dxhat = dl_dy * _per_feature(gamma, x)
    dl_dvar = (dl_dxhat * xc).sum(dim=dims) * -0.5 * (sigma2 + eps) ** -1.5
    dl_dmu = (dl_dxhat * (-1.0 / torch.sqrt(var_eps))).sum(dim=dims) + dl_dvar * (-2.0 * xc).sum(dim=dims) / m
    dl_dx = (dl_dxhat / torch.sqrt(var_eps) + _per_feature(dl_dvar, x) * 2.0 * xc / m
             + _per_feature(dl_dmu, x) / m)
    dl_dgamma = (dl_dy * x_hat).sum(dim=dims)
    dl_dbeta = dl_dy.sum(dim=dims)
    return dl_dx, dl_dgamma, dl_dbeta


def batch_norm_inference(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                         mean: torch.Tensor, var: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Inference-time BN with population statistics (Algorithm 2, step 11): the linear map

    y = gamma / sqrt(Var[x] + eps) * x + (beta - gamma * E[x] / sqrt(Var[x] + eps)).

    Args:
        x: (m, d) or (N, C, H, W).
        gamma, beta, mean, var: (d,) or (C,); ``var`` is the unbiased population variance.

    Returns:
        y, same shape as x; each example's output depends on that example only.
    """
    scale = gamma / torch.sqrt(var + eps)
    return _per_feature(scale, x) * x + _per_feature(beta - scale * mean, x)
