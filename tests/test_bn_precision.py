"""BN statistics in float32 under bf16 autocast (bnexp.train.precision): the reference layer and ghost BN
take a bfloat16 input as torch's BN kernels do -- mean, variance, running averages and the transform in
float32 -- and return y in the input's dtype. The expectation is each layer run in float32 on the same
(bf16-representable) values: equal bit for bit, where statistics taken in bfloat16 differ."""

from __future__ import annotations

import pytest
import torch

from bnexp.nets.bn.sync_and_ghost import GhostBatchNorm
from bnexp.nets.bn.reference import ReferenceBatchNorm

LAYERS = {
    "reference": lambda c: ReferenceBatchNorm(c, momentum=0.5),
    "ghost": lambda c: GhostBatchNorm(c, ghost_batch_size=4, momentum=0.5),
}


@pytest.mark.parametrize("kind", LAYERS)
@pytest.mark.parametrize("shape", [(16, 8), (8, 3, 5, 5)])
def test_bn_statistics_are_float32_under_bf16_autocast(kind, shape):
    torch.manual_seed(0)
    # values far from 0 relative to their spread: a bfloat16 mean/variance (8-bit mantissa) is visibly off
    x = (100.0 + torch.randn(shape)).to(torch.bfloat16)
    fp32, low = LAYERS[kind](shape[1]), LAYERS[kind](shape[1])
    with torch.no_grad():
        for layer in (fp32, low):
            layer.weight.copy_(torch.linspace(0.5, 1.5, shape[1]))
            layer.bias.copy_(torch.linspace(-1, 1, shape[1]))
    want = fp32(x.float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = low(x)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want.to(torch.bfloat16))
    assert torch.equal(low.running_mean, fp32.running_mean) and torch.equal(low.running_var, fp32.running_var)
    fp32.eval(), low.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = low(x)
    assert got.dtype == torch.bfloat16 and torch.equal(got, fp32(x.float()).to(torch.bfloat16))
