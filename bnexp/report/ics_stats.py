"""The measurements of internal covariate shift, one row per run (:func:`ics_run_frame`), read with
pandas from the sweep's record frames (:class:`bnexp.report.load.Sweep`).

Columns (absent when no run recorded the key; docs/ics/measurements.md defines every key):

* ``shift.<key>`` / ``bn_input.<key>``: the BN paper's distribution view, shift.jsonl's per-layer
  ``shift_metrics`` (inputs to the nonlinearity) and ``bn_input_shift_metrics`` (BN's input Wu),
  mean over the hidden layers of the last record; ``<key>.last``: the last hidden layer alone. Keys
  ``*_prev`` (record to record) are the mean over every record after the first instead. The
  scale-free ``ks_first`` (Kolmogorov-Smirnov distance, unitless) and ``w1_rel_first`` (W1 / the
  unit's initial p15-p85 spread) beside the raw ``w1_first`` (pre-activation units), and each
  measure's sampling-noise floor ``ks_floor``, ``w1_rel_floor``, ``w1_floor``.
* ``grad.<key>``: Santurkar et al. 2018's gradient-based ICS (Def. 2.1, ics.jsonl ``grad_ics``), mean
  over the probes of layers 2..K (layer 1 is 0 by definition, the classifier is not a hidden layer):
  ``l2_rel_per_move`` (||G - G'|| / ||G|| per unit of the earlier layers' relative movement),
  ``l2_rel``, ``l2``, ``cos``, ``move_rel``.
* ``land.<key>``: loss-landscape probes (Sec. 3.1, ics.jsonl ``landscape``), mean over probes:
  filter-normalized ``fn_*`` (Li et al. 2018), scale-invariant ``rel_*``, raw.
* ``time.<kind>``: summary.json ``probe_time_s`` (seconds per run); ``final_train_accuracy``.
"""

from __future__ import annotations

import re

import pandas as pd

from bnexp.report.groups import ConfigGroup, bn_variant
from bnexp.report.load import Run, Sweep
from bnexp.report.stats import value_stat

GRAD_KEYS = ("l2_rel_per_move", "l2_rel", "l2", "cos", "move_rel")
LANDSCAPE_KEYS = tuple(f"{p}{k}" for p in ("fn_", "rel_", "") for k in
                       ("loss_variation", "grad_predictiveness", "beta_smoothness"))
PROBE_KINDS = ("eval", "monitor", "grad_ics", "landscape")
ICS_PREFIXES = ("shift.", "bn_input.", "grad.", "land.", "time.")


def layer_long(frame: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """The columns ``<prefix>.<layer>.<key>`` of a records frame as a long frame: run, step, layer,
    key, value (floats; rows without a number left out), layers in their recorded order."""
    pat = rf"^{re.escape(prefix)}\.(?P<layer>.+)\.(?P<key>[^.]+)$"
    cols = [c for c in frame.columns if re.match(pat, c)]
    if frame.empty or not cols:
        return pd.DataFrame(columns=["run", "step", "layer", "key", "value"])
    long = frame.melt(id_vars=["run", "step"], value_vars=cols, var_name="col")
    long = long.join(long.pop("col").str.extract(pat))
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    return long.dropna(subset=["value"])


def _records(ics: pd.DataFrame, kind: str) -> pd.DataFrame:
    return ics[ics["kind"] == kind] if "kind" in ics else ics.iloc[:0]


def _distribution(shift: pd.DataFrame, prefix: str, tag: str) -> pd.DataFrame:
    """Per run: the last record's mean over layers and last layer (``.last``) of every key; ``*_prev``
    keys averaged over the records after the first. Runs with a single record are left out."""
    long = layer_long(shift, prefix)
    later = long[long["step"] > long.groupby("run")["step"].transform("min")]
    end = later[later["step"] == later.groupby("run")["step"].transform("max")].groupby(["run", "key"])["value"]
    mean = end.mean().unstack()
    prev = later.groupby(["run", "key"])["value"].mean().unstack().filter(regex="_prev$")
    mean[prev.columns] = prev
    return pd.concat([mean, end.last().unstack().add_suffix(".last")], axis=1).add_prefix(f"{tag}.")


def _gradient(ics: pd.DataFrame) -> pd.DataFrame:
    long = layer_long(_records(ics, "grad_ics"), "layers")
    first = long.groupby("run")["layer"].transform("first")
    long = long[(long["layer"] != first) & (long["layer"] != "classifier")]
    return long.groupby(["run", "key"])["value"].mean().unstack().filter(items=GRAD_KEYS).add_prefix("grad.")


def ics_run_frame(sweep: Sweep) -> pd.DataFrame:
    """One row per run (index ``run``, as :attr:`Sweep.table`) with the columns of the module docstring
    (NaN where a run lacks a measure)."""
    land = _records(sweep.ics, "landscape")
    keys = [k for k in LANDSCAPE_KEYS if k in land]
    times = {r.id: r.summary["probe_time_s"] for r in sweep.runs if isinstance(r.summary.get("probe_time_s"), dict)}
    parts = [_distribution(sweep.shift, "shift_metrics", "shift"), _distribution(sweep.shift, "bn_input_shift_metrics",
                                                                              "bn_input"), _gradient(sweep.ics),
             land[keys].apply(pd.to_numeric, errors="coerce").groupby(land["run"]).mean().add_prefix("land."),
             pd.DataFrame.from_dict(times, orient="index").filter(items=PROBE_KINDS).add_prefix("time."),
             pd.to_numeric(sweep.metrics.get("train_accuracy", pd.Series(dtype=float)), errors="coerce")
             .groupby(sweep.metrics["run"]).last().rename("final_train_accuracy")]
    return pd.concat(parts, axis=1).reindex(sweep.table.index).astype(float)


def layer_mean_series(sweep: Sweep, run: Run, view: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, value) of one run for a figure: ``view`` "shift" (shift_metrics, mean over layers),
    "grad" (grad_ics, mean over layers 2..K) or "land" (a landscape probe's ``key``)."""
    if view == "land":
        rows = _records(sweep.rows("ics", run), "landscape")
        s = pd.to_numeric(rows.get(key, pd.Series(dtype=float)), errors="coerce").groupby(rows["step"]).mean()
    else:
        rows = sweep.rows("shift", run) if view == "shift" else _records(sweep.rows("ics", run), "grad_ics")
        long = layer_long(rows, "shift_metrics" if view == "shift" else "layers")
        if view == "grad":
            long = long[(long["layer"] != long["layer"].iloc[0]) & (long["layer"] != "classifier")] if len(long) else long
        s = long[long["key"] == key].groupby("step")["value"].mean()
    s = s.dropna()
    return [int(i) for i in s.index], s.tolist()


def ics_summary(group: ConfigGroup, table: pd.DataFrame) -> dict | None:
    """The ICS measurements of one configuration over its finished runs (the report's run table with
    :func:`ics_run_frame`'s columns): None without any; else {"label", "variant", "seeds", "measures":
    {column: :func:`bnexp.report.stats.value_stat`}} (mean and population std, as the report's tables)."""
    rows = table[(table["group"] == group.key) & (table["status"] == "finished")]
    vals = rows[[c for c in rows if c.startswith(ICS_PREFIXES)]].dropna(axis=1, how="all")
    if vals.columns.empty:
        return None
    return {"label": group.variant_label or group.label, "variant": bn_variant(group),
            "seeds": [int(s) for s in rows["seed"].dropna()], "measures": {c: value_stat(vals[c]) for c in vals}}
