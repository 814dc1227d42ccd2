"""The reference BN layer (paper Sec. 3, Algorithms 1 and 2), built on :mod:`bnexp.nets.bn.functional`.

Training uses torch's ``nn.BatchNorm1d``/``nn.BatchNorm2d`` for speed; ``bn.impl=reference``
swaps in this slower layer written from the paper, for teaching and for the tests.
"""

from __future__ import annotations

import torch
from torch import nn

from bnexp.nets.bn.functional import batch_norm_inference, batch_norm_train_with_statistics


class ReferenceBatchNorm(nn.Module):
    """A BN layer built on :func:`batch_norm_train` / :func:`batch_norm_inference`.

    Drop-in for ``nn.BatchNorm1d``/``nn.BatchNorm2d`` (same ``weight``/``bias``
    parameters and ``running_mean``/``running_var`` buffers, same running-average
    update with the unbiased variance; no ``num_batches_tracked``), slower; used by
    the tests and for teaching (``bn.impl=reference``).

    Args:
        num_features: d (or C for conv activations).
        eps: Alg. 1's epsilon.
        momentum: running averages use r <- (1 - momentum) r + momentum * batch value.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Alg. 1 with the mini-batch statistics (training; running averages updated with the same
        statistics, computed once), or Alg. 2's inference map with the running averages (eval).

        Statistics and transform are computed in float32 also when ``x`` is lower precision (bfloat16
        under autocast, ``trainer.precision=bf16``), as torch's BN kernels do; y is returned in x's dtype.

        Args:
            x: (m, d) or (N, C, H, W).

        Returns:
            y, same shape and dtype as x.
        """
        dtype, x = x.dtype, x.to(torch.promote_types(x.dtype, torch.float32))  # bf16 -> fp32; fp32, fp64 as they are
        if self.training:
            y, mu, sigma2, m = batch_norm_train_with_statistics(x, self.weight, self.bias, self.eps)
            with torch.no_grad():
                self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mu.detach())
                self.running_var.mul_(1 - self.momentum).add_(self.momentum * sigma2.detach() * m / (m - 1))
            return y.to(dtype)
        return batch_norm_inference(x, self.weight, self.bias, self.running_mean, self.running_var, self.eps).to(dtype)
