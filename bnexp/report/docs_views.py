"""The renderers of the docs' run numbers: each view turns a report.json dict into the markdown text of one
``bnexp:numbers`` block (:mod:`bnexp.report.docs_numbers` finds, writes and checks the blocks, and says how to add
a view). A view reads only report.json and raises :class:`ViewDataError` (through :func:`need`) naming the key it
lacks; its sentences are in templates/docs_views.md.j2.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bnexp.analysis.interval import row_interval
from bnexp.report.fmt import cell, format_interval, label, labels, md_table, render_template, short_text
from bnexp.report.ics_verdicts import DEF21_SHORT, DEF21_VIEWS
from bnexp.analysis.frontier import PASS_WORDS
from bnexp.report.frontier_text import MATCHED_HELPERS, frontier_table, headline_bound, pct, seed_bounds, speedup_text
from bnexp.report.study_section import table_md


class ViewDataError(ValueError):
    """report.json lacks what a view needs (raised by :func:`need`)."""


VIEWS: dict[str, Callable[[dict], str]] = {}


def view(name: str):
    """Register a renderer ``function(report_json_dict) -> markdown text`` under ``name`` in :data:`VIEWS`.
    Raises ValueError when ``name`` is already registered."""
    def register(fn: Callable[[dict], str]) -> Callable[[dict], str]:
        if name in VIEWS:
            raise ValueError(f"the docs view {name!r} is registered twice")
        VIEWS[name] = fn
        return fn

    return register


def need(d: dict, *keys: str):
    """``d[k1][k2]...``, or :class:`ViewDataError` naming the dotted key that report.json lacks."""
    cur = d
    for i, k in enumerate(keys):
        if not isinstance(cur, dict) or cur.get(k) is None:
            raise ViewDataError(f"report.json has no {'.'.join(keys[:i + 1])}")
        cur = cur[k]
    return cur


def _text(name: str, **d) -> str:
    """The text of view ``name`` in templates/docs_views.md.j2 for the values ``d`` it reads."""
    helpers = {"table_md": table_md, "row_interval": row_interval, **MATCHED_HELPERS,
               "format_interval": format_interval, "short_text": short_text, "pct": pct, "PASS_WORDS": PASS_WORDS}
    return render_template("docs_views.md.j2", {"view": name, **d}, helpers).strip("\n")


def seed_speedups(m: dict, bounds: dict[str, str] | None = None) -> dict:
    """``speedup_per_seed`` of a matched-accuracy entry ``m`` as the README's headline words it (the macro
    ``seed_range`` of templates/docs_views.md.j2): {"range": (lowest, highest) of several seeds' values, else None;
    "seeds": [(seed, value, bound)] of the one seed with a value, or of every seed whose value is a bound
    (``bounds``: :func:`bnexp.report.frontier_text.seed_bounds`); "missing": the seeds without a value}, seeds in
    numeric order."""
    per = {str(k): v for k, v in (m.get("speedup_per_seed") or {}).items()}
    vals, bounds = {k: v for k, v in per.items() if v is not None}, bounds or {}
    in_order = lambda keys: sorted(keys, key=lambda k: (len(k), k))  # noqa: E731 (seed 2 before seed 10)
    one = len(vals) == 1
    return {"range": (min(vals.values()), max(vals.values())) if vals and not one else None,
            "seeds": [(k, vals[k], bounds.get(k)) for k in (vals if one else in_order(bounds)) if k in vals],
            "missing": in_order(k for k, v in per.items() if v is None)}


@view("cifar_headline")
def cifar_headline(report: dict) -> str:
    """The README's CIFAR-10 Sec. 4.2 result paragraph, from ``matched_accuracy`` (bn_x5 and bn_baseline):
    a* in %, whether the baseline converged, S(a*) (">= x" for a lower bound) with its per-seed range, and
    the pass rule S(a*) >= 5 for bn_x5 (PASS / FAIL / UNDECIDED from bn_x5's ``pass``); with held-out seeds
    (``frontier_analysis.held_out_seeds``, docs/cifar/PLAN.md's stage 5) which seeds decided, each held-out seed's
    S(a*_s) and the interval of S(a*) over every seed (``matched_accuracy[p].held_out_per_seed``, ``interval``)."""
    ma, x5 = need(report, "matched_accuracy"), need(report, "matched_accuracy", "bn_x5")
    presets = [(p, ma[p], speedup_text(ma[p]["speedup"], headline_bound(report, p)),
                seed_speedups(ma[p], seed_bounds(report, p))) for p in ("bn_x5", "bn_baseline") if p in ma]
    n = len({r.get("seed") for r in report.get("frontier") or []}) or None
    fa = report.get("frontier_analysis") or {}
    return _text("cifar_headline", x5=x5, n=n, presets=presets, held=fa.get("held_out_seeds"),
                 decide=fa.get("decision_seeds"), report=report)


@view("cifar_matched")
def cifar_matched(report: dict) -> str:
    """docs/cifar's matched-accuracy table (as in report.md) after a sentence giving a* and whether the baseline
    converged."""
    ma = need(report, "matched_accuracy")
    if not ma:
        raise ViewDataError("report.json's matched_accuracy is empty")
    return _text("cifar_matched", first=next(iter(ma.values())), report=report)


@view("cifar_frontier")
def cifar_frontier(report: dict) -> str:
    """docs/cifar's frontier table (:func:`bnexp.report.frontier_text.frontier_table`, as in report.md)."""
    held = (report.get("frontier_analysis") or {}).get("held_out_runs")
    return frontier_table(need(report, "frontier"), held).to_markdown(index=False, disable_numparse=True)


@view("cifar_run")
def cifar_run(report: dict) -> str:
    """What the sweep trained and what the tuning chose, from report.json: ``runs`` and ``sgd_steps`` (the
    steps of all runs); the tuning winner (``frontier_analysis.tuning``); and per preset the range of S(a) over
    the curve's exact points (``frontier_analysis.speedup[preset].curve``, bounds left out)."""
    fa, tuning = need(report, "frontier_analysis"), need(report, "frontier_analysis", "tuning")
    exact = {p: [c["speedup"] for c in d.get("curve") or [] if c.get("bound") == "exact" and c.get("speedup")]
             for p, d in (fa.get("speedup") or {}).items()}
    ranges = [(p, vals) for p, vals in exact.items() if vals]
    return _text("cifar_run", runs=need(report, "runs"), steps=int(need(report, "sgd_steps")), tuning=tuning,
                 win=tuning["rows"][tuning["winner"]], ranges=ranges)


@view("cifar_plan_v2")
def cifar_plan_v2(report: dict) -> str:
    """docs/cifar's plan-version-2 results (templates/frontier_v2.md.j2, as in report.md): whether the baseline
    converged or reached the cap, the rule that stopped each ladder, the baseline_x5 control's verdict, Sec. 4.2's
    claims beside the paper's (per seed) and the sweep's cost, from ``frontier_analysis`` (written by
    :func:`bnexp.report.frontier_plan_v2.plan_v2`; a report.json of plan version 1 lacks them: :class:`ViewDataError`)."""
    need(report, "frontier_analysis", "paper_claims")
    return render_template("frontier_v2.md.j2", report, {}).strip("\n")


@view("cifar_claims")
def cifar_claims(report: dict) -> str:
    """The README's one-paragraph list of Sec. 4.2's claims on CIFAR-10 (``frontier_analysis.paper_claims``, written
    by :func:`bnexp.report.frontier_plan_v2.plan_v2`): per preset its rule, this net's value and the verdict; a
    report.json of plan version 1 lacks them (:class:`ViewDataError`)."""
    rows = [r for r in need(report, "frontier_analysis", "paper_claims") if r.get("rule") and r.get("verdict") != "-"]
    return _text("cifar_claims", rows=rows)


@view("claims")
def claims(report: dict) -> str:
    """The claims table of report.json's ``claims`` rows (:func:`bnexp.report.claims.evaluate`'s), or of
    ``ics.claims`` when there is no top-level list."""
    rows = report.get("claims")
    if rows is None and (rows := (report.get("ics") or {}).get("claims")) is None:
        raise ViewDataError("report.json has no claims (neither claims nor ics.claims)")
    if not rows:
        raise ViewDataError("report.json's claims list is empty")
    return _text("claims", rows=rows)


# ----------------------------------------------------------------------------- MNIST (docs/mnist)


def _speedup_rows(report: dict) -> list[dict]:
    rows = need(report, "best_rate_speedups")
    if not rows:
        raise ViewDataError("report.json's best_rate_speedups list is empty")
    return rows


@view("mnist_headline")
def mnist_headline(report: dict) -> str:
    """The README's MNIST paragraph: per init (the paper's normal init first) and target of
    ``best_rate_speedups``, BN's speedup at each network's own best rate (chosen on the tuning seeds when
    report.json has ``tuning_seeds``, docs/mnist/PLAN.md) with its interval and per-seed ratios, and the verdict."""
    rows = [r for r in _speedup_rows(report) if r["variant"] == "BN"]
    return _text("mnist_headline", rows=rows, inits=list(dict.fromkeys(r["init"] for r in rows)),
                 tuning_seeds=report.get("tuning_seeds"), evaluation_seeds=report.get("evaluation_seeds"))


@view("mnist_best_rate")
def mnist_best_rate(report: dict) -> str:
    """docs/mnist's claims table of ``best_rate_speedups`` and the chosen rates with every seed's steps (as in
    report.md)."""
    return _text("mnist_best_rate", rows=_speedup_rows(report))


@view("mnist_shift_views")
def mnist_shift_views(report: dict) -> str:
    """One sentence for the pages that show Fig. 1(b, c): at the paper's init and the rates chosen for the main
    target 95% (``best_rate_speedups``), how many initial 15-85 spreads each net's last-hidden-layer input moved
    from the start (``configurations[].ics.measures["shift.w1_rel_first.last"]``, mean over the configuration's
    seeds) and what the raw view shows instead (percentiles.png's two rows, bnexp/report/figures.py)."""
    row = next((r for r in _speedup_rows(report) if r["variant"] == "BN" and r["init"] == "normal"
                and abs(r["target"] - 0.95) < 1e-9), None)
    if row is None:
        raise ViewDataError("report.json's best_rate_speedups has no BN row for the normal init at 95%")
    sides = {}
    for side, bn, lr in (("bn", True, row["bn_lr"]), ("no_bn", False, row["no_bn_lr"])):
        conf = next((c for c in need(report, "configurations") if c.get("bn") is bn and c.get("ics")
                     and c["config"].get("model.init") == "normal" and c["config"].get("lr") == lr), None)
        if conf is None:
            raise ViewDataError(f"report.json has no {'BN' if bn else 'no-BN'} configuration with ics at lr={lr}")
        sides[side] = {"lr": lr, "w1": need(conf, "ics", "measures", "shift.w1_rel_first.last")}
    return _text("mnist_shift_views", **sides)


# ----------------------------------------------------------------------------- ICS study (docs/ics)

ICS_ROWS = ("shift.ks_first", "shift.ks_first.last", "shift.w1_rel_first", "shift.w1_first", "shift.ks_prev",
            "bn_input.ks_first", "grad.l2_rel", "grad.move_rel", "grad.l2_rel_per_move", "grad.cos",
            "land.fn_beta_smoothness", "land.fn_loss_variation", "land.beta_smoothness")
"""The measures (keys of configurations[].ics.measures) of the ICS overview's rows, labelled by templates/columns.md.j2's
``ics_row``."""


def _ics_columns(report: dict) -> list[tuple[dict, dict | None]]:
    """(configuration, its noise_strength row) in the order BN, noisy BN by strength, no BN."""
    strength = {r["label"]: r for r in need(report, "ics", "noise_strength", "rows")}
    confs = [c for c in need(report, "configurations") if c.get("ics")]
    if not confs:
        raise ViewDataError("report.json's configurations have no ics measures")

    rank = {"BN": 0, "noisy BN": 1, "no BN": 2}
    confs.sort(key=lambda c: (rank.get(c["ics"].get("variant", ""), 3),
                              (strength.get(c["label"]) or {}).get("noise_scale") or 0))
    return [(c, strength.get(c["label"])) for c in confs]


def _stat_cell(st: dict | None) -> str:
    return "-" if not st or st.get("mean") is None else f"{st['mean']:.3g}"


@view("ics_overview")
def ics_overview(report: dict) -> str:
    """docs/ics's side-by-side table of one ICS study (:mod:`bnexp.report.ics_stats` measures): one column per
    configuration (BN, noisy BN by strength, no BN), rows: final test and train accuracy, steps to the main
    target, the shift, gradient-ICS and landscape measures; means over seeds (3 significant digits). The row
    labels are templates/columns.md.j2's."""
    cols = _ics_columns(report)
    target = need(report, "ics", "main_target")
    steps = [(c.get("steps_to_target") or {}).get(str(target)) or {} for c, _ in cols]  # as the report wrote them
    header = [""] + [re.sub(r" \([^()]* preset\)$", "", c["label"]) for c, _ in cols]  # "BN (bn_x5 preset)" -> "BN"
    first = labels("ics_overview_first", target)  # seeds, final test and train accuracy, steps to the target
    rows = [[first[0]] + [str(c["completed"]) for c, _ in cols],
            [first[1]] + [pct(need(c, "final_test_accuracy").get("mean")) for c, _ in cols],
            [first[2]] + [pct(((s or {}).get("final_train_accuracy") or {}).get("mean")) for _, s in cols],
            [first[3]] + [st.get("text", "-") if st.get("reached") else cell("steps", None, 0, 0) for st in steps]]
    rows += [[label("ics_row", key)] + [_stat_cell(c["ics"]["measures"].get(key)) for c, _ in cols] for key in ICS_ROWS]
    return "\n".join(md_table(header, rows))


@view("ics_def21")
def ics_def21(report: dict) -> str:
    """The sentence of docs/ics and the README on Santurkar et al.'s Def. 2.1 as defined (docs/ics/PLAN.md,
    amendment of 2026-11-29): per setting of report.json's ``claims`` (the sweep's one setting, or e.g.
    "optim.schedule=constant"), each Def. 2.1 row (:data:`bnexp.report.ics_verdicts.DEF21_VIEWS`: raw L2 and
    1 - cos, at the same steps and matched at equal rates) as its seed mean of BN / no BN with the 95% interval,
    and its verdict. Raises :class:`ViewDataError` when report.json has no such row with a measure."""
    rows = [r for r in need(report, "claims") if r.get("view") in DEF21_VIEWS and not r.get("needs")]
    if not rows:
        raise ViewDataError("report.json's claims have no Def. 2.1 row with a measure (monitor.grad_ics was off, "
                            "or the report predates the rows)")
    settings: dict[str, list[dict]] = {}
    for r in rows:
        settings.setdefault(r.get("setting") or "", []).append(r)
    return _text("ics_def21", settings=list(settings.items()), short=DEF21_SHORT)


# ----------------------------------------------------------------------------- studies (docs/studies)


def _study(report: dict) -> dict:
    sec = need(report, "study")
    for k in ("name", "claims", "table", "columns"):
        need(sec, k)
    return sec


@view("study")
def study(report: dict) -> str:
    """A docs/studies page's results: the runs and measured wall time, how many claims the page's Holm adjustment
    counts (report.json's ``multiplicity``, when it has one), the claims table, the per-configuration table
    (:func:`bnexp.report.study_section.table_md`) and the findings, from report.json's ``study`` section."""
    return _text("study", sec=_study(report), mult=report.get("multiplicity"))


@view("study_verdicts")
def study_verdicts(report: dict) -> str:
    """A study's result in brief, for a summary page (no committed page uses it yet): one bullet per claim with
    its verdict and interval, then the runs and measured wall time, from report.json's ``study`` section."""
    return _text("study_verdicts", sec=_study(report))


# the rate at which docs/studies/normalizer.md quotes no BN's steps to 95%: the one-stage batch_size study's rate at
# m = 60 (lr = 0.01 m, docs/studies/batch_size.md)
BATCH_SIZE_RATE_60 = 0.6


@view("mnist_rates")
def mnist_rates(report: dict) -> str:
    """The MNIST sweep's rates the study designs lean on, from report.json (normal init, m = 60): each
    network's best rate per target (``best_rate_speedups``), the highest no-BN rate whose every completed seed
    left chance (a configuration's ``left_chance`` count, the report's chance rule, equal to its ``completed``) and
    no BN's steps and examples to 95% at :data:`BATCH_SIZE_RATE_60` (seed means). Raises :class:`ViewDataError`
    for a report.json without these fields."""
    rows = [r for r in _speedup_rows(report) if r["init"] == "normal" and r["variant"] == "BN"]
    plain = [c for c in need(report, "configurations") if c.get("bn") is False
             and c["config"].get("model.init") == "normal"]
    if not rows or not plain:
        raise ViewDataError("report.json has no normal-init BN and no-BN rate grids")
    trained = [c["config"]["lr"] for c in plain if c["completed"] and need(c, "left_chance") == c["completed"]]
    at = next((c for c in plain if c["config"].get("lr") == BATCH_SIZE_RATE_60), None)
    m = int(plain[0]["config"].get("trainer.batch_size", 60))
    return _text("mnist_rates", rows=rows, trained=max(trained), m=m, rate=BATCH_SIZE_RATE_60,
                 steps=(at or {}).get("steps_to_target", {}).get("0.95", {}))
