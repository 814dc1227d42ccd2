"""The run-directory schema (bnexp.runfolders.rundir): reading every run-folder file forgivingly but never silently,
writing several files so that they change together, finding run folders through symlinks, json_safe
and flatten."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from bnexp.runfolders import rundir

RECORDS = [{"step": s, "test_accuracy": a} for s, a in ((0, 0.1), (100, 0.5), (200, 0.9), (300, 0.95))]


def _lines(recs: list[dict]) -> list[bytes]:
    return [json.dumps(r).encode() for r in recs]


@pytest.mark.parametrize("bad", [b"garbage", b'{"step": 150, "test_acc', b"\xff\xfe\x00 not utf-8", b"[1, 2]",
                                 b"42", b"\x00\x00\x00\x00"])
def test_a_corrupt_line_is_skipped_with_a_warning_and_later_records_kept(tmp_path, caplog, bad):
    # one corrupt line in the middle (line 3 of 5): every other record comes back, in order, and the
    # warning names the file and the line
    path = tmp_path / "metrics.jsonl"
    lines = _lines(RECORDS)
    path.write_bytes(b"\n".join(lines[:2] + [bad] + lines[2:]) + b"\n")
    with caplog.at_level(logging.WARNING, logger="bnexp"):
        assert rundir.read_jsonl(path) == RECORDS
    (msg,) = [r.getMessage() for r in caplog.records]
    assert str(path) in msg and "line 3" in msg and "skipped" in msg


def test_a_torn_last_line_and_empty_lines(tmp_path, caplog):
    path = tmp_path / "shift.jsonl"
    lines = _lines(RECORDS)
    path.write_bytes(b"\n".join(lines[:2] + [b"", b"   "] + lines[2:]) + b"\n" + lines[0][:7])  # no newline: torn
    with caplog.at_level(logging.WARNING, logger="bnexp"):
        assert rundir.read_jsonl(path) == RECORDS
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "line 7" in msg and "interrupted write" in msg
    assert rundir.read_jsonl(tmp_path / "absent.jsonl") == []


def test_read_records_keeps_valid_records_sorted_by_step(tmp_path, caplog):
    lines = _lines([RECORDS[3], RECORDS[0]]) + [b'{"step": "x", "test_accuracy": 1}', b'{"test_accuracy": 1}',
                                                 b'{"step": true, "test_accuracy": 1}', b"oops"] + _lines([RECORDS[1]])
    (tmp_path / rundir.METRICS).write_bytes(b"\n".join(lines) + b"\n")
    with caplog.at_level(logging.WARNING, logger="bnexp"):
        recs = rundir.read_records(tmp_path, rundir.METRICS, ("step", "test_accuracy"))
    assert recs == [RECORDS[0], RECORDS[1], RECORDS[3]]
    (tmp_path / rundir.ICS).mkdir()  # unreadable: a folder of that name
    assert rundir.read_records(tmp_path, rundir.ICS) == []
    assert any(rundir.ICS in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe", b""])
def test_an_unreadable_summary_or_config_reads_as_none(tmp_path, content):
    (tmp_path / ".hydra").mkdir()
    for name in (rundir.SUMMARY, rundir.CONFIG, rundir.HYDRA_CONFIG):
        (tmp_path / name).write_bytes(content)
    assert rundir.read_summary(tmp_path) is None and rundir.read_config(tmp_path) is None
    (tmp_path / rundir.HYDRA_CONFIG).write_text("lr: 0.5\nbn:\n  enabled: true\n")
    assert rundir.read_config(tmp_path) == {"lr": 0.5, "bn": {"enabled": True}}  # falls back to Hydra's copy


# ------------------------------------------------------------------ writing several files together

def _old_set(folder: Path) -> dict[Path, bytes]:
    files = {folder / n: f"old {n}".encode() for n in ("report.md", "report.csv", "report.json")}
    for p, data in files.items():
        p.write_bytes(data)
    return files


def _new_set(folder: Path) -> dict[Path, bytes]:
    return {folder / n: f"new {n}".encode() * 1000 for n in ("report.md", "report.csv", "report.json")}


def _state(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_summaries_read_once_is_one_state_of_the_folder(tmp_path):
    """Inside summaries_read_once a run's summary.json is read once (a later change is not seen, and a copy
    is returned, so a caller's edit does not leak); outside, every call reads the file again."""
    run = tmp_path / "run"
    run.mkdir()
    rundir.write_summary(run, {"status": "interrupted", "step": 3})
    with rundir.summaries_read_once():
        first = rundir.read_summary(run)
        first["status"] = "edited by the caller"
        rundir.write_summary(run, {"status": "finished", "step": 9})
        assert rundir.read_summary(run) == {"status": "interrupted", "step": 3}
        assert not rundir.is_complete(run)
        assert rundir.read_summary(tmp_path / "none") is None
        (tmp_path / "none").mkdir()
        rundir.write_summary(tmp_path / "none", {"status": "finished"})
        assert rundir.read_summary(tmp_path / "none") is None  # absent when first read
    assert rundir.read_summary(run) == {"status": "finished", "step": 9} and rundir.is_complete(run)
    assert rundir.is_complete(tmp_path / "none")


@pytest.mark.parametrize("failing", [0, 1, 2])
@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_replace_files_leaves_the_old_set_when_any_write_fails(tmp_path, monkeypatch, failing, error):
    # a full disk (or Ctrl-C) at the first, second or third file: every old file stays, no new one
    # appears and no temporary file is left behind
    old = _old_set(tmp_path)
    before = _state(tmp_path)
    calls = []
    real_fsync = os.fsync

    def fsync(fd):
        calls.append(fd)
        if len(calls) == failing + 1:
            raise error
        real_fsync(fd)

    monkeypatch.setattr(rundir.os, "fsync", fsync)
    with pytest.raises(type(error)):
        rundir.replace_files(_new_set(tmp_path))
    assert _state(tmp_path) == before and set(before) == {p.name for p in old}


def test_replace_files_holds_ctrl_c_back_until_every_file_is_replaced(tmp_path, monkeypatch):
    _old_set(tmp_path)
    new = _new_set(tmp_path)
    real_replace, replaced = os.replace, []

    def replace(src, dst):
        if not replaced:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right after the first rename started
        replaced.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(rundir.os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        rundir.replace_files(new)
    assert len(replaced) == 3 and _state(tmp_path) == {p.name: d for p, d in new.items()}
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored


# ------------------------------------------------------------------ finding run folders

def _run(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / rundir.SUMMARY).write_text('{"status": "finished"}')
    return path


def test_find_run_dirs_follows_symlinks_and_skips_loops_and_dangling_links(tmp_path, caplog):
    sweep = tmp_path / "sweep"
    a = _run(sweep / "a")
    b = _run(tmp_path / "elsewhere" / "b")
    (sweep / "linked").symlink_to(b)                    # a run folder that is a symlink: followed
    (sweep / "again").symlink_to(a)                     # the same run twice: counted once
    (sweep / "dangling").symlink_to(tmp_path / "gone")  # a dangling symlink
    (sweep / "loop").symlink_to(sweep / "loop")         # a symlink loop
    (sweep / "nest").mkdir()
    (sweep / "nest" / "up").symlink_to(sweep)           # a loop through an ancestor
    with caplog.at_level(logging.WARNING, logger="bnexp"):
        found = rundir.find_run_dirs(sweep)
    assert sorted(os.path.realpath(p) for p in found) == sorted(os.path.realpath(p) for p in (a, b))
    msgs = " | ".join(r.getMessage() for r in caplog.records)
    assert f"{sweep / 'dangling'}: a dangling symlink (to {tmp_path / 'gone'})" in msgs
    assert f"{sweep / 'loop'}: a symlink loop" in msgs
    assert rundir.symlink_problem(sweep / "loop") == "a symlink loop" and rundir.symlink_problem(a) is None


# ------------------------------------------------------------------ json_safe, flatten

def test_json_safe_gives_strict_json():
    obj = {"nan": math.nan, "inf": -math.inf, 1: np.float32(0.5), "arr": np.array([1.0, np.nan]),
           "int": np.int64(3), "path": Path("/a/b"), "nested": [(True, None, "x")]}
    safe = rundir.json_safe(obj)
    assert safe == {"nan": None, "inf": None, "1": 0.5, "arr": [1.0, None], "int": 3, "path": "/a/b",
                    "nested": [[True, None, "x"]]}
    assert json.loads(rundir.dumps(obj)) == safe


def test_flatten_dotted_keys_lists_stay_values():
    assert rundir.flatten({"bn": {"enabled": True, "noise": {"a": 0.5}}, "lr": 0.1, "hidden": [100, 100]}) == {
        "bn.enabled": True, "bn.noise.a": 0.5, "lr": 0.1, "hidden": [100, 100]}
    assert rundir.flatten({"enabled": True}, "bn.") == {"bn.enabled": True}
