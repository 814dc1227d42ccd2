"""How the report writes numbers: steps, accuracies, targets, multiples and other measurements.

A statistic over seeds is written "mean ± std"; from a single run it is written as the value
and "(1 seed)", never "± 0.00" (a spread of one value is not a measured spread). A unit goes
with the column header ("max test acc (%)"), never after "(1 seed)".
"""

from __future__ import annotations


def format_steps(st: dict) -> str:
    """Cell text of a :func:`bnexp.report.stats.reach_stat`, mean ± std over the seeds that reached the target:
    "1,200 ± 163", "1,200 (1 seed)", "2,200 ± 200; not reached (1/3)", "not reached", or "n/a" when there are
    no completed runs."""
    if st["n"] == 0:
        return "n/a"
    if st["reached"] == 0:
        return "not reached"
    text = f"{st['mean']:,.0f} (1 seed)" if st["reached"] == 1 else f"{st['mean']:,.0f} ± {st['std']:,.0f}"
    return text + (f"; not reached ({st['not_reached']}/{st['n']})" if st["not_reached"] else "")


def format_acc(st: dict) -> str:
    """Accuracy statistic in percent: "97.12 ± 0.05", "95.57 (1 seed)" ("n/a" when missing)."""
    if st["mean"] is None:
        return "n/a"
    if st.get("n") == 1:
        return f"{100 * st['mean']:.2f} (1 seed)"
    return f"{100 * st['mean']:.2f} ± {100 * st['std']:.2f}"


def format_target(t: float) -> str:
    """0.95 -> "95%", 0.975 -> "97.5%"."""
    return f"{100 * t:g}%"


def format_stat(st: dict | None, missing: str = "n/a") -> str:
    """A :func:`value_stat` as "0.1234 ± 0.005" (4 significant digits; ``missing`` for None)."""
    if st is None or st["mean"] is None:
        return missing
    if st.get("n") == 1:
        return f"{st['mean']:.4g} (1 seed)"
    return f"{st['mean']:.4g} ± {st['std']:.2g}"


def md_table(header: list[str], rows: list[list]) -> list[str]:
    """The lines of a markdown table: :meth:`pandas.DataFrame.to_markdown` (tabulate's pipe format),
    cells as given (numbers are not re-parsed), "|" escaped."""
    import pandas as pd

    esc = [[str(c).replace("|", "\\|") for c in row] for row in [header, *rows]]
    return pd.DataFrame(esc[1:], columns=esc[0]).to_markdown(index=False, disable_numparse=True).splitlines()
