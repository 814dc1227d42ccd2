"""The ICS study's claims table (docs/ics/PLAN.md, "Claims, views and pass rules"): each statement the report
makes about BN, internal covariate shift and speed is one row of :mod:`bnexp.report.claims`, its quantity,
direction, threshold and views fixed in :data:`SPECS` before any run. There is no tally: no row counts for or
against an account. Every quantity is a per-seed ratio, seed s of one configuration over seed s of the other.

The shift claim uses scale-free measures only (``ks_first``, ``w1_rel_first``): a net whose pre-activations
merely grow cannot manufacture it (the raw ``w1_first`` is in the tables, never in a verdict); BN within
:data:`AT_FLOOR` x its sampling-noise floor is named in the reason. The noisy-BN claims (Santurkar et al. 2018,
Sec. 2.1) are evaluated at the weakest ``bn.noise_scale`` whose KS shift exceeds no BN's in every paired seed
(:func:`exceeds`); without one, "premise not met". Bounds and chance follow :mod:`bnexp.analysis.rules`; a measure
the records lack (runs written before it existed) makes the claim inconclusive. The quantities', views' and
reasons' words are templates/verdicts.md.j2's (:func:`bnexp.report.claims.words`); the claims themselves, the
section's titles and the view of a claim with one view are data, ics_claims.yaml's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import pandas as pd
import yaml

from bnexp.report.claims import Claim, evaluate, words
from bnexp.report.fmt import cell, format_acc, format_stat, labels, md_table
from bnexp.report.groups import ConfigGroup, bn_variant, comparison_sets, noise_scale, pair_label
from bnexp.report.ics_stats import DEF21, GRAD_KEYS, LANDSCAPE_KEYS, matched_at_equal_rates, matched_by_seed, rate_at
from bnexp.analysis.runs import target_key
from bnexp.analysis.rules import Censored
from bnexp.report.stats import value_stat
from bnexp.runfolders.rundir import COMPLETE_STATUSES

# ics_claims.yaml: the claims (SPECS), the two sections' titles and the view of a claim with one view
_DATA = yaml.safe_load(Path(__file__).with_name("ics_claims.yaml").read_text(encoding="utf-8"))
ICS_TITLE = _DATA["title"]  # "Does BN reduce internal covariate shift?"
ONE_VIEW = _DATA["one_view"]  # a claim's view when it has one
ICS_FILES = ("ics_distribution.png", "ics_gradient.png", "ics_landscape.png")
AT_FLOOR = 1.5  # a value within 1.5x its sampling-noise floor is not resolved from sampling noise
PREMISE_KEY = "shift.ks_first"  # noisy BN's premise: more scale-free shift than no BN in every seed

MATCHED = "grad.matched"  # gradient ICS at matched training progress: per seed pair (bnexp.report.ics_stats)


@dataclass(frozen=True)
class Spec:
    """One row of the claims table: the claim, the sides of its ratio (numerator / denominator: "BN", "no BN",
    "noisy BN"), the run-table column it divides (:data:`MATCHED`: the matched-progress comparison;
    :data:`RATE_MATCHED` + a measure: that measure matched at equal rates), the ``view`` of the measure this row
    shows and whether that view is the pre-registered one (docs/ics/PLAN.md, fixed before the re-run's results)."""

    claim: Claim
    num: str
    den: str
    col: str
    view: str = ONE_VIEW
    preregistered: bool = True


# Santurkar et al.'s Def. 2.1 as defined (docs/ics/PLAN.md, amendment of 2026-11-29): the raw ||G - G'||_2 and
# 1 - cos(G, G'), at the same steps and matched at equal learning rates (RATE_MATCHED + the measure)
RATE_MATCHED = "grad.rate_matched:"
# the claims table, fixed before the run: ics_claims.yaml's rows [name, quantity, direction, threshold, num, den,
# col, view, preregistered]
SPECS: tuple[Spec, ...] = tuple(Spec(Claim(name, quantity, direction, float(threshold)), num, den, col, view, prereg)
                                for name, quantity, direction, threshold, num, den, col, view, prereg
                                in _DATA["claims"])
CLAIMS = tuple(spec.claim for spec in SPECS)  # the claims, fixed before the run
RATE_MATCHED_VIEWS = frozenset(spec.view for spec in SPECS if spec.col.startswith(RATE_MATCHED))  # their rows' views
#: the views of Santurkar et al.'s Def. 2.1 as defined (the raw L2 and 1 - cos rows, both views), in the table's order
DEF21_VIEWS = tuple(spec.view for spec in SPECS if spec.col.removeprefix(RATE_MATCHED).removeprefix("grad.") in DEF21)
#: each Def. 2.1 view's short name, as the docs sentence names it after "Def. 2.1 as defined" (ics_claims.yaml)
DEF21_SHORT: dict[str, str] = dict(_DATA["def21_short"])


def main_target(targets: list[float]) -> float:
    """The report's main target: the lower median of the sweep's targets (trainer.targets, fixed before
    the run): 95% of MNIST's [0.9, 0.95, 0.97, 0.98], 60% of the CIFAR-10 presets' [0.5, 0.6, 0.7, 0.8]."""
    return sorted(targets)[(len(targets) - 1) // 2]


def seed_frame(table: pd.DataFrame, g: ConfigGroup, target: float) -> pd.DataFrame:
    """The completed runs of ``g`` by seed (the per-run table with the ICS columns; the first run of a seed),
    plus ``steps`` (to ``target``, a :class:`bnexp.analysis.rules.Censored`: the budget as a lower bound where
    not reached, the first evaluation's step as an upper bound where reached by it) and ``chance`` (the run never left chance)."""
    rows = table[(table["group"] == g.key) & table["status"].isin(COMPLETE_STATUSES)].dropna(subset=["seed"])
    rows = rows.drop_duplicates("seed").assign(run_id=lambda r: r.index.astype(str))
    rows = rows.set_index(rows["seed"].astype(int).rename("seed"))
    steps = [Censored.steps(v, b, first_eval=f)
             for v, b, f in zip(rows[f"steps_to_{target_key(target)}"], rows["budget"],
                                         rows.get("first_eval", pd.Series(None, index=rows.index)))]
    return rows.assign(steps=pd.Series(steps, index=rows.index, dtype=object),
                       chance=~rows["left_chance"].astype(bool))


def exceeds(noisy: pd.DataFrame, plain: pd.DataFrame, col: str = PREMISE_KEY) -> bool | None:
    """Whether noisy BN's ``col`` exceeds no BN's in every paired seed (None: no paired values)."""
    pair = pd.concat([noisy[col], plain[col]], axis=1).dropna() if col in noisy and col in plain else ()
    return bool((pair.iloc[:, 0] > pair.iloc[:, 1]).all()) if len(pair) else None


def monitor_key(measure: str) -> str | None:
    """The config key that records a measure off by default ("monitor.grad_ics" for the gradient ICS,
    "monitor.landscape" for the landscape); None for the others (recorded by default)."""
    return "monitor.grad_ics" if measure in GRAD_KEYS else "monitor.landscape" if measure in LANDSCAPE_KEYS else None


def claim_row(claim: Claim, a: pd.DataFrame, b: pd.DataFrame, names: tuple[str, str], col: str,
              premise: str | None = None, missing: str | None = None,
              ratios: Mapping[int, float | None] | None = None) -> dict:
    """:func:`bnexp.report.claims.evaluate` of the per-seed ratio ``a[col] / b[col]`` (sides named ``names``;
    steps as :class:`bnexp.analysis.rules.Censored` ratios), or of the given per-seed ``ratios`` (the
    matched-progress comparison; ``col`` is then the measure both sides must have), with the chance check, a
    missing measure and BN's noise floor in the reason. A measure off by default that a side lacks names its
    key in ``"needs"`` ("monitor.grad_ics"; None otherwise), which the terminal summary lists once instead of
    as inconclusive rows."""
    lacking = [(n, bool(len(s))) for n, s in zip(names, (a, b)) if col not in s or s[col].isna().all()]
    key = col.split(".")[1] if "." in col else col
    needs = monitor_key(key) if lacking and not missing else None
    missing = missing or (words("not_recorded", key, lacking, monitor_key(key)) if lacking else None)
    if ratios is not None and not missing and not any(v is not None for v in ratios.values()):
        missing = words("no_matched_probes")
    def value(x) -> Censored:  # steps are Censored already; a measure is exact (NaN: no value)
        return x if isinstance(x, Censored) else Censored(None if pd.isna(x) else float(x))

    ratio = {} if premise or missing else dict(ratios) if ratios is not None else {
        s: value(a[col][s]) / value(b[col][s]) if s in a.index and s in b.index else None
        for s in sorted(set(a.index) | set(b.index))}
    row = evaluate(claim, ratio, sorted(set(a.index[a["chance"]]) | set(b.index[b["chance"]])), premise, missing, "log")
    floor = col.replace("_first", "_floor")
    if col.startswith("shift.") and floor in b and not missing and (at := b[col] <= AT_FLOOR * b[floor]).any():
        row["reason"] += words("near_floor", AT_FLOOR, floor.split(".")[1], [int(s) for s in at.index[at]])
    row["needs"] = needs
    return row


def matched_rows(a: pd.DataFrame, b: pd.DataFrame, progress: Mapping[str, list]) -> dict[int, dict | None]:
    """Per seed, :func:`bnexp.report.ics_stats.matched_progress` of side ``a``'s run with side ``b``'s
    (seed frames of :func:`seed_frame`; ``progress``: run id -> progress records): the
    :class:`~bnexp.report.ics_stats.Matched` of each seed as a dict, None where a run has no records."""
    runs = [{int(s): progress[r] for s, r in side["run_id"].items() if r in progress} for side in (a, b)]
    return {s: asdict(m) if m else None for s, m in matched_by_seed(*runs).items()}


def rate_matched_rows(a: pd.DataFrame, b: pd.DataFrame, probes: Mapping[str, list]) -> dict[int, dict | None]:
    """Per seed, :func:`bnexp.report.ics_stats.matched_at_equal_rates` of side ``a``'s run with side ``b``'s (seed
    frames; ``probes``: run id -> :class:`~bnexp.report.ics_stats.Probe` s of one measure), as a dict; None where a
    run has no probes."""
    runs = [{int(s): probes[r] for s, r in side["run_id"].items() if r in probes} for side in (a, b)]
    out = {}
    for s in sorted(set(runs[0]) | set(runs[1])):
        m = matched_at_equal_rates(runs[0][s], runs[1][s]) if s in runs[0] and s in runs[1] else None
        out[s] = asdict(m) if m else None
    return out


def _rate(side: pd.DataFrame, seed: int, step: int) -> float | None:
    """The learning rate of ``side``'s run of ``seed`` at ``step`` (its lr and optim schedule keys)."""
    if seed not in side.index or "lr" not in side or pd.isna(side["lr"][seed]):
        return None
    get = (lambda k, d: side[k][seed] if k in side and not pd.isna(side[k][seed]) else d)
    return rate_at(float(side["lr"][seed]), get("optim.schedule", "constant"), get("optim.decay_rate", 1.0),
                   get("optim.decay_steps", 1000), int(step))


def confounded_text(matched: Mapping[int, dict | None], names: tuple[str, str]) -> str | None:
    """"schedule-confounded: ..." when a seed's matched probes lie at learning rates more than 1% apart (the
    rates compared, per seed), else None."""
    from bnexp.report.ics_stats import same_rate

    apart = [(s, m) for s, m in matched.items() if m and m.get("rate_a") is not None and m.get("rate_b") is not None
             and not same_rate(m["rate_a"], m["rate_b"])]
    if not apart:
        return None
    return words("schedule_confounded", apart, names)


def ics_claims(groups: list[ConfigGroup], table: pd.DataFrame, targets: list[float],
               progress: Mapping[str, list] | None = None, ignore: tuple[str, ...] = (),
               probes: Mapping[str, Mapping[str, list]] | None = None) -> list[dict]:
    """The claims table: :data:`SPECS` evaluated for every set of matching BN / no-BN (and noisy-BN)
    configurations (:func:`comparison_sets`, the config keys ``ignore`` left out of the match: ("lr",) when
    each net ran at its own rate) at :func:`main_target`; each row as :func:`bnexp.report.claims.evaluate`
    returns it plus "setting" (e.g. "lr=0.5", "" when one), "view" and "preregistered" (:class:`Spec`), for the
    matched-progress row "matched" ({seed: level, steps and values, or None}; ``progress``: run id -> records
    of :func:`bnexp.report.ics_stats.progress_records`, None: none recorded) and, for the noisy-BN claims,
    "noise_scale" (the strength evaluated, None when the premise is not met). The Def. 2.1 rows matched at equal
    rates (:data:`RATE_MATCHED`) read ``probes`` ({measure: {run id: probes}},
    :func:`bnexp.report.ics_stats.probe_records`); where a seed has no equal-rate pair the row is "premise not
    met", its reason "schedule-confounded" with the rates compared. The pre-registered matched row keeps its
    verdict and gains "rates" per seed and, where they differ, "second_reading" (docs/ics/PLAN.md, amendment)."""
    t, rows = main_target(targets), []
    for s in comparison_sets(groups, ignore):
        side = {v: seed_frame(table, s[v], t) for v in ("BN", "no BN") if s[v] is not None}
        chosen = premise = missing = None
        if s["noisy"]:
            got = [(g, exceeds(seed_frame(table, g, t), side["no BN"])) for g in s["noisy"]]
            chosen = next((g for g, ok in got if ok), None)
            if all(ok is None for _, ok in got):
                missing = words("premise_unchecked")
            elif chosen is None:
                premise = words("no_noisy_strength", [noise_scale(g) for g in s["noisy"]])
            side["noisy BN"] = seed_frame(table, chosen or s["noisy"][0], t)
        for spec in (spec for spec in SPECS if spec.num in side and spec.den in side):
            num, den, col, extra, ratios = spec.num, spec.den, spec.col, {}, None
            noisy = "noisy BN" in (num, den)
            confounded = None
            if col == MATCHED:
                col, extra["matched"] = "grad.l2_rel_per_move", matched_rows(side[num], side[den], progress or {})
                ratios = {s_: (m or {}).get("ratio") for s_, m in extra["matched"].items()}
                for s_, m in extra["matched"].items():
                    if m:
                        m.update(rate_a=_rate(side[num], s_, m["step_a"]), rate_b=_rate(side[den], s_, m["step_b"]))
                if (second := confounded_text(extra["matched"], (num, den))) is not None:
                    extra["second_reading"] = words("second_reading", second)
            elif col.startswith(RATE_MATCHED):
                key = col[len(RATE_MATCHED):]
                col, extra["matched"] = f"grad.{key}", rate_matched_rows(side[num], side[den], (probes or {}).get(key, {}))
                ratios = {s_: None if not m or m["confounded"] else m["ratio"] for s_, m in extra["matched"].items()}
                confounded = confounded_text({s_: m for s_, m in extra["matched"].items() if m and m["confounded"]},
                                             (num, den))
                sched = {str(v).rsplit(".", 1)[-1] for x in (num, den) if "optim.schedule" in side[x]
                         for v in side[x]["optim.schedule"].dropna()} - {"constant"}
                if sched:  # equal steps are equal rates there: the same-steps row answers (docs/ics/PLAN.md)
                    confounded = words("schedule_decays", sorted(sched))
                extra["schedule_confounded"] = confounded is not None
            row = claim_row(spec.claim, side[num], side[den], (num, den), col,
                            *((premise, missing) if noisy else (confounded, None) if confounded else ()),
                            ratios=ratios)
            at = words("at_noise_scale", noise_scale(chosen)) if noisy and chosen else ""
            rows.append({**row, "reason": row["reason"] + at, "setting": pair_label(s["no BN"], groups, ignore),
                         "target": t, "view": spec.view, "preregistered": spec.preregistered, **extra,
                         **({"noise_scale": noise_scale(chosen) if chosen else None} if noisy else {})})
    return rows


def ics_section(groups: list[ConfigGroup], table: pd.DataFrame, targets: list[float]) -> dict | None:
    """The section "Does BN reduce internal covariate shift?": None when no run has an ICS measurement;
    else {"title", "main_target", "figures": [the :data:`ICS_FILES` some run has data for]} (the
    tables come from the configurations' ``ics``, the claims from :func:`ics_claims`)."""
    have = [table.filter(regex=f"^{p}\\.").notna().any().any() for p in ("shift", "grad", "land")]
    if not any(have):
        return None
    return {"title": ICS_TITLE, "main_target": main_target(targets),
            "figures": [f for f, h in zip(ICS_FILES, have) if h]}


# --- the noise-strength sweep of noisy BN (Santurkar et al. 2018, Sec. 2.1, Fig. 2), bn.noise_scale: noisy BN
# must carry more shift than no BN while training about as fast as BN; every strength beside BN and no BN.

NOISE_TITLE = _DATA["noise_title"]  # "Noisy BN at increasing noise strength (bn.noise_scale)"
SHIFT_KEYS = ("ks_first", "w1_rel_first", "w1_first")  # the shift measures of the table (templates/columns.md.j2)


def noise_strength_section(groups: list[ConfigGroup], stats: dict[str, dict], table: pd.DataFrame,
                           targets: list[float], ignore: tuple[str, ...] = ()) -> dict | None:
    """Rows of the noise-strength table: None unless a setting has noisy BN and no BN; else {"title",
    "targets", "rows": [{"label", "variant", "noise_scale", "seeds", a stat per :data:`SHIFT_KEYS`,
    "exceeds_no_bn" (True / False / None: not measured), "final_test_accuracy", "final_train_accuracy",
    "at_chance": [seeds], "steps_to_target": {target: reach_stat}}]}."""
    rows, main = [], main_target(targets)
    for s in (s for s in comparison_sets(groups, ignore) if s["noisy"]):
        plain = seed_frame(table, s["no BN"], main)
        for g in ([s["BN"]] if s["BN"] else []) + s["noisy"] + [s["no BN"]]:
            st, sf, v = stats[g.key], seed_frame(table, g, main), bn_variant(g)
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
    columns are; the headers are templates/columns.md.j2's, the yes / no cells templates/cells.md.j2's)."""
    rows = [[r["label"], "" if r["noise_scale"] is None else f"{r['noise_scale']:g}", r["seeds"]]
            + [format_stat(r[k]) for k in SHIFT_KEYS] + [cell("exceeds", r["exceeds_no_bn"])]
            + [format_acc(r["final_test_accuracy"]) + (words("at_chance", r["at_chance"]) if r["at_chance"] else ""),
               format_acc(r["final_train_accuracy"])]
            + [r["steps_to_target"][target_key(t)]["text"] for t in section["targets"]] for r in section["rows"]]
    return "\n".join(md_table(labels("noise_strength", SHIFT_KEYS, section["targets"]), rows))
