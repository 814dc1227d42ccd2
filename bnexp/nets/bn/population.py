"""Population statistics for inference (paper Sec. 3.1, Algorithm 2, steps 10-12).

Finds the BN layers of a network and recomputes their running mean / running var
from K training mini-batches with the weights frozen (``bn.population_stats=recompute``).
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from bnexp.nets.bn.functional import batch_statistics
from bnexp.nets.bn.reference import ReferenceBatchNorm

# torch's BatchNorm1d/2d and SyncBatchNorm, bnexp.nets.bn.sync_and_ghost's cross-replica and ghost-batch layers
BN_TYPES = (_BatchNorm, ReferenceBatchNorm)


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
    inference. A ghost-batch layer (``ghost_batch_size`` = g) normalizes each ghost batch
    of g examples with its own statistics, so there every ghost batch is one mini-batch
    of the averages. The model's training flag is restored; parameters are unchanged.

    Args:
        model: a network containing BN layers.
        batches: K input mini-batches, each of the same size m > 1.

    Returns:
        K, the number of mini-batches averaged.

    Raises:
        ValueError: if no batch is given or a mini-batch has m < 2.
    """
    layers = bn_layers(model)
    # per layer: [sum of mu_B, sum of sigma2_B, m, number of mini-batches (or ghost batches)]
    sums: dict[int, list] = {id(layer): [0.0, 0.0, 0, 0] for layer in layers}

    def hook(layer, inputs):
        g = getattr(layer, "ghost_batch_size", None)
        x = inputs[0]
        for part in (x.split(g) if g and x.shape[0] > g else (x,)):
            mu, sigma2, m = batch_statistics(part)
            if m < 2:
                raise ValueError("population statistics need mini-batches of m >= 2 values")
            acc = sums[id(layer)]
            if acc[2] and acc[2] != m:
                raise ValueError("population statistics need mini-batches of one size m (Alg. 2)")
            acc[0] = acc[0] + mu
            acc[1] = acc[1] + sigma2
            acc[2] = m
            acc[3] += 1

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
        mu_sum, var_sum, m, n = sums[id(layer)]
        layer.running_mean.copy_(mu_sum / n)
        layer.running_var.copy_(m / (m - 1) * var_sum / n)
    return k
