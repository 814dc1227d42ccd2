"""SIGINT/SIGTERM at every phase of a run leave a consistent run folder: status ``interrupted``, the
checkpoint the log announces, and a resume that ends exactly where an uninterrupted run ends.

Phases: while the data loads (Trainer construction), while the checkpoint is read (resume),
while the outputs are opened, during the step-0 measurements, in the middle of the loop. And a
Ctrl-C of a joblib sweep: every running job saves its checkpoint before the sweep stops.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import bnexp.train.measurements as measurements_mod
import bnexp.train.trainer as trainer_mod
from bnexp.config.schema import compose_config
from bnexp.errors import Interrupted

from conftest import SHORT_RUN, before_call, steps_of, train_in_process, wait_for

BASE = [*SHORT_RUN, "seed=9"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, data_root):
    run_dir = tmp_path_factory.mktemp("whole")
    assert train_in_process(run_dir, data_root, BASE)["status"] == "finished"
    return torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)["model"]


def _signal_on_call(monkeypatch, module, name: str, signum: int, call: int = 1) -> None:
    """Make ``module.name`` send ``signum`` to this process on its ``call``-th call, then do its work."""
    before_call(monkeypatch, module, name, lambda: os.kill(os.getpid(), signum), call)


# phase -> (module, function called in that phase, which call)
PHASES = {
    "loading_data": (trainer_mod, "load_data", 1),
    "reading_checkpoint": (trainer_mod.torch, "load", 1),
    "opening_outputs": (trainer_mod, "write_hparams_start", 1),
    "step0_measurements": (measurements_mod, "evaluate", 1),
    "mid_loop": (trainer_mod, "learning_rate", 13),
}


# SIGTERM takes SIGINT's path: two phases suffice for it
CASES = [(phase, signal.SIGINT) for phase in PHASES] + [(phase, signal.SIGTERM) for phase in ("loading_data", "mid_loop")]


@pytest.mark.slow  # two or three 20-step MNIST runs in this process each (~3 s of CPU)
@pytest.mark.parametrize("phase, signum", CASES, ids=[f"{p}-{signal.Signals(s).name}" for p, s in CASES])
def test_signal_at_any_phase_saves_and_resumes_exactly(phase, signum, uninterrupted, tmp_path, data_root,
                                                       monkeypatch, caplog):
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    cfg = compose_config(BASE)
    run_dir = tmp_path / "run"
    if phase == "reading_checkpoint":  # a first attempt stopped at step 10, then the signal comes while resuming
        _signal_on_call(monkeypatch, trainer_mod, "learning_rate", signal.SIGINT, 13)
        with pytest.raises(Interrupted):
            trainer_mod.train(cfg, run_dir)
        monkeypatch.undo()
        monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    module, name, call = PHASES[phase]
    _signal_on_call(monkeypatch, module, name, signum, call)
    caplog.clear()
    with pytest.raises(Interrupted) as exc, caplog.at_level("WARNING", logger="bnexp"):
        trainer_mod.train(cfg, run_dir)
    assert exc.value.signum == signum
    assert "checkpoint saved" in caplog.text
    monkeypatch.undo()
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    summary = json.loads((run_dir / "summary.json").read_text())
    saved = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert summary["status"] == "interrupted" and summary["step"] == saved["step"]
    assert summary["signal"] == signal.Signals(signum).name
    # the same command resumes and ends where the uninterrupted run ends, no step recorded twice
    final = trainer_mod.train(cfg, run_dir)
    assert final["status"] == "finished" and final["resumed_from_step"] == saved["step"]
    assert steps_of(run_dir / "metrics.jsonl") == [0, 10, 20]
    assert steps_of(run_dir / "shift.jsonl") == [0, 10, 20]
    model = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)["model"]
    for k, v in uninterrupted.items():
        assert torch.equal(model[k], v), k


# ----- Ctrl-C of a joblib sweep -----------------------------------------------------------------
def _terminal_job(args: list[str], cwd: Path, env: dict) -> subprocess.Popen:
    """Start a command as a terminal starts a foreground job: its own process group, SIGINT at default."""
    return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.slow
def test_ctrl_c_of_a_joblib_sweep_saves_every_running_job(tmp_path, data_root):
    """The terminal's SIGINT reaches the launcher and its workers; every job that was training ends
    ``interrupted`` with the checkpoint its log announces, the sweep stops, no traceback.

    (Without :class:`bnexp.runfolders.sweepsignals.SweepSignals` joblib killed the workers still saving: a run stayed
    ``running`` without the checkpoint its log announced.)"""
    sweep = tmp_path / "sweep"
    exe = Path(sys.executable).with_name("bnexp")
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120")
    # wide layers: a checkpoint takes long enough to write that killing a worker early would show
    p = _terminal_job([str(exe), "train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                       "++hydra.callbacks.sweep_signals._target_=bnexp.runfolders.sweepsignals.SweepSignals",
                       "seed=0,1,2", "model.hidden=[1500,1500,1500]", "trainer.max_steps=100000",
                       "trainer.progress=false", "trainer.num_threads=1", "trainer.ckpt_every=100000",
                       "trainer.eval_every=100000", "trainer.hist_every=100000", "trainer.probe_size=100",
                       f"hydra.sweep.dir={sweep}"], tmp_path, env)
    out, err = _ctrl_c_once_two_workers_train(p, sweep)
    runs = [d for d in sweep.iterdir() if (d / "summary.json").exists()]
    assert len(runs) == 2, (out[-2000:], err[-2000:])
    _every_run_saved(runs, p, err)


@pytest.mark.slow
def test_ctrl_c_of_a_stacked_sweep_of_two_workers_saves_every_run_and_resumes(tmp_path, data_root):
    """``hydra/launcher=stacked hydra.launcher.n_jobs=2`` with two runs that cannot stack (bn=true, bn=false: two
    lone-run stacks in two loky workers): one Ctrl-C to the whole process group leaves both runs
    ``interrupted`` with the checkpoint of their step, no traceback; the same command again resumes both.

    (The stacked launcher was not among the launchers of :class:`bnexp.runfolders.sweepsignals.SweepSignals`: the
    launching process took the SIGINT as a KeyboardInterrupt and joblib killed the workers still saving.)"""
    sweep = tmp_path / "sweep"
    exe = Path(sys.executable).with_name("bnexp")
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120")
    # wide layers: a checkpoint takes long enough to write that killing a worker early would show
    args = [str(exe), "train", "-m", "hydra/launcher=stacked", "hydra.launcher.n_jobs=2", "bn=true,false",
            "model.hidden=[1500,1500,1500]", "trainer.progress=false", "trainer.num_threads=1",
            "trainer.eval_every=100000", "trainer.hist_every=100000", "trainer.probe_size=100",
            "trainer.max_steps=100000", "trainer.ckpt_every=100000", f"hydra.sweep.dir={sweep}"]
    p = _terminal_job(args, tmp_path, env)
    out, err = _ctrl_c_once_two_workers_train(p, sweep)
    runs = sorted(d for d in sweep.iterdir() if (d / "summary.json").exists())
    assert [d.name for d in runs] == ["bn=false", "bn=true"], (out[-2000:], err[-2000:])
    stopped = _every_run_saved(runs, p, err)
    # the same command again resumes each run from its checkpoint (then one more Ctrl-C, again saved by both)
    p = _terminal_job(args, tmp_path, env)
    try:
        wait_for(lambda: all(f"resumed from the checkpoint at step {stopped[d.name]} " in (d / "train.log").read_text()
                             for d in runs) or p.poll() is not None, timeout=300)
        assert p.poll() is None, p.communicate()[1][-3000:]
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    for d in runs:
        summary = json.loads((d / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["step"] >= stopped[d.name], (d.name, err[-3000:])
        assert torch.load(d / "checkpoint.pt", map_location="cpu", weights_only=False)["step"] == summary["step"]
    assert "Traceback" not in err, err[-3000:]


def test_sweep_workers_wait_only_for_siblings_still_saving(tmp_path, monkeypatch, caplog):
    """wait_for_sweep_siblings: a sibling run folder that is ``running`` under a live lock is waited
    for (until the timeout); one that is interrupted, finished or unlocked is not; outside a sweep
    under SweepSignals nothing is waited for."""
    from bnexp.runfolders import rundir
    from bnexp.runfolders.sweepsignals import SWEEP_ENV, wait_for_sweep_siblings

    sweep = tmp_path / "sweep"
    mine, busy, done = sweep / "seed=0", sweep / "seed=1", sweep / "seed=2"
    for d, status in ((mine, "running"), (busy, "running"), (done, "interrupted")):
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": status}))
    locks = [rundir.RunLock(d) for d in (mine, busy, done)]
    assert all(lock.acquire() for lock in locks)
    try:
        t0 = time.time()
        wait_for_sweep_siblings(mine, timeout_s=0.5)  # no SweepSignals: returns at once
        assert time.time() - t0 < 0.3
        monkeypatch.setenv(SWEEP_ENV, str(sweep))
        t0 = time.time()
        with caplog.at_level("WARNING", logger="bnexp"):
            wait_for_sweep_siblings(mine, timeout_s=0.5, poll_s=0.05)
        assert time.time() - t0 >= 0.5 and "1 run(s) of the sweep" in caplog.text
        (busy / "summary.json").write_text(json.dumps({"status": "interrupted"}))  # it saved
        t0 = time.time()
        wait_for_sweep_siblings(mine, timeout_s=5)
        assert time.time() - t0 < 1
        (busy / "summary.json").write_text(json.dumps({"status": "running"}))
        locks[1].release()  # its process is gone: nothing to wait for
        t0 = time.time()
        wait_for_sweep_siblings(mine, timeout_s=5)
        assert time.time() - t0 < 1
    finally:
        for lock in locks:
            lock.release()


def test_sweep_signals_callback_ignores_sigint_in_a_joblib_launcher_only(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from bnexp.runfolders.sweepsignals import SWEEP_ENV, SweepSignals

    monkeypatch.delenv(SWEEP_ENV, raising=False)
    before = signal.getsignal(signal.SIGINT)
    for target, ignored in (("hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher", True),
                            ("hydra._internal.core_plugins.basic_launcher.BasicLauncher", False)):
        cfg = OmegaConf.create({"hydra": {"launcher": {"_target_": target}, "sweep": {"dir": str(tmp_path)}}})
        cb = SweepSignals()
        cb.on_multirun_start(cfg)
        assert (signal.getsignal(signal.SIGINT) is signal.SIG_IGN) == ignored
        assert (os.environ.get(SWEEP_ENV) == str(tmp_path.resolve())) == ignored
        cb.on_multirun_end(cfg)
        assert signal.getsignal(signal.SIGINT) is before and SWEEP_ENV not in os.environ


def test_stacked_launchers_workers_stop_together_only_around_its_workers(tmp_path, monkeypatch):
    """workers_stop_together (the stacked launcher's loky workers): SIGINT ignored and the sweep named for the
    workers inside, both restored after; in another thread nothing changes."""
    import threading

    from bnexp.runfolders.sweepsignals import SWEEP_ENV, workers_stop_together

    monkeypatch.delenv(SWEEP_ENV, raising=False)
    before = signal.getsignal(signal.SIGINT)
    with workers_stop_together(tmp_path):
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert os.environ[SWEEP_ENV] == str(tmp_path.resolve())
    assert signal.getsignal(signal.SIGINT) is before and SWEEP_ENV not in os.environ
    seen = []

    def other():
        with workers_stop_together(tmp_path):
            seen.append((signal.getsignal(signal.SIGINT), os.environ.get(SWEEP_ENV)))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [(before, None)]


def _ctrl_c_once_two_workers_train(p, sweep: Path) -> tuple[str, str]:
    """Once both workers of the sweep started as process group ``p`` are in their step loop (their step-0 shift
    records written), one Ctrl-C (SIGINT) to the whole group; its (stdout, stderr). Kills the group if it hangs."""
    try:
        wait_for(lambda: len(list(sweep.glob("*/shift.jsonl"))) == 2, timeout=300)
        time.sleep(2)
        os.killpg(p.pid, signal.SIGINT)
        return p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)


def _every_run_saved(runs: list[Path], p, err: str) -> dict[str, int]:
    """Assert that every run folder is ``interrupted`` with the checkpoint of its recorded step and says so in its
    log, that no traceback was printed and the sweep exited non-zero; returns each run's step by folder name."""
    stopped = {}
    for d in runs:
        summary = json.loads((d / "summary.json").read_text())
        assert summary["status"] == "interrupted", (d.name, summary["status"], err[-3000:])
        assert torch.load(d / "checkpoint.pt", map_location="cpu", weights_only=False)["step"] == summary["step"]
        assert "checkpoint saved" in (d / "train.log").read_text()
        stopped[d.name] = summary["step"]
    assert "Traceback" not in err, err[-3000:]
    assert p.returncode != 0
    return stopped
