"""Symlink loops and dangling symlinks as the run folder, the sweep folder or the data root (or a
folder above one): one line naming the link, exit code 2, no traceback and nothing made
(docs/reliability.md, "Paths"). Without this, Python 3.11's ``Path.resolve`` raised
``RuntimeError: Symlink loop`` and Hydra's ``mkdir`` a ``FileExistsError``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bnexp.runfolders.paths import broken_link

from conftest import SHORT_RUN


def _loop(tmp_path: Path) -> Path:
    a, b = tmp_path / "loop_a", tmp_path / "loop_b"
    os.symlink(b, a)
    os.symlink(a, b)
    return a


def _dangling(tmp_path: Path) -> Path:
    link = tmp_path / "dangling"
    os.symlink(tmp_path / "gone", link)
    return link


def test_broken_link_finds_the_link_in_the_path(tmp_path):
    loop, dangling = _loop(tmp_path), _dangling(tmp_path)
    assert broken_link(loop) == (loop, "a symlink loop")
    assert broken_link(loop / "run" / "x") == (loop, "a symlink loop")
    assert broken_link(dangling / "run") == (dangling, f"a dangling symlink (to {tmp_path / 'gone'})")
    assert broken_link(tmp_path / "new" / "run") is None  # a folder still to be made
    good = tmp_path / "good"
    os.symlink(tmp_path, good)
    assert broken_link(good / "run") is None


@pytest.mark.parametrize("make", [_loop, _dangling])
@pytest.mark.parametrize("key", ["hydra.run.dir", "hydra.sweep.dir"])
def test_a_broken_link_as_output_folder_is_one_line(bnexp_main, tmp_path, make, key):
    link = make(tmp_path)
    for target in (link, link / "run"):
        code, err, _ = bnexp_main("train", *(["-m"] if key == "hydra.sweep.dir" else []), *SHORT_RUN,
                                  f"{key}={target}")
        assert code == 2, err
        assert err.count("bnexp: error:") == 1 and "Traceback" not in err
        assert f"{link} is a " in err and "leads nowhere" in err and f"{key}=PATH" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["loop_a", "loop_b"] if make is _loop else ["dangling"])


@pytest.mark.parametrize("make", [_loop, _dangling])
def test_a_broken_link_as_data_root_is_one_line(bnexp_main, tmp_path, make, monkeypatch):
    link = make(tmp_path)
    run_dir = tmp_path / "run"
    code, err, _ = bnexp_main("train", *SHORT_RUN, f"data.root={link}", f"hydra.run.dir={run_dir}")
    assert code == 2, err
    assert err.count("bnexp: error:") == 1 and "Traceback" not in err
    assert f"the data root (data.root) {link} is a " in err
    assert not run_dir.exists()  # refused before it began: no folder left
    monkeypatch.setenv("BNEXP_DATA_ROOT", str(link / "data"))
    code, err, _ = bnexp_main("train", *SHORT_RUN, f"hydra.run.dir={run_dir}")
    assert code == 2 and f"the data root (BNEXP_DATA_ROOT) {link} is a " in err and f"(in {link / 'data'})" in err
