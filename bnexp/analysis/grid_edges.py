"""The grid-edge rule of the held-out tuning designs (docs/studies/PLAN.md, "Amendment (2026-11-29)", item 1;
docs/mnist/PLAN.md): a rate chosen at the edge of its grid is not a choice until the grid has been looked past.

When a configuration's chosen rate is the smallest or the largest rate of its grid, the tuning stage adds the
next factor-2 rate beyond that edge (twice the largest, or half the smallest) on the tuning seeds and chooses
again. It repeats until the choice is interior, or the rate last added beyond that edge failed on every
tuning seed (it cannot be the better rate, and neither can one further out), or :data:`MAX_ADDED` rates have
been added beyond that edge. A choice still at an edge when the rule stops carries the mark "edge" and the
rule that stopped it.

This module is the rule alone, on a grid's rates (pure functions, no run folder): the designs
(:mod:`bnexp.designs.mnist`, :mod:`bnexp.designs.studies`) ask it after each tuning batch which rate to add
(:func:`choice_state` on a :class:`bnexp.analysis.tuning.RateChoice`), and the report asks it for the mark
(:func:`record_entry` is what the designs write to ``grid_edges.json`` in the sweep folder, :data:`RECORD`).
It returns codes, never words: the designs word the rule and a mark for their plans and the record
(:mod:`bnexp.designs.stages`), the report words a claim's mark (templates/rules_and_bounds.md.j2).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

MAX_ADDED = 3  # rates added beyond one edge at most
FACTOR = 2.0  # each added rate: twice the largest, or half the smallest
REL_TOL = 1e-9  # two rates within this relative distance are one rate
RECORD = "grid_edges.json"  # the designs' record of the rule in a sweep folder (read by the report)
# the stops of the rule that leave a choice at an edge: the next rate failed, MAX_ADDED rates added, one rate
EDGE_STOPS = ("failed", "limit", "single")
# a claim's mark (mark_of): the rule's stop at an edge, or no record of it
MARK_CODES = (*EDGE_STOPS, "no_record")


@dataclass(frozen=True)
class EdgeState:
    """Where one configuration's choice stands under the rule.

    Attributes:
        next_rate: the rate to add on the tuning seeds, or None when the rule has stopped.
        status: "interior" (the choice is inside its grid), "extend" (``next_rate`` is to run), "failed"
            (stopped: the rate last added beyond the edge failed on every tuning seed), "limit" (stopped:
            :data:`MAX_ADDED` rates added beyond the edge) or "single" (a grid of one rate: no edge to look
            past, the design's own choice).
        edge: "low", "high" or None (interior).
        added: how many rates lie beyond the original grid on that edge.
    """

    next_rate: float | None
    status: str
    edge: str | None
    added: int

    @property
    def mark(self) -> str | None:
        """The claim's mark as a code (:data:`MARK_CODES`): the ``status`` of a choice the rule left at an edge
        ("failed", "limit", "single"); None for an interior choice and while the rule is still extending (no
        claim is scored then)."""
        return self.status if self.status in EDGE_STOPS else None


def same_rate(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(abs(a), abs(b))


def edge_state(original: list[float], rates: list[float], chosen: float, failed_everywhere: dict[float, bool]
               ) -> EdgeState:
    """The rule's next step for one configuration.

    Args:
        original: the grid as the design fixed it (learning rates, > 0).
        rates: every rate run so far on the tuning seeds (the original grid and any added ones).
        chosen: the rate the tuning rule chose among ``rates``.
        failed_everywhere: per rate of ``rates``, True when every tuning seed failed at it (objective
            "steps": never reached the target or diverged; "accuracy": diverged or ended at chance).

    Returns:
        :class:`EdgeState`.

    Raises:
        ValueError: an empty or non-positive grid, or ``chosen`` not among ``rates``.
    """
    if not original or not rates or min(original) <= 0 or min(rates) <= 0:
        raise ValueError(f"a grid needs positive rates, got original={original}, rates={rates}")
    if not any(same_rate(chosen, r) for r in rates):
        raise ValueError(f"the chosen rate {chosen:g} is not one of the rates run ({', '.join(f'{r:g}' for r in rates)})")
    rates = sorted(rates)
    if len(rates) == 1:
        return EdgeState(None, "single", None, 0)
    lo, hi = min(original), max(original)
    if same_rate(chosen, rates[-1]):
        edge, beyond = "high", [r for r in rates if r > hi and not same_rate(r, hi)]
        outer, nxt = rates[-1], rates[-1] * FACTOR
    elif same_rate(chosen, rates[0]):
        edge, beyond = "low", [r for r in rates if r < lo and not same_rate(r, lo)]
        outer, nxt = rates[0], rates[0] / FACTOR
    else:
        return EdgeState(None, "interior", None, 0)
    if beyond and failed_everywhere.get(outer, False):
        return EdgeState(None, "failed", edge, len(beyond))
    if len(beyond) >= MAX_ADDED:
        return EdgeState(None, "limit", edge, len(beyond))
    return EdgeState(nxt, "extend", edge, len(beyond))


def failed_everywhere(choice) -> dict[float, bool]:
    """{rate: every tuning seed failed at it} of a :class:`bnexp.analysis.tuning.RateChoice`'s grid (its rows'
    "failed" count equals their "n": objective "steps", never reached the target or diverged; "accuracy",
    diverged or ended at chance)."""
    return {float(g["rate"]): int(g.get("failed", 0)) >= int(g["n"]) > 0 for g in choice.grid}


def choice_state(original, choice) -> EdgeState:
    """:func:`edge_state` of a :class:`bnexp.analysis.tuning.RateChoice` made on every rate run so far (its grid),
    ``original`` the design's grid.

    Raises:
        ValueError: as :func:`edge_state`.
    """
    return edge_state(list(original), [float(g["rate"]) for g in choice.grid], float(choice.rate),
                      failed_everywhere(choice))


def record_entry(network: str, objective: str, original, choice, state: EdgeState, mark: str | None) -> dict:
    """One entry of the designs' record (:data:`RECORD`): {"network", "objective" ("steps to 95%", "accuracy"),
    "original" (the design's grid), "rates" (every rate run), "chosen", "status", "edge", "added", "mark"
    (``mark``: the designs' words for ``state.mark``, :func:`bnexp.designs.stages.edge_mark_text`)}."""
    return {"network": network, "objective": objective, "original": sorted(float(r) for r in original),
            "rates": sorted(float(g["rate"]) for g in choice.grid), "chosen": float(choice.rate),
            **{k: v for k, v in asdict(state).items() if k != "next_rate"}, "mark": mark}


def mark_of(choice, record: list[dict] | None = None) -> str | None:
    """The mark a claim resting on ``choice`` (a :class:`bnexp.analysis.tuning.RateChoice`, or its ``as_dict``)
    carries (docs/studies/PLAN.md, amendment item 2), as a code of :data:`MARK_CODES` (the report words it:
    :func:`bnexp.report.fmt.edge_mark`): None when the chosen rate is inside the rates run (or the grid has one
    rate); else the rule's stop in the designs' ``record`` entry with the same rates and chosen rate ("failed":
    the next rate beyond it failed on every tuning seed, "limit": :data:`MAX_ADDED` rates added beyond it,
    "single"), and without one "no_record" (the rule was not applied)."""
    grid = choice["grid"] if isinstance(choice, dict) else choice.grid
    chosen = float(choice["rate"] if isinstance(choice, dict) else choice.rate)
    rates = sorted(float(g["rate"]) for g in grid)
    if len(rates) < 2 or not (same_rate(chosen, rates[0]) or same_rate(chosen, rates[-1])):
        return None
    marks = {e.get("status") for e in record or () if same_rate(float(e["chosen"]), chosen)
             and len(e["rates"]) == len(rates) and all(same_rate(a, b) for a, b in zip(sorted(e["rates"]), rates))}
    marks &= set(EDGE_STOPS)
    return marks.pop() if len(marks) == 1 else "no_record"


def write_record(sweep_dir: Path, entries: list[dict], rule: str) -> None:
    """Write the designs' record of the rule (:data:`RECORD`: {"rule": ``rule``, the designs' sentence of it
    (:func:`bnexp.designs.stages.grid_edge_rule`), "entries": :func:`record_entry` s}) into ``sweep_dir``."""
    Path(sweep_dir).mkdir(parents=True, exist_ok=True)
    (Path(sweep_dir) / RECORD).write_text(json.dumps({"rule": rule, "entries": entries}, indent=1) + "\n")


def read_record(sweep_dir: Path) -> list[dict]:
    """The entries of ``sweep_dir``'s :data:`RECORD`; [] when it is absent or not a JSON object with a list of
    entries (a sweep the rule never ran on)."""
    try:
        data = json.loads((Path(sweep_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict) and {"chosen", "rates"} <= set(e)] \
        if isinstance(entries, list) else []
