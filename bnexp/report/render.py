"""The report's tables as DataFrames, and its files: report.md (tables by :meth:`DataFrame.to_markdown`),
report.csv (:meth:`DataFrame.to_csv`, one row per configuration) and report.json. report.md and report.csv
are functions of report.json's dict alone (``data``), so a committed report.json regenerates its report.md and
report.csv (tests/test_docs_numbers.py checks the docs' reports)."""

from __future__ import annotations

import pandas as pd

from bnexp.report.best_rate import best_rate_speedups_md
from bnexp.report.build import Report
from bnexp.report.claims import claims_md
from bnexp.report.fmt import format_acc, format_stat, format_target, md_table
from bnexp.report.groups import KEY_ALIASES, format_value
from bnexp.report.ics_stats import PROBE_KINDS
from bnexp.report.ics_verdicts import ICS_TITLE
from bnexp.report.load import ordered_keys
from bnexp.report.noise_sweep import noise_strength_md
from bnexp.report.figstyle import refs
from bnexp.report.stats import STD_NOTE, target_key
from bnexp.runs.rundir import dumps
from bnexp.report.frontier import frontier_markdown
from bnexp.report.figures_studies import study_files
from bnexp.report.studies import study_md

ICS_INTRO = (
    "Two views on the same runs. **The BN paper** (Ioffe & Szegedy 2015) calls internal covariate shift the change in "
    "the distribution of a layer's inputs during training. Per unit of each hidden layer, on a fixed probe set, the "
    "last monitor record is compared with step 0: *KS* is the Kolmogorov-Smirnov distance (rank-based, unitless), "
    "*W1 / spread* the Wasserstein-1 distance divided by the unit's initial p15-p85 spread, both unchanged when the "
    "pre-activations are rescaled; *W1 (raw)* is in the pre-activations' own units, so it also grows with their scale "
    "and is never used for a verdict; *floor* is the same statistic between two independent samples of one "
    "distribution (its sampling noise). Means over units, then over the hidden layers (last layer: the last hidden "
    "one); *step to step*: mean over the records after step 0. **Santurkar et al. 2018** measure ICS by how much a "
    "layer's gradient changes when the layers before it take their update (Def. 2.1: ||G - G'|| / ||G||, layers "
    "2..K), here also per unit of the earlier layers' relative movement ||ΔW_<i|| / ||W_<i|| (*per move*), so that a "
    "net that barely moves does not score as stable; and argue that BN makes the loss landscape smoother (Sec. 3.1: "
    "effective beta-smoothness along the gradient), here along filter-normalized directions (Li et al. 2018) for both "
    "nets, beside the raw value. *Noisy BN* is BN followed by injected, time-varying noise (Sec. 2.1), i.e. "
    "deliberate covariate shift; docs/ics/measurements.md defines every measure.")
CLAIMS_HOWTO = (
    "Each row is one statement, its quantity, direction and threshold fixed in code before the run "
    "(bnexp/report/ics_verdicts.py). Per seed, seed s of one configuration is paired with seed s of the other; "
    "\"mean\" is the mean over seeds, \"95% interval\" the percentile bootstrap of that mean over seeds, \"std\" the "
    "sample std (ddof=1). *supported*: the whole interval lies on the claimed side of the threshold; *not supported*: "
    "on the other side; *inconclusive*: it straddles the threshold, fewer than 3 seeds, a run that never left chance, "
    "a measure the records lack, or a ratio that is only a bound (a target not reached within the budget) pointing "
    "the other way; *premise not met*: the comparison the claim needs does not exist. No row counts for or against "
    "an account; the rows are not tallied.")
ICS_FIGURES = {"ics_distribution.png": "Distribution view: shift of the layers' inputs from step 0",
               "ics_gradient.png": "Gradient-based ICS (Santurkar Def. 2.1), layers 2..K",
               "ics_landscape.png": "Loss landscape along the gradient (Santurkar Sec. 3.1)"}
# The ICS tables: (column of the configurations' ics measures, header)
DIST_COLUMNS = (("shift.ks_first", "KS from start"), ("shift.ks_first.last", "KS from start, last layer"),
                ("shift.ks_floor", "KS floor"), ("shift.w1_rel_first", "W1 / spread from start"),
                ("shift.w1_rel_first.last", "W1 / spread, last layer"), ("shift.w1_rel_floor", "W1 / spread floor"),
                ("shift.w1_first", "W1 from start (raw)"), ("bn_input.ks_first", "BN input KS from start"),
                ("shift.ks_prev", "KS step to step"))
GRAD_COLUMNS = (("grad.l2_rel_per_move", "‖G - G'‖ / ‖G‖ per move"), ("grad.l2_rel", "‖G - G'‖ / ‖G‖"),
                ("grad.move_rel", "earlier layers' move"), ("grad.cos", "cos(G, G')"),
                ("land.fn_beta_smoothness", "beta-smoothness (filter-norm.)"),
                ("land.fn_loss_variation", "loss variation (filter-norm.)"),
                ("land.rel_beta_smoothness", "beta-smoothness (scale-inv.)"),
                ("land.beta_smoothness", "beta-smoothness (raw)"))


def _frame(header: list[str], rows: list[list]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=header, dtype=object)


def main_table(d: dict) -> pd.DataFrame:
    """The main per-configuration table of report.json's dict ``d`` (text cells): runs, accuracies, steps to
    each target."""
    targets = d["targets"]
    rows = [[s["label"], f"{s['completed']}/{s['runs']}" if s["completed"] != s["runs"] else str(s["runs"]),
             format_acc(s["max_test_accuracy"]), format_acc(s["final_test_accuracy"])]
            + [s["steps_to_target"][target_key(t)]["text"] for t in targets] + [str(s["diverged"]), str(s["failed"])]
            for s in d["configurations"]]
    return _frame(["configuration", "runs", "max test acc (%)", "final test acc (%)"]
                  + [f"steps to {format_target(t)}" for t in targets] + ["diverged", "failed"], rows)


def md(frame: pd.DataFrame) -> list[str]:
    """A table's markdown lines (:func:`bnexp.report.fmt.md_table`)."""
    return md_table(list(frame.columns), frame.values.tolist())


def _stability_md(d: dict) -> list[str]:
    """Markdown of the per-layer stability numbers (Fig. 1b,c)."""
    rows = [[s["label"], layer, "n/a" if v["median_shift"] is None else f"{v['median_shift']:.4f}",
             "n/a" if v["spread_ratio"] is None else f"{v['spread_ratio']:.3f}", str(v["n"])]
            for s in d["configurations"] for layer, v in s["stability"].items()]
    head = [f"## Stability of each layer's input ({refs(d)['stability']})", "",
            "|p50_end - p50_first| and (p85-p15)_end / (p85-p15)_first of each hidden layer's input to its "
            "nonlinearity (all units, probe set of shift.jsonl), first vs last monitor step, mean over finished "
            "seeds.", ""]
    if not rows:
        return head + ["n/a: no shift.jsonl records in finished runs.", ""]
    return head + md_table(["configuration", "layer", "|median shift|", "spread end/first", "seeds"], rows) + [""]


def ics_frames(d: dict) -> dict[str, pd.DataFrame]:
    """The ICS section's tables, one row per configuration with ICS data: "distribution" (:data:`DIST_COLUMNS`),
    "gradient" (:data:`GRAD_COLUMNS`, with the landscape) and "cost" (seconds per run); "not measured" cells."""
    confs = [s["ics"] for s in d["configurations"] if s.get("ics")]

    def frame(columns) -> pd.DataFrame:
        return _frame(["configuration", "seeds"] + [h for _, h in columns],
                      [[c["label"], str(len(c["seeds"]))] + [format_stat(c["measures"].get(k), "not measured")
                                                             for k, _ in columns] for c in confs])

    return {"distribution": frame(DIST_COLUMNS), "gradient": frame(GRAD_COLUMNS),
            "cost": frame([(f"time.{k}", k) for k in PROBE_KINDS]).drop(columns="seeds")}


def claims_section_md(d: dict) -> list[str]:
    """The "Claims" section: the configurations with too few seeds and the command that adds them
    (``seed_advice``), how to read a verdict, then the table (:func:`claims_md`); [] without either."""
    rows, advice = d.get("claims") or [], [f"**{d['seed_advice']}**", ""] if d.get("seed_advice") else []
    if not rows:
        return ["## Claims", "", *advice] if advice else []
    return ["## Claims", "", *advice, f"{CLAIMS_HOWTO} The main target is {format_target(rows[0]['target'])}.", "",
            *claims_md(rows)]


def _ics_md(d: dict) -> list[str]:
    """Markdown of the section "Does BN reduce internal covariate shift?" ([] without ICS data)."""
    sec = d.get("ics")
    if not sec:
        return []
    tables = ics_frames(d)
    out = [f"## {ICS_TITLE}", "", ICS_INTRO, "",
           f"Values are mean ± std over the finished seeds (diverged runs left out; \"(1 seed)\": a single run); "
           f"{STD_NOTE}. \"not measured\": no finished run of the configuration recorded it (the gradient ICS needs "
           "monitor.grad_ics=true and the landscape monitor.landscape=true, both off by default; or the runs were "
           "written before the measure existed). The verdicts are in the section \"Claims\".", "",
           "### Distribution view (BN paper)", ""]
    out += md(tables["distribution"]) + ["", "### Gradient-based ICS and loss landscape (Santurkar et al. 2018)", ""]
    out += md(tables["gradient"]) + ["", "### Cost of the probes (seconds per run, summary.json probe_time_s)", ""]
    out += md(tables["cost"]) + [""]
    if sec.get("noise_strength"):
        out += noise_strength_md(sec["noise_strength"])
    if sec["figures"]:
        out += ["### Figures", ""] + [line for f in sec["figures"] for line in (f"![{ICS_FIGURES[f]}]({f})", "")]
    return out


def render_markdown(d: dict) -> str:
    """The text of report.md from report.json's dict ``d`` (:attr:`Report.data`): the Sec. 4.2 frontier (if
    any), the study (if any), claims, main table, speedups at each network's best rate, figures, stability, the ICS
    section (if any), the runs that diverged, failed or are incomplete."""
    ref = refs(d)
    out = ["# Batch Normalization sweep report", "",
           f"Sweep: `{d['sweep_dir']}`: {d['runs']} run directories, {len(d['configurations'])} configurations "
           f"(varying keys: {', '.join(dict.fromkeys(KEY_ALIASES.get(k, k) for k in d['varying_keys'])) or 'none'}). "
           f"Values are mean ± std over seeds; {STD_NOTE}. "
           "Steps to a target are averaged over the seeds that reached it; \"not reached (k/n)\": k of n completed "
           "runs never reached it. Failed and incomplete runs are left out of every mean.", ""]
    if d.get("matched_accuracy") is not None:  # the Sec. 4.2 frontier section
        out += frontier_markdown(d)
    out += study_md(d.get("study"))  # issue 23: a scripts/study.sh sweep's claims, table and figure
    out += claims_section_md(d) + ["## Results per configuration", ""] + md(main_table(d)) + [""]
    out += best_rate_speedups_md(d.get("best_rate_speedups") or [])
    out += ["## Figures", "",
            f"![Test accuracy vs steps, whole range and zoomed top ({ref['accuracy']})](accuracy_vs_steps.png)", "",
            f"![Percentiles of a typical last-hidden-layer unit, no BN vs BN ({ref['percentiles']})](percentiles.png)",
            "", f"![Per-layer stability of the input distribution ({ref['stability']})](stability.png)", ""]
    out += _stability_md(d) + _ics_md(d)
    return "\n".join(out + runs_md(d))


def runs_md(d: dict) -> list[str]:
    """The section listing the runs that diverged (their final values are the last evaluation before it),
    failed or are incomplete (left out of every mean): one line per run ([] when every run finished)."""
    why = {"diverged": lambda r: f"at step {r['diverged_step']:,}" if isinstance(r.get("diverged_step"), int)
           else "step unknown", "failed": lambda r: r["error"] or "unknown error",
           "incomplete": lambda r: "running or interrupted"}
    bad = [f"- {s['label']}, seed {r['seed']}: {r['status']} ({why[r['status']](r)}) `{r['path']}`"
           for s in d["configurations"] for r in s["seeds"] if r["status"] in why]
    return ["## Diverged, failed and incomplete runs", "", *bad, ""] if bad else []


def render_csv(d: dict) -> str:
    """report.csv from report.json's dict ``d``: one row per configuration; numeric columns, empty cell for not
    reached / n/a."""
    layers = ordered_keys(s["stability"] for s in d["configurations"])
    header = (["label"] + d["varying_keys"] + ["bn", "experiment", "runs", "completed", "diverged", "failed",
                                               "incomplete"]
              + [f"{k}_{x}" for k in ("max_test_accuracy", "final_test_accuracy") for x in ("mean", "std")])
    for tk in map(target_key, d["targets"]):
        header += [f"steps_to_{tk}_{x}" for x in ("mean", "std", "reached", "n")]
    header += [f"{layer}_{k}" for layer in layers for k in ("median_shift", "spread_ratio")]
    rows = []
    for s in d["configurations"]:
        row = [s["label"]] + [format_value(s["config"][k]) if k in s["config"] else "" for k in d["varying_keys"]]
        row += [None if s["bn"] is None else int(s["bn"]), s["experiment"] or ""]
        row += [s[k] for k in ("runs", "completed", "diverged", "failed", "incomplete")]
        row += [s[k][x] for k in ("max_test_accuracy", "final_test_accuracy") for x in ("mean", "std")]
        for tk in map(target_key, d["targets"]):
            st = s["steps_to_target"][tk]
            row += [st["mean"], st["std"], st["reached"], st["n"]]
        row += [s["stability"].get(layer, {}).get(k) for layer in layers for k in ("median_shift", "spread_ratio")]
        rows.append(row)
    return _frame(header, rows).to_csv(index=False, lineterminator="\r\n")


def render_files(report: Report) -> dict[str, bytes]:
    """The contents of report.md, report.csv and report.json (strict JSON: NaN and inf as null), and the
    study figure of a scripts/study.sh sweep (:func:`bnexp.report.figures_studies.study_files`)."""
    return {"report.md": (render_markdown(report.data) + "\n").encode("utf-8"),
            "report.csv": render_csv(report.data).encode("utf-8"),
            "report.json": (dumps(report.data, indent=2) + "\n").encode("utf-8"), **study_files(report.data)}
