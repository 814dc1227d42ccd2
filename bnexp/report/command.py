"""``bnexp report SWEEP_DIR [--targets ACC ...]``: build the report, write its files, print its tables.
``bnexp report --update-docs [FILE ...]``: rewrite the docs' number blocks (:mod:`.docs_numbers`).

Every user error is one ``bnexp report: error: ...`` line and exit code 2; Ctrl-C is exit 130
without a traceback. The report's files are written together (:func:`bnexp.runfolders.rundir.replace_files`):
a full disk or Ctrl-C leaves the previous set as it was, never a mix of old and new files.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from bnexp.report.build import ALL_REPORT_FILES, FIGURE_FILES, REPORT_FILES, RUN_REPORT_SUBDIR, Report, build_report
from bnexp.report.figstyle import figure_png
from bnexp.report.figures import FIGURES
from bnexp.report.figures_ics import ICS_PLOTS
from bnexp.analysis.runs import ReportError, is_run_dir
from bnexp.report.render import render_files, render_summary
from bnexp.runfolders.rundir import replace_files


def print_table(report: Report, console=None) -> None:
    """Print the terminal summary (:func:`bnexp.report.render.render_summary`) with rich's Markdown, fitted to the
    console's width (rich's: the terminal's, else ``COLUMNS``, else 80), naming report.md for the rest."""
    from rich.console import Console
    from rich.markdown import Markdown

    console = console or Console()
    console.print(Markdown(render_summary(report.data, report.sweep_dir, report.out_dir / "report.md",
                                          console.width)))


def report_files(report: Report) -> dict[Path, bytes]:
    """Every file of the report by its path in ``report.out_dir``: report.md/.csv/.json, the figures, the
    ICS figures the ICS section draws and the Sec. 4.2 frontier figure."""
    ics = (report.data.get("ics") or {}).get("figures", [])
    files = {**render_files(report), **{name: figure_png(make(report), dpi) for name, (make, dpi) in FIGURES.items()},
             **{name: figure_png(ICS_PLOTS[name](report), 100) for name in ics}}
    if report.data.get("matched_accuracy") is not None:
        from bnexp.report.figures_studies import FIGURE, frontier_figure

        files[FIGURE] = figure_png(frontier_figure(report.data), 110)
    return {report.out_dir / name: data for name, data in files.items()}


def write_report(report: Report) -> list[Path]:
    """Write :func:`report_files` into ``report.out_dir`` (created; ``RUN_DIR/report/`` for a single run,
    never among the run's own files) all at once (:func:`bnexp.runfolders.rundir.replace_files`), removing in the
    same step the files of :data:`bnexp.report.build.ALL_REPORT_FILES` this report does not write (an earlier
    report's figure); then, for a sweep folder, rewrite its aggregate TensorBoard runs
    (:func:`bnexp.report.aggregate.write_aggregates`: ``SWEEP/aggregate/<configuration>/``, the mean over seeds
    and its band). Returns the paths written. Raises OSError (unwritable folder, full disk) with every file
    already there unchanged."""
    from bnexp.report.aggregate import write_aggregates

    report.out_dir.mkdir(exist_ok=True)
    files = report_files(report)
    replace_files(files, [p for p in (report.out_dir / n for n in ALL_REPORT_FILES) if p not in files])
    aggregates = [] if is_run_dir(report.sweep_dir) else write_aggregates(report.sweep_dir, report.groups)
    return list(files) + aggregates


def _parse_targets(values: list[str] | None) -> list[float] | None:
    """--targets values ("0.9 0.95" or "0.9,0.95") as sorted floats in (0, 1]; ReportError for another value."""
    out = set()
    for item in filter(None, (v.strip() for v in ",".join(values or []).split(","))):
        try:
            out.add(float(item))
        except ValueError:
            raise ReportError(f"--targets: {item!r} is not a number; give test accuracies in (0, 1], "
                              "e.g. --targets 0.95 0.98.") from None
        if not 0.0 < float(item) <= 1.0:
            raise ReportError(f"--targets: {item} is outside (0, 1]; targets are test accuracies, e.g. 0.95 for 95%.")
    return sorted(out) or None


class _OneLineParser(argparse.ArgumentParser):
    """argparse's parser whose errors (an unknown option, a missing value) raise ReportError, printed as one
    ``bnexp report: error:`` line (:func:`report_main`) as ``bnexp train --foo`` is, instead of the usage."""

    def error(self, message: str):
        raise ReportError(f"{message} (bnexp report --help lists the options)")


def _parser() -> argparse.ArgumentParser:
    p = _OneLineParser(
        prog="bnexp report",
        description="Tables, claims and figures (paper Fig. 1, Sec. 4.1 and Sec. 4.2) from a sweep's run "
                    f"directories. Writes {', '.join(REPORT_FILES)} into SWEEP_DIR, and the figures the sweep has "
                    f"data for among {', '.join(FIGURE_FILES)} (an earlier report's figure that this one does not "
                    f"draw is removed). Given a single run directory, into RUN_DIR/{RUN_REPORT_SUBDIR}/ (never "
                    "over the run's own files).")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", nargs="?",
                   help="folder holding the run directories (searched recursively), or one run directory")
    p.add_argument("--targets", nargs="+", metavar="ACC",
                   help="test accuracies in (0, 1] to report steps for (default: the runs' trainer.targets)")
    p.add_argument("--update-docs", nargs="*", metavar="FILE",
                   help="instead of a report: rewrite the <!-- bnexp:numbers --> blocks of FILE (default: README.md "
                        "and docs/**/*.md) from their report.json (bnexp/report/docs_numbers.py)")
    return p


def _say(kind: str, msg: str) -> None:
    """Print "bnexp report: error: msg" (or warning) as one paragraph on stderr."""
    from rich.console import Console
    from rich.markup import escape

    style = "bold red" if kind == "error" else "bold yellow"
    Console(stderr=True).print(f"[{style}]bnexp report: {kind}:[/] {escape(msg)}", highlight=False, soft_wrap=True)


class _WarningLine(logging.Handler):
    """Prints the warnings of reading the runs as ``bnexp report: warning:`` lines."""

    def emit(self, record: logging.LogRecord) -> None:
        _say("warning", record.getMessage())


def _run(ns: argparse.Namespace) -> int:
    if ns.update_docs is not None:  # numbers in the docs come from report.json
        from bnexp.report.docs_numbers import update_docs_command

        return update_docs_command(ns.update_docs, ns.sweep_dir, ns.targets)
    if ns.sweep_dir is None and ns.targets and len(ns.targets) > 1:
        ns.sweep_dir = ns.targets.pop()  # "--targets 0.9 0.95 SWEEP_DIR": the greedy list took SWEEP_DIR
    if ns.sweep_dir is None:
        raise ReportError("give the sweep folder: bnexp report SWEEP_DIR [--targets ACC ...]")
    report = build_report(Path(ns.sweep_dir), _parse_targets(ns.targets))
    try:
        paths = write_report(report)
    except OSError as exc:
        raise ReportError(f"cannot write the report into {report.out_dir} ({exc.strerror or exc}); the files "
                          "already there are unchanged.") from None
    print_table(report)
    print(f"wrote into {report.out_dir}: " + written_text(paths, report.out_dir))
    return 0


def written_text(paths: list[Path], out_dir: Path) -> str:
    """The files of a report as one list: the report's own files by name, each subfolder once with its count
    (the aggregate runs' event files: ``aggregate/ (18 files)``), in the order first written."""
    folders: dict[str, int] = {}
    names = []
    for p in paths:
        rel = Path(p).relative_to(out_dir) if Path(p).is_relative_to(out_dir) else Path(Path(p).name)
        if len(rel.parts) > 1:
            if rel.parts[0] not in folders:
                names.append(rel.parts[0])
            folders[rel.parts[0]] = folders.get(rel.parts[0], 0) + 1
        else:
            names.append(rel.name)
    return ", ".join(f"{n}/ ({folders[n]} file{'s' if folders[n] != 1 else ''})" if n in folders else n
                     for n in names)


def report_main(args: list[str]) -> int:
    """``bnexp report SWEEP_DIR [--targets ACC ...]``.

    Returns:
        0 when the report was written; 2 for a user error (an unknown option, missing folder, a symlink leading
        nowhere, no runs, bad --targets, unwritable folder or full disk), printed as one line
        without a traceback; 130 after Ctrl-C (the report's files are then as before, or all new).
    """
    try:
        ns = _parser().parse_args(list(args))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 2
    except ReportError as exc:  # a bad option: one line (_OneLineParser)
        _say("error", str(exc))
        return 2
    log = logging.getLogger("bnexp")
    handler = _WarningLine(logging.WARNING)
    log.addHandler(handler)
    propagate, log.propagate = log.propagate, False
    try:
        return _run(ns)
    except ReportError as exc:
        _say("error", str(exc))
        return 2
    except KeyboardInterrupt:
        print("bnexp report: interrupted; the report's files are unchanged or all replaced, never mixed.",
              file=sys.stderr)
        return 130
    finally:
        log.removeHandler(handler)
        log.propagate = propagate
