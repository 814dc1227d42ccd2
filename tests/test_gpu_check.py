"""scripts/gpu_check.sh without a GPU: its dry run shows the plan and its time budget (under 8 minutes),
runs nothing and writes nothing, and every run it plans is a config bnexp accepts; bench_stacked.py's exit
code says whether the stack was faster (the check's speed gate)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import REPO


def test_the_dry_run_shows_the_plan_and_its_budget_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    kept = (REPO / "docs" / "gpu_checks.md").read_bytes()
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable)
    r = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), str(out)], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    budget, limit = map(int, re.search(r"budget (\d+) s, stopped at (\d+) s at most \(limit 480 s\)", head).groups())
    assert budget <= limit <= 480
    steps = re.findall(r"^  (\d)\. ([^:]+):", r.stdout, flags=re.M)
    assert [name for _, name in steps] == ["gpu test tier", "bench_stacked (cuda)", "MNIST pair, 2000 steps",
                                           "CIFAR-10 bn_baseline, 500 steps", "the table"]
    assert sum(int(b) for b in re.findall(r"^  \d\. .*: budget (\d+) s, stopped", r.stdout, flags=re.M)) <= budget
    commands = [line.split("$ ", 1)[1] for line in r.stdout.splitlines() if line.strip().startswith("$ ")]
    assert len(commands) == 4
    assert "-m gpu tests/test_gpu.py" in commands[0] and f"BNEXP_GPU_SYNC_LOG={out}/syncs.json" in commands[0]
    assert "--device cuda" in commands[1] and "--require-faster mlp:8" in commands[1]
    assert not out.exists() and (REPO / "docs" / "gpu_checks.md").read_bytes() == kept

    from bnexp.config.schema import compose_config, validate

    for cmd in commands[2:]:  # each planned run composes and validates as `bnexp train` would
        words = shlex.split(cmd)
        overrides = [w.split(",")[0] for w in words[words.index("train") + 1:] if w != "-m" and not w.startswith("hydra.")]
        assert any(w.startswith("trainer.max_steps=") for w in overrides)
        cfg = compose_config([o.replace("trainer.device=cuda", "trainer.device=cpu") for o in overrides])
        validate(cfg)
        assert cfg.trainer.device == "cpu" and cfg.trainer.precision == "fp32"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_stacked", REPO / "benchmarks" / "bench_stacked.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # loads MNIST and builds two stacks of trainers
@pytest.mark.parametrize("stacked_s, code", [(4.0, 1), (0.5, 0)])
def test_bench_stacked_fails_when_the_stack_is_not_faster(stacked_s, code, tmp_path, data_root, monkeypatch,
                                                           capsys):
    """The timed loops replaced by fixed times (1 s separate, ``stacked_s`` stacked): ratio 0.25 exits 1 with one
    line naming the case, ratio 2 exits 0; --json holds the medians."""
    bench = _bench()
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    monkeypatch.setattr(bench, "separate_block", lambda members, steps, sync: 1.0)
    monkeypatch.setattr(bench, "stacked_block", lambda members, net, steps, sync: stacked_s)
    out = tmp_path / "bench.json"
    monkeypatch.setattr(sys, "argv", ["bench_stacked.py", "--cases", "mlp:2", "--steps", "10", "--blocks", "1",
                                      "--require-faster", "mlp:2", "--json", str(out)])
    assert bench.main() == code
    err = capsys.readouterr().err
    assert ("mlp:2 is not faster stacked than as separate runs (ratio 0.25x)" in err) == (code == 1)
    case = json.loads(out.read_text())["cases"]["mlp:2"]
    assert case == pytest.approx({"separate": 20.0, "stacked": 20.0 / stacked_s, "ratio": 1.0 / stacked_s})
