"""All Batch Normalization variants and their math, in one place (paper Sec. 3, Algorithms 1 and 2).

* :mod:`bnexp.nets.bn.functional` -- the Alg. 1 mini-batch transform, the Sec. 3 backward
  formulas and the Alg. 2 inference map, as plain tensor functions.
* :mod:`bnexp.nets.bn.reference` -- :class:`ReferenceBatchNorm`, a layer built on them
  (``bn.impl=reference``); training otherwise uses torch's ``nn.BatchNorm1d/2d``.
* :mod:`bnexp.nets.bn.noisy` -- :class:`NoisyBatchNorm` and :func:`sample_noise`, the "noisy BN"
  of Santurkar et al. 2018, Sec. 2.1 (``bn=noisy``), and :func:`held_noise` (one noise draw held over
  several forward calls, e.g. a monitor record's probe mini-batches).
* :mod:`bnexp.nets.bn.sync_and_ghost` -- statistics over other sets of examples than one process's
  mini-batch: :class:`CrossReplicaBatchNorm` (``bn.sync=true`` across data-parallel replicas,
  Alg. 1 with all-reduced sums) and :class:`GhostBatchNorm` (``bn.ghost_batch_size``).
* :mod:`bnexp.nets.bn.population` -- finding a network's BN layers and the Alg. 2 recomputation
  of population statistics (``bn.population_stats=recompute``).
* :mod:`bnexp.nets.bn.stacked` -- :func:`~bnexp.nets.bn.stacked.stacked_batch_norm`, BN of R runs trained as
  one batched model (``hydra/launcher=stacked``): each run's statistics over its own mini-batch.
* :mod:`bnexp.nets.bn.groupnorm` -- the batch-free controls: :class:`LayerNorm` (Ba et al. 2016,
  ``bn=layer``) and :class:`GroupNorm` (Wu & He 2018, ``bn=group``), per example, with BN's
  per-channel gamma and beta; :func:`group_norm` is their math.

Shapes: a fully-connected activation is (m, d) -- statistics per feature over the m
examples of the mini-batch; a convolutional activation is (N, C, H, W) -- statistics per
channel over (N, H, W), i.e. over m = N*H*W values (Sec. 3.2).

The modules depend only on torch and on each other (functional <- reference <- population;
functional <- distributed; noisy and groupnorm stand alone), never on the rest of bnexp, so
every other module can import them.
"""

from bnexp.nets.bn.sync_and_ghost import (CrossReplicaBatchNorm, GhostBatchNorm, cross_replica_batch_norm,
                                  ghost_batch_norm, replica_local, sync_batch_norm)
from bnexp.nets.bn.functional import (batch_norm_backward, batch_norm_inference, batch_norm_train,
                                 batch_norm_train_with_statistics, batch_statistics)
from bnexp.nets.bn.groupnorm import DEFAULT_GROUPS, GroupNorm, LayerNorm, group_norm, group_statistics, layer_norm
from bnexp.nets.bn.noisy import NoisyBatchNorm, held_noise, sample_noise
from bnexp.nets.bn.population import BN_TYPES, bn_layers, recompute_population_statistics
from bnexp.nets.bn.reference import ReferenceBatchNorm

__all__ = [
    "batch_statistics",
    "batch_norm_train",
    "batch_norm_train_with_statistics",
    "batch_norm_backward",
    "batch_norm_inference",
    "ReferenceBatchNorm",
    "NoisyBatchNorm",
    "sample_noise",
    "held_noise",
    "BN_TYPES",
    "bn_layers",
    "recompute_population_statistics",
    "CrossReplicaBatchNorm",
    "cross_replica_batch_norm",
    "GhostBatchNorm",
    "ghost_batch_norm",
    "sync_batch_norm",
    "replica_local",
    "GroupNorm",
    "LayerNorm",
    "group_norm",
    "group_statistics",
    "layer_norm",
    "DEFAULT_GROUPS",
]
