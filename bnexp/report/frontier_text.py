"""The Sec. 4.2 frontier section as text: report.md's frontier section (templates/frontier.md.j2) and the
matched-accuracy table's helpers, read from :func:`bnexp.analysis.frontier.analyze`'s dict or report.json's
``frontier`` data (the numbers and rules are :mod:`bnexp.analysis.frontier`'s)."""

from __future__ import annotations

import pandas as pd

from bnexp.analysis.frontier import CLAIMED, ORDER, PASS_FACTOR
from bnexp.analysis.rules import CHANCE, Censored
from bnexp.analysis.interval import SeedInterval
from bnexp.report.fmt import cell, format_interval, labels, render_template, words


# the paper's names of the presets: a vocabulary (one name per code, as rules.NORMALIZERS), not sentences
NAMES = {"bn_x5": "BN-x5", "bn_baseline": "BN-Baseline", "bn_x30": "BN-x30", "bn_x5_sigmoid": "BN-x5-Sigmoid",
         "baseline_sigmoid": "Baseline-Sigmoid", "baseline_x5": "Baseline-x5", "baseline": "Baseline"}  # paper's
PASS_CELL = {True: "yes", False: "no", None: "undecided"}


def pct(v) -> str:
    """A fraction as a percentage with 2 decimals (0.61234 -> "61.23"); "-" for None/NaN."""
    return "-" if v is None or v != v else f"{100 * v:.2f}"  # v != v: NaN


def speedup_text(v: float | None, bound: str | None = None) -> str:
    """A speedup (a :class:`bnexp.analysis.rules.Censored` ratio) as text: "6.10x", ">= 8.00x" (``bound`` "lower":
    the preset reached it at its smallest budget), "<= 2.00x" ("upper": the baseline did), "~3.00x (both
    bounds)" ("unknown"), or "not reached" (None); the words: templates/cells.md.j2's ``ratio``."""
    c = Censored(v, bound or "exact")
    return cell("ratio", None if c.value is None else c.bound.written(f"{c.value:,.2f}x"), c.bound)


def claim_text(claim: str | None) -> str | None:
    """A preset's Sec. 4.2 claim in words (templates/rules_and_bounds.md.j2: frontier_claim) when ``claim`` is
    :func:`bnexp.analysis.frontier.analyze`'s code (a preset of :data:`~bnexp.analysis.frontier.CLAIMED`); text
    (report.json read back) and None stay."""
    return words("frontier_claim", claim, CHANCE) if claim in CLAIMED else claim


def details(section: dict, preset: str) -> dict:
    """``frontier_analysis.speedup[preset]`` of report.json or :func:`analyze`'s dict ({} when absent)."""
    return ((section.get("frontier_analysis") or {}).get("speedup") or {}).get(preset) or {}


def headline_bound(section: dict, preset: str) -> str | None:
    """The bound of ``preset``'s S(a*): the :func:`details` headline's bound, else "lower" from
    ``matched_accuracy``'s ``speedup_is_lower_bound``, else None."""
    head = details(section, preset).get("headline") or {}
    return head.get("bound") or ("lower" if section["matched_accuracy"][preset].get("speedup_is_lower_bound") else None)


def seed_bounds(section: dict, preset: str) -> dict[str, str]:
    """{seed as str: "lower" | "upper" | "unknown"} for the per-seed S(a*_s) of ``preset`` that are bounds."""
    return {str(d.get("seed")): d["bound"] for d in details(section, preset).get("per_seed") or []
            if d.get("bound") in ("lower", "upper", "unknown")}


def _frame(rows: list[dict]) -> pd.DataFrame:
    fr = pd.DataFrame(rows).astype({"budget_steps": int, "seed": int})
    fr["rank"] = fr["preset"].map({p: i for i, p in enumerate(ORDER)}).fillna(len(ORDER))
    return fr


def frontier_table(rows: list[dict], held_out: list[dict] | None = None) -> pd.DataFrame:
    """The frontiers (``frontier`` rows of :func:`analyze`) as a text table, one row per (preset, budget) in
    :data:`ORDER` then by budget: seed-mean and per-seed final test accuracy, seed-mean final train accuracy (%;
    "-" where a seed has no run). With ``held_out`` (``frontier_analysis.held_out_runs``: the runs of seeds that
    took no part in any choice, docs/cifar/PLAN.md's stage 5) each held-out seed gets its own column and the means
    are labelled as the decision seeds' (the ``rows``' seeds), which they are. The headers are
    templates/columns.md.j2's ``frontier``."""
    fr = _frame(rows)
    keys = ["rank", "preset", "budget_steps"]
    test = fr.pivot_table(index=keys, columns="seed", values="final_test_accuracy", aggfunc="mean")
    mean = fr.groupby(keys)["final_test_accuracy"].mean()
    train = fr.groupby(keys)["final_train_accuracy"].mean()
    held = None
    if held_out:
        held = _frame(held_out).pivot_table(index=keys, columns="seed", values="final_test_accuracy", aggfunc="mean")
        idx = test.index.union(held.index)
        test, mean, train, held = test.reindex(idx), mean.reindex(idx), train.reindex(idx), held.reindex(idx)
    held_seeds = list(held.columns) if held is not None else []
    columns = ([[NAMES.get(i[1], i[1]) for i in test.index], [f"{i[2]:,}" for i in test.index], mean.map(pct).to_numpy()]
               + [test[s].map(pct).to_numpy() for s in test.columns] + [held[s].map(pct).to_numpy() for s in held_seeds]
               + [train.map(pct).to_numpy()])
    head = labels("frontier", list(test.columns) if held_out else None, list(test.columns), held_seeds)
    return pd.DataFrame(dict(zip(head, columns)))


def tuning_md(t: dict) -> str:
    """The baseline's tuning stage (``frontier_analysis.tuning``) as a markdown table: rate, dropout, seeds and
    seed-mean and per-seed final test accuracy (%) (headers: templates/columns.md.j2's ``frontier_tuning``)."""
    head = labels("frontier_tuning")
    return pd.DataFrame([dict(zip(head, (r["lr"], r["dropout"], r["seeds"], pct(r["mean_test_accuracy"]),
                                         " / ".join(pct(v) for v in r["per_seed"].values()))))
                         for r in t["rows"]]).to_markdown(index=False)


def held_out_bounds(section: dict, preset: str) -> dict[str, str]:
    """{seed as str: "lower" | "upper" | "unknown"} for the held-out S(a*_s) of ``preset`` that are bounds
    (``frontier_analysis.speedup[preset].held_out_per_seed``)."""
    return {str(d.get("seed")): d["bound"] for d in details(section, preset).get("held_out_per_seed") or []
            if d.get("bound") in ("lower", "upper", "unknown")}


def interval_text(m: dict) -> str:
    """The interval of S(a*) over decision and held-out seeds of a ``matched_accuracy`` entry (its "interval",
    :meth:`bnexp.analysis.interval.SeedInterval.as_dict`) as :func:`bnexp.report.fmt.format_interval` writes it:
    "3.8x, 95% t interval [2.9x, 4.9x]; per seed 3.6x to 3.9x (n = 3)"."""
    return format_interval(SeedInterval(**m["interval"]), unit="x")


#: what the matched-accuracy table (templates/tables.md.j2: matched) reads from this module
MATCHED_HELPERS = {"details": details, "seed_bounds": seed_bounds, "held_out_bounds": held_out_bounds,
                   "interval_text": interval_text, "NAMES": NAMES, "PASS_CELL": PASS_CELL,
                   "headline_bound": headline_bound, "speedup_text": speedup_text, "claim_text": claim_text}
MD = {"pct": pct, "tuning_md": tuning_md, "frontier_table": frontier_table, "PASS_FACTOR": PASS_FACTOR,
      **MATCHED_HELPERS}  # what templates/frontier.md.j2 reads


def frontier_words(section: dict) -> dict:
    """``section`` (:func:`bnexp.analysis.frontier.analyze`'s dict) with the analysis layer's codes in words, in
    place (templates/rules_and_bounds.md.j2): each preset's ``claim`` (a preset of
    :data:`~bnexp.analysis.frontier.CLAIMED`) as the Sec. 4.2 claim its "pass" decides, and each note that is a
    code ({"note": "seed_counts" | "baseline_censored", ...}) as its sentence; text already there (report.json
    read back, the sweep's warnings) stays. Returns ``section``."""
    fa = section.get("frontier_analysis") or {}
    for d in (fa.get("speedup") or {}).values():
        if "claim" in d:
            d["claim"] = claim_text(d["claim"])
    if fa.get("notes"):
        fa["notes"] = [words("frontier_note", n) if isinstance(n, dict) else n for n in fa["notes"]]
    return section


def frontier_markdown(section: dict) -> list[str]:
    """report.md lines of the frontier section (``section`` = :func:`analyze`'s dict, worded in place by
    :func:`frontier_words`, or report.json's data): templates/frontier.md.j2."""
    return (render_template("frontier.md.j2", frontier_words(section), MD) + "\n").split("\n")[:-1]

