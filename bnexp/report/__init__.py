"""``bnexp report SWEEP_DIR``: tables, verdicts and figures from a sweep's run directories.

What it reproduces (Ioffe & Szegedy, 2015):

* Sec. 4.1 / Fig. 1(a): test accuracy vs training steps, with and without BN, and
  the number of steps each configuration needs to reach given test accuracies;
  the speedup of BN = mean steps without BN / mean steps with BN.
* Sec. 4.1 / Fig. 1(b, c): the 15th, 50th and 85th percentiles of the input to a
  typical sigmoid of the last hidden layer over training, without and with BN,
  and per layer how far the median and the 15-85 spread moved (stability).
* Sec. 4.2 (table of the CIFAR-style presets): the steps each preset needs to reach
  the baseline's best test accuracy, as a multiple of the baseline's steps.

And, when the runs recorded the measurements of :mod:`bnexp.ics`, the section "Does BN
reduce internal covariate shift?" (:data:`ICS_TITLE`): per configuration the BN paper's
distribution view (how far each layer's input distribution moved, Wasserstein-1, from
``shift.jsonl``'s ``shift_metrics``) beside Santurkar et al. 2018's gradient-based ICS
(Def. 2.1) and loss-landscape smoothness (Sec. 3.1) from ``ics.jsonl``, the probes' cost,
BN vs no BN and noisy BN vs BN verdicts, and what the sweep supports (see
:func:`ics_section`). Configurations that differ in bn.enabled / bn.noise are then named
"BN", "noisy BN" and "no BN" (:func:`variant_label`).

Inputs: every folder below SWEEP_DIR holding ``summary.json`` or
``.hydra/config.yaml`` is one run (see :mod:`bnexp.rundir` for the layout). Runs are
grouped into *configurations*: the flattened ``.hydra/config.yaml`` minus ``seed``
and minus :data:`IGNORED_KEYS` (keys that do not change what is trained), or, when
the config file is missing, the summary's fields (:data:`SUMMARY_FIELDS`).

Statistics: "mean ± std" is over the seeds (completed runs) of a configuration,
and std is the **population** standard deviation (``numpy.std``, ddof=0), so one
seed gives std 0. Steps to a target are averaged only over the seeds that reached
it; the others are counted as "not reached (k/n)". A run is *completed* when its
status is ``finished`` or ``diverged`` and it has ``metrics.jsonl``; a run with
status ``failed``, an unreadable or missing ``summary.json``, or missing metrics
counts as failed; ``running``/``interrupted`` runs count as incomplete. Failed and
incomplete runs are left out of every mean. No value is ever made up: a missing
value is written as "not reached" or "n/a" (an empty cell in the CSV, null in JSON).

Outputs, written into SWEEP_DIR: :data:`REPORT_FILES`, plus :data:`ICS_FILES` for the
kinds of ICS measurement the runs hold (only then). Given a single run directory (one that
holds summary.json or .hydra/config.yaml itself), the report goes into its subfolder
``report/`` instead, so the run's own files (e.g. its percentiles.png) are never overwritten.
Every file is written atomically (temporary file, then ``os.replace``).

The package, by stage (each module imports only those above it):

* :mod:`.load` -- finding and reading the run directories (:class:`Run`);
* :mod:`.groups` -- grouping runs into configurations, labels, BN / no-BN pairs;
* :mod:`.fmt` -- how numbers are written;
* :mod:`.stats` -- steps-to-target, accuracies, speedups, stability, the Sec. 4.2 table;
* :mod:`.verdicts` -- the Sec. 4.1 / 4.2 verdict sentences;
* :mod:`.ics_stats`, :mod:`.ics_verdicts` -- the ICS measurements and the ICS section;
* :mod:`.build` -- :func:`build_report`, everything above put together (:class:`Report`);
* :mod:`.figures`, :mod:`.figures_ics` -- the PNG figures;
* :mod:`.render` -- report.md, report.csv, report.json's data;
* :mod:`.cli` -- :func:`report_main`, the ``bnexp report`` command.
"""

from bnexp.report.build import (DEFAULT_TARGETS, REPORT_FILES, RUN_REPORT_SUBDIR, STD_NOTE, Report, build_report,
                                summarize_group)
from bnexp.report.cli import print_table, report_main, write_report
from bnexp.report.figures import figure_pairs, plot_accuracy, plot_percentiles, plot_stability
from bnexp.report.figures_ics import ICS_PLOTS
from bnexp.report.fmt import format_acc, format_multiple, format_stat, format_steps, format_target
from bnexp.report.groups import ConfigGroup, bn_variant, group_runs, label_groups, match_no_bn, variant_label
from bnexp.report.ics_stats import ics_summary
from bnexp.report.ics_verdicts import (COS_MARGIN, ICS_FILES, ICS_MARGIN, ICS_TITLE, NEARLY_AS_FAST,
                                       distribution_verdict, gradient_verdict, ics_section, landscape_verdict,
                                       noisy_verdict, supports_paragraph)
from bnexp.report.load import IGNORED_KEYS, SUMMARY_FIELDS, ReportError, Run, find_run_dirs, is_run_dir, load_run
from bnexp.report.render import render_markdown, write_csv
from bnexp.report.stats import compute_speedup, reach_stat, sec42_table, steps_to_target

__all__ = [
    "COS_MARGIN", "DEFAULT_TARGETS", "ICS_FILES", "ICS_MARGIN", "ICS_PLOTS", "ICS_TITLE", "IGNORED_KEYS",
    "NEARLY_AS_FAST", "REPORT_FILES", "RUN_REPORT_SUBDIR", "STD_NOTE", "SUMMARY_FIELDS", "ConfigGroup", "Report",
    "ReportError", "Run", "bn_variant", "build_report", "compute_speedup", "distribution_verdict", "figure_pairs",
    "find_run_dirs", "format_acc", "format_multiple", "format_stat", "format_steps", "format_target",
    "gradient_verdict", "group_runs", "ics_section", "ics_summary", "is_run_dir", "label_groups",
    "landscape_verdict", "load_run", "match_no_bn", "noisy_verdict", "plot_accuracy", "plot_percentiles",
    "plot_stability", "print_table", "reach_stat", "render_markdown", "report_main", "sec42_table",
    "steps_to_target", "summarize_group", "supports_paragraph", "variant_label", "write_csv", "write_report",
]
