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
import sys

import pandas as pd

from bnexp.report.best_rate import best_rate_speedups
from bnexp.report.claims import evaluate
from bnexp.report.groups import ConfigGroup, label_groups
from bnexp.report.ics_verdicts import ics_claims
from bnexp.report.load import config_key, target_key
from bnexp.report.noise_sweep import noise_strength_section
from bnexp.report.rules import CHANCE, STD_NOTE
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
        from bnexp.report.study_claims import C
        DP_NOBN_12 = C["DP_NOBN_12"]
        for i, c in enumerate(d["study"]["claims"]):
            if c["name"] == DP_NOBN_12.name:
                d["study"]["claims"][i] = evaluate(DP_NOBN_12, {int(k): v for k, v in c["per_seed"].items()})
    d = json.loads(dumps(d))
    open(path, "w").write(dumps(d, indent=2) + "\n")
    report_changes(path, old, d)


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
