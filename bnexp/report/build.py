"""``build_report``: read a sweep, group its runs and compute every statistic and verdict of the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bnexp.report.best_rate import best_rate_section
from bnexp.report.groups import ConfigGroup, group_runs, match_no_bn, varying_keys
from bnexp.report.ics_stats import ics_summary
from bnexp.report.ics_verdicts import ics_section
from bnexp.report.load import ReportError, Run, find_run_dirs, is_run_dir, load_run
from bnexp.report.noise_sweep import noise_strength_section
from bnexp.report.frontier import frontier_section  # issue 19: Sec. 4.2 budget-accuracy frontier
from bnexp.report.sec42 import tuned_first
from bnexp.report.stats import (compute_speedup, config_stability, final_accuracy, layer_stability, max_accuracy,
                                reach_stat, sec42_table, steps_to_target, target_key, value_stat)
from bnexp.report.verdicts import verdict_lines

REPORT_FILES = ("report.md", "report.csv", "report.json", "accuracy_vs_steps.png", "percentiles.png",
                "stability.png")
# The subfolder of a single run directory that receives that run's report: the report never
# writes among a run's own files (the trainer's percentiles.png has the name of a report figure).
RUN_REPORT_SUBDIR = "report"
DEFAULT_TARGETS = (0.9, 0.95, 0.97, 0.98)
STD_NOTE = "std is the population standard deviation over seeds (numpy.std, ddof=0)"


@dataclass
class Report:
    """Everything ``bnexp report`` computes.

    Attributes:
        sweep_dir: the sweep folder (or the single run directory) the report is about.
        groups: the configurations (for the figures).
        data: the structured report written to report.json.
        out_dir: where the report's files go: ``sweep_dir``, or ``sweep_dir/report/`` when
            ``sweep_dir`` is itself a run directory (:data:`RUN_REPORT_SUBDIR`).
    """

    sweep_dir: Path
    groups: list[ConfigGroup]
    data: dict
    out_dir: Path


def default_targets(runs: list[Run]) -> list[float]:
    """Targets of the sweep: the union of the summaries' ``targets`` (else :data:`DEFAULT_TARGETS`)."""
    ts: set[float] = set()
    for r in runs:
        vals = r.summary.get("targets")
        if isinstance(vals, list):
            ts.update(float(v) for v in vals if isinstance(v, (int, float)) and 0 < v <= 1)
    return sorted(ts) if ts else list(DEFAULT_TARGETS)


def _run_record(run: Run, targets: list[float]) -> dict:
    """Per-seed values of one run, as stored in report.json."""
    rec = {"path": str(run.path), "seed": run.seed, "status": run.status, "error": run.error}
    if run.completed:
        rec.update({
            "max_test_accuracy": max_accuracy(run), "final_test_accuracy": final_accuracy(run),
            "steps_to_target": {target_key(t): steps_to_target(run, t) for t in targets},
            "diverged_step": run.summary.get("diverged_step"),
            "steps": run.summary.get("step"), "wall_time_s": run.summary.get("wall_time_s"),
            "stability": layer_stability(run.shift) if run.status == "finished" else {},
        })
    return rec


def summarize_group(group: ConfigGroup, targets: list[float]) -> dict:
    """All statistics of one configuration (over its completed runs), as stored in report.json.

    Returns:
        {"label", "config", "bn", "experiment", "max_steps", "runs", "completed",
         "diverged", "failed", "incomplete", "max_test_accuracy", "final_test_accuracy",
         "steps_to_target": {target: reach_stat}, "stability", "ics" (:func:`ics_summary`, None
         without ICS data), "seeds": [per-run records]}.
    """
    done = group.completed
    seeds = [_run_record(r, targets) for r in group.runs]
    return {
        "label": group.label, "config": group.config, "bn": group.bn, "experiment": group.experiment,
        "max_steps": group.max_steps, "runs": len(group.runs), "completed": len(done),
        "diverged": sum(r.status == "diverged" for r in group.runs),
        "failed": sum(r.status == "failed" for r in group.runs),
        "incomplete": sum(r.status == "incomplete" for r in group.runs),
        "max_test_accuracy": value_stat([max_accuracy(r) for r in done]),
        "final_test_accuracy": value_stat([final_accuracy(r) for r in done]),
        "steps_to_target": {target_key(t): reach_stat([steps_to_target(r, t) for r in done]) for t in targets},
        "stability": config_stability(group),
        "ics": ics_summary(group),
        "seeds": seeds,
    }


def build_report(sweep_dir: Path, targets: list[float] | None = None) -> Report:
    """Read the sweep, group runs, compute every statistic, speedup, verdict, the Sec. 4.2 table,
    the "each at its best learning rate" section (``data["best_rate"]``, None without a rate grid),
    the Sec. 4.2 frontier (``data["frontier"]``, ``["matched_accuracy"]``, ``["frontier_analysis"]``:
    :func:`bnexp.report.frontier.frontier_section`, absent unless presets ran at several budgets)
    and the ICS section (``data["ics"]``, None without ICS data; its ``noise_strength`` table).

    Args:
        sweep_dir: the sweep folder, or a single run directory (its report then goes to
            ``sweep_dir/report/``, see :class:`Report`).
        targets: test accuracies in (0, 1]; None: the summaries' targets.

    Raises:
        ReportError: when ``sweep_dir`` does not exist, is not a folder or holds no run directory.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.exists():
        raise ReportError(f"the sweep folder {sweep_dir} does not exist.")
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a folder; give the sweep folder that holds the run directories.")
    runs = [load_run(d) for d in find_run_dirs(sweep_dir)]
    if not runs:
        raise ReportError(f"no run directories (folders with summary.json or .hydra/config.yaml) under "
                          f"{sweep_dir}.")
    targets = sorted(targets) if targets else default_targets(runs)
    groups = group_runs(runs)
    stats = {g.key: summarize_group(g, targets) for g in groups}
    for g in groups:
        nb = match_no_bn(g, groups)
        stats[g.key]["no_bn_match"] = nb.label if nb else None
        stats[g.key]["speedup"] = {
            target_key(t): (compute_speedup(stats[g.key]["steps_to_target"][target_key(t)],
                                            stats[nb.key]["steps_to_target"][target_key(t)], nb.max_steps)
                            if nb else {"value": None, "lower_bound": None, "text": "n/a"})
            for t in targets}
    frontier = frontier_section(sweep_dir)  # issue 19 hook: None unless presets ran at several budgets
    # with a baseline rate grid: the tuned baseline's steps-to-target table; a frontier sweep has none (its
    # presets' curves at different budgets are not comparable step by step: issue 19)
    sec42 = None if frontier else sec42_table(tuned_first(groups))
    ics = ics_section(groups, stats, targets)
    if ics is not None:
        ics["noise_strength"] = noise_strength_section(groups, stats)
    data = {
        "sweep_dir": str(sweep_dir), "std": STD_NOTE, "targets": targets, "varying_keys": varying_keys(groups),
        "runs": len(runs), "sec42": sec42, "configurations": [stats[g.key] for g in groups],
        "verdicts": verdict_lines(groups, stats, targets, sec42), "best_rate": best_rate_section(groups),
        "ics": ics, **(frontier or {}),  # issue 19: "frontier", "matched_accuracy", "frontier_analysis"
        "files": list(REPORT_FILES) + (ics["figures"] if ics else []) + (["frontier.png"] if frontier else []),
    }
    out_dir = sweep_dir / RUN_REPORT_SUBDIR if is_run_dir(sweep_dir) else sweep_dir
    return Report(sweep_dir, groups, data, out_dir)
