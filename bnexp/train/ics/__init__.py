"""Measurements of internal covariate shift (ICS), from two views.

The distribution view is in :mod:`bnexp.train.ics.distribution`, the optimization view in
:mod:`bnexp.train.ics.gradient` and :mod:`bnexp.train.ics.landscape`; this package re-exports their
public names.

1. The distribution view of the BN paper (Ioffe & Szegedy 2015, Sec. 1-2): ICS is
   "the change in the distribution of network activations due to the change in
   network parameters during training". :func:`wasserstein1`, :func:`per_unit_wasserstein1`
   (the primary number), :func:`per_unit_shift` and :class:`DistributionShiftTracker`
   quantify how far the distribution of a
   layer's values (e.g. the input to its nonlinearity, as captured by
   :meth:`bnexp.train.monitor.ShiftMonitor.capture` on a fixed probe set) moved since the
   previous and since the first snapshot, raw (W1 in the values' units) and scale-free
   (:func:`per_unit_relative_w1`: W1 in initial spreads; :func:`per_unit_ks`: the
   Kolmogorov-Smirnov distance), each with its sampling-noise floor. Cheap: a few sorts of
   at most ``max_values`` values and one pass over the activations per layer.

2. The optimization view of Santurkar, Tsipras, Ilyas & Madry, "How Does Batch
   Normalization Help Optimization?" (NeurIPS 2018):

   * :func:`gradient_ics` -- their Def. 2.1 (Sec. 2.2, Fig. 3): how much the gradient
     of a layer's weights changes when the layers before it take their update, also
     per unit of the earlier layers' relative movement (``l2_rel_per_move``).
   * :func:`landscape_probe` -- the loss-landscape smoothness of Sec. 3.1, Fig. 4:
     loss variation, gradient predictiveness and "effective" beta-smoothness along
     the gradient direction, raw, with steps relative to each parameter tensor's norm,
     and filter-normalized (Li et al. 2018, :func:`filter_normalize`) along the gradient
     and along a fixed random direction.
   (The "noisy BN" of their Sec. 2.1, Fig. 2 -- BN with deliberately injected
   distributional instability -- is a BN variant and lives in :mod:`bnexp.nets.bn.noisy`.)

The gradient-based measurements work on ``copy.deepcopy`` copies of the model in
training mode (BN with batch statistics, dropout active) and leave the model, its
gradients, its BN running buffers, the optimizer and torch's global RNG state as
they found them.

Shapes: a fully-connected activation is (P, d) -- the units are the d features; a
convolutional activation is (P, C, H, W) -- the units are the C channels, each
pooled over (P, H, W), as BN normalizes them (BN paper Sec. 3.2).
"""

from bnexp.train.ics.distribution import (DistributionShiftTracker, ks_distance, per_unit_ks, per_unit_relative_w1,
                                    per_unit_shift, per_unit_wasserstein1, unit_moments, wasserstein1)
from bnexp.train.ics.gradient import gradient_ics, layer_param_groups
from bnexp.train.ics.landscape import filter_normalize, filter_norms, landscape_probe

__all__ = [
    "wasserstein1",
    "unit_moments",
    "per_unit_shift",
    "per_unit_wasserstein1",
    "ks_distance",
    "per_unit_ks",
    "per_unit_relative_w1",
    "DistributionShiftTracker",
    "gradient_ics",
    "layer_param_groups",
    "landscape_probe",
    "filter_normalize",
    "filter_norms",
]
