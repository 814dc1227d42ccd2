"""The covariate-shift monitor: how the input to every hidden nonlinearity moves in training.

Every ``trainer.hist_every`` steps the monitor feeds a fixed probe set of test
images through the network and captures, with forward pre-hooks, the input of
each hidden layer's nonlinearity g (the pre-activation; with BN on, the BN
output). It records per layer the configured percentiles (15/50/85 by default),
mean and std of all values, a histogram, and the percentiles of one fixed unit of
the last hidden layer -- the paper's Fig. 1(b, c) "typical activation".

BN layers normalize the probe with the probe's own statistics (as they would a
training mini-batch), without touching the running averages; everything else is
in eval mode (no dropout), and no gradients are taken, so monitoring never changes
training.
"""

from __future__ import annotations

import torch
from torch import nn

from bnexp.bn import NoisyBatchNorm, bn_layers
from bnexp.ics import DistributionShiftTracker
from bnexp.models import hidden_layers


def pkey(p: float) -> str:
    """Record key of percentile p: 15 -> 'p15', 2.5 -> 'p2.5'."""
    return f"p{p:g}"


def _subsample(values: torch.Tensor, max_values: int) -> torch.Tensor:
    """A fixed, evenly strided subset of at most ``max_values`` of the flattened values."""
    flat = values.reshape(-1)
    if flat.numel() <= max_values:
        return flat
    step = -(-flat.numel() // max_values)
    return flat[::step]


def distribution_stats(values: torch.Tensor, percentiles: list[float]) -> dict[str, float]:
    """Percentiles (linear interpolation, as numpy's default), mean and std of a 1-D tensor.

    Returns:
        {'p15': ..., 'p50': ..., 'p85': ..., 'mean': ..., 'std': ...} (floats).
    """
    v = values.float()
    q = torch.quantile(v, torch.tensor([p / 100.0 for p in percentiles], device=v.device))
    out = {pkey(p): float(x) for p, x in zip(percentiles, q.tolist())}
    out["mean"] = float(v.mean())
    out["std"] = float(v.std(unbiased=False))
    return out


def log_histogram(writer, tag: str, values: torch.Tensor, step: int, bins: int = 60) -> None:
    """Write a TensorBoard histogram of 1-D ``values`` with ``bins`` equal-width buckets.

    Uses ``torch.histc`` and ``add_histogram_raw``: much cheaper than ``add_histogram``
    on 10^5 values, which matters because the monitor runs inside the training loop.
    """
    v = values.float()
    lo, hi = float(v.min()), float(v.max())
    if not hi > lo:
        hi = lo + 1e-6
    counts = torch.histc(v, bins=bins, min=lo, max=hi)
    limits = torch.linspace(lo, hi, bins + 1)[1:]
    writer.add_histogram_raw(tag, min=lo, max=hi, num=v.numel(), sum=float(v.sum()),
                             sum_squares=float((v * v).sum()), bucket_limits=limits.tolist(),
                             bucket_counts=counts.tolist(), global_step=step)


class _ProbeMode:
    """Context: model in eval mode except BN layers, which use batch statistics;
    BN running averages are saved and restored so the probe leaves no trace."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self):
        self.was_training = self.model.training
        self.bns = bn_layers(self.model)
        # noisy BN (Santurkar et al.) injects its noise in the probe too: the distribution
        # the nonlinearity sees in training is what the monitor is meant to show
        self.noisy = [m for m in self.model.modules() if isinstance(m, NoisyBatchNorm)]
        self.saved = [{k: v.clone() for k, v in bn.state_dict().items() if "running" in k or "num_batches" in k}
                      for bn in self.bns]
        self.model.eval()
        for bn in self.bns + self.noisy:
            bn.train()
        return self

    def __exit__(self, *exc):
        for bn, state in zip(self.bns, self.saved):
            for k, v in state.items():
                getattr(bn, k).copy_(v)
        self.model.train(self.was_training)
        return False


class ShiftMonitor:
    """Records the distribution of every hidden layer's pre-activation on a fixed probe set.

    Args:
        model: a network built by :func:`bnexp.models.build_model`.
        probe_x: (P, C, H, W) fixed probe images, on the model's device.
        percentiles: percentiles to record, each in (0, 100).
        unit: index of the "typical" unit (channel for conv layers) of the last hidden layer.
        histograms: also log TensorBoard histograms.
        max_values: cap on the values per layer used for percentiles and histograms.
        shift_metrics: also compute the distribution-shift metrics of :mod:`bnexp.ics`.
        shift_max_values: cap on the values per layer those metrics keep (sorting them is
            the monitor's main cost).

    Attributes:
        history: one record per call of :meth:`record`, as written to ``shift.jsonl``::

            {"step": int, "layers": {"layer1": {"p15", "p50", "p85", "mean", "std"}, ...},
             "unit": {"layer": "layer3", "index": 0, "p15", "p50", "p85", "mean", "std"}}
    """

    def __init__(self, model: nn.Module, probe_x: torch.Tensor, percentiles: list[float], unit: int = 0,
                 histograms: bool = True, max_values: int = 200_000, shift_metrics: bool = True,
                 shift_max_values: int = 20_000):
        self.model = model
        self.tracker = DistributionShiftTracker(max_values=shift_max_values) if shift_metrics else None
        self.probe_x = probe_x
        self.percentiles = list(percentiles)
        self.unit = unit
        self.histograms = histograms
        self.max_values = max_values
        self.layers = hidden_layers(model)
        self.history: list[dict] = []

    @torch.no_grad()
    def capture(self) -> dict[str, torch.Tensor]:
        """Pre-activations of every hidden layer on the probe set: {name: (P, d) or (P, C, H, W)}."""
        captured: dict[str, torch.Tensor] = {}
        handles = []
        for name, layer in self.layers:
            def hook(module, inputs, name=name):
                captured[name] = inputs[0].detach()
            handles.append(layer.act.register_forward_pre_hook(hook))
        try:
            with _ProbeMode(self.model):
                self.model(self.probe_x)
        finally:
            for h in handles:
                h.remove()
        return captured

    def record(self, step: int, writer=None) -> dict:
        """Capture and summarize the pre-activations at ``step``; log to ``writer`` if given.

        TensorBoard tags: ``shift/<layer>/<p15|p50|p85|mean|std>``, ``shift/typical_unit/...``
        and histograms ``preact/<layer>``.

        Returns:
            the new history record.
        """
        captured = self.capture()
        record: dict = {"step": int(step), "layers": {}}
        for name, values in captured.items():
            sub = _subsample(values, self.max_values)
            stats = distribution_stats(sub, self.percentiles)
            record["layers"][name] = stats
            if writer is not None:
                for k, v in stats.items():
                    writer.add_scalar(f"shift/{name}/{k}", v, step)
                if self.histograms:
                    log_histogram(writer, f"preact/{name}", sub, step)
        if self.tracker is not None:
            # Distribution-shift metrics against the previous and the first record (bnexp.ics)
            metrics = self.tracker.update(captured, step)
            record["shift_metrics"] = metrics
            if writer is not None:
                for name, vals in metrics.items():
                    for k, v in vals.items():
                        writer.add_scalar(f"ics/{name}/{k}", v, step)
        last_name = self.layers[-1][0]
        last = captured[last_name]
        unit_values = last[:, self.unit].reshape(-1)
        unit_stats = distribution_stats(_subsample(unit_values, self.max_values), self.percentiles)
        record["unit"] = {"layer": last_name, "index": self.unit, **unit_stats}
        if writer is not None:
            for k, v in unit_stats.items():
                writer.add_scalar(f"shift/typical_unit/{k}", v, step)
        self.history.append(record)
        return record

    def layer_names(self) -> list[str]:
        """Names of the monitored layers, input to output."""
        return [name for name, _ in self.layers]

    def custom_scalars_layout(self) -> dict:
        """TensorBoard custom-scalars layout: one margin chart (median with the 15-85 band) per layer."""
        lo, mid, hi = (pkey(p) for p in (self.percentiles[0], self.percentiles[len(self.percentiles) // 2],
                                         self.percentiles[-1]))
        charts = {}
        for name in self.layer_names() + ["typical_unit"]:
            title = (f"{name}: input to g, {mid} with {lo}-{hi} band" if name != "typical_unit"
                     else f"typical unit {self.unit} of {self.layers[-1][0]}: {mid} with {lo}-{hi} band")
            charts[title] = ["Margin", [f"shift/{name}/{mid}", f"shift/{name}/{lo}", f"shift/{name}/{hi}"]]
        layout = {"covariate shift": charts}
        if self.tracker is not None:
            layout["internal covariate shift (distribution view)"] = {
                "Wasserstein-1 to the first record, per layer": ["Multiline", [r"ics/layer\d+/w1_first"]],
                "Wasserstein-1 to the previous record, per layer": ["Multiline", [r"ics/layer\d+/w1_prev"]],
                "mean over units of |delta mean| / std to the first record": ["Multiline",
                                                                            [r"ics/layer\d+/mean_shift_first"]],
            }
        return layout

    def figure(self, title: str = ""):
        """Matplotlib figure of the percentile bands over steps: one panel per layer plus the typical unit."""
        return plot_percentile_bands(self.history, self.percentiles, title)

    def state_dict(self) -> dict:
        """The monitor's history and shift-tracker snapshots (for checkpoints)."""
        return {"history": self.history,
                "tracker": self.tracker.state_dict() if self.tracker is not None else None}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""
        self.history = list(state["history"])
        if self.tracker is not None and state.get("tracker") is not None:
            self.tracker.load_state_dict(state["tracker"])


def plot_percentile_bands(history: list[dict], percentiles: list[float], title: str = ""):
    """Panels of percentile bands over training steps, from monitor records.

    Args:
        history: records as in :attr:`ShiftMonitor.history`.
        percentiles: the recorded percentiles; the band is first..last, the line the middle one.
        title: figure title.

    Returns:
        a matplotlib Figure (Agg backend).
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        raise ValueError("no monitor records to plot")
    lo, mid, hi = (pkey(p) for p in (percentiles[0], percentiles[len(percentiles) // 2], percentiles[-1]))
    names = list(history[0]["layers"]) + ["unit"]
    steps = [r["step"] for r in history]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.0), squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = [r["unit"] if name == "unit" else r["layers"][name] for r in history]
        ax.fill_between(steps, [r[lo] for r in rows], [r[hi] for r in rows], alpha=0.3, label=f"{lo}-{hi}")
        ax.plot(steps, [r[mid] for r in rows], label=mid)
        label = (f"unit {history[0]['unit']['index']} of {history[0]['unit']['layer']}" if name == "unit"
                 else f"{name} (all units)")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("input to nonlinearity")
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
