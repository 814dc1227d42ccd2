"""Data-parallel training: the process group, the replicas' shares of a mini-batch, rank-0 writing.

``torchrun --standalone --nproc-per-node=N -m bnexp train ...`` starts N processes
(*replicas*) with ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``
in their environment. :func:`setup` turns that into a ``torch.distributed`` process group
(gloo on CPU, NCCL on CUDA); without those variables the run is one process, N = 1.

``trainer.batch_size`` is always the *global* mini-batch m: every replica draws the same
seeded global mini-batch of m example indices and keeps its own contiguous share of m/N
(:func:`replica_share`), so with ``bn.sync=true`` the N replicas together do exactly the
one-process computation. Only rank 0 writes the run directory (:func:`is_main`).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from bnexp.errors import ConfigError, UserError

_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Replicas:
    """Where this process stands among the replicas of one run.

    Attributes:
        rank: 0..world_size-1 (0 writes the outputs).
        world_size: N, the number of replicas.
        local_rank: the rank on this node (picks the GPU ``cuda:local_rank``).
        backend: ``gloo``, ``nccl``, or None when there is no process group (N = 1).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def env_world_size() -> int:
    """N from torchrun's ``WORLD_SIZE`` (1 when not launched by torchrun).

    Raises:
        UserError: ``WORLD_SIZE`` or ``RANK`` is set but not an integer.
    """
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise UserError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not an integer; launch data-parallel "
                        "runs with torchrun --nproc-per-node=N -m bnexp train ...") from None


def env_rank() -> int:
    """This process's rank from torchrun's ``RANK`` (0 when not launched by torchrun)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        raise UserError(f"RANK={os.environ['RANK']!r} is not an integer") from None


def setup(device: torch.device, timeout_s: float = 300.0) -> Replicas:
    """Join the process group torchrun describes in the environment (nothing to do for N = 1).

    Backend: NCCL when ``device`` is CUDA, gloo otherwise. On CUDA each replica uses
    ``cuda:LOCAL_RANK``; the caller moves the model there (see :func:`replica_device`).
    Idempotent: an already initialized default group is reused.

    Args:
        device: the training device chosen by ``trainer.device``.
        timeout_s: how long collectives wait for the other replicas before failing.

    Returns:
        the :class:`Replicas` of this process.

    Raises:
        UserError: WORLD_SIZE > 1 without the rest of torchrun's environment (RANK,
            MASTER_ADDR, MASTER_PORT), or torch built without distributed support.
    """
    world = env_world_size()
    if world <= 1:
        return Replicas()
    missing = [k for k in _ENV if k not in os.environ]
    if missing:
        raise UserError(f"WORLD_SIZE={world} but {', '.join(missing)} not set: start data-parallel runs with "
                        "torchrun --standalone --nproc-per-node=N -m bnexp train ...")
    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed support; run with one process")
    backend = "nccl" if device.type == "cuda" else "gloo"
    local_rank = int(os.environ["LOCAL_RANK"])
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s))
    return Replicas(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                    backend=dist.get_backend())


def replica_device(device: torch.device, replicas: Replicas) -> torch.device:
    """The device of this replica: ``cuda:LOCAL_RANK`` for CUDA runs, else ``device`` unchanged."""
    if device.type == "cuda" and replicas.distributed:
        return torch.device("cuda", replicas.local_rank)
    return device


def teardown() -> None:
    """Leave the process group (no-op without one)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def current() -> Replicas:
    """The :class:`Replicas` of the initialized default group, or N = 1 without one."""
    if dist.is_available() and dist.is_initialized():
        return Replicas(rank=dist.get_rank(), world_size=dist.get_world_size(),
                        local_rank=int(os.environ.get("LOCAL_RANK", "0")), backend=dist.get_backend())
    return Replicas()


def is_main() -> bool:
    """True in the process that writes outputs: rank 0, or the only process."""
    return current().rank == 0


def per_replica_batch_size(batch_size: int, world_size: int, group_initialized: bool | None = None) -> int:
    """The share m/N of the global mini-batch m that each of N replicas computes.

    Args:
        batch_size: the global mini-batch size m (``trainer.batch_size``).
        world_size: N.
        group_initialized: whether a process group exists (default: ask torch.distributed).

    Returns:
        m / N.

    Raises:
        ConfigError: N does not divide m (key ``trainer.batch_size``).
        UserError: N > 1 without a process group (the replicas could not exchange gradients).
    """
    if group_initialized is None:
        group_initialized = dist.is_available() and dist.is_initialized()
    if world_size > 1 and not group_initialized:
        raise UserError(f"{world_size} replicas requested but no torch.distributed process group exists; "
                        "start data-parallel runs with torchrun --nproc-per-node=N -m bnexp train ...")
    if world_size < 1 or batch_size % world_size:
        raise ConfigError("trainer.batch_size", batch_size,
                          f"the global mini-batch must split evenly across the {world_size} replicas "
                          f"(a multiple of {world_size})")
    return batch_size // world_size


def replica_share(global_batch: torch.Tensor, replicas: Replicas) -> torch.Tensor:
    """This replica's contiguous share of a global mini-batch (of indices or of examples).

    Replica r keeps rows [r*m/N, (r+1)*m/N): concatenating the shares in rank order gives
    the global mini-batch back, so per-replica BN sees examples r*m/N.. and a ghost batch
    of size m/N in one process sees the same examples.

    Args:
        global_batch: (m, ...) the same on every replica.
        replicas: this process's place.

    Returns:
        (m/N, ...) view.

    Raises:
        ConfigError: N does not divide m.
    """
    share = per_replica_batch_size(global_batch.shape[0], replicas.world_size, replicas.world_size == 1
                                   or (dist.is_available() and dist.is_initialized()))
    return global_batch[replicas.rank * share:(replicas.rank + 1) * share]


def any_replica(flag: bool, replicas: Replicas) -> bool:
    """True if ``flag`` is true on any replica (one all-reduce when N > 1).

    Used for decisions all replicas must take at the same step (stop on a signal, divergence).
    """
    if not replicas.distributed:
        return flag
    t = torch.tensor([1.0 if flag else 0.0],
                     device="cuda" if replicas.backend == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def broadcast_object(obj, replicas: Replicas, src: int = 0):
    """Rank ``src``'s ``obj`` on every replica (e.g. the run directory rank 0 chose)."""
    if not replicas.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier(replicas: Replicas) -> None:
    """Wait until every replica gets here (no-op for N = 1)."""
    if replicas.distributed:
        dist.barrier()


def average_buffers(module: torch.nn.Module, replicas: Replicas) -> None:
    """Replace every floating-point buffer (BN running mean/var) by its average over the replicas.

    With per-replica BN (``bn.sync=false``) each replica keeps running statistics of its own
    share; the running average is linear, so their mean is the running average of the
    replicas' mean statistics (what :class:`bnexp.bn_sync.GhostBatchNorm` keeps in one process).
    """
    if not replicas.distributed:
        return
    for b in module.buffers():
        if b.is_floating_point():
            dist.all_reduce(b, op=dist.ReduceOp.SUM)
            b.div_(replicas.world_size)
