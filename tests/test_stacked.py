"""Many runs in one process (hydra/launcher=stacked, docs/stacked.md): the stacked model, the grouping of a
sweep's runs, the stack's loop against the same runs trained alone, and the launcher end to end."""

from __future__ import annotations

import contextlib
import copy
import json
import signal
from pathlib import Path

import pytest
import torch
from torch import nn

from bnexp.config.schema import compose_config
from bnexp.nets.bn.stacked import stacked_batch_norm
from bnexp.nets.models import build_model
from bnexp.config.stacks import group_runs, why_alone
from bnexp.train.stacked_net import StackedNet
from tests.conftest import FAST, spawn_bnexp, strict_json, wait_for


# ----- BN per run ---------------------------------------------------------------------------------
def test_stacked_batch_norm_is_each_runs_own_batch_norm():
    """(R, m, d): run r normalized over its own m examples with its own gamma, beta and running statistics,
    exactly as nn.BatchNorm1d of that run alone (Alg. 1; running averages as torch's)."""
    torch.manual_seed(0)
    R, m, d = 3, 7, 5
    x = torch.randn(R, m, d) * torch.arange(1, R + 1).view(R, 1, 1) + 2.0
    bns = [nn.BatchNorm1d(d, momentum=0.3) for _ in range(R)]
    for bn in bns:
        nn.init.uniform_(bn.weight)
        nn.init.uniform_(bn.bias)
    rm, rv = torch.zeros(R, d), torch.ones(R, d)
    w = torch.stack([bn.weight.detach() for bn in bns])
    b = torch.stack([bn.bias.detach() for bn in bns])
    y = stacked_batch_norm(x, rm, rv, w, b, True, 0.3, 1e-5)
    for r in range(R):
        alone = bns[r](x[r])
        torch.testing.assert_close(y[r], alone, rtol=0, atol=1e-6)
        # the hand-computed Alg. 1 as a second, independent expectation
        mu, var = x[r].mean(0), x[r].var(0, unbiased=False)
        torch.testing.assert_close(y[r], (x[r] - mu) / torch.sqrt(var + 1e-5) * w[r] + b[r], rtol=0, atol=1e-5)
        torch.testing.assert_close(rm[r], bns[r].running_mean, rtol=0, atol=1e-7)
        torch.testing.assert_close(rv[r], bns[r].running_var, rtol=0, atol=1e-6)


def test_stacked_batch_norm_grouped_conv_layout_is_per_run_and_channel():
    """(N, R*C, H, W): channel r*C + c is run r's channel c, normalized over its (N, H, W) values."""
    torch.manual_seed(1)
    R, N, C = 2, 4, 3
    x = torch.randn(R, N, C, 5, 5) + torch.arange(R).view(R, 1, 1, 1, 1)
    grouped = x.transpose(0, 1).reshape(N, R * C, 5, 5)
    rm, rv = torch.zeros(R, C), torch.ones(R, C)
    y = stacked_batch_norm(grouped, rm, rv, torch.ones(R, C), torch.zeros(R, C), True, 0.1, 1e-5)
    for r in range(R):
        bn = nn.BatchNorm2d(C)
        torch.testing.assert_close(y[:, r * C:(r + 1) * C], bn(x[r]), rtol=0, atol=1e-6)
        torch.testing.assert_close(rv[r], bn.running_var, rtol=0, atol=1e-6)


# ----- the batched model ----------------------------------------------------------------------------
def _models(overrides: list[str], seeds: list[int]):
    models = []
    for s in seeds:
        torch.manual_seed(s)
        models.append(build_model(compose_config(overrides + [f"seed={s}"]), (1, 28, 28), 10))
    return models


@pytest.mark.parametrize("overrides", [["bn=true"], ["bn=false", "act=relu"], ["bn=true", "bn.position=after"],
                                       ["model=cnn", "model.channels=[4,8]", "model.fc=16", "act=relu"]])
def test_stacked_net_forward_is_each_runs_forward(overrides):
    """At the same parameters, run r's logits in the stack are its own model's logits (training mode)."""
    models = _models(overrides, [0, 1, 2])
    alone = [copy.deepcopy(m) for m in models]
    net = StackedNet(models, [torch.optim.SGD(m.parameters(), lr=0.1) for m in models],
                     lambda r: contextlib.nullcontext())
    x = torch.rand(3, 8, 1, 28, 28)
    out = net.forward(x)
    for r in range(3):
        torch.testing.assert_close(out[r], alone[r](x[r]), rtol=0, atol=1e-6)


def test_stacked_sgd_step_is_torch_sgd_per_run():
    """One step of 3 MLP runs with their own rates and weight decays, momentum and Nesterov: every parameter
    and BN buffer as torch.optim.SGD on each run alone; the run's models view the stack's new values."""
    models = _models(["bn=true"], [0, 1, 2])
    alone = [copy.deepcopy(m) for m in models]
    lrs, wds = [0.1, 0.5, 0.02], [0.0, 1e-3, 1e-2]
    opts_alone = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
                  for m, lr, wd in zip(alone, lrs, wds)]
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=0.9, nesterov=True, weight_decay=wd)
            for m, lr, wd in zip(models, lrs, wds)]
    net = StackedNet(models, opts, lambda r: contextlib.nullcontext())
    torch.manual_seed(5)
    for _ in range(3):
        x, y = torch.rand(3, 16, 1, 28, 28), torch.randint(0, 10, (3, 16))
        loss, _ = net.step(x, y, torch.tensor(lrs), torch.tensor(wds))
        for r in range(3):
            ref = nn.functional.cross_entropy(alone[r](x[r]), y[r])
            opts_alone[r].zero_grad()
            ref.backward()
            opts_alone[r].step()
            assert abs(float(loss[r]) - float(ref.detach())) <= 1e-6 * float(ref.detach())
    for r in range(3):
        for a, b in zip(alone[r].state_dict().values(), models[r].state_dict().values()):
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-5, atol=1e-6)
        buf_alone = [opts_alone[r].state[p]["momentum_buffer"] for p in alone[r].parameters()]
        buf = [opts[r].state[p]["momentum_buffer"] for p in models[r].parameters()]
        for a, b in zip(buf_alone, buf):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("overrides", [["bn=true"], ["bn=false", "act=relu", "model.init=kaiming", "model.init_std=null"]])
def test_plain_sgd_step_updates_weights_in_the_backward_pass_as_torch_sgd(overrides):
    """Plain SGD (the default): the fully-connected weights are updated inside the backward pass (one batched
    product per layer) -- the same update as torch.optim.SGD's on each run, to float rounding."""
    models = _models(overrides, [0, 1, 2])
    alone = [copy.deepcopy(m) for m in models]
    lrs = [0.1, 0.5, 0.02]
    opts_alone = [torch.optim.SGD(m.parameters(), lr=lr) for m, lr in zip(alone, lrs)]
    net = StackedNet(models, [torch.optim.SGD(m.parameters(), lr=lr) for m, lr in zip(models, lrs)],
                     lambda r: contextlib.nullcontext())
    torch.manual_seed(6)
    for _ in range(3):
        x, y = torch.rand(3, 16, 1, 28, 28), torch.randint(0, 10, (3, 16))
        net.step(x, y, torch.tensor(lrs), None)
        for r in range(3):
            opts_alone[r].zero_grad()
            nn.functional.cross_entropy(alone[r](x[r]), y[r]).backward()
            opts_alone[r].step()
    for r in range(3):
        for (name, a), b in zip(alone[r].state_dict().items(), models[r].state_dict().values()):
            torch.testing.assert_close(b.float(), a.float(), rtol=1e-5, atol=1e-6, msg=name)
        assert all(p.grad is None for p in models[r].parameters())


def test_dropout_masks_are_each_runs_own():
    """A run's dropout mask in the stack is the one nn.Dropout draws from that run's RNG state alone."""
    models = _models(["bn=false", "model.dropout=0.5"], [0, 1])
    states = [torch.Generator().manual_seed(10 + r).get_state() for r in range(2)]

    @contextlib.contextmanager
    def swap(r):
        outer = torch.get_rng_state()
        torch.set_rng_state(states[r])
        yield
        states[r] = torch.get_rng_state()
        torch.set_rng_state(outer)

    masks = StackedNet(models, [torch.optim.SGD(m.parameters(), lr=0.1) for m in models], swap)._dropout_masks(
        [0.5, 0.5], (4, 6), torch.zeros(()))
    for r in range(2):
        torch.manual_seed(10 + r)
        alone = nn.Dropout(0.5)(torch.ones(4, 6))
        torch.testing.assert_close(masks[r], alone, rtol=0, atol=0)


# ----- the grouping of a sweep --------------------------------------------------------------------
def test_runs_differing_only_in_stackable_keys_share_a_stack():
    base = ["trainer.max_steps=100"]
    cfgs = [compose_config(base + o) for o in (["seed=0"], ["seed=1", "lr=0.5"], ["bn=false"],
                                                 ["seed=2", "model.dropout=0.1", "optim.weight_decay=1e-4"],
                                                 ["trainer.batch_size=30"], ["model=cnn"], ["seed=3"])]
    assert why_alone(cfgs[5]) is not None and why_alone(cfgs[0]) is None
    assert group_runs(cfgs, 32) == [[0, 1, 3, 6], [2], [4], [5]]
    assert group_runs(cfgs, 2) == [[0, 1], [2], [3, 6], [4], [5]]
    with pytest.raises(ValueError):
        group_runs(cfgs, 0)


# ----- the stack's loop against the runs alone ---------------------------------------------------------
STEPS = ["trainer.progress=false", "trainer.num_threads=1", "trainer.device=cpu", "trainer.max_steps=200",
         "trainer.eval_every=100", "trainer.hist_every=50", "trainer.log_every=50", "trainer.ckpt_every=100"]
RATES = [0.1, 0.5, 0.2, 1.0]


def _percentiles(path: Path) -> list[float]:
    """Every percentile of every monitor record of ``shift.jsonl`` (per layer, and of the monitored unit)."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        for stats in [*rec["layers"].values(), rec.get("unit") or {}]:
            out += [float(v) for k, v in sorted(stats.items()) if k.startswith("p") and k[1:].replace(".", "").isdigit()]
    return out


# Agreement of a stacked run with the run alone after 200 steps: a smooth net (sigmoid, noisy BN) agrees to
# rounding size; a ReLU net amplifies last-bit differences where a pre-activation sits at the kink (measured on an
# AVX-512 CPU, whose batched and single matrix products round differently: in these runs up to 1e-3 relative in
# test loss, 4e-4 in accuracy, 0.023 in a percentile, 4e-3 in loss at rate 0.005; the same run alone on 2 threads
# instead of 1 moves as much). The ReLU
# bound stays below what a wiring error gives (measured: rate 5% off 2e-2 to 4e-2 in loss, 0.05 in a percentile;
# the decay schedule or momentum 0.8 for 0.9, 1e-2 to 1); one SGD step with weight decay and momentum is checked
# to rounding by test_stacked_sgd_step_is_torch_sgd_per_run.
SMOOTH = {"acc": 2e-4, "loss": 1e-5, "pct": 1e-4}
RELU = {"acc": 1e-3, "loss": 1e-2, "pct": 0.05}


@pytest.mark.slow
@pytest.mark.parametrize("variant,scale,tol", [
    (["bn=true"], 1.0, SMOOTH),
    # ReLU nets at rates where their training is stable (docs/stacked.md): without BN 0.01-0.1; with momentum 0.9
    # (about 10x the step) 0.002-0.02
    (["bn=false", "act=relu", "model.init=kaiming", "model.init_std=null"], 0.1, RELU),
    (["bn=noisy", "model.dropout=0.2"], 1.0, SMOOTH),
    (["bn=true", "act=relu", "optim.momentum=0.9", "optim.weight_decay=1e-4", "optim.schedule=exponential",
      "optim.decay_rate=0.5", "optim.decay_steps=100"], 0.02, RELU)])
def test_each_run_of_a_stack_of_4_is_the_run_alone(tmp_path, data_root, monkeypatch, variant, scale, tol):
    """MLP runs of 4 seeds and rates, 200 steps, fp32 on CPU, against the same config trained alone: test accuracy,
    relative test loss and every monitor percentile within ``tol`` (:data:`SMOOTH` or :data:`RELU`, above)."""
    from bnexp.train.stack_loop import train_stack
    from bnexp.train.trainer import train

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    cfgs = [compose_config(STEPS + variant + [f"seed={i}", f"lr={scale * r:g}"]) for i, r in enumerate(RATES)]
    alone = [train(cfg, tmp_path / f"alone{i}") for i, cfg in enumerate(cfgs)]
    stacked = train_stack([(cfg, tmp_path / f"stack{i}", True) for i, cfg in enumerate(cfgs)])
    for i, (a, s) in enumerate(zip(alone, stacked)):
        assert isinstance(s, dict), s
        assert s["status"] == a["status"] == "finished"
        pa = _percentiles(tmp_path / f"alone{i}" / "shift.jsonl")
        ps = _percentiles(tmp_path / f"stack{i}" / "shift.jsonl")
        assert len(pa) == len(ps) > 0
        gap = {"acc": abs(s["final_test_accuracy"] - a["final_test_accuracy"]),
               "loss": abs(s["final_test_loss"] - a["final_test_loss"]) / a["final_test_loss"],
               "pct": max(abs(x - y) for x, y in zip(pa, ps))}
        assert all(gap[k] <= tol[k] for k in gap), f"run {i}: stack vs alone {gap}, allowed {tol}"
        for name in ("metrics.jsonl", "shift.jsonl", "summary.json", "config.yaml", "checkpoint.pt"):
            assert (tmp_path / f"stack{i}" / name).exists()
        assert list((tmp_path / f"stack{i}").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_a_diverging_run_stops_and_the_others_go_on(tmp_path, data_root, monkeypatch):
    """lr=1e4 on the plain sigmoid net overflows within a few steps: that run ends ``diverged`` (its summary
    says at which step) while the two others train to the end."""
    from bnexp.train.stack_loop import train_stack

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    short = ["trainer.progress=false", "trainer.num_threads=1", "trainer.device=cpu", "trainer.max_steps=30",
             "trainer.eval_every=10", "trainer.hist_every=10", "trainer.log_every=5", "trainer.probe_size=100",
             "bn=false", "model.init=normal", "model.init_std=10"]
    runs = [["seed=0", "lr=0.1"], ["seed=1", "lr=1e30"], ["seed=2", "lr=0.2"]]
    out = train_stack([(compose_config(short + r), tmp_path / f"r{i}", True) for i, r in enumerate(runs)])
    assert [o["status"] for o in out] == ["finished", "diverged", "finished"]
    assert out[1]["diverged_step"] < 30 and out[0]["step"] == out[2]["step"] == 30
    assert strict_json((tmp_path / "r1" / "summary.json").read_text())["status"] == "diverged"


# ----- the launcher end to end ------------------------------------------------------------------------
SWEEP = [*FAST, "trainer.max_steps=120", "trainer.eval_every=20", "trainer.hist_every=20", "trainer.log_every=10",
         "trainer.ckpt_every=20", "trainer.probe_size=200", "hydra/launcher=stacked"]


def test_stacked_sweep_writes_ordinary_run_folders_and_resumes_after_a_kill(tmp_path, data_root, run_bnexp):
    """``bnexp train -m seed=0,1 lr=0.1,0.5 hydra/launcher=stacked``: SIGINT while it trains saves every run's
    checkpoint; the same command again resumes each run from it; 4 ordinary run folders that ``bnexp report``
    reads, each as the run of that config alone (its test accuracy)."""
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "seed=0,1", "lr=0.1,0.5", *SWEEP, f"hydra.sweep.dir={sweep}"]
    proc = spawn_bnexp(data_root, tmp_path, *args)
    runs = lambda: [d for d in sweep.glob("lr=*") if d.is_dir()]  # noqa: E731
    wait_for(lambda: len(runs()) == 4 and all((d / "checkpoint.pt").exists() for d in runs()), timeout=600)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode != 0
    statuses = {d.name: strict_json((d / "summary.json").read_text())["status"] for d in runs()}
    assert set(statuses.values()) <= {"interrupted", "finished"}
    stopped = [name for name, s in statuses.items() if s == "interrupted"]
    assert all(f"checkpoint saved in {sweep / name}" in err for name in stopped), err[-3000:]
    assert err.count("Resume the sweep with:") == 1, err[-3000:]  # once for the stack, not once per run
    r = run_bnexp(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    summaries = {d.name: strict_json((d / "summary.json").read_text()) for d in runs()}
    assert sorted(summaries) == ["lr=0.1,seed=0", "lr=0.1,seed=1", "lr=0.5,seed=0", "lr=0.5,seed=1"]
    for name, s in summaries.items():
        assert s["status"] == "finished" and s["step"] == 120
        steps = [json.loads(line)["step"] for line in (sweep / name / "metrics.jsonl").read_text().splitlines()]
        assert steps == [0, 20, 40, 60, 80, 100, 120]  # no record lost or repeated across the resume
        assert (sweep / name / ".hydra" / "overrides.yaml").exists()
    assert any(s.get("resumed_from_step") for s in summaries.values())
    # a run alone in its own folder ends where its stacked twin ended
    alone = run_bnexp("train", "seed=1", "lr=0.5", *SWEEP[:-1], f"hydra.run.dir={tmp_path / 'alone'}")
    assert alone.returncode == 0, alone.stderr[-3000:]
    a = strict_json((tmp_path / "alone" / "summary.json").read_text())
    assert abs(a["final_test_accuracy"] - summaries["lr=0.5,seed=1"]["final_test_accuracy"]) <= 2e-4
    # a third call finds every run finished and trains nothing
    again = run_bnexp(*args)
    assert again.returncode == 0 and "already complete" in again.stdout + again.stderr
    rep = run_bnexp("report", str(sweep))
    assert rep.returncode == 0, rep.stderr[-3000:]
    assert (sweep / "report.json").exists()


def test_a_stack_killed_outright_resumes_every_run_once(tmp_path, data_root, run_bnexp):
    """SIGKILL to the process of a stack mid-run (no handler runs: summaries stay ``running``, the locks' files
    stay): the same command resumes every run of the stack from its checkpoint, each once, and no step's record
    appears twice; no run starts over, no run folder is added."""
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "seed=0,1,2", *SWEEP, f"hydra.sweep.dir={sweep}"]
    proc = spawn_bnexp(data_root, tmp_path, *args)
    runs = lambda: sorted(d for d in sweep.glob("seed=*") if d.is_dir())  # noqa: E731
    try:
        wait_for(lambda: len(runs()) == 3 and all((d / "checkpoint.pt").exists() for d in runs()), timeout=600)
        proc.kill()
    finally:
        proc.communicate(timeout=120)
    before = {d.name: strict_json((d / "summary.json").read_text())["status"] for d in runs()}
    assert set(before.values()) <= {"running", "finished"} and "running" in before.values(), before
    r = run_bnexp(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert [d.name for d in runs()] == ["seed=0", "seed=1", "seed=2"]
    for d in runs():
        s = strict_json((d / "summary.json").read_text())
        assert s["status"] == "finished" and s["step"] == 120, (d.name, s)
        if before[d.name] == "running":
            assert s.get("resumed_from_step"), (d.name, s)  # resumed, not started over
        steps = [json.loads(line)["step"] for line in (d / "metrics.jsonl").read_text().splitlines()]
        assert steps == [0, 20, 40, 60, 80, 100, 120], (d.name, steps)
        assert not list(d.glob("checkpoint.unreadable-*")) and not (d / ".lock").exists()


def test_stacks_run_two_at_a_time_and_each_run_logs_to_its_own_train_log(tmp_path, run_bnexp):
    """``hydra.launcher.n_jobs=2``: the two stacks (bn=true, bn=false) run in two processes; each run's train.log
    has its own lines (its model line names its seed and bn) and not its stack-mates'."""
    sweep = tmp_path / "sweep"
    r = run_bnexp("train", "-m", "seed=0,1", "bn=true,false", *FAST, "trainer.max_steps=20", "trainer.eval_every=10",
                  "trainer.hist_every=10", "trainer.log_every=5", "trainer.probe_size=100", "hydra/launcher=stacked",
                  "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 jobs in 2 stacks" in r.stdout + r.stderr
    for bn in ("true", "false"):
        for seed in (0, 1):
            run = sweep / f"bn={bn},seed={seed}"
            assert strict_json((run / "summary.json").read_text())["status"] == "finished"
            models = [line for line in (run / "train.log").read_text().splitlines() if "model: mlp" in line]
            assert len(models) == 1 and f"seed={seed}" in models[0] and f"bn={bn == 'true'}" in models[0]


def test_every_worker_gets_a_stack_when_the_runs_allow(tmp_path, run_bnexp):
    """One stackable group of 4 runs with ``n_jobs=2``: two stacks of 2 (each at most its share of the jobs,
    ceil(4 / 2)), not one stack of 4 beside an idle worker; with ``n_jobs=1`` one stack of 4."""
    for n_jobs, stacks in ((2, "4 jobs in 2 stacks of at most 2 runs"), (1, "4 jobs in 1 stacks of at most 4 runs")):
        r = run_bnexp("train", "-m", "seed=0,1,2,3", *FAST, "trainer.max_steps=5", "trainer.eval_every=5",
                      "trainer.hist_every=5", "trainer.probe_size=100", "hydra/launcher=stacked",
                      f"hydra.launcher.n_jobs={n_jobs}", f"hydra.sweep.dir={tmp_path / str(n_jobs)}")
        assert r.returncode == 0, r.stderr[-3000:]
        assert stacks in r.stdout + r.stderr


@pytest.mark.parametrize("value, words", [("0", "hydra.launcher.max_stack=0: must be >= 1"),
                                          ("abc", "hydra.launcher.max_stack")])
def test_a_bad_max_stack_is_one_line_and_exit_2(tmp_path, bnexp_main, value, words):
    code, err, out = bnexp_main("train", "-m", "seed=0,1", *FAST, "trainer.max_steps=5", "hydra/launcher=stacked",
                                f"hydra.launcher.max_stack={value}", f"hydra.sweep.dir={tmp_path / 's'}")
    assert code == 2
    assert words in err and "Traceback" not in err + out
    assert len([line for line in err.splitlines() if line.startswith("bnexp: error")]) == 1
