"""The measurements of internal covariate shift per run and per configuration (means over seeds).

Three views, read from what :mod:`bnexp.ics` recorded: the BN paper's distribution view
(per-unit Wasserstein-1 shift of each layer's input to the nonlinearity and, with BN, of BN's
input Wu: ``shift.jsonl``'s ``shift_metrics`` and ``bn_input_shift_metrics``), Santurkar et
al. 2018's gradient-based ICS (Def. 2.1, ``ics.jsonl`` ``grad_ics``; the relative ``l2_rel``
beside the absolute ``l2``) and loss-landscape smoothness (Sec. 3.1, ``ics.jsonl``
``landscape``; the scale-invariant ``rel_*`` beside the raw values); plus the probes' cost.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bnexp.report.groups import ConfigGroup, bn_variant
from bnexp.report.load import Run, ordered_keys
from bnexp.report.stats import finite, mean_std, value_stat

LANDSCAPE_KEYS = ("loss_variation", "grad_predictiveness", "beta_smoothness")
REL_LANDSCAPE_KEYS = ("rel_loss_variation", "rel_grad_predictiveness", "rel_beta_smoothness")
GRAD_KEYS = ("l2", "l2_rel", "cos", "g_norm")
PROBE_KINDS = ("eval", "monitor", "grad_ics", "landscape")


def _layer_avg(layers: Any, key: str) -> float | None:
    """Mean over the layers of ``{layer: {key: value}}`` of the finite values of ``key`` (None if none)."""
    if not isinstance(layers, dict):
        return None
    vals = finite(v.get(key) for v in layers.values() if isinstance(v, dict))
    return float(np.mean(vals)) if vals else None


def _shift_metric_records(run: Run) -> list[dict]:
    """shift.jsonl records of the run that carry ``shift_metrics`` (by step)."""
    return [r for r in run.shift if isinstance(r.get("shift_metrics"), dict) and r["shift_metrics"]]


def distribution_series(run: Run) -> tuple[list[int], list[float | None]]:
    """(steps, W1 from the first record averaged over layers) of one run's shift_metrics, for the figure."""
    recs = _shift_metric_records(run)
    return [int(r["step"]) for r in recs], [_layer_avg(r["shift_metrics"], "w1_first") for r in recs]


def run_distribution_view(run: Run) -> dict | None:
    """The BN paper's distribution view of one run (Ioffe & Szegedy 2015, Sec. 1-2).

    From ``shift.jsonl``'s ``shift_metrics`` (see :class:`bnexp.ics.DistributionShiftTracker`):
    how far each layer's pooled input to the nonlinearity, on the fixed probe set, moved.

    Returns:
        None when no record has shift_metrics; else {"records", "final_step", "bn_stats",
        "w1_prev_mean": mean over the records after the first (step 0, the reference whose
        values are 0 by definition) of w1_prev averaged over layers (W1 is per unit, averaged
        over units), "final_w1_pooled_first": the pooled W1 (None in older runs),
        "final_bn_input_w1_first": the same per-unit W1 of BN's input Wu (None without BN),
        "final_w1_first" / "final_mean_shift_first" / "final_log_std_ratio_first": the last
        record's values averaged over layers, "final_w1_first_per_layer": {layer: w1_first}};
        the final values are None when there is no record after the first.
    """
    recs = _shift_metric_records(run)
    if not recs:
        return None
    later = [r for r in recs if r["step"] > recs[0]["step"]]
    last = later[-1]["shift_metrics"] if later else None
    bn_in = later[-1].get("bn_input_shift_metrics") if later else None
    return {
        "records": len(recs), "final_step": int(later[-1]["step"]) if later else None,
        "bn_stats": recs[-1].get("bn_stats"),
        "final_bn_input_w1_first": _layer_avg(bn_in, "w1_first"),
        "final_w1_pooled_first": _layer_avg(last, "w1_pooled_first"),
        "w1_prev_mean": mean_std([_layer_avg(r["shift_metrics"], "w1_prev") for r in later])[0],
        "final_w1_first": _layer_avg(last, "w1_first"),
        "final_mean_shift_first": _layer_avg(last, "mean_shift_first"),
        "final_log_std_ratio_first": _layer_avg(last, "log_std_ratio_first"),
        "final_w1_first_per_layer": ({k: v.get("w1_first") for k, v in last.items() if isinstance(v, dict)}
                                     if last else {}),
    }


def _grad_ics_records(run: Run) -> list[dict]:
    return [r for r in run.ics if r.get("kind") == "grad_ics" and isinstance(r.get("layers"), dict) and r["layers"]]


def _grad_layers(recs: list[dict]) -> tuple[list[str], list[str]]:
    """(all layer names in order, the hidden layers after the first: layer2..layerK).

    The classifier is not a hidden layer; layer1's gradient-based ICS is 0 (cos 1) by
    definition, since no layer precedes it (Santurkar et al. 2018, Def. 2.1).
    """
    names = ordered_keys(r["layers"] for r in recs)
    hidden = [n for n in names if n != "classifier"]
    return names, hidden[1:]


def _probe_avg(rec: dict, layers: list[str], key: str) -> float | None:
    return _layer_avg({n: rec["layers"].get(n) for n in layers}, key)


def gradient_series(run: Run) -> tuple[list[int], list[float | None], list[float | None]]:
    """(steps, ||G - G'|| / ||G|| and cos(G, G') averaged over layer2..layerK) of one run's grad_ics probes."""
    recs = _grad_ics_records(run)
    _, later = _grad_layers(recs)
    return ([int(r["step"]) for r in recs], [_probe_avg(r, later, "l2_rel") for r in recs],
            [_probe_avg(r, later, "cos") for r in recs])


def run_gradient_view(run: Run) -> dict | None:
    """Santurkar et al.'s gradient-based ICS (2018, Def. 2.1) of one run, from ``ics.jsonl``.

    Returns:
        None without grad_ics records; else {"probes", "layers" (layer2..layerK),
        "l2" / "l2_rel" / "cos": mean over probes of ||G_i - G'_i||_2, ||G_i - G'_i||_2 / ||G_i||_2
        (the scale-free one verdicts use; None in runs before it was recorded) and cos(G_i, G'_i),
        averaged over layer2..layerK (None with a single hidden layer; NaN values left out),
        "per_layer": {layer: {"l2", "l2_rel", "cos", "g_norm"}: mean over probes} (layer1 -- trivial
        by definition -- and the classifier included)}.
    """
    recs = _grad_ics_records(run)
    if not recs:
        return None
    names, later = _grad_layers(recs)
    per_layer = {n: {k: mean_std([(r["layers"].get(n) or {}).get(k) for r in recs
                                  if isinstance(r["layers"].get(n), dict)])[0] for k in GRAD_KEYS}
                 for n in names}
    return {"probes": len(recs), "layers": later,
            **{k: mean_std([_probe_avg(r, later, k) for r in recs])[0] for k in ("l2", "l2_rel", "cos")},
            "per_layer": per_layer}


def _landscape_records(run: Run) -> list[dict]:
    return [r for r in run.ics if r.get("kind") == "landscape"]


def landscape_series(run: Run) -> tuple[list[int], dict[str, list[float | None]]]:
    """(steps, {key: values}) of one run's landscape probes, keys :data:`LANDSCAPE_KEYS` and
    :data:`REL_LANDSCAPE_KEYS` (None where a probe lacks the key)."""
    recs = _landscape_records(run)
    vals = {k: [(finite([r.get(k)]) or [None])[0] for r in recs] for k in LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS}
    return [int(r["step"]) for r in recs], vals


def run_landscape_view(run: Run) -> dict | None:
    """Loss-landscape smoothness along the gradient (Santurkar et al. 2018, Sec. 3.1) of one run.

    Returns:
        None without landscape records; else {"probes", "loss_variation",
        "grad_predictiveness", "beta_smoothness", and the scale-invariant "rel_loss_variation",
        "rel_grad_predictiveness", "rel_beta_smoothness" (None in runs without them)}: means over
        the probes (finite values).
    """
    recs = _landscape_records(run)
    if not recs:
        return None
    return {"probes": len(recs),
            **{k: mean_std([r.get(k) for r in recs])[0] for k in LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS}}


def ics_summary(group: ConfigGroup) -> dict | None:
    """The ICS measurements of one configuration: means ± std over its finished seeds.

    Diverged runs are left out (as for the stability numbers: their last record is not the
    end of training). Each view's values are per seed those of :func:`run_distribution_view`,
    :func:`run_gradient_view` and :func:`run_landscape_view`; a view is None ("not measured")
    when no finished seed has its data.

    Returns:
        None when no finished run has any of the three views; else {"label" (the
        :func:`variant_label`), "variant", "seeds" (finished runs), "distribution":
        {"seeds", "records" (per seed), "bn_stats", "w1_prev_mean", "final_w1_first",
        "final_w1_pooled_first", "final_bn_input_w1_first", "final_mean_shift_first",
        "final_log_std_ratio_first", "final_w1_first_per_layer": {layer: stat}},
        "gradient": {"seeds", "probes", "layers", "l2", "l2_rel", "cos", "per_layer": {layer:
        {"l2", "l2_rel", "cos", "g_norm"}}}, "landscape": {"seeds", "probes", "loss_variation",
        "grad_predictiveness", "beta_smoothness", "rel_loss_variation", "rel_grad_predictiveness",
        "rel_beta_smoothness"}, "probe_time_s": {kind: stat} (seconds per run, summary.json) or
        None}; every stat is :func:`value_stat`.
    """
    runs = [r for r in group.runs if r.status == "finished"]
    dist = [v for v in map(run_distribution_view, runs) if v]
    grad = [v for v in map(run_gradient_view, runs) if v]
    land = [v for v in map(run_landscape_view, runs) if v]
    if not (dist or grad or land):
        return None
    out: dict = {"label": group.variant_label or group.label, "variant": bn_variant(group), "seeds": len(runs),
                 "distribution": None, "gradient": None, "landscape": None, "probe_time_s": None}
    if dist:
        layers = ordered_keys(v["final_w1_first_per_layer"] for v in dist)
        out["distribution"] = {
            "seeds": len(dist), "records": [v["records"] for v in dist],
            "bn_stats": next((v["bn_stats"] for v in dist if v.get("bn_stats")), None),
            **{k: value_stat([v[k] for v in dist]) for k in ("w1_prev_mean", "final_w1_first", "final_w1_pooled_first",
                                                             "final_bn_input_w1_first", "final_mean_shift_first",
                                                             "final_log_std_ratio_first")},
            "final_w1_first_per_layer": {n: value_stat([v["final_w1_first_per_layer"].get(n) for v in dist])
                                         for n in layers},
        }
    if grad:
        names = ordered_keys(v["per_layer"] for v in grad)
        later = ordered_keys(v["layers"] for v in grad)
        out["gradient"] = {
            "seeds": len(grad), "probes": [v["probes"] for v in grad], "layers": later,
            **{k: value_stat([v[k] for v in grad]) for k in ("l2", "l2_rel", "cos")},
            "per_layer": {n: {k: value_stat([v["per_layer"].get(n, {}).get(k) for v in grad])
                              for k in GRAD_KEYS} for n in names},
        }
    if land:
        out["landscape"] = {"seeds": len(land), "probes": [v["probes"] for v in land],
                            **{k: value_stat([v[k] for v in land]) for k in LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS}}
    times = [r.summary.get("probe_time_s") for r in runs if isinstance(r.summary.get("probe_time_s"), dict)]
    if times:
        out["probe_time_s"] = {k: value_stat([t.get(k) for t in times]) for k in PROBE_KINDS}
    return out
