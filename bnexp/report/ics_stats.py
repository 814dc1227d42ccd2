"""The measurements of internal covariate shift, one row per run (:func:`ics_run_frame`), read with pandas
from the sweep's record frames (:class:`bnexp.report.load.Sweep`); docs/ics/measurements.md defines the keys.

* ``shift.<key>``, ``bn_input.<key>``: the BN paper's distribution view (shift.jsonl ``shift_metrics`` of the
  inputs to the nonlinearity, ``bn_input_shift_metrics`` of BN's input Wu), the last record's mean over the
  hidden layers; ``<key>.last``: the last hidden layer; ``*_prev`` keys: mean over the records after the first.
  Scale-free ``ks_first``, ``w1_rel_first`` beside the raw ``w1_first``; sampling-noise floors ``*_floor``.
* ``grad.<key>``: gradient-based ICS (Santurkar et al. 2018, Def. 2.1; ics.jsonl ``grad_ics``), mean over
  probes and layers 2..K (layer 1 is 0 by definition; the classifier is no hidden layer).
* ``land.<key>``: landscape probes (Sec. 3.1; ics.jsonl ``landscape``), mean over probes: filter-normalized
  ``fn_*`` (Li et al. 2018), scale-invariant ``rel_*``, raw.
* ``time.<kind>``: summary.json ``probe_time_s`` (seconds per run).
"""

from __future__ import annotations

import re

import pandas as pd

from bnexp.report.groups import ConfigGroup, bn_variant
from bnexp.report.load import Sweep
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


def records(ics: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The ics.jsonl records of ``kind`` ("grad_ics", "landscape")."""
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


def gradient_long(ics: pd.DataFrame) -> pd.DataFrame:
    """The grad_ics probes as :func:`layer_long`, layers 2..K only."""
    long = layer_long(records(ics, "grad_ics"), "layers")
    return long[(long["layer"] != long.groupby("run")["layer"].transform("first")) & (long["layer"] != "classifier")]


def ics_run_frame(sweep: Sweep) -> pd.DataFrame:
    """One row per run (index ``run``, as :attr:`Sweep.table`) with the columns of the module docstring
    (NaN where a run lacks a measure)."""
    land, grad = records(sweep.ics, "landscape"), gradient_long(sweep.ics).groupby(["run", "key"])["value"].mean()
    times = {r.id: r.summary["probe_time_s"] for r in sweep.runs if isinstance(r.summary.get("probe_time_s"), dict)}
    parts = [_distribution(sweep.shift, "shift_metrics", "shift"),
             _distribution(sweep.shift, "bn_input_shift_metrics", "bn_input"),
             grad.unstack().filter(items=GRAD_KEYS).add_prefix("grad."),
             land.filter(items=LANDSCAPE_KEYS).apply(pd.to_numeric, errors="coerce").groupby(land["run"]).mean()
             .add_prefix("land."),
             pd.DataFrame.from_dict(times, orient="index").filter(items=PROBE_KINDS).add_prefix("time.")]
    return pd.concat(parts, axis=1).reindex(sweep.table.index).astype(float)


def ics_summary(group: ConfigGroup, table: pd.DataFrame) -> dict | None:
    """The ICS measures of one configuration's finished runs (``table``: the report's run table with
    :func:`ics_run_frame`'s columns): None without any, else {"label", "variant", "seeds", "measures":
    {column: :func:`bnexp.report.stats.value_stat`}}."""
    rows = table[(table["group"] == group.key) & (table["status"] == "finished")]
    vals = rows[[c for c in rows if c.startswith(ICS_PREFIXES)]].dropna(axis=1, how="all")
    if vals.columns.empty:
        return None
    return {"label": group.variant_label or group.label, "variant": bn_variant(group),
            "seeds": [int(s) for s in rows["seed"].dropna()], "measures": {c: value_stat(vals[c]) for c in vals}}
