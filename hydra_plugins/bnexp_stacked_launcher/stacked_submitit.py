"""``hydra/launcher=stacked_slurm`` / ``stacked_local``: each stack of a sweep is ONE submitit job.

The stacks are those of ``hydra/launcher=stacked`` (:func:`~hydra_plugins.bnexp_stacked_launcher.stacked_launcher.plan_stacks`,
:func:`bnexp.config.stacks.group_runs`: at most ``max_stack`` runs that differ only in stackable keys); the
jobs are submitted as hydra-submitit-launcher submits one job per run (its ``BaseSubmititLauncher``: the same
config keys, executor parameters, ``<sweep dir>/.submitit/%j`` logs, pickled Hydra singletons), but one
submitit job -- one SLURM array task, or one local process with ``executor=local`` -- trains a whole stack
(:func:`~hydra_plugins.bnexp_stacked_launcher.stacked_launcher.run_stack`, as ``hydra/launcher=stacked`` does
in its workers).

Time limit and preemption: submitit sends its signal (SIGUSR2) ``signal_delay_s`` before the limit; the stack's
step loop (:func:`bnexp.train.stack_loop.train_stack`, :class:`bnexp.train.preemption.PreemptionGuard`) stops at the
end of that step, every run of the stack saves its checkpoint and is recorded ``interrupted``, then submitit's
handler calls :meth:`StackedSubmititLauncher.checkpoint` (this launcher is a ``submitit.helpers.Checkpointable``
callable: it returns the same call again) and requeues the job, at most ``max_num_timeout`` times after a
timeout. The requeued job runs the same stack: a finished run is skipped, every other run resumes from its
checkpoint (bnexp's ordinary per-run path, :func:`bnexp.cli.run_job`).
"""

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, LocalQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
from omegaconf import OmegaConf

from hydra_plugins.bnexp_stacked_launcher.slurm import require_srun
from hydra_plugins.bnexp_stacked_launcher.stacked_launcher import in_sweep_order, plan_stacks, run_stack

log = logging.getLogger(__name__)

_TARGET = "hydra_plugins.bnexp_stacked_launcher.stacked_submitit.StackedSubmititLauncher"

#: the submitit executors a stack can be submitted to (``hydra.launcher.executor``)
EXECUTORS = ("slurm", "local")


@dataclass
class StackedSlurmConf(SlurmQueueConf):
    """``hydra/launcher=stacked_slurm``'s keys: submitit_slurm's (sbatch resources per stack) plus these."""

    _target_: str = _TARGET
    executor: str = "slurm"  # the submitit executor: slurm or local
    max_stack: int = 32      # the most runs trained together as one batched model (one submitit job)


@dataclass
class StackedLocalConf(LocalQueueConf):
    """``hydra/launcher=stacked_local``'s keys: submitit_local's plus these."""

    _target_: str = _TARGET
    executor: str = "local"
    max_stack: int = 32
    signal_delay_s: int = 30   # SIGUSR2 this many seconds before timeout_min
    max_num_timeout: int = 3   # requeues after a timeout


ConfigStore.instance().store(group="hydra/launcher", name="bnexp_stacked_submitit_slurm", node=StackedSlurmConf,
                             provider="bnexp")
ConfigStore.instance().store(group="hydra/launcher", name="bnexp_stacked_submitit_local", node=StackedLocalConf,
                             provider="bnexp")


class StackedSubmititLauncher(BaseSubmititLauncher):
    """Hydra launcher: the sweep's stacks, each trained as one batched model in one submitit job.

    Args:
        executor: ``slurm`` (SLURM job array, one task per stack) or ``local`` (one local process per stack).
        max_stack: the most runs of one stack (>= 1).
        params: the executor's keys (``timeout_min``, ``partition``, ...: hydra-submitit-launcher's).
    """

    def __init__(self, executor: str = "slurm", max_stack: int = 32, **params: Any) -> None:
        super().__init__(**params)
        self.executor, self.max_stack = executor, max_stack

    def __call__(self, work: list[tuple[int, list[str]]], singleton_state: dict[Any, Any]) -> list[JobReturn]:
        """In the submitit job: train one stack (``work``: (job index, overrides) per run); its JobReturns.

        Raises:
            SystemExit: submitit's requeue after the preemption signal, or a run was interrupted.
        """
        assert self.hydra_context is not None and self.config is not None and self.task_function is not None
        return run_stack(self.hydra_context, self.config, self.task_function, work, singleton_state)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's requeue hook (after every run of the stack saved its checkpoint): the same stack again."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, *args, **kwargs)

    def _executor(self):
        """submitit's executor with this launcher's parameters: SLURM's as hydra-submitit-launcher builds it
        (``submitit.AutoExecutor``, executor keys prefixed ``slurm_``); the local one as ``submitit.LocalExecutor``
        itself, which also takes ``signal_delay_s`` (AutoExecutor passes it no key of its own but ``setup``)."""
        import submitit

        params = dict(self.params)
        folder = params.pop("submitit_folder")
        max_num_timeout = params.pop("max_num_timeout", 3)
        if self.executor == "local":
            executor = submitit.LocalExecutor(folder=folder, max_num_timeout=max_num_timeout)
            executor.update_parameters(**params)
            return executor
        require_srun("hydra/launcher=stacked_slurm (hydra.launcher.executor=slurm)",
                     "hydra/launcher=stacked_local runs the same stacks here")
        executor = submitit.AutoExecutor(cluster="slurm", folder=folder, slurm_max_num_timeout=max_num_timeout)
        base = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
        return executor

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Group the jobs into stacks, submit one submitit job per stack, wait for them; one JobReturn per job,
        in the order given.

        Raises:
            bnexp.errors.UserError: ``max_stack`` < 1, an unknown ``executor`` (key named); ``executor=slurm``
                where there is no SLURM (no ``srun``).
            submitit.core.utils.UncompletedJobError: a stack's job ended without a result (a run interrupted
                and not requeued, the job killed), as with hydra-submitit-launcher.
        """
        from bnexp.errors import ConfigError

        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        if self.executor not in EXECUTORS:
            raise ConfigError("hydra.launcher.executor", self.executor, "must be one of " + ", ".join(EXECUTORS))
        if not isinstance(self.max_stack, int) or self.max_stack < 1:
            raise ConfigError("hydra.launcher.max_stack", self.max_stack, "must be an integer >= 1")
        executor = self._executor()
        stacks, work = plan_stacks(self.hydra_context, self.config, job_overrides, initial_job_idx, self.max_stack,
                                   f"(one submitit job each, executor {self.executor})")
        state = Singleton.get_state()
        jobs = executor.map_array(self, work, [state] * len(work))
        log.info("Submitted %d stack job(s): %s", len(jobs), " ".join(str(j.job_id) for j in jobs))
        return in_sweep_order(stacks, [j.results()[0] for j in jobs], len(job_overrides))
