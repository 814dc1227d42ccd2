"""The noise-strength sweep of noisy BN (Santurkar et al. 2018, Sec. 2.1, Fig. 2), ``bn.noise_scale``: their
argument needs noisy BN to carry *more* distribution shift than the plain network while training about as
fast as BN, so every noisy-BN strength of a setting is listed beside BN and no BN with its scale-free shift
from the start (KS, W1 / initial spread; raw W1 beside them), whether its KS shift exceeds no BN's in every
paired seed (the premise of the noisy-BN claims, :mod:`bnexp.report.ics_verdicts`), final test and train
accuracy with the chance check, and its steps to every target of the main table."""

from __future__ import annotations

import pandas as pd

from bnexp.report.fmt import format_acc, format_stat, format_target, md_table
from bnexp.report.groups import ConfigGroup, bn_variant, comparison_sets, noise_scale
from bnexp.report.ics_verdicts import exceeds, main_target, seed_frame
from bnexp.report.load import target_key
from bnexp.report.stats import value_stat

NOISE_TITLE = "Noisy BN at increasing noise strength (bn.noise_scale)"
SHIFT_KEYS = {"ks_first": "KS from the start", "w1_rel_first": "W1 / initial spread from the start",
              "w1_first": "W1 from the start (raw, a.u.)"}


def noise_strength_section(groups: list[ConfigGroup], stats: dict[str, dict], table: pd.DataFrame,
                           targets: list[float]) -> dict | None:
    """Rows of the noise-strength table: None unless a setting has noisy BN and no BN; else {"title",
    "targets", "rows": [{"label", "variant", "noise_scale", "seeds", a stat per :data:`SHIFT_KEYS`,
    "exceeds_no_bn" (True / False / None: not measured), "final_test_accuracy", "final_train_accuracy",
    "at_chance": [seeds], "steps_to_target": {target: reach_stat}}]}."""
    rows = []
    for s in (s for s in comparison_sets(groups) if s["noisy"]):
        plain = seed_frame(table, s["no BN"], main_target(targets))
        for g in ([s["BN"]] if s["BN"] else []) + s["noisy"] + [s["no BN"]]:
            st, sf, v = stats[g.key], seed_frame(table, g, main_target(targets)), bn_variant(g)
            measures = (st["ics"] or {}).get("measures", {})
            rows.append({"label": g.variant_label or g.label, "variant": v,
                         "noise_scale": noise_scale(g) if v == "noisy BN" else None, "seeds": st["completed"],
                         **{k: measures.get(f"shift.{k}") for k in SHIFT_KEYS},
                         "exceeds_no_bn": exceeds(sf, plain) if v == "noisy BN" else None,
                         "final_test_accuracy": st["final_test_accuracy"],
                         "final_train_accuracy": value_stat(sf["final_train_accuracy"]),
                         "at_chance": [int(x) for x in sf.index[sf["chance"]]],
                         "steps_to_target": {target_key(t): st["steps_to_target"][target_key(t)] for t in targets}})
    return {"title": NOISE_TITLE, "targets": targets, "rows": rows} if rows else None


def noise_table(section: dict) -> str:
    """The markdown table of :func:`noise_strength_section` (templates/report.md.j2 says what its accuracy
    columns are)."""
    yes = {True: "yes", False: "no", None: "n/a"}
    rows = [[r["label"], "" if r["noise_scale"] is None else f"{r['noise_scale']:g}", r["seeds"]]
            + [format_stat(r[k]) for k in SHIFT_KEYS] + [yes[r["exceeds_no_bn"]]]
            + [format_acc(r["final_test_accuracy"]) + (f" (at chance: seed {', '.join(map(str, r['at_chance']))})"
                                                      if r["at_chance"] else ""), format_acc(r["final_train_accuracy"])]
            + [r["steps_to_target"][target_key(t)]["text"] for t in section["targets"]] for r in section["rows"]]
    head = (["configuration", "noise_scale", "seeds", *SHIFT_KEYS.values(), "KS above no BN's in every seed",
             "final test acc (%)", "final train acc (%)"]
            + [f"steps to {format_target(t)}" for t in section["targets"]])
    return "\n".join(md_table(head, rows))
