"""The sweep scripts' orchestrator (bnexp/designs/orchestrate.py, preflight.py, bnexp/runfolders/supervise.py):
every input checked once before anything runs, DRY_RUN's commands are the ones that run, a refused block
stops the script, and SIGINT/SIGTERM stop every process the script started (real process trees), record
the runs ``interrupted`` with their checkpoints, and the same command resumes them.

The in-process tests replace :meth:`Supervisor.run` by a recorder, so they start no process."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from bnexp.designs import orchestrate
from bnexp.runfolders import supervise

from conftest import REPO, shell_words, wait_for

SCRIPT_ENV = ("JOBS", "DRY_RUN", "SWEEP_DIR", "DOCS_DIR", "SEEDS", "LADDER", "SCALE", "PRESETS", "NOISE_SCALES",
              "CIFAR_OVERRIDES", "MNIST_DIR", "CIFAR_DIR", "MNIST_DOCS_DIR", "CIFAR_DOCS_DIR", "LAUNCHER",
              "VERIFY_CHECKSUMS", "STEPS_PER_S", "STEPS_PER_S_BN", "STEPS_PER_S_NO_BN", "STARTUP_S",
              "EVALUATION_SEEDS", "MNIST_TUNING_DIR", "PRECISION")


@pytest.fixture
def script(tmp_path, monkeypatch, capsys, data_root):
    """``script(NAME, *args, **env)`` -> (exit code, stdout, stderr, the commands run): the orchestrator in this
    process, in tmp_path, with only ``env`` of the scripts' variables set, and :meth:`Supervisor.run` recording
    each command and answering the next of ``codes`` (default 0), after calling ``on_command(n)`` (n: the
    commands run so far) when given."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    monkeypatch.setenv("BNEXP_LAST_OVERRIDE_WINS", "1")

    def run(name, *args, codes=(), signal_at=None, on_command=None, on_beat=None, **env):
        for key in SCRIPT_ENV:
            monkeypatch.delenv(key, raising=False)
        for key, value in {"JOBS": "2", **env}.items():
            monkeypatch.setenv(key, value)
        ran, answers = [], list(codes)

        def fake(self, command, env=None, watch=None, heartbeat=None):
            ran.append(list(command))
            if on_command is not None:
                on_command(len(ran))
            if heartbeat is not None:  # once, as a command's minute would call it
                heartbeat()
                if on_beat is not None:
                    on_beat(len(ran))
            if signal_at is not None and len(ran) == signal_at:
                self.signum = int(signal.SIGTERM)
                return self.exit_code
            return answers.pop(0) if answers else 0

        monkeypatch.setattr(supervise.Supervisor, "run", fake)
        code = orchestrate.main([name, *args])
        out = capsys.readouterr()
        return code, out.out, out.err, ran

    return run


def trains(commands):
    return [c for c in commands if "train" in c]


SMALL = ("trainer.max_steps=300", "seed=1", "lr=0.12")


@pytest.mark.parametrize("name, args, env", [
    ("mnist", SMALL, {"SWEEP_DIR": "m"}),
    ("study", ("depth", "trainer.max_steps=20", "seed=0", "lr=3.6"), {"SWEEP_DIR": "d"}),
    pytest.param("ics", ("trainer.max_steps=20", "seed=0", "lr=0.12"),
                 {"MNIST_DIR": "im", "CIFAR_DIR": "ic", "NOISE_SCALES": "1,3", "VERIFY_CHECKSUMS": "false"},
                 marks=pytest.mark.slow),  # composes every block's configs twice: over the fast tier's 2.5 s of CPU
    ("cifar", (), {"SWEEP_DIR": "c", "SEEDS": "0", "VERIFY_CHECKSUMS": "false"}),
])
def test_dry_run_prints_exactly_the_commands_that_run(script, tmp_path, name, args, env):
    """The ``$`` lines of DRY_RUN=1, read as a shell reads them, are the train commands the same call then runs
    (the CIFAR-10 ladder: its first batch), and DRY_RUN writes nothing."""
    code, out, err, ran = script(name, *args, DRY_RUN="1", **env)
    assert code == 0 and ran == [], err
    printed = [shell_words(line[2:]) for line in out.splitlines() if line.startswith("$ ")]
    assert printed and list(tmp_path.iterdir()) == []
    assert not re.search(r"\b(inf|nan)\b", out, re.IGNORECASE)
    code, out, err, ran = script(name, *args, **env)
    assert trains(ran)[:len(printed)] == printed
    if name != "cifar":  # the ladder decides its next batch from the results (none here)
        assert trains(ran) == printed and code == 0, err
    assert [c[c.index("report") + 1:] for c in ran if "report" in c][0] == [env.get("SWEEP_DIR", env.get("MNIST_DIR"))]


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
def test_ics_plan_leaves_out_the_complete_runs(script, tmp_path):
    """The ICS study's plan counts each run once and leaves out a run whose folder (named by the design's
    coordinates in the MNIST part, by the block's swept keys in the CIFAR-10 part, as the real sweep names them)
    holds a finished run: its estimate is that of the runs left."""
    args = ("trainer.max_steps=20", "seed=0", "lr=0.12")
    env = dict(MNIST_DIR="im", CIFAR_DIR="ic", NOISE_SCALES="1,3", DRY_RUN="1")
    code, out, err, ran = script("ics", *args, **env)
    assert "MNIST part, BN: 1 runs of 20 steps, 1 to run" in out and "noisy BN: 2 runs of 20 steps, 2 to run" in out
    assert "CIFAR-10 part, BN and no BN: 2 runs" in out
    for name in ("im/bn=true,lr=0.12,seed=0", "im/bn=noisy,noise_scale=3.0,lr=0.12,seed=0", "ic/bn=true"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": "finished"}))
    code, out, err, ran = script("ics", *args, **env)
    assert code == 0 and "MNIST part, BN: 1 runs of 20 steps, 0 to run" in out, out
    assert "MNIST part, noisy BN: 2 runs of 20 steps, 1 to run" in out and "bn=noisy,noise_scale=3.0,lr=0.12,seed=0  (done)" in out
    assert "CIFAR-10 part, BN and no BN: 2 runs of 20 steps, 1 to run" in out
    # a block whose every run is complete is not launched: DRY_RUN names one command fewer
    def cifar_commands(text):
        return [ln for ln in text.split("CIFAR-10 part: the planned runs")[1].splitlines() if ln.startswith("$ ")]

    assert len(cifar_commands(out)) == 3
    (tmp_path / "ic/bn=false").mkdir(parents=True)
    (tmp_path / "ic/bn=false/summary.json").write_text(json.dumps({"status": "finished"}))
    code, out, err, ran = script("ics", *args, **env)
    assert "CIFAR-10 part, BN and no BN: 2 runs of 20 steps, 0 to run" in out
    left = cifar_commands(out)
    assert len(left) == 2 and all("bn=noisy" in c or "optim.schedule=constant" in c for c in left), left
    # the constant-rate block names its run folders by its own subdir pattern, not by the plain block's
    for bn in ("true", "false"):
        (tmp_path / f"ic/schedule=constant,bn={bn},seed=0").mkdir(parents=True)
        (tmp_path / f"ic/schedule=constant,bn={bn},seed=0/summary.json").write_text(json.dumps({"status": "finished"}))
    code, out, err, ran = script("ics", *args, **env)
    assert "at a constant rate (the equal-rate matching, docs/ics/PLAN.md): 2 runs of 20 steps, 0 to run" in out
    assert [("bn=noisy" in c) for c in cifar_commands(out)] == [True]


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
def test_mnist_blocks_are_the_design_with_the_extra_overrides_last(script):
    code, out, err, ran = script("mnist", *SMALL, SWEEP_DIR="m", LAUNCHER="basic")
    assert code == 0, err
    blocks = trains(ran)
    assert len(blocks) == 4
    design = [("true", "normal"), ("false", "normal"), ("true", "xavier"), ("false", "xavier")]
    for c, (bn, init) in zip(blocks, design):
        assert c[c.index("train") + 1:][:3] == ["-m", "hydra/launcher=basic", "hydra.sweep.dir='m'"]
        assert f"bn={bn}" in c and f"model.init={init}" in c and c[-3:] == list(SMALL)
        assert not any(a.startswith("hydra.launcher.n_jobs") for a in c)  # only stacked and joblib take JOBS
    code, out, err, ran = script("mnist", *SMALL, SWEEP_DIR="m")  # the default: seeds and rates stacked
    assert trains(ran)[0][trains(ran)[0].index("-m") + 1:][:2] == ["hydra/launcher=stacked", "hydra.launcher.n_jobs=2"]
    code, out, err, ran = script("mnist", *SMALL, SWEEP_DIR="m", LAUNCHER="joblib")
    assert trains(ran)[0][trains(ran)[0].index("-m") + 1:][:2] == ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


@pytest.mark.parametrize("name, args, env, words", [
    ("mnist", (), {"JOBS": "0"}, "JOBS=0"),
    ("mnist", (), {"JOBS": "abc"}, "JOBS=abc"),
    ("cifar", (), {"SEEDS": "abc"}, "SEEDS=abc"),
    ("cifar", (), {"SEEDS": "0,0"}, "SEEDS=0,0 lists 0 twice"),
    ("cifar", (), {"LADDER": "tune=abc"}, "LADDER"),
    ("ics", (), {"NOISE_SCALES": "abc"}, "NOISE_SCALES=abc"),
    ("ics", (), {"CIFAR_OVERRIDES": "scale.fcc=3"}, "scale.fcc"),
    ("mnist", (), {"SWEEP_DIR": "out/$x"}, "SWEEP_DIR"),
    ("mnist", ("trainer.max_stepz=5",), {}, "trainer.max_stepz"),
    ("mnist", ("seed=1,1",), {}, "seed=1,1 lists 1 twice"),
    ("mnist", ("lr=abc",), {}, "lr=abc"),
    ("study", ("depth", "trainer.max_stepz=5"), {}, "trainer.max_stepz"),
    ("study", ("nonsense",), {}, "usage: scripts/study.sh NAME"),
    ("study", ("depth",), {"SWEEP_DIR": "a_file/sweep"}, "a_file is a file"),
    ("mnist", (), {"LAUNCHER": "nope"}, "LAUNCHER=nope"),
    ("mnist", (), {"DRY_RUN": "yes"}, "DRY_RUN=yes"),
    ("all", (), {"SWEEP_DIR": "x"}, "SWEEP_DIR"),
])
@pytest.mark.parametrize("dry", ["1", ""])
def test_bad_input_is_one_line_before_anything_runs(script, tmp_path, name, args, env, words, dry):
    (tmp_path / "a_file").write_text("")
    code, out, err, ran = script(name, *args, **{"DRY_RUN": dry, **env})
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], err
    assert ran == [] and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_a_read_only_sweep_folder_is_one_line(script, tmp_path, monkeypatch):
    """A sweep folder under a folder without write permission: one line naming it, exit 2, nothing runs (root
    may write anyway: there the permission check sees what any other user would, the mode bits)."""
    from bnexp.designs import preflight

    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(preflight.os, "access", lambda p, mode: real(p, mode) and (
            not mode & os.W_OK or bool(os.stat(p).st_mode & 0o200)))
    code, out, err, ran = script("study", "depth", SWEEP_DIR="ro/sweep")
    assert code == 2 and err.count("error:") == 1 and "ro/sweep" in err and "not writable" in err, err
    assert ran == [] and list((tmp_path / "ro").iterdir()) == []


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
def test_a_refused_block_stops_the_script_failed_jobs_do_not(script):
    # exit 2 (the whole call refused): every later block would be refused the same way; no report
    code, out, err, ran = script("mnist", *SMALL, SWEEP_DIR="m", codes=[2])
    assert code == 2 and len(ran) == 1 and err.count("error: stopped") == 1
    # exit 1 (some jobs failed): the other blocks and the report still run, the exit code is 1
    code, out, err, ran = script("mnist", *SMALL, SWEEP_DIR="m", codes=[1])
    assert code == 1 and len(trains(ran)) == 4 and ran[-1][-2:] == ["report", "m"]
    # a signal during the second block: no further block, no report, 128 + SIGTERM
    code, out, err, ran = script("mnist", *SMALL, SWEEP_DIR="m", signal_at=2)
    assert code == 143 and len(ran) == 2 and "interrupted (SIGTERM)" in err


def test_an_interrupted_study_call_counts_in_the_measured_wall_time(script, tmp_path):
    """A study trained over several calls: the wall time on its page is the sum over every call that trained,
    the one a signal stopped included."""
    args = ("depth", "trainer.max_steps=20", "seed=0", "lr=3.6")
    code, out, err, ran = script("study", *args, SWEEP_DIR="d", signal_at=2)
    assert code == 143 and "interrupted (SIGTERM)" in err
    first = json.loads((tmp_path / "d" / "study.json").read_text())
    assert first["calls"] == 1 and first["wall_time_s"] >= 0 and first["jobs"] == 2
    code, out, err, ran = script("study", *args, SWEEP_DIR="d")
    assert code == 0, err
    both = json.loads((tmp_path / "d" / "study.json").read_text())
    assert both["calls"] == 2 and both["wall_time_s"] >= first["wall_time_s"]


def test_a_study_call_counts_as_it_runs_so_a_killed_call_counts_too(script, tmp_path, monkeypatch):
    """A call killed without its end-of-call bookkeeping (SIGKILL, a scheduler's kill after its SIGTERM's grace
    time) leaves study.json as it was at its last write: the call is counted from its start and its time so far
    written by the command's heartbeat and after every command, so the next call adds to it. Each command takes
    100 s on a fake clock."""
    from types import SimpleNamespace

    from bnexp.designs import studytime

    now = [1000.0]
    monkeypatch.setattr(studytime, "time", SimpleNamespace(time=lambda: now[0]))
    marker = tmp_path / "d" / "study.json"
    args = ("depth", "trainer.max_steps=20", "seed=0", "lr=3.6")
    seen = {}

    def command(n):
        seen[n] = json.loads(marker.read_text())
        now[0] += 100

    code, out, err, ran = script("study", *args, SWEEP_DIR="d", on_command=command)
    assert code == 0 and len(trains(ran)) == 3, err
    assert [(seen[n]["calls"], seen[n]["wall_time_s"]) for n in (1, 2, 3)] == [(1, 0), (1, 100), (1, 200)]
    assert json.loads(marker.read_text())["wall_time_s"] == 300
    # the second call is killed during its second block, after that block's heartbeat (the fake calls it once,
    # 100 s into the command): study.json as it was then already counts the block's time so far
    beats = {}
    code, out, err, ran = script("study", *args, SWEEP_DIR="d", on_command=command,
                                 on_beat=lambda n: beats.setdefault(n, json.loads(marker.read_text())))
    assert (seen[2]["calls"], seen[2]["wall_time_s"]) == (2, 400)
    assert (beats[2]["calls"], beats[2]["wall_time_s"]) == (2, 500)
    marker.write_text(json.dumps(beats[2]))
    code, out, err, ran = script("study", *args, SWEEP_DIR="d", on_command=command)
    final = json.loads(marker.read_text())
    assert code == 0 and (final["calls"], final["wall_time_s"], final["jobs"]) == (3, 800, 2)


def test_the_ladder_stops_when_a_batch_is_still_missing_after_it_ran(script):
    """The recorder trains nothing, so the ladder's first batch is still missing after it ran: the loop stops
    (no endless repeat), the report runs, exit code 1."""
    code, out, err, ran = script("cifar", SWEEP_DIR="c", SEEDS="0", VERIFY_CHECKSUMS="false")
    assert code == 1 and len(trains(ran)) == 1 and "still missing after they ran" in err
    assert ran[-1][-2:] == ["report", "c"]


def _bf16_sweep(monkeypatch, check, main=None):
    """The ladder reads ``main`` (default: the synthetic fp32 sweep of tests/test_precision_check.py, with
    tuning, the baseline's fixed rungs and bn_x5's check rungs done) from folder "c" and ``check`` from its
    check folder."""
    from test_precision_check import fp32

    from bnexp.analysis import frontier
    main = fp32() if main is None else main
    monkeypatch.setattr(frontier, "load_runs", lambda d: check if str(d).endswith("_bf16_check") else main)


@pytest.mark.slow  # composes every block's config: over the fast tier's 2.5 s of CPU
def test_precision_bf16_runs_the_check_before_the_next_rung(script, monkeypatch):
    """PRECISION=bf16 once the baseline's fixed rungs are done: the check's 6 missing multiruns (bn_x5's fp32
    runs in the sweep, the 4 bf16 multiruns in <sweep>_bf16_check with scale.precision=bf16), before the ladder's
    48k rung (the recorder trains nothing: the check is still missing after it ran, exit 1)."""
    import pandas as pd
    from test_precision_check import fp32
    _bf16_sweep(monkeypatch, pd.DataFrame(), fp32(x5={}))
    code, out, err, ran = script("cifar", SWEEP_DIR="c", VERIFY_CHECKSUMS="false", PRECISION="bf16")
    runs = trains(ran)
    assert code == 1 and len(runs) == 6, err
    where = [next(a for a in r if a.startswith("hydra.sweep.dir=")) for r in runs]
    assert where == ["hydra.sweep.dir='c'"] * 2 + ["hydra.sweep.dir='c_bf16_check'"] * 4
    assert [("scale.precision=bf16" in r, next(a for a in r if a.startswith("trainer.max_steps="))) for r in runs] == [
        (False, "trainer.max_steps=24000"), (False, "trainer.max_steps=6000"), (True, "trainer.max_steps=24000"),
        (True, "trainer.max_steps=24000"), (True, "trainer.max_steps=6000"), (True, "trainer.max_steps=6000")]
    assert "the bf16 check" in out and not any("trainer.max_steps=48000" in a for r in runs for a in r)


@pytest.mark.slow  # composes every block's config: over the fast tier's 2.5 s of CPU
@pytest.mark.parametrize("shift, bf16_next", [(0.0, True), (-0.03, False)])
def test_precision_bf16_verdict_decides_the_later_rungs(script, monkeypatch, tmp_path, shift, bf16_next):
    """A complete check writes precision_check.json; the ladder's next rung (the baseline at 48k) runs in bf16
    only when it passed."""
    from test_precision_check import bf16
    _bf16_sweep(monkeypatch, bf16(shift))
    code, out, err, ran = script("cifar", SWEEP_DIR="c", VERIFY_CHECKSUMS="false", PRECISION="bf16")
    first = trains(ran)[0]
    assert "trainer.max_steps=48000" in first and ("scale.precision=bf16" in first) == bf16_next, err
    verdict = json.loads((tmp_path / "c" / "precision_check.json").read_text())
    assert verdict["passed"] == bf16_next and len(verdict["cells"]) == 4
    assert ("bf16 adopted" if bf16_next else "bf16 NOT adopted") in out


def test_precision_is_checked_before_anything_runs(script, monkeypatch):
    code, out, err, ran = script("cifar", SWEEP_DIR="c", VERIFY_CHECKSUMS="false", PRECISION="fp16")
    assert code == 2 and ran == [] and "PRECISION=fp16: use fp32 or bf16" in err
    from bnexp.train import precision
    monkeypatch.setattr(precision, "bf16_supported", lambda device: False)
    code, out, err, ran = script("cifar", SWEEP_DIR="c", VERIFY_CHECKSUMS="false", PRECISION="bf16")
    assert code == 2 and ran == [] and "no native bfloat16" in err


def test_env_lists_and_numbers():
    from bnexp.designs.preflight import Env
    from bnexp.errors import UserError

    env = Env({"SEEDS": "3, 1", "NOISE_SCALES": "0.5,2", "JOBS": "3", "STEPS_PER_S": "12.5"})
    assert env.int_list("SEEDS") == (3, 1) and env.number_list("NOISE_SCALES") == (0.5, 2.0)
    assert env.jobs == 3 and env.number("STEPS_PER_S", 15.0) == 12.5 and env.number("STARTUP_S", 12.0) == 12.0
    assert Env({}).int_list("SEEDS") is None and Env({}).jobs >= 1
    for bad in ({"STEPS_PER_S": "0"}, {"STEPS_PER_S": "inf"}, {"STEPS_PER_S": "nan"}):
        with pytest.raises(UserError, match="STEPS_PER_S"):
            Env(bad).number("STEPS_PER_S", 15.0)
    for bad in ({"SEEDS": "-1"}, {"SEEDS": "1.5"}, {"SEEDS": "1,,2"}):
        with pytest.raises(UserError, match="SEEDS"):
            Env(bad).int_list("SEEDS")


def test_env_blank_values_take_the_default_and_spaces_are_stripped():
    from bnexp.designs.preflight import Env
    from bnexp.errors import UserError

    env = Env({"JOBS": " 4 ", "STEPS_PER_S": "  ", "STARTUP_S": " 0 "})
    assert env.jobs == 4 and env.number("STEPS_PER_S", 15.0) == 15.0
    assert env.number("STARTUP_S", 12.0, minimum=0.0) == 0.0
    assert Env({"JOBS": ""}).jobs >= 1
    with pytest.raises(UserError, match=r"^STARTUP_S=-1: a number >= 0$"):
        Env({"STARTUP_S": "-1"}).number("STARTUP_S", 12.0, minimum=0.0)
    with pytest.raises(UserError, match=r"^JOBS=2\.5: a whole number >= 1"):
        Env({"JOBS": "2.5"})


def test_validation_covers_every_value_a_user_sweeps():
    """A block's configs are composed for the first job and for each value of the user's sweeps: a bad
    value in the middle of NOISE_SCALES-like lists is found, the design's own values are not all composed."""
    from bnexp.designs.preflight import Block, _cover, check_blocks
    from bnexp.errors import UserError

    jobs = [[f"lr={lr}", f"seed={s}", f"bn.noise_scale={n}"] for lr in (1, 2) for s in (0, 1) for n in (1, 3, 10)]
    picks = _cover(jobs, {"bn.noise_scale"})
    assert [p[2] for p in picks] == ["bn.noise_scale=1", "bn.noise_scale=3", "bn.noise_scale=10"]
    assert _cover(jobs, set()) == jobs[:1]
    own = ["bn=noisy", "lr=0.1,0.2", "trainer.max_steps=10"]
    assert len(check_blocks([Block("b", own, ["bn.noise_scale=1,3,10"])])[0][0]) == 6
    with pytest.raises(UserError, match="bn.noise_scale"):
        check_blocks([Block("b", own, ["bn.noise_scale=1,-3,10"])])


# ----- the supervisor with real processes ----------------------------------------------------------------

TREE = r"""
import fcntl, os, signal, subprocess, sys, time
ready, lock, hold = sys.argv[1], sys.argv[2], float(sys.argv[3])
# a helper that ignores SIGTERM and outlives its parent (as the launchers' resource trackers do); it holds
# the run folder's lock for `hold` seconds after the signal (a run saving its checkpoint), then idles
helper = subprocess.Popen([sys.executable, "-c", '''
import fcntl, os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(1))
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
open(sys.argv[2], "w").write(str(os.getpid()))
while not got:
    time.sleep(0.01)
time.sleep(float(sys.argv[3]))
os.close(fd)
while True:
    time.sleep(1)
''', lock, ready + ".helper", str(hold)])
while not os.path.exists(ready + ".helper"):
    time.sleep(0.01)
open(ready, "w").write(str(os.getpid()))
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_supervisor_calls_the_heartbeat_while_a_command_runs_and_not_after_it():
    """A study's wall time is written by the heartbeat while a block runs (:class:`bnexp.designs.studytime.StudyClock`):
    a command that sleeps 1 s gets at least one beat every 0.1 s, a command that ends at once none after its end."""
    beats = []
    with supervise.Supervisor() as sup:
        t0 = time.monotonic()
        assert sup.run([sys.executable, "-c", "import time; time.sleep(1.0)"],
                       heartbeat=lambda: beats.append(time.monotonic()), every=0.1) == 0
        end = time.monotonic()
    assert len(beats) >= 1 and all(t0 + 0.1 <= b <= end for b in beats)
    assert all(b2 - b1 >= 0.1 for b1, b2 in zip(beats, beats[1:]))  # never more often than every
    n = len(beats)
    with supervise.Supervisor() as sup:
        assert sup.run([sys.executable, "-c", "pass"], heartbeat=lambda: beats.append(0.0), every=60.0) == 0
    assert len(beats) == n


@pytest.mark.parametrize("watch", [False, True])
def test_supervisor_stops_the_whole_group(tmp_path, watch):
    """SIGTERM to this process reaches the command's group once; a member that ignores it is killed: after
    the grace time, or (watching the sweep folder) as soon as the command has ended and no run folder is
    locked, i.e. once the 'run' released its lock. Exit code 143; nothing of the group is left."""
    run_dir = tmp_path / "sweep" / "run"
    run_dir.mkdir(parents=True)
    ready = tmp_path / "ready"
    grace = 3.0 if not watch else 60.0

    def signal_when_ready():
        wait_for(lambda: ready.exists() and ready.read_text(), timeout=120)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_when_ready, daemon=True).start()
    with supervise.Supervisor(grace_s=grace) as sup:
        t0 = time.monotonic()
        code = sup.run([sys.executable, "-c", TREE, str(ready), str(run_dir / ".lock"), "0.5"],
                       watch=tmp_path / "sweep" if watch else None)
        took = time.monotonic() - t0
    pids = [int(ready.read_text()), int(Path(str(ready) + ".helper").read_text())]
    assert code == 143 and sup.exit_code == 143 and not any(_alive(p) for p in pids)
    assert sup.killed == (0 if watch else 1)
    if watch:
        assert took < grace  # the lock, not the grace time, ended it
    assert supervise.runs_holding_locks(tmp_path / "sweep") == []
    # after the signal nothing new starts
    started = tmp_path / "started"
    assert sup.run([sys.executable, "-c", f"open({str(started)!r}, 'w')"]) == 143 and not started.exists()


# ----- the scripts, signalled in real process trees ------------------------------------------------------


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment holds ``tag`` (everything a script started inherits it)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag.encode() in (d / "environ").read_bytes() and _alive(int(d.name)):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def _start(script_name: str, cwd: Path, data_root: Path, *args: str, root: Path = REPO, logs: Path | None = None,
           **env_extra: str | None):
    """Start ``root``/scripts/``script_name`` as a terminal's foreground job (own process group, SIGINT at
    default); returns (the process, the tag in its environment). An ``env_extra`` value None unsets it. Its
    stdout and stderr are pipes, or with ``logs`` the files ``logs``.out and ``logs``.err (a script that writes
    more than a pipe holds before the test reads it: its runs would wait on the full pipe)."""
    import subprocess

    tag = uuid.uuid4().hex
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), BNEXP_TEST_TAG=tag, DOCS_DIR="")
    env.update(env_extra)
    env = {k: v for k, v in env.items() if v is not None}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    out, err = (subprocess.PIPE,) * 2 if logs is None else (open(f"{logs}.out", "w"), open(f"{logs}.err", "w"))
    p = subprocess.Popen(["bash", str(root / "scripts" / script_name), *args], cwd=cwd, env=env, text=True,
                         stdout=out, stderr=err, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if logs is not None:
        out.close()
        err.close()
    p.logs = logs
    return p, tag


def _output(p, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of a script :func:`_start` started, once it has exited (within ``timeout`` s)."""
    out, err = p.communicate(timeout=timeout)
    if p.logs is None:
        return out, err
    return Path(f"{p.logs}.out").read_text(), Path(f"{p.logs}.err").read_text()


# two runs in the first block (seeds 1, 2 on 2 parallel jobs: loky worker processes); long enough that both are
# still training when their step-0 records appear (the signal follows at once)
MNIST_ARGS = ("trainer.max_steps=1000", "seed=1,2", "lr=0.12", "trainer.eval_every=250", "trainer.hist_every=500",
              "trainer.log_every=100")


def _stop(p, tag: str, sweep: Path, how: str, timeout: float = 600) -> tuple[int, str]:
    """Wait (up to ``timeout`` s) until both runs of the sweep's first block train, signal the script (``how``),
    and check that within 10 s the script has exited and nothing it started is alive; returns (exit code,
    stderr)."""
    try:
        wait_for(lambda: len(list(sweep.glob("*/shift.jsonl"))) == 2 or p.poll() is not None, timeout=timeout)
        assert p.poll() is None, _output(p, 60)[1][-3000:]
        assert len(_tagged(tag)) >= 4  # the script, the launcher, its two workers (and its helpers)
        if how == "SIGTERM":
            os.kill(p.pid, signal.SIGTERM)  # what a scheduler or `timeout` sends: the script's pid only
        elif how == "SIGTERM-group":
            os.killpg(p.pid, signal.SIGTERM)
        else:
            os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the foreground process group
        t0 = time.monotonic()
        out, err = _output(p, 60)
        wait_for(lambda: not _tagged(tag), timeout=max(0.1, 10 - (time.monotonic() - t0)))
        assert time.monotonic() - t0 < 10
        return p.returncode, err
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        for pid in _tagged(tag):
            os.kill(pid, signal.SIGKILL)


def _interrupted_runs(sweep: Path, finished_ok: bool = False, max_steps: int = 1000) -> dict[str, int]:
    """{run folder: step} of the sweep's runs, each interrupted with the checkpoint of its step, short of
    ``max_steps`` (with ``finished_ok``, runs that had already finished are allowed and left out)."""
    import torch

    out = {}
    for s in sorted(sweep.glob("*/summary.json")):
        summary = json.loads(s.read_text())
        if finished_ok and summary["status"] == "finished":
            continue
        assert summary["status"] == "interrupted", (s.parent.name, summary["status"])
        ckpt = torch.load(s.parent / "checkpoint.pt", map_location="cpu", weights_only=False)
        assert ckpt["step"] == summary["step"] and 0 < summary["step"] < max_steps
        out[s.parent.name] = summary["step"]
    return out


@pytest.mark.slow
def test_sigterm_to_reproduce_mnist_stops_everything_and_the_rerun_resumes(tmp_path, data_root):
    """SIGTERM to the script's pid: the launcher and its loky workers stop too (no orphan trains on), both runs
    are interrupted with their checkpoints, exit code 143, the next block never starts; the same command then
    resumes both runs from their checkpoints (no step recorded twice) and completes the sweep."""
    sweep = tmp_path / "sweep"
    # records written in the step loop (result-neutral): a run's shift.jsonl then appears at its step 0, with
    # 999 steps and 4 test evaluations still to go when the signal follows. With the records thread (the
    # default) the file appears only once that thread has done the step-0 test evaluation and shift record,
    # while the loop trains on: on an idle machine both runs could reach step 1,000 before the signal came.
    args = (*MNIST_ARGS, "trainer.async_records=false")
    p, tag = _start("reproduce_mnist.sh", tmp_path, data_root, *args, SWEEP_DIR=str(sweep), JOBS="2")
    code, err = _stop(p, tag, sweep, "SIGTERM")
    assert code == 143 and "Traceback" not in err, err[-3000:]
    # both runs had started when the signal was sent; one may have finished its 1,000 steps before it
    # arrived (a loaded machine can start the second worker late): then only the other is resumed
    first_block = ["bn=true,init=normal,lr=0.12,seed=1", "bn=true,init=normal,lr=0.12,seed=2"]
    steps = _interrupted_runs(sweep, finished_ok=True)
    assert steps and set(steps) <= set(first_block)
    assert sorted(s.parent.name for s in sweep.glob("*/summary.json")) == first_block
    p, tag = _start("reproduce_mnist.sh", tmp_path, data_root, *args, SWEEP_DIR=str(sweep), JOBS="2")
    out, err = p.communicate(timeout=1800)
    assert p.returncode == 0, err[-3000:]
    assert len(list(sweep.glob("*/summary.json"))) == 8
    for name, step in steps.items():
        summary = json.loads((sweep / name / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["resumed_from_step"] == step
        logged = [json.loads(line)["step"] for line in (sweep / name / "metrics.jsonl").read_text().splitlines()]
        assert logged == sorted(set(logged)) and logged[0] == 0 and logged[-1] == 1000


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGINT-group", "SIGTERM-group"])
def test_one_ctrl_c_stops_reproduce_mnist(tmp_path, data_root, how):
    """One Ctrl-C (SIGINT to the terminal's process group), or SIGTERM to that group: exit code 130 / 143, both
    runs interrupted with their checkpoints, nothing left running, and no later block started (no run folder
    without BN)."""
    sweep = tmp_path / "sweep"
    # the scripts' default launcher (hydra/launcher=stacked): two lone-run stacks in two loky workers; runs that
    # cannot end before the signal, however slowly the second worker starts (this test resumes nothing)
    endless = tuple("trainer.max_steps=10000000" if a.startswith("trainer.max_steps=") else a for a in MNIST_ARGS)
    p, tag = _start("reproduce_mnist.sh", tmp_path, data_root, *endless, SWEEP_DIR=str(sweep), JOBS="2")
    code, err = _stop(p, tag, sweep, how)
    assert code == (130 if how == "SIGINT-group" else 143) and "Traceback" not in err, err[-3000:]
    assert len(_interrupted_runs(sweep)) == 2
    assert not list(sweep.glob("bn=false*")) and not (sweep / "report.json").exists()


@pytest.mark.slow  # plans all eight sweeps three times (~10 s of CPU)
def test_reproduce_all_plans_runs_and_regenerates_the_docs_in_order(script, tmp_path):
    """reproduce_all: the eight sweeps in order (MNIST, CIFAR-10, the ICS study's two parts, the five studies);
    DRY_RUN=1 prints each plan and an estimated total that is the sum of the parts' own estimates (no inf);
    a run reports each sweep after its blocks and ends with `bnexp report --update-docs` (the default run only)."""
    from bnexp.designs.studies import STUDIES

    folders = ["mnist_fig1", "cifar_frontier_cpu", "ics_mnist", "ics_cifar", *(f"study_{s}" for s in STUDIES)]
    code, out, err, ran = script("all", DRY_RUN="1")
    assert code == 0 and ran == [], err
    heads = [line.split(": the planned runs of ")[1] for line in out.splitlines() if ": the planned runs of " in line]
    assert heads == [f"outputs/sweeps/{f}" for f in folders]
    # the first lines say what runs and how long: one line per part with its folder, then the total
    first = out.splitlines()[:len(folders) + 2]
    assert first[0].startswith("DRY_RUN: nothing is trained.") and first[-1].startswith("  in all: about ")
    assert [line.rsplit("[", 1)[1].rstrip("]") for line in first[1:-1]] == heads
    assert "at most" in next(line for line in first if line.startswith("  CIFAR-10 ladder"))
    parts = [int(m) for m in re.findall(r"^estimated wall time: (\d+) min with", out, re.MULTILINE)]  # MNIST
    ladder = r"^to run, always: .* about [\d.]+ h \((\d+) min\)"
    parts += [int(m) for m in re.findall(ladder, out, re.MULTILINE)]  # the CIFAR-10 ladder
    parts += [int(m) for m in re.findall(r"part: estimated wall time: (\d+) min", out)]  # the ICS study
    parts += [int(m) for m in re.findall(r"^both stages: .* estimated wall time (\d+) min", out, re.MULTILINE)]  # studies
    hours = re.search(r"^  in all: about ([\d.]+) h", out, re.MULTILINE)
    assert len(parts) == 9 and hours and abs(60 * float(hours.group(1)) - sum(parts)) <= len(parts) + 3
    assert not re.search(r"\b(inf|nan)\b", out, re.IGNORECASE)
    code, out, err, ran = script("all")
    reports = [c[c.index("report") + 1:] for c in ran if "report" in c]
    assert reports == [[f"outputs/sweeps/{f}"] for f in folders] + [["--update-docs"]]
    evals = [i for i, c in enumerate(ran) if "bnexp.train.inference_eval" in c]
    assert len(evals) == 1 and ran[evals[0] + 1][-1] == "outputs/sweeps/study_inference_statistics"
    assert code == 1 and "still missing after they ran" in err  # the recorder trained nothing: the ladder stops
    # with extra overrides: their own folders, and the docs are left alone
    code, out, err, ran = script("all", "trainer.log_every=100")
    assert ran[-1][-2:] == ["report", "outputs/sweeps/study_depth+trainer.log_every=100"]


@pytest.mark.slow
def test_sigterm_to_reproduce_cifar_stops_its_loky_workers(tmp_path, data_root):
    """SIGTERM to reproduce_cifar.sh while the ladder's first batch trains on 2 parallel jobs (a tiny network
    on real CIFAR-10): the workers stop too, both runs are interrupted with their checkpoints, exit code 143,
    no report and no later stage."""
    import torch

    sweep = tmp_path / "sweep"
    p, tag = _start("reproduce_cifar.sh", tmp_path, data_root, "scale.channels=[4,8,8]", "scale.fc=16",
                    "trainer.probe_size=100", SWEEP_DIR=str(sweep), JOBS="2", SEEDS="0", VERIFY_CHECKSUMS="false",
                    LADDER="tune=5000;lrs=0.025;dropouts=0,0.3;baseline=2500,5000;cap=5000;bn_x5=100;bn_baseline=100")
    code, err = _stop(p, tag, sweep, "SIGTERM")
    assert code == 143 and "Traceback" not in err, err[-3000:]
    summaries = {s.parent: json.loads(s.read_text()) for s in sweep.glob("*/summary.json")}
    assert len(summaries) == 2 and not (sweep / "report.json").exists()
    for run, summary in summaries.items():
        assert summary["status"] == "interrupted" and 0 < summary["step"] < 5000
        assert torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=False)["step"] == summary["step"]


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
def test_mnist_stage_2_trains_each_network_at_the_rate_its_report_chooses(script, tmp_path, monkeypatch):
    """Held-out tuning (docs/mnist/PLAN.md): once every grid is complete on the tuning seeds, the orchestrator
    trains each network at the rates chosen there for 90/95/97% on the evaluation seeds 1000-1004, and the report
    of the same tuning runs chooses the same rates (one rule: bnexp/analysis/tuning.py).
    Tuning steps to (90%, 95%, 97%) by hand: BN lr 4 is fastest everywhere (mean 1,000 vs 1,500 to 95%);
    no BN lr 2 is fastest to 90% and 95% but misses 97% on two seeds, lr 1 on one: lr 1 for 97%."""
    import yaml

    sys.path.insert(0, str(Path(__file__).parent))
    from test_report import make_run

    from bnexp.designs import mnist
    from bnexp.report import build_report

    # every choice inside its grid (BN 8 and no BN 0.5 / 4 are slower), so the grid-edge rule adds no rate
    steps = {(True, 1.0): (500, 1500, 3000), (True, 4.0): (250, 1000, 2000), (True, 8.0): (300, 1200, 2500),
             (False, 0.5): (3000, 5000, None), (False, 1.0): (2000, 4000, 5000), (False, 2.0): (1500, 3000, None),
             (False, 4.0): (1800, 3500, None)}
    grids = {True: (1.0, 4.0, 8.0), False: (0.5, 1.0, 2.0, 4.0)}
    sweep = tmp_path / "m"
    for b in mnist.BLOCKS:
        for lr in grids[b.bn]:
            for seed in mnist.SEEDS:
                s90, s95, s97 = steps[b.bn, lr]
                s97 = None if (not b.bn and lr == 1.0 and seed == 101) else s97
                s97 = 5500 if (not b.bn and lr == 2.0 and seed == 102) else s97
                knots = [(0, 0.1)] + [(s, a) for s, a in ((s90, 0.9), (s95, 0.95), (s97, 0.97)) if s]
                d = make_run(sweep, mnist.run_name(b, lr, seed), bn=b.bn, lr=lr, seed=seed, knots=knots,
                             max_steps=6000, every=250, targets=[0.9, 0.95, 0.97])
                cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
                cfg["model"]["init"] = b.init
                cfg.setdefault("data", {})["validation"] = mnist.VALIDATION  # stage 1 reads the validation split
                (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
                summary = json.loads((d / "summary.json").read_text())
                (d / "summary.json").write_text(json.dumps({**summary, "evaluated_on": "validation"}))
    blocks = [mnist.replace(b, rates=grids[b.bn]) for b in mnist.BLOCKS]
    msgs, todo, on = mnist.stage_blocks(sweep, blocks, mnist.SEEDS, mnist.EVALUATION_SEEDS)
    assert on == (1000, 1001, 1002, 1003, 1004) and [b.rates for b in todo] == [(4.0,), (1.0, 2.0), (4.0,), (1.0, 2.0)]
    assert "  no BN, normal init: 90% lr 2, 95% lr 2, 97% lr 1 (censored)" in msgs
    report = build_report(sweep).data
    chosen = {(r["init"], r["target"]): (r["bn_lr"], r["no_bn_lr"]) for r in report["best_rate_speedups"]}
    assert chosen == {(i, t): (4.0, 1.0 if t == 0.97 else 2.0) for i in ("normal", "xavier") for t in (0.9, 0.95, 0.97)}
    assert report["tuning_seeds"] == [100, 101, 102]
    # the script runs exactly these evaluation blocks (stage 1 is complete), DRY_RUN prints them
    monkeypatch.setattr(mnist, "BLOCKS", tuple(blocks))
    loaded, load = [], mnist.load_sweep
    monkeypatch.setattr(mnist, "load_sweep", lambda dirs, *a: load(loaded.extend(dirs) or dirs, *a))
    code, out, err, ran = script("mnist", "trainer.max_steps=6000", SWEEP_DIR=str(sweep), DRY_RUN="1")
    printed = [shell_words(line[2:]) for line in out.splitlines() if line.startswith("$ ")]
    assert code == 0 and len(printed) == 4, err
    # the plan and its blocks are one decision: each of the 4 x 2 x 3 tuning runs is loaded once
    assert len(loaded) == len(set(loaded)) == 42  # 2 inits x (3 + 4 rates) x 3 tuning seeds
    assert [(c[c.index("bn=true") if "bn=true" in c else c.index("bn=false")], [a for a in c if a.startswith("lr=")][0],
             [a for a in c if a.startswith("seed=")]) for c in printed] == [
        ("bn=true", "lr=4", ["seed=1000,1001,1002,1003,1004"]), ("bn=false", "lr=1,2", ["seed=1000,1001,1002,1003,1004"]),
        ("bn=true", "lr=4", ["seed=1000,1001,1002,1003,1004"]), ("bn=false", "lr=1,2", ["seed=1000,1001,1002,1003,1004"])]
    assert all("data.validation=0" in c for c in printed)  # stage 2: the full training set, scored on test
    code, out, err, ran = script("mnist", "trainer.max_steps=6000", SWEEP_DIR=str(sweep))
    assert trains(ran)[:4] == printed and "BN, normal init (evaluation)" in out


def _files(sweep: Path) -> dict[str, tuple[int, bytes]]:
    """{path: (mtime in ns, content)} of every file in the sweep's run folders (those holding summary.json)."""
    return {str(f.relative_to(sweep)): (f.stat().st_mtime_ns, f.read_bytes())
            for s in sweep.glob("*/summary.json") for f in sorted(s.parent.rglob("*")) if f.is_file()}


# scripts/reproduce_all.sh's first two parts, tiny: MNIST (27 runs) and the CIFAR-10 ladder (scale.channels and
# scale.fc reach only the CIFAR-10 nets); every budget of the ladder is the MNIST part's trainer.max_steps, which
# the extra overrides set for both; records written in the step loop, so a run's step-0 shift.jsonl means it is
# at its step 1 (see test_sigterm_to_reproduce_mnist_stops_everything_and_the_rerun_resumes)
ALL_STEPS = 300
ALL_ARGS = (f"trainer.max_steps={ALL_STEPS}", "seed=0", "trainer.async_records=false", "scale.channels=[4,8,8]",
            "scale.fc=16", "trainer.probe_size=100")
ALL_ENV = dict(JOBS="2", SEEDS="0", PRESETS="bn_x5", VERIFY_CHECKSUMS="false", DOCS_DIR=None,
               LADDER=f"tune={ALL_STEPS};lrs=0.025;dropouts=0,0.3;baseline={ALL_STEPS};cap={ALL_STEPS};"
                      f"bn_x5={ALL_STEPS}")
# the parts after them (the ICS study, the five studies) are left out: each trains for minutes even when tiny
FIRST_TWO_PARTS = """import sys
from bnexp.designs import orchestrate
orchestrate.ics_parts = lambda *a, **k: []
orchestrate.study_parts = lambda *a, **k: []
sys.exit(orchestrate.main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_sigterm_to_reproduce_all_in_its_second_part_and_the_rerun_redoes_nothing(tmp_path, data_root):
    """SIGTERM to reproduce_all.sh's pid while its CIFAR-10 part trains (the MNIST part complete): exit code 143,
    the ladder's first batch interrupted with its checkpoints. The same command then redoes nothing: no block of
    the MNIST part starts, its run folders are those of the first call, every file in them untouched; the
    CIFAR-10 part resumes its runs from their checkpoints (no step recorded twice), climbs the rest of its
    ladder and reports, and the script exits 0. (Its parts as in a checkout: the script runs from its folder's
    parent, here a copy of scripts/reproduce_all.sh under tmp_path, its sweeps in tmp_path/outputs/sweeps.)"""
    from bnexp.designs.preflight import sweep_suffix

    script = (REPO / "scripts" / "reproduce_all.sh").read_text()
    assert script.count("python -m bnexp.designs.orchestrate all") == 1
    (tmp_path / "scripts").mkdir()
    (tmp_path / "first_two_parts.py").write_text(FIRST_TWO_PARTS)
    (tmp_path / "scripts" / "reproduce_all.sh").write_text(script.replace(
        "python -m bnexp.designs.orchestrate all", 'python "$(dirname "$0")/../first_two_parts.py" all'))
    sweeps = tmp_path / "outputs" / "sweeps"
    mnist, cifar = (sweeps / (name + sweep_suffix(list(ALL_ARGS))) for name in ("mnist_fig1", "cifar_frontier_cpu"))

    p, tag = _start("reproduce_all.sh", tmp_path, data_root, *ALL_ARGS, root=tmp_path, logs=tmp_path / "first",
                    **ALL_ENV)
    code, err = _stop(p, tag, cifar, "SIGTERM", timeout=1800)  # after the whole MNIST part
    assert code == 143 and "Traceback" not in err, err[-3000:]
    done = _files(mnist)
    assert len({k.split("/")[0] for k in done}) == 27 and (mnist / "report.json").is_file()
    assert all(json.loads(v[1])["status"] == "finished" for k, v in done.items() if k.endswith("/summary.json"))
    steps = _interrupted_runs(cifar, finished_ok=True, max_steps=ALL_STEPS)  # a worker started late: one
    assert steps and len(list(cifar.glob("*/summary.json"))) == 2 and not (cifar / "report.json").exists()

    p, tag = _start("reproduce_all.sh", tmp_path, data_root, *ALL_ARGS, root=tmp_path, logs=tmp_path / "again",
                    **ALL_ENV)
    out, err = _output(p, 1800)
    assert p.returncode == 0, err[-3000:]
    assert "MNIST: block" not in out and "CIFAR-10 ladder (cpu): block 1/1: baseline" in out, out[-3000:]
    assert _files(mnist) == done
    for name, step in steps.items():
        summary = json.loads((cifar / name / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["resumed_from_step"] == step
        logged = [json.loads(line)["step"] for line in (cifar / name / "metrics.jsonl").read_text().splitlines()]
        assert logged == sorted(set(logged)) and logged[0] == 0 and logged[-1] == ALL_STEPS
    ladder = {s.parent.name: json.loads(s.read_text())["status"] for s in cifar.glob("*/summary.json")}
    assert len(ladder) == 3 and set(ladder.values()) == {"finished"} and (cifar / "report.json").is_file()
