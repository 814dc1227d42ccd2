"""Re-derive the committed docs report.json files under the report's unified rules (bnexp/report/rules.py).

The run folders behind docs/**/report.json are not in the tree, so what a unified rule changes is recomputed
from what report.json holds: every seed's record (status, best and final test accuracy, steps to each target),
every configuration's config, and the per-seed values of every statistic. Recomputed here:

* every statistic over seeds ({"mean", "std", "n", "per_seed"}): the sample std (ddof=1), and the text of the
  steps-to-target cells;
* the configuration labels (the normalizer vocabulary names ghost BN);
* the ICS claims, the best-rate speedups and the noise-strength table, from the per-run table rebuilt from the
  seeds' records (pure functions of that table);
* the study claim whose threshold is the chance rule ("does not train": < 15%, was < 20%).

Usage: python scripts/rederive_report_json.py docs/**/report.json (rewrites them in place; prints every changed
verdict, label and number but the std's), then re-render report.md / report.csv from each report.json and run
``bnexp report --update-docs``. Run once on the committed reports when the report's rules were unified; a
report.json written by ``bnexp report`` since then needs none of it.
"""

from __future__ import annotations

import json
import re
import sys

import pandas as pd

from bnexp.report.best_rate import best_rate_speedups
from bnexp.report.claims import evaluate, seed_values
from bnexp.report.interval import short_text, t_quantile
from bnexp.report.groups import ConfigGroup, label_groups
from bnexp.report.ics_verdicts import ics_claims
from bnexp.report.load import config_key, target_key
from bnexp.report.noise_sweep import noise_strength_section
from bnexp.report.rules import CHANCE, STD_NOTE, Censored
from bnexp.report.stats import reach_stat, value_stat
from bnexp.runs.rundir import COMPLETE_STATUSES, dumps


def restat(x):
    """Every statistic in ``x`` recomputed from its per-seed values (value_stat / reach_stat)."""
    if isinstance(x, dict):
        if {"mean", "std", "n", "per_seed"} <= set(x) and isinstance(x["per_seed"], list):
            if "reached" in x:
                return {**x, **reach_stat(x["per_seed"])}
            return {**x, **value_stat(x["per_seed"])}
        return {k: restat(v) for k, v in x.items()}
    if isinstance(x, list):
        return [restat(v) for v in x]
    return x


def table_of(d: dict, groups: list[ConfigGroup]) -> pd.DataFrame:
    """The per-run table rebuilt from report.json's seed records (and the ICS measures' per-seed values)."""
    rows = []
    for c, g in zip(d["configurations"], groups):
        ics = c.get("ics") or {}
        for s in c["seeds"]:
            row = {"group": g.key, "seed": s["seed"], "status": s["status"], "path": s["path"], **c["config"],
                   "budget": g.max_steps, "max_test_accuracy": s.get("max_test_accuracy"),
                   "final_test_accuracy": s.get("final_test_accuracy")}
            for t in d["targets"]:
                v = (s.get("steps_to_target") or {}).get(target_key(t))
                row[f"steps_to_{target_key(t)}"] = float("nan") if v is None else v
                row[f"censored_{target_key(t)}"] = s["status"] in COMPLETE_STATUSES and v is None
            row["left_chance"] = s["status"] in COMPLETE_STATUSES and (s.get("max_test_accuracy") or 0) > CHANCE
            if s["status"] == "finished" and s["seed"] in ics.get("seeds", []):
                i = ics["seeds"].index(s["seed"])
                row.update({k: m["per_seed"][i] for k, m in ics["measures"].items()})
            rows.append(row)
    t = pd.DataFrame(rows)
    strength = {r["label"]: r for r in ((d.get("ics") or {}).get("noise_strength") or {}).get("rows", [])}
    t["final_train_accuracy"] = float("nan")
    for c, g in zip(d["configurations"], groups):  # the noise table's train accuracy, per seed, in seed order
        r = strength.get((c.get("ics") or {}).get("label") or c["label"])
        if r and r.get("final_train_accuracy"):
            sel = t.index[(t["group"] == g.key) & t["status"].isin(COMPLETE_STATUSES)]
            t.loc[sel, "final_train_accuracy"] = r["final_train_accuracy"]["per_seed"][:len(sel)]
    return t


def migrate(path: str) -> None:
    d = json.load(open(path))
    old = json.loads(json.dumps(d))
    d = restat(d)
    d["std"] = STD_NOTE
    groups = [ConfigGroup(config_key(c["config"]), c["config"]) for c in d["configurations"]]
    label_groups(groups)
    for c, g in zip(d["configurations"], groups):
        c["label"] = g.label
        if c.get("ics"):
            c["ics"]["label"] = g.variant_label or g.label
    t = table_of(d, groups)
    d["claims"] = ics_claims(groups, t, d["targets"])
    d["best_rate_speedups"] = best_rate_speedups(groups, t)
    if d.get("ics") and d["ics"].get("noise_strength"):
        stats = {g.key: c for c, g in zip(d["configurations"], groups)}
        d["ics"]["noise_strength"] = noise_strength_section(groups, stats, t, d["targets"])
    if d.get("study"):
        restudy(d["study"])
    d = json.loads(dumps(d))
    open(path, "w").write(dumps(d, indent=2) + "\n")
    report_changes(path, old, d)


def t_cells(x):
    """Every {"n", "mean", "std", "ci_low", "ci_high"} cell's interval as the Student-t interval of the mean
    (a function of n, mean and the sample std alone)."""
    if isinstance(x, dict):
        if {"n", "mean", "std", "ci_low", "ci_high"} <= set(x):
            if x["n"] >= 2 and x["std"] is not None:
                half = t_quantile(0.975, x["n"] - 1) * x["std"] / x["n"] ** 0.5
                return {**x, "ci_low": x["mean"] - half, "ci_high": x["mean"] + half}
            return x
        return {k: t_cells(v) for k, v in x.items()}
    return [t_cells(v) for v in x] if isinstance(x, list) else x


def restudy(sec: dict) -> None:
    """A study section's claims, table intervals and interval findings under the one interval method."""
    from bnexp.report.study_claims import CLAIMS

    claims = {c.name: c for cs in CLAIMS.values() for c in cs}
    for i, c in enumerate(sec["claims"]):
        claim, bounds = claims[c["name"]], {int(k): b for k, b in (c.get("bounds") or {}).items()}
        vals = {int(k): None if v is None else Censored(v, bounds.get(int(k), "exact"))
                for k, v in c["per_seed"].items()}
        premise = c["reason"] if c["verdict"] == "premise not met" else None
        sec["claims"][i] = evaluate(claim, vals, premise=premise, scale="log" if " / " in claim.quantity else "raw")
    sec["table"] = t_cells(sec["table"])
    fs = sec.get("findings") or []
    if sec["name"] == "batch_size":
        cell = {(r["norm"], r["ghost"], r["m"]): r for r in sec["table"]}
        budget = sec["budget_examples"]
        for i, (key, m) in enumerate((("BS_ADV_60", 60), ("BS_ADV_4", 4))):  # both sides' bounds, from the table
            a, b = cell[("none", None, m)]["per_seed"], cell[("batch", None, m)]["per_seed"]
            sec["claims"][i] = evaluate(claims[sec["claims"][i]["name"]], {
                int(s): Censored.steps(a[s]["to_target"], budget) / Censored.steps(b[s]["to_target"], budget)
                for s in a if s in b}, scale="log")
        for i, f in enumerate(fs):
            other = "none" if f.startswith("Examples to 95%, no BN") else "layer"
            parts, holds = [], []
            for m in sorted({r["m"] for r in sec["table"]}):
                a, b = cell.get((other, None, m)), cell.get(("batch", None, m))
                if a is None or b is None:
                    continue
                ratio = {int(s): Censored.steps(a["per_seed"][s]["to_target"], budget) /
                         Censored.steps(b["per_seed"][s]["to_target"], budget)
                         for s in a["per_seed"] if s in b["per_seed"]}
                iv = seed_values(ratio, "log")[2]
                if iv is None:
                    continue
                parts.append(f"m = {m}: {short_text(iv)}")
                if iv.side_of(1.0) == "above":
                    holds.append(str(m))
            label = "no BN" if other == "none" else "LayerNorm"
            fs[i] = (f"Examples to 95%, {label} / BN (geometric mean [95% t interval on log ratios]; a run "
                     f"that never reached 95% counts as its {budget:,} examples, a bound): "
                     f"{'; '.join(parts)}. BN needs fewer examples than {label} (interval above 1) at "
                     f"m = {', '.join(holds) if holds else 'none of these'}.")
    if sec["name"] == "inference_statistics":
        for i, f in enumerate(fs):
            mom = float(re.search(r"momentum ([0-9.]+):", f).group(1))
            rows = sorted((r for r in sec["table"] if r["momentum"] == mom), key=lambda r: r["m"])
            parts = [f"m = {int(r['m'])}: " + (f"{r['gap']['mean']:.3g} [{r['gap']['ci_low']:.3g}, "
                                               f"{r['gap']['ci_high']:.3g}]" if r["gap"]["n"] >= 2 else "n/a")
                     for r in rows]
            fs[i] = (f"Moving-average minus batch-statistics test accuracy (points, mean [95% t interval]), "
                     f"momentum {mom:g}: {'; '.join(parts)}.")


def rerender(path: str) -> None:
    """report.md and report.csv beside ``path`` from its report.json (bnexp.report.render)."""
    from pathlib import Path

    from bnexp.report.render import render_csv, render_markdown

    d, folder = json.load(open(path)), Path(path).parent
    (folder / "report.md").write_text(render_markdown(d) + "\n", encoding="utf-8")
    (folder / "report.csv").write_bytes(render_csv(d).encode("utf-8"))


def report_changes(path, old, new, where=""):
    """Print every changed leaf that is a verdict, a label or a number (std's excepted, they are many)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            report_changes(path, old.get(k), new.get(k), f"{where}.{k}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            report_changes(path, a, b, f"{where}[{i}]")
    elif old != new and not where.endswith((".std", ".text")):
        if isinstance(old, float) and isinstance(new, float) and abs(old - new) < 1e-9:
            return
        print(f"{path}{where}: {json.dumps(old)[:150]} -> {json.dumps(new)[:150]}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        migrate(p)
        rerender(p)
