"""Population statistics for inference (paper Sec. 3.1, Algorithm 2, steps 10-12).

Finds the BN layers of a network and recomputes their running mean / running var
from K training mini-batches with the weights frozen (``bn.population_stats=recompute``).
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from bnexp.bn.functional import batch_statistics
from bnexp.bn.reference import ReferenceBatchNorm

BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, ReferenceBatchNorm)


def bn_layers(model: nn.Module) -> list[nn.Module]:
    """All BN layers of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, BN_TYPES)]


@torch.no_grad()
def recompute_population_statistics(model: nn.Module, batches: Iterable[torch.Tensor]) -> int:
    """Algorithm 2, steps 10-12: population statistics from K training mini-batches.

    With the weights frozen, every mini-batch is passed through the network in
    training mode (each BN layer normalizes with its mini-batch statistics, as in
    training), and for every BN layer

        E[x]   <- average over the batches of mu_B
        Var[x] <- m/(m-1) * average over the batches of sigma2_B

    which are then stored as the layer's ``running_mean`` / ``running_var`` for
    inference. The model's training flag is restored; parameters are unchanged.

    Args:
        model: a network containing BN layers.
        batches: K input mini-batches, each of the same size m > 1.

    Returns:
        K, the number of mini-batches averaged.

    Raises:
        ValueError: if no batch is given or a mini-batch has m < 2.
    """
    layers = bn_layers(model)
    sums: dict[int, list] = {id(layer): [0.0, 0.0, 0] for layer in layers}

    def hook(layer, inputs):
        mu, sigma2, m = batch_statistics(inputs[0])
        if m < 2:
            raise ValueError("population statistics need mini-batches of m >= 2 values")
        acc = sums[id(layer)]
        if acc[2] and acc[2] != m:
            raise ValueError("population statistics need mini-batches of one size m (Alg. 2)")
        acc[0] = acc[0] + mu
        acc[1] = acc[1] + sigma2
        acc[2] = m

    was_training = model.training
    saved = [{name: b.clone() for name, b in layer.named_buffers()} for layer in layers]
    handles = [layer.register_forward_pre_hook(hook) for layer in layers]
    k = 0
    try:
        model.train()
        for x in batches:
            model(x)
            k += 1
    finally:
        for h in handles:
            h.remove()
        # The training-mode passes also moved the running averages: put them back
        # before overwriting, so a failure leaves the model as it was.
        for layer, buffers in zip(layers, saved):
            for name, value in buffers.items():
                getattr(layer, name).copy_(value)
        model.train(was_training)
    if k == 0:
        raise ValueError("recompute_population_statistics needs at least one mini-batch")
    for layer in layers:
        mu_sum, var_sum, m = sums[id(layer)]
        layer.running_mean.copy_(mu_sum / k)
        layer.running_var.copy_(m / (m - 1) * var_sum / k)
    return k
