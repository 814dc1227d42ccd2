"""The ladder overrides of scripts/reproduce_cifar.sh (``LADDER="key=value;..."``, bnexp.designs.ladder.parse_ladder):
the values they set, and one message naming the item for a value that is not what its key takes."""

from __future__ import annotations

import pytest

from bnexp.designs.ladder import LADDERS, parse_ladder


def test_overrides_set_the_ladder_and_keep_the_rest():
    lad = parse_ladder("cpu", "tune=16; lrs=0.025,0.05; baseline=32,8,16; cap=64; bn_x5=4; seeds=0,2")
    assert (lad.tune_budget, lad.tune_lrs, lad.baseline, lad.baseline_cap, lad.seeds) == (
        16, (0.025, 0.05), (8, 16, 32), 64, (0, 2))
    assert lad.starts["bn_x5"] == 4 and lad.starts["bn_baseline"] == LADDERS["cpu"].starts["bn_baseline"]
    assert lad.tune_dropouts == LADDERS["cpu"].tune_dropouts
    assert parse_ladder("gpu", None) == LADDERS["gpu"]


@pytest.mark.parametrize("spec, words", [
    ("bn_x5=4,8", "'bn_x5=4,8': bn_x5 takes one whole number"),
    ("tune=1e3", "'tune=1e3': tune takes one whole number"),
    ("lrs=0.1,fast", "'lrs=0.1,fast': lrs takes a comma-separated list of numbers"),
    ("baseline=8;cap=", "'cap=': cap takes one whole number"),
    ("bn_x50=4", "unknown key 'bn_x50'"),
])
def test_bad_items_are_named(spec, words):
    with pytest.raises(ValueError) as err:
        parse_ladder("cpu", spec)
    assert words in str(err.value) and str(err.value).startswith("--ladder: ")


def test_unknown_scale():
    with pytest.raises(ValueError, match="unknown scale 'tpu'"):
        parse_ladder("tpu", None)
