"""Resume accepts changes that cannot alter results and refuses the rest, naming the key
(docs/reliability.md, "Resume"): the progress bar, the checkpoint cadence, a device that resolves to
the same one (``cpu`` for a run made with ``auto`` on a machine without CUDA), a data root that resolves
to the same files (a symlink to it) -- each resumes the run from its checkpoint; another learning rate
is refused with the key in the message and the folder untouched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from bnexp.runfolders import rundir

from conftest import SHORT_RUN

pytestmark = pytest.mark.e2e  # each test trains short runs in this process

# SHORT_RUN without the keys a test changes; those come from _args
BASE = [o for o in SHORT_RUN if not o.startswith(("trainer.progress=", "trainer.ckpt_every=", "trainer.device="))]
BASE += ["seed=4"]
FIRST = {"trainer.progress": "false", "trainer.ckpt_every": "10", "trainer.device": "auto"}


def _args(run_dir: Path, **changes: str) -> list[str]:
    values = {**FIRST, **{k.replace("__", "."): v for k, v in changes.items()}}
    return ["train", *BASE, *(f"{k}={v}" for k, v in values.items()), f"hydra.run.dir={run_dir}"]


def _unfinished(bnexp_main, run_dir: Path) -> None:
    """A run of 20 steps whose summary says it stopped after its last checkpoint (step 20)."""
    code, err, _ = bnexp_main(*_args(run_dir))
    assert code == 0, err
    rundir.write_summary(run_dir, {**rundir.read_summary(run_dir), "status": "interrupted"})


@pytest.mark.parametrize("key,value", [("trainer.progress", "true"), ("trainer.ckpt_every", "5"),
                                       ("trainer.device", "cpu"), ("data.root", "LINK")])
def test_a_result_neutral_change_resumes(bnexp_main, tmp_path, data_root, key, value):
    if torch.cuda.is_available() and key == "trainer.device":
        pytest.skip("auto resolves to cuda here")
    run_dir = tmp_path / "run"
    _unfinished(bnexp_main, run_dir)
    if value == "LINK":
        os.symlink(data_root, tmp_path / "link")
        value = str(tmp_path / "link")
    code, err, _ = bnexp_main(*_args(run_dir, **{key.replace(".", "__"): value}))
    assert code == 0, err
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "finished" and summary["resumed_from_step"] == 20


def test_a_result_changing_key_is_refused_by_name(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    _unfinished(bnexp_main, run_dir)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    code, err, _ = bnexp_main(*_args(run_dir, lr="0.3"))
    assert code == 2 and "lr: 0.12 there, 0.3 now" in err
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
