"""Plan version 2 of the CIFAR-10 frontier on the report side (docs/cifar/PLAN.md, "Plan version 2"): what the
results page says beside the frontier and the matched-accuracy speedups of :mod:`bnexp.analysis.frontier`.

* :func:`convergence`: whether the baseline's ladder **converged by the rule** (its last doubling gained
  < :data:`~bnexp.analysis.frontier.GAIN`, 0.5 points) or stopped **at the cap** (192k steps on the CPU ladder,
  :data:`~bnexp.analysis.frontier.BASELINE_CAP`) still gaining, in which case S(a*) is measured at the cap's
  accuracy.
* :func:`control_verdict`: the baseline_x5 control (the tuned baseline at 5x its rate), decided in the plan's
  order: at chance through the early budget (12k steps): *the 5x rate needs BN*; reaches a* within
  :data:`~bnexp.analysis.frontier.RATE_ALONE` x B_bn_x5(a*): *the rate alone explains BN-x5's speedup*; else
  (later, or never): *the rate alone is not BN-x5's speedup*, by the factor S_bn_x5(a*) / S_baseline_x5(a*).
* :func:`paper_claims`: Sec. 4.2.2's claims (Inception on ImageNet, paper Table 2 and Figure 3) beside this
  net's values, seed mean and per seed, with the pass rules of PLAN.md (the ``pass`` of ``matched_accuracy``).
* :func:`sweep_cost`: the runs' summed wall time and steps/s (from their summary.json), and the CPU if recorded.
* :func:`ladder_stops`: the rule that stopped each preset's ladder, read from the ladders.txt the orchestrator
  writes into the sweep folder (``bnexp.designs.ladder.ladder_stops``; the report does not import the designs).
* :func:`precision_record`: which rungs ran in which precision (each run's summary.json), the steps/s per run of
  each preset and precision, and the bf16 check's verdict (precision_check.json, written by the orchestrator:
  ``bnexp.designs.precision_check``; PLAN.md, "Precision, amended 2026-11-29").

:func:`plan_v2` gathers them into ``frontier_analysis`` of report.json; templates/frontier_v2.md.j2 renders them
(in report.md after the frontier, and the docs view ``cifar_plan_v2``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np

import pandas as pd

from bnexp.analysis.frontier import (BASELINE, BASELINE_CAP, EARLY, GAIN, ORDER, PASS_WORDS, RATE_ALONE, TOL,
                                     budget_to_reach, does_not_train, last_gain, mean_frontier, speedup_pass, trains)
from bnexp.report.fmt import cell, macro, words
from bnexp.report.frontier_text import headline_bound, pct, seed_bounds, speedup_text
from bnexp.analysis.rules import CHANCE

CONTROL, HEADLINE = "baseline_x5", "bn_x5"
LADDERS_FILE = "ladders.txt"  # written into the sweep folder by scripts/reproduce_cifar.sh before the report
LADDERS_HEAD = "ladders ("  # the line above the stop rules in ladders.txt
PRECISION_CHECK_FILE = "precision_check.json"  # the bf16 check's verdict, written into the sweep folder
def _k(b: float) -> str:
    """A budget in steps as text: 192000 -> "192k", 1500 -> "1.5k", 375 -> "375"."""
    return f"{b / 1000:g}k" if b >= 1000 else f"{b:g}"


def convergence(budgets, accs, stop_line: str | None = None) -> dict:
    """Whether the baseline's ladder (seed-mean ``accs`` at ascending ``budgets``) converged by the rule.

    ``stop_line``: the baseline's line of ladders.txt ("baseline: stopped by cap: ..."), if any; without it a
    ladder counts as stopped at the cap when its largest budget is one of :data:`BASELINE_CAP`'s.

    Returns:
        {"state": "converged" (last doubling gained < 0.5 points) | "cap" (not converged, reached the cap) |
        "not_converged" (stopped below the cap, still gaining) | "unknown" (one rung), "largest_budget",
        "last_gain" (fraction or None), "sentence"}.
    """
    b, y = [int(v) for v in budgets], [float(v) for v in accs]
    gain = last_gain(y)
    at_cap = (stop_line or "").split(": ", 1)[-1].startswith("stopped by cap") if stop_line else \
        b[-1] in BASELINE_CAP.values()
    state = "unknown" if gain is None else "converged" if gain < GAIN else "cap" if at_cap else "not_converged"
    return {"state": state, "largest_budget": b[-1], "last_gain": gain,
            "sentence": _words("convergence", state=state, last=b[-1], gain=gain, best=max(y))}


VERDICTS_TEMPLATE = "frontier_v2_verdicts.md.j2"  # the words of plan version 2's verdicts and claims table


def _words(verdict: str, **v) -> str:
    """The sentence of ``verdict`` ("convergence", "control" or a claims table's "claim_value") for the values
    ``v``: the macro of templates/frontier_v2_verdicts.md.j2 (the wording lives there)."""
    return macro(verdict, v, SimpleNamespace(pct=pct, speedup_text=speedup_text), template=VERDICTS_TEMPLATE)


def control_verdict(base: tuple, x5: tuple | None, ctrl: tuple, a_star: float, early: int = EARLY) -> dict:
    """The baseline_x5 control's outcome (PLAN.md, "The baseline_x5 control"), from the seed-mean frontiers
    (budgets, accuracies) of the baseline, bn_x5 (None if absent) and baseline_x5, at ``a_star`` (a fraction).

    Rules in the plan's order: (1) every rung at or below chance + 5 points (:data:`bnexp.analysis.rules.CHANCE`)
    and the ladder at ``early`` steps or more: "needs_bn"; (2) B_baseline_x5(a*) <= RATE_ALONE x B_bn_x5(a*),
    i.e. S_baseline_x5(a*) >= S_bn_x5(a*) / RATE_ALONE: "rate_alone"; (3) reached later, or a rung at or past
    RATE_ALONE x B_bn_x5(a*) still below a*, or converged below a*: "bn_adds_speed", with ``factor`` =
    S_bn_x5(a*) / S_baseline_x5(a*) = B_baseline_x5(a*) / B_bn_x5(a*) where both are defined (else None: at
    least RATE_ALONE, ``decided_at`` the rung that decided it). Anything else (the ladder still running, bn_x5
    not at a*, a bound that leaves the comparison open): "undecided".

    Returns:
        {"outcome", "words", "budget_control", "budget_bn_x5", "limit" (RATE_ALONE x B_bn_x5(a*)),
        "speedup_control", "speedup_bn_x5" (S(a*), None where undefined), "factor", "factor_is_lower_bound",
        "decided_at", "best", "sentence"}.
    """
    cb, cy = np.asarray(ctrl[0], float), np.asarray(ctrl[1], float)
    b_base, _ = budget_to_reach(*base, a_star)
    b_c, c_cens = budget_to_reach(cb, cy, a_star)
    b_x, x_cens = budget_to_reach(*x5, a_star) if x5 is not None and len(x5[0]) else (None, False)
    limit = RATE_ALONE * b_x if b_x is not None else None
    s = lambda b: None if b is None or b_base is None else b_base / b  # noqa: E731
    out = {"budget_control": b_c, "budget_bn_x5": b_x, "limit": limit, "speedup_control": s(b_c),
           "speedup_bn_x5": s(b_x), "factor": None, "factor_is_lower_bound": False, "decided_at": None,
           "best": float(cy.max())}
    last, gain = int(cb[-1]), last_gain(cy)
    words = dict(best=float(cy.max()), last=last, early=early, a_star=a_star, limit=limit, budget_bn_x5=b_x,
                 budget_control=b_c, control_censored=c_cens, bn_x5_censored=x_cens, speedup_control=s(b_c),
                 speedup_bn_x5=s(b_x), last_accuracy=float(cy[-1]), gain=gain, rate_alone=RATE_ALONE,
                 chance=CHANCE)

    def say(outcome: str, case: str, **more) -> dict:
        return {**out, "outcome": outcome, **more, "sentence": _words("control", case=case, **words, **more)}

    if cy.max() <= CHANCE + TOL:
        return say("needs_bn", "needs_bn") if last >= early else say("undecided", "at_chance_so_far")
    if b_x is None:
        return say("undecided", "no_bn_x5")
    if b_c is not None and b_c <= limit * (1 + 1e-9) and not x_cens:
        return say("rate_alone", "rate_alone")
    if b_c is not None and b_c > limit and not c_cens:
        return say("bn_adds_speed", "later", factor=b_c / b_x, factor_is_lower_bound=x_cens)
    if b_c is None and (last >= limit or (gain is not None and gain < GAIN)):
        return say("bn_adds_speed", "past_limit" if last >= limit else "converged_below", decided_at=last,
                   factor_is_lower_bound=True)
    return say("undecided", "running")


def paper_claims(section: dict, control: dict | None = None, conv: dict | None = None) -> list[dict]:
    """Sec. 4.2's claims beside this net's values: one row per preset of the frontier (:data:`ORDER`).

    ``section``: report.json's frontier keys (``frontier``, ``matched_accuracy``, ``frontier_analysis``);
    ``control``: :func:`control_verdict`'s dict; ``conv``: :func:`convergence`'s.

    Returns:
        [{"preset", "paper" (the paper's result: templates/frontier_v2_verdicts.md.j2's ``paper``), "rule" (its pass rule, PLAN.md: templates/rules_and_bounds.md.j2's
        pass_rule), "value" (this net, seed mean, text),
        "per_seed": [{"seed", "value" (text), "pass": bool | None}], "pass": bool | None (``matched_accuracy``'s;
        None for the baseline), "verdict": PASS / FAIL / UNDECIDED, or the control's outcome in words (the
        template's ``outcome``)}]; the numbers are written here, the cells' words by the template's ``claim_value``.
    """
    runs, ma = pd.DataFrame(section["frontier"]), section["matched_accuracy"]
    fa = section["frontier_analysis"]
    out = []
    for p in [x for x in ORDER if x in fa["presets"]]:
        m, best = ma.get(p) or {}, fa["presets"][p]["best"]
        seeds = sorted(int(s) for s in runs[runs.preset == p].seed.unique())
        bests = {s: float(mean_frontier(runs, p, s)[1].max()) for s in seeds}
        per, value, verdict = [], "", PASS_WORDS[m.get("pass")]
        if p == BASELINE:
            value = _words("claim_value", case="a_star", a_star=fa["target_accuracy"], budget=fa["target_budget"],
                           state=conv["state"] if conv else None)
            per = [{"seed": s, "value": _words("claim_value", case="best", best=v), "pass": None}
                   for s, v in bests.items()]
            verdict = "-"
        elif p in ("bn_x5", "bn_baseline"):
            value = _words("claim_value", case="speedup", speedup=m.get("speedup"), bound=headline_bound(section, p))
            bounds = seed_bounds(section, p)
            per = [{"seed": int(s), "value": speedup_text(v, bounds.get(s)),
                    "pass": None if v is None else speedup_pass(p, v, bounds.get(s))}
                   for s, v in (m.get("speedup_per_seed") or {}).items()]
        elif p == "bn_x30":
            x = (fa["speedup"].get(p) or {}).get("x5_vs_x30")
            value = _words("claim_value", case="x5_vs_x30", bn_x30=x["bn_x30"], bn_x5=x["bn_x5"],
                           budget=x["budget_steps"], best=best, speedup=m.get("speedup")) if x else \
                _words("claim_value", case="max", best=best)
            acc = runs.groupby(["preset", "budget_steps", "seed"]).final_test_accuracy.first()
            for s in seeds if x else []:
                a30, a5 = (acc.get((q, x["budget_steps"], s)) for q in ("bn_x30", "bn_x5"))
                per.append({"seed": s, "value": _words("claim_value", case="points",
                                                       diff=None if None in (a30, a5) else a30 - a5),
                            "pass": None if None in (a30, a5) else bool(a30 > a5)})
        elif p in ("bn_x5_sigmoid", "baseline_sigmoid", CONTROL):
            last = fa["presets"][p]["budgets"][-1]
            value = _words("claim_value", case="best_through", best=best, last=last)
            rule = does_not_train if p == "baseline_sigmoid" else trains  # the claim of each preset
            per = [{"seed": s, "value": _words("claim_value", case="best", best=v), "pass": rule(v, last)}
                   for s, v in bests.items()]
            if p == CONTROL:
                per = [dict(d, **{"pass": None}) for d in per]
                verdict = macro("outcome", control["outcome"] if control else None, template=VERDICTS_TEMPLATE)
        out.append({"preset": p, "paper": macro("paper", p, template=VERDICTS_TEMPLATE),
                    "rule": words("pass_rule", p, CHANCE, RATE_ALONE), "value": value,
                    "per_seed": per, "pass": None if p in (BASELINE, CONTROL) else m.get("pass"), "verdict": verdict})
    return out


def sweep_cost(summaries: list[dict]) -> dict:
    """The sweep's cost from its runs' summary.json dicts: {"runs", "timed_runs" (runs with a wall time),
    "wall_time_s" (the run seconds summed: more than the sweep's wall clock when jobs ran in parallel), "steps"
    (their steps), "steps_per_s" (steps / run seconds, None without any), "by_train_time" (runs counted by their
    training time), "cpus" (the distinct ``cpu`` values the runs recorded, [] when none did)}.

    A run's seconds are its ``wall_time_s`` (summed over the sessions of a resumed run), or its ``train_time_s``
    where that is larger: a run resumed by a bnexp that kept only the last session's wall time recorded less
    than the training time it summed over its sessions, which is then the best lower bound."""
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    timed = [s for s in summaries if num(s.get("wall_time_s")) and num(s.get("step"))]
    train = [float(s["train_time_s"]) if num(s.get("train_time_s")) else 0.0 for s in timed]
    secs = [max(float(s["wall_time_s"]), t) for s, t in zip(timed, train)]
    steps = sum(int(s["step"]) for s in timed)
    return {"runs": len(summaries), "timed_runs": len(timed), "wall_time_s": sum(secs), "steps": steps,
            "steps_per_s": steps / sum(secs) if sum(secs) > 0 else None,
            "by_train_time": sum(t > float(s["wall_time_s"]) for s, t in zip(timed, train)),
            "cpus": sorted({str(s["cpu"]) for s in summaries if s.get("cpu")})}


def ladder_stops(sweep_dir: str | Path) -> list[str] | None:
    """The rule that stopped each ladder, one line per ladder, from ``sweep_dir``/ladders.txt (the lines below
    its "ladders (" line); None when the file is absent or unreadable."""
    try:
        lines = (Path(sweep_dir) / LADDERS_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    head = next((i for i, s in enumerate(lines) if s.startswith(LADDERS_HEAD)), None)
    return None if head is None else [s.strip() for s in lines[head + 1:] if s.strip()]


def _budget_ranges(budgets: list[int]) -> str:
    """Rungs as text, a doubling ladder's consecutive rungs joined: [3000, 6000, 12000, 48000] -> "3k-12k, 48k"."""
    out, run = [], []
    for b in sorted(set(budgets)):
        if run and b != 2 * run[-1]:
            out.append(_k(run[0]) if len(run) == 1 else f"{_k(run[0])}-{_k(run[-1])}")
            run = []
        run.append(b)
    if run:
        out.append(_k(run[0]) if len(run) == 1 else f"{_k(run[0])}-{_k(run[-1])}")
    return ", ".join(out)


def precision_record(summaries: list[dict], sweep_dir: str | Path | None = None) -> dict | None:
    """Which precision each rung ran in, and how fast (docs/cifar/PLAN.md, "Precision, amended 2026-11-29").

    Args:
        summaries: every run's summary.json of the sweep (``experiment``, ``max_steps``, ``status``,
            ``precision``: the precision the step loop ran, ``steps_per_s``: steps per second of training).
        sweep_dir: the sweep folder, where the orchestrator writes precision_check.json.

    Returns:
        None when every complete run computed in fp32 and there is no check; else {"rungs": [{"preset",
        "precision", "budgets" (text, e.g. "3k-24k"), "runs"}] by preset then precision, "speed": [{"preset",
        "precision", "runs", "steps_per_s" (mean over the runs, per job)}], "check": precision_check.json's
        dict or None (absent or unreadable)}.
    """
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    done = [s for s in summaries if s.get("status") in ("finished", "diverged") and s.get("experiment")
            and num(s.get("max_steps"))]
    check = None
    if sweep_dir is not None:
        try:
            check = json.loads((Path(sweep_dir) / PRECISION_CHECK_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            check = None
        check = check if isinstance(check, dict) else None
    if check is None and all(s.get("precision", "fp32") == "fp32" for s in done):
        return None
    order = {p: i for i, p in enumerate(ORDER)}
    groups: dict[tuple, list[dict]] = {}
    for s in done:
        groups.setdefault((str(s["experiment"]), str(s.get("precision") or cell("precision_not_recorded"))), []).append(s)
    keys = sorted(groups, key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))
    rungs = [{"preset": p, "precision": pr, "budgets": _budget_ranges([int(s["max_steps"]) for s in groups[(p, pr)]]),
              "runs": len(groups[(p, pr)])} for p, pr in keys]
    speed = []
    for p, pr in keys:
        v = [float(s["steps_per_s"]) for s in groups[(p, pr)] if num(s.get("steps_per_s"))]
        if v:
            speed.append({"preset": p, "precision": pr, "runs": len(v), "steps_per_s": float(np.mean(v))})
    return {"rungs": rungs, "speed": speed, "check": check}


def plan_v2(section: dict, summaries: list[dict], sweep_dir: str | Path | None = None) -> dict:
    """Plan version 2's additions to ``frontier_analysis`` (``section``: :func:`bnexp.analysis.frontier.analyze`'s
    dict; ``summaries``: every run's summary.json of the sweep; ``sweep_dir``: where ladders.txt is).

    Returns:
        {"convergence": :func:`convergence`, "control": :func:`control_verdict` (None without baseline_x5),
        "paper_claims": :func:`paper_claims`, "cost": :func:`sweep_cost`, "ladder_stops": :func:`ladder_stops`}, and
        "precision": :func:`precision_record` when a run computed in bf16 or the bf16 check ran.
    """
    fa, runs = section["frontier_analysis"], pd.DataFrame(section["frontier"])
    stops = ladder_stops(sweep_dir) if sweep_dir is not None else None
    base_line = next((s for s in stops or [] if s.startswith(f"{BASELINE}:")), None)
    b = fa["presets"][BASELINE]
    conv = convergence(b["budgets"], b["mean_test_accuracy"], base_line)
    control = None
    if CONTROL in fa["presets"]:
        x5 = mean_frontier(runs, HEADLINE) if HEADLINE in fa["presets"] else None
        control = control_verdict(mean_frontier(runs, BASELINE), x5, mean_frontier(runs, CONTROL),
                                  fa["target_accuracy"])
    out = {"convergence": conv, "control": control, "paper_claims": paper_claims(section, control, conv),
           "cost": sweep_cost(summaries), "ladder_stops": stops}
    precision = precision_record(summaries, sweep_dir)
    if precision is not None:  # absent from a sweep that is all fp32 without a check (plan version 1's)
        out["precision"] = precision
    return out
