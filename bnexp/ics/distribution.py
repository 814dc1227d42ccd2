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
    holding the sorted pooled values (at most ``max_values``, a fixed stride subsample
    over the examples, so feed the same probe set every time) and the per-unit means
    and stds. Each :meth:`update` compares the new values against both snapshots with
    :func:`wasserstein1` (all units pooled; in activation units) and :func:`per_unit_shift`
    (per unit; dimensionless / nats), then makes the new values the previous snapshot.
    This measures ICS in the sense of the BN paper (Ioffe & Szegedy 2015, Sec. 2: the
    change in the distributions of internal nodes during training), e.g. on the
    inputs to the nonlinearities captured by :meth:`bnexp.monitor.ShiftMonitor.capture`.

    Args:
        max_values: cap on the pooled values stored per snapshot (>= 1).
        eps: std floor of :func:`per_unit_shift`.

    Snapshots live on the CPU (float32 values, float64 moments): memory per layer is
    about 2 * (4 * max_values + 16 * units) bytes.

    Raises:
        ValueError: for max_values < 1.
    """

    KEYS = ("w1_prev", "w1_first", "mean_shift_prev", "mean_shift_first",
            "log_std_ratio_prev", "log_std_ratio_first")

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
        return {"values": values.cpu(), "mean": mean.cpu(), "std": std.cpu(), "step": int(step)}

    def _compare(self, ref: dict, now: dict) -> tuple[float, dict[str, float]]:
        w1 = _w1_sorted(ref["values"].to(torch.float64), now["values"].to(torch.float64))
        return w1, _shift_from_moments(ref["mean"], ref["std"], now["mean"], now["std"], self.eps)

    def update(self, layer_values: dict[str, torch.Tensor], step: int) -> dict[str, dict[str, float]]:
        """Compare new values of each layer with its previous and first snapshots.

        Args:
            layer_values: {layer name: (P, d) or (P, C, H, W) tensor}, any device.
                A name seen for the first time gets its first snapshot now.
            step: the training step (recorded with the snapshots).

        Returns:
            {layer name: {"w1_prev", "w1_first", "mean_shift_prev", "mean_shift_first",
            "log_std_ratio_prev", "log_std_ratio_first"}} (floats); for a layer's first
            update all six are 0.0 (the first snapshot is the current one).

        Raises:
            ValueError: bad rank, NaN/inf values, or a layer whose unit count changed.

        Cost per layer: one pass over the values, a sort of <= max_values values
        and two W1 evaluations (O(max_values log max_values)).
        """
        out: dict[str, dict[str, float]] = {}
        for name, x in layer_values.items():
            snap = self._snapshot(x, step)
            if name not in self.first:
                self.first[name] = snap
                self.prev[name] = snap
                out[name] = {k: 0.0 for k in self.KEYS}
                continue
            w1_p, sh_p = self._compare(self.prev[name], snap)
            w1_f, sh_f = self._compare(self.first[name], snap)
            out[name] = {"w1_prev": w1_p, "w1_first": w1_f,
                         "mean_shift_prev": sh_p["mean_shift"], "mean_shift_first": sh_f["mean_shift"],
                         "log_std_ratio_prev": sh_p["log_std_ratio"],
                         "log_std_ratio_first": sh_f["log_std_ratio"]}
            self.prev[name] = snap
        return out

    def layer_names(self) -> list[str]:
        """Names of the layers with a snapshot, in first-seen order."""
        return list(self.first)

    def state_dict(self) -> dict:
        """Snapshots and settings for checkpoints (all tensors cloned, on the CPU)."""
        def snap_state(s: dict) -> dict:
            return {"values": s["values"].detach().cpu().clone(), "mean": s["mean"].detach().cpu().clone(),
                    "std": s["std"].detach().cpu().clone(), "step": int(s["step"])}
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
                    "mean": s["mean"].detach().cpu().to(torch.float64).clone(),
                    "std": s["std"].detach().cpu().to(torch.float64).clone(), "step": int(s["step"])}
        self.first = {k: snap(v) for k, v in state["first"].items()}
        self.prev = {k: snap(v) for k, v in state["prev"].items()}
