"""Distribution-shift metrics: ICS in the BN paper's sense (Ioffe & Szegedy 2015, Sec. 1-2).

"The change in the distribution of network activations due to the change in network
parameters during training": :func:`wasserstein1`, :func:`per_unit_shift` and
:class:`DistributionShiftTracker` quantify how far the distribution of a layer's values
(e.g. the pre-activations captured by :meth:`bnexp.monitor.ShiftMonitor.capture` on a
fixed probe set) moved since the previous and since the first snapshot.

Shapes: a fully-connected activation is (P, d) -- the units are the d features; a
convolutional activation is (P, C, H, W) -- the units are the C channels, each pooled
over (P, H, W), as BN normalizes them (BN paper Sec. 3.2).
"""

from __future__ import annotations

import torch


def _w1_sorted(a: torch.Tensor, b: torch.Tensor) -> float:
    """W1 between two sorted, non-empty 1-D float64 tensors on the same device."""
    n, m = a.numel(), b.numel()
    if n == m:
        return float((a - b).abs().mean())
    z = torch.cat([a, b]).sort().values
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
    a64 = a.detach().to(torch.float64).sort().values
    b64 = b.detach().to(device=a64.device, dtype=torch.float64).sort().values
    return _w1_sorted(a64, b64)


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


def _unit_columns(x: torch.Tensor, max_per_unit: int | None = None) -> torch.Tensor:
    """(P, d) or (P, C, H, W) -> (k, units) float64 matrix, each column one unit's values sorted;
    at most ``max_per_unit`` rows, taken by a fixed stride over the rows (examples, positions)."""
    v = _units_last(x.detach())
    if v.shape[0] == 0:
        raise ValueError("no values per unit (P = 0)")
    if max_per_unit is not None and v.shape[0] > max_per_unit:
        v = v[:: -(-v.shape[0] // max_per_unit)]
    v = v.to(torch.float64)
    if not bool(torch.isfinite(v).all()):
        raise ValueError("a layer's values contain NaN or infinite values")
    return v.sort(dim=0).values


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
    ``max_values // units`` per unit, a fixed stride over the examples and positions, so
    feed the same probe set every time), the pooled values (at most ``max_values``) and
    the per-unit means and stds. Each :meth:`update` compares the new values against both
    snapshots and then makes them the previous snapshot:

    * ``w1_prev`` / ``w1_first`` -- the primary number: :func:`per_unit_wasserstein1`,
      W1 per unit, averaged over units (activation units);
    * ``w1_pooled_prev`` / ``w1_pooled_first`` -- :func:`wasserstein1` of all units pooled
      (kept for comparison; shifts of different units can cancel in it, so it is
      <= the per-unit one up to subsampling);
    * ``mean_shift_*`` / ``log_std_ratio_*`` -- :func:`per_unit_shift` (dimensionless / nats).

    This measures ICS in the sense of the BN paper (Ioffe & Szegedy 2015, Sec. 2: the
    change in the distributions of internal nodes during training), e.g. on the inputs
    to the nonlinearities captured by :meth:`bnexp.monitor.ShiftMonitor.capture`.

    Args:
        max_values: cap on the values stored per snapshot (>= 1), both for the per-unit
            and for the pooled values.
        eps: std floor of :func:`per_unit_shift`.

    Snapshots live on the CPU (float32 values, float64 moments): memory per layer is
    about 2 * (8 * max_values + 16 * units) bytes.

    Raises:
        ValueError: for max_values < 1.
    """

    KEYS = ("w1_prev", "w1_first", "w1_pooled_prev", "w1_pooled_first", "mean_shift_prev",
            "mean_shift_first", "log_std_ratio_prev", "log_std_ratio_first")

    def __init__(self, max_values: int = 100_000, eps: float = 1e-6):
        if max_values < 1:
            raise ValueError(f"max_values must be >= 1, got {max_values}")
        self.max_values = int(max_values)
        self.eps = float(eps)
        self.first: dict[str, dict] = {}
        self.prev: dict[str, dict] = {}

    def _snapshot(self, x: torch.Tensor, step: int) -> dict:
        mean, std = unit_moments(x)
        values = _pooled_subsample(x, self.max_values).to(torch.float32).sort().values
        if values.numel() == 0:
            raise ValueError("a layer has no values")
        if not bool(torch.isfinite(values).all()):
            raise ValueError("a layer's values contain NaN or infinite values")
        units = _unit_columns(x, max(1, self.max_values // mean.numel())).to(torch.float32)
        return {"values": values.cpu(), "units": units.cpu(), "mean": mean.cpu(), "std": std.cpu(),
                "step": int(step)}

    def _compare(self, ref: dict, now: dict) -> dict[str, float]:
        pooled = _w1_sorted(ref["values"].to(torch.float64), now["values"].to(torch.float64))
        per_unit = float(_w1_columns(ref["units"].to(torch.float64), now["units"].to(torch.float64)).mean())
        return {"w1": per_unit, "w1_pooled": pooled,
                **_shift_from_moments(ref["mean"], ref["std"], now["mean"], now["std"], self.eps)}

    def update(self, layer_values: dict[str, torch.Tensor], step: int) -> dict[str, dict[str, float]]:
        """Compare new values of each layer with its previous and first snapshots.

        Args:
            layer_values: {layer name: (P, d) or (P, C, H, W) tensor}, any device.
                A name seen for the first time gets its first snapshot now.
            step: the training step (recorded with the snapshots).

        Returns:
            {layer name: {key: float for key in KEYS}}; for a layer's first update all
            are 0.0 (the first snapshot is the current one).

        Raises:
            ValueError: bad rank, NaN/inf values, or a layer whose unit count changed.

        Cost per layer: one pass over the values, sorts of <= 2 * max_values values
        and four W1 evaluations (O(max_values log max_values)).
        """
        out: dict[str, dict[str, float]] = {}
        for name, x in layer_values.items():
            snap = self._snapshot(x, step)
            if name not in self.first:
                self.first[name] = snap
                self.prev[name] = snap
                out[name] = {k: 0.0 for k in self.KEYS}
                continue
            if snap["mean"].shape != self.first[name]["mean"].shape:
                raise ValueError(f"layer {name!r}: unit count changed from {self.first[name]['mean'].numel()} "
                                 f"to {snap['mean'].numel()}")
            cmp = {"prev": self._compare(self.prev[name], snap), "first": self._compare(self.first[name], snap)}
            out[name] = {f"{k}_{ref}": cmp[ref][k] for k in ("w1", "w1_pooled", "mean_shift", "log_std_ratio")
                         for ref in ("prev", "first")}
            self.prev[name] = snap
        return out

    def layer_names(self) -> list[str]:
        """Names of the layers with a snapshot, in first-seen order."""
        return list(self.first)

    def state_dict(self) -> dict:
        """Snapshots and settings for checkpoints (all tensors cloned, on the CPU)."""
        def snap_state(s: dict) -> dict:
            return {k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else int(v)) for k, v in s.items()}
        return {"max_values": self.max_values, "eps": self.eps,
                "first": {k: snap_state(v) for k, v in self.first.items()},
                "prev": {k: snap_state(v) for k, v in self.prev.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (tensors moved to the CPU).

        Raises:
            KeyError: if a key is missing.
        """
        self.max_values = int(state["max_values"])
        self.eps = float(state["eps"])

        def snap(s: dict) -> dict:
            return {"values": s["values"].detach().cpu().to(torch.float32).clone(),
                    "units": s["units"].detach().cpu().to(torch.float32).clone(),
                    "mean": s["mean"].detach().cpu().to(torch.float64).clone(),
                    "std": s["std"].detach().cpu().to(torch.float64).clone(), "step": int(s["step"])}
        self.first = {k: snap(v) for k, v in state["first"].items()}
        self.prev = {k: snap(v) for k, v in state["prev"].items()}
