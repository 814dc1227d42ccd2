"""The report's files: report.md (markdown), report.csv (one row per configuration) and the JSON-safe
form of report.json's data."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from bnexp.report.best_rate import best_rate_md
from bnexp.report.build import STD_NOTE, Report
from bnexp.report.fmt import format_acc, format_g, format_stat, format_target
from bnexp.report.groups import format_value
from bnexp.report.ics_stats import PROBE_KINDS, REL_LANDSCAPE_KEYS
from bnexp.report.ics_verdicts import COS_MARGIN, ICS_MARGIN, ICS_TITLE, NEARLY_AS_FAST
from bnexp.report.load import ordered_keys
from bnexp.report.paper import refs
from bnexp.report.noise_sweep import noise_strength_md
from bnexp.report.frontier import frontier_markdown  # issue 19 hook
from bnexp.report.stats import finite, target_key
from bnexp.rundir import atomic_write_bytes

SEC42_TITLE = "Steps to reach the baseline's best accuracy (paper Sec. 4.2 form)"


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return out


def main_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the main per-configuration table (text cells)."""
    targets = report.data["targets"]
    header = (["configuration", "runs", "max test acc (%)", "final test acc (%)"]
              + [f"steps to {format_target(t)}" for t in targets] + ["diverged", "failed"])
    rows = []
    for s in report.data["configurations"]:
        runs = f"{s['completed']}/{s['runs']}" if s["completed"] != s["runs"] else str(s["runs"])
        rows.append([s["label"], runs, format_acc(s["max_test_accuracy"]), format_acc(s["final_test_accuracy"])]
                    + [s["steps_to_target"][target_key(t)]["text"] for t in targets]
                    + [str(s["diverged"]), str(s["failed"])])
    return header, rows


def _sec42_md(sec42: dict) -> list[str]:
    """Markdown of the Sec. 4.2 table."""
    out = [f"## {SEC42_TITLE}", ""]
    if sec42["target"] is None:
        return out + ["The baseline has no completed runs, so there is no target (n/a).", ""]
    tgt = f"{100 * sec42['target']:.2f}%"
    out += [f"Target: the baseline's best test accuracy, {tgt} = mean over {len(finite(sec42['target_per_seed']))}"
            " baseline seeds of each seed's maximum test accuracy. Steps are the first evaluation at or above "
            "it (from metrics.jsonl), mean ± std over the seeds that reached it.", ""]
    rows = []
    for r in sec42["rows"]:
        div = f"{r['diverged']}/{r['runs']} diverged" if r["diverged"] else "0"
        rows.append([r["label"], f"{r['completed']}/{r['runs']}", r["steps"]["text"], r["multiple_text"],
                     format_acc(r["max_test_accuracy"]), div])
    out += _md_table(["preset", "runs", f"steps to {tgt}", "steps vs baseline", "max test acc (%)", "diverged"],
                     rows)
    return out + [""]


def _speedup_md(report: Report) -> list[str]:
    """Markdown of the BN-over-no-BN speedup table (Sec. 4.1)."""
    targets = report.data["targets"]
    rows = [[s["label"], s["no_bn_match"]] + [s["speedup"][target_key(t)]["text"] for t in targets]
            for s in report.data["configurations"] if s["bn"] and s["no_bn_match"]]
    if not rows:
        return []
    return ([f"## Speedup of BN over no BN ({refs(report)['speedup']})", "",
             "Speedup = mean steps without BN / mean steps with BN, when both reached the target in all seeds. "
             "\">= X (lower bound)\": BN reached it in all seeds and no BN in none within max_steps, "
             "so X = max_steps / mean BN steps is only a lower bound.", ""]
            + _md_table(["BN configuration", "matching no-BN"] + [format_target(t) for t in targets], rows) + [""])


def _stability_md(report: Report) -> list[str]:
    """Markdown of the per-layer stability numbers (Fig. 1b,c)."""
    rows = []
    for s in report.data["configurations"]:
        for layer, v in s["stability"].items():
            rows.append([s["label"], layer, "n/a" if v["median_shift"] is None else f"{v['median_shift']:.4f}",
                         "n/a" if v["spread_ratio"] is None else f"{v['spread_ratio']:.3f}", str(v["n"])])
    head = [f"## Stability of each layer's input ({refs(report)['stability']})", "",
            "|p50_end - p50_first| and (p85-p15)_end / (p85-p15)_first of each hidden layer's input to its "
            "nonlinearity (all units, probe set of shift.jsonl), first vs last monitor step, mean over finished "
            "seeds.", ""]
    if not rows:
        return head + ["n/a: no shift.jsonl records in finished runs.", ""]
    return head + _md_table(["configuration", "layer", "|median shift|", "spread end/first", "seeds"], rows) + [""]


def ics_rows(report: Report) -> list[tuple[str, dict | None]]:
    """(section label, ics summary or None) of every configuration, in report order."""
    out = []
    for g, s in zip(report.groups, report.data["configurations"]):
        out.append((s["ics"]["label"] if s.get("ics") else (g.variant_label or g.label), s.get("ics")))
    return out


def view_cell(ics: dict | None, view: str, key: str) -> str:
    """A table cell: "mean ± std" of ``ics[view][key]``, "not measured" when the view is absent."""
    v = (ics or {}).get(view)
    return format_stat(v[key]) if v else "not measured"


def _ics_md(report: Report) -> list[str]:
    """Markdown of the section "Does BN reduce internal covariate shift?" ([] without ICS data)."""
    sec = report.data.get("ics")
    if not sec:
        return []
    out = [f"## {ICS_TITLE}", "",
           "Two views on the same runs. **The BN paper** (Ioffe & Szegedy 2015) calls internal covariate shift "
           "the change in the distribution of a layer's inputs during training: *W1 step to step* is the "
           "per-unit Wasserstein-1 distance (per unit, then the mean over units) between a layer's inputs to its "
           "nonlinearity on the fixed probe set at consecutive monitor records (mean over the records after step 0), "
           "*W1 from start* the distance between the last record and step 0, *pooled W1* the same over all units "
           "pooled (shifts of different units can cancel in it), *BN input W1* the per-unit W1 of BN's own input Wu "
           "(where the shift BN removes happens), *|Δmean|/std from start* the mean over units of |mean_end - "
           "mean_0| / std_0; all averaged over the hidden layers. In the monitor's default `batch` mode every BN "
           "unit's mean and std are beta and gamma by construction, so the BN network's nonlinearity-input shift "
           "only shows gamma, beta and the distribution's shape (docs/ics/measurements.md). **Santurkar et al. "
           "2018** (\"How Does Batch Normalization Help Optimization?\") measure ICS by how much a layer's gradient "
           "changes when the layers before it take their update (Def. 2.1: the relative ||G - G'|| / ||G|| -- the "
           "absolute ||G - G'|| shrinks with the gradient itself -- and cos(G, G'), mean over the probes and over "
           "layers 2..K; layer 1 is trivially 0 / 1) and argue that BN helps by making the loss landscape smoother "
           "(loss variation, gradient predictiveness and effective beta-smoothness along the gradient, Sec. 3.1, "
           "with steps relative to each parameter tensor's norm so that BN's scale invariance does not confound "
           "them; the raw values are in report.json); *noisy BN* is BN followed by injected, time-varying noise "
           "(Sec. 2.1), i.e. deliberate covariate shift.",
           "",
           f"Values are mean ± std over the finished seeds (diverged runs left out; \"(1 seed)\": a single run); "
           f"{STD_NOTE}. \"not measured\": no finished run of the configuration recorded it. A measure counts as "
           f"lower with BN only when it is below {1 - ICS_MARGIN:g} x the no-BN value; cosines differ when more "
           f"than {COS_MARGIN:g} apart; noisy BN is \"nearly as fast\" when it needs at most {NEARLY_AS_FAST:g}x "
           "BN's steps to the highest target BN reached in all seeds. A verdict needs at least 2 seeds per "
           "configuration, at least 5 records of the measurement per seed and networks above chance; otherwise it "
           "says \"insufficient evidence\".", "",
           "### Distribution view (BN paper)", ""]
    rows = []
    for label, ics in ics_rows(report):
        d = (ics or {}).get("distribution")
        per_layer = (", ".join(f"{k} {format_g(v['mean'])}" for k, v in d["final_w1_first_per_layer"].items())
                     if d else "not measured")
        bn_in = view_cell(ics, "distribution", "final_bn_input_w1_first") if d else "not measured"
        rows.append([label, str(d["seeds"]) if d else "0", view_cell(ics, "distribution", "w1_prev_mean"),
                     view_cell(ics, "distribution", "final_w1_first"),
                     format_stat(d["final_w1_pooled_first"]) if d else "not measured",
                     format_stat(d["final_bn_input_w1_first"], "no BN input") if d else bn_in,
                     view_cell(ics, "distribution", "final_mean_shift_first"), per_layer])
    out += _md_table(["configuration", "seeds", "W1 step to step", "W1 from start (end)", "pooled W1 from start",
                      "BN input W1 from start", "|Δmean|/std from start (end)", "W1 from start per layer (end)"],
                     rows) + [""]
    out += ["### Gradient-based ICS and loss landscape (Santurkar et al. 2018)", ""]
    rows = []
    for label, ics in ics_rows(report):
        g, ls = (ics or {}).get("gradient"), (ics or {}).get("landscape")
        seeds = "/".join(str(v["seeds"]) for v in (g, ls) if v) or "0"
        rows.append([label, seeds, view_cell(ics, "gradient", "l2_rel"), view_cell(ics, "gradient", "l2"),
                     view_cell(ics, "gradient", "cos")]
                    + [view_cell(ics, "landscape", k) for k in REL_LANDSCAPE_KEYS + ("beta_smoothness",)])
    out += _md_table(["configuration", "seeds", "‖G - G'‖ / ‖G‖ (layers 2..K)", "‖G - G'‖", "cos(G, G')",
                      "loss variation (scale-inv.)", "gradient predictiveness (scale-inv.)",
                      "beta-smoothness (scale-inv.)", "beta-smoothness (raw)"], rows) + [""]
    rows = []
    for label, ics in ics_rows(report):
        pt = (ics or {}).get("probe_time_s")
        rows.append([label] + [format_stat(pt[k]) if pt else "not measured" for k in PROBE_KINDS])
    out += ["### Cost of the probes (seconds per run, summary.json probe_time_s)", ""]
    out += _md_table(["configuration", "eval", "monitor", "grad_ics", "landscape"], rows) + [""]
    if sec.get("noise_strength"):
        out += noise_strength_md(sec["noise_strength"])
    out += ["### Verdicts", ""]
    out += [f"- {v}" for v in sec["verdicts"]] or ["- No matching BN / noisy BN / no BN configurations to compare."]
    out += ["", "### What this sweep supports", ""]
    out += [p + "\n" for p in sec["supports"]] or ["Nothing to compare: the sweep has no matching BN / no BN / "
                                                   "noisy BN configurations.", ""]
    if sec["figures"]:
        names = {"ics_distribution.png": "Distribution view: per-unit W1 of the layers' inputs from step 0",
                 "ics_gradient.png": "Gradient-based ICS (Santurkar Def. 2.1), layers 2..K",
                 "ics_landscape.png": "Loss landscape along the gradient, scale-invariant (Santurkar Sec. 3.1)"}
        out += ["### Figures", ""]
        for f in sec["figures"]:
            out += [f"![{names[f]}]({f})", ""]
    return out


def render_markdown(report: Report) -> str:
    """The text of report.md: Sec. 4.2 table (if any), verdicts, main table, speedups, figures,
    stability, the ICS section (if any), failed runs."""
    d = report.data
    out = ["# Batch Normalization sweep report", "",
           f"Sweep: `{d['sweep_dir']}`: {d['runs']} run directories, {len(d['configurations'])} configurations "
           f"(varying keys: {', '.join(d['varying_keys']) or 'none'}). Values are mean ± std over seeds; {STD_NOTE}. "
           "Steps to a target are averaged over the seeds that reached it; \"not reached (k/n)\": k of n completed "
           "runs never reached it. Failed and incomplete runs are left out of every mean.", ""]
    if d.get("matched_accuracy") is not None:  # issue 19: the Sec. 4.2 frontier section
        out += frontier_markdown(d)
    if d["sec42"]:
        out += _sec42_md(d["sec42"])
    out += ["## Verdicts", ""] + [f"- {v}" for v in d["verdicts"]] + [""]
    header, rows = main_table(report)
    out += ["## Results per configuration", ""] + _md_table(header, rows) + [""]
    out += _speedup_md(report)
    if d.get("best_rate"):
        out += best_rate_md(d["best_rate"])
    out += ["## Figures", "",
            f"![Test accuracy vs steps, whole range and zoomed top ({refs(report)['accuracy']})]"
            "(accuracy_vs_steps.png)", "",
            f"![Percentiles of a typical last-hidden-layer unit, no BN vs BN ({refs(report)['percentiles']})]"
            "(percentiles.png)", "",
            f"![Per-layer stability of the input distribution ({refs(report)['stability']})](stability.png)", ""]
    out += _stability_md(report)
    out += _ics_md(report)
    bad = [(s["label"], r) for s in d["configurations"] for r in s["seeds"] if r["status"] in ("failed", "incomplete")]
    if bad:
        out += ["## Failed and incomplete runs", ""]
        out += [f"- {label}, seed {r['seed']}: {r['status']} ({r['error']}) `{r['path']}`" for label, r in bad]
        out += [""]
    return "\n".join(out)


def _num(v: Any) -> Any:
    """CSV cell: the number, or "" for missing."""
    return "" if v is None else v


def write_csv(report: Report, path: Path) -> None:
    """report.csv: one row per configuration; numeric columns, empty cell for not reached / n/a.
    Written atomically (temporary file, ``os.replace``).

    Raises:
        OSError: when ``path`` cannot be written (it is then unchanged).
    """
    d = report.data
    layers = ordered_keys(s["stability"] for s in d["configurations"])
    vary = d["varying_keys"]
    header = ["label"] + vary + ["bn", "experiment", "runs", "completed", "diverged", "failed", "incomplete",
                                  "max_test_accuracy_mean", "max_test_accuracy_std",
                                  "final_test_accuracy_mean", "final_test_accuracy_std"]
    for t in d["targets"]:
        tk = target_key(t)
        header += [f"steps_to_{tk}_mean", f"steps_to_{tk}_std", f"steps_to_{tk}_reached", f"steps_to_{tk}_n",
                   f"speedup_{tk}", f"speedup_{tk}_is_lower_bound"]
    for layer in layers:
        header += [f"{layer}_median_shift", f"{layer}_spread_ratio"]
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(header)
    for s in d["configurations"]:
        row = [s["label"]] + [format_value(s["config"][k]) if k in s["config"] else "" for k in vary]
        row += [_num(None if s["bn"] is None else int(s["bn"])), s["experiment"] or "", s["runs"],
                s["completed"], s["diverged"], s["failed"], s["incomplete"]]
        for key in ("max_test_accuracy", "final_test_accuracy"):
            row += [_num(s[key]["mean"]), _num(s[key]["std"])]
        for t in d["targets"]:
            st, sp = s["steps_to_target"][target_key(t)], s["speedup"][target_key(t)]
            row += [_num(st["mean"]), _num(st["std"]), st["reached"], st["n"], _num(sp["value"]),
                    _num(None if sp["lower_bound"] is None else int(sp["lower_bound"]))]
        for layer in layers:
            v = s["stability"].get(layer, {})
            row += [_num(v.get("median_shift")), _num(v.get("spread_ratio"))]
        w.writerow(row)
    atomic_write_bytes(path, f.getvalue().encode("utf-8"))


def json_safe(obj: Any) -> Any:
    """Replace non-finite floats by None (JSON has no NaN) and any non-JSON value (paths, dates) by its text."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)  # Path, datetime from YAML, enums: as text
