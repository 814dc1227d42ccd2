"""How a seed interval is written (bnexp.report.fmt.format_interval): every variant of the line, pinned.

The line's numbers are Python's ("{:.3g}" by default, the unit after each, a bound's mark before it); its words
are templates/rules_and_bounds.md.j2's ``interval_line``. The expected strings are the ones the f-string version
wrote before the words moved into the template (the move kept them byte for byte); the closed case is also the
hand-formatted line of the module docstring.
"""

from __future__ import annotations

import pytest

from bnexp.analysis.interval import SeedInterval
from bnexp.report.fmt import format_interval


def _iv(**kw) -> SeedInterval:
    """A 3-seed log-ratio interval, geometric mean 1.9812 in [0.7614, 5.1789], seeds 1.5 to 3.08, with ``kw``."""
    base = dict(method="student-t, log ratio", scale="log", level=0.95, n=3, n_censored=0, estimate=1.9812,
                estimate_bound="", low=0.7614, high=5.1789, low_open=False, high_open=False, seed_min=1.5,
                seed_max=3.08, seed_min_bound="", seed_max_bound="", reason="")
    return SeedInterval(**{**base, **kw})


ONE_SEED = dict(n=1, estimate=1.7, low=None, high=None, seed_min=1.7, seed_max=1.7)
HIGH_OPEN = dict(n_censored=1, estimate_bound=">=", high=None, high_open=True, seed_max_bound=">=")

CASES = [
    (_iv(), ("x",), "1.98x, 95% t interval [0.761x, 5.18x]; per seed 1.5x to 3.08x (n = 3)"),
    (_iv(scale="raw", estimate=0.01234, low=-0.5, high=1.25, seed_min=-0.2, seed_max=0.9), (" points", 2),
     "0.012 points, 95% t interval [-0.5 points, 1.2 points]; per seed -0.2 points to 0.9 points (n = 3)"),
    (_iv(level=0.9), ("x",), "1.98x, 90% t interval [0.761x, 5.18x]; per seed 1.5x to 3.08x (n = 3)"),
    # one side open: the reason's words before their colon stand in for the open bound
    (_iv(**HIGH_OPEN, reason="lower_bounds"), ("x",),
     ">= 1.98x, 95% t interval [0.761x, open: 1 seed(s) only a lower bound]; per seed 1.5x to >= 3.08x (n = 3)"),
    (_iv(**HIGH_OPEN, reason="1 seed(s) only a lower bound: the upper side is open"), ("x",),  # read from report.json
     ">= 1.98x, 95% t interval [0.761x, open: 1 seed(s) only a lower bound]; per seed 1.5x to >= 3.08x (n = 3)"),
    (_iv(n_censored=2, estimate_bound="<=", low=None, low_open=True, seed_min_bound="<=", reason="upper_bounds"),
     ("x",), "<= 1.98x, 95% t interval [open: 2 seed(s) only an upper bound, 5.18x]; per seed <= 1.5x to 3.08x "
     "(n = 3)"),
    (_iv(high=None, high_open=True), (), "1.98, 95% t interval [0.761, open]; per seed 1.5 to 3.08 (n = 3)"),
    (_iv(low=None, low_open=True), (), "1.98, 95% t interval [open, 5.18]; per seed 1.5 to 3.08 (n = 3)"),
    # both sides open, no estimate, fewer than 2 seeds: no interval, the reason in parentheses
    (_iv(n_censored=2, estimate_bound="?", low=None, high=None, low_open=True, high_open=True, seed_min_bound="<=",
         seed_max_bound=">=", reason="both_sides"), ("x",),
     "~1.98x, no 95% interval (seeds bounded from both sides); per seed <= 1.5x to >= 3.08x (n = 3)"),
    (_iv(n_censored=1, estimate=None, estimate_bound="?", low=None, high=None, low_open=True, high_open=True,
         seed_max_bound="?", reason="unknown"), ("x",),
     "unknown, no 95% interval (a seed's value is unknown); per seed 1.5x to ~3.08x (n = 3)"),
    (_iv(**ONE_SEED, reason="few_seeds"), ("x",),
     "1.7x, no 95% interval (fewer than 2 seeds); per seed 1.7x to 1.7x (n = 1)"),
    (_iv(**ONE_SEED, reason="fewer than 2 seeds"), (), "1.7, no 95% interval (fewer than 2 seeds); per seed 1.7 to "
     "1.7 (n = 1)"),
    (_iv(**ONE_SEED), (), "1.7, no 95% interval (); per seed 1.7 to 1.7 (n = 1)"),
    (_iv(seed_min=None, seed_max=None), ("x", 4), "1.981x, 95% t interval [0.7614x, 5.179x]; per seed n/a (n = 3)"),
    (_iv(estimate=12345.678, low=1000.0, high=98765.4, seed_min=0.000123, seed_max=1e7), (" steps",),
     "1.23e+04 steps, 95% t interval [1e+03 steps, 9.88e+04 steps]; per seed 0.000123 steps to 1e+07 steps (n = 3)"),
]


@pytest.mark.parametrize("iv, args, want", CASES)
def test_format_interval_writes_each_variant_as_before(iv, args, want):
    assert format_interval(iv, *args) == want
