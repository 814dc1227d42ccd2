"""Whether a ``checkpoint.pt`` found in a run folder can be resumed by this run.

Three answers (:meth:`bnexp.train.trainer.Trainer.try_resume` acts on them):

* it is this run's checkpoint: resume from it;
* it is a checkpoint of *another run* -- another config (keys that cannot change results aside,
  :data:`bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS`) or another number of data-parallel replicas --:
  refuse with :class:`~bnexp.errors.CheckpointMismatch` and leave it where it is, so the right
  command can still resume it;
* it is not a readable checkpoint of this run -- keys missing (:func:`missing_keys`), a network of
  other layers or shapes, an optimizer of other parameter groups (:func:`incompatibility`): the
  trainer sets it aside (kept) and the run starts over.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from bnexp.errors import CheckpointMismatch, UntrustedCheckpoint
from bnexp.train.checkpoint import load_checkpoint
from bnexp.train.torchrun import launch

# what Trainer.load_state_dict reads; a file without them is not a checkpoint of a run
CHECKPOINT_KEYS = ("step", "model", "optimizer", "scheduler", "sampler", "rng", "measurements", "logs",
                   "train_time", "config")


def missing_keys(state: object) -> list[str]:
    """The :data:`CHECKPOINT_KEYS` that ``state`` (what ``torch.load`` returned) lacks; ``["all"]`` for a non-dict."""
    if not isinstance(state, dict):
        return ["all"]
    return [k for k in CHECKPOINT_KEYS if k not in state]


def read_checkpoint(path: Path, trust: bool = False) -> tuple[dict | None, str | None]:
    """The checkpoint at ``path`` (to the CPU, tensors and plain data only:
    :func:`bnexp.train.checkpoint.load_checkpoint`) and why it is not a readable checkpoint of a run.

    Returns:
        (state, None) for a dict with every :data:`CHECKPOINT_KEYS`; (None, the reason) for a file that is
        truncated, not a torch file, or lacks keys (the trainer sets such a file aside and starts over).

    Raises:
        UntrustedCheckpoint: the file needs more than tensors to load and ``trust`` is false (it is refused
            and left alone, never set aside: it may be a resumable run of someone the user trusts).
    """
    try:
        state = load_checkpoint(path, trust=trust)
    except UntrustedCheckpoint:
        raise
    except Exception as exc:  # truncated or not a torch file
        return None, f"{type(exc).__name__}: {exc}"
    missing = missing_keys(state)
    if missing:
        return None, f"not a bnexp checkpoint: missing {', '.join(missing)}"
    return state, None


def check_same_run(state: dict, config: dict, world_size: int, run_dir: Path, precision: str | None = None) -> None:
    """Refuse another run's checkpoint.

    Args:
        state: a checkpoint with every :data:`CHECKPOINT_KEYS`.
        config: this run's resolved config as a plain dict.
        world_size: this run's number of replicas N.
        run_dir: the run folder (named in the message).
        precision: what this run computes in (fp32 | tf32 | bf16, :func:`bnexp.train.precision.effective_precision`);
            None: not compared. A checkpoint of an earlier version that did not record it is not compared either.

    Raises:
        CheckpointMismatch: the configs differ in a result-changing key (the message names the keys
            and the two ways out), the checkpoint was computed in another precision (TF32 or bf16 on one
            device, not on another: trainer.device alone cannot change results, the arithmetic does),
            or it was written with another N.
    """
    if state["config"] != config:
        from bnexp.config.oneconfig import changed_keys  # the one rule, shared with the run-folder check of the CLI

        changed = sorted(k for k, _, _ in changed_keys(state["config"] or {}, config))
        if changed:
            raise CheckpointMismatch(
                f"the checkpoint in {run_dir} belongs to a run with a different config "
                f"(differs in: {', '.join(changed)}); use a new run directory, or "
                "trainer.resume=false to start this one over.")
    saved = state.get("precision")
    if precision is not None and saved is not None and saved != precision:
        raise CheckpointMismatch(
            f"the checkpoint in {run_dir} belongs to a run with a different config (differs in: precision, "
            f"{saved} there, {precision} here: trainer.precision={config.get('trainer', {}).get('precision')} on "
            f"trainer.device={config.get('trainer', {}).get('device')}); resume it on a device that computes in "
            f"{saved}, or use a new run directory, or trainer.resume=false to start this one over.")
    n_saved = int(state.get("world_size", 1))
    if n_saved != world_size:
        raise CheckpointMismatch(
            f"the checkpoint in {run_dir} was written by a run with {n_saved} replica(s); this one "
            f"has {world_size}. Resume it with the same number of processes: "
            + (launch(n_saved) if n_saved > 1 else "bnexp train ... (one process, no torchrun)") + ".")


def incompatibility(state: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> str | None:
    """Why ``state`` cannot be loaded into ``model`` and ``optimizer`` (None: it can).

    Checks the model's state_dict keys and tensor shapes, and the optimizer's parameter groups
    (their number and sizes), without loading anything.
    """
    mine, theirs = model.state_dict(), state["model"]
    if not isinstance(theirs, dict) or set(mine) != set(theirs):
        diff = sorted(set(mine) ^ set(theirs)) if isinstance(theirs, dict) else ["all"]
        return f"its network has other layers ({', '.join(diff[:4])}{' ...' if len(diff) > 4 else ''})"
    shapes = [k for k in mine if not isinstance(theirs[k], torch.Tensor) or theirs[k].shape != mine[k].shape]
    if shapes:
        return f"its network has other shapes ({', '.join(shapes[:4])})"
    groups = state["optimizer"].get("param_groups") if isinstance(state["optimizer"], dict) else None
    own = optimizer.state_dict()["param_groups"]
    if not groups or [len(g.get("params", ())) for g in groups] != [len(g["params"]) for g in own]:
        return "its optimizer state does not match this network"
    return None


def refuse_foreign_checkpoint(run_dir: Path, config: dict, world_size: int, trust: bool = False) -> None:
    """Refuse, before anything in ``run_dir`` changes, a ``checkpoint.pt`` that belongs to another run
    (:func:`check_same_run`); a missing or unreadable file passes (the trainer sets an unreadable one
    aside and starts over). Reads only the checkpoint's ``config`` and ``world_size`` (memory-mapped:
    the tensors are not loaded), with tensors and plain data only unless ``trust``
    (``trainer.trust_checkpoint``).

    Raises:
        CheckpointMismatch: as :func:`check_same_run` (the precision is what this run would compute in here).
        UntrustedCheckpoint: the file needs more than tensors to load and ``trust`` is false.
    """
    path = Path(run_dir) / "checkpoint.pt"
    if not path.is_file():
        return
    try:
        state = load_checkpoint(path, trust=trust, mmap=True)
    except UntrustedCheckpoint:
        raise
    except Exception:  # truncated, not a torch zip file: the trainer's business
        return
    if not missing_keys(state):
        check_same_run(state, config, world_size, run_dir, _precision(config))


def _precision(config: dict) -> str | None:
    """What a run of ``config`` would compute in here (None: its device or precision is refused later)."""
    from bnexp.errors import UserError
    from bnexp.train.precision import effective_precision
    from bnexp.train.device import resolve_device

    trainer = config.get("trainer") or {}
    try:
        device = resolve_device(str(trainer.get("device", "auto")))
        return effective_precision(str(trainer.get("precision", "fp32")), device)
    except UserError:
        return None
