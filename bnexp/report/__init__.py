"""``bnexp report SWEEP_DIR``: tables, verdicts and figures from a sweep's run directories.

What it reproduces (Ioffe & Szegedy, 2015): Sec. 4.1 / Fig. 1(a), test accuracy vs training steps
with and without BN, the steps each configuration needs to reach given test accuracies and the
speedup of BN (mean steps without BN / mean steps with BN); Sec. 4.1 / Fig. 1(b, c), the 15th,
50th and 85th percentiles of a typical last-layer sigmoid input over training and per layer how
far they moved; Sec. 4.2, the steps each CIFAR-style preset needs to reach the baseline's best
accuracy. With the measurements of :mod:`bnexp.ics`, the section "Does BN reduce internal
covariate shift?" (the BN paper's distribution view beside Santurkar et al. 2018's gradient-based
ICS and loss-landscape smoothness; configurations named "BN", "noisy BN" and "no BN").

Inputs: every folder below SWEEP_DIR holding ``summary.json`` or ``.hydra/config.yaml`` is one run
(:mod:`bnexp.rundir` reads its files). The sweep is loaded once into DataFrames
(:class:`~bnexp.report.load.Sweep`); runs are grouped into *configurations* (the flattened config
minus ``seed`` and the keys that do not change what is trained). "mean ± std" is over the
completed seeds of a configuration, std the population one (ddof=0); steps to a target are
averaged over the seeds that reached it. No value is ever made up: a missing value is written
"not reached" or "n/a" (an empty cell in the CSV, null in JSON).

Outputs, written together into SWEEP_DIR (or RUN_DIR/report/ for a single run):
:data:`~bnexp.report.build.REPORT_FILES`, plus the ICS figures the runs have data for.

The package, by stage (each module imports only those above it): :mod:`.load` (runs and their
DataFrames), :mod:`.groups` (configurations, labels, BN / no-BN pairs), :mod:`.fmt` (how numbers
are written), :mod:`.stats` (per-run numbers and seed statistics), :mod:`.evidence`,
:mod:`.verdicts`, :mod:`.best_rate`, :mod:`.ics_stats`, :mod:`.ics_verdicts`, :mod:`.noise_sweep`,
:mod:`.build` (:func:`build_report`), :mod:`.render` (tables, report.md/.csv/.json),
:mod:`.figstyle`, :mod:`.figures`, :mod:`.figures_ics`, :mod:`.cli` (:func:`report_main`).
"""

from bnexp.report.build import REPORT_FILES, Report, build_report
from bnexp.report.cli import report_main, write_report
from bnexp.report.ics_verdicts import ICS_FILES, ICS_TITLE
from bnexp.report.load import ReportError
from bnexp.report.render import render_markdown

__all__ = ["ICS_FILES", "ICS_TITLE", "REPORT_FILES", "Report", "ReportError", "build_report", "render_markdown",
           "report_main", "write_report"]
