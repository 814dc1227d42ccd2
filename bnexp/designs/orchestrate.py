"""The sweep scripts' one orchestrator: plan, validate, launch, stop, report.

``python -m bnexp.designs.orchestrate mnist|cifar|ics|study NAME|all [OVERRIDE ...]`` is what
scripts/reproduce_mnist.sh, reproduce_cifar.sh, ics_study.sh, study.sh and reproduce_all.sh run (each a
thin wrapper that keeps its name, environment variables and documented behaviour). For every sweep folder
of the script (a *part*) it

1. **plans**: the blocks, each one ``bnexp train -m ...`` call, from the designs of this package
   (:mod:`.mnist`, :mod:`.ladder`, :mod:`.studies`; ics: :mod:`.ics`, BN / no BN, then noisy BN at NOISE_SCALES),
   as :class:`Decision` s of its stages: the first from the sweep folders as they are, each later one
   (:attr:`Part.decide`: MNIST's and the studies' evaluation stage, the ladder's next rung, the ICS study's
   rates in reproduce_all.sh) from the folders after the blocks before it ran;
2. **validates** every environment value and extra override once, before anything runs
   (:mod:`.preflight`): one line ``error: ...`` and exit code 2;
3. with ``DRY_RUN=1`` prints the plan (each run once), exactly the commands it will run and the estimated
   wall time, and trains nothing;
4. **launches** the blocks one after the other, each in its own process group
   (:class:`bnexp.runfolders.supervise.Supervisor`): SIGINT/SIGTERM is forwarded to every process it started,
   what is left after 8 s is killed, no further block starts, and the exit code is 130 / 143; the runs are
   recorded ``interrupted`` with their checkpoints, so the same command resumes them. A block refused as a
   whole (exit 2: every later block would be refused the same way) stops the script; a block with failed
   jobs (exit 1) does not: the report covers the rest and the exit code is 1;
5. **reports**: ``bnexp report SWEEP_DIR``, the report copied into the docs folder of a default run
   (``all``: then ``bnexp report --update-docs`` rewrites the docs' numbers from the copies).

Environment (each script documents its own): JOBS, DRY_RUN, LAUNCHER (the Hydra launcher of every block,
``hydra/launcher=LAUNCHER``; default stacked, given ``hydra.launcher.n_jobs=JOBS`` as joblib is), SWEEP_DIR, DOCS_DIR,
BNEXP_DATA_ROOT, VERIFY_CHECKSUMS; mnist: EVALUATION_SEEDS, STEPS_PER_S_BN, STEPS_PER_S_NO_BN, STARTUP_S; cifar: SCALE,
PRESETS, SEEDS, LADDER, STEPS_PER_S, PRECISION; ics: MNIST_DIR, CIFAR_DIR, MNIST_DOCS_DIR, CIFAR_DOCS_DIR, NOISE_SCALES,
CIFAR_OVERRIDES, MNIST_TUNING_DIR.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import time
import warnings
from pathlib import Path

from bnexp.designs import preflight
from bnexp.designs.preflight import Block, Env
from bnexp.designs.stages import (Decision, Part, decision, grid_edge_rule, one_stage, plan_from_configs, run_stages,
                                  split_of)
from bnexp.designs.studytime import StudyClock, record_study
from bnexp.errors import UserError

SCRIPTS = {"mnist": "reproduce_mnist.sh", "cifar": "reproduce_cifar.sh", "ics": "ics_study.sh",
           "study": "study.sh", "all": "reproduce_all.sh"}
ICS_PROBES = ("monitor.grad_ics=true", "monitor.landscape=true", "monitor.grad_ics_every=1000",
              "monitor.landscape_every=1000", "monitor.shift_max_values=200000")
ICS_CPU = dict(steps_per_s=15.0, overhead_s=40.0)  # one CIFAR-10 job at the cpu scale (docs/cifar/PLAN.md)
REPORT_GLOBS = ("report.md", "report.json", "report.csv", "*.png", "ladders.txt")


# ----- the parts of each script ------------------------------------------------------------------------


def mnist_parts(env: Env, extra: list[str]) -> list[Part]:
    """scripts/reproduce_mnist.sh: the four blocks of :mod:`.mnist` in SWEEP_DIR (mnist_fig1), in two stages
    (docs/mnist/PLAN.md and its amendment): every grid on the tuning seeds, read on the validation split
    (``data.validation``, :data:`.stages.VALIDATION`), then each network at its chosen rates on the full training set
    scored on test, on EVALUATION_SEEDS (default :data:`.mnist.EVALUATION_SEEDS`, 1000-1004); one stage (the grid on
    the given seeds, on test) when the overrides set ``seed``.

    Raises:
        UserError: EVALUATION_SEEDS shares a seed with the tuning seeds; or SWEEP_DIR holds complete tuning runs
            that read the test set (the one-stage design's), which the two-stage design must not reuse.
    """
    from bnexp.analysis.grid_edges import write_record
    from bnexp.designs import mnist

    sweep = env.sweep_dir("SWEEP_DIR", "outputs/sweeps/mnist_fig1", extra)
    docs = env.docs_dir("DOCS_DIR", "docs/mnist", not extra)
    rates = {True: env.number("STEPS_PER_S_BN", mnist.STEPS_PER_S[True]),
             False: env.number("STEPS_PER_S_NO_BN", mnist.STEPS_PER_S[False])}
    startup = env.number("STARTUP_S", mnist.STARTUP_S, minimum=0.0)
    blocks_, seeds, steps, _ = mnist.apply_overrides(extra)
    evaluation = () if one_stage(extra) else (env.int_list("EVALUATION_SEEDS") or mnist.EVALUATION_SEEDS)
    clash = sorted(set(evaluation) & set(seeds))
    if clash:
        raise UserError(f"EVALUATION_SEEDS: seed(s) {', '.join(map(str, clash))} are tuning seeds "
                        f"({', '.join(map(str, seeds))}); the evaluation needs fresh seeds")
    on_test = mnist.tuning_runs_on_test(sweep, blocks_, seeds) if evaluation else []
    if on_test:
        raise UserError(f"SWEEP_DIR={sweep}: {len(on_test)} complete tuning run(s) read the test set, e.g. "
                        f"{on_test[0]} (the one-stage design's; docs/mnist/PLAN.md tunes on the validation split): "
                        "move them aside or choose another SWEEP_DIR")
    common = env.launcher_args(sweep) + ["trainer.num_threads=1", "trainer.progress=false"]

    def stage() -> tuple | ValueError:
        """:func:`.mnist.stage_blocks` from SWEEP_DIR now (each tuning run read once), or why stage 2 cannot be
        chosen."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # runs in progress or failed: treated as not complete
            try:
                return mnist.stage_blocks(sweep, blocks_, seeds, evaluation)
            except ValueError as exc:
                return exc

    def decide(st=None) -> Decision:
        st = stage() if st is None else st
        if isinstance(st, ValueError):  # nothing runs: the report of the tuning runs shows why
            return Decision([], last=not evaluation)
        msgs, todo, on = st
        suffix = " (evaluation)" if evaluation and on == tuple(evaluation) else \
            " (grid-edge rule: added rates)" if evaluation and msgs else ""
        split = split_of(on, evaluation)  # stage 1: the validation split; stage 2: the test set
        d = decision(msgs, [Block(b.name + suffix, common + mnist.block_overrides(b, on, steps, split), extra)
                            for b in todo], last=not evaluation)
        if evaluation and msgs:  # the rule's record for the report (grid_edges.json), when the stage runs
            d.prepare = lambda: write_record(sweep, mnist.edge_record(sweep, blocks_, seeds), grid_edge_rule())
        return d

    st = stage()
    text, secs = mnist.plan_and_seconds(sweep, env.jobs, extra, rates, startup, evaluation,
                                        None if isinstance(st, ValueError) else st)
    return [Part("MNIST", sweep, docs, decide(st), text, secs, decide,
                 validate=[Block(b.name, common + mnist.block_overrides(b, seeds, steps,
                                                                         split_of(seeds, evaluation)), extra)
                           for b in blocks_])]


def cifar_parts(env: Env, extra: list[str]) -> list[Part]:
    """scripts/reproduce_cifar.sh: the budget ladder of :mod:`.ladder`, batch after batch, in SWEEP_DIR."""
    from bnexp.designs import ladder, precision_check
    from bnexp.analysis.frontier import load_runs

    scale = env.get("SCALE", "cpu")
    presets_name = env.get("PRESETS", "default")
    try:
        lad = ladder.parse_ladder(scale, env.get("LADDER") or None)
    except ValueError as exc:
        raise UserError(f"SCALE / LADDER: {exc}".replace("--ladder", "LADDER")) from None
    seeds = env.int_list("SEEDS") or lad.seeds
    extra_seeds = tuple(s for s in env.int_list("EXTRA_SEEDS") or () if s not in seeds)
    presets = ladder.PRESET_SETS.get(presets_name) or tuple(x.strip() for x in presets_name.split(",") if x.strip())
    unknown = [x for x in presets if x not in lad.starts]
    if unknown or not presets:
        raise UserError(f"PRESETS={presets_name}: unknown preset(s) {unknown}; use default, all or names of "
                        f"{sorted(lad.starts)}")
    sweep = env.sweep_dir("SWEEP_DIR", f"outputs/sweeps/cifar_frontier_{scale}", extra)
    default = not extra and scale == "cpu" and not env.get("LADDER") and not env.get("SEEDS") and \
        presets_name in ("default", "all")
    docs = env.docs_dir("DOCS_DIR", "docs/cifar", default)
    precision = env.get("PRECISION", "fp32")
    if precision not in ("fp32", "bf16"):
        raise UserError(f"PRECISION={precision}: use fp32 or bf16")
    if precision == "bf16" and scale == "cpu":
        import torch

        from bnexp.train.precision import bf16_supported
        if not bf16_supported(torch.device("cpu")):
            raise UserError("PRECISION=bf16: this CPU has no native bfloat16 kernels (oneDNN reports none), so "
                            "bf16 would be emulated (about 10x slower than fp32) and the check would compare fp32 "
                            "with fp32; use PRECISION=fp32")
    tail = [f"trainer.num_threads={0 if scale == 'gpu' else 1}", "trainer.progress=false",
            f"data.verify_checksums={env.verify}", f"scale={scale}"]
    common = env.launcher_args(sweep) + tail
    checked = env.launcher_args(precision_check.check_dir(sweep)) + tail  # the bf16 check's runs

    def state():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # runs in progress or failed: the plan treats them as missing
            return load_runs(sweep)

    def rung(runs) -> tuple[list[str], list[Block]]:
        """The ladder's next batches from ``runs`` (the sweep's runs now): (messages, blocks). With
        PRECISION=bf16, the bf16 check (:mod:`.precision_check`) runs first once it is ready, and its verdict
        decides the precision of every later block."""
        msgs, batches = ladder.next_batches(runs, lad, presets, seeds, extra_seeds)
        blocks = [Block(f"{b.preset} at {b.budget} steps", common + b.overrides(), extra) for b in batches]
        if precision != "bf16" or not batches or not precision_check.ready(runs, lad, seeds):
            return msgs, blocks
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_runs = load_runs(precision_check.check_dir(sweep))
        v = precision_check.verdict(runs, check_runs, lad, scale, seeds)
        if v is None:
            fp32, bf16 = precision_check.missing(runs, check_runs, lad, scale, seeds)
            return (["the bf16 check (docs/cifar/PLAN.md) before the next rung: the tuned baseline and bn_x5 at "
                     f"{' and '.join(f'{b:,}' for b in precision_check.BUDGETS[scale])} steps, fp32 and bf16"],
                    [Block(f"bf16 check: {b.preset} at {b.budget} steps, fp32", common + b.overrides(), extra)
                     for b in fp32]
                    + [Block(f"bf16 check: {b.preset} at {b.budget} steps, bf16",
                             checked + b.overrides() + [precision_check.BF16_OVERRIDE], extra) for b in bf16])
        precision_check.write(sweep, v)
        msgs = msgs + precision_check.table_text(v).splitlines()
        if not v["passed"]:
            return msgs, blocks
        return msgs, [Block(b.label + " (bf16)", b.own + [precision_check.BF16_OVERRIDE], b.user) for b in blocks]

    runs = state()
    msgs, first = rung(runs)
    later = [Block(p, common + ladder.Batch(p, lad.starts[p], lad.tune_lrs[:1], (0.0,), seeds).overrides(), extra)
             for p in presets]
    steps_per_s = env.number("STEPS_PER_S", 15.0)

    def ladders() -> str:
        runs = state()
        text = ladder.plan_text(ladder.plan_table(runs, lad, presets, seeds, extra_seeds), env.jobs, steps_per_s,
                                40.0)[0]
        stops = ladder.ladder_stops(runs, lad, ladder.presets_in_folder(runs, lad, presets), seeds)
        return "\n".join([text, "ladders (the rule that stopped each, or what it runs next):",
                          *(f"  {line}" for line in stops)]) + "\n"

    text, always, at_most = ladder.plan_text(ladder.plan_table(runs, lad, presets, seeds, extra_seeds), env.jobs,
                                             steps_per_s, 40.0)
    text = "\n".join([text, *msgs, "the later batches are decided from the results of these (the ladder's next "
                      "stage, python -m bnexp.designs.ladder next)" if first else "the ladder is complete"])
    return [Part(f"CIFAR-10 ladder ({scale})", sweep, docs, decision(msgs, first), text, always,
                 lambda: decision(*rung(state())), validate=later, ladders=ladders, max_seconds=at_most)]


def ics_parts(env: Env, extra: list[str], defer: bool = False) -> list[Part]:
    """scripts/ics_study.sh (docs/ics/PLAN.md): MNIST, then CIFAR-10; BN, no BN, then noisy BN at NOISE_SCALES.
    MNIST: each network at its rate chosen on the MNIST reproduction's tuning seeds in MNIST_TUNING_DIR
    (:func:`bnexp.designs.ics.held_out_rates`; an ``lr=`` override instead sets every rate), seeds 0-4; CIFAR-10:
    the preset's rate, seeds 0-2. Each part's sweep folder gets ``ics_design.json`` before its runs.

    Raises:
        UserError: MNIST_TUNING_DIR's grids are not complete (not with DRY_RUN, which shows why, nor with
            ``defer``: reproduce_all.sh runs the MNIST reproduction first; the part then decides its rates
            when it starts).
    """
    from bnexp.designs import ics
    from bnexp.analysis.ics_design import write_design

    noise_env = env.get("NOISE_SCALES")
    scales = env.number_list("NOISE_SCALES") or (1.0, 3.0, 10.0)
    noise = ",".join(f"{s:g}" for s in scales)
    cifar_extra = env.get("CIFAR_OVERRIDES").split()
    mnist_dir = env.sweep_dir("MNIST_DIR", "outputs/sweeps/ics_mnist", extra)
    cifar_dir = env.sweep_dir("CIFAR_DIR", "outputs/sweeps/ics_cifar", extra + cifar_extra)
    mnist_docs = env.docs_dir("MNIST_DOCS_DIR", "docs/ics/mnist", not extra and not noise_env)
    cifar_docs = env.docs_dir("CIFAR_DOCS_DIR", "docs/ics/cifar", not extra and not noise_env and not cifar_extra)
    tuning_dir = Path(env.get("MNIST_TUNING_DIR") or ics.TUNING_DIR)
    seeds = ics.numbers(ics.override_value(extra, "seed"), int) or ics.MNIST_SEEDS
    steps = int(ics.override_value(extra, "trainer.max_steps") or ics.MAX_STEPS)
    given = ics.numbers(ics.override_value(extra, "lr"))
    common = env.launcher_args(mnist_dir) + ["trainer.num_threads=1", "trainer.progress=false",
                                             "trainer.eval_every=500", "trainer.hist_every=500",
                                             "seed=" + ",".join(map(str, ics.MNIST_SEEDS)), *ICS_PROBES]

    def decide() -> tuple[dict | None, list[str], str | None]:
        """(rates or None, the plan's lines on them, the reason they are undecided or None)."""
        if ics.override_value(extra, "lr") is not None:
            return None, [f"rates: every network at the lr override lr={ics.override_value(extra, 'lr')} (not "
                          "chosen on held-out seeds)"], None
        try:
            rates, lines = ics.held_out_rates(tuning_dir)
        except ValueError as exc:
            return None, [], (f"MNIST_TUNING_DIR: the MNIST reproduction's tuning grids in {tuning_dir} are not "
                              f"complete ({exc}): run scripts/reproduce_mnist.sh (its stage 1, the grids on seeds "
                              f"{', '.join(map(str, ics.TUNING_SEEDS))}) first, set MNIST_TUNING_DIR to its "
                              "SWEEP_DIR, or give the rate with lr=RATE")
        return rates, ["rates: each network at its own rate, chosen on held-out tuning seeds "
                       "(docs/ics/PLAN.md):", *lines], None

    def mnist_blocks(rates: dict | None) -> list[Block]:
        lr = {k: f"lr={v:g}" for k, v in rates.items()} if rates else dict.fromkeys(
            ("BN", "no BN", "noisy BN"), f"lr={ics.override_value(extra, 'lr') or 0.12}")  # the override wins
        equal = [Block(f"{ics.EQUAL_RATE}, {lr['no BN']} (the equal-rate matching, docs/ics/PLAN.md)",
                       common + ["bn=true", lr["no BN"], ics.SUBDIR["plain"]], extra)] if equal_rate(rates) else []
        return [Block(f"BN at {lr['BN']}", common + ["bn=true", lr["BN"], ics.SUBDIR["plain"]], extra),
                Block(f"no BN at {lr['no BN']}", common + ["bn=false", lr["no BN"], ics.SUBDIR["plain"]], extra),
                Block(f"noisy BN at strengths {noise}, {lr['noisy BN']}",
                      common + ["bn=noisy", lr["noisy BN"], ics.SUBDIR["noisy"]], [f"bn.noise_scale={noise}", *extra]),
                *equal]

    def equal_rate(rates: dict | None) -> float | None:
        """No BN's rate when each net has its own and BN's differs (BN runs there too), else None."""
        return rates["no BN"] if rates and abs(rates["no BN"] - rates["BN"]) > 1e-12 * rates["BN"] else None

    def per_block(rates: dict | None) -> dict:
        per = {k: (v,) for k, v in rates.items()} if rates else dict.fromkeys(("BN", "no BN", "noisy BN"),
                                                                              given or (0.12,))
        return {**per, **({ics.EQUAL_RATE: (equal_rate(rates),)} if equal_rate(rates) else {})}

    def design(rates: dict | None) -> dict:
        return {"rates": rates or {}, "own_rates": rates is not None, "tuning_dir": str(tuning_dir) if rates else None,
                "tuning_seeds": list(ics.TUNING_SEEDS) if rates else [], "evaluation_seeds": list(seeds),
                "target": ics.TARGET, "rate_source": "the MNIST reproduction's tuning rule (bnexp.designs.mnist.choose)"
                f" at {ics.TARGET:.0%} on its tuning seeds" if rates else "the lr override or the configs' rate",
                "equal_rate_lr": equal_rate(rates)}

    def todo(rates: dict | None) -> list[Block]:
        names = ics.run_names(per_block(rates), scales, seeds)
        return [b for b, ns in zip(mnist_blocks(rates), names.values())
                if any(not ics.mnist.is_done(mnist_dir, n) for n in ns)]

    rates, head, problem = decide()
    per = per_block(rates)
    if problem:
        head = [f"the MNIST part's rates come from the MNIST reproduction's tuning grids: {problem}"
                + ("; reproduce_all.sh runs the MNIST reproduction first, and this part chooses its rates when it "
                   "starts" if defer else ""),
                "its runs (named here at lr 0.12; the chosen rates replace it), estimated:"]
    text, secs = ics.plan_and_seconds(mnist_dir, ics.run_names(per, scales, seeds), steps, env.jobs,
                                      [f"seeds {', '.join(map(str, seeds))}; " + head[0], *head[1:]])

    def start() -> Decision:
        """The rates decided when the part starts (reproduce_all.sh: after the MNIST reproduction ran)."""
        r, lines, why = decide()
        if why:
            return Decision([], [f"ICS study, MNIST part not started: {why}"], last=True)
        return Decision(todo(r), lines, last=True, prepare=lambda: write_design(mnist_dir, design(r)))

    if problem:
        first = Decision(None)
    else:
        blocks = todo(rates)
        first = Decision(blocks, last=True,
                         prepare=(lambda: write_design(mnist_dir, design(rates))) if blocks else None)
    mnist_part = Part("ICS study, MNIST part", mnist_dir, mnist_docs, first, text, secs, start,
                      validate=mnist_blocks(rates))
    cifar_own = [f"data.verify_checksums={env.verify}", "+experiment=bn_baseline", "scale=cpu",
                 "seed=" + ",".join(map(str, ics.CIFAR_SEEDS))]
    user = extra + cifar_extra
    common_c = env.launcher_args(cifar_dir) + ["trainer.num_threads=1", "trainer.progress=false", *cifar_own,
                                               *ICS_PROBES]
    cifar_seeds = ics.numbers(ics.override_value(user, "seed"), int) or ics.CIFAR_SEEDS
    cifar_design = {"rates": {}, "own_rates": False, "tuning_dir": None, "tuning_seeds": [],
                    "evaluation_seeds": list(cifar_seeds), "rate_source": "the bn_baseline preset's rate",
                    "constant_rate_runs": list(ics.CONSTANT)}
    cifar = Part("ICS study, CIFAR-10 part", cifar_dir, cifar_docs, Decision(
        [Block("BN and no BN", common_c + ["bn=true,false"], user),
         Block("BN and no BN at a constant rate (the equal-rate matching, docs/ics/PLAN.md)",
               common_c + ["bn=true,false", *ics.CONSTANT, ics.SUBDIR["constant"]], user),
         Block(f"noisy BN at strengths {noise}", common_c + ["bn=noisy"], [f"bn.noise_scale={noise}", *user])],
        last=True, prepare=lambda: write_design(cifar_dir, cifar_design)))
    cifar.cost = lambda steps_, bn: ICS_CPU["overhead_s"] + steps_ / ICS_CPU["steps_per_s"]
    if problem and not (env.dry_run or defer):
        preflight.check_blocks(mnist_part.validate + cifar.blocks)  # a refused override is named first
        raise UserError(problem)
    return [mnist_part, cifar]


def study_parts(env: Env, name: str, extra: list[str]) -> list[Part]:
    """scripts/study.sh NAME: the multiruns of :mod:`.studies` still to do, into SWEEP_DIR (study_NAME), in two
    stages (docs/studies/PLAN.md and its second amendment of 2026-11-29): every grid on the tuning seeds, read on
    the validation split (``data.validation=``:data:`.stages.VALIDATION`), then each configuration at the rate(s)
    chosen there (:func:`.studies.evaluation_batches`, the report's rule) on the full training set, scored on
    test, on the fresh :data:`.studies.EVALUATION_SEEDS` (1000-1004); one stage (the grids on the given seeds, on
    test) when the overrides set ``seed``.

    Raises:
        UserError: SWEEP_DIR holds complete tuning runs that read the test set (the design before the amendment),
            which the two-stage design must not reuse; or an override Hydra's grammar rejects.
    """
    from bnexp.analysis.grid_edges import write_record
    from bnexp.analysis.tuning import TUNING_SEEDS
    from bnexp.designs import studies
    from bnexp.designs.stages import runs_on_test, split_text

    evaluation = () if one_stage(extra) else studies.EVALUATION_SEEDS
    study = studies.build_studies(two_stage=bool(evaluation))[name]
    sweep = env.sweep_dir("SWEEP_DIR", f"outputs/sweeps/study_{name}", extra)
    docs = env.docs_dir("DOCS_DIR", f"docs/studies/{name}", not extra)
    common = env.launcher_args(sweep)
    ex = tuple(extra)
    ex2 = tuple(o for o in extra if o.split("=", 1)[0] != "lr")  # stage 2 trains the chosen rates
    every = [Block(b.label, common + b.all_overrides(), extra) for b in study.batches]
    try:
        jobs = studies.expand(study, ex)
    except Exception as exc:  # Hydra's grammar: worded by the preflight below
        preflight.check_blocks(every[:1])
        raise UserError(str(exc)) from None
    on_test = runs_on_test(sweep, [j.folder for j in jobs]) if evaluation else []
    if on_test:
        raise UserError(f"SWEEP_DIR={sweep}: {len(on_test)} complete tuning run(s) read the test set, e.g. "
                        f"{on_test[0]} (the design before docs/studies/PLAN.md's second amendment, which tunes on "
                        "the validation split): move them aside or choose another SWEEP_DIR")
    seeds = ", ".join(map(str, evaluation))

    def stage2() -> studies.StageTwo:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # runs in progress or failed: treated as not complete
            return studies.stage_two(study, sweep, evaluation, ex)

    def state(expanded=None) -> tuple[list[int], tuple | ValueError | None]:
        """From SWEEP_DIR now (each run read once): (stage 1's batches with a run to do, stage 2's (messages,
        batches) once stage 1 is complete, or why it cannot be chosen; None in stage 1 or a one-stage study)."""
        pending = sorted({j.batch for j in expanded or studies.expand(study, ex) if not studies.is_done(sweep, j)})
        if pending or not evaluation:
            return pending, None
        try:
            return pending, stage2()
        except ValueError as exc:
            return pending, exc

    def decide(st=None) -> Decision:
        pending, chosen = state() if st is None else st
        if pending or not evaluation:
            return decision([], [every[i] for i in pending], last=not evaluation)
        if isinstance(chosen, ValueError):  # nothing runs: the report of the tuning runs shows why
            return Decision([])
        msgs, batches = chosen.messages, chosen.batches
        todo = sorted({j.batch for j in studies.expand(studies.Study(name, "", tuple(batches)), ex2)
                       if not studies.is_done(sweep, j)})
        if chosen.extending:
            return decision([f"stage 1 goes on ({grid_edge_rule()}):", *msgs],
                            [Block(batches[i].label, common + batches[i].all_overrides(), list(ex2)) for i in todo])
        d = decision([f"stage 2 (evaluation seeds {seeds}): the rates chosen on the tuning seeds "
                      f"{', '.join(map(str, TUNING_SEEDS))}:", *msgs],
                     [Block(batches[i].label + " (evaluation)", common + batches[i].all_overrides(), list(ex2))
                      for i in todo])
        if d.blocks:  # the rule's record for the report (grid_edges.json), when stage 2 runs
            d.prepare = lambda: write_record(sweep, chosen.record, grid_edge_rule())
        return d

    st = state(jobs)
    first = decide(st)
    pending = st[0]
    est = studies.estimate(study, env.jobs, ex, sweep_dir=sweep)
    text = studies.plan_text(study, est, env.jobs, {i: shlex.join(every[i].command) for i in pending})
    seconds = est["seconds"]
    if evaluation:
        text += f"\nstage 1's {grid_edge_rule()}"
        exact = not pending
        try:
            if isinstance(st[1], ValueError):
                raise st[1]
            if exact and st[1].extending:  # the rule's added rates first: stage 2 is chosen after them
                add = studies.Study(name, "the grid-edge rule's added rates on the tuning seeds", tuple(st[1].batches))
                est_add = studies.estimate(add, env.jobs, ex2, sweep_dir=sweep)
                text = "\n".join([text, *st[1].messages, studies.plan_text(add, est_add, env.jobs, {
                    i: shlex.join(b.command) for i, b in enumerate(first.blocks)})])
                seconds += est_add["seconds"]
                exact = False
            batches = st[1].batches if exact else studies.evaluation_estimate_batches(study, evaluation, ex)
        except ValueError as exc:
            batches, text = [], text + f"\nstage 2 not planned: {exc}"
        st2 = studies.Study(name, f"each configuration at its chosen rate(s) on the evaluation seeds {seeds}"
                            + ("" if exact else " (decided after stage 1; estimated at its most: one rate per "
                               "objective of the study)"), tuple(batches))
        est2 = studies.estimate(st2, env.jobs, ex2, sweep_dir=sweep)
        text = "\n".join([f"stage 1 (tuning seeds {', '.join(map(str, TUNING_SEEDS))}): every grid, "
                          f"{split_text(split_of(TUNING_SEEDS, evaluation))}:", text,
                          f"stage 2 (evaluation), {split_text(split_of(evaluation, evaluation))}: "
                          + studies.plan_text(st2, est2, env.jobs).split(": ", 1)[1],
                          f"both stages: {est['runs'] + est2['runs']} runs{'' if exact else ' at most'}; estimated "
                          f"wall time {(seconds + est2['seconds']) / 60:.0f} min with {env.jobs} parallel jobs"])
        seconds += est2["seconds"]
    after = [[sys.executable, "-m", "bnexp.train.inference_eval", str(sweep)]] if name == "inference_statistics" else []
    return [Part(f"study {name}", sweep, docs, first, text, seconds, decide, study=name, after=after,
                 validate=[b for b in every if b not in first.blocks])]


def all_parts(env: Env, extra: list[str]) -> list[Part]:
    """scripts/reproduce_all.sh: MNIST, CIFAR-10, the ICS study and the five studies, in this order."""
    from bnexp.designs.studies import STUDIES

    for name in ("SWEEP_DIR", "DOCS_DIR", "MNIST_DIR", "CIFAR_DIR", "MNIST_DOCS_DIR", "CIFAR_DOCS_DIR"):
        if name in env.environ:
            raise UserError(f"{name} names one sweep's folder; reproduce_all.sh runs every sweep into its default "
                            f"folder: unset {name} (or run the one script that takes it)")
    parts = mnist_parts(env, extra) + cifar_parts(env, extra) + ics_parts(env, extra, defer=True)
    for name in STUDIES:
        parts += study_parts(env, name, extra)
    return parts


# ----- dry run, run, report ----------------------------------------------------------------------------


def dry_run(parts: list[Part], env: Env) -> None:
    """Print what runs and how long it takes first (:func:`plan_summary`), then each part's plan and the exact
    commands, as a user would type them (:func:`shell_line`); train nothing."""
    print(plan_summary(parts, env.jobs))
    for p in parts:
        print(f"\n{p.title}: the planned runs of {p.sweep_dir}")
        if p.plan:
            print(p.plan)
        print(f"commands ({len(p.blocks)}):" if p.blocks else "commands: decided when the part starts (see above)"
              if p.first.blocks is None else "commands: none (every run is complete)")
        for b in p.blocks:
            print(f"$ {shell_line(b.command)}")


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 360 else f"{seconds / 60:.0f} min"


def plan_summary(parts: list[Part], jobs: int) -> str:
    """DRY_RUN's first lines: one per part (its title and sweep folder, the expected wall time and, where later
    stages decide how much runs, the worst case), then the total; with ``jobs`` parallel jobs on an idle
    machine (the cost models of :mod:`bnexp.designs`)."""
    lines = [f"DRY_RUN: nothing is trained. What runs ({jobs} parallel jobs, idle machine):"]
    for p in parts:
        worst = p.max_seconds if p.max_seconds is not None else p.seconds
        more = f", at most {_hours(worst)} (later stages decide)" if worst > p.seconds + 1 else ""
        lines.append(f"  {p.title}: about {_hours(p.seconds)}{more}  [{p.sweep_dir}]")
    if len(parts) > 1:
        total = sum(p.seconds for p in parts)
        worst = sum(p.max_seconds if p.max_seconds is not None else p.seconds for p in parts)
        lines.append(f"  in all: about {_hours(total)}" + (f", at most {_hours(worst)}" if worst > total + 1 else ""))
    return "\n".join(lines)


# characters that keep their meaning inside double quotes: "$", "`", "\\", '"' (and "!" in an interactive bash)
_DOUBLE_QUOTE_SPECIAL = ("$", "`", "\\", '"', "!")


def shell_line(command: list[str]) -> str:
    """``command`` as one shell line a user would type: each argument as :func:`shlex.quote` writes it, except
    one holding single quotes (Hydra's quoted values, ``hydra.sweep.dir='/x'``), which is written in double
    quotes with ``$`` and the other special characters escaped instead of shlex's ``'"'"'`` chains.
    ``shlex.split`` of the line gives back ``command``."""
    out = []
    for arg in command:
        quoted = shlex.quote(arg)
        if "'" in arg:
            inner = "".join("\\" + c if c in _DOUBLE_QUOTE_SPECIAL else c for c in arg)
            if "!" not in arg:
                quoted = f'"{inner}"'
        out.append(quoted)
    return " ".join(out)


def copy_report(sweep: Path, docs: str) -> None:
    """Copy report.md/.json/.csv and the report's figures (the ``*.png`` at the top of ``sweep``; the runs are
    in subfolders) into ``docs`` ("" : nothing)."""
    if not docs:
        return
    if not (sweep / "report.json").is_file():
        print(f"no report in {sweep} (see the errors above): nothing copied into {docs}", file=sys.stderr)
        return
    Path(docs).mkdir(parents=True, exist_ok=True)
    for pattern in REPORT_GLOBS:
        for f in sorted(sweep.glob(pattern)):
            if f.is_file():
                shutil.copy(f, Path(docs) / f.name)
    print(f"copied the report of {sweep} into {docs}; `bnexp report --update-docs` rewrites the docs' numbers "
          "from it")


def _train_part(p: Part, call) -> tuple[int | None, bool]:
    """A part's training: its stages, the commands after them, its ladders' summary.

    Returns:
        (None, or the exit code a stopped command asks to stop with; whether runs are missing).
    """
    stop, missing = run_stages(p, call)
    if stop is not None:
        return stop, missing
    for cmd in p.after:
        stop = call(cmd, p.sweep_dir)
        if stop is not None:
            return stop, missing
    if p.ladders is not None and p.sweep_dir.is_dir():
        text = p.ladders()
        (p.sweep_dir / "ladders.txt").write_text(text)
        print(text[text.index("ladders ("):].rstrip())
    return None, missing


def run_parts(parts: list[Part], env: Env, sup, update_docs: bool) -> int:
    """Run every part's blocks, then its report; the script's exit code (see the module docstring)."""
    bnexp = preflight.bnexp_argv()
    rc = 0

    def call(cmd: list[str], watch: Path | None = None) -> int | None:
        """Run one command; None to go on, else the exit code to stop with."""
        nonlocal rc
        # a study's call counts as it goes (a tick every minute of a command and after it): what is measured so
        # far survives a SIGKILL
        code = sup.run(cmd, watch=watch, heartbeat=clock.tick if clock is not None else None)
        if clock is not None:
            clock.tick()
        if sup.exit_code is not None:
            print(f"interrupted ({signal.Signals(sup.signum).name}): every process the script started is stopped"
                  f"{' (some after the grace time, killed)' if sup.killed else ''}; runs in progress are recorded "
                  "interrupted with their checkpoints: re-run the same command to resume", file=sys.stderr)
            return sup.exit_code
        if code == 0:
            return None
        if code == 1:  # failed jobs: the other runs go on, the script ends non-zero
            rc = 1
            return None
        print(f"error: stopped: {shlex.join(cmd)} ended with exit code {code}; the later blocks would end the same "
              "way (see its message above)", file=sys.stderr)
        return code if 0 < code < 256 else 1

    clock = None
    for p in parts:
        start = time.time()
        if p.study:
            record_study(p.sweep_dir, p.study)
            if not p.blocks:
                print(f"every run of {p.sweep_dir} is complete")
            else:  # every call that trains counts in the measured wall time, from its start
                clock = StudyClock(p.sweep_dir, p.study, env.jobs)
        try:
            stop, missing = _train_part(p, call)
        finally:  # to its end, one a signal stopped too
            wall = clock.tick() if clock is not None else round(time.time() - start)
            clock = None
        if stop is not None:
            return stop
        rc = 1 if missing else rc  # failed jobs: the report covers the rest
        print(f"{p.title}: sweep wall time: {wall} s ({env.jobs} parallel jobs)")
        stop = call(bnexp + ["report", str(p.sweep_dir)])
        if stop is not None:
            return stop
        copy_report(p.sweep_dir, p.docs_dir)
    if update_docs:
        stop = call(bnexp + ["report", "--update-docs"])
        if stop is not None:
            return stop
    return rc


def build(script: str, argv: list[str], env: Env) -> tuple[list[Part], list[str]]:
    """The parts of ``script`` with its arguments (``study``: NAME first), and the extra overrides.

    Raises:
        UserError: an unknown study, or any environment value or override that is refused.
    """
    from bnexp.designs.studies import STUDIES

    if script == "study":
        if not argv or argv[0] not in STUDIES:
            raise UserError(f"usage: scripts/study.sh NAME [extra Hydra overrides ...]; NAME is one of: "
                            f"{' '.join(STUDIES)}")
        extra = argv[1:]
        preflight.check_overrides(extra)
        return study_parts(env, argv[0], extra), extra
    preflight.check_overrides(argv)
    builders = {"mnist": mnist_parts, "cifar": cifar_parts, "ics": ics_parts, "all": all_parts}
    return builders[script](env, argv), argv


def main(argv: list[str] | None = None) -> int:
    """``python -m bnexp.designs.orchestrate SCRIPT [ARGS ...]``: exit 0; 1 (failed jobs, see above); 2 a
    refused input (one ``error:`` line); 130 / 143 after SIGINT / SIGTERM."""
    from bnexp.runfolders.rundir import summaries_read_once
    from bnexp.runfolders.supervise import Supervisor

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in SCRIPTS:
        print(f"usage: python -m bnexp.designs.orchestrate {{{'|'.join(SCRIPTS)}}} [ARGS ...]", file=sys.stderr)
        return 2
    script, rest = args[0], args[1:]
    with Supervisor() as sup:  # from here on a signal stops everything the script started
        try:
            env = Env(os.environ)
            with summaries_read_once():  # the plan: one state of the sweep folders, each run read once
                parts, extra = build(script, rest, env)
                for p, found in zip(parts, preflight.check_parts(parts, env)):
                    plan_from_configs(p, found, env.jobs)
        except UserError as exc:
            print("error: " + " ".join(str(exc).split()), file=sys.stderr)
            return 2
        if sup.exit_code is not None:
            return sup.exit_code
        if env.dry_run:
            dry_run(parts, env)
            return 0
        update = script == "all" and not extra and all(p.docs_dir for p in parts)
        return run_parts(parts, env, sup, update)


if __name__ == "__main__":
    sys.exit(main())
