"""The grid-edge rule (bnexp.analysis.grid_edges; docs/studies/PLAN.md, "Amendment (2026-11-29)"): which rate is
added beyond an edge, when the rule stops and the mark a claim then carries, on hand-made grids; and, played
out against a synthetic tuning curve through the project's own rate choice, that it walks an edge choice to
the interior optimum."""

from __future__ import annotations

import math

import pytest

from bnexp.analysis.grid_edges import MAX_ADDED, edge_state, rule_text
from bnexp.analysis.tuning import TUNING_SEEDS, TuningRun, choose_rates

GRID = [0.15, 0.3, 0.6, 1.2]


def test_an_interior_choice_needs_nothing():
    s = edge_state(GRID, GRID, 0.6, {})
    assert (s.next_rate, s.status, s.edge, s.mark) == (None, "interior", None, None)


@pytest.mark.parametrize("chosen, nxt, edge", [(1.2, 2.4, "high"), (0.15, 0.075, "low")])
def test_an_edge_choice_adds_the_next_factor_2_rate_beyond_it(chosen, nxt, edge):
    s = edge_state(GRID, GRID, chosen, {r: False for r in GRID})
    assert (s.next_rate, s.status, s.edge, s.added, s.mark) == (pytest.approx(nxt), "extend", edge, 0, None)


def test_the_rule_stops_when_the_rate_last_added_failed_on_every_seed():
    # every rate at chance, the tie went to the smallest (depth's no-BN rows): one rate below, failing too
    rates = [0.075, *GRID]
    s = edge_state(GRID, rates, 0.075, {r: True for r in rates})
    assert (s.status, s.edge, s.added, s.next_rate) == ("failed", "low", 1, None)
    assert s.mark == "edge (the next rate beyond it failed on every tuning seed)"
    # the added rate failed but the choice went back inside: interior
    s = edge_state(GRID, [*GRID, 2.4], 1.2, {2.4: True})
    assert s.status == "interior"


def test_the_rule_stops_after_three_rates_beyond_one_edge():
    rates = [*GRID, 2.4, 4.8, 9.6]
    s = edge_state(GRID, rates, 9.6, {r: False for r in rates})
    assert (s.status, s.added, s.next_rate) == ("limit", MAX_ADDED, None)
    assert s.mark == f"edge ({MAX_ADDED} rates added beyond it)"
    s = edge_state(GRID, rates[:-1], 4.8, {r: False for r in rates})
    assert (s.status, s.added, s.next_rate) == ("extend", 2, pytest.approx(9.6))


def test_bad_input():
    with pytest.raises(ValueError, match="not one of the rates run"):
        edge_state(GRID, GRID, 0.5, {})
    with pytest.raises(ValueError, match="positive rates"):
        edge_state([], GRID, 0.6, {})
    assert edge_state([0.3], [0.3], 0.3, {}).mark == "edge (a grid of one rate)"
    assert "factor-2" in rule_text() and str(MAX_ADDED) in rule_text()


def _tune(rates, best: float, seeds=TUNING_SEEDS) -> tuple[float, dict]:
    """The project's steps rule on a synthetic curve: steps to the target = 1000 * (1 + log2(rate / best)^2),
    the same on every seed, not reached past the 30,000-step budget; rates above 8x the best diverge. Returns
    (chosen rate, failed-everywhere map)."""
    runs, failed = [], {}
    for r in rates:
        diverged = r > 8 * best
        steps = None if diverged else round(1000 * (1 + math.log2(r / best) ** 2))
        steps = None if steps is not None and steps > 30_000 else steps
        failed[r] = diverged or steps is None
        runs += [TuningRun(("bn=true",), r, s, steps=steps, diverged=diverged) for s in seeds]
    (choice,) = choose_rates(runs, "steps", budget=30_000)
    return choice.rate, failed


@pytest.mark.parametrize("best, final, status", [(4.8, 4.8, "interior"), (0.0375, 0.0375, "interior"),
                                                  (40.0, 9.6, "limit")])
def test_played_out_the_rule_walks_an_edge_choice_to_the_optimum_or_marks_it(best, final, status):
    """A true optimum 2 doublings past the grid's top (4.8) or 2 halvings below it (0.0375) is found and ends
    interior; one far past it stops after three added rates, marked."""
    rates = list(GRID)
    for _ in range(10):
        chosen, failed = _tune(rates, best)
        s = edge_state(GRID, rates, chosen, failed)
        if s.next_rate is None:
            break
        rates.append(s.next_rate)
    assert chosen == pytest.approx(final) and s.status == status
