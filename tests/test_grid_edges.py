"""The grid-edge rule (bnexp.analysis.grid_edges; docs/studies/PLAN.md, "Amendment (2026-11-29)"): which rate is
added beyond an edge, when the rule stops and the mark a claim then carries, on hand-made grids; and, played
out against a synthetic tuning curve through the project's own rate choice, that it walks an edge choice to
the interior optimum."""

from __future__ import annotations

import math

import pytest

from bnexp.analysis.grid_edges import MAX_ADDED, edge_state, mark_of
from bnexp.designs.stages import edge_mark_text, grid_edge_rule
from bnexp.report.fmt import edge_mark
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
    assert s.mark == "failed" and edge_mark(s.mark) == "edge (the next rate beyond it failed on every tuning seed)"
    # the added rate failed but the choice went back inside: interior
    s = edge_state(GRID, [*GRID, 2.4], 1.2, {2.4: True})
    assert s.status == "interior"


def test_the_rule_stops_after_three_rates_beyond_one_edge():
    rates = [*GRID, 2.4, 4.8, 9.6]
    s = edge_state(GRID, rates, 9.6, {r: False for r in rates})
    assert (s.status, s.added, s.next_rate) == ("limit", MAX_ADDED, None)
    assert s.mark == "limit" and edge_mark(s.mark) == f"edge ({MAX_ADDED} rates added beyond it)"
    s = edge_state(GRID, rates[:-1], 4.8, {r: False for r in rates})
    assert (s.status, s.added, s.next_rate) == ("extend", 2, pytest.approx(9.6))


def test_bad_input():
    with pytest.raises(ValueError, match="not one of the rates run"):
        edge_state(GRID, GRID, 0.5, {})
    with pytest.raises(ValueError, match="positive rates"):
        edge_state([], GRID, 0.6, {})
    assert edge_mark(edge_state([0.3], [0.3], 0.3, {}).mark) == "edge (a grid of one rate)"
    assert "factor-2" in grid_edge_rule() and str(MAX_ADDED) in grid_edge_rule()
    with pytest.raises(ValueError, match="edge mark's code"):
        edge_mark("edge (a grid of one rate)")


@pytest.mark.parametrize("state", [edge_state(GRID, [0.075, *GRID], 0.075, {0.075: True}),
                                   edge_state(GRID, [*GRID, 2.4, 4.8, 9.6], 9.6, {}),
                                   edge_state([0.3], [0.3], 0.3, {}), edge_state(GRID, GRID, 0.6, {})])
def test_the_designs_plans_and_the_report_write_a_mark_alike(state):
    """The designs word a mark for DRY_RUN and grid_edges.json (they cannot reach the report's templates), the
    report words a claim's mark from the code: the same words for every stop of the rule, none inside."""
    assert edge_mark_text(state) == edge_mark(state.mark)
    assert (state.mark is None) == (state.status in ("interior", "extend"))


def test_a_claims_mark_is_the_records_stop_or_no_record():
    record = [{"chosen": 9.6, "rates": [*GRID, 2.4, 4.8, 9.6], "status": "limit"},
              {"chosen": 0.6, "rates": GRID, "status": "interior"}]
    at_edge = {"rate": 9.6, "grid": [{"rate": r} for r in [*GRID, 2.4, 4.8, 9.6]]}
    assert mark_of(at_edge, record) == "limit" and mark_of(at_edge, []) == "no_record"
    assert mark_of({"rate": 0.6, "grid": [{"rate": r} for r in GRID]}, record) is None  # interior: no mark
    assert edge_mark(mark_of(at_edge, [])) == "edge (the rule was not applied: no record of it)"


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
