"""The covariate-shift monitor: how the input to every hidden nonlinearity moves in training.

Every ``trainer.hist_every`` steps the monitor feeds a fixed probe set of test
images through the network and captures, with forward pre-hooks, the input of
each hidden layer's nonlinearity g (the pre-activation; with BN on, the BN
output) and, for BN networks, the input of BN itself (Wu, the affine output
before normalization, where the underlying shift happens). It records per layer
the configured percentiles (15/50/85 by default), mean and std of all values, a
histogram, and the percentiles of one fixed unit of the last hidden layer -- the
paper's Fig. 1(b, c) "typical activation".

Which statistics BN normalizes the probe with is ``monitor.bn_stats``:

* ``batch`` (default) -- the probe is split into mini-batches of ``trainer.batch_size``
  (the first floor(P / m) * m images; all P if P < m), each normalized by its own
  statistics: what the nonlinearity sees in training (Alg. 1).
* ``population`` -- the running averages, as at inference (Alg. 2); noisy BN adds no
  noise there (it scales by the noise's expected E[s], as in evaluation).
* ``probe`` -- the whole probe's statistics (a single mini-batch of P images).

In ``batch`` and ``probe`` modes every BN unit's mean and std over the probe are beta
and gamma by construction (each mini-batch is normalized to them, so their union is
too), so these modes show only how gamma, beta and the shape of the distribution
move; ``population`` mode and the BN input show the shift BN absorbs.

Everything else is in eval mode (no dropout), no gradients are taken, the BN running
averages are saved and restored, and noisy BN's training noise generator is rewound
after the probe, so monitoring never changes training.

Noisy BN (``batch`` and ``probe`` modes) holds one noise draw per record
(:func:`bnexp.nets.bn.held_noise`): every probe mini-batch of a record sees the same per-unit noise
distribution (mu_t, sigma_t), as the mini-batch of one training step does. Drawn afresh per
mini-batch, a record would pool P / m steps' noise (about 16) into one mixture whose per-unit
shifts average out, and the shift measures could not see the noise.
"""

from __future__ import annotations

import contextlib
import re

import torch
from torch import nn

from bnexp.nets.bn import NoisyBatchNorm, bn_layers, held_noise
from bnexp.errors import Diverged
from bnexp.train.ics import DistributionShiftTracker
from bnexp.train.ics.sorting import quantiles
from bnexp.nets.models import hidden_layers

BN_STATS_MODES = ("batch", "population", "probe")


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
    q = quantiles(v, torch.tensor([p / 100.0 for p in percentiles], device=v.device))  # = torch.quantile, faster
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
    """Context: the model in eval mode except, for ``bn_stats`` batch/probe, the BN layers (batch
    statistics, noisy BN's noise, one draw held over the whole probe); BN running averages and noisy
    BN's generator states are saved and restored, so the probe leaves no trace on training."""

    def __init__(self, model: nn.Module, bn_stats: str):
        self.model = model
        self.bn_stats = bn_stats

    def __enter__(self):
        self.was_training = self.model.training
        self.bns = bn_layers(self.model)
        # noisy BN (Santurkar et al.) injects its noise in the probe too (batch/probe modes): the
        # distribution the nonlinearity sees in training is what the monitor is meant to show;
        # the generator is rewound on exit, so training draws what it would have drawn anyway.
        self.noisy = [m for m in self.model.modules() if isinstance(m, NoisyBatchNorm)]
        self.noise_states = [m.noise_state() for m in self.noisy]
        self.saved = [{k: v.clone() for k, v in bn.state_dict().items() if "running" in k or "num_batches" in k}
                      for bn in self.bns]
        self.model.eval()
        self.hold = contextlib.ExitStack()
        if self.bn_stats != "population":
            for bn in self.bns + self.noisy:
                bn.train()
            # one noise draw per record: the probe's mini-batches see one step's noise distribution
            self.hold.enter_context(held_noise(self.model))
        return self

    def __exit__(self, *exc):
        self.hold.close()
        for bn, state in zip(self.bns, self.saved):
            for k, v in state.items():
                getattr(bn, k).copy_(v)
        for m, ns in zip(self.noisy, self.noise_states):
            m.load_noise_state(ns)
        self.model.train(self.was_training)
        return False


class ShiftMonitor:
    """Records the distribution of every hidden layer's pre-activation on a fixed probe set.

    Args:
        model: a network built by :func:`bnexp.nets.models.build_model`.
        probe_x: (P, C, H, W) fixed probe images, on the model's device.
        percentiles: percentiles to record, each in (0, 100).
        unit: index of the "typical" unit (channel for conv layers) of the last hidden layer.
        histograms: also log TensorBoard histograms.
        max_values: cap on the values per layer used for percentiles and histograms.
        shift_metrics: also compute the distribution-shift metrics of :mod:`bnexp.train.ics`
            (:class:`bnexp.train.ics.DistributionShiftTracker`: raw per-unit W1 and the scale-free
            ``w1_rel_*`` (W1 in initial outermost-percentile spreads, p15-p85 by default, taken
            from at most ``max_values`` values) and ``ks_*``, with their sampling-noise floors).
        shift_max_values: cap on the values per layer those metrics keep (sorting them is
            the monitor's main cost); the floors are the noise of this cap.
        bn_stats: ``batch`` | ``population`` | ``probe``: the statistics BN normalizes the
            probe with (see the module docstring).
        batch_size: m, the mini-batch size of ``batch`` mode (``trainer.batch_size``).

    Raises:
        ValueError: an unknown ``bn_stats``, or batch_size < 1.

    Attributes:
        history: one record per call of :meth:`record`, as written to ``shift.jsonl``::

            {"step": int, "bn_stats": "batch",
             "layers": {"layer1": {"p15", "p50", "p85", "mean", "std"}, ...},
             "shift_metrics": {"layer1": {DistributionShiftTracker.KEYS}, ...},
             #   w1_prev/first (raw), w1_rel_prev/first, ks_prev/first (scale-free),
             #   w1_floor, w1_rel_floor, ks_floor (sampling-noise floors), w1_pooled_*, ...
             "unit": {"layer": "layer3", "index": 0, "p15", "p50", "p85", "mean", "std"},
             # BN networks only: the same for the BN input Wu
             "bn_input": {"layer1": {...}, ...}, "bn_input_shift_metrics": {...},
             "bn_input_unit": {...}}
    """

    def __init__(self, model: nn.Module, probe_x: torch.Tensor, percentiles: list[float], unit: int = 0,
                 histograms: bool = True, max_values: int = 200_000, shift_metrics: bool = True,
                 shift_max_values: int = 20_000, bn_stats: str = "batch", batch_size: int = 60):
        if bn_stats not in BN_STATS_MODES:
            raise ValueError(f"bn_stats must be one of {BN_STATS_MODES}, got {bn_stats!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.bn_stats = bn_stats
        self.batch_size = int(batch_size)
        self.model = model
        self.percentiles = list(percentiles)
        # w1_rel's initial spreads: the outermost percentiles, as the "relative to its start" chart
        # (relative_bands); its values cap, max_values, as the chart's percentiles
        spread = (min(self.percentiles), max(self.percentiles)) if len(self.percentiles) > 1 else (15.0, 85.0)
        self.tracker = self.bn_tracker = None
        if shift_metrics:
            self.tracker, self.bn_tracker = (
                DistributionShiftTracker(max_values=shift_max_values, spread_percentiles=spread,
                                         spread_max_values=max(max_values, shift_max_values)) for _ in range(2))
        self.probe_x = probe_x
        self.unit = unit
        # the run's configuration (configuration_label): names its "each seed" chart; None: no such chart
        self.glance: str | None = None
        self.histograms = histograms
        self.max_values = max_values
        self.layers = hidden_layers(model)
        self.history: list[dict] = []

    def _chunks(self) -> list[torch.Tensor]:
        """The probe as the mini-batches of the ``bn_stats`` mode."""
        x = self.probe_x
        if self.bn_stats != "batch" or not any(layer.bn is not None for _, layer in self.layers):
            return [x]
        m = self.batch_size
        if len(x) <= m:
            return [x]
        return [x[i:i + m] for i in range(0, (len(x) // m) * m, m)]

    @torch.no_grad()
    def capture_all(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Inputs of every hidden nonlinearity and of every BN layer on the probe set.

        Returns:
            (act_inputs, bn_inputs): {name: (P', d) or (P', C, H, W)} each, P' the probe
            images used (see ``bn_stats``); ``bn_inputs`` holds Wu of the layers with BN (empty
            without BN).
        """
        acts: dict[str, list] = {name: [] for name, _ in self.layers}
        bn_in: dict[str, list] = {name: [] for name, layer in self.layers if layer.bn is not None}
        handles = []
        for name, layer in self.layers:
            handles.append(layer.act.register_forward_pre_hook(
                lambda module, inputs, name=name: acts[name].append(inputs[0].detach())))
            if layer.bn is not None:
                handles.append(layer.bn.register_forward_pre_hook(
                    lambda module, inputs, name=name: bn_in[name].append(inputs[0].detach())))
        try:
            with _ProbeMode(self.model, self.bn_stats):
                for chunk in self._chunks():
                    self.model(chunk)
        finally:
            for h in handles:
                h.remove()
        return ({k: torch.cat(v) for k, v in acts.items()}, {k: torch.cat(v) for k, v in bn_in.items()})

    def capture(self) -> dict[str, torch.Tensor]:
        """Inputs of every hidden nonlinearity on the probe set: {name: (P', d) or (P', C, H, W)}."""
        return self.capture_all()[0]

    def _summarize(self, captured: dict[str, torch.Tensor], step: int, writer, prefix: str, hist_prefix: str,
                   tracker, ics_prefix: str) -> tuple[dict, dict | None, dict]:
        layers = {}
        for name, values in captured.items():
            sub = _subsample(values, self.max_values)
            stats = distribution_stats(sub, self.percentiles)
            layers[name] = stats
            if writer is not None:
                for k, v in stats.items():
                    writer.add_scalar(f"{prefix}/{name}/{k}", v, step)
                if self.histograms:
                    log_histogram(writer, f"{hist_prefix}/{name}", sub, step)
        metrics = None
        if tracker is not None:
            # Distribution-shift metrics against the previous and the first record (bnexp.train.ics)
            metrics = tracker.update(captured, step)
            if writer is not None:
                for name, vals in metrics.items():
                    for k, v in vals.items():
                        writer.add_scalar(f"{ics_prefix}/{name}/{k}", v, step)
        last_name = self.layers[-1][0]
        unit = {}
        if last_name in captured:
            unit_values = captured[last_name][:, self.unit].reshape(-1)
            unit = {"layer": last_name, "index": self.unit,
                    **distribution_stats(_subsample(unit_values, self.max_values), self.percentiles)}
            if writer is not None:
                for k, v in unit.items():
                    if k not in ("layer", "index"):
                        writer.add_scalar(f"{prefix}/typical_unit/{k}", v, step)
        return layers, metrics, unit

    def record(self, step: int, writer=None) -> dict:
        """Capture and summarize the pre-activations (and BN inputs) at ``step``; log to ``writer``.

        :meth:`capture_checked` then :meth:`summarize` (the step loop runs the second on its
        records thread, see :class:`bnexp.train.background.Background`).

        Returns:
            the new history record (see :attr:`history`).

        Raises:
            Diverged: a pre-activation or BN input is NaN or infinite (the network has diverged);
                nothing is recorded, and the training loop ends the run with status ``diverged``.
        """
        return self.summarize(step, *self.capture_checked(step), writer)

    def capture_checked(self, step: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """:meth:`capture_all` on the current network, checked for non-finite values.

        Raises:
            Diverged: a pre-activation or BN input is NaN or infinite at ``step``.
        """
        acts, bn_in = self.capture_all()
        checked = [(what.format(name), values) for what, captured in (
            ("pre-activations of {} (input to its nonlinearity)", acts), ("BN inputs Wu of {}", bn_in))
            for name, values in captured.items()]
        if checked:  # one host sync for every layer; the first non-finite one named
            finite = torch.stack([torch.isfinite(values).all() for _, values in checked])
            if not bool(finite.all()):
                raise Diverged(step, checked[int(finite.logical_not().nonzero()[0])][0])
        return acts, bn_in

    def summarize(self, step: int, acts: dict[str, torch.Tensor], bn_in: dict[str, torch.Tensor],
                  writer=None) -> dict:
        """The record of step ``step`` from :meth:`capture_checked`'s tensors: appended to
        :attr:`history` and logged to ``writer``. Calls must come in step order (the shift metrics
        compare with the previous record).

        TensorBoard tags: ``shift/<layer>/<p15|p50|p85|mean|std>``, ``shift/typical_unit/...``,
        the same percentiles relative to the first record (``shift_rel/...``, see
        :func:`relative_bands`), ``ics/<layer>/<key>`` for every key of
        :attr:`bnexp.train.ics.DistributionShiftTracker.KEYS` (raw ``w1_*``, scale-free ``w1_rel_*`` and
        ``ks_*``, floors ``*_floor``), histograms ``preact/<layer>``; for BN networks also
        ``bn_input/<layer>/<p15|...>``, ``bn_input/typical_unit/...``, ``ics_bn_input/<layer>/<key>``
        and histograms ``bn_input/<layer>``.

        Returns:
            the new history record (see :attr:`history`).
        """
        record: dict = {"step": int(step), "bn_stats": self.bn_stats}
        layers, metrics, unit = self._summarize(acts, step, writer, "shift", "preact", self.tracker, "ics")
        record["layers"] = layers
        if metrics is not None:
            record["shift_metrics"] = metrics
        record["unit"] = unit
        if bn_in:
            layers, metrics, unit = self._summarize(bn_in, step, writer, "bn_input", "bn_input",
                                                    self.bn_tracker, "ics_bn_input")
            record["bn_input"] = layers
            if metrics is not None:
                record["bn_input_shift_metrics"] = metrics
            if unit:
                record["bn_input_unit"] = unit
        self.history.append(record)
        log_relative_bands(writer, self.history, step, self.glance)
        return record

    def layer_names(self) -> list[str]:
        """Names of the monitored layers, input to output."""
        return [name for name, _ in self.layers]

    def custom_scalars_layout(self, grad_ics: bool = False, bn_input: bool | None = None) -> dict:
        """TensorBoard Custom Scalars layout, categories in reading order (docs/tensorboard.md).

        1. ``each seed: <deepest layer> input to g, relative to its start``: with :attr:`glance` set, one
           margin chart of this run's configuration (``with BN``, ``without BN``, ...; tags
           ``glance/<configuration>/<layer>/<pNN>``). TensorBoard merges the layouts of all runs of a
           logdir, so a BN/no-BN sweep shows the two charts side by side, each with the runs of one
           configuration only (each on its own y axis: BN's small drift stays readable). The deepest hidden
           layer is where a plain network's input drifts most (paper Fig. 1b, c). A sweep's aggregate runs
           (``bnexp report``, :mod:`bnexp.report.aggregate`) put their category ``over seeds`` before it: BN and
           no BN in one chart, on one scale (docs/tensorboard.md).
        2. ``training``: test accuracy, train loss, test loss, train accuracy.
        3. the typical unit, then one category per hidden layer from the deepest to the first, each with
           margin charts (median line, 15-85 band) of the input to g: relative to its initial spread
           (:func:`relative_bands`: every run on a common, unitless scale), raw values, and with
           ``bn_input`` the BN input Wu (tags ``bn_input/<layer>/<pNN>``). One category per layer
           because TensorBoard keeps the order of categories but not always that of charts within one.
        4. ``internal covariate shift (unitless)`` (with shift metrics): per layer the scale-free shift
           from the first record as a margin chart whose line is the value and whose band reaches down to
           its sampling-noise floor (the band's lower edge is the floor: one colour per run, two edges) --
           the Kolmogorov-Smirnov distance (``ics/<layer>/ks_first``, ``ks_floor``) and W1 in initial
           spreads (``ics/<layer>/w1_rel_first``, ``w1_rel_floor``) -- and the mean over units of
           |log(std / first std)|; with ``grad_ics`` the relative gradient change
           ``grad_ics/<layer>/l2_rel`` of layers 2..K (layer 1's is zero by definition, Santurkar et al.
           2018 Def. 2.1). |delta mean| / first std is left out: for a network started with tiny weights
           it reaches 1e4 and flattens everything else (it stays in the Scalars tab).

        Args:
            grad_ics: the run records gradient-based ICS.
            bn_input: add the BN-input charts; None: when the network has normalizer layers (the
                monitor records the input of every hidden layer's BN, LayerNorm or GroupNorm).

        Returns:
            {category: {chart title: ["Margin", [value, lower, upper]] | ["Multiline", [regex, ...]]}}
            for ``SummaryWriter.add_custom_scalars``.
        """
        lo, mid, hi = (pkey(p) for p in (self.percentiles[0], self.percentiles[len(self.percentiles) // 2],
                                         self.percentiles[-1]))
        if bn_input is None:
            bn_input = any(layer.bn is not None for _, layer in self.layers)
        names = self.layer_names()
        deepest = names[-1]

        def margin(prefix, name):
            return ["Margin", [f"{prefix}/{name}/{mid}", f"{prefix}/{name}/{lo}", f"{prefix}/{name}/{hi}"]]

        layout: dict = {}
        if self.glance:
            layout[f"each seed: {deepest} input to g, relative to its start (one chart per configuration)"] = {
                f"{self.glance.replace('_', ' ')}: {deepest}, ({mid} - initial {mid}) / initial {lo}-{hi} spread":
                    margin(f"glance/{self.glance}", deepest)}
        layout["training"] = {
            "test accuracy": ["Multiline", ["^Test/accuracy$"]],
            "train loss (mean over the last log_every mini-batches)": ["Multiline", ["^Train/loss$"]],
            "test loss": ["Multiline", ["^Test/loss$"]],
            "train accuracy (mean over the last log_every mini-batches)": ["Multiline", ["^Train/accuracy$"]],
        }
        for name in ["typical_unit"] + names[::-1]:
            label = f"typical unit {self.unit} of {deepest}" if name == "typical_unit" else name
            charts = {
                f"{label}: input to g relative to its start, ({mid} - initial {mid}) / initial {lo}-{hi} "
                f"spread": margin("shift_rel", name),
                f"{label}: input to g (pre-activation), {mid} with {lo}-{hi} band": margin("shift", name),
            }
            if bn_input:
                charts[f"{label}: BN input Wu (before normalization), {mid} with {lo}-{hi} band"] = margin(
                    "bn_input", name)
            layout[f"{label}: input to the nonlinearity g"] = charts
        ics: dict = {}
        if self.tracker is not None:
            for name in names[::-1]:
                for key, what in (("ks", "KS distance"), ("w1_rel", f"W1 / initial {lo}-{hi} spread")):
                    ics[f"{name}: {what} to the first record (line); the band reaches down to its noise floor"] = [
                        "Margin", [f"ics/{name}/{key}_first", f"ics/{name}/{key}_floor", f"ics/{name}/{key}_first"]]
            for name in names[::-1]:
                ics[f"{name}: |log(std / first std)|, mean over units"] = [
                    "Multiline", [rf"^ics/{re.escape(name)}/log_std_ratio_first$"]]
        if grad_ics:
            for name in names[:0:-1]:
                ics[f"{name}: gradient ICS ||G - G'|| / ||G||"] = [
                    "Multiline", [rf"^grad_ics/{re.escape(name)}/l2_rel$"]]
        if ics:
            layout["internal covariate shift (unitless)"] = ics
        return layout

    def state_dict(self) -> dict:
        """The shift trackers' snapshots (for checkpoints). The history is not included: it is the
        run's ``shift.jsonl`` records, which the checkpoint holds once, as the record log's."""
        return {"tracker": self.tracker.state_dict() if self.tracker is not None else None,
                "bn_tracker": self.bn_tracker.state_dict() if self.bn_tracker is not None else None}

    def load_state_dict(self, state: dict, history: list[dict] | None = None) -> None:
        """Restore :meth:`state_dict`, with ``history`` the records so far (the shift log's); None:
        the ``"history"`` an older checkpoint stored in ``state``, else none."""
        self.history = list(history if history is not None else state.get("history", []))
        if self.tracker is not None and state.get("tracker") is not None:
            self.tracker.load_state_dict(state["tracker"])
        if self.bn_tracker is not None and state.get("bn_tracker") is not None:
            self.bn_tracker.load_state_dict(state["bn_tracker"])


def _pkeys(stats: dict) -> list[str]:
    """The percentile keys of a stats record, in increasing order ('p15', 'p50', 'p85')."""
    return sorted((k for k in stats if k.startswith("p")), key=lambda k: float(k[1:]))


def _spread(stats: dict) -> float:
    """The outermost-percentile range of a stats record (p85 - p15 by default)."""
    keys = _pkeys(stats)
    return stats[keys[-1]] - stats[keys[0]]


def relative_bands(first: dict, now: dict, spread: float | None = None) -> dict[str, float] | None:
    """Percentiles relative to the first record: (p - first median) / first spread.

    The spread is the first record's outermost-percentile range (p85 - p15 by default), so
    at the first record the band runs from about -0.5 to 0.5 around 0 for every layer of
    every run, whatever the raw scale; a value of 3 later means "3 initial spreads away".

    Args:
        first: the first record's stats of one layer ({"p15", "p50", "p85", ...}).
        now: the same layer's stats now.
        spread: the scale to divide by instead of ``first``'s own spread.

    Returns:
        {"p15": ..., "p50": ..., "p85": ...} (dimensionless), or None when the spread is
        not > 0 (a constant input: nothing to scale by).
    """
    keys = _pkeys(first)
    if not keys:
        return None
    scale = _spread(first) if spread is None else spread
    if not scale > 0:
        return None
    mid = first[keys[len(keys) // 2]]
    return {k: (now[k] - mid) / scale for k in keys}


def log_relative_bands(writer, history: list[dict], step: int, glance: str | None = None) -> None:
    """Write ``shift_rel/<layer>/<pNN>`` and ``shift_rel/typical_unit/<pNN>`` (see
    :func:`relative_bands`) for the last record of ``history``, and with ``glance`` (the run's configuration,
    :func:`configuration_label`) the deepest layer's again as ``glance/<glance>/<layer>/<pNN>`` (the first
    chart of Custom Scalars, one per configuration); nothing without a writer."""
    if writer is None or not history:
        return
    first, last = history[0], history[-1]
    pairs = [(n, first["layers"].get(n), v) for n, v in last["layers"].items()]
    deepest = pairs[-1][0] if pairs else None
    spread = {n: None for n, _, _ in pairs}
    unit0 = first.get("unit") or {}
    if unit0.get("layer") in first["layers"] and last.get("unit"):
        # the unit is scaled by its layer's initial spread: one unit of a network started with
        # tiny weights barely varies over the probe, and its own spread would blow its band up
        spread["typical_unit"] = _spread(first["layers"][unit0["layer"]])
        pairs.append(("typical_unit", unit0, last["unit"]))
    for name, a, b in pairs:
        rel = relative_bands(a, b, spread.get(name)) if a else None
        for k, v in (rel or {}).items():
            writer.add_scalar(f"shift_rel/{name}/{k}", v, step)
            if glance and name == deepest:
                writer.add_scalar(f"glance/{glance}/{name}/{k}", v, step)


def configuration_label(bn) -> str:
    """The configuration a run's Custom Scalars glance chart is for, from its ``bn`` node: ``with_BN``,
    ``without_BN``, ``with_noisy_BN``, ``with_LayerNorm``, ``with_GroupNorm`` (``_after_g`` with
    ``bn.position=after``)."""
    if not bn.get("enabled", True):
        return "without_BN"
    norm = str(bn.get("norm", "batch")).split(".")[-1]
    name = {"layer": "LayerNorm", "group": "GroupNorm"}.get(norm, "noisy_BN" if bn.get("noise") else "BN")
    after = "_after_g" if str(bn.get("position", "before")).split(".")[-1] == "after" else ""
    return f"with_{name}{after}"
