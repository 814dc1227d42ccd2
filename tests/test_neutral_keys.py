"""The result-neutral keys (``bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS``), in two kinds that
docs/reliability.md names apart: the bit-neutral ones leave a run's records the same bit for bit; the rounding
ones (another thread count, device, launcher stack) change the order of floating-point sums, so they may move
results in the last bits and are not listed as unable to alter results."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import SHORT_RUN

from bnexp.runfolders.neutral_keys import BIT_NEUTRAL_KEYS, RESULT_NEUTRAL_KEYS, ROUNDING_KEYS
from bnexp.runfolders.rundir import read_jsonl

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reliability.md"


def _row(text: str, starts: str) -> str:
    rows = [line for line in text.splitlines() if line.startswith(f"| {starts}")]
    assert len(rows) == 1, f"docs/reliability.md: one table row starting {starts!r} expected"
    return rows[0].split(" | ")[0]  # the class column


def _keys(cell: str) -> set[str]:
    return {k.removesuffix(".*") for k in re.findall(r"`([a-z_]+\.[a-z_.*]+)`", cell)}


def test_the_docs_say_which_neutral_keys_are_bit_neutral():
    """docs/reliability.md lists every bit-neutral key as such, and the rounding keys (trainer.num_threads: a run
    resumed on 2 threads after 1 ended 7e-8 apart in test loss) in a row of their own, never among the keys that
    leave results the same."""
    assert set(BIT_NEUTRAL_KEYS) | set(ROUNDING_KEYS) == set(RESULT_NEUTRAL_KEYS)
    assert not set(BIT_NEUTRAL_KEYS) & set(ROUNDING_KEYS)
    assert {"trainer.num_threads", "trainer.device", "hydra.launcher"} <= set(ROUNDING_KEYS)
    text = DOCS.read_text(encoding="utf-8")
    bit = _keys(_row(text, "a change that leaves results the same bit for bit"))
    rounding = _keys(_row(text, "a change that moves results only by rounding"))
    assert bit == {k for k in BIT_NEUTRAL_KEYS if "." in k}  # `logger` is a group, named without a dot
    assert rounding == set(ROUNDING_KEYS)
    assert not re.search(r"cannot alter results \([^)]*num_threads", text)


@pytest.mark.slow  # trains 5 short MNIST runs in this process: over the fast tier's 2.5 s of CPU
def test_bit_neutral_keys_leave_the_records_the_same_bit_for_bit(bnexp_main, tmp_path):
    """A 20-step run with each bit-neutral setting changed has the metrics and shift records of the run without
    the change, bit for bit (wall times aside)."""
    changed = ("trainer.ckpt_every=", "trainer.progress=")
    base = [*(o for o in SHORT_RUN if not o.startswith(changed)), "seed=3"]

    def records(name: str, *extra: str) -> list[list[dict]]:
        run = tmp_path / name
        code, err, _ = bnexp_main("train", *base, *extra, f"hydra.run.dir={run}")
        assert code == 0, err
        return [[{k: v for k, v in r.items() if k != "wall_time_s"} for r in read_jsonl(run / f)]
                for f in ("metrics.jsonl", "shift.jsonl")]

    ref = records("ref", "trainer.ckpt_every=10", "trainer.progress=false")
    assert ref[0] and ref[1]
    changes = {
        "cadence": ["trainer.ckpt_every=7", "trainer.progress=false", "trainer.async_records=false",
                    "monitor.histograms=false"],
        "display": ["trainer.ckpt_every=10", "trainer.progress=true", "logger=csv"],
        "no_checkpoint": ["trainer.ckpt_every=10", "trainer.progress=false", "trainer.save_checkpoint=false",
                          "data.verify_checksums=false"]}
    for name, extra in changes.items():
        assert records(name, *extra) == ref, name
