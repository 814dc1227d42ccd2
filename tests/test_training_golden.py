"""Training results are bit-identical to the recorded ones (tests/golden/training_golden_<cpu kind>.json).

The golden files were written by ``tests/golden/make_training_golden.py`` with an earlier version
of the trainer, one per CPU kernel level (AVX2, AVX512); each configuration (plain, BN, noisy BN,
reference BN, a CNN with dropout, momentum and an exponential schedule, gradient ICS + landscape
probe, Alg. 2 population statistics, a resumed run) is trained again here with the current code. With the same torch
version and CPU kernel level (``torch.backends.cpu.get_cpu_capability()``) as a golden file,
every recorded number and the sha256 of the final weights must be *equal* to that file's; on a
machine no file matches, floating-point kernels differ, so the numbers are compared with a
relative tolerance of 1e-5 (the weights' hash is not compared) and a difference beyond it is an
expected failure that says why.
"""

from __future__ import annotations

import importlib.util
import json
import math
import warnings
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("make_training_golden", HERE / "golden" / "make_training_golden.py")
golden_maker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden_maker)

GOLDENS = [json.loads(p.read_text()) for p in sorted((HERE / "golden").glob(golden_maker.GOLDEN_GLOB))]
# the file made on this machine's torch and CPU kernel level, else the first (compared with a tolerance)
SAME = [g for g in GOLDENS if golden_maker.environment() == {k: g[k] for k in ("torch", "cpu_capability")}]
GOLDEN, SAME_ENVIRONMENT = (SAME or GOLDENS)[0], bool(SAME)
REL_TOL = 1e-5

pytestmark = pytest.mark.slow  # about 10 s of training per configuration


def differences(want, got, path: str = "", tol: float = 0.0) -> list[str]:
    """Where ``got`` differs from ``want`` (numbers: beyond relative ``tol``; 0 = exact)."""
    if isinstance(want, dict) and isinstance(got, dict):
        if set(want) != set(got):
            return [f"{path}: keys {sorted(set(want) ^ set(got))} differ"]
        return [d for k in want for d in differences(want[k], got[k], f"{path}.{k}", tol)]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{path}: {len(want)} entries recorded, {len(got)} now"]
        return [d for i, (a, b) in enumerate(zip(want, got)) for d in differences(a, b, f"{path}[{i}]", tol)]
    if (isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool)
            and tol > 0 and math.isclose(want, got, rel_tol=tol, abs_tol=tol * 1e-3)):
        return []
    return [] if want == got else [f"{path}: recorded {want!r}, now {got!r}"]


def test_differences_sees_one_bit():
    """The comparison itself: one ulp in a nested float is a difference; within tol it is not."""
    a = {"m": [{"x": 0.1, "s": "h"}]}
    b = {"m": [{"x": math.nextafter(0.1, 1.0), "s": "h"}]}
    assert differences(a, b) == [".m[0].x: recorded 0.1, now 0.10000000000000002"]
    assert differences(a, b, tol=1e-5) == []
    assert differences(a, {"m": [{"x": 0.1, "s": "other"}]}, tol=1e-5)


@pytest.mark.parametrize("name", list(GOLDEN["configs"]))
def test_training_matches_golden(name, tmp_path, data_root, monkeypatch):
    """Config ``name`` trains to the recorded metrics, shift percentiles, ICS records and weights."""
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    recorded = GOLDEN["configs"][name]
    assert recorded["overrides"] == golden_maker.CONFIGS[name], "the golden file is for other overrides: rerun " \
                                                                "tests/golden/make_training_golden.py"
    got = golden_maker.run_config(name, tmp_path)
    want = recorded["results"]
    stale = GOLDEN.get("stale", {}).get(name)  # records a later measurement change made stale on this CPU level
    if stale:
        for key in stale["keys"]:
            want.pop(key), got.pop(key)
        warnings.warn(f"{name}: {', '.join(stale['keys'])} not compared: {stale['why']}")
    if SAME_ENVIRONMENT:
        assert differences(want, got) == []
        return
    env = golden_maker.environment()
    got.pop("model_sha256"), want.pop("model_sha256")
    diffs = differences(want, got, tol=REL_TOL)
    reason = (f"golden made with torch {GOLDEN['torch']} / CPU {GOLDEN['cpu_capability']}, this is torch "
              f"{env['torch']} / CPU {env['cpu_capability']}: bit-identity not expected, compared with rel tol "
              f"{REL_TOL} without the weights' hash")
    if diffs:
        pytest.xfail(f"{reason}; differs: {diffs[:3]}")
    warnings.warn(reason)
