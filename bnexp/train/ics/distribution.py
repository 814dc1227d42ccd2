"""Distribution-shift metrics: ICS in the BN paper's sense (Ioffe & Szegedy 2015, Sec. 1-2).

"The change in the distribution of network activations due to the change in network
parameters during training": :func:`wasserstein1`, :func:`per_unit_shift` and
:class:`DistributionShiftTracker` quantify how far the distribution of a layer's values
(e.g. the pre-activations captured by :meth:`bnexp.train.monitor.ShiftMonitor.capture` on a
fixed probe set) moved since the previous and since the first snapshot.

Beside the raw per-unit W1 (in the units of the values) the tracker records two scale-free
measures -- W1 divided by the unit's initial p15-p85 spread (:func:`per_unit_relative_w1`) and
the two-sample Kolmogorov-Smirnov distance (:func:`ks_distance`, :func:`per_unit_ks`) -- and,
for each, its sampling-noise floor (see :class:`DistributionShiftTracker`).

Shapes: a fully-connected activation is (P, d) -- the units are the d features; a
convolutional activation is (P, C, H, W) -- the units are the C channels, each pooled
over (P, H, W), as BN normalizes them (BN paper Sec. 3.2).
"""

from __future__ import annotations

import math
import zlib

import torch

from bnexp.train.ics.sorting import sort_values


def _w1_sorted(a: torch.Tensor, b: torch.Tensor) -> float:
    """W1 between two sorted, non-empty 1-D float64 tensors on the same device."""
    n, m = a.numel(), b.numel()
    if n == m:
        return float((a - b).abs().mean())
    z = sort_values(torch.cat([a, b]))
    dz = z[1:] - z[:-1]
    left = z[:-1]
    # On [z_k, z_{k+1}) both empirical CDFs are constant: F(z_k) = #{values <= z_k} / size.
    fa = torch.searchsorted(a, left, right=True).to(torch.float64) / n
    fb = torch.searchsorted(b, left, right=True).to(torch.float64) / m
    return float(((fa - fb).abs() * dz).sum())


def _check_1d(name: str, t: torch.Tensor) -> None:
    if t.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor, got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values")


def wasserstein1(a: torch.Tensor, b: torch.Tensor) -> float:
    """1-D Wasserstein-1 (earth mover's) distance between two empirical distributions.

    With F_a, F_b the empirical CDFs of the samples ``a`` and ``b``,

        W1(a, b) = integral_0^1 |F_a^{-1}(u) - F_b^{-1}(u)| du = integral |F_a(t) - F_b(t)| dt,

    computed exactly: the merged sorted samples split the real line into intervals
    on which both CDFs are constant. For equal sizes this reduces to
    mean_i |sort(a)_i - sort(b)_i|. In the units of the values (for pre-activations:
    activation units); W1(a, a + c) = |c|. Used as the distribution-shift measure of
    ICS in the BN paper's sense (Ioffe & Szegedy 2015, Sec. 2: the change of a
    layer's input distribution during training).

    Args:
        a: (n,) sample, any float dtype/device.
        b: (m,) sample; n and m may differ. Computed in float64 on a's device.

    Returns:
        W1 as a Python float, >= 0.

    Raises:
        ValueError: if an input is not 1-D, is empty, or holds NaN/inf.

    Cost: O((n + m) log(n + m)) time, O(n + m) memory (one sort of each input and,
    for n != m, one of the merged sample).
    """
    _check_1d("a", a)
    _check_1d("b", b)
    a64 = sort_values(a.detach().to(torch.float64))
    b64 = sort_values(b.detach().to(device=a64.device, dtype=torch.float64))
    return _w1_sorted(a64, b64)


def _ks_sorted_rows(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise two-sample KS distance of (U, n) and (U, m) row-sorted float64 tensors: a (U,) tensor.

    Both empirical CDFs are right-continuous step functions that jump only at sample points, so
    sup_t |F_a(t) - F_b(t)| is attained at one of the n + m pooled points; F at a point is
    #{values <= point} / size (``searchsorted(..., right=True)``), which handles ties. Without ties inside
    a sample, its own CDF at its j-th point is (j + 1) / n: only the other sample is searched (same counts)."""
    n, m = a.shape[1], b.shape[1]
    if bool((a[:, 1:] == a[:, :-1]).any()) or bool((b[:, 1:] == b[:, :-1]).any()):
        z = torch.cat([a, b], dim=1)
        return (torch.searchsorted(a, z, right=True).double() / n
                - torch.searchsorted(b, z, right=True).double() / m).abs().amax(dim=1)
    own_a, own_b = (torch.arange(1, k + 1, dtype=torch.float64, device=a.device) / k for k in (n, m))
    at_a = own_a - torch.searchsorted(b, a, right=True).double() / m
    at_b = torch.searchsorted(a, b, right=True).double() / n - own_b
    return torch.maximum(at_a.abs().amax(dim=1), at_b.abs().amax(dim=1))


def ks_distance(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov distance between two empirical distributions.

        D(a, b) = sup_t |F_a(t) - F_b(t)|,

    F_a, F_b the empirical CDFs of ``a`` and ``b`` (Kolmogorov 1933; Smirnov 1948; the statistic
    of ``scipy.stats.ks_2samp``). Rank-based and unitless, in [0, 1]: D = 0 for samples with the
    same empirical distribution, 1 for samples that do not overlap; unchanged when the same
    strictly increasing map is applied to both samples (a rescale, a shift, a log ...).

    Args:
        a: (n,) sample, any float dtype/device.
        b: (m,) sample; n and m may differ; ties (within and across samples) are allowed.

    Returns:
        D as a Python float in [0, 1], computed in float64 on a's device.

    Raises:
        ValueError: if an input is not 1-D, is empty, or holds NaN/inf.

    Cost: O((n + m) log(n + m)) (two sorts and two binary searches of the pooled sample).
    """
    _check_1d("a", a)
    _check_1d("b", b)
    a64 = sort_values(a.detach().to(torch.float64))
    b64 = sort_values(b.detach().to(device=a64.device, dtype=torch.float64))
    return float(_ks_sorted_rows(a64[None], b64[None])[0])


def _units_last(x: torch.Tensor) -> torch.Tensor:
    """(P, d) -> (P, d); (P, C, H, W) -> (P*H*W, C): one column per unit."""
    if x.dim() == 2:
        return x
    if x.dim() == 4:
        return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])
    raise ValueError(f"expected a (P, d) or (P, C, H, W) activation, got shape {tuple(x.shape)}")


def unit_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-unit mean and (biased, population) standard deviation of an activation.

    Args:
        x: (P, d) -- units are the d features, statistics over the P rows; or
            (P, C, H, W) -- units are the C channels, statistics over (P, H, W)
            (the BN paper's convolutional pooling, Sec. 3.2).

    Returns:
        (mean, std): two float64 (d,) or (C,) tensors on x's device, in the units of x.

    Raises:
        ValueError: for other ranks or when there are no values per unit.

    Cost: one pass over x.
    """
    v = _units_last(x.detach()).to(torch.float64)
    if v.shape[0] == 0:
        raise ValueError("no values per unit (P = 0)")
    mean = v.mean(dim=0)
    std = v.std(dim=0, unbiased=False)
    return mean, std


def _shift_from_moments(mean_ref, std_ref, mean_now, std_now, eps: float) -> dict[str, float]:
    if mean_ref.shape != mean_now.shape:
        raise ValueError(f"unit counts differ: reference has {tuple(mean_ref.shape)}, "
                         f"current has {tuple(mean_now.shape)}")
    mean_now = mean_now.to(mean_ref.device)
    std_now = std_now.to(mean_ref.device)
    sr = std_ref.clamp_min(eps)
    sn = std_now.clamp_min(eps)
    return {"mean_shift": float(((mean_now - mean_ref).abs() / sr).mean()),
            "log_std_ratio": float(torch.log(sn / sr).abs().mean())}


def per_unit_shift(x_ref: torch.Tensor, x_now: torch.Tensor, eps: float = 1e-6) -> dict[str, float]:
    """Per-unit shift of the first two moments of an activation (BN paper view of ICS).

    For every unit j (feature of a (P, d) activation, channel of a (P, C, H, W) one,
    pooled over P, H, W) with mean mu_j and population std sigma_j:

        mean_shift    = mean_j |mu_now_j - mu_ref_j| / max(sigma_ref_j, eps)
        log_std_ratio = mean_j |log(max(sigma_now_j, eps) / max(sigma_ref_j, eps))|

    ``mean_shift`` is in units of the reference std (dimensionless); ``log_std_ratio``
    is in nats (log(2) ~ 0.69 means the spread doubled or halved). These are exactly
    the first- and second-moment changes that BN removes (Ioffe & Szegedy 2015,
    Sec. 2-3: "fixed means and variances of layer inputs").

    Args:
        x_ref: reference activation, (P, d) or (P, C, H, W).
        x_now: current activation with the same number of units; P (and H, W) may differ.
        eps: floor for the stds, so constant units give finite values.

    Returns:
        {"mean_shift": float, "log_std_ratio": float}, both >= 0.

    Raises:
        ValueError: for ranks other than 2 and 4, or if the unit counts differ.

    Cost: one pass over each input.
    """
    mr, sr = unit_moments(x_ref)
    mn, sn = unit_moments(x_now)
    return _shift_from_moments(mr, sr, mn, sn, eps)


def _strided_rows(v: torch.Tensor, max_rows: int | None) -> torch.Tensor:
    """At most ``max_rows`` rows of a (R, units) matrix, by a fixed stride ceil(R / max_rows)."""
    return v[:: -(-v.shape[0] // max_rows)] if max_rows is not None and v.shape[0] > max_rows else v


def _sorted_columns(v: torch.Tensor) -> torch.Tensor:
    """(k, units) -> the same as float64 with each column sorted; refuses NaN/inf."""
    v = v.to(torch.float64)
    if not bool(torch.isfinite(v).all()):
        raise ValueError("a layer's values contain NaN or infinite values")
    return sort_values(v, 0)


def _unit_columns(x: torch.Tensor, max_per_unit: int | None = None) -> torch.Tensor:
    """(P, d) or (P, C, H, W) -> (k, units) float64 matrix, each column one unit's values sorted;
    at most ``max_per_unit`` rows, taken by a fixed stride over the rows (examples, positions)."""
    v = _units_last(x.detach())
    if v.shape[0] == 0:
        raise ValueError("no values per unit (P = 0)")
    return _sorted_columns(_strided_rows(v, max_per_unit))


def _column_quantile(cols: torch.Tensor, q: float) -> torch.Tensor:
    """Quantile q in [0, 1] of every column of a column-sorted (k, units) matrix, with linear
    interpolation between order statistics (numpy's and ``torch.quantile``'s default): (units,)."""
    pos = q * (cols.shape[0] - 1)
    lo = int(pos)
    hi = min(lo + 1, cols.shape[0] - 1)
    return cols[lo] + (pos - lo) * (cols[hi] - cols[lo])


def _column_spread(cols: torch.Tensor, percentiles: tuple[float, float]) -> torch.Tensor:
    """Per-column outer-percentile range (p85 - p15 by default) of a column-sorted matrix: (units,)."""
    return _column_quantile(cols, percentiles[1] / 100.0) - _column_quantile(cols, percentiles[0] / 100.0)


def _ks_columns(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-column KS distance of two column-sorted (k, units) and (k', units) matrices: (units,)."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"unit counts differ: reference has {a.shape[1]}, current has {b.shape[1]}")
    return _ks_sorted_rows(a.T.contiguous(), b.to(a.device).T.contiguous())


def _relative_mean(per_unit: torch.Tensor, spread: torch.Tensor) -> float:
    """mean_j per_unit_j / spread_j over the units with spread_j > 0 (NaN if there is none)."""
    ok = spread.to(per_unit.device) > 0
    if not bool(ok.any()):
        return math.nan
    return float((per_unit[ok] / spread.to(per_unit.device)[ok]).mean())


def _w1_columns(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per-column W1 of two column-sorted (k, units) and (k', units) matrices: a (units,) tensor."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"unit counts differ: reference has {a.shape[1]}, current has {b.shape[1]}")
    b = b.to(a.device)
    if a.shape[0] == b.shape[0]:
        return (a - b).abs().mean(dim=0)
    return torch.tensor([_w1_sorted(a[:, j].contiguous(), b[:, j].contiguous()) for j in range(a.shape[1])],
                        dtype=torch.float64)


def per_unit_wasserstein1(x_ref: torch.Tensor, x_now: torch.Tensor) -> float:
    """Per-unit Wasserstein-1 distance, averaged over the units (the primary distribution shift).

    For every unit j (feature of a (P, d) activation; channel of a (P, C, H, W) one, its
    values pooled over P, H, W as BN pools them, BN paper Sec. 3.2) the 1-D W1 distance of
    :func:`wasserstein1` between unit j's values in ``x_ref`` and in ``x_now``; then the mean
    over units:

        W1_unit = 1/d sum_j W1(x_ref[:, j], x_now[:, j]).

    Unlike W1 of all units pooled together, shifts of different units cannot cancel: two
    units that swap their distributions leave the pooled distribution unchanged (pooled
    W1 = 0) but give a positive per-unit W1. W1 is jointly convex and the pooled
    distribution is the equal-weight mixture of the units', so pooled W1 <= W1_unit.
    Units: those of the values.

    Args:
        x_ref: reference activation, (P, d) or (P, C, H, W).
        x_now: current activation with the same number of units; P (and H, W) may differ.

    Returns:
        the mean over units of the per-unit W1, a Python float >= 0.

    Raises:
        ValueError: ranks other than 2 and 4, different unit counts, no values, NaN/inf.

    Cost: one sort of each input (per column), O(P log P) per unit.
    """
    return float(_w1_columns(_unit_columns(x_ref), _unit_columns(x_now)).mean())


def per_unit_ks(x_ref: torch.Tensor, x_now: torch.Tensor) -> float:
    """Per-unit two-sample Kolmogorov-Smirnov distance, averaged over the units (scale-free shift).

    For every unit j (a feature of a (P, d) activation; a channel of a (P, C, H, W) one pooled
    over P, H, W) the KS distance of :func:`ks_distance` between unit j's values in ``x_ref``
    and in ``x_now``, then the mean over units. Unitless, in [0, 1]; unchanged when any strictly
    increasing map (its own for each unit) is applied to the values of both activations -- in
    particular when a unit's values are rescaled by c_j > 0 at every snapshot, which changes the
    raw W1 by c_j.

    Args:
        x_ref: reference activation, (P, d) or (P, C, H, W).
        x_now: current activation with the same number of units; P (and H, W) may differ.

    Returns:
        the mean over units of the per-unit KS distance, a Python float in [0, 1].

    Raises:
        ValueError: ranks other than 2 and 4, different unit counts, no values, NaN/inf.

    Cost: one sort of each input per column and one batched binary search, vectorised over units.
    """
    return float(_ks_columns(_unit_columns(x_ref), _unit_columns(x_now)).mean())


def per_unit_relative_w1(x_ref: torch.Tensor, x_now: torch.Tensor,
                         percentiles: tuple[float, float] = (15.0, 85.0)) -> float:
    """Per-unit W1 in units of the unit's reference spread, averaged over units (scale-free shift).

        w1_rel = mean_j W1(x_ref[:, j], x_now[:, j]) / s_j,   s_j = p85_j - p15_j of x_ref[:, j],

    the percentiles linearly interpolated (numpy's default). With the first snapshot as
    reference this is the per-unit analogue of the TensorBoard "relative to its start" chart
    (:func:`bnexp.train.monitor.relative_bands`, which divides the layer's percentiles by the layer's
    initial spread): a value of k means the unit's distribution moved by k initial spreads. A
    shift of unit j's values by k s_j gives exactly k. Unchanged when unit j's values are
    rescaled by c_j > 0 in both activations (the raw W1 scales by c_j); not unchanged under
    other monotone maps (see :func:`per_unit_ks`).

    Args:
        x_ref: reference activation, (P, d) or (P, C, H, W); it also gives the spreads.
        x_now: current activation with the same number of units.
        percentiles: (low, high) percentiles of the spread, 0 <= low < high <= 100.

    Returns:
        a Python float >= 0 (dimensionless); units with s_j = 0 (constant in x_ref) are left
        out of the mean, and the result is NaN if every unit is constant.

    Raises:
        ValueError: bad percentiles, ranks other than 2 and 4, different unit counts, no
            values, NaN/inf.

    Cost: as :func:`per_unit_wasserstein1`.
    """
    lo, hi = _check_percentiles(percentiles)
    ref = _unit_columns(x_ref)
    return _relative_mean(_w1_columns(ref, _unit_columns(x_now)), _column_spread(ref, (lo, hi)))


def _check_percentiles(percentiles) -> tuple[float, float]:
    lo, hi = (float(p) for p in percentiles)
    if not 0.0 <= lo < hi <= 100.0:
        raise ValueError(f"spread percentiles must satisfy 0 <= low < high <= 100, got {tuple(percentiles)}")
    return lo, hi


def _pooled_subsample(x: torch.Tensor, max_values: int) -> torch.Tensor:
    """At most ``max_values`` of x's values, by a fixed stride over the examples (dim 0), so
    every unit stays equally represented; a flat stride only if one example alone is too big."""
    x = x.detach()
    per_example = max(1, x[0].numel()) if x.shape[0] > 0 else 1
    if x.numel() > max_values and x.shape[0] > 1:
        keep = max(1, max_values // per_example)
        stride = -(-x.shape[0] // keep)
        x = x[::stride]
    flat = x.reshape(-1)
    if flat.numel() > max_values:
        flat = flat[:: -(-flat.numel() // max_values)]
    return flat


class DistributionShiftTracker:
    """Distribution shift of each layer's values since the previous and the first snapshot.

    Keeps per layer name two snapshots -- the first one and the previous one -- each
    holding, per unit, the sorted values (at most ``max_values`` in all, i.e.
    k = ceil(R / ceil(R / (max_values // units))) of a unit's R values (examples x positions),
    a fixed stride over the examples and positions, so feed the same probe set every time),
    the pooled values (at most ``max_values``) and the per-unit means and stds; and, from the
    first snapshot, every unit's initial spread s_j (the ``spread_percentiles`` range, p85 - p15
    by default, of at most ``spread_max_values // units`` of the unit's values, the same fixed
    stride). Each :meth:`update` compares the new values against both snapshots and then makes
    them the previous snapshot:

    * ``w1_prev`` / ``w1_first`` -- :func:`per_unit_wasserstein1`, W1 per unit, averaged over
      units (raw: in the units of the values, so it also grows when the values merely grow);
    * ``w1_rel_prev`` / ``w1_rel_first`` -- scale-free: per unit W1 / s_j (the INITIAL spread,
      for both references), averaged over the units with s_j > 0 (units constant at the first
      snapshot are left out; NaN if every unit is); unchanged by a per-unit rescale of the
      values (see :func:`per_unit_relative_w1`);
    * ``ks_prev`` / ``ks_first`` -- scale-free: the two-sample Kolmogorov-Smirnov distance per
      unit, averaged over units (:func:`per_unit_ks`; unitless, in [0, 1]; unchanged by any
      strictly increasing per-unit map of the values);
    * ``w1_floor``, ``w1_rel_floor``, ``ks_floor`` -- the sampling-noise floors of the three
      (see below);
    * ``w1_pooled_prev`` / ``w1_pooled_first`` -- :func:`wasserstein1` of all units pooled
      (kept for comparison; shifts of different units can cancel in it, so it is
      <= the per-unit one up to subsampling);
    * ``mean_shift_*`` / ``log_std_ratio_*`` -- :func:`per_unit_shift` (dimensionless / nats).

    Sampling-noise floor. The probe inputs are fixed and the captured values are a
    deterministic function of the parameters, so the only sampling is the cap: each unit is
    represented by k of its R values (a fixed stride). Were the unit's distribution over the
    probe unchanged while its values moved between examples, the k values kept at two
    records would be two different samples of one distribution, and W1 and KS between them
    would be positive. The floor is that statistic between two independent samples of one
    distribution at the size actually used: independent uniform draws of k of the current
    record's R rows (each without replacement; a generator seeded from the layer name and
    the step, so the floor is reproducible and torch's global RNG is untouched), compared per
    unit exactly as the records are (float32 values, mean over units; ``w1_rel_floor`` divides
    by the same initial spreads); the mean over the 3 pairs of ``FLOOR_DRAWS`` = 3 draws, which
    damps the floor's own draw-to-draw noise. When nothing is subsampled (k = R) both draws are all the
    values and every floor is exactly 0. The floor is per layer and per record (it follows
    the current scale of the values); a value within its floor is at the sampling-noise
    level. It is an upper bound on the noise of a record whose values did not move at all
    (then the statistic is exactly 0), and it does not cover the probe set's own sampling
    from the test distribution (the measured distribution is the one over the fixed probe).

    This measures ICS in the sense of the BN paper (Ioffe & Szegedy 2015, Sec. 2: the
    change in the distributions of internal nodes during training), e.g. on the inputs
    to the nonlinearities captured by :meth:`bnexp.train.monitor.ShiftMonitor.capture`.

    Args:
        max_values: cap on the values stored per snapshot (>= 1), both for the per-unit
            and for the pooled values.
        eps: std floor of :func:`per_unit_shift`.
        spread_percentiles: (low, high) percentiles of the initial spread s_j, as the
            monitor's outermost percentiles (TensorBoard's "relative to its start" chart).
        spread_max_values: cap on the values (all units) the initial spreads are taken
            from (None: ``max_values``); used once per layer.
        seed: mixed into the floor's generator seeds.

    Snapshots live on the CPU (float32 values, float64 moments): memory per layer is
    about 2 * (8 * max_values + 16 * units) bytes.

    Raises:
        ValueError: for max_values < 1, spread_max_values < 1, or bad spread percentiles.
    """

    KEYS = ("w1_prev", "w1_first", "w1_pooled_prev", "w1_pooled_first", "mean_shift_prev",
            "mean_shift_first", "log_std_ratio_prev", "log_std_ratio_first", "w1_rel_prev", "w1_rel_first",
            "ks_prev", "ks_first", "w1_floor", "w1_rel_floor", "ks_floor")
    COMPARED = ("w1", "w1_pooled", "mean_shift", "log_std_ratio", "w1_rel", "ks")
    FLOOR_DRAWS = 3  # independent draws; the floor is the mean over their 3 pairs

    def __init__(self, max_values: int = 100_000, eps: float = 1e-6,
                 spread_percentiles: tuple[float, float] = (15.0, 85.0), spread_max_values: int | None = None,
                 seed: int = 0):
        if max_values < 1:
            raise ValueError(f"max_values must be >= 1, got {max_values}")
        if spread_max_values is not None and spread_max_values < 1:
            raise ValueError(f"spread_max_values must be >= 1, got {spread_max_values}")
        self.max_values = int(max_values)
        self.eps = float(eps)
        self.spread_percentiles = _check_percentiles(spread_percentiles)
        self.spread_max_values = int(spread_max_values if spread_max_values is not None else max_values)
        self.seed = int(seed)
        self.first: dict[str, dict] = {}
        self.prev: dict[str, dict] = {}
        self.spread: dict[str, torch.Tensor] = {}

    def _snapshot(self, x: torch.Tensor, step: int) -> tuple[dict, torch.Tensor]:
        """The snapshot of x and its (R, units) matrix of all values, one column per unit."""
        mean, std = unit_moments(x)
        values = sort_values(_pooled_subsample(x, self.max_values).to(torch.float32))
        if values.numel() == 0:
            raise ValueError("a layer has no values")
        if not bool(torch.isfinite(values).all()):
            raise ValueError("a layer's values contain NaN or infinite values")
        v = _units_last(x.detach())
        units = _sorted_columns(_strided_rows(v, max(1, self.max_values // mean.numel()))).to(torch.float32)
        return {"values": values.cpu(), "units": units.cpu(), "mean": mean.cpu(), "std": std.cpu(),
                "step": int(step)}, v

    def _initial_spread(self, v: torch.Tensor) -> torch.Tensor:
        cols = _sorted_columns(_strided_rows(v, max(1, self.spread_max_values // v.shape[1])))
        return _column_spread(cols, self.spread_percentiles).cpu()

    def _floors(self, name: str, v: torch.Tensor, k: int, step: int) -> dict[str, float]:
        """The three floors for k of the R rows of v (see the class docstring)."""
        spread = self.spread[name]
        rows = v.shape[0]
        if k >= rows:
            return {"w1_floor": 0.0, "w1_rel_floor": 0.0 if bool((spread > 0).any()) else math.nan, "ks_floor": 0.0}
        gen = torch.Generator().manual_seed(zlib.crc32(f"{self.seed}:{name}:{int(step)}".encode()))
        draws = []
        for _ in range(self.FLOOR_DRAWS):  # k of the rows, uniformly without replacement
            idx = torch.rand(rows, generator=gen, dtype=torch.float64).topk(k).indices.to(v.device)
            draws.append(_sorted_columns(v[idx].to(torch.float32)))  # rounded as the snapshots are
        pairs = [(a, b) for i, a in enumerate(draws) for b in draws[i + 1:]]
        w1 = torch.stack([(a - b).abs().mean(dim=0) for a, b in pairs]).mean(dim=0)
        ks = torch.stack([_ks_columns(a, b) for a, b in pairs]).mean(dim=0)
        return {"w1_floor": float(w1.mean()), "w1_rel_floor": _relative_mean(w1, spread), "ks_floor": float(ks.mean())}

    def _compare(self, ref: dict, now: dict, spread: torch.Tensor) -> dict[str, float]:
        pooled = _w1_sorted(ref["values"].to(torch.float64), now["values"].to(torch.float64))
        ref_u, now_u = ref["units"].to(torch.float64), now["units"].to(torch.float64)
        per_unit = _w1_columns(ref_u, now_u)
        return {"w1": float(per_unit.mean()), "w1_pooled": pooled,
                **_shift_from_moments(ref["mean"], ref["std"], now["mean"], now["std"], self.eps),
                "w1_rel": _relative_mean(per_unit, spread), "ks": float(_ks_columns(ref_u, now_u).mean())}

    def update(self, layer_values: dict[str, torch.Tensor], step: int) -> dict[str, dict[str, float]]:
        """Compare new values of each layer with its previous and first snapshots.

        Args:
            layer_values: {layer name: (P, d) or (P, C, H, W) tensor}, any device.
                A name seen for the first time gets its first snapshot (and its units'
                initial spreads) now.
            step: the training step (recorded with the snapshots; seeds the floors' draws).

        Returns:
            {layer name: {key: float for key in KEYS}}; for a layer's first update every
            comparison is 0.0 (the first snapshot is the current one; ``w1_rel_*`` NaN if
            every unit is constant) and the floors are those of the current values.

        Raises:
            ValueError: bad rank, NaN/inf values, or a layer whose unit count changed.

        Cost per layer: one pass over the values, sorts of <= 5 * max_values values (the
        snapshot's and the floor's three draws, each a top-k of R uniform numbers), seven
        W1 and five KS evaluations (O(max_values log max_values)).
        """
        out: dict[str, dict[str, float]] = {}
        for name, x in layer_values.items():
            snap, v = self._snapshot(x, step)
            new = name not in self.first
            if new:
                self.first[name] = snap
                self.prev[name] = snap
                self.spread[name] = self._initial_spread(v)
            elif snap["mean"].shape != self.first[name]["mean"].shape:
                raise ValueError(f"layer {name!r}: unit count changed from {self.first[name]['mean'].numel()} "
                                 f"to {snap['mean'].numel()}")
            floors = self._floors(name, v, snap["units"].shape[0], step)
            if new:
                rel = 0.0 if bool((self.spread[name] > 0).any()) else math.nan
                rec = {k: (rel if k.startswith("w1_rel") else 0.0) for k in self.KEYS}
            else:
                cmp = {ref: self._compare(snaps[name], snap, self.spread[name])
                       for ref, snaps in (("prev", self.prev), ("first", self.first))}
                rec = {f"{k}_{ref}": cmp[ref][k] for k in self.COMPARED for ref in ("prev", "first")}
                self.prev[name] = snap
            rec.update(floors)
            out[name] = {k: rec[k] for k in self.KEYS}
        return out

    def layer_names(self) -> list[str]:
        """Names of the layers with a snapshot, in first-seen order."""
        return list(self.first)

    def state_dict(self) -> dict:
        """Snapshots, initial spreads and settings for checkpoints (all tensors cloned, on the CPU)."""
        def snap_state(s: dict) -> dict:
            return {k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else int(v)) for k, v in s.items()}
        return {"max_values": self.max_values, "eps": self.eps,
                "spread_percentiles": list(self.spread_percentiles), "spread_max_values": self.spread_max_values,
                "seed": self.seed,
                "first": {k: snap_state(v) for k, v in self.first.items()},
                "prev": {k: snap_state(v) for k, v in self.prev.items()},
                "spread": {k: v.detach().cpu().clone() for k, v in self.spread.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (tensors moved to the CPU). A state from before the
        scale-free measures (no ``"spread"``) gets its initial spreads from the first
        snapshots' stored per-unit values.

        Raises:
            KeyError: if a key is missing.
        """
        self.max_values = int(state["max_values"])
        self.eps = float(state["eps"])
        self.spread_percentiles = _check_percentiles(state.get("spread_percentiles", self.spread_percentiles))
        self.spread_max_values = int(state.get("spread_max_values", self.spread_max_values))
        self.seed = int(state.get("seed", self.seed))

        def snap(s: dict) -> dict:
            return {"values": s["values"].detach().cpu().to(torch.float32).clone(),
                    "units": s["units"].detach().cpu().to(torch.float32).clone(),
                    "mean": s["mean"].detach().cpu().to(torch.float64).clone(),
                    "std": s["std"].detach().cpu().to(torch.float64).clone(), "step": int(s["step"])}
        self.first = {k: snap(v) for k, v in state["first"].items()}
        self.prev = {k: snap(v) for k, v in state["prev"].items()}
        spread = state.get("spread", {})
        self.spread = {k: (spread[k].detach().cpu().to(torch.float64).clone() if k in spread else
                           _column_spread(v["units"].to(torch.float64), self.spread_percentiles))
                       for k, v in self.first.items()}
