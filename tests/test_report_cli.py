"""`bnexp report` as a command: its files change together or not at all (full disk, Ctrl-C), every
problem is one `bnexp report:` line (error: exit 2; warning: the report goes on), Ctrl-C is exit 130
without a traceback, and corrupt or odd run folders never make a wrong number silently."""

from __future__ import annotations

import errno
import json
import os
import signal
from pathlib import Path

import pytest

from test_report import BN_05, NOBN_05, make_run

from bnexp.runfolders import rundir
from bnexp.report import build_report, report_main

TEXT_FILES = ("report.md", "report.csv", "report.json")


@pytest.fixture
def sweep(tmp_path) -> Path:
    root = tmp_path / "sweep"
    for seed in (0, 1):
        make_run(root, f"bn=true,seed={seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
        make_run(root, f"bn=false,seed={seed}", bn=False, lr=0.5, seed=seed, knots=NOBN_05[seed])
    return root


def _report_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _change_a_run(sweep: Path) -> None:
    """Make the next report differ from the last one (seed 1 of BN reaches 95% later)."""
    (sweep / "bn=true,seed=1" / "summary.json").unlink()
    make_run(sweep / "moved", "x", bn=True, lr=0.5, seed=1, knots=[(0, 0.1), (4000, 0.95), (6000, 0.99)])
    os.replace(sweep / "moved" / "x" / "summary.json", sweep / "bn=true,seed=1" / "summary.json")
    os.replace(sweep / "moved" / "x" / "metrics.jsonl", sweep / "bn=true,seed=1" / "metrics.jsonl")


@pytest.mark.slow  # renders the report's figures (> 3 s of CPU)
@pytest.mark.parametrize("failing", TEXT_FILES)
def test_a_full_disk_at_any_file_keeps_the_previous_report_whole(sweep, monkeypatch, capsys, failing):
    assert report_main([str(sweep)]) == 0
    before = _report_files(sweep)
    _change_a_run(sweep)
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

    def fdopen(fd, *args, **kwargs):
        f = real_fdopen(fd, *args, **kwargs)
        return Full(f) if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(f".{failing}.") else f

    monkeypatch.setattr(rundir.os, "fdopen", fdopen)
    capsys.readouterr()
    assert report_main([str(sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("bnexp report: error:") == 1 and "No space left on device" in err and "Traceback" not in err
    assert _report_files(sweep) == before  # all three (and the figures) as they were, no temporary file
    monkeypatch.undo()
    assert report_main([str(sweep)]) == 0
    after = _report_files(sweep)
    assert all(after[n] != before[n] for n in TEXT_FILES)  # the same run now replaces all three


@pytest.mark.slow  # renders the report's figures (> 3 s of CPU)
def test_ctrl_c_while_writing_exits_130_and_keeps_the_previous_report(sweep, monkeypatch, capsys):
    assert report_main([str(sweep)]) == 0
    before = _report_files(sweep)
    _change_a_run(sweep)
    real_fsync, calls = os.fsync, []

    def fsync(fd):  # Ctrl-C while the second file is being written
        calls.append(fd)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        real_fsync(fd)

    monkeypatch.setattr(rundir.os, "fsync", fsync)
    capsys.readouterr()
    assert report_main([str(sweep)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err
    assert _report_files(sweep) == before


def test_ctrl_c_while_reading_exits_130(sweep, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("bnexp.analysis.runs.read_summary", interrupted)
    assert report_main([str(sweep)]) == 130
    assert "Traceback" not in capsys.readouterr().err and not (sweep / "report.md").exists()


@pytest.mark.parametrize("kind", ["loop", "dangling"])
def test_a_sweep_folder_that_leads_nowhere_is_one_error_line(tmp_path, capsys, kind):
    link = tmp_path / "sweep"
    link.symlink_to(link if kind == "loop" else tmp_path / "gone")
    assert report_main([str(link)]) == 2
    err = capsys.readouterr().err
    expected = "a symlink loop" if kind == "loop" else f"a dangling symlink (to {tmp_path / 'gone'})"
    assert err.count("bnexp report: error:") == 1 and expected in err.replace("\n", "") and "Traceback" not in err


def test_run_folders_that_lead_nowhere_are_skipped_with_a_warning(sweep, capsys):
    (sweep / "bn=true,seed=2").symlink_to(sweep / "bn=true,seed=2")
    (sweep / "bn=false,seed=2").symlink_to(sweep.parent / "deleted-run")
    assert report_main([str(sweep)]) == 0
    err = capsys.readouterr().err.replace("\n", "")
    assert "bnexp report: warning:" in err and "bn=true,seed=2: a symlink loop" in err
    assert "bn=false,seed=2: a dangling symlink" in err and "Traceback" not in err
    assert json.loads((sweep / "report.json").read_text())["runs"] == 4


def test_a_corrupt_metrics_line_is_a_warning_and_the_later_records_count(sweep, capsys):
    # garbage in the middle of no BN's metrics.jsonl: its later records (95% at 10,000 / 12,000 steps)
    # still make the numbers, and the warning names the file and the line
    for seed in (0, 1):
        run = sweep / f"bn=false,seed={seed}"
        (run / "summary.json").write_text(json.dumps({**json.loads((run / "summary.json").read_text()),
                                                      "steps_to_target": {}, "best_test_accuracy": None}))
        lines = (run / "metrics.jsonl").read_text().splitlines()
        (run / "metrics.jsonl").write_text("\n".join(lines[:5] + ["#garbage\x00"] + lines[5:]) + "\n")
    nb = next(c for c in build_report(sweep).data["configurations"] if c["label"] == "bn=false")
    assert nb["steps_to_target"]["0.95"]["per_seed"] == [10000, 12000]
    assert nb["max_test_accuracy"]["mean"] == pytest.approx((0.975 + 0.972) / 2)
    assert report_main([str(sweep)]) == 0
    err = capsys.readouterr().err.replace("\n", "")
    assert err.count("bnexp report: warning:") == 2 and "metrics.jsonl, line 6: not a JSON record" in err


def test_targets_and_missing_folder_errors_are_one_line(sweep, tmp_path, capsys):
    for args, expected in (([str(sweep), "--targets", "abc"], "'abc' is not a number"),
                           ([str(sweep), "--targets", "1.5"], "outside (0, 1]"),
                           ([str(tmp_path / "nope")], "does not exist"),
                           ([str(sweep / "bn=true,seed=0" / "summary.json")], "is not a folder")):
        assert report_main(args) == 2
        err = capsys.readouterr().err
        assert err.count("bnexp report: error:") == 1 and expected in err.replace("\n", "") and "Traceback" not in err


@pytest.mark.parametrize("args, expected", [
    (["SWEEP", "--bogus"], "unrecognized arguments: --bogus"),
    (["SWEEP", "--targets"], "argument --targets: expected at least one argument"),
    (["SWEEP", "OTHER"], "unrecognized arguments: OTHER")])
def test_a_bad_option_is_one_error_line_without_the_usage(tmp_path, capsys, args, expected):
    """argparse's errors are one ``bnexp report: error:`` line (exit 2), as ``bnexp train --foo`` is: no usage
    lines before it."""
    assert report_main([str(tmp_path) if a == "SWEEP" else a for a in args]) == 2
    out = capsys.readouterr()
    lines = [line for line in (out.err + out.out).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bnexp report: error: " + expected), lines
    assert "bnexp report --help" in lines[0]


def test_ctrl_c_while_the_report_modules_load_exits_130(monkeypatch, capsys):
    import builtins
    import sys

    import bnexp.report

    real_import = builtins.__import__

    def slow_import(name, *args, **kwargs):  # Ctrl-C while pandas and matplotlib load
        if name == "bnexp.report.command":
            raise KeyboardInterrupt
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "bnexp.report.command", raising=False)
    monkeypatch.setattr(builtins, "__import__", slow_import)
    assert bnexp.report.report_main(["anywhere"]) == 130
    err = capsys.readouterr().err
    assert "bnexp report: interrupted" in err and "Traceback" not in err

