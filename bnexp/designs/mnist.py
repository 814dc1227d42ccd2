"""The design of the MNIST Fig. 1 sweep (scripts/reproduce_mnist.sh; docs/mnist/README.md, "Design"), fixed before the run.

Four blocks, each one Hydra multirun over its own rate grid x the tuning seeds, at the paper's setup
(784-100-100-100-10 sigmoid MLP, mini-batch 60, plain SGD at a constant rate):

* the paper's small Gaussian init (``model.init=normal``, W ~ N(0, 0.01^2)), BN and no BN, each grid refined
  around its optimum in the old sweep (docs/mnist/README.md: no BN 3.6, BN 7.2) with neighbouring rates at
  most :data:`MAX_NEIGHBOUR_RATIO` apart over the refined range, plus the outer rates that show the grid's
  edges (0.12, the paper's base rate; 0.6; 14.4 where no BN stays at chance; 28.8 above BN's optimum);
* the init control: Glorot (Xavier) uniform init (``model.init=xavier``), BN and no BN, on smaller
  factor-2 grids chosen by a 500-step pilot of seed 0 (no BN: 9.6 stuck at chance, 4.8 slow, 0.6-2.4 the
  fastest start; BN: 57.6 stuck, 28.8 slow, 0.6-14.4 alike).

Two stages (docs/mnist/PLAN.md, held-out tuning, and its amendment of 2026-11-29): the grids run on the tuning
seeds :data:`SEEDS` (100-102, not the pilot seed :data:`PILOT_SEED` that chose the grids' ranges) with
``data.validation=``:data:`VALIDATION` (trained on 50,000 training images, every evaluation read on the other
10,000, held out by one fixed seeded draw, :func:`bnexp.nets.datasets.hold_out`: the tuning runs never read the
test set); then :func:`stage_blocks` trains each network at the rates :func:`choose` picks there (per target, the
report's own rule, :func:`bnexp.analysis.tuning.choose_rates`) on the full training set (``data.validation=0``),
scored on the test set, on the fresh evaluation seeds :data:`EVALUATION_SEEDS` (1000-1004, used by no committed
sweep). Every run is cut at
:data:`MAX_STEPS` (the full 50,000 steps do not fit the time on 2 cores; no BN at its old best rate
reached 97% at 12,833 ± 1,546 steps, BN at 4,667-7,833), with a test evaluation every :data:`EVAL_EVERY`
steps.

``python -m bnexp.designs.mnist blocks [-- OVERRIDE ...]`` prints one line of Hydra overrides per block (the
script runs each as a multirun, extra overrides appended, last wins); ``python -m bnexp.designs.mnist plan
--sweep-dir SWEEP_DIR [--jobs N] [-- OVERRIDE ...]`` prints every planned run, the ones already complete in SWEEP_DIR,
the total steps and the estimated wall time (the script's DRY_RUN=1).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from bnexp.analysis.runs import load_sweep, target_key
from bnexp.analysis.tuning import (FRESH_EVALUATION_SEEDS, SPEEDUP_TARGETS, TUNING_SEEDS, RateChoice, choose_rates,
                                   runs_from_table)
from bnexp.designs.stages import (VALIDATION, edge_mark_text, grid_edge_rule, one_stage,  # noqa: F401 (VALIDATION:
                                  runs_on_test, split_of, split_text)  # this design's name for the shared constant)
from bnexp.runfolders.rundir import COMPLETE_STATUSES, read_summary

PILOT_SEED = 0
SEEDS = TUNING_SEEDS  # stage 1: every rate of every grid; stage 2 at the chosen rates: EVALUATION_SEEDS
# stage 2's seeds (docs/mnist/PLAN.md, amendment): fresh, used by no committed sweep (those used 0-4, 1-3, 100-102)
EVALUATION_SEEDS = FRESH_EVALUATION_SEEDS
# VALIDATION (stage 1's data.validation), split_of and split_text: bnexp.designs.stages, shared with the studies
MAX_STEPS = 30_000
EVAL_EVERY = 250
HIST_EVERY = 500
REFINED_RANGE = (1.2, 7.2)  # no BN's refined range (docs/mnist/README.md): neighbours at most 1.5x apart inside it
MAX_NEIGHBOUR_RATIO = 1.5
# One job's speed on one idle core (eval every 250, monitor every 500 steps), steps/s, and its start-up
# (imports, data): measured as CPU time of 2,000- vs 250-step runs under nice on this 2-core machine
# while a sweep held both cores (BN 288, no BN 493 steps per CPU-second, ~12 CPU-s to start).
STEPS_PER_S = {True: 290.0, False: 490.0}
STARTUP_S = 12.0
# every run's folder, named by its design coordinates (deterministic: a second call finds and skips it)
SUBDIR = "hydra.sweep.subdir='bn=${hydra:runtime.choices.bn},init=${model.init},lr=${lr},seed=${seed}'"


@dataclass(frozen=True)
class Block:
    """One multirun of the sweep: BN on or off, the weight init (``model.init``) and its rate grid."""

    bn: bool
    init: str
    rates: tuple[float, ...]
    refined: tuple[float, float]  # the part of the grid refined around the optimum

    @property
    def name(self) -> str:
        """e.g. "BN, normal init"."""
        return f"{'BN' if self.bn else 'no BN'}, {self.init} init"


BLOCKS = (
    Block(True, "normal", (0.12, 0.6, 3.6, 5.4, 7.2, 10.8, 14.4, 28.8), (3.6, 14.4)),
    Block(False, "normal", (0.12, 0.6, 1.2, 1.8, 2.4, 3.6, 5.4, 7.2, 14.4), REFINED_RANGE),
    Block(True, "xavier", (0.9, 1.8, 3.6, 7.2, 14.4), (0.9, 14.4)),
    Block(False, "xavier", (0.3, 0.6, 1.2, 2.4, 4.8), (0.3, 4.8)),
)


def neighbour_ratios(rates, lo: float = 0.0, hi: float = math.inf) -> list[float]:
    """Ratios of neighbouring rates (sorted) with both ends inside [lo, hi]: (1.2, 1.8, 2.4) -> [1.5, 1.33]."""
    r = sorted(x for x in rates if lo <= x <= hi)
    return [b / a for a, b in zip(r, r[1:])]


def apply_overrides(extra: list[str]) -> tuple[list[Block], tuple[int, ...], int, list[str]]:
    """The design with the extra overrides the script appends (the last of a key wins, as bnexp train
    does with BNEXP_LAST_OVERRIDE_WINS): plain lists ``lr=a,b``, ``seed=a,b`` and ``trainer.max_steps=N``
    change the plan; any other override (or another syntax such as ``range(..)``) is returned as passed
    through to bnexp train unchanged.

    Returns:
        (blocks, seeds, max_steps, the other overrides).
    """
    blocks, seeds, steps, other = list(BLOCKS), SEEDS, MAX_STEPS, []
    for o in extra:
        key, _, value = o.partition("=")
        try:
            if key == "lr":
                rates = tuple(float(v) for v in value.split(","))
                blocks = [replace(b, rates=rates) for b in blocks]
            elif key == "seed":
                seeds = tuple(int(v) for v in value.split(","))
            elif key == "trainer.max_steps":
                steps = int(value)
            else:
                other.append(o)
        except ValueError:
            other.append(o)
    return blocks, seeds, steps, other


def block_overrides(block: Block, seeds=SEEDS, max_steps: int = MAX_STEPS, validation: int | None = None) -> list[str]:
    """The Hydra overrides of one block's multirun (before the script's common ones and the extra ones).
    ``validation``: the ``data.validation`` the block's runs train with (:data:`VALIDATION` for stage 1's tuning
    runs, 0 for stage 2's evaluation runs, :func:`split_of`); None leaves the key out (the config's default, 0:
    the one-stage sweep of a seed override)."""
    return [f"bn={'true' if block.bn else 'false'}", f"model.init={block.init}",
            "lr=" + ",".join(f"{r:g}" for r in block.rates), "seed=" + ",".join(map(str, seeds)),
            f"trainer.max_steps={max_steps}", f"trainer.eval_every={EVAL_EVERY}", f"trainer.hist_every={HIST_EVERY}",
            *([] if validation is None else [f"data.validation={int(validation)}"]), SUBDIR]


def tuning_runs_on_test(sweep_dir: Path, blocks, seeds) -> list[str]:
    """The complete tuning runs in ``sweep_dir`` (every block's rate x ``seeds``) that read the test set: their
    summary's ``evaluated_on`` is not "validation" (the one-stage design's runs, before docs/mnist/PLAN.md's
    amendment; a summary without the field read the test set). A two-stage sweep must not reuse them: the
    orchestrator refuses such a folder (one line, exit code 2)."""
    return runs_on_test(sweep_dir, [run_name(b, lr, s) for b in blocks for lr in b.rates for s in seeds])


def run_name(block: Block, lr: float, seed) -> str:
    """The run folder's name (:data:`SUBDIR`): "bn=true,init=normal,lr=3.6,seed=1"."""
    return f"bn={'true' if block.bn else 'false'},init={block.init},lr={float(lr)!r},seed={int(seed)}"


def run_seconds(bn: bool, max_steps: int, steps_per_s: dict | None = None, startup_s: float = STARTUP_S) -> float:
    """Estimated wall time of one run on one idle core: start-up + max_steps / steps per second."""
    return startup_s + max_steps / (steps_per_s or STEPS_PER_S)[bn]


def plan(sweep_dir: Path, jobs: int, extra: list[str], steps_per_s: dict | None = None,
         startup_s: float = STARTUP_S, evaluation_seeds=()) -> str:
    """The DRY_RUN text of :func:`plan_and_seconds`."""
    return plan_and_seconds(sweep_dir, jobs, extra, steps_per_s, startup_s, evaluation_seeds)[0]


def plan_and_seconds(sweep_dir: Path, jobs: int, extra: list[str], steps_per_s: dict | None = None,
                     startup_s: float = STARTUP_S, evaluation_seeds=(),
                     stage: tuple[list[str], list[Block], tuple[int, ...]] | None = None) -> tuple[str, float]:
    """The DRY_RUN text: each block's runs (marked "done" when SWEEP_DIR holds the run finished or
    diverged), the totals, and the estimated wall time of what is left with ``jobs`` parallel jobs;
    and that wall time in seconds. A block's runs have equal length, so a block takes
    ceil(runs to do / jobs) x one run's time (:func:`run_seconds`); the blocks run one after the other.
    Each run is counted once (a seed or rate listed twice in ``extra`` names the same run folder).
    ``stage``: :func:`stage_blocks` for this folder as it is, when the caller has it (the tuning runs are then
    not read again); None: computed here once stage 1 is complete. The grid-edge rule's sentence is printed
    with the rates it adds (:func:`extend`) while it runs."""
    blocks, seeds, steps, other = apply_overrides(extra)
    lines, total_runs, todo_runs, todo_steps, wall = [], 0, 0, 0, 0.0
    if evaluation_seeds:
        lines.append(f"stage 1 (tuning seeds {', '.join(map(str, seeds))}): every rate of every grid, "
                     f"{split_text(split_of(seeds, evaluation_seeds))}")
    for b in blocks:
        names = list(dict.fromkeys(run_name(b, lr, s) for lr in b.rates for s in seeds))
        done = [n for n in names if (read_summary(Path(sweep_dir) / n) or {}).get("status") in COMPLETE_STATUSES]
        todo = len(names) - len(done)
        t = run_seconds(b.bn, steps, steps_per_s, startup_s)
        block_wall = math.ceil(todo / max(1, jobs)) * t
        total_runs, todo_runs, todo_steps, wall = total_runs + len(names), todo_runs + todo, todo_steps + todo * steps, \
            wall + block_wall
        lines.append(f"{b.name}: lr {', '.join(f'{r:g}' for r in b.rates)} x seeds {', '.join(map(str, seeds))}: "
                     f"{len(names)} runs, {todo} to run, ~{t:.0f} s each, ~{block_wall / 60:.1f} min")
        lines += [f"  {n}{'  (done)' if n in done else ''}" for n in names]
    if evaluation_seeds:
        n_seeds = len(evaluation_seeds)
        stage1_done = todo_runs == 0
        st = None if not stage1_done else stage if stage is not None else \
            stage_blocks(sweep_dir, blocks, seeds, evaluation_seeds)
        msgs, chosen = [], blocks
        lines.append(f"stage 1's {grid_edge_rule()}")
        if st is not None and st[1] and tuple(st[2]) == tuple(seeds):  # the rule's added rates, on the tuning seeds
            lines += st[0]
            for b in st[1]:
                names = [run_name(b, lr, s) for lr in b.rates for s in seeds]
                todo = sum(not is_done(sweep_dir, n) for n in names)
                t = run_seconds(b.bn, steps, steps_per_s, startup_s)
                total_runs, todo_runs, todo_steps, wall = total_runs + len(names), todo_runs + todo, \
                    todo_steps + todo * steps, wall + math.ceil(todo / max(1, jobs)) * t
                lines += [f"  {b.name}: {len(names)} runs on the tuning seeds, {todo} to run"]
                lines += [f"    {n}{'  (done)' if is_done(sweep_dir, n) else ''}" for n in names]
            stage1_done = False  # stage 2 is chosen once the rule has stopped
        elif st is not None:
            msgs, chosen = st[:2]
        lines += [f"stage 2 (evaluation): each network at the rate(s) chosen on seeds {', '.join(map(str, seeds))} "
                  f"for {', '.join(f'{t:.0%}' for t in SPEEDUP_TARGETS)}, on the fresh seeds "
                  f"{', '.join(map(str, evaluation_seeds))}, {split_text(split_of(evaluation_seeds, evaluation_seeds))}"
                  + ("" if stage1_done else f"; decided after stage 1: at most {len(SPEEDUP_TARGETS)} rates x "
                     f"{n_seeds} seeds per network (estimated at that most)"), *msgs]
        for b in chosen:
            rates = b.rates if stage1_done else b.rates[:len(SPEEDUP_TARGETS)]
            names = [run_name(b, lr, s) for lr in rates for s in evaluation_seeds]
            todo = sum(not is_done(sweep_dir, n) for n in names)
            t = run_seconds(b.bn, steps, steps_per_s, startup_s)
            total_runs, todo_runs, todo_steps, wall = total_runs + len(names), todo_runs + todo, \
                todo_steps + todo * steps, wall + math.ceil(todo / max(1, jobs)) * t
            lines.append(f"  {b.name}: {len(names)} runs{'' if stage1_done else ' at most'}, {todo} to run")
    rate = ", ".join(f"{'BN' if k else 'no BN'} {v:g} steps/s" for k, v in (steps_per_s or STEPS_PER_S).items())
    lines += [f"{total_runs} runs of {steps:,} steps, evaluation every {EVAL_EVERY} steps; to run: {todo_runs} runs, "
              f"{todo_steps:,} steps",
              f"estimated wall time: {wall / 60:.0f} min with {jobs} parallel jobs, assuming an idle machine "
              f"(one core per job: {rate}, {startup_s:g} s start-up per run)"]
    if other:
        lines.append("passed to bnexp train, not reflected in this plan: " + " ".join(other))
    return "\n".join(lines), wall


def is_done(sweep_dir: Path, name: str) -> bool:
    """The run folder ``sweep_dir/name`` holds a finished or diverged run."""
    return (read_summary(Path(sweep_dir) / name) or {}).get("status") in COMPLETE_STATUSES


def choose(sweep_dir: Path, block: Block, seeds, targets=SPEEDUP_TARGETS) -> dict[float, RateChoice]:
    """Stage 2's rates of one block: per target, :func:`bnexp.analysis.tuning.choose_rates` (objective "steps",
    the runs' budget) on the block's complete tuning grid in ``sweep_dir`` (every rate x ``seeds``), the rule
    the report applies to the same runs (:func:`bnexp.report.best_rate.best_rate_for_target`).

    Raises:
        ValueError: a tuning run of the grid is missing or unfinished (the grid is not complete).
    """
    names = [run_name(block, lr, s) for lr in block.rates for s in seeds]
    missing = [n for n in names if not is_done(sweep_dir, n)]
    if missing:
        raise ValueError(f"{block.name}: {len(missing)} tuning run(s) not complete, e.g. {missing[0]}")
    sweep = load_sweep([Path(sweep_dir) / n for n in names], targets)
    t = sweep.table
    budget = int(max(t["budget"]))
    return {tgt: choose_rates(runs_from_table(t, (block.name,), steps=f"steps_to_{target_key(tgt)}"), "steps",
                              budget, tuning_seeds=seeds)[0] for tgt in targets}


@dataclass(frozen=True)
class Extended:
    """One network's tuning grid under the grid-edge rule (:mod:`bnexp.analysis.grid_edges`), replayed from the
    sweep folder: ``block`` with every rate run or to run (the design's grid and the rates the rule added),
    ``todo`` the added rates still to run on the tuning seeds (empty: the rule has stopped), ``picks`` {target:
    :class:`RateChoice`} and ``states`` {target: :class:`bnexp.analysis.grid_edges.EdgeState`} on the rates run
    (empty while ``todo`` is not)."""

    block: Block
    todo: tuple[float, ...]
    picks: dict
    states: dict


def extend(sweep_dir: Path, block: Block, seeds, targets=SPEEDUP_TARGETS) -> Extended:
    """The grid-edge rule (docs/mnist/PLAN.md, docs/studies/PLAN.md amendment item 1) on ``block``, whose grid
    is complete on ``seeds``: choose per target (:func:`choose`); where a choice is at an edge, add the rate
    :func:`bnexp.analysis.grid_edges.choice_state` names and choose again on the grown grid, as long as those
    rates are complete in ``sweep_dir``. Deterministic: every call replays the rule from the design's grid, so
    the rates it added are found again by their run folders.

    Raises:
        ValueError: from :func:`choose` (the design's grid is not complete).
    """
    from bnexp.analysis.grid_edges import same_rate, choice_state

    rates = list(block.rates)
    while True:
        grown = replace(block, rates=tuple(sorted(rates)))
        todo = tuple(r for r in grown.rates if r not in block.rates
                     and any(not is_done(sweep_dir, run_name(block, r, s)) for s in seeds))
        if todo:
            return Extended(grown, todo, {}, {})
        picks = choose(sweep_dir, grown, seeds, targets)
        states = {t: choice_state(block.rates, c) for t, c in picks.items()}
        new = sorted({st.next_rate for st in states.values() if st.next_rate is not None
                      and not any(same_rate(st.next_rate, r) for r in rates)})
        if not new:
            return Extended(grown, (), picks, states)
        rates += new


def edge_lines(ext: Extended) -> list[str]:
    """The plan's lines on one network's grid-edge rule: the rates it adds, or the marks of the choices it left
    at an edge."""
    b = ext.block
    if ext.todo:
        return [f"  {b.name}: {grid_edge_rule().split(':')[0]}: a choice at its grid's edge; adds lr "
                f"{', '.join(f'{r:g}' for r in ext.todo)} on the tuning seeds"]
    return [f"  {b.name}: {t:.0%} lr {c.rate:g}: {edge_mark_text(st)}" for t, c in ext.picks.items()
            for st in [ext.states[t]] if st.mark]


def edge_record(sweep_dir: Path, blocks: list[Block], seeds, targets=SPEEDUP_TARGETS) -> list[dict]:
    """The grid-edge rule's record of every network and target (:func:`bnexp.analysis.grid_edges.record_entry`)
    once every design grid is complete on ``seeds``; [] before.

    Raises:
        ValueError: from :func:`choose`.
    """
    from bnexp.analysis.grid_edges import record_entry

    if any(not is_done(sweep_dir, run_name(b, lr, s)) for b in blocks for lr in b.rates for s in seeds):
        return []
    out = []
    for b in blocks:
        e = extend(sweep_dir, b, seeds, targets)
        out += [record_entry(b.name, f"steps to {t:.0%}", b.rates, c, e.states[t],
                                edge_mark_text(e.states[t])) for t, c in e.picks.items()]
    return out


def stage_blocks(sweep_dir: Path, blocks: list[Block], seeds,
                 evaluation_seeds) -> tuple[list[str], list[Block], tuple[int, ...]]:
    """The blocks still to run, stage by stage (docs/mnist/PLAN.md): the grid blocks with a run not complete
    on ``seeds`` (stage 1, tuning); once every grid is complete, the rates the grid-edge rule adds beyond a
    choice at an edge (:func:`extend`: stage 1 goes on, on ``seeds``, a block whose ``rates`` are the added
    ones); once it has stopped for every network, each network at its chosen rates (:func:`choose` on its
    grown grid) on ``evaluation_seeds`` (stage 2; nothing when that is empty: a one-stage sweep, which the rule
    does not extend), as a block whose ``rates`` are the chosen ones; nothing when every run is complete.

    Returns:
        (messages: the rule's extensions, or the choices, one line per network; the blocks; the seeds they run
        on).

    Raises:
        ValueError: from :func:`choose`.
    """
    todo = [b for b in blocks if any(not is_done(sweep_dir, run_name(b, lr, s)) for lr in b.rates for s in seeds)]
    if todo or not evaluation_seeds:
        return [], todo, tuple(seeds)
    grown = [extend(sweep_dir, b, seeds) for b in blocks]
    if any(e.todo for e in grown):
        return ([f"stage 1 goes on ({grid_edge_rule()}):", *(line for e in grown if e.todo for line in edge_lines(e))],
                [replace(e.block, rates=e.todo) for e in grown if e.todo], tuple(seeds))
    msgs, out = [f"stage 2 (evaluation seeds {', '.join(map(str, evaluation_seeds))}): the rates chosen on the "
                 f"tuning seeds {', '.join(map(str, seeds))}:"], []
    for e in grown:
        b, picks = e.block, e.picks
        msgs.append(f"  {b.name}: " + ", ".join(f"{t:.0%} lr {c.rate:g}{' (censored)' if c.censored else ''}"
                                                 + (f" [{edge_mark_text(e.states[t])}]" if e.states[t].mark else "")
                                                 for t, c in picks.items()))
        chosen = replace(b, rates=tuple(sorted({c.rate for c in picks.values()})))
        if any(not is_done(sweep_dir, run_name(chosen, lr, s)) for lr in chosen.rates for s in evaluation_seeds):
            out.append(chosen)
    return msgs, out, tuple(evaluation_seeds)


def _args(argv: list[str]):
    """The options before ``--``, and the Hydra overrides after it (as ``overrides``)."""
    cut = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m bnexp.designs.mnist", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["blocks", "plan"])
    p.add_argument("--sweep-dir", default=".")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--steps-per-s-bn", type=float, default=STEPS_PER_S[True])
    p.add_argument("--steps-per-s-no-bn", type=float, default=STEPS_PER_S[False])
    p.add_argument("--startup-s", type=float, default=STARTUP_S)
    a = p.parse_args(argv[:cut])
    a.overrides = argv[cut + 1:]
    return a


def main(argv: list[str] | None = None) -> int:
    """The CLI (see the module docstring)."""
    a = _args(sys.argv[1:] if argv is None else argv)
    if a.command == "blocks":
        blocks, seeds, steps, _ = apply_overrides(a.overrides)
        evaluation = () if one_stage(a.overrides) else EVALUATION_SEEDS
        for b in blocks:  # stage 1's blocks
            print(" ".join(block_overrides(b, seeds, steps, split_of(seeds, evaluation))))
    else:
        print(plan(Path(a.sweep_dir), a.jobs, a.overrides, {True: a.steps_per_s_bn, False: a.steps_per_s_no_bn},
                   a.startup_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
