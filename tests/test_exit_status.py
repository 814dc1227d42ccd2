"""Every exit path leaves no ``running`` status and no temporary file behind (docs/reliability.md,
"Status tells the truth"): a second Ctrl-C, which ends the process at once, first records the run as
``interrupted`` and removes the temporary files of the writes it cut short. Signals are sent to real
processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import wait_for

REPO = Path(__file__).resolve().parent.parent


def test_a_second_signal_records_interrupted_and_removes_partial_files(tmp_path):
    """A process inside the guard, in the middle of a long write (its temporary file open), gets two
    SIGINTs: it exits 130 at once, and the folder says ``interrupted`` and holds no temporary file."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"status": "running", "step": 7}))
    (run_dir / "checkpoint.pt").write_bytes(b"an earlier checkpoint")
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from bnexp.runfolders import start
        from bnexp.train.signal_guard import SignalGuard
        run_dir = Path({str(run_dir)!r})
        with SignalGuard() as guard:
            guard.on_exit = lambda signum: start.abandon_run(run_dir, signum)
            with open(run_dir / ".checkpoint.pt.abc123.tmp", "wb") as f:  # a write the second signal cuts short
                f.write(b"half")
                f.flush()
                print("writing", flush=True)
                while True:
                    time.sleep(0.01)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline().strip() == "writing"
        p.send_signal(signal.SIGINT)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGINT, p.stderr.read()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["resumable"] is True and summary["signal"] == "SIGINT"
    assert summary["step"] == 7
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoint.pt", "summary.json"]


@pytest.mark.slow
def test_double_ctrl_c_of_bnexp_train_leaves_no_running_status(tmp_path, data_root):
    """``bnexp train`` with wide layers (a checkpoint takes a while to write), Ctrl-C twice in a row, as an
    impatient user does: exit 130, status ``interrupted``, no temporary file."""
    run_dir = tmp_path / "run"
    exe = Path(sys.executable).with_name("bnexp")
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120")
    p = subprocess.Popen([str(exe), "train", "model.hidden=[1500,1500,1500]", "trainer.max_steps=100000",
                          "trainer.progress=false", "trainer.num_threads=1", "trainer.ckpt_every=100000",
                          "trainer.eval_every=100000", "trainer.hist_every=100000", "trainer.probe_size=100",
                          f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_for(lambda: (run_dir / "shift.jsonl").exists(), timeout=300)  # in the step loop
        p.send_signal(signal.SIGINT)
        wait_for(lambda: list(run_dir.glob(".checkpoint.pt.*.tmp")) or p.poll() is not None, timeout=120)
        p.send_signal(signal.SIGINT)  # while the first one's checkpoint is being written
        p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode in (130, 128 + signal.SIGINT)
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    assert not list(run_dir.glob(".*.tmp"))
