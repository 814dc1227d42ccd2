"""The five studies (docs/studies/): which runs each one trains and what that costs.

A study is a list of :class:`Batch` es, each one Hydra multirun (``bnexp train -m``) through the joblib
launcher into the study's sweep folder: fixed overrides plus swept ones (``a,b,c``), expanded into jobs
exactly as Hydra's basic sweeper does (:meth:`BasicSweeper.split_arguments`). A batch with a ``prefix``
puts its run folders under ``SWEEP_DIR/<prefix>/``; every run folder is named by the keys its multirun
sweeps (:mod:`bnexp.runfolders.runnames`), so a second call of ``scripts/study.sh`` finds the finished runs.

The designs, their claims and pass rules are fixed in docs/studies/NAME.md and
:mod:`bnexp.report.study_claims` before any run. Two stages (docs/studies/PLAN.md and its second amendment of
2026-11-29): :func:`build_studies` gives stage 1, every grid on the tuning seeds read on the validation split
(``data.validation=``:data:`bnexp.designs.stages.VALIDATION`); :func:`stage_two` the grid-edge rule's added rates
(the same split) and then stage 2, each configuration at its chosen rate(s) on the full training set, scored on
test (``data.validation=0``), on the fresh :data:`EVALUATION_SEEDS` (1000-1004). A one-stage study (a ``seed=``
override, :func:`bnexp.designs.stages.one_stage`) leaves ``data.validation`` to the config, as before. Command line (what ``scripts/study.sh`` calls)::

    python -m bnexp.designs.studies lines NAME SWEEP_DIR [EXTRA ...]   # one line of overrides per multirun that
                                                                # still has runs to do (none: complete)
    python -m bnexp.designs.studies plan NAME SWEEP_DIR [--jobs N] [EXTRA ...]   # DRY_RUN: runs, steps, minutes

``EXTRA`` are the user's extra Hydra overrides (they come last on every multirun and win).
"""

from __future__ import annotations

import argparse
import heapq
import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from bnexp.analysis.tuning import FRESH_EVALUATION_SEEDS, TUNING_SEEDS
from bnexp.designs.stages import VALIDATION, edge_mark_text, one_stage

STUDIES = ("batch_size", "inference_statistics", "placement", "normalizer", "depth")
# two stages (docs/studies/PLAN.md and its second amendment of 2026-11-29): every grid on the tuning seeds, read on
# the validation split (data.validation=VALIDATION), then each configuration at the rate(s) chosen there
# (bnexp/analysis/study_runs.py, the report's rule) on the full training set, scored on test, on the fresh
# evaluation seeds 1000-1004 (data.validation=0)
SEEDS = ",".join(map(str, TUNING_SEEDS))
EVALUATION_SEEDS = FRESH_EVALUATION_SEEDS
# every run of every study: one torch thread per job, no progress bar, no TensorBoard histograms and no
# distribution-shift metrics (the studies read accuracies only); each batch adds trainer.hist_every =
# max_steps / 4 (5 shift-monitor records). Task overrides hold plain values only: an interpolation
# ("${...}") in one would be resolved again where Hydra stores the overrides (multirun.yaml), and
# bnexp's run-folder names read them from there.
COMMON = ("trainer.num_threads=1", "trainer.progress=false", "monitor.histograms=false",
          "monitor.shift_metrics=false")
SUBDIR = "hydra.sweep.subdir='{prefix}/${{bnexp_sweep_subdir:${{hydra.sweep.dir}},${{hydra.overrides.task}}," \
         "${{hydra.job.override_dirname}}}}'"

# --- the designs (docs/studies/PLAN.md fixes each and says why) ----------------------------------------
# batch_size and inference_statistics: a fixed number of examples seen, the rate tuned per m on its own grid
# (factor 2, the m = 60 grid scaled by sqrt(m / 60) onto a factor-2 ladder; 5.4, the plain net's MNIST best
# rate, added at m = 60)
EXAMPLES = 240_000            # 4 epochs of MNIST's 60,000 training images
EVAL_EXAMPLES = 6_000         # an evaluation every 6,000 examples: 40 per run
BATCH_RATES = {2: (0.15, 0.3, 0.6, 1.2, 2.4), 4: (0.225, 0.45, 0.9, 1.8, 3.6), 16: (0.45, 0.9, 1.8, 3.6, 7.2),
               60: (0.9, 1.8, 3.6, 5.4, 7.2, 14.4), 256: (1.8, 3.6, 7.2, 14.4, 28.8)}
BATCH_SIZES = tuple(BATCH_RATES)   # the mini-batch sizes m of docs/studies/PLAN.md
GHOST_SIZES = (2, 4)          # ghost BN at m = 60 (on the m = 60 grid): statistics of 2 or 4 examples, gradient of 60
MOMENTA = (0.1, 0.01)         # bn.momentum of the running averages (torch's convention: new = 0.9 old + 0.1 batch)
TUNING_MOMENTUM = 0.1         # inference_statistics tunes at 0.1; training does not depend on the momentum
# placement: BN before / after g, each (model, act, position) on its own rate grid (factor 2)
PLACEMENT_MLP = dict(steps=4000, eval_every=200, rates=(0.15, 0.3, 0.6, 1.2, 2.4), target=0.95)
PLACEMENT_CNN = dict(steps=1500, eval_every=150, rates=(0.02, 0.04, 0.08, 0.16, 0.32), target=0.97,
                     overrides=("model=cnn", "model.channels=[8,16]", "model.fc=64"))
# normalizer: the paper net at m = 60 with BN, LayerNorm, GroupNorm (4 groups of 25 units) and none, one grid
# holding 5.4 (the plain net's MNIST best rate), neighbours at most 1.5x apart from 0.9 to 21.6
NORMALIZER = dict(steps=8000, eval_every=200, rates=(0.9, 1.2, 1.8, 2.4, 3.6, 5.4, 7.2, 10.8, 14.4, 21.6), groups=4,
                  target=0.95)
# depth: 3, 6, 12 sigmoid hidden layers of 100 units, paper init, m = 60, BN and no BN (factor-2 grid)
DEPTH = dict(steps=10000, eval_every=250, rates=(0.45, 0.9, 1.8, 3.6, 7.2, 14.4), depths=(3, 6, 12), target=0.95)


@dataclass(frozen=True)
class Batch:
    """One Hydra multirun of a study.

    Attributes:
        label: what the plan shows for it.
        overrides: Hydra overrides, fixed (``key=value``) and swept (``key=a,b,c``); :data:`COMMON` is added.
        prefix: its run folders go under ``SWEEP_DIR/<prefix>/`` (None: directly in the sweep folder).
        model: "mlp" or "cnn" (the cost model). depth: hidden layers of the MLP (the cost model).
        steps: a job's training steps (``trainer.max_steps``). every: steps between its test evaluations.
    """

    label: str
    overrides: tuple[str, ...]
    prefix: str | None = None
    model: str = "mlp"
    depth: int = 3
    steps: int = 0
    every: int = 1
    evaluate: tuple[str, ...] = ()   # overrides stage 2 adds (inference_statistics: both momenta)
    name: str | None = None          # stage 2: the run folder's name, "bn=true,lr=${lr},seed=${seed}"
    split: int | None = None         # data.validation of its runs: VALIDATION (stage 1), 0 (stage 2), None (unset)

    def all_overrides(self, extra: tuple[str, ...] = ()) -> list[str]:
        """:data:`COMMON`, the budget (max_steps, eval_every, hist_every), this batch's overrides, its
        run-folder rule and ``extra`` (last of a key wins); ``data.validation`` after its overrides when
        :attr:`split` is set (docs/studies/PLAN.md, second amendment: stage 1 reads the validation split, stage 2
        the test set; a one-stage study leaves the key at the config's default, 0)."""
        out = list(COMMON) + [f"trainer.max_steps={self.steps}", f"trainer.eval_every={self.every}",
                              f"trainer.hist_every={max(1, round(self.steps / 4))}"] + list(self.overrides)
        if self.split is not None:
            out.append(f"data.validation={int(self.split)}")
        if self.name:
            out.append(f"hydra.sweep.subdir='{self.prefix + '/' if self.prefix else ''}{self.name}'")
        elif self.prefix:
            out.append(SUBDIR.format(prefix=self.prefix))
        return out + list(extra)


@dataclass(frozen=True)
class Study:
    """A study: its ``name`` (the docs page docs/studies/NAME.md), one-line ``question``, ``batches``
    and the ``notes`` the plan prints (what was cut to fit the time budget)."""

    name: str
    question: str
    batches: tuple[Batch, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def _grid(values) -> str:
    return ",".join(f"{v:g}" for v in values)


def _fixed_examples(m: int) -> dict:
    """The budget of a fixed-examples run at mini-batch size m: 240,000 / m steps, an evaluation every
    6,000 / m steps (rounded as Python's round, 938 and 23 at m = 256), the rate grid of m."""
    return {"steps": max(1, round(EXAMPLES / m)), "every": max(1, round(EVAL_EXAMPLES / m)),
            "lr": f"lr={_grid(BATCH_RATES[m])}"}


def build_studies(two_stage: bool = True) -> dict[str, Study]:
    """The five studies (docs/studies/), by name: stage 1's multiruns. The multiruns of a study run one after
    another, the longest first; each run folder is SWEEP_DIR/<prefix>/<the keys its multirun sweeps>.
    ``two_stage``: each multirun reads the validation split (``data.validation=``:data:`VALIDATION`,
    docs/studies/PLAN.md, second amendment), since its runs tune the rates stage 2 scores on test; False: the
    one-stage study of a ``seed=`` override (:func:`bnexp.designs.stages.one_stage`), whose runs are the scored
    ones and read the test set (``data.validation`` left at the config's default)."""
    studies = _build_studies()
    split = VALIDATION if two_stage else None
    return {k: replace(s, batches=tuple(replace(b, split=split) for b in s.batches)) for k, s in studies.items()}


def _build_studies() -> dict[str, Study]:
    """The five studies' multiruns without their split (:func:`build_studies`)."""
    bs, inf = [], []
    for m in BATCH_SIZES:
        b = _fixed_examples(m)
        bs.append(Batch(f"m={m}: BN, LayerNorm, no BN", (f"trainer.batch_size={m}", b["lr"], "bn=true,false,layer",
                                                         f"seed={SEEDS}"), prefix=f"m={m}", steps=b["steps"],
                        every=b["every"]))
        inf.append(Batch(f"m={m}: BN", (f"trainer.batch_size={m}", b["lr"], "bn=true",
                                        f"bn.momentum={TUNING_MOMENTUM:g}", f"seed={SEEDS}"),
                         prefix=f"m={m}", steps=b["steps"], every=b["every"],
                         evaluate=(f"bn.momentum={_grid(MOMENTA)}",)))
    g = _fixed_examples(60)
    bs.append(Batch("ghost BN at m=60", ("trainer.batch_size=60", g["lr"], "bn=true",
                                         f"bn.ghost_batch_size={_grid(GHOST_SIZES)}", f"seed={SEEDS}"),
                    prefix="ghost,m=60", steps=g["steps"], every=g["every"]))
    ms = ",".join(map(str, BATCH_SIZES))
    batch_size = Study("batch_size", "Does BN's speedup survive small mini-batches, and where does it end?",
                       tuple(bs), notes=(f"m in {{{ms}}}, the rate tuned per m and normalizer (docs/studies/PLAN.md); "
                                         "LayerNorm is the batch-free control (GroupNorm is in the normalizer "
                                         "study)",))
    inference = Study("inference_statistics",
                      "How far apart are train-mode (batch statistics) and inference-mode accuracies?", tuple(inf),
                      notes=(f"the rate tuned per m at momentum {TUNING_MOMENTUM:g}, both momenta evaluated at it; "
                             "after training, every run's checkpoint is evaluated three ways: "
                             "python -m bnexp.train.inference_eval",))
    pl_batches = []
    for model, spec in (("mlp", PLACEMENT_MLP), ("cnn", PLACEMENT_CNN)):
        for act in ("sigmoid", "relu"):
            pl_batches.append(Batch(
                f"{model} {act}", (*spec.get("overrides", ()), f"act={act}", "bn=true", "bn.position=before,after",
                                   f"lr={_grid(spec['rates'])}", f"seed={SEEDS}"),
                prefix=f"{model}_{act}", model=model, steps=spec["steps"], every=spec["eval_every"]))
    placement = Study("placement", "Does it matter that BN sits before the nonlinearity?", tuple(pl_batches),
                      notes=("CNN kept small: channels [8,16], fc 64, 1,500 steps",))
    n = NORMALIZER
    normalizer = Study("normalizer", "Which part of BN's speedup needs batch statistics?", (
        Batch("BN, LayerNorm, no BN x rate", ("bn=true,false,layer", f"lr={_grid(n['rates'])}", f"seed={SEEDS}"),
              steps=n["steps"], every=n["eval_every"]),
        Batch(f"GroupNorm ({n['groups']} groups) x rate", ("bn=group", f"bn.groups={n['groups']}",
                                                            f"lr={_grid(n['rates'])}", f"seed={SEEDS}"),
              prefix=f"bn=group,groups={n['groups']}", steps=n["steps"], every=n["eval_every"]),
    ))
    d = DEPTH
    depth = Study("depth", "Does the plain sigmoid net fail with depth while BN holds?", tuple(
        Batch(f"{k} hidden layers", ("model.hidden=[" + ",".join(["100"] * k) + "]", "bn=true,false",
                                     f"lr={_grid(d['rates'])}", f"seed={SEEDS}"),
              prefix=f"depth={k}", depth=k, steps=d["steps"], every=d["eval_every"])
        for k in sorted(d["depths"], reverse=True)))  # the longest runs first
    return {s.name: s for s in (batch_size, inference, placement, normalizer, depth)}


# --- expansion into jobs and run folders ---------------------------------------------------------------

@dataclass(frozen=True)
class Job:
    """One planned run: its ``batch`` index, its ``overrides`` (as Hydra's sweeper writes them), its run
    folder ``folder`` relative to the sweep folder, ``m`` and the cost model's ``steps`` and ``evals``."""

    batch: int
    overrides: tuple[str, ...]
    folder: str
    m: int
    steps: int
    evals: int


def expand(study: Study, extra: tuple[str, ...] = ()) -> list[Job]:
    """Every job of ``study`` with ``extra`` overrides, in launch order, with its run folder.

    Raises:
        hydra.errors.OverrideParseException: an override Hydra's grammar rejects.
    """
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bnexp.config.schema import quote_bn_overrides
    from bnexp.runfolders.runnames import swept_keys, swept_name

    parser = OverridesParser.create()
    jobs = []
    for i, b in enumerate(study.batches):
        task = quote_bn_overrides([o for o in b.all_overrides(extra) if not o.startswith("hydra.")])
        keys = swept_keys(task)
        for ov in BasicSweeper.split_arguments(parser.parse_overrides(task), None)[0]:
            name = swept_name(ov, keys) or "default"
            values = dict(o.split("=", 1) for o in ov)
            m = int(values.get("trainer.batch_size", 60))
            steps = _int_or(values.get("trainer.max_steps"), b.steps)
            evals = steps // max(1, _int_or(values.get("trainer.eval_every"), b.every)) + 1
            if b.name:  # stage 2: the folder named as stage 1 names it (see evaluation_batches)
                name = re.sub(r"\$\{([^}]+)\}", lambda k: values.get(k.group(1), k.group(0)), b.name)
            jobs.append(Job(i, tuple(ov), f"{b.prefix}/{name}" if b.prefix else name, m, steps, evals))
    return jobs


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None and "$" not in text else default
    except ValueError:
        return default


def is_done(sweep_dir: Path, job: Job) -> bool:
    """True when the job's run folder holds a finished or diverged run (bnexp would skip it)."""
    from bnexp.runfolders.rundir import is_complete

    return is_complete(Path(sweep_dir) / job.folder)


def pending_lines(study: Study, sweep_dir: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """One line of overrides (space-separated, ``extra`` last) per batch that still has a job to do."""
    jobs = expand(study, extra)
    todo = sorted({j.batch for j in jobs if not is_done(sweep_dir, j)})
    return [" ".join(study.batches[i].all_overrides(extra)) for i in todo]


# --- stage 2: each configuration at the rate(s) chosen on the tuning seeds ------------------------------

def networks(study: Study, extra: tuple[str, ...] = ()) -> dict[tuple, list[Job]]:
    """Stage 1's jobs by network: {(batch index, the job's overrides of the keys its multirun sweeps, other
    than lr and seed): its jobs (every rate x tuning seed)}."""
    from bnexp.config.schema import quote_bn_overrides
    from bnexp.runfolders.runnames import swept_keys

    out: dict[tuple, list[Job]] = {}
    for j in expand(study, extra):
        b = study.batches[j.batch]
        keys = swept_keys(quote_bn_overrides([o for o in b.all_overrides(extra) if not o.startswith("hydra.")]))
        net = tuple(o for o in j.overrides if o.split("=", 1)[0] in keys - {"lr", "seed"})
        out.setdefault((j.batch, net), []).append(j)
    return out


def evaluation_batch(study: Study, index: int, net: tuple[str, ...], rates, seeds, evaluate: bool = True) -> Batch:
    """The stage-2 multirun of one network: stage 1's batch ``index`` with the network's values fixed, ``lr``
    the chosen ``rates``, ``seed`` the evaluation ``seeds`` and the batch's ``evaluate`` overrides; its run
    folders are named as stage 1 names them (the keys stage 1 sweeps, plus those ``evaluate`` sweeps), e.g.
    ``m=2/bn=layer,lr=0.3,seed=0``. ``evaluate=False``: without the ``evaluate`` overrides (stage 1's own
    settings, its split included: the grid-edge rule's added rates on the tuning seeds); ``evaluate=True``: on the
    full training set, scored on test (``data.validation=0``; docs/studies/PLAN.md, second amendment)."""
    from bnexp.runfolders.runnames import swept_name

    b = study.batches[index]
    if not evaluate:
        b = replace(b, evaluate=())
    keys = {o.split("=", 1)[0] for o in net}
    fixed = [o for o in b.overrides if o.split("=", 1)[0] not in keys | {"lr", "seed"}
             and o.split("=", 1)[0] not in {e.split("=", 1)[0] for e in b.evaluate}]
    varying = ["lr", "seed"] + [e.split("=", 1)[0] for e in b.evaluate]
    marks = {k: f"QX{i}QX" for i, k in enumerate(varying)}
    name = swept_name(list(net) + [f"{k}={v}" for k, v in marks.items()], keys | set(varying))
    for k, v in marks.items():
        name = name.replace(v, "${" + k + "}")
    return replace(b, label=": ".join(x for x in (b.label, " ".join(net)) if x), name=name,
                   split=b.split if not evaluate else 0,
                   overrides=(*fixed, *net, f"lr={_grid(sorted(set(rates)))}", f"seed={','.join(map(str, seeds))}",
                              *b.evaluate))


@dataclass
class StageTwo:
    """What follows a study's complete stage-1 grids (:func:`stage_two`): ``messages`` (one line per network),
    ``batches`` (the grid-edge rule's added rates on the tuning seeds while ``extending``, else stage 2's
    evaluation batches) and ``record`` (the rule's record, :func:`bnexp.analysis.grid_edges.record_entry` per
    network and objective; [] while extending)."""

    messages: list[str]
    batches: list[Batch]
    extending: bool
    record: list[dict]


def stage_two(study: Study, sweep_dir: Path, seeds=EVALUATION_SEEDS, extra: tuple[str, ...] = ()) -> StageTwo:
    """What a study runs once its tuning runs (stage 1 with ``extra``) are all complete in ``sweep_dir``.

    First the grid-edge rule (docs/studies/PLAN.md, amendment item 1; :mod:`bnexp.analysis.grid_edges`), replayed
    from the design's grids: per network and objective of the study
    (:data:`bnexp.analysis.study_runs.OBJECTIVES`), the rate :func:`bnexp.analysis.study_runs.choose` picks on
    every tuning run of the network so far (the report's rule); a choice at an edge adds the next factor-2 rate
    beyond it on the tuning seeds (one :func:`evaluation_batch` per network, ``evaluate=False``), until the rule
    stops for every network. Then stage 2: per network the chosen rates, as one :func:`evaluation_batch` each on
    ``seeds`` (a rate chosen twice trained once).

    Raises:
        ValueError: a tuning run of the design's grids is missing or unfinished.
    """
    from bnexp.analysis.grid_edges import choice_state, record_entry, same_rate
    from bnexp.analysis.runs import load_sweep, native
    from bnexp.analysis.study_runs import FAMILY_KEYS, OBJECTIVES, choose, family_label, study_cells
    from bnexp.analysis.tuning import TUNING_SEEDS, RateChoice

    nets = networks(study, extra)
    jobs = [j for js in nets.values() for j in js]
    missing = [j.folder for j in jobs if not is_done(sweep_dir, j)]
    if missing:
        raise ValueError(f"{len(missing)} tuning run(s) not complete, e.g. {missing[0]}")
    no_lr = tuple(o for o in extra if o.split("=", 1)[0] not in ("lr", "seed"))
    original = {k: sorted({float(dict(o.split("=", 1) for o in j.overrides)["lr"]) for j in js})
                for k, js in nets.items()}
    added: dict[tuple, list[float]] = {k: [] for k in nets}
    keys = FAMILY_KEYS[study.name]
    labels = {k: ": ".join(x for x in (study.batches[k[0]].label, " ".join(k[1])) if x) for k in nets}
    while True:
        grown = {k: evaluation_batch(study, k[0], k[1], rates, TUNING_SEEDS, evaluate=False)
                 for k, rates in added.items() if rates}
        more = {k: expand(Study(study.name, "", (b,)), no_lr) for k, b in grown.items()}
        todo = {k for k, js in more.items() if any(not is_done(sweep_dir, j) for j in js)}
        if todo:
            left = {k: [r for r in added[k] if any(not is_done(sweep_dir, j) for j in more[k]
                                                   if same_rate(float(dict(o.split("=", 1) for o in j.overrides)["lr"]), r))]
                    for k in todo}
            return StageTwo([f"  {labels[k]}: lr {', '.join(f'{r:g}' for r in left[k])} added on the tuning seeds"
                             for k in nets if k in todo],
                            [replace(evaluation_batch(study, k[0], k[1], left[k], TUNING_SEEDS, evaluate=False),
                                     label=f"{labels[k]} (grid-edge rule: added rates)") for k in nets if k in todo],
                            True, [])
        folders = [j.folder for j in jobs] + [j.folder for js in more.values() for j in js]
        c = study_cells(study.name, load_sweep([Path(sweep_dir) / f for f in folders]))
        choices = {o: choose(c, keys, o) for o in OBJECTIVES[study.name]}
        family = {Path(r["run"]).resolve(): tuple(native(r[k]) for k in keys) for _, r in c.iterrows()}
        picks = {k: {o: ch.get(family.get((Path(sweep_dir) / js[0].folder).resolve())) for o, ch in choices.items()}
                 for k, js in nets.items()}
        states = {(k, o): choice_state(original[k], p) for k, ps in picks.items() for o, p in ps.items()
                  if isinstance(p, RateChoice)}
        new = False
        for (k, o), st in states.items():
            if st.next_rate is not None and not any(same_rate(st.next_rate, r) for r in original[k] + added[k]):
                added[k].append(st.next_rate)
                new = True
        if not new:
            break
    msgs, out, record = [], [], []
    for k, ps in picks.items():
        index, net = k
        combo = family.get((Path(sweep_dir) / nets[k][0].folder).resolve())
        if not all(isinstance(p, RateChoice) for p in ps.values()):
            msgs.append(f"  {labels[k]}: not evaluated: " + "; ".join(str(p) for p in ps.values()
                                                                      if not isinstance(p, RateChoice)))
            continue
        msgs.append(f"  {labels[k]}: " + ", ".join(
            f"{o} lr {p.rate:g}{' (censored)' if p.censored else ''}"
            + (f" [{edge_mark_text(states[k, o])}]" if states[k, o].mark else "") for o, p in ps.items()))
        record += [record_entry(family_label(keys, combo) if combo else labels[k], o, original[k], p, states[k, o],
                                edge_mark_text(states[k, o])) for o, p in ps.items()]
        out.append(evaluation_batch(study, index, net, [p.rate for p in ps.values()], seeds))
    return StageTwo(msgs, out, False, record)


def evaluation_batches(study: Study, sweep_dir: Path, seeds=EVALUATION_SEEDS,
                       extra: tuple[str, ...] = ()) -> tuple[list[str], list[Batch]]:
    """(messages, batches) of :func:`stage_two`: the grid-edge rule's added rates while it extends, else stage 2.

    Raises:
        ValueError: a tuning run is missing or unfinished.
    """
    st = stage_two(study, sweep_dir, seeds, extra)
    return st.messages, st.batches


def evaluation_estimate_batches(study: Study, seeds=EVALUATION_SEEDS, extra: tuple[str, ...] = ()) -> list[Batch]:
    """Stage 2 before stage 1 has run, at its most: per network as many rates as the study has objectives
    (its grid's first ones stand in; the cost does not depend on the rate)."""
    from bnexp.analysis.study_runs import OBJECTIVES

    k = len(OBJECTIVES[study.name])
    out = []
    for (index, net), js in networks(study, extra).items():
        rates = sorted({float(dict(o.split("=", 1) for o in j.overrides)["lr"]) for j in js})[:k]
        out.append(evaluation_batch(study, index, net, rates, seeds))
    return out


# --- the cost model ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CostModel:
    """Seconds of one job on one idle core (docs/studies/README.md, "Cost model", says how these were
    measured): ``overhead_s`` per run (start-up, data, checkpoints, summary); the paper MLP's step
    ``mlp_step_ms + mlp_example_ms * m`` for 3 hidden layers, half of the per-step part growing with the
    number of linear layers (k + 1 for k hidden layers) and the per-example part with the multiply-adds
    (a 12-layer step at m = 60 costs 2.0x a 3-layer one, as measured); the small CNN's step
    ``cnn_step_ms + cnn_example_ms * m``; one test-set evaluation ``mlp_eval_s`` / ``cnn_eval_s``."""

    overhead_s: float = 6.0
    mlp_step_ms: float = 1.0
    mlp_example_ms: float = 0.0133
    mlp_eval_s: float = 0.07
    cnn_step_ms: float = 2.0
    cnn_example_ms: float = 0.08
    cnn_eval_s: float = 0.5

    def job_seconds(self, job: Job, batch: Batch) -> float:
        """Estimated seconds of ``job`` on one idle core."""
        if batch.model == "cnn":
            step_ms, eval_s = self.cnn_step_ms + self.cnn_example_ms * job.m, self.cnn_eval_s
        else:
            k = batch.depth
            macs = 784 * 100 + (k - 1) * 100 * 100 + 100 * 10
            ratio = macs / (784 * 100 + 2 * 100 * 100 + 100 * 10)
            step_ms = self.mlp_step_ms * (0.5 + 0.5 * (k + 1) / 4) + self.mlp_example_ms * job.m * ratio
            eval_s = self.mlp_eval_s * ratio
        return self.overhead_s + job.steps * step_ms / 1000 + job.evals * eval_s


def makespan(seconds: list[float], jobs: int) -> float:
    """Wall time of running ``seconds`` in order on ``jobs`` workers, each job to the first free one
    (how joblib dispatches a multirun's jobs)."""
    free = [0.0] * max(1, jobs)
    for s in seconds:
        heapq.heapreplace(free, free[0] + s)
    return max(free)


def estimate(study: Study, jobs: int, extra: tuple[str, ...] = (), cost: CostModel = CostModel(),
             sweep_dir: Path | None = None) -> dict:
    """The plan of ``study`` on ``jobs`` parallel jobs: {"runs", "todo", "steps", "seconds", "batches":
    [{"label", "runs", "todo", "steps", "seconds"}]} (seconds: wall time of the runs still to do, the
    batches one after another; runs already complete in ``sweep_dir`` cost nothing)."""
    js = expand(study, extra)
    out = {"runs": len(js), "todo": 0, "steps": 0, "seconds": 0.0, "batches": []}
    for i, b in enumerate(study.batches):
        mine = [j for j in js if j.batch == i]
        todo = [j for j in mine if sweep_dir is None or not is_done(sweep_dir, j)]
        secs = makespan([cost.job_seconds(j, b) for j in todo], jobs)
        row = {"label": b.label, "prefix": b.prefix, "runs": len(mine), "todo": len(todo),
               "steps": sum(j.steps for j in mine), "seconds": secs,
               "overrides": " ".join([*b.overrides, *([] if b.split is None else [f"data.validation={b.split}"])])}
        out["batches"].append(row)
        out["todo"] += len(todo)
        out["steps"] += row["steps"]
        out["seconds"] += secs
    return out


def plan_text(study: Study, est: dict, jobs: int, commands: dict[int, str] | None = None) -> str:
    """The DRY_RUN text: one block per multirun, the totals and the estimate's assumption.

    Args:
        commands: {batch index: the exact command line that runs it} (scripts/study.sh's plan; a batch
            without one is complete and is not started); None: each batch's own overrides only.
    """
    lines = [f"study {study.name}: {study.question}"]
    for i, b in enumerate(est["batches"]):
        lines.append(f"  {b['label']}: {b['runs']} runs ({b['todo']} to do), {b['steps']:,} steps, "
                     f"~{b['seconds'] / 60:.1f} min" + (f"  [folders under {b['prefix']}/]" if b["prefix"] else ""))
        if commands is None:
            lines.append(f"    bnexp train -m {b['overrides']}")
        else:
            lines.append(f"    $ {commands[i]}" if i in commands else "    (complete: not started)")
    lines += [f"  note: {n}" for n in study.notes]
    lines.append(f"total: {est['runs']} runs ({est['todo']} to do), {est['steps']:,} steps; estimated wall time "
                 f"{math.ceil(est['seconds'] / 60)} min with {jobs} parallel jobs")
    lines.append("assumption: one idle core per job (the cost model of docs/studies/README.md); on a loaded "
                 "machine expect longer")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bnexp.designs.studies", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("lines", "plan"))
    p.add_argument("study", metavar="NAME", help=f"one of {', '.join(STUDIES)}")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR")
    p.add_argument("--jobs", type=int, default=2, help="parallel jobs (plan only)")
    p.add_argument("extra", nargs="*", help="extra Hydra overrides (last wins)")
    return p


def main(argv: list[str] | None = None) -> int:
    """``python -m bnexp.designs.studies lines|plan NAME SWEEP_DIR [--jobs N] [EXTRA ...]``: exit 0, or 2 with
    one ``error:`` line for an unknown study or an override Hydra cannot parse."""
    a = _parser().parse_intermixed_args(argv)
    studies = build_studies(two_stage=not one_stage(list(a.extra)))
    if a.study not in studies:
        print(f"error: unknown study {a.study!r}; the studies are {', '.join(STUDIES)}", file=sys.stderr)
        return 2
    study, extra = studies[a.study], tuple(a.extra)
    try:
        if a.command == "lines":
            print("\n".join(pending_lines(study, Path(a.sweep_dir), extra)))
        else:
            print(plan_text(study, estimate(study, a.jobs, extra, sweep_dir=Path(a.sweep_dir)), a.jobs))
    except Exception as exc:  # Hydra's grammar errors: one line, exit 2
        if type(exc).__name__ not in ("OverrideParseException", "HydraException"):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
