"""The report's tables as DataFrames, and its files: report.md (tables by :meth:`DataFrame.to_markdown`),
report.csv (:meth:`DataFrame.to_csv`, one row per configuration) and report.json."""

from __future__ import annotations

import pandas as pd

from bnexp.report.best_rate import best_rate_md
from bnexp.report.build import Report
from bnexp.report.fmt import format_acc, format_g, format_stat, format_target, md_table
from bnexp.report.groups import format_value
from bnexp.report.ics_stats import PROBE_KINDS, REL_LANDSCAPE_KEYS
from bnexp.report.ics_verdicts import COS_MARGIN, ICS_MARGIN, ICS_TITLE, NEARLY_AS_FAST
from bnexp.report.load import ordered_keys
from bnexp.report.noise_sweep import noise_strength_md
from bnexp.report.figstyle import refs
from bnexp.report.stats import STD_NOTE, target_key
from bnexp.rundir import dumps
from bnexp.report.frontier import frontier_markdown
from bnexp.report.studies import study_files, study_md

ICS_INTRO = (
    "Two views on the same runs. **The BN paper** (Ioffe & Szegedy 2015) calls internal covariate shift the change in "
    "the distribution of a layer's inputs during training: *W1 step to step* is the per-unit Wasserstein-1 distance "
    "(per unit, then the mean over units) between a layer's inputs to its nonlinearity on the fixed probe set at "
    "consecutive monitor records (mean over the records after step 0), *W1 from start* the distance between the last "
    "record and step 0, *pooled W1* the same over all units pooled (shifts of different units can cancel in it), *BN "
    "input W1* the per-unit W1 of BN's own input Wu (where the shift BN removes happens), *|Δmean|/std from start* the "
    "mean over units of |mean_end - mean_0| / std_0; all averaged over the hidden layers. In the monitor's default "
    "`batch` mode every BN unit's mean and std are beta and gamma by construction, so the BN network's "
    "nonlinearity-input shift only shows gamma, beta and the distribution's shape (docs/ics/measurements.md). "
    "**Santurkar et al. 2018** (\"How Does Batch Normalization Help Optimization?\") measure ICS by how much a layer's "
    "gradient changes when the layers before it take their update (Def. 2.1: the relative ||G - G'|| / ||G|| -- the "
    "absolute ||G - G'|| shrinks with the gradient itself -- and cos(G, G'), mean over the probes and over layers "
    "2..K; layer 1 is trivially 0 / 1) and argue that BN helps by making the loss landscape smoother (loss variation, "
    "gradient predictiveness and effective beta-smoothness along the gradient, Sec. 3.1, with steps relative to each "
    "parameter tensor's norm so that BN's scale invariance does not confound them; the raw values are in "
    "report.json); *noisy BN* is BN followed by injected, time-varying noise (Sec. 2.1), i.e. deliberate covariate "
    "shift.")
ICS_FIGURES = {"ics_distribution.png": "Distribution view: per-unit W1 of the layers' inputs from step 0",
               "ics_gradient.png": "Gradient-based ICS (Santurkar Def. 2.1), layers 2..K",
               "ics_landscape.png": "Loss landscape along the gradient, scale-invariant (Santurkar Sec. 3.1)"}


def _frame(header: list[str], rows: list[list]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=header, dtype=object)


def main_table(report: Report) -> pd.DataFrame:
    """The main per-configuration table (text cells): runs, accuracies, steps to each target."""
    targets = report.data["targets"]
    rows = [[s["label"], f"{s['completed']}/{s['runs']}" if s["completed"] != s["runs"] else str(s["runs"]),
             format_acc(s["max_test_accuracy"]), format_acc(s["final_test_accuracy"])]
            + [s["steps_to_target"][target_key(t)]["text"] for t in targets] + [str(s["diverged"]), str(s["failed"])]
            for s in report.data["configurations"]]
    return _frame(["configuration", "runs", "max test acc (%)", "final test acc (%)"]
                  + [f"steps to {format_target(t)}" for t in targets] + ["diverged", "failed"], rows)


def md(frame: pd.DataFrame) -> list[str]:
    """A table's markdown lines (:func:`bnexp.report.fmt.md_table`)."""
    return md_table(list(frame.columns), frame.values.tolist())


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
            + md_table(["BN configuration", "matching no-BN"] + [format_target(t) for t in targets], rows) + [""])


def _stability_md(report: Report) -> list[str]:
    """Markdown of the per-layer stability numbers (Fig. 1b,c)."""
    rows = [[s["label"], layer, "n/a" if v["median_shift"] is None else f"{v['median_shift']:.4f}",
             "n/a" if v["spread_ratio"] is None else f"{v['spread_ratio']:.3f}", str(v["n"])]
            for s in report.data["configurations"] for layer, v in s["stability"].items()]
    head = [f"## Stability of each layer's input ({refs(report)['stability']})", "",
            "|p50_end - p50_first| and (p85-p15)_end / (p85-p15)_first of each hidden layer's input to its "
            "nonlinearity (all units, probe set of shift.jsonl), first vs last monitor step, mean over finished "
            "seeds.", ""]
    if not rows:
        return head + ["n/a: no shift.jsonl records in finished runs.", ""]
    return head + md_table(["configuration", "layer", "|median shift|", "spread end/first", "seeds"], rows) + [""]


def ics_rows(report: Report) -> list[tuple[str, dict | None]]:
    """(section label, ics summary or None) of every configuration, in report order."""
    return [(s["ics"]["label"] if s.get("ics") else (g.variant_label or g.label), s.get("ics"))
            for g, s in zip(report.groups, report.data["configurations"])]


def view_cell(ics: dict | None, view: str, key: str, missing: str = "n/a") -> str:
    """A table cell: "mean ± std" of ``ics[view][key]``, "not measured" when the view is absent."""
    v = (ics or {}).get(view)
    return format_stat(v[key], missing) if v else "not measured"


def ics_frames(report: Report) -> dict[str, pd.DataFrame]:
    """The ICS section's tables: "distribution", "gradient" (with the landscape) and "cost"."""
    dist, grad, cost = [], [], []
    for label, ics in ics_rows(report):
        d, g, ls, pt = ((ics or {}).get(k) for k in ("distribution", "gradient", "landscape", "probe_time_s"))
        per_layer = (", ".join(f"{k} {format_g(v['mean'])}" for k, v in d["final_w1_first_per_layer"].items())
                     if d else "not measured")
        dist.append([label, str(d["seeds"]) if d else "0"]
                    + [view_cell(ics, "distribution", k)
                       for k in ("w1_prev_mean", "final_w1_first", "final_w1_pooled_first")]
                    + [view_cell(ics, "distribution", "final_bn_input_w1_first", "no BN input"),
                       view_cell(ics, "distribution", "final_mean_shift_first"), per_layer])
        grad.append([label, "/".join(str(v["seeds"]) for v in (g, ls) if v) or "0"]
                    + [view_cell(ics, "gradient", k) for k in ("l2_rel", "l2", "cos")]
                    + [view_cell(ics, "landscape", k) for k in REL_LANDSCAPE_KEYS + ("beta_smoothness",)])
        cost.append([label] + [format_stat(pt[k]) if pt else "not measured" for k in PROBE_KINDS])
    return {"distribution": _frame(["configuration", "seeds", "W1 step to step", "W1 from start (end)",
                                    "pooled W1 from start", "BN input W1 from start", "|Δmean|/std from start (end)",
                                    "W1 from start per layer (end)"], dist),
            "gradient": _frame(["configuration", "seeds", "‖G - G'‖ / ‖G‖ (layers 2..K)", "‖G - G'‖", "cos(G, G')",
                                "loss variation (scale-inv.)", "gradient predictiveness (scale-inv.)",
                                "beta-smoothness (scale-inv.)", "beta-smoothness (raw)"], grad),
            "cost": _frame(["configuration", "eval", "monitor", "grad_ics", "landscape"], cost)}


def _ics_md(report: Report) -> list[str]:
    """Markdown of the section "Does BN reduce internal covariate shift?" ([] without ICS data)."""
    sec = report.data.get("ics")
    if not sec:
        return []
    tables = ics_frames(report)
    out = [f"## {ICS_TITLE}", "", ICS_INTRO, "",
           f"Values are mean ± std over the finished seeds (diverged runs left out; \"(1 seed)\": a single run); "
           f"{STD_NOTE}. \"not measured\": no finished run of the configuration recorded it. A measure counts as "
           f"lower with BN only when it is below {1 - ICS_MARGIN:g} x the no-BN value; cosines differ when more "
           f"than {COS_MARGIN:g} apart; noisy BN is \"nearly as fast\" when it needs at most {NEARLY_AS_FAST:g}x "
           "BN's steps to the highest target BN reached in all seeds. A verdict needs at least 2 seeds per "
           "configuration, at least 5 records of the measurement per seed and networks above chance; otherwise it "
           "says \"insufficient evidence\".", "", "### Distribution view (BN paper)", ""]
    out += md(tables["distribution"]) + ["", "### Gradient-based ICS and loss landscape (Santurkar et al. 2018)", ""]
    out += md(tables["gradient"]) + ["", "### Cost of the probes (seconds per run, summary.json probe_time_s)", ""]
    out += md(tables["cost"]) + [""]
    if sec.get("noise_strength"):
        out += noise_strength_md(sec["noise_strength"])
    out += ["### Verdicts", ""]
    out += [f"- {v}" for v in sec["verdicts"]] or ["- No matching BN / noisy BN / no BN configurations to compare."]
    out += ["", "### What this sweep supports", ""]
    out += [p + "\n" for p in sec["supports"]] or ["Nothing to compare: the sweep has no matching BN / no BN / "
                                                   "noisy BN configurations.", ""]
    if sec["figures"]:
        out += ["### Figures", ""] + [line for f in sec["figures"] for line in (f"![{ICS_FIGURES[f]}]({f})", "")]
    return out


def render_markdown(report: Report) -> str:
    """The text of report.md: the Sec. 4.2 frontier (if any), verdicts, main table, speedups, figures,
    stability, the ICS section (if any), failed runs."""
    d, ref = report.data, refs(report)
    out = ["# Batch Normalization sweep report", "",
           f"Sweep: `{d['sweep_dir']}`: {d['runs']} run directories, {len(d['configurations'])} configurations "
           f"(varying keys: {', '.join(d['varying_keys']) or 'none'}). Values are mean ± std over seeds; {STD_NOTE}. "
           "Steps to a target are averaged over the seeds that reached it; \"not reached (k/n)\": k of n completed "
           "runs never reached it. Failed and incomplete runs are left out of every mean.", ""]
    if d.get("matched_accuracy") is not None:  # the Sec. 4.2 frontier section
        out += frontier_markdown(d)
    out += study_md(d.get("study"))  # issue 23: a scripts/study.sh sweep's claims, table and figure
    out += ["## Verdicts", ""] + [f"- {v}" for v in d["verdicts"]] + [""]
    out += ["## Results per configuration", ""] + md(main_table(report)) + [""]
    out += _speedup_md(report) + (best_rate_md(d["best_rate"]) if d.get("best_rate") else [])
    out += ["## Figures", "",
            f"![Test accuracy vs steps, whole range and zoomed top ({ref['accuracy']})](accuracy_vs_steps.png)", "",
            f"![Percentiles of a typical last-hidden-layer unit, no BN vs BN ({ref['percentiles']})](percentiles.png)",
            "", f"![Per-layer stability of the input distribution ({ref['stability']})](stability.png)", ""]
    out += _stability_md(report) + _ics_md(report)
    bad = [(s["label"], r) for s in d["configurations"] for r in s["seeds"] if r["status"] in ("failed", "incomplete")]
    if bad:
        out += ["## Failed and incomplete runs", ""]
        out += [f"- {label}, seed {r['seed']}: {r['status']} ({r['error']}) `{r['path']}`" for label, r in bad] + [""]
    return "\n".join(out)


def render_csv(report: Report) -> str:
    """report.csv: one row per configuration; numeric columns, empty cell for not reached / n/a."""
    d = report.data
    layers = ordered_keys(s["stability"] for s in d["configurations"])
    header = (["label"] + d["varying_keys"] + ["bn", "experiment", "runs", "completed", "diverged", "failed",
                                               "incomplete"]
              + [f"{k}_{x}" for k in ("max_test_accuracy", "final_test_accuracy") for x in ("mean", "std")])
    for tk in map(target_key, d["targets"]):
        header += [f"steps_to_{tk}_{x}" for x in ("mean", "std", "reached", "n")] + [f"speedup_{tk}",
                                                                                     f"speedup_{tk}_is_lower_bound"]
    header += [f"{layer}_{k}" for layer in layers for k in ("median_shift", "spread_ratio")]
    rows = []
    for s in d["configurations"]:
        row = [s["label"]] + [format_value(s["config"][k]) if k in s["config"] else "" for k in d["varying_keys"]]
        row += [None if s["bn"] is None else int(s["bn"]), s["experiment"] or ""]
        row += [s[k] for k in ("runs", "completed", "diverged", "failed", "incomplete")]
        row += [s[k][x] for k in ("max_test_accuracy", "final_test_accuracy") for x in ("mean", "std")]
        for tk in map(target_key, d["targets"]):
            st, sp = s["steps_to_target"][tk], s["speedup"][tk]
            row += [st["mean"], st["std"], st["reached"], st["n"], sp["value"],
                    None if sp["lower_bound"] is None else int(sp["lower_bound"])]
        row += [s["stability"].get(layer, {}).get(k) for layer in layers for k in ("median_shift", "spread_ratio")]
        rows.append(row)
    return _frame(header, rows).to_csv(index=False, lineterminator="\r\n")


def render_files(report: Report) -> dict[str, bytes]:
    """The contents of report.md, report.csv and report.json (strict JSON: NaN and inf as null), and the
    study figure of a scripts/study.sh sweep (:func:`bnexp.report.studies.study_files`)."""
    return {"report.md": (render_markdown(report) + "\n").encode("utf-8"),
            "report.csv": render_csv(report).encode("utf-8"),
            "report.json": (dumps(report.data, indent=2) + "\n").encode("utf-8"), **study_files(report.data)}
