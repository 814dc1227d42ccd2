"""The files of bnexp report are one set: a later report replaces the whole set, so a figure it no longer draws
does not survive beside the new ones (docs/reliability.md, Reports)."""

from __future__ import annotations

import json

import pytest

from test_report import make_ics_run

from bnexp import report as rep
from bnexp.report import report_main


def test_every_file_a_report_can_write_is_in_the_one_list():
    from bnexp.report.figures import FIGURES
    from bnexp.report.figures_ics import ICS_PLOTS
    from bnexp.report.figures_studies import FIGURE
    from bnexp.report.study_claims import ANALYSES

    written = {"report.md", "report.csv", "report.json", *FIGURES, *ICS_PLOTS, FIGURE,
               *(f"study_{name}.png" for name in ANALYSES)}
    assert set(rep.build.ALL_REPORT_FILES) == written
    assert len(rep.build.ALL_REPORT_FILES) == len(written)  # each once


@pytest.mark.slow  # renders the report's figures twice (> 3 s of CPU)
def test_a_figure_the_next_report_does_not_draw_is_removed(tmp_path, capsys):
    """An ICS sweep's report draws ics_distribution.png; once every run is interrupted (no finished run has
    ICS data) the next report draws no ICS figure, and the old one is gone; other files stay."""
    root = tmp_path / "sweep"
    runs = [make_ics_run(root, variant, 0.5, 0) for variant in ("BN", "no BN")]
    (root / "notes.txt").write_text("mine")
    assert report_main([str(root)]) == 0
    assert (root / "ics_distribution.png").is_file()
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    assert report_main([str(root)]) == 0
    data = json.loads((root / "report.json").read_text())
    assert data["files"] == list(rep.REPORT_FILES)
    assert sorted(p.name for p in root.iterdir() if p.is_file()) == sorted([*rep.REPORT_FILES, "notes.txt"])
    assert (root / "notes.txt").read_text() == "mine"


def test_help_names_the_figures_a_report_may_write(capsys):
    assert report_main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in ("ics_distribution.png", "ics_gradient.png", "ics_landscape.png", "frontier.png",
                 "study_depth.png", "stability.png"):
        assert name in text, name


def test_replace_files_removes_the_old_sets_extra_files_only_when_the_new_set_is_written(tmp_path, monkeypatch):
    import os

    from bnexp.runfolders import rundir

    old = tmp_path / "ics_distribution.png"
    old.write_bytes(b"old figure")
    (tmp_path / "report.md").write_text("old")

    def full_disk(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", full_disk)
        with pytest.raises(OSError):
            rundir.replace_files({tmp_path / "report.md": b"new"}, [old, tmp_path / "frontier.png"])
    assert old.read_bytes() == b"old figure" and (tmp_path / "report.md").read_text() == "old"
    rundir.replace_files({tmp_path / "report.md": b"new"}, [old, tmp_path / "frontier.png"])  # one not there
    assert not old.exists() and (tmp_path / "report.md").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]  # no temporary file left
