"""Failure classes, one test per class, with real processes, files and data:

1 no path loses checkpointed work; 2 every config value validated for what can run;
3 datasets checked for content; 4 file-system errors are user errors; 5 non-finite values
mean ``diverged``; 6 strict JSON, file modes, no folder for refused runs; 7 defaults.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bnexp.runfolders import rundir
from bnexp.runfolders.rundir import read_jsonl

from conftest import FAST, REPO, spawn_bnexp, steps_of, strict_json, wait_for

RUN = [*FAST, "trainer.max_steps=900", "trainer.eval_every=100", "trainer.hist_every=100",
       "trainer.ckpt_every=300", "trainer.log_every=50"]


def _kill_after_checkpoint(data_root: Path, tmp_path: Path, run_dir: Path, *extra: str) -> int:
    """Start a run, SIGKILL it after its first checkpoint; returns the checkpoint's step."""
    p = spawn_bnexp(data_root, tmp_path, "train", *RUN, *extra, f"hydra.run.dir={run_dir}")
    wait_for(lambda: (run_dir / "checkpoint.pt").exists())
    wait_for(lambda: len(read_jsonl(run_dir / "metrics.jsonl")) >= 5 or p.poll() is not None)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    assert read_jsonl(run_dir / "metrics.jsonl")[-1]["step"] < 900, "the run finished before it was killed"
    import torch

    return int(torch.load(run_dir / "checkpoint.pt", weights_only=False)["step"])


# ----- 1. no path loses checkpointed work ------------------------------------------------
def test_refused_attempts_and_unreadable_checkpoint_lose_no_work(run_bnexp, bnexp_main, tmp_path, data_root):
    run_dir = tmp_path / "run"
    ckpt_step = _kill_after_checkpoint(data_root, tmp_path, run_dir)
    good = (run_dir / "checkpoint.pt").read_bytes()
    summary = (run_dir / "summary.json").read_bytes()  # as the killed process left it

    # the same command with a different value: refused; with a wrong data root: refused. A refused start
    # writes nothing into the folder (docs/reliability.md, "A run folder holds one configuration"): its
    # summary.json stays as it was, never "failed", and the checkpoint is untouched
    for bad in (["lr=0.5"], [f"data.root={tmp_path / 'nowhere'}"], ["trainer.batch_size=0"]):
        code, err, _ = bnexp_main("train", *RUN, *bad, f"hydra.run.dir={run_dir}")
        assert code == 2, (bad, err)
        assert "Traceback" not in err
        assert (run_dir / "summary.json").read_bytes() == summary, bad
        assert (run_dir / "checkpoint.pt").read_bytes() == good, bad  # untouched

    r = run_bnexp("train", *RUN, f"hydra.run.dir={run_dir}")  # the original command resumes
    assert r.returncode == 0, r.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "finished" and s["resumed_from_step"] == ckpt_step
    assert steps_of(run_dir / "metrics.jsonl") == list(range(0, 901, 100))

    # an unreadable checkpoint: set aside (kept), earlier records cut, the run starts over once
    run2 = tmp_path / "run2"
    _kill_after_checkpoint(data_root, tmp_path, run2)
    (run2 / "checkpoint.pt").write_bytes(b"not a checkpoint" * 100)
    r = run_bnexp("train", *RUN, f"hydra.run.dir={run2}")
    assert r.returncode == 0, r.stderr
    kept = list(run2.glob("checkpoint.unreadable-*.pt"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"not a checkpoint" * 100
    assert "unreadable" in (run2 / "train.log").read_text()
    assert steps_of(run2 / "metrics.jsonl") == list(range(0, 901, 100))  # nothing twice
    assert steps_of(run2 / "shift.jsonl") == list(range(0, 901, 100))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run2), size_guidance={"scalars": 0})
    ea.Reload()
    assert [e.step for e in ea.Scalars("Test/accuracy")] == list(range(0, 901, 100))


def test_refused_attempt_never_overwrites_a_complete_summary(run_bnexp, bnexp_main, tmp_path):
    run_dir = tmp_path / "done"
    short = [*FAST, "trainer.max_steps=100", "trainer.eval_every=50", "trainer.hist_every=50"]
    r = run_bnexp("train", *short, f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    done = (run_dir / "summary.json").read_bytes()
    assert json.loads(done)["status"] == "finished"
    # refused (invalid values): exit 2, one message; the complete summary.json stays byte for byte
    for bad in (["trainer.batch_size=0"], ["lr=nan"], ["+trainer.max_step=10"]):
        code, err, _ = bnexp_main("train", *short, *bad, f"hydra.run.dir={run_dir}")
        assert code == 2 and "Traceback" not in err, (bad, err)
        assert (run_dir / "summary.json").read_bytes() == done, bad
    # an attempt failing after the completeness check (another process finished the run meanwhile)
    from bnexp import cli
    from bnexp.config.schema import compose_config

    cli._record_failure(run_dir, compose_config([]), "OSError: disk full", "Traceback ...")
    assert (run_dir / "summary.json").read_bytes() == done
    # a run without a complete summary is still recorded as failed
    other = tmp_path / "other"
    other.mkdir()
    cli._record_failure(other, compose_config([]), "boom", None)
    assert json.loads((other / "summary.json").read_text())["status"] == "failed"


def test_rundir_cut_records_after(tmp_path):
    for name in rundir.RECORD_FILES:
        rundir.write_jsonl(tmp_path / name, [{"step": s} for s in (0, 100, 200, 300)])
    (tmp_path / "events.out.tfevents.1.x").write_bytes(b"x")
    assert rundir.cut_records_after(tmp_path, 100) == 6
    assert steps_of(tmp_path / "metrics.jsonl") == [0, 100]
    assert (tmp_path / "events.out.tfevents.1.x").exists()
    rundir.cut_records_after(tmp_path, -1)
    assert steps_of(tmp_path / "ics.jsonl") == [] and not list(tmp_path.glob("events.*"))


# ----- 2. every config value validated for what can run ----------------------------------
@pytest.mark.parametrize("overrides,needle", [
    (["+trainer.max_step=10"], "Did you mean trainer.max_steps?"),  # Hydra's own suggestion, with a typo
    (["trainer.max_step=10"], "Did you mean trainer.max_steps?"),
    (["+lrr=0.1"], "Did you mean lr?"),
    (["model=cnn", "model.hidden=[10]"], "model=cnn has no such key"),
    (["lr=inf"], "lr=inf: must be a finite number"),
    (["lr=nan"], "lr=nan: must be a finite number"),
    (["lr=1e39"], "overflows float32"),
    (["seed=99999999999999999999"], "seed"),
    (["trainer.max_steps=100000000000000000000"], "overflows a 64-bit integer"),
    (["bn.eps=1e-50"], "bn.eps"),
    (["model.hidden=[100000000]"], "GiB of memory"),
    (["trainer.batch_size=1000000"], "training-set size"),
    (["monitor.percentiles=[]"], "monitor.percentiles"),
    (["trainer.targets=[]"], "trainer.targets"),
    (["model=cnn", "model.channels=[4,4,4,4,4]"], "too many for 28x28"),
    (["model=cnn", "model.fc=4", "monitor.unit=4"], "monitor.unit"),
])
def test_invalid_config_is_one_message_exit_2_and_no_run_folder(bnexp_main, tmp_path, overrides, needle):
    run_dir = tmp_path / "runs" / "bad"
    code, err, out = bnexp_main("train", *FAST, *overrides, f"hydra.run.dir={run_dir}")
    assert code == 2, (out, err)
    assert needle in " ".join(err.split()), err
    assert "Traceback" not in err and err.count("error") == 1, err  # printed once
    assert not run_dir.exists()  # validation comes before the run folder


# ----- 3. every dataset checked for content -----------------------------------------------
def test_dataset_content_is_checked_naming_the_file(run_bnexp, tmp_path, data_root):
    root = tmp_path / "data"
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in (data_root / "MNIST" / "raw").glob("*-ubyte"):
        shutil.copy(f, raw / f.name)
    labels = raw / "t10k-labels-idx1-ubyte"
    data = bytearray(labels.read_bytes())
    data[8 + 1234] = 11  # one label outside 0..9, same size and header
    labels.write_bytes(bytes(data))
    r = run_bnexp("train", *FAST, f"data.root={root}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = " ".join(r.stderr.split())
    assert "t10k-labels-idx1-ubyte" in msg and "label 11 is at position 1234" in msg
    assert not (tmp_path / "r").exists()

    # CIFAR-10 batches of the wrong pixel type or with bad labels (read without checksums)
    from bnexp.nets.datasets import CIFAR_FOLDER, _read_cifar_batch
    from bnexp.errors import DataError

    batch = tmp_path / CIFAR_FOLDER / "data_batch_1"
    batch.parent.mkdir()
    good = {"data": np.zeros((10000, 3072), np.uint8), "labels": [3] * 10000}
    for entry, needle in [({**good, "data": np.full((10000, 3072), 300.0)}, "pixels of type float64"),
                          ({**good, "labels": [3] * 9999 + [10]}, "label 10 is at position 9999")]:
        batch.write_bytes(pickle.dumps(entry))
        with pytest.raises(DataError, match=needle) as e:
            _read_cifar_batch(tmp_path, batch.name)
        assert str(batch) in str(e.value)
    batch.write_bytes(pickle.dumps(good))
    x, y = _read_cifar_batch(tmp_path, batch.name)
    assert x.shape == (10000, 3, 32, 32) and int(y.max()) == 3


# ----- 4. file-system errors are user errors ----------------------------------------------
def test_full_disk_during_jsonl_append_is_a_user_error_and_resumable(run_bnexp, tmp_path, data_root):
    run_dir = tmp_path / "run"
    p = spawn_bnexp(data_root, tmp_path, "train", *RUN, f"hydra.run.dir={run_dir}")
    wait_for(lambda: (run_dir / "checkpoint.pt").exists())
    # the disk fills up: every later write to metrics.jsonl fails with ENOSPC (/dev/full)
    link = run_dir / ".full"
    os.symlink("/dev/full", link)
    os.replace(link, run_dir / "metrics.jsonl")
    out, err = p.communicate(timeout=300)
    err1 = " ".join(err.split())
    assert p.returncode == 2, err
    assert "Traceback" not in err and f"could not write {run_dir / 'metrics.jsonl'}" in err1
    assert "disk" in err1 and "resume from the last checkpoint" in err1
    assert f"Resume this run with: bnexp train" in err1 and f"hydra.run.dir={run_dir}" in err1  # the exact command
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "interrupted" and "metrics.jsonl" in s["error"]  # recorded, still resumable
    (run_dir / "metrics.jsonl").unlink()  # space freed
    r = run_bnexp("train", *RUN, f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


def test_name_too_long_is_a_user_error(run_bnexp, tmp_path):
    r = run_bnexp("train", *FAST, f"hydra.run.dir={tmp_path / ('x' * 300)}")
    assert r.returncode == 2 and "too long" in r.stderr and "Traceback" not in r.stderr


def test_output_error_messages_name_path_and_fix():
    import errno

    from bnexp.errors import OutputError

    e = OutputError("/out/run/summary.json", OSError(errno.ENOSPC, "No space left on device"), resumable=True)
    assert "/out/run/summary.json" in str(e) and "free disk space" in str(e) and "resume from the last checkpoint" in str(e)
    assert "hydra.run.dir" in str(e)  # a plain re-run starts a new folder
    e = OutputError("/ro/run", OSError(errno.EROFS, "Read-only file system"))
    assert "not writable" in str(e) and "hydra.run.dir=PATH" in str(e)


# ----- 5. non-finite values mean diverged --------------------------------------------------
def test_nonfinite_measurement_means_diverged_with_step(bnexp_train, tmp_path):
    run_dir = tmp_path / "run"
    # the loss is checked every 100 steps only; the monitor (every 5) meets the inf first
    run = ["lr=1e6", "bn=false", "act=relu", "model.init_std=0.1", "trainer.max_steps=200", "trainer.eval_every=100",
           "trainer.hist_every=5", "trainer.log_every=100"]
    _, s = bnexp_train(run_dir, *run)
    assert s["status"] == "diverged" and 1 <= s["diverged_step"] < 100 and s["diverged_step"] % 5 == 0
    assert "non-finite pre-activations" in (run_dir / "train.log").read_text()
    # a re-run of the same command skips it (complete), instead of retrying a failure
    r, _ = bnexp_train(run_dir, *run)
    assert "skipped" in r.stdout + r.stderr


def test_monitor_raises_diverged_on_inf():
    import torch

    from bnexp.config.schema import compose_config
    from bnexp.errors import Diverged
    from bnexp.nets.models import build_model, hidden_layers
    from bnexp.train.monitor import ShiftMonitor

    cfg = compose_config(["bn=false"])
    model = build_model(cfg, (1, 28, 28), 10)
    mon = ShiftMonitor(model, torch.rand(50, 1, 28, 28), [15, 50, 85])
    mon.record(0)
    with torch.no_grad():
        hidden_layers(model)[0][1].affine.weight.fill_(float("inf"))
    with pytest.raises(Diverged) as e:
        mon.record(7)
    assert e.value.step == 7 and len(mon.history) == 1


@pytest.mark.slow  # loads MNIST and starts a run in this process
def test_divergence_at_step_0_is_diverged_with_step_0(tmp_path, data_root, monkeypatch):
    """A non-finite pre-activation already at step 0 (a measurement taken before the first update)."""
    import torch

    from bnexp.config.schema import compose_config
    from bnexp.nets.models import hidden_layers
    from bnexp.train.trainer import Trainer

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    cfg = compose_config(["bn=false", "trainer.progress=false", "trainer.num_threads=1", "trainer.max_steps=50",
                          f"data.root={data_root}"])
    threads = torch.get_num_threads()  # the Trainer sets torch's process-wide thread count
    try:
        tr = Trainer(cfg, tmp_path)
        with torch.no_grad():
            hidden_layers(tr.model)[1][1].affine.weight.fill_(float("inf"))
        s = tr.run()
    finally:
        torch.set_num_threads(threads)
    assert s["status"] == "diverged" and s["diverged_step"] == 0 and s["step"] == 0
    assert strict_json((tmp_path / "summary.json").read_text())["diverged_step"] == 0
    assert steps_of(tmp_path / "metrics.jsonl") == [0] and steps_of(tmp_path / "shift.jsonl") == []


# ----- 6. outputs: strict JSON, file modes ------------------------------------------------
def test_outputs_are_strict_json_with_umask_modes(bnexp_train, tmp_path):
    run_dir = tmp_path / "run"
    bnexp_train(run_dir, "trainer.max_steps=100", "trainer.eval_every=50", "trainer.hist_every=50")  # strict summary
    for name in ("summary.json", "config.yaml", "checkpoint.pt", "metrics.jsonl", "percentiles.png"):
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o666 & ~rundir.current_umask(), name
    for name in ("metrics.jsonl", "shift.jsonl"):
        for line in (run_dir / name).read_text().splitlines():
            strict_json(line)
    # non-finite numbers become null; the umask is respected
    old = os.umask(0o027)
    try:
        rundir.write_json(tmp_path / "x.json", {"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    finally:
        os.umask(old)
    assert strict_json((tmp_path / "x.json").read_text()) == {"a": None, "b": [None, 1.5], "c": {"d": None}}
    assert stat.S_IMODE((tmp_path / "x.json").stat().st_mode) == 0o640


# ----- 7. defaults that hold up -------------------------------------------------------------
def test_thread_default_is_one_for_the_paper_mlp():
    from bnexp.config.schema import compose_config
    from bnexp.config.resources import default_num_threads, step_flops, torch_default_threads

    mlp = compose_config([])
    # paper MLP: 6 x 60 x (784*100 + 100*100 + 100*100 + 100*10) multiply-adds
    assert step_flops(mlp) == 6 * 60 * (784 * 100 + 2 * 100 * 100 + 100 * 10)
    assert default_num_threads(mlp) == 1
    assert default_num_threads(compose_config(["trainer.num_threads=3"])) == 3
    # the default CNN (about 1.5e9 FLOPs per step) keeps torch's own default
    assert step_flops(compose_config(["model=cnn"])) > 1e9
    # (torch's default as first seen: earlier runs in this process may have set 1 thread since)
    assert default_num_threads(compose_config(["model=cnn"])) == torch_default_threads() >= 1


def test_sweep_with_a_failed_job_finishes_the_rest_and_exits_nonzero(run_bnexp, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_bnexp("train", "-m", "trainer.batch_size=0,60", *FAST, "trainer.max_steps=50",
                  "trainer.eval_every=50", "trainer.hist_every=50", f"hydra.sweep.dir={sweep}",
                  env_extra={"COLUMNS": "60"})
    assert r.returncode == 1, r.stderr
    done = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    assert [s["status"] for s in done] == ["finished"]
    assert "1 job(s) of the sweep failed" in r.stderr and "trainer.batch_size=0" in r.stderr
    # the sweep's table names the finished run whole, and the report command holds the sweep folder whole,
    # even in a narrow terminal
    table = r.stdout[r.stdout.index("bnexp sweep: 1 run(s)"):]
    assert [line.split()[:2] for line in table.splitlines() if "trainer.batch_size=60" in line] == [
        ["trainer.batch_size=60", "finished"]]
    assert f"bnexp report {sweep}" in r.stdout


def test_quick_reproduction_writes_its_own_sweep_folder(tmp_path):
    """Extra overrides name the sweep folder (a quick reproduction never writes into the full one's): the
    suffix is the overrides joined, a long one cut to 69 characters and 10 hex digits of its SHA-1."""
    import hashlib

    from bnexp.designs.preflight import sweep_suffix

    assert sweep_suffix([]) == "" and sweep_suffix(["trainer.max_steps=2000", "seed=0"]) == \
        "+trainer.max_steps=2000,seed=0"
    long = "x=" + "y" * 200
    assert sweep_suffix([long]) == "+" + long[:69] + "_" + hashlib.sha1(long.encode()).hexdigest()[:10]
    assert sweep_suffix(["a=é"]) == "+a=__"  # each byte outside the safe set: two for this letter
