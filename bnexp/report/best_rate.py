"""The section "each at its best learning rate": every configuration at the rate of the sweep's
grid that reaches the target test accuracy (95%) in the fewest steps.

Comparing BN and no BN at one shared rate measures the rate choice as much as BN: a rate that
suits BN may cripple the plain network. Standard practice (Shallue et al. 2019, "Measuring the
Effects of Data Parallelism on Neural Network Training", Sec. 3) compares each configuration at
its own best rate as well. Here a *family* is the set of configurations that differ only in
``lr``; its best rate is the grid rate with the fewest mean steps to the target over seeds,
among the rates where every completed seed reached it and none diverged (a diverging rate is
"too high"). The best rate is *at the grid's edge* when it is the lowest or the highest rate
tried: then a better rate may lie outside the grid, and the report says so.
"""

from __future__ import annotations

import pandas as pd

from bnexp.report.fmt import format_steps, format_target, md_table, steps_pm
from bnexp.report.groups import ConfigGroup, bn_variant, pair_label
from bnexp.report.load import Sweep, config_key
from bnexp.report.stats import reach_stat, target_steps

BEST_RATE_TARGET = 0.95
BEST_RATE_TITLE = "Each at its best learning rate"


def rate_families(groups: list[ConfigGroup]) -> list[list[ConfigGroup]]:
    """The families of configurations that differ only in ``lr`` (two rates or more), each sorted by rate."""
    fams: dict[str, list[ConfigGroup]] = {}
    for g in groups:
        if g.lr is not None and not g.key.startswith("summary:"):
            fams.setdefault(config_key(g.config, ("lr",)), []).append(g)
    return [sorted(f, key=lambda g: g.lr) for f in fams.values() if len(f) > 1]


def best_rate(family: list[ConfigGroup], steps: pd.Series, target: float = BEST_RATE_TARGET) -> dict:
    """The best grid rate of one family (see the module docstring), from every run's ``steps`` to ``target``.

    Returns:
        {"target", "rates": [{"lr", "label", "steps" (reach_stat), "diverged", "completed", "status": "ok",
        "diverged (too high)", "not reached in every seed" or "no completed runs"}], "grid", "best_lr",
        "best_label", "best_steps" (None when no rate qualifies), "edge": None, "lowest" or "highest"}.
    """
    rows = []
    for g in family:
        done = g.completed
        st = reach_stat(steps.reindex([r.id for r in done]))
        div = sum(r.status == "diverged" for r in g.runs)
        if not done:
            status = "no completed runs"
        elif div:
            status = "diverged (too high)"
        elif st["reached"] < st["n"]:
            status = "not reached in every seed"
        else:
            status = "ok"
        rows.append({"lr": g.lr, "label": g.label, "steps": st, "diverged": div, "completed": len(done),
                     "status": status})
    ok = [r for r in rows if r["status"] == "ok"]
    best = min(ok, key=lambda r: r["steps"]["mean"]) if ok else None
    grid = [r["lr"] for r in rows]
    edge = None
    if best is not None and len(grid) > 1:
        edge = "lowest" if best["lr"] == min(grid) else "highest" if best["lr"] == max(grid) else None
    return {"target": target, "rates": rows, "grid": grid,
            "best_lr": best["lr"] if best else None, "best_label": best["label"] if best else None,
            "best_steps": best["steps"] if best else None, "edge": edge}


def _family_name(family: list[ConfigGroup], groups: list[ConfigGroup]) -> str:
    g = family[0]
    v = bn_variant(g) or g.label
    others = [p for p in pair_label(g, groups).split(", ") if p and not p.startswith("lr=")]
    return " ".join([v] + others) if others else v


def _edge_note(fam: dict) -> str:
    if fam["edge"] is None:
        return ""
    return (f", the {fam['edge']} rate of the grid {', '.join(f'{r:g}' for r in fam['grid'])}: "
            "a better rate may lie outside it")


def best_rate_section(groups: list[ConfigGroup], sweep: Sweep, min_seeds: int = 2,
                      target: float = BEST_RATE_TARGET) -> dict | None:
    """The "each at its best learning rate" comparison: every family's :func:`best_rate`; a BN (or noisy
    BN) family is paired with the no-BN family of its setting, speedup = mean no-BN steps at no BN's best
    rate / mean BN steps at BN's best rate, a verdict only with ``min_seeds`` completed seeds at both.

    Returns:
        None without a family of two rates or more; else {"title", "target", "families": [{"name",
        "variant", **best_rate}], "comparisons": [{"bn", "no_bn", "bn_lr", "no_bn_lr", "speedup",
        "verdict"}], "verdicts": [sentences]}.
    """
    fams = rate_families(groups)
    if not fams:
        return None
    out = {"title": BEST_RATE_TITLE, "target": target, "families": [], "comparisons": [], "verdicts": []}
    by_setting: dict[str, dict[str, dict]] = {}
    steps = target_steps(sweep, target)
    for fam in fams:
        info = {"name": _family_name(fam, groups), "variant": bn_variant(fam[0]), **best_rate(fam, steps, target)}
        out["families"].append(info)
        setting = config_key(fam[0].config, ("lr", "bn", "experiment"))
        by_setting.setdefault(setting, {})[info["variant"] or info["name"]] = info
    tgt = format_target(target)
    for fam in out["families"]:
        if fam["best_lr"] is None:
            out["verdicts"].append(f"{fam['name']}: no rate of the grid reached {tgt} in every seed without "
                                   "diverging, so it has no best rate.")
    for setting in by_setting.values():
        nb = setting.get("no BN")
        for variant in ("BN", "noisy BN"):
            bn = setting.get(variant)
            if bn is None or nb is None or bn["best_lr"] is None or nb["best_lr"] is None:
                continue
            bs, ns = bn["best_steps"], nb["best_steps"]
            speedup = ns["mean"] / bs["mean"] if bs["mean"] else None
            few = [f"{f['name']} has {f['best_steps']['n']} seed{'s' if f['best_steps']['n'] != 1 else ''} "
                   f"at its best rate" for f in (bn, nb) if f["best_steps"]["n"] < min_seeds]
            head = (f"Each at its best rate: {bn['name']} (lr={bn['best_lr']:g}{_edge_note(bn)}) reached {tgt} in "
                    f"{steps_pm(bs, ' steps')}, {nb['name']} (lr={nb['best_lr']:g}{_edge_note(nb)}) in "
                    f"{steps_pm(ns, ' steps')}")
            if few:
                verdict = None
                line = f"{head}: insufficient evidence for a speedup verdict ({'; '.join(few)}; need {min_seeds})."
            else:
                verdict = "faster" if speedup > 1 else "not faster"
                line = (f"{head}: {speedup:.1f}x fewer steps." if speedup >= 1 else
                        f"{head}: {1 / speedup:.1f}x more steps.")
            out["comparisons"].append({"bn": bn["name"], "no_bn": nb["name"], "bn_lr": bn["best_lr"],
                                       "no_bn_lr": nb["best_lr"], "speedup": speedup, "verdict": verdict})
            out["verdicts"].append(line)
    return out


def best_rate_md(section: dict) -> list[str]:
    """Markdown of :func:`best_rate_section`: per family a table of the grid (steps to the target
    per rate, the best marked), then the verdicts."""
    tgt = format_target(section["target"])
    out = [f"## {section['title']}", "",
           f"For every configuration, the rate of the grid that reaches {tgt} test accuracy in the fewest steps "
           "(mean over seeds; only rates where every seed reached it and none diverged qualify; a diverging "
           "rate counts as too high), and the speedup of BN at its best rate over no BN at its best rate "
           "(Shallue et al. 2019), beside the same-rate speedups above.", ""]
    for fam in section["families"]:
        rows = [[f"{r['lr']:g}" + (" (best)" if r["lr"] == fam["best_lr"] else ""), format_steps(r["steps"], " steps"),
                 r["status"]] for r in fam["rates"]]
        out += [f"**{fam['name']}**" + (f" -- best rate at the grid's {fam['edge']} edge" if fam["edge"] else ""), ""]
        out += md_table(["lr", f"steps to {tgt}", "status"], rows) + [""]
    out += [f"- {v}" for v in section["verdicts"]] + [""]
    return out
