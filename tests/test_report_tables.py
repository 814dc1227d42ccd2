"""The ``table`` filter of the report's templates (bnexp/report/fmt.py) against pandas' own markdown of the
same cells, and the macros of templates/tables.md.j2 on a hand-written row."""

import pandas as pd
import pytest

from bnexp.report.fmt import macro, table


def test_table_pads_rows_like_pandas_and_escapes_pipes():
    text = "\n| x | long header |\n| 1 |  |\n|   ||G|| / ||H|| | b |\n"
    want = pd.DataFrame([["1", ""], ["\\|\\|G\\|\\| / \\|\\|H\\|\\|", "b"]], columns=["x", "long header"])
    assert table(text) == want.to_markdown(index=False, disable_numparse=True)
    with pytest.raises(ValueError, match="3 cells, the header 2"):
        table("| x | y |\n| a | b | c |")  # a cell holding " | " is refused, never split silently


def test_bad_runs_lists_each_run_with_its_reason():
    d = {"configurations": [{"label": "bn=true", "seeds": [
        {"seed": 0, "status": "finished"}, {"seed": 1, "status": "diverged", "diverged_step": 1200, "path": "r1"},
        {"seed": 2, "status": "failed", "error": None, "path": "r2"}]}]}
    assert macro("bad_runs", d).splitlines() == [
        "## Diverged, failed and incomplete runs", "",
        "- bn=true, seed 1: diverged (at step 1,200) `r1`", "- bn=true, seed 2: failed (unknown error) `r2`"]
    d["configurations"][0]["seeds"] = d["configurations"][0]["seeds"][:1]
    assert macro("bad_runs", d) == ""
