"""Data-parallel training: the process group, the replicas' shares of a mini-batch, rank-0 writing.

``python -m bnexp.train.torchrun --standalone --nproc-per-node=N -m bnexp train ...`` (torchrun,
ending as bnexp ends: :mod:`bnexp.train.torchrun`) starts N processes
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

from bnexp.config.checks import uses_batch_statistics
from bnexp.errors import ConfigError, UserError
from bnexp.train.torchrun import LAUNCH

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
                        f"runs with {LAUNCH}") from None


def env_rank() -> int:
    """This process's rank from torchrun's ``RANK`` (0 when not launched by torchrun).

    Raises:
        UserError: ``RANK`` is not an integer, or not in 0..WORLD_SIZE-1 (such a replica would wait
            for ever for peers that are not coming).
    """
    try:
        rank = int(os.environ.get("RANK", "0"))
    except ValueError:
        raise UserError(f"RANK={os.environ['RANK']!r} is not an integer") from None
    world = env_world_size()
    if world > 1 and not 0 <= rank < world:
        raise UserError(f"RANK={rank} is not a rank of WORLD_SIZE={world} replicas (0..{world - 1}): start "
                        f"data-parallel runs with {LAUNCH}")
    return rank


RENDEZVOUS_ENV = "BNEXP_RENDEZVOUS_TIMEOUT_S"
RENDEZVOUS_DEFAULT_S = 60.0


def rendezvous_timeout_s() -> float:
    """How long the replicas wait for each other when they start (seconds): ``$BNEXP_RENDEZVOUS_TIMEOUT_S``,
    default 60. A replica that is not there by then ends the run with one line (:func:`setup`).

    Raises:
        UserError: the variable is not a positive number.
    """
    text = os.environ.get(RENDEZVOUS_ENV, "")
    if not text:
        return RENDEZVOUS_DEFAULT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UserError(f"{RENDEZVOUS_ENV}={text!r} must be a positive number of seconds")
    return value


NOTICE_S = 3.0
"""Seconds a replica waits for its peers in silence before it says that it is waiting (:class:`Rendezvous`)."""
GIVE_UP_SLACK_S = 5.0
"""Seconds past the stated rendezvous timeout after which a replica still waiting gives up on its own
(:class:`Rendezvous`); within them torch's own timeout ends the wait with its reason."""


def _stderr_line(text: str) -> None:
    import sys

    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


class Rendezvous:
    """The wait of replica ``rank`` of ``world`` for its peers at ``where`` (torch's ``init_process_group``), told and
    bounded: after :data:`NOTICE_S` seconds (half of ``wait_s`` when that is shorter) without its peers it says, once,
    that it is waiting and for how long (``wait_s``); and it keeps that timeout even where torch's own does not (a
    client's TCP connect to an address that drops packets blocks for the kernel's connect timeout, minutes, between
    torch's checks of its deadline): :data:`GIVE_UP_SLACK_S` seconds past ``wait_s`` it prints the one error line,
    runs ``on_give_up`` (the caller removes the run folder it made) and ends the process with exit code 2.

    Use as a context manager around the wait; leaving it cancels both timers.
    """

    def __init__(self, rank: int, world: int, where: str, wait_s: float, on_give_up=lambda: None):
        import threading

        self.rank, self.world, self.where, self.wait_s, self.on_give_up = rank, world, where, wait_s, on_give_up
        self._done = threading.Event()
        self._timers = [threading.Timer(min(NOTICE_S, wait_s / 2), self._notice),
                        threading.Timer(wait_s + GIVE_UP_SLACK_S, self._give_up)]
        for t in self._timers:
            t.daemon = True

    def __enter__(self) -> "Rendezvous":
        for t in self._timers:
            t.start()
        return self

    def __exit__(self, *exc) -> bool:
        self._done.set()
        for t in self._timers:
            t.cancel()
        return False

    def _notice(self) -> None:
        if not self._done.is_set():
            _stderr_line(f"bnexp: replica {self.rank} of {self.world}: waiting for the other replicas at {self.where}, "
                         f"for at most {self.wait_s:g} s ({RENDEZVOUS_ENV}=SECONDS to change it).")

    def _give_up(self) -> None:
        if self._done.is_set():
            return
        _stderr_line(f"bnexp: error: {timeout_message(self.rank, self.world, self.where, self.wait_s, 'no answer')}")
        try:
            self.on_give_up()
        finally:
            os._exit(2)  # the main thread is blocked inside torch's C++ wait: nothing else can end it now


def timeout_message(rank: int, world: int, where: str, wait_s: float, reason: str) -> str:
    """The one line of a replica whose peers did not all join at ``where`` within ``wait_s`` seconds."""
    return (f"replica {rank} of {world}: the other replicas did not all join at {where} within {wait_s:g} s "
            f"({reason}); start all {world} (torchrun's --nproc-per-node), or give slow starters more time with "
            f"{RENDEZVOUS_ENV}=SECONDS.")


def setup(device: torch.device, timeout_s: float = 300.0, on_give_up=lambda: None) -> Replicas:
    """Join the process group torchrun describes in the environment (nothing to do for N = 1).

    Backend: NCCL when ``device`` is CUDA, gloo otherwise. On CUDA each replica uses
    ``cuda:LOCAL_RANK``; the caller moves the model there (see :func:`replica_device`).
    Idempotent: an already initialized default group is reused.

    Args:
        device: the training device chosen by ``trainer.device``.
        timeout_s: how long collectives wait for the other replicas before failing (the start waits
            :func:`rendezvous_timeout_s`, says so after :data:`NOTICE_S` seconds and keeps that timeout:
            :class:`Rendezvous`).
        on_give_up: run before the process ends with exit code 2 when the start's wait outlasts its timeout
            and torch's own timeout has not ended it (:class:`Rendezvous`).

    Returns:
        the :class:`Replicas` of this process.

    Raises:
        UserError: WORLD_SIZE > 1 without the rest of torchrun's environment (RANK,
            MASTER_ADDR, MASTER_PORT), a RANK outside 0..WORLD_SIZE-1, a replica missing at the
            rendezvous (:func:`rendezvous_timeout_s`), or torch built without distributed support.
    """
    world = env_world_size()
    if world <= 1:
        return Replicas()
    missing = [k for k in _ENV if k not in os.environ]
    if missing:
        raise UserError(f"WORLD_SIZE={world} but {', '.join(missing)} not set: start data-parallel runs with "
                        f"{LAUNCH}")
    rank = env_rank()
    if not dist.is_available():
        raise UserError("this torch build has no torch.distributed support; run with one process")
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        local_rank = int(os.environ["LOCAL_RANK"])
    except ValueError:
        raise UserError(f"LOCAL_RANK={os.environ['LOCAL_RANK']!r} is not an integer") from None
    if not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(local_rank)
        wait = rendezvous_timeout_s()
        # rank 0 hosts the store and waits once; torch's store client tries a second time after its first
        # timeout, so the other ranks get half, and every replica gives up within ``wait``
        where = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        try:
            with Rendezvous(rank, world, where, wait, on_give_up):
                dist.init_process_group(backend=backend,
                                        timeout=datetime.timedelta(seconds=wait if rank == 0 else wait / 2))
        except dist.DistError as exc:  # the store's timeouts and connection failures
            raise UserError(timeout_message(rank, world, where, wait, str(exc).splitlines()[0][:120])) from None
        set_timeout = getattr(dist, "set_timeout", None) or getattr(dist.distributed_c10d, "_set_pg_timeout", None)
        if wait != timeout_s and set_timeout is not None:
            # the collectives wait longer than the rendezvous (rank 0 measures while the others wait)
            set_timeout(datetime.timedelta(seconds=timeout_s))
    return Replicas(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                    backend=dist.get_backend())


def replica_device(device: torch.device, replicas: Replicas) -> torch.device:
    """The device of this replica: ``cuda:LOCAL_RANK`` for CUDA runs, else ``device`` unchanged."""
    if device.type == "cuda" and replicas.distributed:
        return torch.device("cuda", replicas.local_rank)
    return device


def teardown() -> None:
    """Leave the process group (no-op without one). A group whose peer has ended may fail to close (gloo:
    "Connection reset by peer"); the process is ending then and has said how its run ended, so that error is
    dropped rather than printed as a traceback after the run's one line."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001  (RuntimeError, DistError: the peer is gone)
            pass


def current() -> Replicas:
    """The :class:`Replicas` of the initialized default group, or N = 1 without one."""
    if dist.is_available() and dist.is_initialized():
        return Replicas(rank=dist.get_rank(), world_size=dist.get_world_size(),
                        local_rank=int(os.environ.get("LOCAL_RANK", "0")), backend=dist.get_backend())
    return Replicas()


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
                        f"start data-parallel runs with {LAUNCH}")
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


def all_sum(values: list[float], replicas: Replicas) -> list[float]:
    """The sums over the replicas of a few numbers (one all-reduce when N > 1)."""
    if not replicas.distributed:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device="cuda" if replicas.backend == "nccl" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


@dataclass(frozen=True)
class BNPlan:
    """How the BN layers of an N-replica run are built (:func:`bn_plan`).

    Attributes:
        share: m/N, the examples of the global mini-batch m each replica computes.
        ghost_batch_size: the model's ghost batch size (None: whole mini-batch), see
            :class:`bnexp.nets.bn.GhostBatchNorm`.
        sync: convert the plain BN layers to synchronized ones (:func:`bnexp.nets.bn.sync_batch_norm`).
        average_buffers: BN running averages are per replica and are averaged every step.
    """

    share: int
    ghost_batch_size: int | None
    sync: bool
    average_buffers: bool


def check_bn_config(cfg, world_size: int | None = None) -> None:
    """Refuse BN settings that cannot run with N replicas (also N = 1: ghost batches).

    Called before a run starts (by ``bnexp train`` right after :func:`bnexp.config.schema.validate`,
    so a refused run leaves no folder) and by :func:`bn_plan`.

    Args:
        cfg: the run config.
        world_size: N (default: torchrun's ``WORLD_SIZE``, 1 without torchrun).

    Raises:
        ConfigError: ``bn.ghost_batch_size`` < 2, not dividing ``trainer.batch_size`` (or its share
            m/N), or with ``bn.impl=reference``; N not dividing ``trainer.batch_size``; batch statistics
            over one example per replica (``bn.sync=false`` with m/N = 1); ``bn=noisy``
            or ``bn.impl=reference`` with N > 1 (one-process features).
    """
    n = env_world_size() if world_size is None else int(world_size)
    m, bn = int(cfg.trainer.batch_size), cfg.bn
    ghost = bn.get("ghost_batch_size")
    if n > 1 and m % n:
        per_replica_batch_size(m, n, True)  # raises the ConfigError naming trainer.batch_size
    if not bn.enabled:
        return
    if ghost is not None:
        if ghost < 2 or m % ghost:
            raise ConfigError("bn.ghost_batch_size", ghost, f"a ghost batch needs >= 2 examples and must divide "
                              f"trainer.batch_size={m} (null: the whole mini-batch)")
        if str(bn.get("impl", "torch")) != "torch":
            raise ConfigError("bn.impl", bn.impl, "ghost batches need bn.impl=torch")
    if n == 1:
        return
    if uses_batch_statistics(bn) and (ghost is not None or not bn.get("sync", True)) and m // n < 2:
        raise ConfigError("trainer.batch_size", m, f"with bn.sync=false each of the {n} replicas normalizes over "
                          f"its own share m/N = {m // n} example; BN needs m > 1 (paper Sec. 3.1): use "
                          f"trainer.batch_size >= {2 * n}, or bn.sync=true (statistics over all {m} examples)")
    if bn.get("noise", False):
        raise ConfigError("bn", "noisy", f"noisy BN runs in one process only (this run has {n} replicas)")
    if str(bn.get("impl", "torch")) != "torch":
        raise ConfigError("bn.impl", bn.impl, f"data-parallel runs ({n} replicas) need bn.impl=torch")
    if ghost is not None and (m // n) % int(ghost):
        raise ConfigError("bn.ghost_batch_size", ghost, f"must divide each replica's share of the mini-batch, "
                          f"trainer.batch_size/{n} = {m // n}")


def bn_plan(cfg, replicas: Replicas) -> BNPlan:
    """Which BN statistics a run with N replicas uses (docs/cluster.md, "Which BN statistics").

    - N = 1: as configured (``bn.ghost_batch_size`` or the whole mini-batch).
    - ``bn.ghost_batch_size`` = g with N > 1: each replica's share in ghost batches of g (the
      shares are contiguous, so these are the one-process ghost batches), whatever ``bn.sync``.
    - ``bn.sync=true``: statistics over the global mini-batch (synchronized layers).
    - ``bn.sync=false``: each replica's m/N examples; the model is built with ghost batches of
      m/N, so rank 0's probes on the whole global mini-batch see what the replicas computed.

    Raises:
        ConfigError: N does not divide ``trainer.batch_size``; g does not divide m/N; ``bn=noisy``
            or ``bn.impl=reference`` with N > 1 (one-process features).
        UserError: N > 1 without a process group.
    """
    n = replicas.world_size
    check_bn_config(cfg, n)
    share = per_replica_batch_size(int(cfg.trainer.batch_size), n, None if n > 1 else False)
    bn = cfg.bn
    ghost = bn.get("ghost_batch_size") if bn.enabled else None
    if n == 1 or not bn.enabled:
        return BNPlan(share, ghost, False, False)
    if ghost is not None:
        return BNPlan(share, int(ghost), False, True)
    if bn.get("sync", True):
        return BNPlan(share, None, True, False)
    return BNPlan(share, share, False, True)


def step_seed(seed: int, rank: int, step: int) -> int:
    """The seed of torch's global RNG for ``step`` on replica ``rank`` (N > 1).

    Dropout draws from the global RNG; reseeding it from (seed, rank, step) at every step gives
    each replica its own masks and makes a resumed run draw what the uninterrupted one drew,
    with no per-replica RNG state in the checkpoint.
    """
    return (((int(seed) * 1_000_003) ^ (int(rank) * 998_244_353)) + int(step) * 2_654_435_761) % (2**63 - 1)


def needs_step_seed(model: torch.nn.Module, replicas: Replicas) -> bool:
    """Whether the step loop reseeds torch's global RNG per (replica, step) (:func:`step_seed`).

    Only N > 1 replicas of a model that draws from the global RNG in training (dropout) need
    it: one process keeps a single stream (its state is checkpointed), and without dropout no
    training computation draws from the global RNG (noisy BN has its own generators; the
    sampler and the augmentation too), so reseeding would change nothing but cost time.
    """
    from torch.nn.modules.dropout import _DropoutNd

    return replicas.distributed and any(isinstance(m, _DropoutNd) for m in model.modules())


def local_share(batch: torch.Tensor, replicas: Replicas, share: int) -> torch.Tensor:
    """This replica's rows [rank*share, (rank+1)*share) of a global mini-batch; the batch itself for N = 1.

    The per-step, check-free form of :func:`replica_share` (``share`` = m/N from :func:`bn_plan`).
    """
    if replicas.world_size == 1:
        return batch
    return batch[replicas.rank * share:(replicas.rank + 1) * share]


def data_parallel(model: torch.nn.Module, replicas: Replicas, device: torch.device) -> torch.nn.Module:
    """What the step loop calls: ``model`` itself for N = 1, else DDP around it (gradients averaged
    over the replicas at each backward).

    No buffer broadcast at each forward: BN buffers are identical (``bn.sync``) or averaged by
    :class:`StepAgreement` (torch >= 2.15 renamed ``broadcast_buffers`` to ``forward_sync_buffers``).
    """
    if not replicas.distributed:
        return model
    import inspect

    from torch.nn.parallel import DistributedDataParallel as DDP

    key = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP).parameters
           else "broadcast_buffers")
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **{key: False})


class StepAgreement:
    """What the replicas settle together after every step: one all-reduce (N > 1 only).

    It carries (a) the floating-point BN buffers to average when the replicas keep their own
    running statistics (``bn.sync=false`` or ghost batches): the running average is linear,
    so averaging every step gives every replica the running average of the replicas' mean
    statistics -- what :class:`bnexp.nets.bn.GhostBatchNorm` keeps in one process -- and keeps the
    replicas identical for checkpoints; (b) flags any replica raised (a signal arrived, the
    run diverged), so that all stop at the same step.

    For one process (a replica group of one) both calls return at once: nothing to agree on.

    Host syncs: the all-reduce and the averaging stay on the device; reading the flags back is the one
    host sync. With CUDA replicas (NCCL) the flags are read only where :attr:`read_now` says (the trainer:
    steps where a measurement or a checkpoint is due, which syncs anyway, and the last step), the same
    steps on every replica, so all still stop at one step -- a signal at the next due step, at most
    ``trainer.log_every`` steps later -- and no step where nothing is due waits for the device. CPU
    replicas (gloo, whose all-reduce blocks anyway) read them every step, as before.

    Args:
        replicas: this process's place.
        buffers: the buffers to average (empty: only flags).

    Attributes:
        read_now: None (read every step), or a callable () -> bool saying whether this step's flags are read.
    """

    def __init__(self, replicas: Replicas, buffers: list[torch.Tensor]):
        self.replicas = replicas
        self.buffers = [b for b in buffers if b.is_floating_point()]
        self.sizes = [b.numel() for b in self.buffers]
        self.distributed = replicas.distributed
        self.read_now = None

    def __call__(self, *flags: bool) -> tuple[bool, ...]:
        """Average the buffers in place; returns, per flag, whether any replica raised it (all False at a
        step whose flags are not read: see the class docstring)."""
        if not self.distributed:
            return flags
        dev = self.buffers[0].device if self.buffers else torch.device(
            "cuda" if self.replicas.backend == "nccl" else "cpu")
        parts = [b.detach().reshape(-1).to(torch.float64) for b in self.buffers]
        # built on the host, sent without waiting (a plain host-to-device copy would synchronize)
        parts.append(torch.tensor([1.0 if f else 0.0 for f in flags], dtype=torch.float64).to(dev, non_blocking=True))
        vec = torch.cat(parts)
        dist.all_reduce(vec, op=dist.ReduceOp.SUM)
        offset = 0
        with torch.no_grad():
            for b, k in zip(self.buffers, self.sizes):
                b.copy_((vec[offset:offset + k] / self.replicas.world_size).view_as(b))
                offset += k
        if self.replicas.backend == "nccl" and self.read_now is not None and not self.read_now():
            return tuple(False for _ in flags)
        return tuple(bool(v > 0) for v in vec[offset:].tolist())

    def average_buffers(self) -> None:
        """Average the per-replica BN buffers now (before measurements that read them); a no-op
        for one process or when there are none. Every replica must call it at the same step."""
        if self.distributed and self.buffers:
            self()
