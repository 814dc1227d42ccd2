"""Batch-free normalizers: Layer Normalization and Group Normalization, the controls for BN.

Layer Normalization (Ba, Kiros & Hinton 2016, "Layer Normalization", Sec. 3) normalizes each
example over its own features; Group Normalization (Wu & He 2018, "Group Normalization", Sec. 3,
eq. 1-3 and Fig. 2) normalizes each example over groups of G channels. Neither depends on the other
examples of the mini-batch, so training and inference compute the same function and there are no
running (population) statistics. Following the GroupNorm paper (Sec. 3.1), LN is GN with one group:

    x of shape (N, C) or (N, C, H, W); channels split into G groups of C/G consecutive channels;
    for example n and group g, S_ng = the C/G * H * W values of that example in that group
    (C/G values for a fully-connected (N, C) activation);
    mu_ng = mean of S_ng,  sigma2_ng = 1/|S_ng| sum (x - mu_ng)^2  (biased, as in both papers),
    x_hat = (x - mu_ng) / sqrt(sigma2_ng + eps),   y = gamma_c * x_hat + beta_c,

with a learned scale gamma and shift beta per channel (feature), the same parameters as BN's
(Alg. 1), so the networks of ``bn=true``, ``bn=layer`` and ``bn=group`` have the same parameters.
LayerNorm of a conv activation thus normalizes over (C, H, W) of each example, as in the GroupNorm
paper's Fig. 2 (not per channel, which would be Instance Normalization, G = C).

:func:`group_norm` is the formula above in plain tensor operations (autograd gives the backward);
:class:`GroupNorm` / :class:`LayerNorm` are layers with torch's fused ``F.group_norm``
(``impl="torch"``, fast) or :func:`group_norm` (``impl="reference"``); the tests check both against
``torch.nn.functional.layer_norm`` / ``group_norm`` and ``nn.GroupNorm`` / ``nn.LayerNorm``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# bn.groups' default: divides every hidden width of the presets (paper MLP 100; CNN 32, 64, 128; CIFAR
# scale 8, 16, 32, 64); the GroupNorm paper's G = 32 (Wu & He 2018, Sec. 4.1) does not divide 100, and
# its Table 3 finds G = 4 within 0.5% top-1 error of G = 32 on ImageNet.
DEFAULT_GROUPS = 4


def _grouped(x: torch.Tensor, groups: int) -> torch.Tensor:
    """x of (N, C) or (N, C, H, W) as (N, G, C/G * H * W): one row of values per example and group."""
    if x.dim() not in (2, 4):
        raise ValueError(f"expected a (N, C) or (N, C, H, W) activation, got shape {tuple(x.shape)}")
    c = x.shape[1]
    if groups < 1 or c % groups:
        raise ValueError(f"{groups} groups do not divide the {c} channels (features) of the input")
    return x.reshape(x.shape[0], groups, -1)


def group_statistics(x: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and biased variance of each example's groups (Wu & He 2018, eq. 2; LN: ``groups=1``).

    Args:
        x: (N, C) or (N, C, H, W).
        groups: G, dividing C.

    Returns:
        (mu, sigma2), each (N, G): over the C/G * H * W values of example n in group g,
        sigma2 = 1/|S| sum (x - mu)^2.

    Raises:
        ValueError: another rank, or G not dividing C.
    """
    v = _grouped(x, groups)
    mu = v.mean(dim=2)
    sigma2 = ((v - mu.unsqueeze(2)) ** 2).mean(dim=2)
    return mu, sigma2


def group_norm(x: torch.Tensor, groups: int, gamma: torch.Tensor, beta: torch.Tensor,
               eps: float = 1e-5) -> torch.Tensor:
    """Group Normalization (Wu & He 2018, eq. 1-3): per example and group of C/G channels,

    x_hat = (x - mu) / sqrt(sigma2 + eps),  y = gamma_c * x_hat + beta_c  (gamma, beta per channel).

    ``groups=1`` is Layer Normalization over all features (and positions) of each example (Ba et
    al. 2016, eq. 4); ``groups=C`` of a conv input is Instance Normalization. The statistics are
    computed inside the autograd graph, so gradients flow through mu and sigma2.

    Args:
        x: (N, C) or (N, C, H, W); any N >= 1 (each example is normalized by itself).
        groups: G, dividing C.
        gamma, beta: (C,).
        eps: added to the variance.

    Returns:
        y, the shape of x; y[n] depends on x[n] only.

    Raises:
        ValueError: another rank, or G not dividing C.
    """
    v = _grouped(x, groups)
    mu = v.mean(dim=2, keepdim=True)
    xc = v - mu
    sigma2 = (xc * xc).mean(dim=2, keepdim=True)
    x_hat = (xc / torch.sqrt(sigma2 + eps)).reshape(x.shape)
    view = (1, -1) if x.dim() == 2 else (1, -1, 1, 1)
    return gamma.view(view) * x_hat + beta.view(view)


def layer_norm(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Layer Normalization (Ba et al. 2016) with a per-channel scale and shift: :func:`group_norm`
    with one group, i.e. each example normalized over all its C (* H * W) values."""
    return group_norm(x, 1, gamma, beta, eps)


class GroupNorm(nn.Module):
    """A GroupNorm layer (Wu & He 2018) with BN's parameters: ``weight`` = gamma, ``bias`` = beta, (C,).

    The same function in training and eval mode (no running statistics, no buffers).

    Args:
        num_features: C, the channels (conv) or units (fully-connected) of the input.
        groups: G, dividing C.
        eps: added to each group's variance.
        impl: ``torch`` (``F.group_norm``, fused) or ``reference`` (:func:`group_norm`).

    Raises:
        ValueError: G < 1 or not dividing C; an unknown ``impl``.
    """

    def __init__(self, num_features: int, groups: int, eps: float = 1e-5, impl: str = "torch"):
        super().__init__()
        if groups < 1 or num_features % groups:
            raise ValueError(f"{groups} groups do not divide {num_features} channels (features)")
        if impl not in ("torch", "reference"):
            raise ValueError(f"impl must be torch or reference, got {impl!r}")
        self.num_features, self.groups, self.eps, self.impl = int(num_features), int(groups), float(eps), impl
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """y = gamma * x_hat + beta for x of (N, C) or (N, C, H, W); the same shape out."""
        if self.impl == "torch":
            return F.group_norm(x, self.groups, self.weight, self.bias, self.eps)
        return group_norm(x, self.groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_features}, groups={self.groups}, eps={self.eps}, impl={self.impl}"


class LayerNorm(GroupNorm):
    """Layer Normalization (Ba et al. 2016) of each example over all its features (and positions):
    :class:`GroupNorm` with one group; per-channel gamma and beta as in BN.

    Args:
        num_features: C; eps, impl: as in :class:`GroupNorm`.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, impl: str = "torch"):
        super().__init__(num_features, 1, eps, impl)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, impl={self.impl}"
