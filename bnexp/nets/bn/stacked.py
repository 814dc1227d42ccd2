"""BN for R independent runs trained as one batched model (``hydra/launcher=stacked``, docs/stacked.md).

Each run keeps its own BN: the Alg. 1 statistics of a unit are the mean and variance over *that run's*
mini-batch only, and each run has its own gamma, beta and running (population) statistics. Both layouts
reduce to torch's one-call batch norm over R x (units) channels, so the math (Alg. 1 and the running
averages of Alg. 2's population statistics, Sec. 3.1) is exactly ``nn.BatchNorm1d/2d``'s, run by run:

* fully-connected activations of R runs, (R, m, d): the m examples of run r are its own mini-batch;
  as an (m, R*d) matrix every column is one (run, unit) pair, normalized over its m values;
* convolutional activations of R runs, (N, R*C, H, W) -- the grouped-convolution layout of a stack, in
  which channel r*C + c is channel c of run r and only sees run r's images -- are normalized per
  channel over (N, H, W), i.e. per run and channel.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def stacked_batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                       weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool, momentum: float,
                       eps: float) -> torch.Tensor:
    """Alg. 1 (training) or the Alg. 2 inference map, per run, for a stack of R runs.

    Args:
        x: (R, m, d) fully-connected activations of R runs (run r's own mini-batch of m examples), or
            (N, R*C, H, W) convolutional activations in the stack's grouped layout (channel r*C + c is
            channel c of run r).
        running_mean, running_var: (R, d) or (R, C) population statistics, contiguous; updated in place
            in training (``x_mean <- (1 - momentum) x_mean + momentum * mean``, the unbiased variance
            likewise, as ``nn.BatchNorm``); None: no running statistics.
        weight, bias: (R, d) / (R, C) gamma and beta of each run, or None.
        training: use the mini-batch statistics (Alg. 1) and update the running ones; else normalize
            with the running statistics (Alg. 2, step 11).
        momentum: the running average's factor (``bn.momentum``).
        eps: Alg. 1's epsilon (``bn.eps``).

    Returns:
        the normalized, scaled and shifted activations, same shape as ``x``.

    Raises:
        ValueError: ``x`` of another rank than 3 or 4.
    """
    flat = [t.reshape(-1) if t is not None else None for t in (running_mean, running_var, weight, bias)]
    if x.dim() == 4:
        return F.batch_norm(x, *flat[:2], *flat[2:], training, momentum, eps)
    if x.dim() != 3:
        raise ValueError(f"stacked_batch_norm takes (R, m, d) or (N, R*C, H, W) activations, got {tuple(x.shape)}")
    r, m, d = x.shape
    y = F.batch_norm(x.transpose(0, 1).reshape(m, r * d), *flat[:2], *flat[2:], training, momentum, eps)
    return y.view(m, r, d).transpose(0, 1)
