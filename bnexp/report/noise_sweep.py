"""The noise-strength sweep of noisy BN (Santurkar et al. 2018, Sec. 2.1, Fig. 2), ``bn.noise_scale``: their
argument needs noisy BN to carry *more* distribution shift than the plain network while training about as
fast as BN, so every noisy-BN strength of a setting is listed beside BN and no BN with its per-unit W1
shift since the start and its steps to the target, saying where the injected shift exceeds no BN's."""

from __future__ import annotations

from bnexp.report.evidence import MIN_SEEDS, insufficient, record_gaps, seed_gaps
from bnexp.report.fmt import format_stat, format_target, md_table, steps_phrase
from bnexp.report.groups import ConfigGroup, bn_variant, pair_key
from bnexp.report.stats import target_key

NOISE_TITLE = "Noisy BN at increasing noise strength (bn.noise_scale)"


def _scale(g: ConfigGroup) -> float:
    v = g.config.get("bn.noise_scale", 1.0)
    return float(v) if isinstance(v, (int, float)) else 1.0


def noise_strength_section(groups: list[ConfigGroup], stats: dict[str, dict], target: float = 0.95) -> dict | None:
    """Rows and verdicts of the noise-strength sweep: None unless a setting has noisy BN and no BN; else
    {"title", "target", "rows": [{"label", "variant", "noise_scale", "seeds", "w1" (stat of the final
    per-unit W1 from the start), "records", "steps" (reach_stat), "exceeds_no_bn"}], "verdicts"}."""
    sets: dict[str, list[ConfigGroup]] = {}
    for g in groups:
        if bn_variant(g) is not None:
            sets.setdefault(pair_key(g), []).append(g)
    rows, verdicts = [], []
    tk = target_key(target)
    for members in sets.values():
        noisy = sorted((g for g in members if bn_variant(g) == "noisy BN"), key=_scale)
        plain = next((g for g in members if bn_variant(g) == "no BN"), None)
        bn = next((g for g in members if bn_variant(g) == "BN"), None)
        if not noisy or plain is None:
            continue

        def row(g: ConfigGroup) -> dict:
            ics = stats[g.key].get("ics") or {}
            dist = ics.get("distribution") or {}
            return {"label": g.variant_label or g.label, "variant": bn_variant(g),
                    "noise_scale": _scale(g) if bn_variant(g) == "noisy BN" else None,
                    "seeds": dist.get("seeds", 0), "w1": dist.get("final_w1_first"),
                    "records": dist.get("records"), "steps": stats[g.key]["steps_to_target"].get(tk),
                    "exceeds_no_bn": None}

        ref = row(plain)
        block = [row(g) for g in ([bn] if bn else []) + noisy] + [ref]
        for r in block:
            if r["variant"] != "noisy BN":
                continue
            gaps = (seed_gaps([(r["label"], r["seeds"]), (ref["label"], ref["seeds"])], MIN_SEEDS)
                    + record_gaps([(r["label"], r["records"]), (ref["label"], ref["records"])], "monitor records"))
            x = (r["w1"] or {}).get("mean")
            y = (ref["w1"] or {}).get("mean")
            head = (f"noisy BN at noise_scale={r['noise_scale']:g}: per-unit W1 of the layers' inputs from their start "
                    f"{format_stat(r['w1'])} vs no BN {format_stat(ref['w1'])}; reached {format_target(target)} in "
                    f"{steps_phrase(r['steps']) if r['steps'] else 'n/a'}")
            if x is None or y is None:
                gaps.append("the distribution shift was not measured")
            if gaps:
                verdicts.append(head + insufficient(gaps))
                continue
            r["exceeds_no_bn"] = x > y
            verdicts.append(head + (": its shift exceeds the plain network's." if x > y else
                                    ": its shift does not exceed the plain network's."))
        rows.extend(block)
    if not rows:
        return None
    return {"title": NOISE_TITLE, "target": target, "rows": rows, "verdicts": verdicts}


def noise_strength_md(section: dict) -> list[str]:
    """Markdown table and verdicts of :func:`noise_strength_section`."""
    tgt = format_target(section["target"])
    rows = [[r["label"], "" if r["noise_scale"] is None else f"{r['noise_scale']:g}", r["seeds"], format_stat(r["w1"]),
             steps_phrase(r["steps"]) if r["steps"] else "n/a"] for r in section["rows"]]
    return ([f"### {section['title']}", ""]
            + md_table(["configuration", "noise_scale", "seeds", "per-unit W1 from the start", f"steps to {tgt}"], rows)
            + [""] + [f"- {v}" for v in section["verdicts"]] + [""])
