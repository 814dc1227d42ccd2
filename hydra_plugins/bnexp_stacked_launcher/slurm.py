"""``hydra/launcher=slurm``: hydra-submitit-launcher's SLURM launcher, refusing in one line where there is no SLURM.

conf/hydra/launcher/slurm.yaml keeps every key of the plugin's ``submitit_slurm`` (docs/cluster.md) and only
names :class:`SlurmLauncher` as its ``_target_``. Without it, ``bnexp train -m hydra/launcher=slurm ...`` on a
machine without SLURM ends in submitit's ``RuntimeError: Could not detect "srun"`` and its traceback (exit 1);
with it, the sweep is refused as ``hydra/launcher=stacked_slurm`` refuses it (:func:`require_srun`): one
``bnexp: error:`` line naming the launcher and the local one that runs the same jobs here, exit 2, and the sweep
folder's ``multirun.yaml`` put back as it was (:mod:`bnexp.runfolders.sweepconfig`).
"""

import shutil
from typing import Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher


def require_srun(launcher: str, instead: str) -> None:
    """Refuse a SLURM launcher on a machine without SLURM (no ``srun`` on the PATH, which is what submitit's
    SLURM executor looks for).

    Args:
        launcher: the launcher as the user chose it, e.g. ``hydra/launcher=slurm``.
        instead: what runs the same jobs on this machine, e.g. ``hydra/launcher=local runs the same jobs here``.

    Raises:
        bnexp.errors.UserError: no ``srun`` on the PATH.
    """
    if shutil.which("srun") is None:
        from bnexp.errors import UserError

        raise UserError(f"{launcher} needs SLURM, and this machine has no srun; {instead}")


class SlurmLauncher(SubmititSlurmLauncher):
    """hydra-submitit-launcher's ``SlurmLauncher`` (one SLURM array task per run, its keys unchanged) that first
    checks for SLURM (:func:`require_srun`)."""

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Submit the jobs as the plugin does.

        Raises:
            bnexp.errors.UserError: no SLURM on this machine (no ``srun``), before anything is submitted.
        """
        require_srun("hydra/launcher=slurm", "hydra/launcher=local runs the same jobs here (each run a local "
                                             "process)")
        return super().launch(job_overrides, initial_job_idx)
