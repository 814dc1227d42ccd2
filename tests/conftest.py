"""Shared test fixtures: the real datasets in ../shared/data and a `bnexp` runner."""

from __future__ import annotations

import os
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
