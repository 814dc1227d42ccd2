"""``bnexp report SWEEP_DIR``: tables, claims and figures from a sweep's run directories.

It reproduces Ioffe & Szegedy (2015) Sec. 4.1 (Fig. 1(a): test accuracy vs steps and BN's speedup;
Fig. 1(b, c): a typical unit's input percentiles, per-layer stability), Sec. 4.2 (the CIFAR-style
presets vs the baseline) and, with :mod:`bnexp.train.ics`'s measurements, "Does BN reduce internal
covariate shift?" beside Santurkar et al. 2018. The sweep is read once into one per-run table and long
tables of the records (:mod:`bnexp.analysis.runs`), grouped into configurations (:mod:`.groups`); every rule
(chance, the sample std, bounds of runs that missed a target, the normalizer vocabulary, the rate choice, the
interval) is stated once in the analysis layer (:mod:`bnexp.analysis`), which the sweep designs use as well;
the sections are functions of those tables: seed statistics (:mod:`.stats`, :mod:`.ics_stats`), claims
(:mod:`.claims`; those of :mod:`.ics_verdicts`, :mod:`.best_rate`, :mod:`.frontier_plan_v2`, :mod:`.study_claims`;
the seeds they lack: :mod:`.seed_advice`), put together by :mod:`.build`; report.md's text is one Jinja2
template (templates/), filled by :mod:`.render`; :mod:`.figures`, :mod:`.figures_ics` and :mod:`.command` write
the rest. The names below load their module on first use, so that Ctrl-C
while pandas and matplotlib load is exit 130 as well.
"""

import importlib
import sys

_HOME = {"REPORT_FILES": "bnexp.report.build", "Report": "bnexp.report.build", "build_report": "bnexp.report.build",
         "write_report": "bnexp.report.command", "ICS_FILES": "bnexp.report.ics_verdicts",
         "ICS_TITLE": "bnexp.report.ics_verdicts", "ReportError": "bnexp.analysis.runs",
         "render_markdown": "bnexp.report.render"}
__all__ = sorted(_HOME) + ["report_main"]


def report_main(args: list[str]) -> int:
    """``bnexp report SWEEP_DIR [--targets ACC ...]``: :func:`bnexp.report.command.report_main` (exit 0, 2 for
    a user error, 130 after Ctrl-C, also while its modules load)."""
    try:
        from bnexp.report.command import report_main as main
    except KeyboardInterrupt:
        print("bnexp report: interrupted; no file was written.", file=sys.stderr)
        return 130
    return main(args)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'bnexp.report' has no attribute {name!r}")
