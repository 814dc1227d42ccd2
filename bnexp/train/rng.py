"""The run's random generators: seeded at the start (python, numpy, torch CPU and CUDA), and their state
taken and restored for checkpoints, so that a resumed run draws what the uninterrupted one draws."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state(device: torch.device) -> dict:
    """Python, numpy, torch CPU (and CUDA) generator states, for checkpoints: tensors and plain data only
    (numpy's key array as an int64 tensor), so that a checkpoint loads with ``weights_only=True``
    (:mod:`bnexp.train.checkpoint`)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                     int(has_gauss), float(gauss)),
             "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore :func:`rng_state` (also an earlier version's, whose numpy keys were an ``ndarray``). The
    generator states are CPU ``ByteTensor`` s whatever device they were loaded to."""
    random.setstate(state["python"])
    kind, keys, *rest = state["numpy"]
    if isinstance(keys, torch.Tensor):
        keys = keys.cpu().numpy().astype(np.uint32)
    np.random.set_state((kind, keys, *rest))
    torch.set_rng_state(state["torch"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
