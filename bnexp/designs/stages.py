"""A sweep part's stages (:mod:`bnexp.designs.orchestrate`): the blocks of a later stage are decided from the
results of the earlier ones -- MNIST's and the studies' evaluation stage at the rates chosen on the tuning seeds
(docs/mnist/PLAN.md, docs/studies/PLAN.md), the CIFAR-10 ladder's next rung (docs/cifar/PLAN.md), the ICS
study's rates read from the MNIST tuning sweep when the part starts (docs/ics/PLAN.md). One mechanism runs
them all: a :class:`Part` runs :class:`Decision` after :class:`Decision` (:func:`run_stages`).
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bnexp.designs.preflight import Block, complete_jobs


VALIDATION = 10_000  # stage 1's data.validation: training images held out and read instead of the test set


def split_of(seeds, evaluation_seeds) -> int | None:
    """The ``data.validation`` of a held-out design's runs on ``seeds`` (docs/mnist/PLAN.md and docs/studies/PLAN.md,
    amendments of 2026-11-29): 0 (the full training set, scored on test) for stage 2's ``evaluation_seeds``,
    :data:`VALIDATION` for stage 1's tuning runs (the grids and the rates the grid-edge rule adds); None in a
    one-stage sweep (no ``evaluation_seeds``: the seeds the runs are scored on read the test set, the config's
    default)."""
    if not evaluation_seeds:
        return None
    return 0 if tuple(seeds) == tuple(evaluation_seeds) else VALIDATION


def split_text(validation: int | None) -> str:
    """How a stage's runs read their evaluations, for the DRY_RUN plan: "read on the validation split
    (data.validation=10000: ...)" or "trained on the full training set and scored on the test set
    (data.validation=0)"."""
    if validation:
        return (f"read on the validation split (data.validation={validation}: {validation:,} training images held "
                f"out by one fixed seeded draw, trained on the rest; the test set is never read)")
    return "trained on the full training set and scored on the test set (data.validation=0)"


def runs_on_test(sweep_dir: Path, folders) -> list[str]:
    """The ``folders`` (run folders relative to ``sweep_dir``: a design's tuning runs) that hold a complete run
    (finished or diverged) which read the test set: its summary's ``evaluated_on`` is not "validation" (a summary
    without the field read the test set, as every run did before ``data.validation`` existed). A held-out design
    that tunes on the validation split must not reuse them: the orchestrator refuses such a sweep folder (one
    line, exit code 2)."""
    from bnexp.runfolders.rundir import COMPLETE_STATUSES, read_summary

    out = []
    for f in folders:
        summary = read_summary(Path(sweep_dir) / f) or {}
        if summary.get("status") in COMPLETE_STATUSES and summary.get("evaluated_on", "test") != "validation":
            out.append(str(f))
    return out


def grid_edge_rule() -> str:
    """The grid-edge rule (:mod:`bnexp.analysis.grid_edges`) in one sentence: what DRY_RUN prints and the "rule" of
    the designs' record (grid_edges.json). The designs word it here, below the report's templates."""
    from bnexp.analysis.grid_edges import FACTOR, MAX_ADDED

    return (f"grid-edge rule: a rate chosen at its grid's edge gets the next factor-{FACTOR:g} rate beyond that edge "
            "on the tuning seeds, and the choice is made again, until it is interior, the rate last added fails "
            f"on every tuning seed, or {MAX_ADDED} rates were added beyond the edge (then the claim is marked "
            "'edge')")


def edge_mark_text(state) -> str | None:
    """The mark of a choice the grid-edge rule left at an edge (an :class:`bnexp.analysis.grid_edges.EdgeState`'s
    ``mark`` code) as the designs' plans and record write it: "edge (3 rates added beyond it)", ...; None for
    an interior choice (the report writes a claim's mark the same way: templates/rules_and_bounds.md.j2)."""
    from bnexp.analysis.grid_edges import MAX_ADDED

    return {"failed": "edge (the next rate beyond it failed on every tuning seed)",
            "limit": f"edge ({MAX_ADDED} rates added beyond it)", "single": "edge (a grid of one rate)"}.get(state.mark)


def one_stage(overrides: list[str]) -> bool:
    """Whether a held-out design (MNIST, the studies: docs/mnist/PLAN.md, docs/studies/PLAN.md) runs one stage:
    the extra ``overrides`` set ``seed``, so the grids run on those seeds and no evaluation stage follows."""
    return any(o.split("=", 1)[0] == "seed" for o in overrides)


@dataclass
class Decision:
    """What a part runs next, decided from the sweep folders as they are at that moment (a part's stages:
    the blocks of a later stage are decided from the results of the earlier ones; docs/mnist/PLAN.md,
    docs/studies/PLAN.md, docs/ics/PLAN.md, docs/cifar/PLAN.md).

    Attributes:
        blocks: the blocks to run now; [] nothing (every run is complete, or nothing can start); None: not
            decidable before the part starts (its inputs are an earlier part's runs: the ICS study's rates in
            reproduce_all.sh), :attr:`Part.decide` is asked then.
        messages: printed when the decision is taken into use, before its blocks (what was chosen and why).
        last: no decision follows these blocks (a one-stage design): :attr:`Part.decide` is not asked again.
        prepare: run when the decision is taken into use, before its blocks (the ICS study's ics_design.json).
    """

    blocks: list[Block] | None
    messages: list[str] = field(default_factory=list)
    last: bool = False
    prepare: Callable[[], object] | None = None


def decision(messages: list[str], blocks: list[Block], last: bool = False) -> Decision:
    """A :class:`Decision` whose messages are shown only when it has blocks to run."""
    return Decision(blocks, messages if blocks else [], last)


@dataclass
class Part:
    """One sweep folder of a script: its stages, its plan and where its report goes.

    A part runs decision after decision: :attr:`first` (taken when the script plans, from the sweep folders
    as they are then: DRY_RUN prints it, the preflight validates it), then after each batch of blocks
    :attr:`decide` is asked again from the folders as they are then, until a decision has no blocks, is
    ``last``, or repeats the blocks that just ran (their runs failed: the part stops, exit code 1).

    Attributes:
        title: what the output calls it ("MNIST part"). sweep_dir: the folder. docs_dir: where the report is
            copied ("" for nowhere).
        first: the decision at planning time. decide: the next decision, from the sweep folders now (None:
            ``first`` is the only one).
        plan: the DRY_RUN text. seconds: the estimated wall time of what is left (what is always needed).
        max_seconds: the worst case when later stages decide how much runs (the CIFAR-10 ladder: every ladder
            to its cap); None: the same as ``seconds``.
        study: the study's name (study.json is written) or None. after: commands run after the blocks.
    """

    title: str
    sweep_dir: Path
    docs_dir: str
    first: Decision
    plan: str = ""
    seconds: float = 0.0
    decide: Callable[[], Decision] | None = None
    study: str | None = None
    after: list[list[str]] = field(default_factory=list)
    validate: list[Block] = field(default_factory=list)  # further blocks to validate (the later stages' blocks)
    cost: Callable[[int, bool], float] | None = None  # seconds of one run (steps, BN on): plan from the configs
    ladders: Callable[[], str] | None = None  # the CIFAR-10 ladder: ladders.txt, written after the blocks
    max_seconds: float | None = None

    @property
    def blocks(self) -> list[Block]:
        """The first decision's blocks ([] when it is taken only when the part starts)."""
        return self.first.blocks or []


def decide(p: Part) -> Decision:
    """``p``'s next decision from its sweep folders now, each run folder read once
    (:func:`bnexp.runfolders.rundir.summaries_read_once`)."""
    from bnexp.runfolders.rundir import summaries_read_once

    with summaries_read_once():
        return p.decide()


def run_stages(p: Part, call: Callable[[list[str], Path], int | None]) -> tuple[int | None, bool]:
    """Run ``p``'s blocks decision after decision (see :class:`Part`), each block by ``call(command, sweep_dir)``
    (None: go on; else the exit code to stop the script with).

    Returns:
        (the exit code to stop with or None, whether the part stopped because a decision repeated the blocks
        that had just run: their runs are still missing, failed jobs).
    """
    d, previous = p.first if p.first.blocks is not None else decide(p), None
    while True:
        if d.blocks and [b.args for b in d.blocks] == previous:
            print("error: these runs are still missing after they ran (failed jobs, see above); stopping:\n"
                  + "\n".join(shlex.join(b.command) for b in d.blocks), file=sys.stderr)
            return None, True
        if d.prepare is not None:
            d.prepare()
        for m in d.messages:
            print(m)
        for i, b in enumerate(d.blocks or (), 1):
            print(f"{p.title}: block {i}/{len(d.blocks)}: {b.label}", flush=True)
            stop = call(b.command, p.sweep_dir)
            if stop is not None:
                return stop, False
        if not d.blocks or d.last or p.decide is None:
            return None, False
        previous, d = [b.args for b in d.blocks], decide(p)


def plan_from_configs(p: Part, found: list[tuple[list[list[str]], object]], jobs: int) -> None:
    """The plan of a part without one of its own, from its blocks' composed configs (``found``:
    :func:`bnexp.designs.preflight.check_parts`): per block its runs, steps, runs still to do and minutes on
    ``jobs`` parallel jobs (:attr:`Part.cost`), and the total; and its first decision keeps only the blocks with a
    run still to do (a block whose every run is complete would start a multirun that bnexp skips job by job;
    DRY_RUN then says "commands: none"). Sets ``p.plan``, ``p.seconds`` and ``p.first.blocks``; a part with a
    plan, or without a :attr:`Part.cost`, is left as it is."""
    if p.plan or p.cost is None:
        return
    lines, total, left = [], 0.0, []
    for b, (block_jobs, cfg) in zip(p.blocks, found):
        steps, bn = int(cfg.trainer.max_steps), bool(cfg.bn.enabled)
        todo = len(block_jobs) - len(complete_jobs(p.sweep_dir, b, block_jobs))
        secs = math.ceil(todo / jobs) * p.cost(steps, bn)
        total += secs
        lines.append(f"{p.title}, {b.label}: {len(block_jobs)} runs of {steps:,} steps, {todo} to run, "
                     f"~{secs / 60:.1f} min")
        left += [b] if todo else []
    p.first.blocks = left
    lines.append(f"{p.title}: estimated wall time: {total / 60:.0f} min with {jobs} parallel jobs, assuming "
                 "an idle machine (one core per job; the probes not counted)")
    p.plan, p.seconds = "\n".join(lines), total
