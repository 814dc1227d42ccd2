"""``bnexp report SWEEP_DIR [--targets ACC ...]``: build the report, write its files, print its tables."""

from __future__ import annotations

import argparse
from pathlib import Path

from bnexp.report.build import REPORT_FILES, RUN_REPORT_SUBDIR, Report, build_report
from bnexp.report.figures import plot_accuracy, plot_percentiles, plot_stability
from bnexp.report.figures_ics import ICS_PLOTS
from bnexp.report.fmt import format_acc, format_g
from bnexp.report.ics_verdicts import ICS_TITLE
from bnexp.report.load import ReportError
from bnexp.report.render import SEC42_TITLE, ics_rows, json_safe, main_table, render_markdown, view_cell, write_csv
from bnexp.rundir import atomic_write_bytes, write_json


def print_table(report: Report, console=None) -> None:
    """Print the main table (rich.table.Table), the Sec. 4.2 table and the verdicts to the terminal."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=max(console.width, 200))
    header, rows = main_table(report)
    table = Table(title=f"bnexp report: {report.sweep_dir}", show_lines=False)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    sec42 = report.data["sec42"]
    if sec42 and sec42["target"] is not None:
        t = Table(title=f"{SEC42_TITLE}: target {100 * sec42['target']:.2f}%")
        for h in ("preset", "steps", "vs baseline", "max test acc (%)", "diverged"):
            t.add_column(h)
        for r in sec42["rows"]:
            t.add_row(r["label"], r["steps"]["text"], r["multiple_text"], format_acc(r["max_test_accuracy"]),
                      str(r["diverged"]))
        console.print(t)
    for v in report.data["verdicts"]:
        console.print(f"- {v}", highlight=False, markup=False)
    for v in (report.data.get("best_rate") or {}).get("verdicts", []):
        console.print(f"- {v}", highlight=False, markup=False)
    if report.data.get("matched_accuracy") is not None:  # issue 19: the Sec. 4.2 frontier headline
        fa = report.data["frontier_analysis"]
        console.print(f"Sec. 4.2 frontier: a* = {100 * fa['target_accuracy']:.2f}% (baseline converged: "
                      f"{fa['baseline_converged']}); pass rule: {fa['pass_rule']['verdict']}", highlight=False)
        for p, m in report.data["matched_accuracy"].items():
            s = "not reached" if m["speedup"] is None else f"{'>= ' if m['speedup_is_lower_bound'] else ''}{m['speedup']:.2f}x"
            console.print(f"- {p}: S(a*) = {s}, pass: {m['pass']}", highlight=False, markup=False)
    sec = report.data.get("ics")
    if sec:
        t = Table(title=ICS_TITLE)
        for h in ("configuration", "per-unit W1 from start (end)", "||G - G'|| / ||G|| (layers 2..K)", "cos(G, G')",
                  "beta-smoothness (scale-inv.)", "probe s (grad_ics / landscape)"):
            t.add_column(h, justify="left" if h == "configuration" else "right")
        for label, ics in ics_rows(report):
            pt = (ics or {}).get("probe_time_s")
            t.add_row(label, view_cell(ics, "distribution", "final_w1_first"), view_cell(ics, "gradient", "l2_rel"),
                      view_cell(ics, "gradient", "cos"), view_cell(ics, "landscape", "rel_beta_smoothness"),
                      " / ".join(format_g(pt[k]["mean"]) for k in ("grad_ics", "landscape")) if pt else "not measured")
        console.print(t)
        for v in sec["verdicts"]:
            console.print(f"- {v}", highlight=False, markup=False)
        for p in sec["supports"]:
            console.print(f"What this sweep supports: {p}", highlight=False, markup=False)


def write_report(report: Report) -> list[Path]:
    """Write :data:`REPORT_FILES`, and the :data:`ICS_FILES` the ICS section draws, into
    ``report.out_dir``: the sweep folder, or ``RUN_DIR/report/`` (created) for a single run, so
    that a run's own files are never overwritten. Every file is written atomically (temporary
    file in the same folder, then ``os.replace``).

    Returns:
        the written paths.

    Raises:
        OSError: when the folder is not writable; files already there are then left as they were.
    """
    d = report.out_dir
    d.mkdir(exist_ok=True)
    atomic_write_bytes(d / "report.md", (render_markdown(report) + "\n").encode("utf-8"))
    write_csv(report, d / "report.csv")
    write_json(d / "report.json", json_safe(report.data))
    plot_accuracy(report, d / "accuracy_vs_steps.png")
    plot_percentiles(report, d / "percentiles.png")
    plot_stability(report, d / "stability.png")
    ics_figures = (report.data.get("ics") or {}).get("figures", [])
    for name in ics_figures:
        ICS_PLOTS[name](report, d / name)
    extra = []
    if report.data.get("matched_accuracy") is not None:  # issue 19 hook
        from bnexp.report.figures_frontier import FIGURE, plot_frontier

        plot_frontier(report.data, d / FIGURE)
        extra.append(FIGURE)
    return [d / f for f in REPORT_FILES] + [d / f for f in ics_figures + extra]


def _parse_targets(values: list[str] | None) -> list[float] | None:
    """--targets values ("0.9 0.95" or "0.9,0.95") as floats in (0, 1].

    Raises:
        ReportError: for a value that is not a number in (0, 1].
    """
    if not values:
        return None
    out = []
    for item in ",".join(values).split(","):
        item = item.strip()
        if not item:
            continue
        try:
            t = float(item)
        except ValueError:
            raise ReportError(f"--targets: {item!r} is not a number; give test accuracies in (0, 1], "
                              "e.g. --targets 0.95 0.98.") from None
        if not 0.0 < t <= 1.0:
            raise ReportError(f"--targets: {item} is outside (0, 1]; targets are test accuracies, "
                              "e.g. 0.95 for 95%.")
        out.append(t)
    return sorted(set(out)) or None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bnexp report",
        description="Tables, verdicts and figures (paper Fig. 1, Sec. 4.1 and Sec. 4.2) from a sweep's run "
                    f"directories. Writes {', '.join(REPORT_FILES)} into SWEEP_DIR; given a single run "
                    f"directory, into RUN_DIR/{RUN_REPORT_SUBDIR}/ (never over the run's own files).")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", nargs="?",
                   help="folder holding the run directories (searched recursively), or one run directory")
    p.add_argument("--targets", nargs="+", metavar="ACC",
                   help="test accuracies in (0, 1] to report steps for (default: the runs' trainer.targets)")
    return p


def _error(msg: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]bnexp report: error:[/] {msg}", highlight=False, soft_wrap=True)


def report_main(args: list[str]) -> int:
    """``bnexp report SWEEP_DIR [--targets ACC ...]``.

    Returns:
        0 when the report was written; 2 for a user error (missing folder, no runs, bad
        --targets, unwritable folder), printed as one line without a traceback.
    """
    parser = _parser()
    try:
        ns = parser.parse_args(list(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if ns.sweep_dir is None and ns.targets and len(ns.targets) > 1:
        ns.sweep_dir = ns.targets.pop()  # "--targets 0.9 0.95 SWEEP_DIR": the greedy list took SWEEP_DIR
    if ns.sweep_dir is None:
        _error("give the sweep folder: bnexp report SWEEP_DIR [--targets ACC ...]")
        return 2
    try:
        report = build_report(Path(ns.sweep_dir), _parse_targets(ns.targets))
    except ReportError as exc:
        _error(str(exc))
        return 2
    try:
        paths = write_report(report)
    except OSError as exc:
        _error(f"cannot write the report into {report.out_dir} ({exc.strerror or exc}).")
        return 2
    print_table(report)
    from rich.console import Console

    Console().print("wrote " + ", ".join(str(p) for p in paths), highlight=False, soft_wrap=True)
    return 0
