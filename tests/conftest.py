"""Shared test fixtures: the real datasets in ../shared/data, a `bnexp` runner, and the test tiers.

Tiers (pytest markers, see pyproject.toml): ``e2e`` marks a test that starts bnexp (or torchrun,
or any subprocess) as a process -- found here from the test's and its fixtures' source, so a new
test is tiered without remembering to mark it -- or that trains more than a few hundred steps
(marked by hand); ``slow`` marks the longest end-to-end runs. The fast tier for an edit-test loop:
``python -m pytest -m "not e2e and not slow"``.
"""

from __future__ import annotations

import os
import inspect
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("BNEXP_DATA_ROOT") or REPO.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The folder holding MNIST/raw and cifar-10-batches-py (real data, offline)."""
    if not (DATA_ROOT / "MNIST" / "raw").is_dir():
        pytest.fail(f"real MNIST not found under {DATA_ROOT}: set BNEXP_DATA_ROOT to ../shared/data")
    return DATA_ROOT


@pytest.fixture
def run_bnexp(tmp_path, data_root):
    """Run the `bnexp` console script in a subprocess (cwd = tmp_path); returns CompletedProcess."""

    def run(*args: str, timeout: float = 600, env_extra: dict | None = None, cwd: Path | None = None):
        env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120", HYDRA_FULL_ERROR="")
        env.pop("HYDRA_FULL_ERROR")
        env.update(env_extra or {})
        exe = Path(sys.executable).with_name("bnexp")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bnexp.cli"]
        return subprocess.run(cmd + list(args), cwd=cwd or tmp_path, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run



def spawn_bnexp(data_root: Path, cwd: Path, *args: str) -> subprocess.Popen:
    """Start the `bnexp` console script in the background (for tests that kill or race it)."""
    exe = Path(sys.executable).with_name("bnexp")
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120")
    return subprocess.Popen([str(exe), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout: float = 300.0) -> None:
    """Poll `predicate` every 50 ms; TimeoutError after `timeout` seconds."""
    t0 = time.time()
    while not predicate():
        if time.time() - t0 > timeout:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


# Fast settings for end-to-end runs on real data.
FAST = ["trainer.progress=false", "trainer.num_threads=1"]


def pytest_configure(config):
    """Run as a terminal's foreground job would, also when started in the background: a shell starts
    background jobs with SIGINT ignored, which every child inherits, so Ctrl-C tests (in this process
    and in the bnexp processes they start) would see nothing. Python's own handler is put back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# a test (or one of its fixtures, or a helper of its module it calls) that runs any of these
# starts a process: tier e2e
_PROCESS_CALLS = re.compile(r"\b(run_bnexp|spawn_bnexp|subprocess\.|Popen|torchrun|os\.system)\b")
_CALLS = re.compile(r"\b([A-Za-z_]\w*)\(")


def _starts_a_process(fn, module=None, depth: int = 1) -> bool:
    """Whether ``fn``'s source (or, ``depth`` levels down, a function of ``module`` it calls) starts a process."""
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    if _PROCESS_CALLS.search(src):
        return True
    if module is None or depth == 0:
        return False
    helpers = {getattr(module, name, None) for name in _CALLS.findall(src)}
    return any(inspect.isfunction(h) and h is not fn and h.__module__ == module.__name__
               and _starts_a_process(h, module, depth - 1) for h in helpers)


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts a process (itself, through a fixture, or through a helper) ``e2e``."""
    for item in items:
        fn = getattr(item, "function", None)
        if fn is None or item.get_closest_marker("e2e"):
            continue
        module = getattr(item, "module", None)
        info = getattr(item, "_fixtureinfo", None)
        fixtures = [fdef.func for name in item.fixturenames
                    for fdef in (info.name2fixturedefs.get(name, ()) if info else ())]
        if "run_bnexp" in item.fixturenames or any(
                _starts_a_process(f, module) for f in [fn, *fixtures]):
            item.add_marker(pytest.mark.e2e)
