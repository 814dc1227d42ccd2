"""``bnexp report`` beside other processes: two reports of one sweep at once leave one whole set of files (each set
is written to temporary files and renamed together) and no temporary file; a report of a sweep whose runs are still
training names those runs as unfinished with the command that resumes the sweep, and writes a whole set too
(docs/reliability.md, "Run-folder files and reports")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_report import BN_05, NOBN_05, make_run

from bnexp.report import report_main
from bnexp.runfolders.rundir import RunLock

TEXT_FILES = ("report.md", "report.csv", "report.json")


def _sweep(tmp_path: Path, running: str | None = None) -> Path:
    root = tmp_path / "sweep"
    for seed in (0, 1):
        for bn, knots in ((True, BN_05), (False, NOBN_05)):
            name = f"bn={str(bn).lower()},seed={seed}"
            make_run(root, name, bn=bn, lr=0.5, seed=seed, knots=knots[seed],
                     status="running" if name == running else "finished")
    return root


def _text_files(root: Path) -> dict[str, bytes]:
    return {name: (root / name).read_bytes() for name in TEXT_FILES}


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.tmp"))


def test_two_reports_of_one_sweep_at_once_leave_one_whole_set(tmp_path):
    root = _sweep(tmp_path)
    exe = Path(sys.executable).with_name("bnexp")
    procs = [subprocess.Popen([str(exe), "report", str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outs]
    assert _leftovers(root) == []
    together = _text_files(root)
    json.loads(together["report.json"])
    # the set is what one report alone writes: no file of one report beside another's
    subprocess.run([str(exe), "report", str(root)], check=True, capture_output=True, timeout=600)
    assert _text_files(root) == together


@pytest.mark.slow  # renders the report's figures (> 3 s of CPU)
def test_a_report_of_a_sweep_still_training_names_its_unfinished_runs(tmp_path):
    """One run trains now (its summary says running, its lock is held): the report says the sweep is unfinished,
    names that run and gives the command that resumes the sweep, advises no seeds, and leaves no temporary file."""
    root = _sweep(tmp_path, running="bn=true,seed=1")
    lock = RunLock(root / "bn=true,seed=1")
    assert lock.acquire()
    try:
        assert report_main([str(root)]) == 0
    finally:
        lock.release()
    advice = json.loads((root / "report.json").read_text())["seed_advice"]
    assert "The sweep is unfinished" in (root / "report.md").read_text(encoding="utf-8")
    assert advice.startswith("The sweep is unfinished: 1 run incomplete (bn=true,seed=1)"), advice
    assert "Add seed" not in advice and _leftovers(root) == []
