"""``bnexp report SWEEP_DIR``: tables, verdicts and figures from a sweep's run directories.

It reproduces Ioffe & Szegedy (2015) Sec. 4.1 (Fig. 1(a): test accuracy vs steps and BN's speedup;
Fig. 1(b, c): a typical unit's input percentiles, per-layer stability), Sec. 4.2 (the CIFAR-style
presets vs the baseline) and, with :mod:`bnexp.ics`'s measurements, "Does BN reduce internal
covariate shift?" beside Santurkar et al. 2018. The sweep is read once into DataFrames
(:mod:`.load`), grouped into configurations (:mod:`.groups`), summarized over seeds with pandas
(:mod:`.stats`, :mod:`.ics_stats`), judged (:mod:`.evidence`, :mod:`.verdicts`, :mod:`.best_rate`,
:mod:`.noise_sweep`, :mod:`.ics_verdicts`), put together by :mod:`.build` and written by
:mod:`.render`, :mod:`.figures`, :mod:`.figures_ics` and :mod:`.cli`.
"""

from bnexp.report.build import REPORT_FILES, Report, build_report
from bnexp.report.cli import report_main, write_report
from bnexp.report.ics_verdicts import ICS_FILES, ICS_TITLE
from bnexp.report.load import ReportError
from bnexp.report.render import render_markdown

__all__ = ["ICS_FILES", "ICS_TITLE", "REPORT_FILES", "Report", "ReportError", "build_report", "render_markdown",
           "report_main", "write_report"]
