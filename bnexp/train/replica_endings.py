"""How a data-parallel run (torchrun) ends when a replica refuses, fails or dies: docs/cluster.md, "When a
replica fails".

torchrun's agent watches its replicas: as soon as one exits non-zero it sends SIGTERM to the others
(SIGKILL 30 s later). Outside the training loop's :class:`~bnexp.train.signal_guard.SignalGuard` that SIGTERM
ends a process at once, so each ending below keeps it from cutting a record or a message short:

- a replica of rank > 0 that refuses what rank 0 refuses too does not exit first, or rank 0 could be
  stopped before it has printed the refusal's one line (:func:`replica_refusal_line`, :func:`rank_0_ended_it`);
- when rank 0 dies, a surviving replica's collective fails and it records the run ``interrupted`` in
  rank 0's place (:func:`record_lost_rank0`, called under a guard);
- when another replica dies, rank 0's collective fails: rank 0 records the run ``interrupted`` (resumable
  from its checkpoint) and says so in one line instead of the collective's traceback
  (:func:`a_collective_failed`, :func:`lost_replica_line`), ignoring SIGINT/SIGTERM meanwhile
  (:func:`hold_signals`).

Torch-free: a refusal is decided before torch is imported.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from bnexp.runfolders import rundir
from bnexp.runfolders.start import abandon_run

RANK_0_SAYS_IT_S = 20.0
"""Seconds a refusing replica of rank > 0 waits for rank 0's refusal to end the run (:func:`rank_0_ended_it`)."""


def rank_0_ended_it(stopped=lambda: False) -> bool:
    """A replica of rank > 0 refusing what rank 0 refuses too: wait until torchrun's agent ends this
    process (its SIGTERM, sent once rank 0 has exited; ``stopped()`` says so where a
    :class:`~bnexp.train.signal_guard.SignalGuard` holds the signal) or Ctrl-C, for at most
    :data:`RANK_0_SAYS_IT_S`. Exiting first would make the agent stop rank 0, perhaps before it printed
    the refusal (the run would end with exit code 2 and no word).

    Returns:
        True when stopped; False when nothing ended it within the wait (rank 0 did not refuse the same
        way): this replica must say why itself.
    """
    deadline = time.monotonic() + RANK_0_SAYS_IT_S
    try:
        while time.monotonic() < deadline:
            if stopped():
                return True
            time.sleep(0.05)
    except KeyboardInterrupt:
        return True
    return False


def silent_replica_rank() -> int | None:
    """This process's RANK when it is a torchrun replica of rank > 0 (its refusal is rank 0's too, and rank 0
    says it: one line per run, not one per replica), else None. From the environment torchrun sets."""
    try:
        rank = int(os.environ.get("RANK", "0"))
        return rank if 0 < rank < int(os.environ.get("WORLD_SIZE", "1")) else None
    except ValueError:
        return None


def replica_refusal_line(rank: int, message: str, stopped=lambda: False) -> str | None:
    """What a refusing replica of rank ``rank`` > 0 prints: nothing once rank 0's refusal has ended the run
    (:func:`rank_0_ended_it`), else ``message`` naming the replica."""
    return None if rank_0_ended_it(stopped) else f"replica {rank}: {message}"


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160].rstrip('.') if str(exc) else ''}"


def record_lost_rank0(run_dir: Path, rank: int, exc: BaseException) -> str | None:
    """A replica of rank > 0 whose training failed: when rank 0 no longer holds the run folder's lock
    (it died: the operating system released its lock), take the lock and record the run ``interrupted``
    instead of the ``running`` rank 0 left (:func:`bnexp.runfolders.start.abandon_run`).

    Returns:
        the one line to print, or None while rank 0 still holds the folder (it records the failure itself).
    """
    lock = rundir.RunLock(run_dir)
    try:
        if not lock.acquire():
            return None
    except OSError:
        return None
    try:
        resumable = (Path(run_dir) / rundir.CHECKPOINT).exists()
        abandon_run(run_dir, error=f"rank 0 ended without recording the run's status; replica {rank} saw "
                                   f"{_first_line(exc)}")
    finally:
        lock.release()
    how = " (re-run the same command to resume from its checkpoint)." if resumable else "."
    return (f"replica {rank}: rank 0 of this data-parallel run ended without finishing it; {run_dir} is "
            f"recorded interrupted{how}")


# what a process group's transport says when a peer has gone (gloo; NCCL), whichever frame raised it
_PEER_GONE = ("gloo/transport", "Connection closed by peer", "Connection reset by peer", "ProcessGroupGloo",
              "ProcessGroupNCCL", "NCCL error", "NCCL communicator was aborted")


def a_collective_failed(exc: BaseException) -> bool:
    """True when ``exc`` is a failed collective: raised inside ``torch.distributed`` (a collective, or the process
    group itself) or DDP (``torch.nn.parallel``), of one of ``torch.distributed``'s error types, or with the
    message of a process group's transport that lost a peer -- DDP's gradient all-reduce runs in the autograd
    engine, so its failure reaches ``loss.backward()`` with no ``torch.distributed`` frame. In a data-parallel run,
    another replica has ended, or stopped answering within the collectives' timeout."""
    parts = tuple(f"{os.sep}torch{os.sep}{p}{os.sep}" for p in ("distributed", f"nn{os.sep}parallel"))
    tb = exc.__traceback__
    while tb is not None:
        if any(p in tb.tb_frame.f_code.co_filename for p in parts):
            return True
        tb = tb.tb_next
    return type(exc).__module__.startswith("torch.distributed") or any(m in str(exc) for m in _PEER_GONE)


def lost_replica_error(exc: BaseException) -> str:
    """The ``error`` that summary.json keeps when rank 0's collective failed."""
    return (f"another replica of this data-parallel run ended (or stopped answering); rank 0's collective failed: "
            f"{_first_line(exc)}")


def lost_replica_line(run_dir: Path, exc: BaseException) -> str:
    """Rank 0's one line when its collective failed because another replica ended."""
    resumable = (Path(run_dir) / rundir.CHECKPOINT).exists()
    status = ("recorded interrupted (re-run the same command to resume from its checkpoint)" if resumable
              else "recorded failed, without a checkpoint (re-run the same command to start it over)")
    return f"rank 0: {lost_replica_error(exc)}; {run_dir} is {status}."


def hold_signals() -> None:
    """Ignore SIGINT and SIGTERM for the rest of this process (it is recording its end and leaving):
    torchrun's agent sends SIGTERM once it sees another replica gone, and SIGKILL 30 s later. (A signal
    mask would not do: any of the process's other threads, which do not block it, would take the signal.)
    Main thread only; elsewhere nothing changes."""
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    except ValueError:  # not the main thread
        pass
