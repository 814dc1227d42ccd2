"""The section "Does BN reduce internal covariate shift?" (:data:`ICS_TITLE`): BN vs no BN and noisy BN
vs BN verdicts in the BN paper's and Santurkar et al. 2018's views, and what the sweep supports.

The verdicts use the measures that cannot manufacture their conclusion (docs/ics/measurements.md):
the per-unit Wasserstein-1 shift, the relative gradient change ||G - G'|| / ||G|| and the
scale-invariant landscape probe; each needs the evidence of :mod:`bnexp.report.evidence`, and a
comparison without it says "insufficient evidence" and is not counted in "what this sweep supports"."""

from __future__ import annotations

from bnexp.report.evidence import chance_gaps, insufficient, record_gaps, seed_gaps
from bnexp.report.fmt import format_acc, format_g, format_ratio, format_stat, format_target, steps_phrase, steps_pm
from bnexp.report.groups import ConfigGroup, bn_variant, pair_key, pair_label
from bnexp.report.ics_stats import LANDSCAPE_KEYS, REL_LANDSCAPE_KEYS
from bnexp.report.stats import compute_speedup, target_key

ICS_TITLE = "Does BN reduce internal covariate shift?"
# Figures of the ICS section, each written only when some run holds its data.
ICS_FILES = ("ics_distribution.png", "ics_gradient.png", "ics_landscape.png")
# Verdict thresholds of the ICS section. A measure is "lower" with BN only when it is below
# (1 - ICS_MARGIN) x the no-BN value; cos(G, G') differs only when apart by more than
# COS_MARGIN; noisy BN is "nearly as fast" as BN when it needs at most NEARLY_AS_FAST x BN's steps.
ICS_MARGIN = 0.1
COS_MARGIN = 0.02
NEARLY_AS_FAST = 1.5


def _lower(x: float | None, y: float | None) -> bool | None:
    """x below (1 - ICS_MARGIN) * y; None when either is missing."""
    if x is None or y is None:
        return None
    return x < (1.0 - ICS_MARGIN) * y


def _view_means(bn: dict | None, nb: dict | None, view: str,
                key: str) -> tuple[dict | None, dict | None, float | None, float | None]:
    """(BN's ``view``, no BN's ``view``, BN's mean of ``key``, no BN's mean of ``key``) of two
    :func:`ics_summary` results; None for what is missing."""
    bv, nv = (bn or {}).get(view), (nb or {}).get(view)
    return bv, nv, bv[key]["mean"] if bv else None, nv[key]["mean"] if nv else None


def view_gaps(view: str, key: str, sides: list[tuple[str, dict | None, dict]]) -> list[str]:
    """Why a comparison in ``view`` ("distribution", "gradient", "landscape") on the statistic ``key``
    cannot give a verdict ([] when it can), for ``sides`` [(name, :func:`ics_summary`, group stats)]: the
    measurement missing, too few seeds with it or records in a seed, or a network at chance."""
    what = {"distribution": "monitor records", "gradient": "gradient-ICS probes",
            "landscape": "landscape probes"}[view]
    gaps, seeds, records = [], [], []
    for name, ics, st in sides:
        v = (ics or {}).get(view)
        if not v or v.get(key, {}).get("mean") is None:
            gaps.append(f"{name} has no {key} measurement")
            continue
        seeds.append((name, v[key]["n"]))
        records.append((name, v.get("records") or v.get("probes")))
    gaps += seed_gaps(seeds) + record_gaps(records, what)
    return gaps + chance_gaps([(name, st["final_test_accuracy"]["mean"]) for name, _, st in sides])


def ics_comparison_sets(groups: list[ConfigGroup]) -> list[dict[str, ConfigGroup]]:
    """Matching configurations (same config except bn.* and experiment, :func:`pair_key`) by variant:
    [{"BN": g, "noisy BN": g, "no BN": g}] (the first of each variant), those with two variants or more."""
    sets: dict[str, dict[str, ConfigGroup]] = {}
    for g in groups:
        v = bn_variant(g)
        if v is not None:
            sets.setdefault(pair_key(g), {}).setdefault(v, g)
    return [s for s in sets.values() if len(s) > 1]


def distribution_verdict(pre: str, bn: dict | None, nb: dict | None,
                         gaps: list[str] | None = None) -> tuple[str, dict | None]:
    """BN vs no BN in the BN paper's distribution view (the final per-unit W1 of the nonlinearity's input
    from its start, averaged over layers): (sentence, {"bn", "no_bn", "ratio", "reduced"}), reduced when
    BN's is below (1 - ICS_MARGIN) x no BN's; (a "not measured" or "insufficient evidence" sentence, None)."""
    bd, nd, x, y = _view_means(bn, nb, "distribution", "final_w1_first")
    if x is None or y is None:
        return f"{pre}distribution view: not measured (shift_metrics missing for BN or no BN).", None
    ratio = x / y if y > 0 else None
    wu = (bd.get("final_bn_input_w1_first") or {}).get("mean")
    line = (f"{pre}distribution view: at the end, the inputs to BN's nonlinearities moved a per-unit W1 of "
            f"{format_stat(bd['final_w1_first'])} from their start"
            + (f" (BN's own input Wu: {format_stat(bd['final_bn_input_w1_first'])})" if wu is not None else "")
            + f", no BN's {format_stat(nd['final_w1_first'])}")
    if gaps:
        return line + insufficient(gaps), None
    reduced = bool(_lower(x, y))
    line += (f": BN {'reduces' if reduced else 'does not reduce'} this measure of covariate shift "
             f"(ratio {format_ratio(ratio)}; step-to-step W1 BN "
             f"{format_g(bd['w1_prev_mean']['mean'])} vs no BN {format_g(nd['w1_prev_mean']['mean'])}).")
    return line, {"bn": x, "no_bn": y, "ratio": ratio, "reduced": reduced}


def gradient_verdict(pre: str, bn: dict | None, nb: dict | None,
                     gaps: list[str] | None = None) -> tuple[str, dict | None]:
    """BN vs no BN in Santurkar et al.'s gradient view (Def. 2.1, layers 2..K) on ||G - G'|| / ||G||:
    "less" when BN's is below (1 - ICS_MARGIN) x no BN's and its cos(G, G') not lower by more than
    COS_MARGIN; "as much or more" when not lower and cos not higher by more than COS_MARGIN; else "mixed".

    Returns:
        (sentence, {"bn_l2_rel", "no_bn_l2_rel", "bn_cos", "no_bn_cos", "result"}), or (a "not measured"
        or "insufficient evidence" sentence, None).
    """
    bg, ng, x, y = _view_means(bn, nb, "gradient", "l2_rel")
    if x is None or y is None:
        return (f"{pre}gradient view (Santurkar Def. 2.1): not measured (no grad_ics probes with the relative "
                "||G - G'|| / ||G|| of layers 2..K for BN or no BN)."), None
    a, b = bg["cos"]["mean"], ng["cos"]["mean"]
    line = (f"{pre}gradient view (Santurkar Def. 2.1): mean ||G - G'|| / ||G|| BN {format_stat(bg['l2_rel'])} vs "
            f"no BN {format_stat(ng['l2_rel'])} (absolute ||G - G'|| {format_g(bg['l2']['mean'])} vs "
            f"{format_g(ng['l2']['mean'])}), cos BN {format_g(a)} vs no BN {format_g(b)}")
    if gaps:
        return line + insufficient(gaps), None
    less = bool(_lower(x, y))
    cos_worse = a is not None and b is not None and a < b - COS_MARGIN
    cos_better = a is not None and b is not None and a > b + COS_MARGIN
    if less and not cos_worse:
        result = "less"
    elif not less and not cos_better:
        result = "as much or more"
    else:
        result = "mixed"
    tail = {"less": "BN shows less gradient-based ICS",
            "as much or more": "BN shows as much or more gradient-based ICS",
            "mixed": ("the two measures disagree: BN's relative ||G - G'|| is " + ("lower" if less else "not lower")
                      + " but its cos(G, G') is " + ("lower" if cos_worse else "higher")
                      + ", so BN's gradient-based ICS is neither clearly less nor more")}[result]
    return f"{line}: {tail}.", {"bn_l2_rel": x, "no_bn_l2_rel": y, "bn_cos": a, "no_bn_cos": b, "result": result}


def landscape_verdict(pre: str, bn: dict | None, nb: dict | None,
                      gaps: list[str] | None = None) -> tuple[str, dict | None]:
    """BN vs no BN landscape smoothness (Santurkar et al. 2018, Sec. 3.1), scale-invariant: smoother when
    BN's rel_beta_smoothness is below (1 - ICS_MARGIN) x no BN's. Returns (sentence, {"bn", "no_bn":
    {key: mean}, "smoother"}), or (a "not measured" or "insufficient evidence" sentence, None)."""
    bl, nl, x, y = _view_means(bn, nb, "landscape", "rel_beta_smoothness")
    if x is None or y is None:
        return (f"{pre}landscape: not measured (no scale-invariant landscape probes for BN or no BN; the raw "
                "beta-smoothness alone is confounded by BN's scale invariance)."), None
    line = (f"{pre}landscape (scale-invariant): beta-smoothness BN {format_stat(bl['rel_beta_smoothness'])} vs "
            f"no BN {format_stat(nl['rel_beta_smoothness'])}, loss variation BN "
            f"{format_g(bl['rel_loss_variation']['mean'])} vs no BN {format_g(nl['rel_loss_variation']['mean'])}, "
            f"gradient predictiveness BN {format_g(bl['rel_grad_predictiveness']['mean'])} vs no BN "
            f"{format_g(nl['rel_grad_predictiveness']['mean'])} (raw beta-smoothness "
            f"{format_g(bl['beta_smoothness']['mean'])} vs {format_g(nl['beta_smoothness']['mean'])})")
    if gaps:
        return line + insufficient(gaps), None
    smoother = bool(_lower(x, y))
    line += f": BN's loss landscape is {'smoother' if smoother else 'not smoother'} along the gradient."
    keys = LANDSCAPE_KEYS + REL_LANDSCAPE_KEYS
    return line, {"bn": {k: bl[k]["mean"] for k in keys}, "no_bn": {k: nl[k]["mean"] for k in keys},
                  "smoother": smoother}


def noisy_verdict(pre: str, noisy: dict, bn: dict | None, nb: dict | None, targets: list[float],
                  noisy_max_steps: int | None, gaps: list[str] | None = None) -> tuple[str, dict | None]:
    """Noisy BN vs BN (Santurkar et al. 2018, Sec. 2.1) from the group stats of noisy BN, BN and no BN:
    the steps to the highest target BN reached in all seeds and the slowdown factor = mean noisy-BN steps
    / mean BN steps (at least ``noisy_max_steps`` / BN steps when noisy BN never reached it). Returns
    (sentence, {"target", "factor", "lower_bound", "nearly_as_fast", "faster_than_no_bn"}); the result
    is None without BN or with evidence ``gaps`` (the sentence then ends in "insufficient evidence")."""
    if bn is None:
        return f"{pre}noisy BN: no matching BN configuration, so its slowdown is not measured.", None
    full = [t for t in targets if bn["steps_to_target"][target_key(t)]["n"] > 0
            and bn["steps_to_target"][target_key(t)]["reached"] == bn["steps_to_target"][target_key(t)]["n"]]
    if not full:
        return (f"{pre}noisy BN: BN reached none of the targets in all its seeds, so the slowdown of noisy BN is "
                "not measured."), {"target": None, "factor": None, "lower_bound": None, "nearly_as_fast": None,
                                   "faster_than_no_bn": None}
    t = max(full)
    tk = target_key(t)
    bs, ns = bn["steps_to_target"][tk], noisy["steps_to_target"][tk]
    sp = compute_speedup(bs, ns, noisy_max_steps)  # "speedup" of BN over noisy BN = slowdown of noisy BN
    nbs = nb["steps_to_target"][tk] if nb else None
    and_nb = f" (and no BN {steps_phrase(nbs)})" if nbs else ""
    bn_txt = f"BN {steps_pm(bs)}"
    factor, lb = sp["value"], sp["lower_bound"]
    if gaps:
        return (f"{pre}noisy BN: {steps_phrase(ns)} to reach {format_target(t)} vs {bn_txt}{and_nb}"
                + insufficient(gaps)), None
    if factor is not None and not lb:
        line = (f"{pre}noisy BN reached {format_target(t)} in {steps_pm(ns, ' steps')} vs "
                f"{bn_txt}{and_nb}: ")
        line += (f"injected distribution shift slows BN training by factor {factor:.2f}." if factor >= 1 else
                 f"injected distribution shift does not slow BN training (factor {factor:.2f}).")
    elif factor is not None:
        within = f" within {noisy_max_steps:,} steps" if noisy_max_steps else ""
        line = (f"{pre}noisy BN did not reach {format_target(t)}{within} in {ns['n']}/{ns['n']} runs vs "
                f"{bn_txt}{and_nb}: injected distribution shift slows BN training by a factor of at least "
                f"{factor:.1f}.")
    else:
        line = (f"{pre}noisy BN: {steps_phrase(ns)} to reach {format_target(t)} vs {bn_txt}{and_nb}: the slowdown "
                "factor is not measured (noisy BN did not reach it in all its seeds, or has no completed runs).")
    faster = None
    if ns["n"] and ns["reached"] == ns["n"] and nbs and nbs["n"]:
        faster = nbs["reached"] < nbs["n"] or nbs["mean"] > ns["mean"]
    return line, {"target": t, "factor": factor, "lower_bound": lb,
                  "nearly_as_fast": None if factor is None else (not lb and factor <= NEARLY_AS_FAST),
                  "faster_than_no_bn": faster}


def _ics_accuracy_line(pre: str, sides: list[tuple[str, dict]]) -> str | None:
    """"final test accuracy: BN 98.10 ± 0.05%, noisy BN ..., no BN ..."."""
    parts = [f"{name} {format_acc(s['final_test_accuracy'], '%')}" for name, s in sides
             if s["final_test_accuracy"]["mean"] is not None]
    return f"{pre}final test accuracy: {', '.join(parts)}." if len(parts) > 1 else None


def supports_paragraph(pre: str, comp: dict) -> str:
    """The "What this sweep supports" sentence of one set of matching configurations, built only
    from the booleans of :func:`ics_section`'s comparison (``comp``); absent measures are named
    "not measured", those without enough evidence (``comp["insufficient"]``) "insufficient
    evidence"; neither is counted."""
    favour_s: list[str] = []    # for Santurkar et al.'s account / against the ICS account
    favour_ics: list[str] = []  # for the BN paper's ICS account / against Santurkar et al.'s
    neutral: list[str] = []
    missing: list[str] = []
    d, g, ls, n = comp["distribution"], comp["gradient"], comp["landscape"], comp["noisy"]
    short = set(comp.get("insufficient", []))

    def absent(name: str) -> None:
        (insufficient_ if name in short else missing).append(name)

    insufficient_: list[str] = []
    if d is None:
        absent("the distribution view")
    elif d["reduced"]:
        neutral.append(f"BN reduces the distribution shift of its layers' inputs (per-unit W1 ratio "
                       f"{format_ratio(d['ratio'])}), which both accounts accept")
    else:
        favour_s.append(f"BN does not reduce the distribution shift of its layers' inputs (per-unit W1 ratio "
                        f"{format_ratio(d['ratio'])})")
    if "noisy BN" not in comp["labels"]:
        missing.append("noisy BN")
    elif n is None or n["factor"] is None:
        absent("the slowdown of noisy BN")
    elif n["nearly_as_fast"]:
        faster = ", and still faster than no BN" if n["faster_than_no_bn"] else ""
        favour_s.append(f"BN's gains coexist with injected covariate shift (noisy BN is nearly as fast as BN: "
                        f"factor {n['factor']:.2f}{faster})")
    else:
        bound = "at least " if n["lower_bound"] else ""
        favour_ics.append(f"injected covariate shift costs BN much of its speed (noisy BN needs {bound}"
                          f"{n['factor']:.1f}x BN's steps)")
    if g is None:
        absent("gradient-based ICS")
    elif g["result"] == "less":
        favour_ics.append("BN shows less gradient-based ICS")
    elif g["result"] == "as much or more":
        favour_s.append("BN shows as much or more gradient-based ICS")
    else:
        neutral.append("BN's gradient-based ICS is mixed (relative ||G - G'|| and cos disagree)")
    if ls is None:
        absent("the loss landscape")
    elif ls["smoother"]:
        favour_s.append("BN's loss landscape is smoother along the gradient")
    else:
        favour_ics.append("BN's loss landscape is not smoother along the gradient")
    observed = neutral + favour_s + favour_ics
    text = pre + ("; ".join(observed) + ". " if observed else "")
    if favour_s and not favour_ics:
        text += ("This supports Santurkar et al.'s account (BN helps by making the optimization landscape "
                 "smoother) over the reduction of internal covariate shift.")
    elif favour_ics and not favour_s:
        text += ("This supports the BN paper's account (BN helps by reducing internal covariate shift) over "
                 "Santurkar et al.'s.")
    elif favour_s:
        text += (f"The evidence is mixed: {len(favour_s)} observation(s) favour Santurkar et al.'s account, "
                 f"{len(favour_ics)} the reduction of internal covariate shift.")
    else:
        text += "Nothing measured here favours either account."
    if insufficient_:
        text += f" Insufficient evidence (not counted): {', '.join(insufficient_)}."
    if missing:
        text += f" Not measured: {', '.join(missing)}."
    return text


def ics_section(groups: list[ConfigGroup], stats: dict[str, dict], targets: list[float]) -> dict | None:
    """The section "Does BN reduce internal covariate shift?": the BN paper's view (distribution shift;
    noisy BN's steps) beside Santurkar et al. 2018's (gradient-based ICS, landscape smoothness) for every
    set of matching configurations, verdicts from the numbers and :data:`ICS_MARGIN`, :data:`COS_MARGIN`,
    :data:`NEARLY_AS_FAST`; ``stats``: the group statistics by key (with ``ics``).

    Returns:
        None when no configuration has ICS data; else {"title", "configurations": [labels of
        the configurations with data], "comparisons": [{"context", "labels": {variant: label},
        "distribution", "gradient", "landscape", "noisy", "verdicts", "supports"}],
        "verdicts": [all sentences], "supports": [paragraphs], "figures": [the ICS_FILES to draw]}.
    """
    with_data = [g for g in groups if stats[g.key].get("ics")]
    if not with_data:
        return None
    comparisons = []
    for s in ics_comparison_sets(groups):
        ctx = pair_label(next(iter(s.values())), groups)
        pre = f"At {ctx}: " if ctx else ""
        ics = {v: stats[g.key].get("ics") for v, g in s.items()}
        st = {v: stats[g.key] for v, g in s.items()}
        comp: dict = {"context": ctx, "labels": {v: g.variant_label for v, g in s.items()},
                      "distribution": None, "gradient": None, "landscape": None, "noisy": None, "verdicts": [],
                      "insufficient": []}
        if "BN" in s and "no BN" in s:
            sides = [("BN", ics["BN"], st["BN"]), ("no BN", ics["no BN"], st["no BN"])]
            for key, fn, view, stat, name in (
                    ("distribution", distribution_verdict, "distribution", "final_w1_first", "the distribution view"),
                    ("gradient", gradient_verdict, "gradient", "l2_rel", "gradient-based ICS"),
                    ("landscape", landscape_verdict, "landscape", "rel_beta_smoothness", "the loss landscape")):
                gaps = view_gaps(view, stat, sides)
                line, comp[key] = fn(pre, ics["BN"], ics["no BN"], gaps)
                if comp[key] is None and "insufficient evidence" in line:
                    comp["insufficient"].append(name)
                comp["verdicts"].append(line)
        if "noisy BN" in s:
            done = [(v, st[v]) for v in ("noisy BN", "BN") if v in st]
            gaps = (seed_gaps([(v, x["completed"]) for v, x in done])
                    + chance_gaps([(v, x["final_test_accuracy"]["mean"]) for v, x in done]))
            line, comp["noisy"] = noisy_verdict(pre, st["noisy BN"], st.get("BN"), st.get("no BN"), targets,
                                                s["noisy BN"].max_steps, gaps)
            if gaps and "BN" in st:
                comp["insufficient"].append("the slowdown of noisy BN")
            comp["verdicts"].append(line)
            nd = (ics["noisy BN"] or {}).get("distribution")
            bd = (ics.get("BN") or {}).get("distribution")
            if nd and bd and nd["final_w1_first"]["mean"] is not None and bd["final_w1_first"]["mean"] is not None:
                visible = _lower(bd["final_w1_first"]["mean"], nd["final_w1_first"]["mean"])
                gaps = view_gaps("distribution", "final_w1_first", [("noisy BN", ics["noisy BN"], st["noisy BN"]),
                                                                    ("BN", ics["BN"], st["BN"])])
                head = (f"{pre}noisy BN's layer inputs moved a per-unit W1 of {format_stat(nd['final_w1_first'])} "
                        f"from their start (BN {format_stat(bd['final_w1_first'])})")
                comp["verdicts"].append(head + (insufficient(gaps) if gaps else
                                                f": the injected shift is {'visible' if visible else 'not visible'} "
                                                "in the distribution view."))
        acc = _ics_accuracy_line(pre, [(v, st[v]) for v in ("BN", "noisy BN", "no BN") if v in st])
        if acc:
            comp["verdicts"].append(acc)
        comp["supports"] = supports_paragraph(pre, comp) if ("BN" in s and "no BN" in s) or "noisy BN" in s else ""
        comparisons.append(comp)
    figures = [name for name, view in zip(ICS_FILES, ("distribution", "gradient", "landscape"))
               if any(stats[g.key]["ics"][view] for g in with_data)]
    return {"title": ICS_TITLE, "configurations": [stats[g.key]["ics"]["label"] for g in with_data],
            "comparisons": comparisons, "verdicts": [v for c in comparisons for v in c["verdicts"]],
            "supports": [c["supports"] for c in comparisons if c["supports"]], "figures": figures}
