"""``hydra/launcher=stacked``: a multirun's runs grouped into stacks, each stack trained as one batched model.

A Hydra launcher plugin (Hydra's extension point for how a multirun's jobs run; modelled on
hydra-joblib-launcher). :meth:`StackedLauncher.launch` composes every job's config, groups the jobs whose
configs differ only in stackable keys into stacks of at most ``max_stack`` runs
(:func:`bnexp.config.stacks.group_runs`) and runs each stack -- ``n_jobs`` stacks at a time, each in its own
process when ``n_jobs`` > 1 (joblib's loky backend, as hydra-joblib-launcher) -- with
:class:`bnexp.train.stack_loop.StackCoordinator`: every run goes through Hydra's own ``run_job`` (its job
folder, ``.hydra/`` files, ``train.log``, callbacks) and bnexp's per-run path (:func:`bnexp.cli.run_job`:
refusals, skip-if-finished, lock, resume), and the runs that train are stepped together
(:func:`bnexp.train.stack_loop.train_stack`). Returns one ``JobReturn`` per job, in the sweep's order.

Config (``hydra.launcher.*``): ``max_stack`` (default 32) runs per stack, ``n_jobs`` (default 1) stacks at once; a
stack holds at most its share of the jobs (ceil(jobs / n_jobs)), so that every worker gets a stack.
"""


import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger(__name__)


@dataclass
class StackedLauncherConf:
    """``hydra/launcher=stacked``'s keys."""

    _target_: str = "hydra_plugins.bnexp_stacked_launcher.stacked_launcher.StackedLauncher"
    max_stack: int = 32  # the most runs trained together as one batched model
    n_jobs: int = 1      # stacks trained at once (each in its own process when > 1)


ConfigStore.instance().store(group="hydra/launcher", name="stacked", node=StackedLauncherConf, provider="bnexp")


def _job_config(hydra_context: HydraContext, config: DictConfig, overrides: Sequence[str], idx: int) -> DictConfig:
    sweep_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(sweep_config):
        sweep_config.hydra.job.id = f"{sweep_config.hydra.job.name}_{idx}"
        sweep_config.hydra.job.num = idx
    return sweep_config


def run_stack(hydra_context: HydraContext, config: DictConfig, task_function: TaskFunction,
              jobs: list[tuple[int, Sequence[str]]], singleton_state: dict[Any, Any] | None = None) -> list[JobReturn]:
    """Run one stack: each job through Hydra's ``run_job``, the training of those that train together.

    Args:
        jobs: (job index, overrides) of each run of the stack.
        singleton_state: Hydra's singletons, when run in another process (joblib).

    Returns:
        the JobReturn of each job, in order.

    Raises:
        SystemExit: a run was interrupted (Ctrl-C, SIGTERM): the sweep stops as it would with another launcher,
            after every run of the stack saved its checkpoint.
    """
    from bnexp.train.stack_loop import StackCoordinator, route_run_logs

    setup_globals()
    if singleton_state is not None:
        Singleton.set_state(singleton_state)

    def job(idx: int, overrides: Sequence[str]):
        def go() -> JobReturn:
            sweep_config = _job_config(hydra_context, config, overrides, idx)
            HydraConfig.instance().set_config(sweep_config)
            return run_job(hydra_context=hydra_context, config=sweep_config, task_function=task_function,
                           job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        return go

    with route_run_logs() as router:
        outs = StackCoordinator(router).run([job(idx, o) for idx, o in jobs])
    stop = next((o for o in outs if isinstance(o, BaseException)), None)
    if stop is not None:
        raise stop
    return outs  # type: ignore[return-value]


def plan_stacks(hydra_context: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]],
                initial_job_idx: int, size: int, how: str) -> tuple[list[list[int]], list[list[tuple[int, list[str]]]]]:
    """Compose every job's config and group the jobs into stacks of at most ``size`` runs (logged).

    Args:
        job_overrides: each job's overrides, in the sweep's order.
        initial_job_idx: the index of the first job in the sweep.
        size: the most runs of one stack (>= 1).
        how: how the stacks run, for the log line.

    Returns:
        (stacks as lists of positions in ``job_overrides``, each stack's work for :func:`run_stack`: (job index,
        overrides) per run).
    """
    from bnexp.config.stacks import group_runs

    setup_globals()
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    sweep_dir = Path(str(config.hydra.sweep.dir))
    sweep_dir.mkdir(parents=True, exist_ok=True)
    idxs = [initial_job_idx + i for i in range(len(job_overrides))]
    cfgs = []
    for idx, overrides in zip(idxs, job_overrides):
        cfg = _job_config(hydra_context, config, overrides, idx)
        HydraConfig.instance().set_config(cfg)
        cfgs.append(cfg)
    stacks = group_runs(cfgs, size)
    log.info("Stacked launcher: %d jobs in %d stacks of at most %d runs %s, sweep output dir: %s",
             len(job_overrides), len(stacks), size, how, sweep_dir)
    for s, members in enumerate(stacks):
        for i in members:
            log.info("\tstack %d, #%d : %s", s, idxs[i], " ".join(filter_overrides(job_overrides[i])))
    return stacks, [[(idxs[i], list(job_overrides[i])) for i in members] for members in stacks]


def in_sweep_order(stacks: list[list[int]], results: Sequence[Sequence[JobReturn]], n: int) -> list[JobReturn]:
    """The stacks' JobReturns back in the sweep's order (``n`` jobs)."""
    out: list[JobReturn | None] = [None] * n
    for members, rets in zip(stacks, results):
        for i, ret in zip(members, rets):
            out[i] = ret
    return out  # type: ignore[return-value]


class StackedLauncher(Launcher):
    """Hydra launcher: the sweep's runs in stacks trained as one batched model each (module docstring).

    Args:
        max_stack: the most runs of one stack (>= 1).
        n_jobs: stacks trained at once; > 1: each in its own process (joblib, loky backend).
    """

    def __init__(self, max_stack: int = 32, n_jobs: int = 1) -> None:
        self.max_stack, self.n_jobs = int(max_stack), int(n_jobs)
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.task_function, self.hydra_context = config, task_function, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Group the jobs into stacks and run them; one JobReturn per job, in the order given.

        Raises:
            bnexp.errors.UserError: ``max_stack`` or ``n_jobs`` < 1 (key named).
        """
        from bnexp.errors import ConfigError

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        if self.max_stack < 1:
            raise ConfigError("hydra.launcher.max_stack", self.max_stack, "must be >= 1")
        if self.n_jobs < 1:
            raise ConfigError("hydra.launcher.n_jobs", self.n_jobs, "must be >= 1")
        # no stack larger than its share of the jobs: n_jobs workers each get a stack when the runs allow
        size = min(self.max_stack, -(-len(job_overrides) // self.n_jobs))
        stacks, work = plan_stacks(self.hydra_context, self.config, job_overrides, initial_job_idx, size,
                                   f"({self.n_jobs} at a time)")
        if self.n_jobs == 1 or len(stacks) == 1:
            results = [run_stack(self.hydra_context, self.config, self.task_function, w) for w in work]
        else:
            from joblib import Parallel, delayed

            from bnexp.runfolders.sweepsignals import workers_stop_together

            state = Singleton.get_state()
            # one Ctrl-C to the terminal's group: the workers stop their runs with checkpoints, this process waits
            with workers_stop_together(Path(str(self.config.hydra.sweep.dir))):
                results = Parallel(n_jobs=self.n_jobs, backend="loky")(
                    delayed(run_stack)(self.hydra_context, self.config, self.task_function, w, state) for w in work)
        return in_sweep_order(stacks, results, len(job_overrides))
