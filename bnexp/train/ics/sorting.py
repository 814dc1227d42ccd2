"""Sorting and quantiles for the covariate-shift monitor, fast on the CPU.

The monitor sorts every layer's values several times per record (percentiles, snapshots, the
floors' subsamples). For these sizes -- 10^4 to 10^5 values, or a few hundred rows by a hundred
units -- torch's CPU sort is about ten times slower than numpy's (measured: a 200 x 100 column sort
1.0 ms vs 0.1 ms; 20,000 values 1.5 ms vs 0.1 ms), so CPU tensors are sorted by numpy; other devices
use torch. A sort returns the same values either way: equal values are interchangeable, except that
-0.0 and +0.0 compare equal and may come in another order (79 of the 400 float32 samples of
tests/test_monitor_sorting.py sort so), so a result that is exactly zero may carry the other sign; no
distance, count or nonzero quantile changes.
"""

from __future__ import annotations

import numpy as np
import torch


def sort_values(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``x.sort(dim=dim).values``: numpy's sort for a CPU tensor, torch's elsewhere.

    Args:
        x: a float tensor without gradient (float32 or float64 on the CPU).
        dim: the dimension to sort along.

    Returns:
        a new tensor of x's shape, dtype and device, sorted along ``dim``.
    """
    if x.device.type != "cpu":
        return x.sort(dim=dim).values
    return torch.from_numpy(np.sort(x.detach().numpy(), axis=dim))


def quantiles(values: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``torch.quantile(values, q)`` (linear interpolation, numpy's default) on :func:`sort_values`'s sort.

    The same arithmetic as torch's: ranks q * (n - 1) in float64, the weights ranks - floor(ranks)
    in values' dtype, ``lerp`` between the neighbouring sorted values: equal to ``torch.quantile`` on the CPU
    (``torch.equal``, on random and tied samples in tests/test_monitor_sorting.py); a quantile that is exactly
    zero, among values holding both -0.0 and +0.0, may differ in the sign of that zero.

    Args:
        values: (n,) finite floats, n >= 1.
        q: (k,) probabilities in [0, 1], values' dtype.

    Returns:
        (k,) tensor of the quantiles, values' dtype and device.
    """
    s = sort_values(values)
    ranks = q.to(torch.float64) * (s.shape[0] - 1)
    below, above = ranks.long(), ranks.ceil().long()
    return s[below].lerp(s[above], (ranks - below).to(s.dtype))
