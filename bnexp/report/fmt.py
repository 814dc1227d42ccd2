"""How the report writes numbers (steps, accuracies, targets, statistics over seeds, markdown tables) and its
text: the Jinja2 templates of bnexp/report/templates/ (:func:`render_template`) hold every paragraph,
templates/rules_and_bounds.md.j2 the words of the analysis layer's rules and bounds (:func:`words`) and
templates/cells.md.j2 those of one table cell (:func:`cell`); this module writes the numbers.

A statistic over seeds is written "mean ± std"; from a single run it is written as the value and "(1 seed)", never
"± 0.00" (a spread of one value is not a measured spread). A unit goes with the column header ("max test acc
(%)"), never after "(1 seed)".
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Mapping

from bnexp.analysis.grid_edges import MARK_CODES, MAX_ADDED
from bnexp.analysis.interval import REASONS, SeedInterval
from bnexp.analysis.rules import DDOF, Bound, format_target  # noqa: F401 (the formatters' home for callers and templates)


def format_steps(st: dict) -> str:
    """Cell text of a :func:`bnexp.report.stats.reach_stat`, mean ± std over the seeds that reached the target:
    "1,200 ± 163", "1,200 (1 seed)", "2,200 ± 200; not reached (1/3)", "not reached", "n/a" when there are no
    completed runs, and "<= 12,000" when every seed that reached it did so by its first evaluation after step 0
    (an upper bound: the evaluations cannot tell how early). The numbers are written here, the words by
    templates/cells.md.j2's ``steps``."""
    if st["n"] == 0:
        return cell("missing")
    if st["reached"] == 0:
        reached = None
    elif st.get("at_first_eval") == st["reached"]:
        reached = Bound("upper").written("{:,.0f}".format(max(s for s in st["per_seed"] if s is not None)))
    else:
        reached = format_stat({**st, "n": st["reached"]}, "{:,.0f}", "{:,.0f}")
    return cell("steps", reached, st["not_reached"], st["n"])


def format_stat(st: dict | None, fmt: str = "{:.4g}", std_fmt: str = "{:.2g}", scale: float = 1.0,
                missing: str | None = None) -> str:
    """A statistic over seeds ({"mean", "std", "n"}) as "0.1234 ± 0.005" (``fmt`` for the mean, ``std_fmt``
    for the std, both times ``scale``); one value as "0.1234 (1 seed)" (templates/cells.md.j2's ``stat``);
    without a mean ``missing``, or "n/a" when it is None."""
    if st is None or st.get("mean") is None:
        return cell("missing") if missing is None else missing
    one = st.get("n") == 1 or st.get("std") is None
    return cell("stat", fmt.format(scale * st["mean"]), None if one else std_fmt.format(scale * st["std"]))


def format_acc(st: dict) -> str:
    """Accuracy statistic in percent: "97.12 ± 0.05", "95.57 (1 seed)" ("n/a" when missing)."""
    return format_stat(st, "{:.2f}", "{:.2f}", 100.0)


def md_table(header: list[str], rows: list[list]) -> list[str]:
    """The lines of a markdown table: :meth:`pandas.DataFrame.to_markdown` (tabulate's pipe format),
    cells as given (numbers are not re-parsed), "|" escaped."""
    import pandas as pd

    esc = [[str(c).replace("|", "\\|") for c in row] for row in [header, *rows]]
    return pd.DataFrame(esc[1:], columns=esc[0]).to_markdown(index=False, disable_numparse=True).splitlines()


def table(text: str) -> str:
    """The ``table`` filter of the templates: lines "| cell | cell |" (the header first, blank lines ignored) as a
    padded markdown table (:func:`md_table`), cells split at " | " and stripped. Raises ValueError for a row whose
    number of cells differs from the header's (e.g. a cell holding " | ")."""
    rows = [[c.strip() for c in line.strip()[1:-1].split(" | ")] for line in text.splitlines() if line.strip()]
    bad = [r for r in rows[1:] if len(r) != len(rows[0])]
    if bad:
        raise ValueError(f"table row {bad[0]} has {len(bad[0])} cells, the header {len(rows[0])}")
    return "\n".join(md_table(rows[0], rows[1:]))


def grid_text(choice: dict) -> str:
    """A :meth:`bnexp.analysis.tuning.RateChoice.as_dict` grid as one table cell: every rate with its failed
    (objective "steps") or diverged ("accuracy") tuning seeds / n and the mean steps or final accuracy, the chosen
    rate in bold, then " (censored)" when every rate had a failed seed (the words: templates/cells.md.j2's
    ``grid_rate`` and ``grid``)."""
    steps = choice.get("objective", "steps") == "steps"

    def rate(g: dict) -> str:
        if steps:
            return cell("grid_rate", f"{g['rate']:g}", "steps", g["failed"], g["n"], f"{g['mean_steps']:,.0f}",
                        g["chosen"])
        acc = None if g["mean_accuracy"] is None else f"{100 * g['mean_accuracy']:.2f}%"
        return cell("grid_rate", f"{g['rate']:g}", "accuracy", g["diverged"], g["n"], acc, g["chosen"])

    return cell("grid", [rate(g) for g in choice["grid"]], choice["censored"])


def by_seed(per_seed: Mapping) -> list[tuple]:
    """(seed, value) pairs of a per-seed map in seed order; the seeds are ints, or strings after a JSON round
    trip (report.json), so they are ordered as numbers (10 after 9)."""
    return sorted(per_seed.items(), key=lambda kv: int(kv[0]))


def per_seed_text(row: dict, fmt=lambda v: f"{v:.3g}", unit: str = "") -> str:
    """The per-seed values of a claims row, live or read back from report.json: "1: 2.80, 2: >= 3.00, 3: -"
    (">=" / "<=": a bound, :meth:`bnexp.analysis.rules.Bound.written`; "-": no value); "-" without seeds."""
    bounds = row.get("bounds") or {s: "lower" for s in row.get("lower_bound_seeds", [])}  # older rows: lower only
    bounds = {str(k): b for k, b in bounds.items()}
    return ", ".join(f"{s}: " + ("-" if v is None else Bound(bounds.get(str(s))).written(f"{fmt(v)}{unit}"))
                     for s, v in by_seed(row["per_seed"])) or "-"


def per_seed_ratios(row: dict, unit: str = "") -> str:
    """The per-seed no-BN / BN ratios of a :func:`best_rate_speedups` row (:func:`per_seed_text`
    with 2 decimals): "1: 2.80x, 2: >= 3.00x, 3: -"."""
    return per_seed_text(row, lambda v: f"{v:.2f}", unit)


def _num(v: float, digits: int) -> str:
    return f"{v:.{digits}g}"


def interval_reason(iv: SeedInterval) -> str:
    """Why ``iv`` has an open side or no interval, in words ("1 seed(s) only a lower bound: the upper side is open",
    "" for none): templates/verdicts.md.j2's ``interval_reason`` of the code of
    :data:`bnexp.analysis.interval.REASONS`; an interval read back from report.json holds the words already."""
    if iv.reason not in REASONS:
        return iv.reason
    return macro("interval_reason", iv.reason, iv.n_censored, template="verdicts.md.j2")


def format_interval(iv: SeedInterval, unit: str = "", digits: int = 3) -> str:
    """One line for a page: estimate, interval, per-seed range and n (the numbers written here, the words by
    templates/rules_and_bounds.md.j2's ``interval_line``), e.g.

    "1.98x, 95% t interval [0.76x, 5.18x]; per seed 1.5x to 3.08x (n = 3)",
    ">= 2.3x, 95% t interval [1.21x, open: 1 seed(s) only a lower bound]; per seed 1.5x to >= 4x (n = 3)".

    Args:
        iv: the interval.
        unit: appended to every number ("x" for ratios, "" or " points" otherwise).
        digits: significant digits.
    """
    def num(v, mark=None):
        return Bound(mark).written(f"{_num(v, digits)}{unit}")

    none = iv.n < 2 or (iv.low_open and iv.high_open)
    low, high = (None if none or side_open else num(v)
                 for v, side_open in ((iv.low, iv.low_open), (iv.high, iv.high_open)))
    return words("interval_line", None if iv.estimate is None else num(iv.estimate, iv.estimate_bound), iv.level,
                 "none" if none else "interval", low, high, interval_reason(iv),
                 None if iv.seed_min is None else num(iv.seed_min, iv.seed_min_bound),
                 None if iv.seed_min is None else num(iv.seed_max, iv.seed_max_bound), iv.n)


def interval_cell(row: dict, digits: int = 3, unit: str = "") -> str:
    """The interval of a claims row (``ci_low``, ``ci_high``; None where open or n < 2) as a table cell:
    "[0.76, 5.16]", "[1.21, open]" (a side open because of censored seeds), "-" without an interval
    (templates/cells.md.j2's ``interval``)."""
    return cell("interval", *(None if v is None else f"{_num(v, digits)}{unit}"
                              for v in (row.get("ci_low"), row.get("ci_high"))))


def short_text(iv: SeedInterval | None, digits: int = 3) -> str:
    """The estimate and its interval in a sentence of several: "1.62 [1.6, 1.67]", ">= 2.3 [1.21, open]",
    "n/a" without a value (:func:`format_interval` adds the per-seed range and n)."""
    if iv is None or iv.estimate is None:
        return cell("missing")
    head = Bound(iv.estimate_bound).written(_num(iv.estimate, digits))
    if iv.low is None and iv.high is None:
        return head
    return f"{head} {interval_cell({'ci_low': iv.low, 'ci_high': iv.high}, digits)}"


@lru_cache(maxsize=1)
def _templates():
    """The Jinja2 environment of bnexp/report/templates/: a block tag's line leaves no trace, no escaping
    (markdown), ``{% do %}`` on; filters ``format_target``, :func:`table`, ``bounded`` (a number written with its
    :class:`bnexp.analysis.rules.Bound`) and ``md`` (a DataFrame as a markdown table); globals: the helpers the macros
    of tables.md.j2 call (this module's and the analysis layer's rules; fmt imports no section of the report)."""
    import jinja2

    from bnexp.analysis.rules import DDOF
    from bnexp.analysis.tuning import ACCURACY_RULE, HIGHEST_FINAL, STEPS_RULE

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).with_name("templates")),
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False,
                             extensions=["jinja2.ext.do"])
    env.filters.update(format_target=format_target, table=table, bounded=lambda text, b: Bound(b).written(str(text)),
                       md=lambda frame: "\n".join(md_table(list(frame.columns), frame.values.tolist())))
    env.globals.update(HIGHEST_FINAL=HIGHEST_FINAL, per_seed_ratios=per_seed_ratios, by_seed=by_seed,
                       per_seed_text=per_seed_text, interval_cell=interval_cell, DDOF=DDOF,
                       ACCURACY_RULE=ACCURACY_RULE, STEPS_RULE=STEPS_RULE, grid_text=grid_text)
    return env


def render_template(name: str, d: dict, helpers: dict) -> str:
    """The text of the template ``name`` (bnexp/report/templates/) for report.json's dict ``d``, the tables and
    rules it names given as ``helpers`` (the template's ``f``), ending in exactly one newline."""
    return _templates().get_template(name).render(d=d, f=SimpleNamespace(**helpers)).rstrip("\n") + "\n"


def macro(name: str, *args, template: str = "tables.md.j2", **kw) -> str:
    """The text of the macro ``name`` of ``template`` (templates/tables.md.j2: the claims table, ...) for ``args``
    and the keyword arguments ``kw``."""
    return str(getattr(_templates().get_template(template).module, name)(*args, **kw))


RULES_TEMPLATE = "rules_and_bounds.md.j2"  # the words of the analysis layer's rules, bounds and codes
CELLS_TEMPLATE = "cells.md.j2"  # the words of one table cell: a statistic, steps, a ratio, an interval, a grid


def words(name: str, *args) -> str:
    """The phrase of the macro ``name`` of templates/rules_and_bounds.md.j2 for ``args`` (numbers and codes of the
    analysis layer: :func:`std_note`, :func:`censored_why`, :func:`edge_mark`, the frontier's claims and notes)."""
    return macro(name, *args, template=RULES_TEMPLATE)


def cell(name: str, *args) -> str:
    """The words of the macro ``name`` of templates/cells.md.j2 for ``args`` (numbers already written, codes): one
    table cell's phrase (:func:`format_stat`, :func:`format_steps`, :func:`interval_cell`, :func:`grid_text`,
    :func:`bnexp.report.frontier_text.speedup_text`)."""
    return macro(name, *args, template=CELLS_TEMPLATE)


def std_note() -> str:
    """"std is the sample standard deviation over seeds (ddof=1)" (:data:`bnexp.analysis.rules.DDOF`): report.json's
    "std" and report.md's note."""
    return words("std_note", DDOF)


def censored_why(c) -> str | None:
    """Why a :class:`bnexp.analysis.rules.Censored` value is a bound or missing, from its ``cause`` and ``budget``:
    "not reached within 4,000 steps", "not reached, budget unknown"; None without a cause."""
    return words("censored_why", c.cause, c.budget) or None if c.cause else None


def edge_mark(code: str | None) -> str | None:
    """A claim's edge mark (docs/studies/PLAN.md, amendment item 2) from
    :func:`bnexp.analysis.grid_edges.mark_of`'s code: "edge (3 rates added beyond it)", ...; None for None (an
    interior choice).

    Raises:
        ValueError: a code that is not one of "failed", "limit", "single", "no_record".
    """
    if code is None:
        return None
    if code not in MARK_CODES:
        raise ValueError(f"an edge mark's code is one of {', '.join(MARK_CODES)}; got {code!r}")
    return words("edge_mark", code, MAX_ADDED)


COLUMNS_TEMPLATE = "columns.md.j2"  # the words of the report's tables: column headers and row labels


def label(name: str, *args) -> str:
    """The words of the macro ``name`` of templates/columns.md.j2 for ``args`` (keys and numbers): a column header or
    a row label (one cell's words are templates/cells.md.j2's, :func:`cell`)."""
    return macro(name, *args, template=COLUMNS_TEMPLATE)


def labels(name: str, *args) -> list[str]:
    """The lines of the macro ``name`` of templates/columns.md.j2 for ``args``: a table's column headers (or row
    labels), one per line, in the table's order."""
    return label(name, *args).rstrip("\n").split("\n")
