"""Fault injection: SIGKILL + resume is bit-identical, SIGTERM, sweep re-runs, divergence,
corrupt data, unwritable outputs, full disk."""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bnexp.runfolders import rundir
from bnexp.runfolders.rundir import read_jsonl

from conftest import FAST, spawn_bnexp, wait_for

SHORT = [*FAST, "trainer.max_steps=3000", "trainer.eval_every=250", "trainer.hist_every=500",
         "trainer.ckpt_every=1000", "trainer.log_every=50"]


def _strip_wall(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time_s"} for r in records]


def _final_state(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoint.pt", weights_only=False)


@pytest.mark.parametrize("extra", [
    [],
    # noisy BN (its own noise generator) and the ICS probes (copies of the model, RNG restored)
    ["bn=noisy", "monitor.grad_ics=true", "monitor.landscape=true", "monitor.grad_ics_every=700",
     "monitor.landscape_every=900"],
], ids=["bn", "noisy_bn_with_probes"])
def test_sigkill_and_resume_is_bit_identical(run_bnexp, tmp_path, data_root, extra):
    args = [*SHORT, *extra]
    ref = tmp_path / "reference"
    r = run_bnexp("train", *args, f"hydra.run.dir={ref}")
    assert r.returncode == 0, r.stderr

    killed = tmp_path / "killed"
    p = spawn_bnexp(data_root, tmp_path, "train", *args, f"hydra.run.dir={killed}")
    # kill at an arbitrary step after the first checkpoint (step 1000), before the end
    wait_for(lambda: (killed / "checkpoint.pt").exists())
    wait_for(lambda: len(read_jsonl(killed / "metrics.jsonl")) >= 7)  # past step 1500
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    partial = read_jsonl(killed / "metrics.jsonl")
    assert partial[-1]["step"] < 3000, "the run finished before it could be killed"
    assert json.loads((killed / "summary.json").read_text())["status"] == "running"

    r = run_bnexp("train", *args, f"hydra.run.dir={killed}")  # re-run in the same run directory
    assert r.returncode == 0, r.stderr
    s = json.loads((killed / "summary.json").read_text())
    assert s["status"] == "finished" and s["resumed_from_step"] == 1000

    a, b = _final_state(ref), _final_state(killed)
    assert a["step"] == b["step"] == 3000
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key  # bit-identical weights and BN buffers
    assert _strip_wall(read_jsonl(ref / "metrics.jsonl")) == _strip_wall(read_jsonl(killed / "metrics.jsonl"))
    assert read_jsonl(ref / "shift.jsonl") == read_jsonl(killed / "shift.jsonl")
    assert read_jsonl(ref / "ics.jsonl") == read_jsonl(killed / "ics.jsonl")
    s_ref = json.loads((ref / "summary.json").read_text())
    for k in ("final_test_accuracy", "best_test_accuracy", "steps_to_target", "final_test_loss"):
        assert s_ref[k] == s[k], k

    # TensorBoard: no duplicated or missing points after the purge at the checkpoint
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(killed), size_guidance={"scalars": 0})
    ea.Reload()
    steps = [e.step for e in ea.Scalars("Test/accuracy")]
    assert steps == list(range(0, 3001, 250))
    ref_vals = {e.step: e.value for e in EventAccumulator(str(ref)).Reload().Scalars("Test/accuracy")}
    assert {e.step: e.value for e in ea.Scalars("Test/accuracy")} == ref_vals


def test_sigterm_saves_checkpoint_records_interrupted_and_resumes(run_bnexp, tmp_path, data_root):
    run_dir = tmp_path / "run"
    args = ["train", *FAST, "trainer.max_steps=6000", "trainer.eval_every=500", "trainer.ckpt_every=100000",
            f"hydra.run.dir={run_dir}"]
    p = spawn_bnexp(data_root, tmp_path, *args)
    wait_for(lambda: len(read_jsonl(run_dir / "metrics.jsonl")) >= 2)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "interrupted" and 500 <= s["step"] < 6000
    state = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert state["step"] == s["step"]  # the checkpoint is taken at the interruption
    assert "interrupted" in err and "Traceback" not in err
    r = run_bnexp(*args)  # the same command resumes and finishes
    assert r.returncode == 0, r.stderr
    s2 = json.loads((run_dir / "summary.json").read_text())
    assert s2["status"] == "finished" and s2["step"] == 6000 and s2["resumed_from_step"] == s["step"]
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == list(range(0, 6001, 500))


def test_sweep_interrupted_then_rerun_does_only_the_rest(run_bnexp, tmp_path, data_root):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "seed=0,1,2", *FAST, "trainer.max_steps=1500", "trainer.eval_every=500",
            "trainer.hist_every=500", "trainer.ckpt_every=500", f"hydra.sweep.dir={sweep}"]
    p = spawn_bnexp(data_root, tmp_path, *args)
    wait_for(lambda: any(rundir.is_complete(d) for d in sweep.glob("seed=*")) if sweep.exists() else False)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    done_before = {d.name: (d / "summary.json").stat().st_mtime_ns for d in sweep.glob("seed=*")
                   if rundir.is_complete(d)}
    assert 1 <= len(done_before) < 3
    r = run_bnexp(*args)
    assert r.returncode == 0, r.stderr
    dirs = sorted(sweep.glob("seed=*"))
    assert len(dirs) == 3 and all(rundir.is_complete(d) for d in dirs)
    for name, mtime in done_before.items():  # finished runs are never overwritten
        assert (sweep / name / "summary.json").stat().st_mtime_ns == mtime
    assert r.stdout.count("skipped") + r.stderr.count("skipped") == len(done_before)


def test_diverging_run_is_recorded_and_the_sweep_goes_on(run_bnexp, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_bnexp("train", "-m", "lr=1000,0.1", "bn=false", "act=relu", "model.init_std=0.1", *FAST,
                  "trainer.max_steps=400",
                  "trainer.eval_every=100", "trainer.hist_every=100", "trainer.log_every=10",
                  f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr
    by_lr = {json.loads(p.read_text())["lr"]: json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}
    assert by_lr[1000.0]["status"] == "diverged"
    assert 1 <= by_lr[1000.0]["diverged_step"] <= 400
    assert by_lr[0.1]["status"] == "finished"
    d = next(p.parent for p in sweep.glob("*/summary.json") if json.loads(p.read_text())["lr"] == 1000.0)
    assert read_jsonl(d / "metrics.jsonl")[0]["step"] == 0  # its logs are kept


@pytest.mark.parametrize("override,needle", [
    ("trainer.eval_every=0", "trainer.eval_every"),
    ("trainer.hist_every=0", "trainer.hist_every"),
    ("trainer.ckpt_every=0", "trainer.ckpt_every"),
    ("model.hidden=[100,0]", "model.hidden"),
    ("model.init_std=-1", "model.init_std"),
    ("monitor.unit=100", "monitor.unit"),
    ("bn.momentum=0", "bn.momentum"),
    ("optim.momentum=1.5", "optim.momentum"),
    ("data.augment=wild", "data.augment"),
    ("trainer.batch_size=0", "trainer.batch_size"),
])
def test_more_invalid_values_exit_2(bnexp_main, tmp_path, override, needle):
    code, err, out = bnexp_main("train", *FAST, override, f"hydra.run.dir={tmp_path / 'bad'}")
    assert code == 2, (out, err)
    assert needle in err and "Traceback" not in err


def _mnist_copy(data_root: Path, dest: Path) -> Path:
    raw = dest / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in (data_root / "MNIST" / "raw").iterdir():
        if f.name in rundir_names():
            shutil.copy(f, raw / f.name)
    return raw


def rundir_names():
    from bnexp.nets.datasets import MNIST_FILES

    return set(MNIST_FILES)


@pytest.mark.parametrize("damage,needle", [
    ("truncate", "truncated"),
    ("header", "bad IDX header"),
    ("delete", "missing"),
])
def test_corrupt_mnist_copy_stops_before_training(bnexp_main, tmp_path, data_root, damage, needle):
    """(In this process; a missing dataset through the console script: test_cli.py)"""
    root = tmp_path / "data"
    raw = _mnist_copy(data_root, root)
    target = raw / "train-images-idx3-ubyte"
    if damage == "truncate":
        with open(target, "r+b") as f:
            f.truncate(target.stat().st_size - 784 * 10)
    elif damage == "header":
        with open(target, "r+b") as f:
            f.write(b"\x00\x00\x09\x99")
    else:
        target.unlink()
    code, err, _ = bnexp_main("train", *FAST, f"data.root={root}", f"hydra.run.dir={tmp_path / 'r'}")
    assert code == 2
    assert "train-images-idx3-ubyte" in err and needle in err and "Traceback" not in err
    assert not (tmp_path / "r" / "metrics.jsonl").exists()  # no training happened


def test_unwritable_output_location(run_bnexp, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    r = run_bnexp("train", *FAST, f"hydra.run.dir={blocker / 'run'}")
    assert r.returncode == 2 and "cannot create the output folder" in r.stderr and "Traceback" not in r.stderr


EMPTY = "{key} is empty ({arg!r}"  # the start of the refusal, after "bnexp: error: "
TILDE = "~ is not expanded in {key}"  # and "{key}=$HOME" in it


@pytest.mark.parametrize("args, expected", [
    (["hydra.run.dir="], EMPTY), (["hydra.run.dir= "], EMPTY), (['hydra.run.dir=""'], EMPTY),
    (["-m", "seed=0,1", "hydra.sweep.dir="], EMPTY),
    (['hydra.run.dir="~/bnexp_run"'], TILDE), (["-m", "seed=0,1", "hydra.sweep.dir='~'"], TILDE)])
def test_an_output_folder_override_that_names_no_usable_folder_is_refused(run_bnexp, tmp_path, args, expected):
    """An empty hydra.run.dir / hydra.sweep.dir (an unset shell variable: hydra.run.dir=$RUN) would make the current
    folder the run folder; a quoted ~ in them is expanded by nobody (not the shell after =, not Hydra), so the run
    would write into a folder named ~ in the current folder. One line naming the key (for ~, with the $HOME form),
    exit 2, and the current folder stays empty."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    r = run_bnexp("train", *FAST, "trainer.max_steps=2", *args, cwd=cwd)
    key = args[-1].split("=")[0]
    lines = [line for line in (r.stderr + r.stdout).splitlines() if line.strip()]
    assert r.returncode == 2, r.stderr[-3000:]
    assert len(lines) == 1, lines
    if expected == EMPTY:
        assert lines[0].startswith("bnexp: error: " + EMPTY.format(key=key, arg=args[-1])), lines
    else:
        assert TILDE.format(key=key) in lines[0] and f"{key}=$HOME" in lines[0], lines
    assert list(cwd.iterdir()) == []


@pytest.mark.slow  # loads MNIST and builds a trainer in this process
def test_full_disk_keeps_the_previous_checkpoint(tmp_path, data_root, monkeypatch):
    from bnexp.config.schema import compose_config
    from bnexp.errors import UserError
    from bnexp.train.trainer import Trainer

    cfg = compose_config([f"data.root={data_root}", *FAST, "trainer.max_steps=20"])
    tr = Trainer(cfg, tmp_path)
    tr.save_checkpoint()
    good = (tmp_path / "checkpoint.pt").read_bytes()
    tr.step = 7

    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", no_space)
    with pytest.raises(UserError, match="No space left on device.*previous checkpoint is intact"):
        tr.save_checkpoint()
    assert (tmp_path / "checkpoint.pt").read_bytes() == good
    assert not list(tmp_path.glob(".checkpoint.pt.*.tmp"))  # the partial temporary file is removed


def test_run_directory_lock_keeps_a_second_process_out(tmp_path):
    lock = rundir.RunLock(tmp_path)
    assert lock.acquire()
    code = ("import sys; from bnexp.runfolders.rundir import RunLock; "
            f"sys.exit(0 if not RunLock({str(tmp_path)!r}).acquire() else 1)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    lock.release()
    assert subprocess.run([sys.executable, "-c", code]).returncode == 1


@pytest.mark.slow
def test_ctrl_c_prints_the_command_that_resumes_the_same_run(run_bnexp, tmp_path, data_root):
    """Ctrl-C of a run in the default, timestamped folder: the printed command (not a plain re-run, which
    would start a new folder) resumes that folder and ends at the accuracy of an uninterrupted run."""
    import re
    import shlex

    args = ["train", *FAST, "bn=false", "seed=4", "trainer.max_steps=6000", "trainer.eval_every=500",
            "trainer.ckpt_every=100000"]
    p = spawn_bnexp(data_root, tmp_path, *args)
    wait_for(lambda: any(len(read_jsonl(m)) >= 2 for m in (tmp_path / "outputs").glob("runs/*/metrics.jsonl")))
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    stopped = json.loads((run_dir / "summary.json").read_text())
    assert stopped["status"] == "interrupted" and stopped["step"] < 6000
    m = re.search(r"Resume this run with: (.+)$", err, re.MULTILINE)
    assert m, err
    command = shlex.split(m.group(1))
    assert command[:2] == ["bnexp", "train"] and f'hydra.run.dir="{run_dir.absolute()}"' in command
    r = run_bnexp(*command[1:], cwd=tmp_path / "outputs")  # from another folder: the path is absolute
    assert r.returncode == 0, r.stderr
    assert [d.name for d in (tmp_path / "outputs" / "runs").iterdir()] == [run_dir.name]  # no new folder
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] == stopped["step"]
    whole = run_bnexp(*args, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr
    expected = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert resumed["final_test_accuracy"] == expected["final_test_accuracy"]
    # every evaluation and the final weights, not only the last accuracy (this plain net is still near chance)
    records = [_strip_wall(read_jsonl(d / "metrics.jsonl")) for d in (run_dir, tmp_path / "whole")]
    assert records[0] == records[1]
    a, b = _final_state(run_dir)["model"], _final_state(tmp_path / "whole")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_ctrl_c_of_a_sweep_prints_the_command_that_resumes_the_whole_sweep(run_bnexp, tmp_path, data_root):
    """Ctrl-C of a sweep: the printed command is the sweep's (its overrides, ``-m`` and hydra.sweep.dir), not one
    job's; run from another folder it finishes every job, the interrupted one from its checkpoint."""
    import re
    import shlex

    sweep = tmp_path / "my sweep"
    args = ["train", "-m", "bn=true,false", "seed=3", *FAST, "trainer.max_steps=4000", "trainer.eval_every=500",
            "trainer.ckpt_every=100000", f"hydra.sweep.dir={sweep}"]
    p = spawn_bnexp(data_root, tmp_path, *args)
    wait_for(lambda: any(len(read_jsonl(m)) >= 2 for m in sweep.glob("*/metrics.jsonl")))
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode != 0
    m = re.search(r"Resume the sweep with: (.+)$", err, re.MULTILINE)
    assert m, err
    command = shlex.split(m.group(1))
    assert command[:3] == ["bnexp", "train", "-m"] and "bn=true,false" in command
    assert f'hydra.sweep.dir="{sweep.absolute()}"' in command and not any("hydra.mode" in c for c in command)
    stopped = {d.name: json.loads((d / "summary.json").read_text()) for d in sweep.iterdir() if d.is_dir()}
    assert any(s["status"] == "interrupted" for s in stopped.values()), stopped
    (tmp_path / "elsewhere").mkdir()
    r = run_bnexp(*command[1:], cwd=tmp_path / "elsewhere")
    assert r.returncode == 0, r.stderr
    done = {d.name: json.loads((d / "summary.json").read_text()) for d in sweep.iterdir() if d.is_dir()}
    assert sorted(done) == ["bn=false", "bn=true"] and all(s["status"] == "finished" for s in done.values())
    assert any(s.get("resumed_from_step") for s in done.values())
    assert not list((tmp_path / "elsewhere").rglob("summary.json"))  # nothing started outside the sweep
