"""Which device a run trains on (``trainer.device``): ``auto`` picks CUDA where it is available."""

from __future__ import annotations

import torch

from bnexp.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available, else cpu; other names as given.

    Raises:
        ConfigError: when the named device is not available on this machine.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("trainer.device", name, "CUDA is not available on this machine; use auto or cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device", name, "MPS is not available on this machine; use auto or cpu")
    return torch.device(name)
