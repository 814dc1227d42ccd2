"""bnexp.train.ics.sorting: the monitor's CPU sorts and quantiles give torch's values (``torch.equal``: -0.0 and
+0.0 count as equal; their order within a tie is the sorts' own)."""

from __future__ import annotations

import pytest
import torch

from bnexp.train.ics.sorting import quantiles, sort_values


def _samples(seed: int):
    """Random samples of many sizes and scales, some with ties, some squashed into (0, 1) by a sigmoid."""
    gen = torch.Generator().manual_seed(seed)
    for t in range(400):
        n = int(torch.randint(1, 3000, (1,), generator=gen)) if t % 20 else int(
            torch.randint(50_000, 200_001, (1,), generator=gen))
        v = torch.randn(n, generator=gen) * float(torch.rand(1, generator=gen) * 20 + 1e-3) + float(
            torch.randn(1, generator=gen) * 3)
        if t % 4 == 0:
            v = torch.round(v * 2) / 2  # ties
        if t % 9 == 0:
            v = torch.sigmoid(v)
        yield t, v


def test_quantiles_equal_torch_quantile():
    lists = [[15.0, 50.0, 85.0], [2.5, 15.0, 50.0, 85.0, 97.5], [1.0, 99.0], [0.0, 100.0], [33.3, 66.7]]
    for t, v in _samples(0):
        q = torch.tensor([p / 100.0 for p in lists[t % len(lists)]])
        assert torch.equal(quantiles(v, q), torch.quantile(v, q)), (t, v.numel())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sort_values_equals_torch_sort(dtype):
    for t, v in _samples(1):
        v = v.to(dtype)
        assert torch.equal(sort_values(v), v.sort().values)
        cols = v[: (v.numel() // 7) * 7].reshape(-1, 7)  # (rows, units), sorted per column as the monitor does
        got = sort_values(cols, 0)
        assert got.dtype == dtype and got.shape == cols.shape and torch.equal(got, cols.sort(dim=0).values)
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(2)).T  # a non-contiguous view
    assert torch.equal(sort_values(x, 1), x.sort(dim=1).values) and sort_values(x, 1).tolist() != x.tolist()
