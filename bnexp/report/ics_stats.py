"""The measurements of internal covariate shift per run and per configuration (means over seeds).

Three views, read from the sweep's record frames (:class:`bnexp.report.load.Sweep`) of what
:mod:`bnexp.ics` recorded: the BN paper's distribution view (per-unit Wasserstein-1 shift of each
layer's input to the nonlinearity and, with BN, of BN's input Wu: ``shift.jsonl``'s
``shift_metrics`` and ``bn_input_shift_metrics``), Santurkar et al. 2018's gradient-based ICS
(Def. 2.1, ``ics.jsonl`` ``grad_ics``; the relative ``l2_rel`` beside the absolute ``l2``) and
loss-landscape smoothness (Sec. 3.1, ``ics.jsonl`` ``landscape``; the scale-invariant ``rel_*``
beside the raw values); plus the probes' cost.
"""

from __future__ import annotations

import pandas as pd

from bnexp.report.groups import ConfigGroup, bn_variant
from bnexp.report.load import Run, Sweep, ordered_keys
from bnexp.report.stats import layer_columns, numeric, value_stat

LANDSCAPE_KEYS = ("loss_variation", "grad_predictiveness", "beta_smoothness")
REL_LANDSCAPE_KEYS = ("rel_loss_variation", "rel_grad_predictiveness", "rel_beta_smoothness")
GRAD_KEYS = ("l2", "l2_rel", "cos", "g_norm")
PROBE_KINDS = ("eval", "monitor", "grad_ics", "landscape")
DIST_KEYS = ("w1_prev_mean", "final_w1_first", "final_w1_pooled_first", "final_bn_input_w1_first",
             "final_mean_shift_first", "final_log_std_ratio_first")


def _mean(values: pd.Series) -> float | None:
    """Mean of the finite values (None when there are none)."""
    return value_stat(values)["mean"]


def _row_means(frame: pd.DataFrame) -> list[float | None]:
    """Per row, the mean of its finite values (None when there are none)."""
    return [None if pd.isna(v) else float(v) for v in frame.mean(axis=1)]


def _with(rows: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """The records that hold some value under ``prefix.`` (e.g. a non-empty ``shift_metrics``)."""
    cols = [c for c in rows.columns if c.startswith(prefix + ".")]
    return rows[rows[cols].notna().any(axis=1)] if cols else rows.iloc[:0]


def distribution_series(sweep: Sweep, run: Run) -> tuple[list[int], list[float | None]]:
    """(steps, W1 from the first record averaged over layers) of one run's shift_metrics, for the figure."""
    recs = _with(sweep.rows("shift", run), "shift_metrics")
    return recs["step"].astype(int).tolist(), _row_means(layer_columns(recs, "shift_metrics", "w1_first"))


def run_distribution_view(sweep: Sweep, run: Run) -> dict | None:
    """The BN paper's distribution view of one run (Ioffe & Szegedy 2015, Sec. 1-2): how far each
    layer's input to the nonlinearity moved on the probe set (shift.jsonl ``shift_metrics``,
    :class:`bnexp.ics.DistributionShiftTracker`).

    Returns:
        None without shift_metrics; else {"records", "final_step", "bn_stats", "w1_prev_mean" (mean over
        the records after step 0 of the per-unit w1_prev averaged over layers), and from the last record,
        averaged over layers (None without a record after the first): "final_w1_first",
        "final_w1_pooled_first", "final_bn_input_w1_first" (BN's own input Wu), "final_mean_shift_first",
        "final_log_std_ratio_first", "final_w1_first_per_layer": {layer: w1_first}}.
    """
    recs = _with(sweep.rows("shift", run), "shift_metrics")
    if recs.empty:
        return None
    later = recs[recs["step"] > recs["step"].iloc[0]]
    last = later.iloc[-1:]

    def final(prefix: str, key: str) -> float | None:
        return _mean(layer_columns(last, prefix, key).iloc[0]) if len(last) else None

    per_layer = layer_columns(last, "shift_metrics", "w1_first")
    return {
        "records": len(recs), "final_step": int(last["step"].iloc[0]) if len(last) else None,
        "bn_stats": next((v for v in recs.get("bn_stats", [])[::-1] if isinstance(v, str)), None),
        "final_bn_input_w1_first": final("bn_input_shift_metrics", "w1_first"),
        "final_w1_pooled_first": final("shift_metrics", "w1_pooled_first"),
        "w1_prev_mean": _mean(layer_columns(later, "shift_metrics", "w1_prev").mean(axis=1)),
        "final_w1_first": final("shift_metrics", "w1_first"),
        "final_mean_shift_first": final("shift_metrics", "mean_shift_first"),
        "final_log_std_ratio_first": final("shift_metrics", "log_std_ratio_first"),
        "final_w1_first_per_layer": {k: _mean(per_layer[k]) for k in per_layer} if len(last) else {},
    }


def _grad_probes(sweep: Sweep, run: Run) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(the run's grad_ics probes, all layer names in order, the hidden layers after the first:
    layer2..layerK). The classifier is not a hidden layer; layer1's gradient-based ICS is 0
    (cos 1) by definition, since no layer precedes it (Santurkar et al. 2018, Def. 2.1)."""
    rows = sweep.rows("ics", run)
    recs = _with(rows[rows["kind"] == "grad_ics"], "layers") if "kind" in rows else rows.iloc[:0]
    names = ordered_keys([[c.split(".")[1] for c in recs.columns if c.startswith("layers.")]])
    return recs, names, [n for n in names if n != "classifier"][1:]


def gradient_series(sweep: Sweep, run: Run) -> tuple[list[int], list[float | None], list[float | None]]:
    """(steps, ||G - G'|| / ||G|| and cos(G, G') averaged over layer2..layerK) of one run's grad_ics probes."""
    recs, _, later = _grad_probes(sweep, run)
    avg = {k: _row_means(layer_columns(recs, "layers", k).reindex(columns=later)) for k in ("l2_rel", "cos")}
    return recs["step"].astype(int).tolist(), avg["l2_rel"], avg["cos"]


def run_gradient_view(sweep: Sweep, run: Run) -> dict | None:
    """Santurkar et al.'s gradient-based ICS (2018, Def. 2.1) of one run, from ``ics.jsonl``: None without
    grad_ics probes; else {"probes", "layers" (layer2..layerK), "l2", "l2_rel" (the scale-free
    ||G - G'|| / ||G|| verdicts use), "cos": means over probes of the layer2..layerK average,
    "per_layer": {layer: {"l2", "l2_rel", "cos", "g_norm"}} (layer1 and the classifier included)}."""
    recs, names, later = _grad_probes(sweep, run)
    if recs.empty:
        return None
    cols = {k: layer_columns(recs, "layers", k).reindex(columns=names) for k in GRAD_KEYS}
    return {"probes": len(recs), "layers": later,
            **{k: _mean(cols[k][later].mean(axis=1)) for k in ("l2", "l2_rel", "cos")},
            "per_layer": {n: {k: _mean(cols[k][n]) for k in GRAD_KEYS} for n in names}}


def _landscape_probes(sweep: Sweep, run: Run) -> pd.DataFrame:
    rows = sweep.rows("ics", run)
    return rows[rows["kind"] == "landscape"] if "kind" in rows else rows


def landscape_series(sweep: Sweep, run: Run) -> tuple[list[int], dict[str, list[float | None]]]:
    """(steps, {key: values}) of one run's landscape probes, keys :data:`LANDSCAPE_KEYS` and
    :data:`REL_LANDSCAPE_KEYS` (None where a probe lacks the key)."""
    recs = _landscape_probes(sweep, run)
    vals = {k: [None if pd.isna(v) else float(v) for v in numeric(recs.get(k, [None] * len(recs)))]
            for k in LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS}
    return recs["step"].astype(int).tolist(), vals


def run_landscape_view(sweep: Sweep, run: Run) -> dict | None:
    """Loss-landscape smoothness along the gradient (Santurkar et al. 2018, Sec. 3.1) of one run: None
    without landscape probes; else {"probes"} and the means over probes of :data:`LANDSCAPE_KEYS` and
    the scale-invariant :data:`REL_LANDSCAPE_KEYS` (None in runs without them)."""
    recs = _landscape_probes(sweep, run)
    if recs.empty:
        return None
    return {"probes": len(recs), **{k: _mean(recs.get(k, pd.Series(dtype=float)))
                                    for k in LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS}}


def ics_summary(group: ConfigGroup, sweep: Sweep) -> dict | None:
    """The ICS measurements of one configuration: :func:`value_stat` over its finished seeds (diverged
    runs left out: their last record is not the end of training) of each run view.

    Returns:
        None when no finished run has any view; else {"label" (the variant label), "variant", "seeds",
        "distribution": {"seeds", "records" (per seed), "bn_stats", a stat per :data:`DIST_KEYS`,
        "final_w1_first_per_layer": {layer: stat}}, "gradient": {"seeds", "probes", "layers", "l2",
        "l2_rel", "cos", "per_layer"}, "landscape": {"seeds", "probes", a stat per key}, "probe_time_s":
        {kind: stat} (seconds per run, summary.json)}; a view without data is None ("not measured").
    """
    runs = group.finished
    dist, grad, land = ([v for v in (fn(sweep, r) for r in runs) if v]
                        for fn in (run_distribution_view, run_gradient_view, run_landscape_view))
    if not (dist or grad or land):
        return None
    out: dict = {"label": group.variant_label or group.label, "variant": bn_variant(group), "seeds": len(runs),
                 "distribution": None, "gradient": None, "landscape": None, "probe_time_s": None}
    if dist:
        out["distribution"] = {
            "seeds": len(dist), "records": [v["records"] for v in dist],
            "bn_stats": next((v["bn_stats"] for v in dist if v.get("bn_stats")), None),
            **{k: value_stat([v[k] for v in dist]) for k in DIST_KEYS},
            "final_w1_first_per_layer": {n: value_stat([v["final_w1_first_per_layer"].get(n) for v in dist])
                                         for n in ordered_keys(v["final_w1_first_per_layer"] for v in dist)}}
    if grad:
        out["gradient"] = {
            "seeds": len(grad), "probes": [v["probes"] for v in grad],
            "layers": ordered_keys(v["layers"] for v in grad),
            **{k: value_stat([v[k] for v in grad]) for k in ("l2", "l2_rel", "cos")},
            "per_layer": {n: {k: value_stat([v["per_layer"].get(n, {}).get(k) for v in grad]) for k in GRAD_KEYS}
                          for n in ordered_keys(v["per_layer"] for v in grad)}}
    if land:
        out["landscape"] = {"seeds": len(land), "probes": [v["probes"] for v in land],
                            **{k: value_stat([v[k] for v in land]) for k in LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS}}
    times = [r.summary.get("probe_time_s") for r in runs if isinstance(r.summary.get("probe_time_s"), dict)]
    if times:
        out["probe_time_s"] = {k: value_stat([t.get(k) for t in times]) for k in PROBE_KINDS}
    return out
