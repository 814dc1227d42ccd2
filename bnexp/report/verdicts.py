"""The verdict sentences of Sec. 4.1 (BN vs no BN: steps to each target, test accuracy, diverged and failed
runs; Sec. 4.2's are the frontier's, :mod:`bnexp.report.frontier`); a faster/slower or higher/lower
verdict needs the evidence of :mod:`bnexp.report.evidence`, else it ends in "insufficient evidence"."""

from __future__ import annotations

from bnexp.report.evidence import chance_gaps, insufficient, seed_gaps
from bnexp.report.fmt import format_acc, format_target, steps_pm
from bnexp.report.groups import ConfigGroup, match_no_bn, pair_label
from bnexp.report.stats import target_key
from bnexp.rundir import COMPLETE_STATUSES


def _side_phrase(side: str, t: float, st: dict, max_steps: int | None, diverged: int) -> str:
    """One side of a comparison: "BN reached 95% in 1,200 ± 163 steps", "no BN did not reach ..."."""
    within = f" within {max_steps:,} steps" if max_steps else ""
    div = f" ({diverged} diverged)" if diverged else ""
    if st["n"] == 0:
        return f"{side} has no completed runs"
    if st["reached"] == st["n"]:
        return f"{side} reached {format_target(t)} in {steps_pm(st, ' steps')}"
    if st["reached"] == 0:
        return f"{side} did not reach {format_target(t)}{within} in {st['n']}/{st['n']} runs{div}"
    return (f"{side} reached {format_target(t)} in {st['reached']}/{st['n']} runs "
            f"({steps_pm(st, ' steps')} over those) and did not{within} in "
            f"{st['not_reached']}/{st['n']}{div}")


def _fewer(v: float) -> str:
    return f"{v:.1f}x fewer steps" if v >= 1 else f"{1 / v:.1f}x more steps"


def target_verdict(ctx: str, t: float, bn: dict, nb: dict, sp: dict, nb_max: int | None,
                   nb_div: int, bn_max: int | None, bn_div: int, gaps: list[str] | None = None) -> str:
    """The verdict line of one BN/no-BN pair at one target, e.g.
    "At lr=0.5: BN reached 95% in 3,100 ± 200 steps, no BN in 48,000 ± 1,500: 15.5x fewer steps.";
    with evidence ``gaps`` the numbers end in ": insufficient evidence (reasons)." instead."""
    pre = f"{ctx}: " if ctx else ""
    if sp["value"] is not None and not sp["lower_bound"]:
        line = f"{pre}BN reached {format_target(t)} in {steps_pm(bn, ' steps')}, no BN in {steps_pm(nb)}"
        return line + (insufficient(gaps) if gaps else f": {_fewer(sp['value'])}.")
    line = f"{pre}{_side_phrase('BN', t, bn, bn_max, bn_div)}; {_side_phrase('no BN', t, nb, nb_max, nb_div)}"
    if gaps:
        return line + insufficient(gaps)
    if sp["lower_bound"]:
        line += f": at least {sp['value']:.1f}x fewer steps (lower bound: max_steps / BN steps)"
    return line + "."


def accuracy_verdict(ctx: str, bn: dict, nb: dict, gaps: list[str] | None = None) -> str | None:
    """Final (and max) test accuracy of BN vs no BN, e.g.
    "At lr=0.5: final test accuracy BN 98.10 ± 0.05%, no BN 96.00 ± 0.10%: BN higher by 2.10 points.";
    with evidence ``gaps`` the comparison is replaced by "insufficient evidence (reasons)"."""
    fb, fn = bn["final_test_accuracy"], nb["final_test_accuracy"]
    if fb["mean"] is None or fn["mean"] is None:
        return None
    pre = f"{ctx}: " if ctx else ""
    d = 100 * (fb["mean"] - fn["mean"])
    cmp = "equal" if abs(d) < 0.005 else (f"BN higher by {d:.2f} points" if d > 0 else
                                          f"BN lower by {-d:.2f} points")
    line = f"{pre}final test accuracy BN {format_acc(fb, '%')}, no BN {format_acc(fn, '%')}"
    line += f": insufficient evidence ({'; '.join(gaps)})" if gaps else f": {cmp}"
    mb, mn = bn["max_test_accuracy"], nb["max_test_accuracy"]
    if mb["mean"] is not None and mn["mean"] is not None:
        line += f" (max {format_acc(mb, '%')} vs {format_acc(mn, '%')})"
    div = [f"{side} {s['diverged']}/{s['completed']} diverged" for side, s in (("BN", bn), ("no BN", nb))
           if s["diverged"]]
    if div:
        line += f" [{', '.join(div)}: their final value is the last evaluation before divergence]"
    return line + "."


def pair_gaps(bn: dict, nb: dict) -> list[str]:
    """Why a BN/no-BN comparison cannot give a verdict ([] when it can): fewer than 2 completed seeds
    on a side, or a side whose networks stay at chance (:mod:`bnexp.report.evidence`)."""
    sides = [("BN", bn), ("no BN", nb)]
    seeds = {name: [r["seed"] for r in st["seeds"] if r["status"] in COMPLETE_STATUSES and r["seed"] is not None]
             for name, st in sides}
    return (seed_gaps([(name, st["completed"], seeds[name]) for name, st in sides])
            + chance_gaps([(name, st["final_test_accuracy"]["mean"]) for name, st in sides]))


def _context(bn_g: ConfigGroup, nb_g: ConfigGroup, groups: list[ConfigGroup]) -> str:
    """Prefix of a pair's verdicts: "At lr=0.5", "baseline vs bn_baseline", "noisy BN vs no BN at
    lr=0.5" (the side called "BN" in the verdict is then noisy BN), or ""."""
    if bn_g.experiment or nb_g.experiment:
        return f"{bn_g.label} vs {nb_g.label}"
    pl = pair_label(bn_g, groups)
    if bn_g.noisy:
        return "noisy BN vs no BN" + (f" at {pl}" if pl else "")
    return f"At {pl}" if pl else ""


def verdict_lines(groups: list[ConfigGroup], stats: dict[str, dict], targets: list[float],
                  advice: str | None = None) -> list[str]:
    """Verdict sentences computed from the statistics: ``advice`` first (the seeds to add,
    :func:`bnexp.report.evidence.seed_advice`), then per BN/no-BN pair and target (Sec. 4.1),
    final accuracy, diverged and failed runs."""
    lines: list[str] = [advice] if advice else []
    for g in groups:
        nb_g = match_no_bn(g, groups)
        s = stats[g.key]
        if nb_g is None:
            if g.bn and not g.experiment:
                lines.append(f"{g.label}: no matching no-BN configuration in this sweep; no speedup computed.")
            continue
        n = stats[nb_g.key]
        ctx = _context(g, nb_g, groups)
        gaps = pair_gaps(s, n)
        for t in targets:
            tk = target_key(t)
            sp = s["speedup"][tk]
            lines.append(target_verdict(ctx, t, s["steps_to_target"][tk], n["steps_to_target"][tk], sp,
                                        nb_g.max_steps, n["diverged"], g.max_steps, s["diverged"], gaps))
        acc = accuracy_verdict(ctx, s, n, gaps)
        if acc:
            lines.append(acc)
    for g in groups:
        s = stats[g.key]
        if s["diverged"]:
            at = [r.summary.get("diverged_step") for r in g.runs if r.status == "diverged"]
            at_txt = ", ".join(f"{a:,}" for a in at if isinstance(a, int))
            lines.append(f"{g.label}: {s['diverged']}/{s['completed']} completed runs diverged"
                         + (f" (at steps {at_txt})." if at_txt else "."))
        if s["failed"]:
            errs = sorted({r.error or "unknown error" for r in g.runs if r.status == "failed"})
            lines.append(f"{g.label}: {s['failed']}/{s['runs']} runs failed ({'; '.join(errs)}).")
        if s["incomplete"]:
            lines.append(f"{g.label}: {s['incomplete']}/{s['runs']} runs are incomplete (running or "
                         "interrupted) and are left out.")
    return lines

