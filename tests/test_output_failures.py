"""A file of the run that cannot be written ends the run with status ``failed`` and one message.

The class: TensorBoard's writer thread hits a full disk (while the loop still writes events, or
after the last one, found only when the writer closes), or summary.json itself cannot be replaced
because the disk is full. Expected: :func:`bnexp.train.trainer.train` raises one
:class:`~bnexp.errors.OutputError` naming the file and the fix, summary.json says ``failed`` with
that message (never ``running``), and no thread traceback reaches stderr.
"""

from __future__ import annotations

import errno
import json

import pytest
from tensorboard.summary.writer import record_writer

from bnexp.runfolders import rundir
from bnexp.config.schema import compose_config
from bnexp.errors import OutputError
from bnexp.train.trainer import train

BASE = ["trainer.progress=false", "trainer.num_threads=1", "trainer.device=cpu", "trainer.max_steps=30",
        "trainer.eval_every=10", "trainer.hist_every=10", "trainer.log_every=5", "trainer.probe_size=100",
        "seed=2"]


def _fail_event_writes_after(monkeypatch, n: int) -> list:
    """TensorBoard's writer thread raises ENOSPC from its ``n+1``-th record on."""
    real, calls = record_writer.RecordWriter.write, []

    def write(self, data):
        calls.append(len(data))
        if len(calls) > n:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data)

    monkeypatch.setattr(record_writer.RecordWriter, "write", write)
    return calls


def _count_events(tmp_path, data_root, monkeypatch) -> int:
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    calls = _fail_event_writes_after(monkeypatch, 10**9)
    assert train(compose_config(BASE), tmp_path / "count")["status"] == "finished"
    return len(calls)


@pytest.mark.slow  # 30-step MNIST runs in this process
@pytest.mark.parametrize("when", ["mid_run", "after_the_last_event"])
def test_writer_thread_failure_is_status_failed_and_one_message(when, tmp_path, data_root, monkeypatch, capfd):
    total = _count_events(tmp_path, data_root, monkeypatch)
    monkeypatch.undo()
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    # mid-run: well before the end; after the last event: the very last records (hparams end) fail,
    # and only the writer's close can tell
    _fail_event_writes_after(monkeypatch, total // 3 if when == "mid_run" else total - 1)
    capfd.readouterr()
    run_dir = tmp_path / "run"
    with pytest.raises(OutputError) as exc:
        train(compose_config(BASE), run_dir)
    msg = str(exc.value)
    assert "events.out.tfevents" in msg and "No space left on device" in msg and "disk" in msg
    assert "\n" not in msg
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == msg
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err


@pytest.mark.slow  # 30-step MNIST runs in this process
def test_full_disk_for_summary_json_still_records_failed(tmp_path, data_root, monkeypatch):
    """No room for a fresh copy of summary.json: it is rewritten in place (its blocks exist)."""
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    _fail_event_writes_after(monkeypatch, 40)
    real = rundir.write_json

    def write_json(path, obj):
        if obj.get("status") == "failed":  # the disk filled up after the run started
            raise OutputError(path, OSError(errno.ENOSPC, "No space left on device"))
        real(path, obj)

    monkeypatch.setattr(rundir, "write_json", write_json)
    run_dir = tmp_path / "run"
    with pytest.raises(OutputError):
        train(compose_config(BASE), run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    assert summary["lr"] == 0.12 and summary["max_steps"] == 30  # the rest of the summary is kept
