"""Reading a run's ``checkpoint.pt`` safely, on the CPU.

Two rules:

* **Tensors and plain data only.** Every checkpoint is read with ``torch.load(weights_only=True)``: torch's
  restricted unpickler builds tensors, dicts, lists, tuples, numbers and strings and nothing else, so a
  file from someone else (a shared sweep, a copied run folder) cannot run code when ``bnexp train``
  resumes it. What bnexp writes needs nothing more: the generator states are uint8 tensors and numpy's
  RNG state is stored as a tensor (:func:`bnexp.train.rng.rng_state`). Checkpoints of earlier
  versions held numpy's state as an ``ndarray``; numpy's array reconstruction is allowed for them
  (:data:`EARLIER_VERSION_GLOBALS`: it builds an array from its bytes and calls nothing else). A file
  that asks for anything more is refused (:class:`~bnexp.errors.UntrustedCheckpoint`, one line naming
  the file) unless the user trusts it explicitly: ``trainer.trust_checkpoint=true`` (off by default).
* **Loaded to the CPU.** ``map_location="cpu"``: each part of the state moves itself to its device when it
  is loaded (``Module.load_state_dict`` copies into the parameters' device, the optimizer casts its state
  to its parameters', the sampler and the measurements move their tensors). Generator states stay CPU
  ``ByteTensor`` s, which is what ``Generator.set_state`` and ``torch.cuda.set_rng_state`` require; loading
  to a CUDA device put them on the GPU, ``set_state`` refused them, and a resumed CUDA run started over.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from bnexp.errors import UntrustedCheckpoint

__all__ = ["EARLIER_VERSION_GLOBALS", "load_checkpoint", "unsafe_globals"]


def _numpy_reconstruct():
    core = getattr(np, "_core", None) or np.core  # numpy 2 moved it; its pickles name numpy._core
    return core.multiarray._reconstruct


#: what earlier versions' checkpoints need beyond tensors: numpy's RNG state as an ``ndarray``
#: (:func:`numpy.random.get_state`), rebuilt from its dtype, shape and bytes
EARLIER_VERSION_GLOBALS = [_numpy_reconstruct(), np.ndarray, np.dtype,
                           *(type(np.dtype(t)) for t in ("uint32", "float64", "int64"))]


def unsafe_globals(path: Path) -> list[str]:
    """The Python objects (``module.name``) that ``path`` needs beyond what :func:`load_checkpoint` allows,
    read from the file's pickle without running it; [] for a file that loads safely (or is not a torch
    zip file: ``torch.load`` says what is wrong with it)."""
    try:
        names = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # truncated, not a zip file
        return []
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in EARLIER_VERSION_GLOBALS}
    return [n for n in names if n not in allowed]


def load_checkpoint(path: Path, trust: bool = False, mmap: bool = False) -> object:
    """``torch.load`` of a checkpoint: to the CPU, tensors and plain data only (the module docstring).

    Args:
        path: the ``checkpoint.pt``.
        trust: ``trainer.trust_checkpoint``: the user trusts this file; load it with full unpickling.
        mmap: memory-map the tensors (to read only the config of a large checkpoint).

    Returns:
        what ``torch.save`` saved (for bnexp's checkpoints a dict, :data:`bnexp.train.resume.CHECKPOINT_KEYS`),
        every tensor on the CPU.

    Raises:
        UntrustedCheckpoint: the file needs more than tensors and plain data, and ``trust`` is false.
        Exception: whatever ``torch.load`` raises for a file that is truncated or not a torch file.
    """
    if trust:  # the user's explicit trust (trainer.trust_checkpoint=true): this file may run code
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    try:
        with torch.serialization.safe_globals(EARLIER_VERSION_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError:
        names = unsafe_globals(Path(path))
        if names:
            raise UntrustedCheckpoint(path, names) from None
        raise
