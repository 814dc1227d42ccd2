"""The claims of the five studies (docs/studies/), fixed in study_claims.yaml (its header states the thresholds)
and docs/studies/NAME.md before any run, and how each study's sweep is turned into per-seed values, claim
rows, a table and findings. Every claim is a :class:`bnexp.report.claims.Claim` (:data:`STUDY_CLAIMS`;
:data:`PLACEMENT_CLAIMS` names the placement study's by model and g); seeds are paired: seed s of one
configuration with seed s of the other.

Each ``analyze_NAME(sweep)`` returns {"title", "target", "claims", "table", "columns", "findings", "cells"}
for :func:`study_section` (the title and columns: study_sections.yaml, :func:`section_head`), its findings as
numbers ({"kind", ...}); their words are templates/study_findings.md.j2's (:func:`finding_text`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import yaml

from bnexp.analysis.tuning import EVERY_SEED, HELD_OUT
from bnexp.report.best_rate import edge_of
from bnexp.analysis.interval import seed_interval, seed_values
from bnexp.report.claims import Claim, words
from bnexp.report.fmt import edge_mark, macro, short_text
from bnexp.analysis.runs import INFERENCE_KINDS
from bnexp.analysis.rules import NORMALIZERS
from bnexp.report.study_section import (CHANCE_POINTS, MARKER, config_rows, diff_claim, differences, per_seed,
                                        ratio_claim, ratios, read_marker, single_claim)
from bnexp.analysis.study_runs import (CNN_TARGET, FAMILY_KEYS, OBJECTIVES, TARGET, Selection, cells, family_label,
                                       select, study_cells)

log = logging.getLogger("bnexp")
# {study: {NAME: Claim}} of study_claims.yaml ("chance": 100 * CHANCE)
STUDY_CLAIMS = {study: {k: Claim(n, q, d, CHANCE_POINTS if t == "chance" else float(t)) for k, (n, q, d, t) in c.items()}
                for study, c in yaml.safe_load(Path(__file__).with_name("study_claims.yaml").read_text()).items()}
C = {k: c for claims in STUDY_CLAIMS.values() for k, c in claims.items()}  # "BS_ADV_60": its Claim, ...
PLACEMENT_CASES = (("mlp", "sigmoid"), ("mlp", "relu"), ("cnn", "sigmoid"), ("cnn", "relu"))
PLACEMENT_CLAIMS = {(model, act): C[f"PL_{model}_{act}".upper()]  # BN before vs after g, each at its best rate
                    for model, act in PLACEMENT_CASES}
# {study: {"title", "columns", "rests_on"}} of study_sections.yaml: each study's section beside its claims
SECTIONS = yaml.safe_load(Path(__file__).with_name("study_sections.yaml").read_text(encoding="utf-8"))


def section_head(study: str, held_out: bool) -> dict:
    """{"title", "columns": [(report.json key, column header)]} of ``study``'s section (study_sections.yaml); the
    columns marked "held_out" only when ``held_out`` (the evaluation runs at each chosen rate)."""
    s = SECTIONS[study]
    return {"title": s["title"], "columns": [(c[0], c[1]) for c in s["columns"] if c[2:] != ["held_out"] or held_out]}


# --- batch_size --------------------------------------------------------------------------------------------

def analyze_batch_size(sweep) -> dict:
    """The batch_size study: examples to 95% and final accuracy per normalizer and m, :data:`STUDY_CLAIMS`."""
    c = cells(sweep, TARGET)
    sel = Selection(c, FAMILY_KEYS["batch_size"], OBJECTIVES["batch_size"])
    examples = int((c["budget"] * c["m"]).max()) if not c.empty else 0  # the budget: 240,000 (designs.studies)

    def at(norm, m, objective="steps", ghost=None):  # the family's scored runs at its rate (study_tuning)
        return sel.rows((norm, ghost, m), objective)[0]

    acc = {(n, m): at(n, m, "accuracy") for n in ("batch", "layer") for m in (2, 16, 60)}
    fin = {k: per_seed(runs, "final") for k, runs in acc.items()}
    ghost = at("ghost", 60, "accuracy", 2)
    claims = [
        ratio_claim(C["BS_ADV_60"], at("none", 60), at("batch", 60), "examples"),
        ratio_claim(C["BS_ADV_4"], at("none", 4), at("batch", 4), "examples"),
        diff_claim(C["BS_LN_2"], fin[("layer", 2)], fin[("batch", 2)], (acc[("layer", 2)], acc[("batch", 2)])),
        diff_claim(C["BS_DROP"], *(differences(fin[(n, 16)], fin[(n, 2)]) for n in ("batch", "layer")),
                   [acc[(n, m)] for n in ("batch", "layer") for m in (16, 2)]),
        diff_claim(C["BS_GHOST"], fin[("batch", 60)], per_seed(ghost, "final"), (acc[("batch", 60)], ghost)),
    ]
    findings = []
    ms = sorted(int(m) for m in c["m"].unique())
    for other, label in ((k, NORMALIZERS[k]) for k in ("none", "layer")):
        ivs = {m: seed_values(ratios(at(other, m), at("batch", m), "examples"), "log")[2] for m in ms}
        ivs = {m: iv for m, iv in ivs.items() if iv is not None}
        holds = [str(m) for m, iv in ivs.items() if iv.side_of(1.0) == "above"]
        if ivs:
            findings.append({"kind": "examples_ratio", "label": label, "examples": examples,
                             "intervals": list(ivs.items()), "holds": holds})
    lr = ["lr"] if sel.held_out else []  # held out: the evaluation runs at each chosen rate
    table = config_rows(sel.scored, ["norm", "ghost", "m"] + lr, TARGET, unit="examples")
    head = section_head("batch_size", sel.held_out)
    return {"title": head["title"], "target": TARGET,
            "budget_examples": examples, "claims": claims, "table": table, "findings": findings,
            "cells": c, **sel.record(), "columns": head["columns"]}


# --- inference_statistics ----------------------------------------------------------------------------------

def _gap(frame: pd.DataFrame, a: str, b: str, absolute: bool = False) -> dict:
    """{seed: 100 * (acc_a - acc_b)} (points; |.| with ``absolute``)."""
    out = differences(per_seed(frame, f"acc_{a}"), per_seed(frame, f"acc_{b}"), 100)
    return {s: (abs(v) if absolute and v is not None else v) for s, v in out.items()}


def analyze_inference_statistics(sweep) -> dict:
    """The inference_statistics study: batch-statistics, moving-average and Alg. 2 test accuracy per m and
    momentum (``inference_stats.json`` of each run, :mod:`bnexp.train.inference_eval`, as the per-run table's
    ``inference.<kind>`` columns: :func:`bnexp.analysis.runs.read_inference`), :data:`STUDY_CLAIMS`."""
    c = cells(sweep, TARGET, {f"inference.{k}": f"acc_{k}" for k in INFERENCE_KINDS})
    c = c[c["norm"] == "batch"]
    sel = Selection(c, FAMILY_KEYS["inference_statistics"], OBJECTIVES["inference_statistics"])
    scored, missing = sel.scored, None
    if not scored.empty and scored["acc_batch"].isna().all():
        missing = words("no_inference_stats")

    def at(m, mom):  # m's scored runs at its rate (held out: chosen at momentum 0.1, both momenta trained)
        return select(sel.rows((m,), "accuracy")[0], momentum=mom)

    m60, m2, m2_slow = at(60, 0.1), at(2, 0.1), at(2, 0.01)
    ema60, ema2 = _gap(m60, "ema", "batch", True), _gap(m2, "ema", "batch", True)
    pop2 = _gap(m2, "population", "ema")
    claims = [single_claim(C["IS_AGREE_60"], ema60, (m60,), missing),
              single_claim(C["IS_GAP_GROWS"], differences(ema2, ema60), (m2, m60), missing),
              single_claim(C["IS_POP_60"], _gap(m60, "population", "ema", True), (m60,), missing),
              single_claim(C["IS_POP_2"], pop2, (m2,), missing),
              single_claim(C["IS_SLOW_EMA"], differences(pop2, _gap(m2_slow, "population", "ema")), (m2, m2_slow),
                           missing)]
    lr = ["lr"] if sel.held_out else []
    table = config_rows(scored, ["m", "momentum"] + lr, TARGET)
    for row in table:
        g = select(scored, m=row["m"], momentum=float(row["momentum"]), **{k: float(row[k]) for k in lr})
        for k in INFERENCE_KINDS:
            row[f"acc_{k}"] = seed_interval([100 * v for v in per_seed(g, f"acc_{k}").values() if v is not None])
        row["gap"] = seed_interval(list(_gap(g, "ema", "batch").values()))
        row["pop_minus_ema"] = seed_interval(list(_gap(g, "population", "ema").values()))
    findings = []
    for mom in sorted(scored["momentum"].dropna().unique(), reverse=True):
        findings.append({"kind": "inference_gap", "momentum": float(mom),
                         "intervals": [(int(m), seed_values(_gap(at(int(m), float(mom)), "ema", "batch"))[2])
                                       for m in sorted(scored["m"].unique())]})
    head = section_head("inference_statistics", sel.held_out)
    return {"title": head["title"],
            "target": TARGET, "claims": claims, "table": table, "findings": findings, "cells": c,
            **sel.record(), "columns": head["columns"]}


# --- placement, normalizer, depth: each configuration at its best rate ------------------------------------

def _families(sel: Selection, combos, objective: str = "steps") -> dict:
    """{combo: (its scored rows at its rate, the rate, how it was picked or why there is none, the sorted
    rates of its grid)} for each combo of ``sel.keys`` values (:meth:`Selection.rows`)."""
    def grid(combo):
        return sorted({float(v) for v in pd.to_numeric(select(sel.c, **dict(zip(sel.keys, combo)))["lr"],
                                                       errors="coerce").dropna()})

    return {combo: (*sel.rows(combo, objective), grid(combo)) for combo in combos}


def _mark_best(table: list[dict], best: dict, keys: list[str]) -> list[dict]:
    """``table`` with each row's "best": "yes" (and the rule, unless :data:`EVERY_SEED`) at its family's rate."""
    for row in table:
        fam = best.get(tuple(row[k] for k in keys))
        row["best"] = ("yes" + (f" ({fam[2]})" if fam[2] != EVERY_SEED else "")
                       if fam and fam[1] is not None and abs(float(row["lr"]) - fam[1]) < 1e-12 else "")
    return table


def _best_rate_findings(best: dict, study: str) -> list[dict]:
    """One finding per family of ``best`` (:func:`_families`) of ``study``: its rate, how it was picked and the
    grid's edge it sits at (a better rate may lie outside the grid, docs/studies/README.md); the words are
    templates/study_findings.md.j2's ``best_rate``."""
    return [{"kind": "best_rate", "study": study, "family": combo, "lr": lr, "rule": rule,
             "held_out": rule == HELD_OUT, "edge": None if lr is None else edge_of(lr, grid)}
            for combo, (_, lr, rule, grid) in best.items()]


def analyze_placement(sweep) -> dict:
    """The placement study: BN before vs after the nonlinearity, MLP and CNN, sigmoid and ReLU, each position
    at its best rate; :data:`PLACEMENT_CLAIMS`. The MLP's target is 95%, the CNN's 97%."""
    c = study_cells("placement", sweep)
    sel = Selection(c, FAMILY_KEYS["placement"], OBJECTIVES["placement"])
    best = _families(sel, [(m, a, p) for m, a in PLACEMENT_CASES for p in ("before", "after")])
    claims = [ratio_claim(PLACEMENT_CLAIMS[(m, a)], best[(m, a, "after")][0], best[(m, a, "before")][0])
              for m, a in PLACEMENT_CASES]
    table = [row for model, target in (("mlp", TARGET), ("cnn", CNN_TARGET))
             for row in config_rows(select(sel.scored, model=model), ["model", "act", "position", "lr"], target)]
    head = section_head("placement", sel.held_out)
    return {"title": head["title"], "target": TARGET,
            "claims": claims, "table": _mark_best(table, best, ["model", "act", "position"]), "cells": c,
            **sel.record(),
            "findings": _best_rate_findings(best, "placement"), "columns": head["columns"]}


def analyze_normalizer(sweep) -> dict:
    """The normalizer study: BN, LayerNorm, GroupNorm and none, each at its best rate; :data:`STUDY_CLAIMS`."""
    c = cells(sweep, TARGET)
    sel = Selection(c, FAMILY_KEYS["normalizer"], OBJECTIVES["normalizer"])
    best = _families(sel, [("batch",), ("layer",), ("group",), ("none",)])
    b = {k[0]: v[0] for k, v in best.items()}
    claims = [ratio_claim(C["NM_BN"], b["none"], b["batch"]), ratio_claim(C["NM_LN"], b["none"], b["layer"]),
              ratio_claim(C["NM_BN_LN"], b["layer"], b["batch"]), ratio_claim(C["NM_BN_GN"], b["group"], b["batch"])]
    findings = _best_rate_findings(best, "normalizer")
    means = {k: b[k]["steps"].astype(float).mean() if len(b[k]) and b[k]["steps"].notna().all() else None
             for k in b}
    if all(means[k] is not None for k in ("none", "batch", "layer")) and means["none"] > means["batch"]:
        share = (means["none"] - means["layer"]) / (means["none"] - means["batch"])
        findings.append({"kind": "layernorm_share", "share": share})
    head = section_head("normalizer", sel.held_out)
    return {"title": head["title"], "target": TARGET, "claims": claims,
            "table": _mark_best(config_rows(sel.scored, ["norm", "lr"], TARGET), best, ["norm"]),
            "findings": findings, "cells": c, **sel.record(), "columns": head["columns"]}


def analyze_depth(sweep) -> dict:
    """The depth study: 3, 6, 12 hidden sigmoid layers, BN and no BN each at its rate (held out: chosen on the
    tuning seeds, by final accuracy for the accuracy claims and by steps to 95% for the steps claims;
    docs/studies/PLAN.md); :data:`STUDY_CLAIMS`. A no BN / BN ratio whose no-BN runs never reached 95% is a
    lower bound set by the budget, and a finding says so."""
    c = cells(sweep, TARGET)
    sel = Selection(c, FAMILY_KEYS["depth"], OBJECTIVES["depth"])
    depths = sorted(int(d) for d in c["depth"].dropna().unique())
    combos = [(d, n) for d in sorted(set(depths) | {3, 6, 12}) for n in ("batch", "none")]
    best, by_acc = _families(sel, combos), _families(sel, combos, "accuracy")

    def finals(d, n):  # final test accuracy (%) per seed
        return {s: None if v is None else 100 * v for s, v in per_seed(by_acc[(d, n)][0], "final").items()}

    claims = [single_claim(C["DP_BN_12"], finals(12, "batch"), (by_acc[(12, "batch")][0],)),
              single_claim(C["DP_NOBN_12"], finals(12, "none"), (by_acc[(12, "none")][0],)),
              ratio_claim(C["DP_ADV_6"], best[(6, "none")][0], best[(6, "batch")][0]),
              ratio_claim(C["DP_BN_SLOWDOWN"], best[(12, "batch")][0], best[(3, "batch")][0])]
    table = _mark_best(config_rows(sel.scored, ["depth", "norm", "lr"], TARGET), best, ["depth", "norm"])
    findings = _best_rate_findings({k: v for k, v in best.items() if not v[0].empty or k[0] in depths}, "depth")
    plain = best[(6, "none")][0]
    if len(plain) and plain["steps"].isna().all():
        budget = int(pd.to_numeric(plain["budget"]).max())
        findings.append({"kind": "depth_bound", "budget": budget})
    head = section_head("depth", sel.held_out)
    return {"title": head["title"], "target": TARGET,
            "claims": claims, "table": table, "cells": c, "findings": findings,
            **sel.record(), "columns": head["columns"]}


# the configurations (family label, objective) whose rate choices each claim rests on (study_sections.yaml's
# rests_on, each family named by bnexp.analysis.study_runs.family_label): their grid-edge marks
# (bnexp.analysis.grid_edges.mark_of) mark the claim (docs/studies/PLAN.md, amendment item 2)
RESTS_ON = {key: [(family_label(FAMILY_KEYS[study], tuple(family)), objective) for family, objective in rests]
            for study, sec in SECTIONS.items() for key, rests in sec["rests_on"].items()}


def attach_choices(sec: dict, sweep_dir: Path) -> None:
    """Give each tuning entry of a study section its grid-edge "mark" and each claim row the "choices" it rests on
    (:data:`RESTS_ON`), in place; the marks use the designs' record in ``sweep_dir``
    (:func:`bnexp.analysis.grid_edges.read_record`)."""
    from bnexp.analysis.grid_edges import mark_of, read_record

    record = read_record(sweep_dir)
    tuning = {(t["family"], t["objective"]): t for t in sec.get("tuning") or []}
    for t in tuning.values():
        t["mark"] = edge_mark(mark_of(t["choice"], record)) if t.get("choice") else None
    key_of = {c.name: k for k, c in C.items()}
    for row in sec.get("claims") or []:
        rests = RESTS_ON.get(key_of.get(row["name"]), [])
        row["choices"] = [tuning[r]["choice"] for r in rests if r in tuning and tuning[r].get("choice")]


def finding_text(x: dict) -> str:
    """The sentence of one finding ``x`` ({"kind", its numbers}, from an ``analyze_NAME``): the macro ``x["kind"]``
    of templates/study_findings.md.j2."""
    return macro(x["kind"], x, SimpleNamespace(short_text=short_text, NORMALIZERS=NORMALIZERS),
                 template="study_findings.md.j2")


ANALYSES = {"batch_size": analyze_batch_size, "inference_statistics": analyze_inference_statistics,
            "placement": analyze_placement, "normalizer": analyze_normalizer, "depth": analyze_depth}
STUDY_FIGURES = {name: f"study_{name}.png" for name in ANALYSES}  # the figure of each study's report


def study_section(sweep_dir: Path, sweep) -> dict | None:
    """The ``study`` entry of report.json for a sweep with a ``study.json`` marker (else None): {"name",
    "title", "question" (study.json's, written by scripts/study.sh from :mod:`bnexp.designs.studies`), "page",
    "target", "claims" (rows of :func:`bnexp.report.claims.evaluate`),
    "table" (:func:`bnexp.report.study_section.config_rows` records), "columns", "findings" (sentences), "figure",
    "runs", "run_time_s" (the runs' summed wall time), "wall_time_s" (the script's, from study.json; None when
    not recorded), "jobs" (its parallel jobs) and "calls" (how many calls of the script trained), from
    study.json (None when absent)}."""
    marker = read_marker(sweep_dir)
    if marker is None:
        return None
    name = marker["study"]
    if name not in ANALYSES:
        log.warning("%s names the unknown study %r; no study section", Path(sweep_dir) / MARKER, name)
        return None
    sec = ANALYSES[name](sweep)
    sec["findings"] = [finding_text(x) for x in sec["findings"]]
    attach_choices(sec, sweep_dir)
    frame = sec.pop("cells")
    times = pd.to_numeric(frame["wall_time_s"], errors="coerce").dropna()
    sec = {"title": sec.pop("title"), "question": marker.get("question") or "", **sec}
    sec.update(name=name, page=f"docs/studies/{name}.md", figure=STUDY_FIGURES[name], runs=int(len(frame)),
               run_time_s=float(times.sum()) if len(times) else None, wall_time_s=marker.get("wall_time_s"),
               jobs=marker.get("jobs"), calls=marker.get("calls"))
    return sec
