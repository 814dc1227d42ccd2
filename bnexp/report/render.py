"""The report's tables as DataFrames, and its files: report.md (templates/report.md.j2), report.csv (one row per
configuration) and report.json. report.md and report.csv are functions of report.json's dict alone, so a committed
report.json regenerates them (tests/test_docs_numbers.py checks the docs' reports)."""

from __future__ import annotations

import pandas as pd

from bnexp.report.best_rate import SPEEDUP_THRESHOLD, SPEEDUP_TITLE
from bnexp.analysis.tuning import SPEEDUP_TARGETS, STEPS_RULE
from bnexp.report.build import Report
from bnexp.report.figstyle import refs
from bnexp.report.figures_studies import study_files
from bnexp.report.frontier_text import MD as FRONTIER_MD, headline_bound, speedup_text
from bnexp.report.fmt import format_acc, format_stat, format_target, md_table, render_template
from bnexp.report.groups import KEY_ALIASES, format_value
from bnexp.report.ics_verdicts import ICS_TITLE, noise_table
from bnexp.analysis.runs import ordered_keys, target_key
from bnexp.analysis.rules import CHANCE, DDOF, STD_NOTE
from bnexp.report.study_section import table_md
from bnexp.runfolders.rundir import PROBE_KINDS, dumps

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


def stability_table(d: dict) -> str:
    """The per-layer stability numbers (Fig. 1b,c) of every configuration as a markdown table ("" without)."""
    rows = [[s["label"], layer, "n/a" if v["median_shift"] is None else f"{v['median_shift']:.4f}",
             "n/a" if v["spread_ratio"] is None else f"{v['spread_ratio']:.3f}", str(v["n"])]
            for s in d["configurations"] for layer, v in s["stability"].items()]
    head = ["configuration", "layer", "|median shift|", "spread end/first", "seeds"]
    return "\n".join(md_table(head, rows)) if rows else ""


def ics_frames(d: dict) -> dict[str, pd.DataFrame]:
    """The ICS section's tables, one row per configuration with ICS data: "distribution" (:data:`DIST_COLUMNS`),
    "gradient" (:data:`GRAD_COLUMNS`, with the landscape) and "cost" (seconds per run); "not measured" cells."""
    confs = [s["ics"] for s in d["configurations"] if s.get("ics")]

    def frame(columns) -> pd.DataFrame:
        return _frame(["configuration", "seeds"] + [h for _, h in columns],
                      [[c["label"], str(len(c["seeds"]))] + [format_stat(c["measures"].get(k), missing="not measured")
                                                             for k, _ in columns] for c in confs])

    return {"distribution": frame(DIST_COLUMNS), "gradient": frame(GRAD_COLUMNS),
            "cost": frame([(f"time.{k}", k) for k in PROBE_KINDS]).drop(columns="seeds")}


def render_markdown(d: dict) -> str:
    """The text of report.md from report.json's dict ``d`` (:attr:`Report.data`): templates/report.md.j2."""
    return render_template("report.md.j2", d, {
        **FRONTIER_MD, "SPEEDUP_TITLE": SPEEDUP_TITLE, "SPEEDUP_TARGETS": SPEEDUP_TARGETS,
        "SPEEDUP_THRESHOLD": SPEEDUP_THRESHOLD, "STEPS_RULE": STEPS_RULE, "STD_NOTE": STD_NOTE, "DDOF": DDOF,
        "typed_keys": lambda keys: ", ".join(dict.fromkeys(KEY_ALIASES.get(k, k) for k in keys)) or "none",
        "CHANCE": CHANCE, "ICS_TITLE": ICS_TITLE, "refs": refs,
        "format_target": format_target, "main_table": main_table, "ics_frames": ics_frames,
        "stability_table": stability_table, "noise_table": noise_table, "table_md": table_md})


def render_summary(d: dict, sweep_dir) -> str:
    """The markdown of ``bnexp report``'s terminal summary (templates/summary.md.j2) of report.json's dict ``d``
    for the sweep folder ``sweep_dir``; its ICS table is the shift and gradient columns of :func:`ics_frames`."""
    def ics_summary(d: dict) -> pd.DataFrame:
        t = ics_frames(d)
        return pd.concat([t["distribution"].iloc[:, [0, 2, 5]], t["gradient"].iloc[:, [2, 6]]], axis=1)

    return render_template("summary.md.j2", d, {
        "sweep_dir": sweep_dir, "main_table": main_table, "ICS_TITLE": ICS_TITLE,
        "ics_summary": ics_summary, "speedup_text": speedup_text, "headline_bound": headline_bound})


def render_csv(d: dict) -> str:
    """report.csv from report.json's dict ``d``: one row per configuration; numeric columns, empty cell for not
    reached / n/a."""
    layers = ordered_keys(s["stability"] for s in d["configurations"])
    counts = ("runs", "completed", "diverged", "failed", "incomplete")
    accs = [(k, x) for k in ("max_test_accuracy", "final_test_accuracy") for x in ("mean", "std")]
    steps = [(tk, x) for tk in map(target_key, d["targets"]) for x in ("mean", "std", "reached", "n")]
    shifts = [(layer, k) for layer in layers for k in ("median_shift", "spread_ratio")]
    header = (["label", *d["varying_keys"], "bn", "experiment", *counts] + [f"{k}_{x}" for k, x in accs]
              + [f"steps_to_{tk}_{x}" for tk, x in steps] + [f"{layer}_{k}" for layer, k in shifts])
    rows = [[s["label"]] + [format_value(s["config"][k]) if k in s["config"] else "" for k in d["varying_keys"]]
            + [None if s["bn"] is None else int(s["bn"]), s["experiment"] or ""] + [s[k] for k in counts]
            + [s[k][x] for k, x in accs] + [s["steps_to_target"][tk][x] for tk, x in steps]
            + [s["stability"].get(layer, {}).get(k) for layer, k in shifts] for s in d["configurations"]]
    return _frame(header, rows).to_csv(index=False, lineterminator="\r\n")


def render_files(report: Report) -> dict[str, bytes]:
    """The contents of report.md, report.csv and report.json (strict JSON: NaN and inf as null), and the
    study figure of a scripts/study.sh sweep (:func:`bnexp.report.figures_studies.study_files`)."""
    return {"report.md": (render_markdown(report.data) + "\n").encode("utf-8"),
            "report.csv": render_csv(report.data).encode("utf-8"),
            "report.json": (dumps(report.data, indent=2) + "\n").encode("utf-8"), **study_files(report.data)}
