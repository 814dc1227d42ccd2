"""``build_report``: read a sweep once into DataFrames, group its runs and compute every statistic and verdict."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bnexp.analysis.tuning import SPEEDUP_TARGETS
from bnexp.report.best_rate import best_rate_speedups, held_out_seeds
from bnexp.analysis.grid_edges import read_record
from bnexp.report.seed_advice import seed_advice
from bnexp.report.multiplicity import adjust_page, mark_claims
from bnexp.report.groups import ConfigGroup, group_runs, varying_keys
from bnexp.report.ics_stats import DEF21, gradient_long, ics_run_frame, ics_summary, probe_records, progress_records
from bnexp.analysis.ics_design import design_fields, ignored_keys, read_design
from bnexp.report.ics_verdicts import ICS_FILES, RATE_MATCHED_VIEWS, ics_claims, ics_section, noise_strength_section
from bnexp.report.duplicate_seeds import drop_duplicate_seeds
from bnexp.analysis.runs import (ReportError, Run, Sweep, find_run_dirs, is_run_dir, load_sweep, run_table, sweep_of,
                               target_key)
from bnexp.analysis.rules import optional
from bnexp.report.fmt import std_note, words
from bnexp.report.stats import config_stability, layer_stability, reach_stat, value_stat
from bnexp.report.figures_studies import FIGURE as FRONTIER_FILE
from bnexp.analysis.frontier import frontier_section
from bnexp.report.frontier_plan_v2 import plan_v2
from bnexp.report.frontier_text import frontier_words
from bnexp.report.study_claims import CNN_TARGET, STUDY_FIGURES, TARGET, study_section
from bnexp.runfolders.rundir import symlink_problem

REPORT_FILES = ("report.md", "report.csv", "report.json", "accuracy_vs_steps.png", "percentiles.png",
                "stability.png")
# The figures a report writes only for some sweeps (the ICS views, the Sec. 4.2 frontier, a study's figure), and
# every file a report can write: a new report replaces the whole set (docs/reliability.md; cli.write_report).
FIGURE_FILES = (*ICS_FILES, FRONTIER_FILE, *STUDY_FIGURES.values())
ALL_REPORT_FILES = (*REPORT_FILES, *FIGURE_FILES)
# A single run directory's report goes here, never among the run's own files (the trainer's percentiles.png).
RUN_REPORT_SUBDIR = "report"
DEFAULT_TARGETS = (0.9, 0.95, 0.97, 0.98)


@dataclass
class Report:
    """Everything ``bnexp report`` computes: the ``sweep_dir`` (or single run directory) it is about, the
    configurations (``groups``), ``data`` (written to report.json), ``out_dir`` (``sweep_dir``, or
    ``sweep_dir/report/`` for a run directory), the ``sweep`` loaded into DataFrames and ``table``, one
    row per run (:func:`bnexp.analysis.runs.run_table` plus its configuration's key in ``group``)."""

    sweep_dir: Path
    groups: list[ConfigGroup]
    data: dict
    out_dir: Path
    sweep: Sweep
    table: pd.DataFrame


def default_targets(runs: list[Run]) -> list[float]:
    """Targets of the sweep: the union of the summaries' ``targets`` (else :data:`DEFAULT_TARGETS`)."""
    ts = {float(v) for r in runs if isinstance(r.summary.get("targets"), list) for v in r.summary["targets"]
          if isinstance(v, (int, float)) and 0 < v <= 1}
    return sorted(ts) if ts else list(DEFAULT_TARGETS)


def _run_record(run: Run, report_rows: pd.DataFrame, sweep: Sweep, targets: list[float]) -> dict:
    """Per-seed values of one run, as stored in report.json."""
    rec = {"path": str(run.path), "seed": run.seed, "status": run.status, "error": run.error}
    if run.completed:
        row = report_rows.loc[run.id]
        rec.update({
            "max_test_accuracy": optional(row["max_test_accuracy"]),
            "final_test_accuracy": optional(row["final_test_accuracy"]),
            "steps_to_target": {target_key(t): optional(row[f"steps_to_{target_key(t)}"], int) for t in targets},
            "diverged_step": run.summary.get("diverged_step"),
            "steps": run.summary.get("step"), "wall_time_s": run.summary.get("wall_time_s"),
            "stability": layer_stability(sweep.rows("shift", run)) if run.status == "finished" else {},
        })
    return rec


def summarize_group(group: ConfigGroup, report: Report, targets: list[float]) -> dict:
    """All statistics of one configuration over its completed runs, as stored in report.json: {"label",
    "config", "bn", "experiment", "max_steps", "runs", "completed", "diverged", "failed", "incomplete", "left_chance"
    (of the completed runs, those that left chance: :data:`bnexp.analysis.rules.CHANCE`),
    "max_test_accuracy", "final_test_accuracy", "steps_to_target": {target: reach_stat}, "stability",
    "ics" (:func:`ics_summary`), "seeds": [per-run records]}."""
    rows = report.table[report.table["group"] == group.key]
    done = rows[rows["status"].isin(["finished", "diverged"])]
    counts = rows["status"].value_counts()
    return {
        "label": group.label, "config": group.config, "bn": group.bn, "experiment": group.experiment,
        "max_steps": group.max_steps, "runs": len(rows), "completed": len(done),
        **{k: int(counts.get(k, 0)) for k in ("diverged", "failed", "incomplete")},
        "left_chance": int(done["left_chance"].sum()),  # completed runs that left chance (the chance rule)
        "max_test_accuracy": value_stat(done["max_test_accuracy"]),
        "final_test_accuracy": value_stat(done["final_test_accuracy"]),
        "steps_to_target": {target_key(t): reach_stat(done[f"steps_to_{target_key(t)}"], done.get("first_eval"))
                            for t in targets},
        "stability": config_stability(group, report.sweep),
        "ics": ics_summary(group, report.table),
        "seeds": [_run_record(r, rows, report.sweep, targets) for r in group.runs],
    }


def scored_runs(groups: list[ConfigGroup], table: pd.DataFrame,
                tuning_seeds: Collection[int]) -> tuple[list[ConfigGroup], pd.DataFrame]:
    """The configurations and per-run rows (:attr:`Report.table`) that the claims table may score: in a held-out
    sweep (docs/mnist/PLAN.md: rates chosen on ``tuning_seeds``) only the evaluation seeds' runs (a tuning seed
    picked the rate, so scoring it would bias the claim), and no configuration run on tuning seeds alone; without
    tuning seeds (the one-stage design), every run."""
    if not tuning_seeds:
        return groups, table
    scored = [g for g in groups if any(r.seed not in tuning_seeds for r in g.runs)]
    return scored, table[~table["seed"].isin(list(tuning_seeds))]


def evaluated_on(table: pd.DataFrame, tuning_seeds: Collection[int],
                 evaluation_seeds: Collection[int] | None = None) -> dict[str, list[str]]:
    """Which split the runs read (the summary's ``evaluated_on``: "test", or "validation" with
    ``data.validation``; a run without the field read the test set, as every run did before the key existed):
    {"tuning": splits of the runs on ``tuning_seeds``, "evaluation": of the runs on ``evaluation_seeds`` (None:
    every other run)} (sorted lists) in a held-out sweep, {"all": ...} otherwise (docs/mnist/PLAN.md and
    docs/studies/PLAN.md, amendments: tuning on the validation split, evaluation on test; a study scores its
    evaluation seeds alone, :class:`bnexp.analysis.study_runs.Selection`)."""
    col = table["summary.evaluated_on"] if "summary.evaluated_on" in table else pd.Series("test", index=table.index)
    col = col.where(col.notna(), "test").astype(str)
    if not tuning_seeds:
        return {"all": sorted(set(col))}
    tuned = table["seed"].isin(list(tuning_seeds))
    scored = table["seed"].isin(list(evaluation_seeds)) if evaluation_seeds else ~tuned
    return {"tuning": sorted(set(col[tuned])), "evaluation": sorted(set(col[scored]))}


def split_names(table: pd.DataFrame, splits: dict[str, list[str]]) -> dict[str, str]:
    """report.json's ``tuning_split`` and ``evaluation_split`` of a held-out sweep (docs/mnist/PLAN.md): "test", or
    "validation (10,000 held-out training images)" with the runs' ``data.validation``; {} otherwise."""
    if "tuning" not in splits:
        return {}
    held = pd.to_numeric(table.get("data.validation", pd.Series(dtype=float)), errors="coerce").dropna()
    n = sorted({int(v) for v in held if v > 0})
    return {"tuning_split": words("split_name", splits["tuning"], n),
            "evaluation_split": words("split_name", splits["evaluation"], n)}


def equal_rate_groups(groups: list[ConfigGroup], design: dict | None) -> tuple[list[ConfigGroup], list[ConfigGroup]]:
    """The ICS design's BN-at-no-BN's-rate runs apart (``design["equal_rate_lr"]``, docs/ics/PLAN.md): (the groups
    the own-rate claims pair: all but BN at that rate; BN and no BN at that rate, for the equal-rate rows; [] when
    the design has no such rate)."""
    from bnexp.report.groups import bn_variant

    r = (design or {}).get("equal_rate_lr")
    if not r:
        return groups, []
    at = [g for g in groups if g.lr is not None and abs(g.lr - r) <= 1e-9 * r and bn_variant(g) in ("BN", "no BN")]
    extra = [g for g in at if bn_variant(g) == "BN"]
    return [g for g in groups if g not in extra], at if extra else []


def build_report(sweep_dir: Path, targets: list[float] | None = None) -> Report:
    """Read the sweep folder (or a single run directory) once, group its runs and compute every statistic and
    claim at ``targets`` (None: the summaries'): the claims table (``data["claims"]``,
    :func:`bnexp.report.ics_verdicts.ics_claims`), the seeds it lacks or the command that resumes an unfinished
    sweep (``data["seed_advice"]``, :func:`bnexp.report.seed_advice.seed_advice`), the speedups at each network's
    best rate (``data["best_rate_speedups"]``), the ICS section (``data["ics"]``), a study's section
    (``data["study"]``) and, when presets ran at several budgets, the Sec. 4.2 frontier (``data["frontier"]``,
    ``["matched_accuracy"]``, ``["frontier_analysis"]``: :func:`bnexp.analysis.frontier.frontier_section` and
    :func:`bnexp.report.frontier_plan_v2.plan_v2`).

    Raises:
        ReportError: ``sweep_dir`` does not exist, is not a folder (or a symlink leading nowhere) or holds
            no run directory.
    """
    sweep_dir = Path(sweep_dir)
    if problem := symlink_problem(sweep_dir) or (sweep_dir.exists() and not sweep_dir.is_dir() and "not a folder"):
        raise ReportError(f"{sweep_dir} is {problem}; give the sweep folder that holds the run directories.")
    if not sweep_dir.exists():
        raise ReportError(f"the sweep folder {sweep_dir} does not exist.")
    sweep = load_sweep(find_run_dirs(sweep_dir))
    if not sweep.runs:
        raise ReportError(f"no run directories (folders with summary.json or .hydra/config.yaml) under "
                          f"{sweep_dir}.")
    targets = sorted(targets) if targets else default_targets(sweep.runs)
    groups = group_runs(sweep.runs)
    duplicates = drop_duplicate_seeds(groups, sweep.table)  # one count per (configuration, seed)
    if duplicates:
        kept = {id(r) for g in groups for r in g.runs}
        sweep = sweep_of([r for r in sweep.runs if id(r) in kept])
        groups = group_runs(sweep.runs)
    every = sorted({*targets, *SPEEDUP_TARGETS, TARGET, CNN_TARGET})  # the steps every section reads
    sweep.table = run_table(sweep.runs, sweep.metrics, every)
    table = sweep.table.assign(group=pd.Series({r.id: g.key for g in groups for r in g.runs}))
    ics = ics_run_frame(sweep)  # ICS measures of finished runs only (a diverged run's last record is no end)
    table = table.join(ics.where(table["status"] == "finished", axis=0))
    out_dir = sweep_dir / RUN_REPORT_SUBDIR if is_run_dir(sweep_dir) else sweep_dir
    report = Report(sweep_dir, groups, {}, out_dir, sweep, table)
    stats = {g.key: summarize_group(g, report, targets) for g in groups}
    frontier = frontier_section(sweep)  # None unless presets ran at several budgets
    if frontier is not None:
        frontier_words(frontier)  # the analysis layer's codes (claims, notes) in words
        frontier["frontier_analysis"].update(plan_v2(frontier, [r.summary for r in sweep.runs], sweep_dir))
    ics = ics_section(groups, table, targets)
    design = read_design(sweep_dir) if ics is not None else None
    ignore = ignored_keys(design)  # ("lr",): each network at its own rate (docs/ics/PLAN.md)
    if ics is not None:
        ics["noise_strength"] = noise_strength_section(groups, stats, table, targets, ignore)
    study = study_section(sweep_dir, sweep)  # None unless the sweep folder holds study.json
    held_out_study = bool(study and study.get("tuning_seeds"))  # its claims are its own (docs/studies/PLAN.md)
    # claims at 90/95/97%, each network at its best rate; not for a held-out study, whose groups mix the tuning
    # split's runs with the evaluation runs, and whose page's claims (the Holm family) are the study's
    speedups = [] if held_out_study else best_rate_speedups(groups, table)
    held = held_out_seeds(speedups)  # {} unless the rates were chosen on tuning seeds (docs/mnist/PLAN.md)
    splits = evaluated_on(table, (study or {}).get("tuning_seeds") or held.get("tuning_seeds", ()),
                          (study or {}).get("evaluation_seeds") if (study or {}).get("tuning_seeds") else None)
    progress = progress_records(sweep.metrics, gradient_long(sweep.ics))
    probes = {k: probe_records(sweep.metrics, gradient_long(sweep.ics), table, k) for k in DEF21}
    own, equal = equal_rate_groups(groups, design)
    claims = [] if held_out_study else ics_claims(
        *scored_runs(own, table, held.get("tuning_seeds", ())), targets, progress, ignore, probes)
    if equal:  # BN at no BN's rate: the Def. 2.1 rows matched at equal rates (docs/ics/PLAN.md, amendment)
        claims += [r for r in ics_claims(*scored_runs(equal, table, held.get("tuning_seeds", ())), targets, progress,
                                         (), probes) if r["view"] in RATE_MATCHED_VIEWS]
    page = [*claims, *speedups, *((study or {}).get("claims") or [])]  # the page's claims: one Holm family
    mark_claims(page, read_record(sweep_dir))
    for row in page:
        row["evaluated_on"] = splits.get("evaluation") or splits.get("all")
    report.data.update({
        "sweep_dir": str(sweep_dir), "std": std_note(), "targets": targets, "varying_keys": varying_keys(groups),
        "runs": len(sweep.runs), "duplicate_runs": duplicates,
        "sgd_steps": int(sum(r.summary.get("step") or 0 for r in sweep.runs)),
        "configurations": [stats[g.key] for g in groups],
        "seed_advice": seed_advice(groups, sweep_dir, ladder=frontier is not None,
                                   tuning_seeds=(study or {}).get("tuning_seeds") or held.get("tuning_seeds", ())),
        # a held-out study's claims are its study section's: its configurations run at different rates, and a
        # pairing of BN and no BN at equal rates would mix tuning and evaluation seeds (docs/studies/PLAN.md)
        "claims": claims, "ics": ics,
        "best_rate_speedups": speedups, **held,
        "evaluated_on": splits, **split_names(table, splits), "multiplicity": adjust_page(page), "grid_edges": read_record(sweep_dir),
        **(design_fields(design, table["seed"].dropna()) if design is not None else {}),  # the ICS study's seeds
        **(frontier or {}),  # "frontier", "matched_accuracy", "frontier_analysis"
        "study": study,
        "files": list(REPORT_FILES) + (ics["figures"] if ics else []) + ([FRONTIER_FILE] if frontier else [])
        + ([study["figure"]] if study else []),
    })
    return report
