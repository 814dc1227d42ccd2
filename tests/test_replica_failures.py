"""Data-parallel runs end as single runs do (docs/cluster.md, "When a replica fails"): under
``python -m bnexp.train.torchrun`` a refusal is one line (rank 0's) and exit code 2, SIGTERM ends every
replica with the run ``interrupted`` and exit code 143, a rank 0 killed outright leaves the run
``interrupted`` (a surviving replica records it), a lost replica of rank > 0 too (rank 0 records it),
all without a traceback, and torchrun's SIGTERM to the survivors cuts neither the record nor the
line short; a RANK outside
0..WORLD_SIZE-1 is refused at once, a peer that never comes ends the start within
``BNEXP_RENDEZVOUS_TIMEOUT_S`` with one line, and batch statistics over one example per replica are
refused naming ``trainer.batch_size``. Signals go to real process trees.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bnexp.config.schema import compose_config
from bnexp.errors import ConfigError
from bnexp.train import distributed

from conftest import wait_for

RUN = ["trainer.num_threads=1", "trainer.progress=false", "trainer.probe_size=200",
       "trainer.eval_every=100000", "trainer.hist_every=100000"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(data_root: Path, **extra) -> dict:
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), OMP_NUM_THREADS="1", COLUMNS="120", **extra)
    for k in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None) if k not in extra else None
    return env


def _torchrun(tmp_path: Path, data_root: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bnexp.train.torchrun", "--standalone", "--nproc-per-node=2",
                             "-m", "bnexp", "train", *RUN, *args], cwd=tmp_path, env=_env(data_root),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen, timeout: float = 300) -> tuple[str, str]:
    try:
        return p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()


def test_one_example_per_replica_is_refused_naming_the_key():
    cfg = compose_config(["trainer.batch_size=2", "bn.sync=false"])
    with pytest.raises(ConfigError) as e:
        distributed.check_bn_config(cfg, 2)
    assert "trainer.batch_size=2" in str(e.value) and "m/N = 1 example" in str(e.value)
    distributed.check_bn_config(compose_config(["trainer.batch_size=4", "bn.sync=false"]), 2)  # 2 each: fine
    distributed.check_bn_config(compose_config(["trainer.batch_size=2", "bn.sync=true"]), 2)  # statistics over 2
    distributed.check_bn_config(compose_config(["trainer.batch_size=2", "bn=layer", "bn.sync=false"]), 2)


@pytest.mark.parametrize("rank", ["2", "-1"])
def test_a_rank_outside_the_world_is_refused(bnexp_main, tmp_path, monkeypatch, rank):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", rank)
    code, err, _ = bnexp_main("train", *RUN, f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and f"RANK={rank} is not a rank of WORLD_SIZE=2 replicas (0..1)" in err
    assert "start data-parallel runs with python -m bnexp.train.torchrun --standalone --nproc-per-node=N" in err
    assert not (tmp_path / "run").exists()


def test_every_launch_command_in_code_and_docs_is_the_wrapper():
    """Plain torchrun ends every failed run with a traceback of its own (docs/cluster.md): wherever bnexp
    shows a torchrun command line (messages, docstrings, docs, scripts), it is python -m bnexp.train.torchrun."""
    import re

    root = Path(__file__).resolve().parents[1]
    files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "bnexp").rglob("*.py"),
             *(root / "scripts").glob("*")]
    plain = re.compile(r"(?<![\w.])torchrun\s+--[a-z]")  # a command line: torchrun --option
    found = [f"{f.relative_to(root)}: {line.strip()}" for f in files if f.is_file()
             for line in f.read_text(errors="replace").splitlines() if plain.search(line)]
    assert not found, "\n".join(found)
    assert "python -m bnexp.train.torchrun --standalone --nproc-per-node=4" in (root / "docs" / "cluster.md").read_text()


def test_bad_rendezvous_timeout_is_refused(monkeypatch):
    monkeypatch.setenv(distributed.RENDEZVOUS_ENV, "soon")
    with pytest.raises(distributed.UserError, match="BNEXP_RENDEZVOUS_TIMEOUT_S='soon' must be a positive"):
        distributed.rendezvous_timeout_s()
    monkeypatch.delenv(distributed.RENDEZVOUS_ENV)
    assert distributed.rendezvous_timeout_s() == 60


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 1])
def test_a_peer_that_never_comes_ends_the_start_with_one_line(tmp_path, data_root, rank):
    env = _env(data_root, WORLD_SIZE="2", RANK=str(rank), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()), BNEXP_RENDEZVOUS_TIMEOUT_S="2")
    exe = Path(sys.executable).with_name("bnexp")
    r = subprocess.run([str(exe), "train", *RUN, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.count("bnexp: error:") == 1 and "Traceback" not in r.stderr and "frame #" not in r.stderr
    assert f"replica {rank} of 2: the other replicas did not all join" in r.stderr and "within 2 s" in r.stderr
    assert not (tmp_path / "run").exists()
    # it said that it was waiting, once, before it gave up
    assert r.stderr.count(f"bnexp: replica {rank} of 2: waiting for the other replicas at 127.0.0.1:") == 1
    assert r.stderr.index("waiting for the other replicas") < r.stderr.index("bnexp: error:")


_A_WAIT_THAT_NEVER_ENDS = r"""
import sys, time
import torch.distributed as dist
import bnexp.cli as cli
from bnexp.train import distributed
distributed.NOTICE_S = 0.5
dist.init_process_group = lambda *a, **k: time.sleep(600)  # a connect to an address that drops packets
t0 = time.monotonic()
try:
    cli.main(["train", "trainer.progress=false", f"hydra.run.dir={sys.argv[1]}"])
finally:
    print(f"returned after {time.monotonic() - t0:.0f} s", file=sys.stderr)
"""


def test_a_replica_keeps_its_stated_rendezvous_timeout_when_torchs_wait_does_not_end(tmp_path):
    """torch's store client checks its deadline only between connection attempts, and one attempt to an address
    that drops packets lasts as long as the kernel's connect timeout (a lone replica waited 357 s, then said
    "within 60 s"): the replica says at once that it waits, and gives up a few seconds past its stated timeout
    with the one line, exit code 2, leaving no run folder."""
    import time

    env = dict(os.environ, WORLD_SIZE="2", RANK="1", LOCAL_RANK="0", MASTER_ADDR="10.255.255.1", MASTER_PORT="29500",
               BNEXP_RENDEZVOUS_TIMEOUT_S="2", COLUMNS="300")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", _A_WAIT_THAT_NEVER_ENDS, str(tmp_path / "run")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert lines == [
        "bnexp: replica 1 of 2: waiting for the other replicas at 10.255.255.1:29500, for at most 2 s "
        "(BNEXP_RENDEZVOUS_TIMEOUT_S=SECONDS to change it).",
        "bnexp: error: replica 1 of 2: the other replicas did not all join at 10.255.255.1:29500 within 2 s (no "
        "answer); start all 2 (torchrun's --nproc-per-node), or give slow starters more time with "
        "BNEXP_RENDEZVOUS_TIMEOUT_S=SECONDS."], p.stderr[-3000:]
    assert took < 2 + distributed.GIVE_UP_SLACK_S + 60  # its start-up (under load) and the stated wait
    assert not (tmp_path / "run").exists()


_DDP_LOSES_A_PEER = r"""
import os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from bnexp.train import replica_endings
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
model = DDP(torch.nn.Linear(4, 2), broadcast_buffers=False)  # kept: its reducer's hooks do the all-reduce
loss = model(torch.randn(8, 4)).sum()
if rank == 1:
    os._exit(0)  # the peer dies between the forward and the backward
time.sleep(1)
try:
    loss.backward()  # DDP's gradient all-reduce, in the autograd engine
except Exception as exc:
    print("collective failed:", replica_endings.a_collective_failed(exc), type(exc).__name__, flush=True)
os._exit(0)  # without closing the group whose peer is gone
"""


@pytest.mark.slow
def test_a_lost_peer_in_ddps_gradient_all_reduce_is_a_failed_collective(tmp_path):
    """The gradient all-reduce of DDP fails inside ``loss.backward()`` with no torch.distributed frame: it is still
    another replica's end (rank 0 then records the run and says so in one line), not an internal error with a
    "[rank0]: Traceback" before that line."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), OMP_NUM_THREADS="1")
    peer = subprocess.Popen([sys.executable, "-W", "ignore", "-c", _DDP_LOSES_A_PEER], env=dict(env, RANK="1"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        p = subprocess.run([sys.executable, "-W", "ignore", "-c", _DDP_LOSES_A_PEER], env=dict(env, RANK="0"),
                           capture_output=True, text=True, timeout=180)
    finally:
        peer.wait(timeout=60)
    assert "collective failed: True" in p.stdout, p.stdout + p.stderr[-3000:]


def test_leaving_a_group_whose_peer_is_gone_raises_nothing(monkeypatch):
    """After a replica ended, closing the process group may fail (gloo: connection reset by peer); that error
    must not follow the run's one line as a traceback."""
    def reset(*a, **k):
        raise RuntimeError("[gloo/transport/tcp/pair.cc] Read error: Connection reset by peer")

    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "destroy_process_group", reset)
    distributed.teardown()


@pytest.mark.slow
@pytest.mark.parametrize("refused", [["trainer.batch_size=2", "bn.sync=false"],  # by rank 0's run checks
                                     ["lr=0.1", "lr=0.2"]])  # before Hydra starts (a key given twice)
def test_a_refusal_under_torchrun_is_one_line_and_exit_2(tmp_path, data_root, refused):
    p = _torchrun(tmp_path, data_root, *refused, f"hydra.run.dir={tmp_path / 'run'}")
    out, err = _finish(p)
    text = out + err
    assert p.returncode == 2
    assert text.count("bnexp: error:") == 1, text[-3000:]
    assert refused[0] in text and "Traceback" not in text
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_sigterm_to_torchrun_ends_every_replica_interrupted(tmp_path, data_root):
    run_dir = tmp_path / "run"
    p = _torchrun(tmp_path, data_root, "trainer.max_steps=1000000", f"hydra.run.dir={run_dir}")
    try:
        wait_for(lambda: (run_dir / "shift.jsonl").exists() or p.poll() is not None, timeout=300)
        p.send_signal(signal.SIGTERM)
    finally:
        out, err = _finish(p)
    assert p.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in out + err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["signal"] == "SIGTERM" and summary["replicas"] == 2
    # the command it prints resumes the run with its 2 replicas, as the checkpoint requires
    assert "Resume this run with: python -m bnexp.train.torchrun --standalone --nproc-per-node=2 -m bnexp train " in err


@pytest.mark.slow
def test_a_killed_rank_0_leaves_the_run_interrupted(tmp_path, data_root):
    run_dir = tmp_path / "run"
    p = _torchrun(tmp_path, data_root, "trainer.max_steps=1000000", "trainer.ckpt_every=20", f"hydra.run.dir={run_dir}")
    try:
        wait_for(lambda: (run_dir / "checkpoint.pt").exists() or p.poll() is not None, timeout=300)
        os.kill(int((run_dir / ".lock").read_text()), signal.SIGKILL)  # rank 0 holds the folder's lock
    finally:
        out, err = _finish(p)
    assert p.returncode == 128 + signal.SIGKILL, err[-3000:]
    assert "Traceback" not in out + err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["resumable"] is True, (summary, err[-3000:])
    assert "rank 0 ended without recording" in summary["error"]
    assert "rank 0 of this data-parallel run ended without finishing it" in err
    assert not list(run_dir.glob(".*.tmp")) and not (run_dir / ".lock").exists()


_SIGTERM_WHILE_RECORDING = r"""
import json, os, signal, sys, types
from pathlib import Path
import bnexp.cli as cli
import bnexp.train.trainer as trainer
from bnexp.config.schema import compose_config
from bnexp.train import distributed, replica_endings

run_dir = Path(sys.argv[1])
distributed.broadcast_object = lambda obj, replicas, src=0: True  # rank 0 said go
def failed_collective(*a, **k):
    raise RuntimeError("Connection closed by peer")
trainer.train = failed_collective
record = replica_endings.record_lost_rank0
def agent_signals_first(*a):  # torchrun's agent: SIGTERM to the survivors as soon as rank 0 is seen dead
    os.kill(os.getpid(), signal.SIGTERM)
    return record(*a)
replica_endings.record_lost_rank0 = agent_signals_first
cli._follow(compose_config([]), run_dir, types.SimpleNamespace(rank=1, distributed=True, is_main=False))
"""


def test_the_agents_sigterm_does_not_cut_short_the_record_of_a_lost_rank_0(tmp_path):
    """The race seen under load: rank 0 died, the surviving replica's collective failed and torchrun's
    agent sent it SIGTERM at that moment; the replica still records the run and says so in one line."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"status": "running", "step": 40}))
    (run_dir / "checkpoint.pt").write_bytes(b"x")
    p = subprocess.run([sys.executable, "-c", _SIGTERM_WHILE_RECORDING, str(run_dir)], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    assert p.returncode == 1, p.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["resumable"] is True
    assert "replica 1 saw RuntimeError: Connection closed by peer" in summary["error"]
    assert "rank 0 of this data-parallel run ended without finishing it" in p.stderr
    assert "Traceback" not in p.stderr


_FOLLOWER_LOSES_A_PEER = r"""
import sys, types
from pathlib import Path
import bnexp.cli as cli
import bnexp.train.trainer as trainer
from bnexp.config.schema import compose_config
from bnexp.train import distributed

distributed.broadcast_object = lambda obj, replicas, src=0: True  # rank 0 said go
def failed_collective(*a, **k):
    raise RuntimeError("[gloo/transport/tcp/pair.cc:545] Read error: Connection reset by peer")
trainer.train = failed_collective
cli._follow(compose_config([]), Path(sys.argv[1]), types.SimpleNamespace(rank=1, distributed=True, is_main=False))
"""


def test_a_replica_whose_peer_died_while_rank_0_lives_leaves_the_line_to_rank_0(tmp_path):
    """Replica 1's collective failed because another replica (not rank 0) ended: rank 0, alive and holding the run
    folder, records the run and says so in one line; replica 1 ends with exit code 1 and says nothing (it used to
    print the collective's traceback)."""
    from bnexp.runfolders.rundir import RunLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lock = RunLock(run_dir)
    assert lock.acquire()  # rank 0, alive
    try:
        p = subprocess.run([sys.executable, "-c", _FOLLOWER_LOSES_A_PEER, str(run_dir)], capture_output=True,
                           text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
    finally:
        lock.release()
    assert p.returncode == 1 and p.stderr.strip() == "" and p.stdout.strip() == "", p.stderr[-3000:]


_REFUSING_REPLICA = r"""
import sys
import bnexp.cli as cli
from bnexp.train import replica_endings
replica_endings.RANK_0_SAYS_IT_S = float(sys.argv[1])
sys.exit(cli.main(["train", "lr=0.1", "lr=0.2"]))
"""


@pytest.mark.parametrize("wait_s", [1.0, pytest.param(60.0, marks=pytest.mark.slow)])
def test_a_refusing_replica_leaves_the_ending_to_rank_0(tmp_path, wait_s):
    """A replica of rank > 0 that refuses does not exit before rank 0 (torchrun's agent would then
    SIGTERM rank 0 before it printed the refusal): it waits for the agent's SIGTERM, and says the
    refusal itself (one line, naming the replica) only when none came within the wait."""
    env = dict(os.environ, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", COLUMNS="200")
    p = subprocess.Popen([sys.executable, "-c", _REFUSING_REPLICA, str(wait_s)], cwd=tmp_path, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if wait_s > 30:  # the agent, once rank 0 has exited
        with pytest.raises(TimeoutError):  # well past its start-up and refusal: it is still there
            wait_for(lambda: p.poll() is not None, timeout=6)
        p.send_signal(signal.SIGTERM)
    out, err = _finish(p, timeout=120)
    if wait_s > 30:
        assert p.returncode == -signal.SIGTERM and "bnexp: error" not in out + err, err[-3000:]
    else:
        assert p.returncode == 2 and err.count("bnexp: error: replica 1:") == 1 and "lr" in err, err[-3000:]
        assert "Traceback" not in err


_RANK_0_LOSES_A_REPLICA = r"""
import os, signal, sys
import torch
import bnexp.cli as cli
import bnexp.train.stack_loop as stacked
from bnexp.train import distributed

distributed.setup = lambda device, **kw: distributed.Replicas(rank=0, world_size=2, backend="gloo")
distributed.broadcast_object = lambda obj, replicas, src=0: obj
distributed.teardown = lambda: None
def steps_then_a_peer_is_gone(cfg, run_dir, resume, on_begin=None):
    on_begin()
    (run_dir / "checkpoint.pt").write_bytes(b"x")
    torch.distributed.all_reduce(torch.zeros(1))  # fails inside torch.distributed, as a lost peer's does
stacked.member_train = steps_then_a_peer_is_gone
record = cli._record_failure
def agent_signals_first(*a):  # torchrun's agent: SIGTERM to the survivors once it sees a replica gone
    os.kill(os.getpid(), signal.SIGTERM)
    return record(*a)
cli._record_failure = agent_signals_first
sys.exit(cli.main(["train", "trainer.progress=false", f"hydra.run.dir={sys.argv[1]}"]))
"""


def test_rank_0_whose_collective_failed_records_the_run_in_one_line(tmp_path, data_root):
    """Another replica died (killed, out of memory): rank 0's next collective fails. Rank 0 records the
    run interrupted (resumable from its checkpoint), says so in one line instead of the collective's
    traceback, and torchrun's SIGTERM at that moment does not cut it short."""
    run_dir = tmp_path / "run"
    env = dict(os.environ, WORLD_SIZE="2", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="1",
               BNEXP_DATA_ROOT=str(data_root), COLUMNS="300")
    p = subprocess.run([sys.executable, "-c", _RANK_0_LOSES_A_REPLICA, str(run_dir)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and p.stderr.count("bnexp: error:") == 1, p.stderr[-3000:]
    assert "rank 0: another replica of this data-parallel run ended" in p.stderr
    assert "recorded interrupted (re-run the same command to resume" in p.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["resumable"] is True
    assert summary["error"].startswith("another replica of this data-parallel run ended")
