"""The report's tables as DataFrames, and its files: report.md (templates/report.md.j2), report.csv (one row per
configuration) and report.json. report.md and report.csv are functions of report.json's dict alone, so a committed
report.json regenerates them (tests/test_docs_numbers.py checks the docs' reports)."""

from __future__ import annotations

import io

import pandas as pd

from bnexp.report.best_rate import SPEEDUP_THRESHOLD, SPEEDUP_TITLE
from bnexp.analysis.tuning import SPEEDUP_TARGETS, STEPS_RULE
from bnexp.report.build import Report
from bnexp.report.figstyle import refs
from bnexp.report.figures_studies import study_files
from bnexp.report.frontier_text import MATCHED_HELPERS, MD as FRONTIER_MD
from bnexp.report.fmt import (cell, format_acc, format_stat, format_target, interval_cell, label, labels, md_table,
                              render_template)
from bnexp.report.groups import KEY_ALIASES, format_value
from bnexp.report.ics_verdicts import ICS_TITLE, ONE_VIEW, noise_table
from bnexp.analysis.runs import ordered_keys, target_key
from bnexp.analysis.rules import CHANCE, DDOF
from bnexp.report.study_section import table_cell, table_md
from bnexp.runfolders.rundir import PROBE_KINDS, dumps

# The ICS tables: the columns of the configurations' ics measures they show (headers: templates/columns.md.j2's
# ics_column)
DIST_COLUMNS = ("shift.ks_first", "shift.ks_first.last", "shift.ks_floor", "shift.w1_rel_first",
                "shift.w1_rel_first.last", "shift.w1_rel_floor", "shift.w1_first", "bn_input.ks_first", "shift.ks_prev")
GRAD_COLUMNS = ("grad.l2_rel_per_move", "grad.l2_rel", "grad.move_rel", "grad.cos", "land.fn_beta_smoothness",
                "land.fn_loss_variation", "land.rel_beta_smoothness", "land.beta_smoothness")


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
    return _frame(labels("main_table", targets), rows)


def stability_table(d: dict) -> str:
    """The per-layer stability numbers (Fig. 1b,c) of every configuration as a markdown table ("" without)."""
    rows = [[s["label"], layer, "n/a" if v["median_shift"] is None else f"{v['median_shift']:.4f}",
             "n/a" if v["spread_ratio"] is None else f"{v['spread_ratio']:.3f}", str(v["n"])]
            for s in d["configurations"] for layer, v in s["stability"].items()]
    return "\n".join(md_table(labels("stability"), rows)) if rows else ""


def ics_frames(d: dict) -> dict[str, pd.DataFrame]:
    """The ICS section's tables, one row per configuration with ICS data: "distribution" (:data:`DIST_COLUMNS`),
    "gradient" (:data:`GRAD_COLUMNS`, with the landscape) and "cost" (seconds per run, headed by the probe kind);
    "not measured" cells (the headers: templates/columns.md.j2; the cells' words: templates/cells.md.j2)."""
    confs = [s["ics"] for s in d["configurations"] if s.get("ics")]
    missing = cell("not_measured")

    def frame(columns) -> pd.DataFrame:
        return _frame(labels("ics_first") + [h for _, h in columns],
                      [[c["label"], str(len(c["seeds"]))] + [format_stat(c["measures"].get(k), missing=missing)
                                                             for k, _ in columns] for c in confs])

    return {"distribution": frame([(k, label("ics_column", k)) for k in DIST_COLUMNS]),
            "gradient": frame([(k, label("ics_column", k)) for k in GRAD_COLUMNS]),
            "cost": frame([(f"time.{k}", k) for k in PROBE_KINDS]).drop(columns="seeds")}


def render_markdown(d: dict) -> str:
    """The text of report.md from report.json's dict ``d`` (:attr:`Report.data`): templates/report.md.j2."""
    return render_template("report.md.j2", d, {
        **FRONTIER_MD, "SPEEDUP_TITLE": SPEEDUP_TITLE, "SPEEDUP_TARGETS": SPEEDUP_TARGETS,
        "SPEEDUP_THRESHOLD": SPEEDUP_THRESHOLD, "STEPS_RULE": STEPS_RULE, "DDOF": DDOF,
        "typed_keys": lambda keys: ", ".join(dict.fromkeys(KEY_ALIASES.get(k, k) for k in keys)) or "none",
        "CHANCE": CHANCE, "ICS_TITLE": ICS_TITLE, "refs": refs,
        "format_target": format_target, "main_table": main_table, "ics_frames": ics_frames,
        "stability_table": stability_table, "noise_table": noise_table, "table_md": table_md})


def _compact_stat(st: dict | None, fmt: str, scale: float = 1.0) -> str:
    """A statistic over seeds as the terminal summary writes it, its "over N seeds" said once above the table:
    "97.12 ± 0.05", one value alone ("97.12"), "-" without a mean."""
    if st is None or st.get("mean") is None:
        return "-"
    mean = fmt.format(scale * st["mean"])
    return mean if st.get("n") == 1 or st.get("std") is None else f"{mean} ± {fmt.format(scale * st['std'])}"


def _compact_steps(st: dict) -> str:
    """Steps to a target for the terminal summary: "1,200 ± 163", with "(2/3)" when only some seeds reached it,
    "not reached", "n/a" without completed runs."""
    if st["n"] == 0:
        return "n/a"
    if st["reached"] == 0:
        return cell("steps", None, st["not_reached"], st["n"])
    text = _compact_stat({**st, "n": st["reached"]}, "{:,.0f}")
    return text + (f" ({st['reached']}/{st['n']})" if st["not_reached"] else "")


def terminal_configurations(d: dict) -> list[dict]:
    """The configurations of report.json's dict ``d`` the terminal summary tables: a held-out design's (its
    ``tuning_seeds`` given) those an evaluation seed ran, else all; report.md tables every one."""
    tuning = set(d.get("tuning_seeds") or [])
    return [s for s in d["configurations"] if not tuning or any(r["seed"] not in tuning for r in s["seeds"])]


def terminal_table(d: dict, width: int = 80) -> pd.DataFrame:
    """The terminal summary's table of report.json's dict ``d``: per configuration (a held-out design: only those
    its evaluation seeds ran; the tuning grids are in report.md) its runs, final test accuracy (%) and steps to the
    targets that fit ``width`` columns, the main target
    (:func:`bnexp.report.ics_verdicts.main_target`) always, then the others lowest first, each while no number
    cell breaks across lines (:func:`_fits`; a configuration's label may wrap). report.md holds every target and
    the maximum accuracy."""
    from bnexp.report.ics_verdicts import main_target

    targets, confs = d["targets"], terminal_configurations(d)
    cols = {"configuration": [s["label"] for s in confs],
            "runs": [f"{s['completed']}/{s['runs']}" if s["completed"] != s["runs"] else str(s["runs"]) for s in confs],
            label("terminal_final"): [_compact_stat(s["final_test_accuracy"], "{:.2f}", 100.0) for s in confs]}
    steps = {t: [_compact_steps(s["steps_to_target"][target_key(t)]) for s in confs] for t in targets}

    shown = {}
    for t in sorted(targets, key=lambda t: (t != main_target(targets), t)) if targets else []:
        trial = {**shown, t: steps[t]}
        if not shown or _fits({**cols, **{label("steps_to", x): v for x, v in trial.items()}}, width,
                              may_wrap=("configuration",)):
            shown = trial
    cols.update({label("steps_to", t): steps[t] for t in sorted(shown)})
    return pd.DataFrame(cols, dtype=object)


def _fits(columns: dict, width: int, may_wrap: tuple[str, ...] = ()) -> bool:
    """True when the table of ``columns`` ({header: cells}), printed as ``bnexp report`` prints its summary (rich's
    Markdown on a console ``width`` columns wide, :func:`bnexp.report.command.print_table`), breaks no cell across
    lines: every non-empty cell is found whole on one printed line (headers, and the cells of the columns
    ``may_wrap``, may wrap at spaces) and nothing is cut with "…"."""
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(Markdown("\n".join(md_table(list(columns), [list(r) for r in zip(*columns.values())]))))
    text = console.export_text()
    lines = text.splitlines()
    return "…" not in text and all(any(c in line for line in lines) for h, cells in columns.items()
                                   if h not in may_wrap for c in cells if c)


def terminal_study_table(sec: dict, width: int = 80) -> pd.DataFrame:
    """The terminal summary's table of a study sweep: report.json's ``study`` table (the configurations the
    evaluation seeds ran, docs/studies/PLAN.md), its cells as report.md writes them
    (:func:`bnexp.report.study_section.table_cell`) except three, written as :func:`terminal_table` writes them:
    the best-rate mark (one word), the final accuracy's header and the steps (or examples) to the target
    (:func:`_compact_steps`). The columns before "seeds" (what names a configuration) always; "seeds" only when
    the configurations differ in it (the summary names one number once); then the other columns in their order,
    each only while no cell breaks across lines at ``width`` columns (:func:`_fits`; report.md holds them all)."""
    rows, keys = sec["table"], [k for k, _ in sec["columns"]]
    first = keys.index("seeds") if "seeds" in keys else 1
    seeds = {r.get("seeds") for r in rows}

    def cells(key: str) -> list[str]:
        if key == "best":
            return [label("terminal_best") if r.get(key) else "" for r in rows]
        if key == "to_target_text":  # as the summary's other table writes steps: "(k/n)" only when some missed it
            return [_compact_steps({**r["to_target"], "n": r["seeds"], "reached": r["reached"],
                                    "not_reached": r["seeds"] - r["reached"]}) for r in rows]
        return [table_cell(key, r.get(key)) for r in rows]

    heads = {**dict(sec["columns"]), "final": label("terminal_final")}  # the other summary table's header
    cols = {heads[k]: cells(k) for k in keys[:first]}
    for k in keys[first:]:
        if k == "seeds" and len(seeds) == 1:
            continue
        trial = {**cols, heads[k]: cells(k)}
        if _fits(trial, width):
            cols = trial
    return pd.DataFrame(cols, dtype=object)


def terminal_claims(rows: list[dict]) -> tuple[list[dict], dict[str, list[str]], list[str]]:
    """The claims as the terminal summary lists them: (the rows with a measure, grouped by setting in the order
    the rows first name it, as [{"setting": its label, or None when the sweep has one setting, "rows": [{"claim",
    "rule", "value", "interval", "verdict", "note"}]}] with ``verdict`` the one after the plan's marks
    (``marked_verdict``: a rate at its grid's edge, a budget-bound ratio) and ``note`` the number of its note among
    the notes (the reason of a verdict that is not "supported", the second reading of the pre-registered matched
    row, docs/ics/PLAN.md's amendment, the marks, and the Holm-adjusted verdict where it differs from the verdict
    before the marks; templates/cells.md.j2's ``claim_note``), None for a row with nothing to note; {config key:
    {claim: its views}} for the rows whose measure a run lacks because it is off by default (``"needs"`` of
    :func:`bnexp.report.ics_verdicts.claim_row`), each claim and view named once over the settings; the distinct
    notes, numbered from 1). A setting heads its own table, so that a long setting label is never cut in an
    80-column claim cell; a group is "paired": False when no seed ran both of its configurations (every row's
    ``n`` is 0: a held-out seed that ran one side only), and the summary names such a setting in one line instead
    of a table of empty rows (report.md keeps the rows)."""
    needs, notes = {}, []
    several = len({r.get("setting") or "" for r in rows}) > 1
    setting = (lambda r: (r.get("setting") or None) if several else None)
    measured = [r for r in rows if not r.get("needs")]
    paired = {setting(r) for r in measured if r.get("n")}
    groups = {s: [] for s in dict.fromkeys(map(setting, measured))}  # the settings in the rows' order
    for r in rows:
        view = r.get("view")
        if r.get("needs"):
            views = needs.setdefault(r["needs"], {}).setdefault(r["name"], [])
            if view and view != ONE_VIEW and view not in views:
                views.append(view)
        if r.get("needs") or setting(r) not in paired:  # no seed ran both sides: only the setting is named
            continue
        bound = (r.get("interval") or {}).get("estimate_bound")
        value = "-" if r.get("mean") is None else (f"{bound} " if bound in (">=", "<=") else "") + f"{r['mean']:.3g}"
        note, shown = None, r.get("marked_verdict") or r["verdict"]  # the verdict after the plan's marks
        holm = r.get("holm_verdict")
        why = cell("claim_note", r.get("reason") if r["verdict"] != "supported" else "",
                   r.get("second_reading") or "",  # a supported row's second reading too
                   r.get("marks") or [], holm if holm not in (None, r["verdict"]) else None, r.get("holm_p"))
        if why:
            if why not in notes:
                notes.append(why)
            note = notes.index(why) + 1
        groups[setting(r)].append({"claim": r["name"] + (f" ({view})" if view and view != ONE_VIEW else ""),
                                   "rule": f"{r['direction']} {r['threshold']:g}", "value": value,
                                   "interval": interval_cell(r), "verdict": shown, "note": note})
    return [{"setting": k, "paired": k in paired, "rows": v} for k, v in groups.items()], needs, notes


def render_summary(d: dict, sweep_dir, report_md=None, width: int = 80) -> str:
    """The markdown of ``bnexp report``'s terminal summary (templates/summary.md.j2) of report.json's dict ``d``
    for the sweep folder ``sweep_dir``, to fit ``width`` columns: :func:`terminal_table` (a study sweep:
    :func:`terminal_study_table` and the study's findings), the claims of :func:`terminal_claims` (claim, value,
    interval, verdict; a study sweep: the study's claims) and, for a held-out design (the MNIST reproduction),
    BN's speedup at each network's rate chosen on the tuning seeds (``best_rate_speedups``), the measures no run
    recorded named once with the key that records them, and the path ``report_md`` of report.md for the rest."""
    sec = d.get("study")  # a study sweep: its own table and claims (docs/studies/PLAN.md)
    shown = terminal_configurations(d)
    return render_template("summary.md.j2", d, {
        "sweep_dir": sweep_dir, "report_md": report_md, "table": None if sec else terminal_table(d, width),
        # seeds per configuration of the table
        "seeds": sorted({r["seeds"] for r in sec["table"]} if sec else {s["completed"] for s in shown}),
        "tuning_left_out": 0 if sec else len(d["configurations"]) - len(shown),  # the tuning grids' configurations
        "study_table": terminal_study_table(sec, width) if sec else None,
        "claims": terminal_claims((sec or d).get("claims") or []), "DDOF": DDOF,
        # a held-out design's headline (the MNIST reproduction); a one-stage sweep's are in report.md
        "speedups": terminal_claims(d.get("best_rate_speedups") or [] if d.get("tuning_seeds") else []),
        "SPEEDUP_TITLE": SPEEDUP_TITLE,
        **MATCHED_HELPERS})


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
