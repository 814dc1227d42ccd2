"""Numeric precision and memory layout of the step loop (``trainer.precision``, channels-last).

``trainer.precision`` (what a run computes in is result-changing: summary.json records it as ``precision``,
and a checkpoint of another precision is not resumed, :func:`effective_precision`):

* ``fp32`` -- everything in float32 (the default), also on GPUs: TF32 off.
* ``tf32`` -- float32 whose matrix products and cuDNN convolutions use TF32 tensor cores (10-bit mantissa
  inputs, float32 accumulation; about 1e-3 relative error per product) on CUDA devices of compute
  capability >= 8.0; fp32 elsewhere (CPUs have no TF32), with a warning.
* ``bf16`` -- the forward pass runs under :func:`torch.autocast` with ``dtype=torch.bfloat16``:
  convolutions and matrix products (``conv2d``, ``linear``, ``mm``...) compute in bfloat16,
  as autocast's lower-precision op list prescribes. What stays float32: the parameters and
  so the optimizer state (SGD momentum buffers), BN's mini-batch statistics and running
  (population) averages -- the BN kernels accumulate mean and variance in float32 and their
  buffers are float32; the reference BN layer and ghost BN cast their input to float32 likewise --
  and the loss, which the trainer computes outside autocast on the
  logits cast to float32. Backward follows the forward's dtypes (no loss scaling is needed
  for bfloat16, whose exponent range is float32's).

A CPU "supports" bf16 when oneDNN reports native bfloat16 kernels
(``torch.ops.mkldnn._is_mkldnn_bf16_supported()``: AVX512-BF16 / AMX / AVX512 CPUs). On other
CPUs bfloat16 still runs, but by emulation: on the AVX2 machine this was written on, one 16->16
3x3 convolution of a 64-image mini-batch took 17x longer in bfloat16 than in float32. There, and
on GPUs before compute capability 8.0 (which emulate it), ``bf16`` falls back to fp32 with a warning.
Whether bf16 is *faster* is measured, not assumed: ``benchmarks/bench_cifar_precision.py``.

Channels-last: a convolutional network runs with its weights and inputs in
``torch.channels_last`` (NHWC) memory layout, which oneDNN's and cuDNN's convolutions prefer;
the values are unchanged (only strides differ), so results match NCHW up to float rounding.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

from bnexp.errors import ConfigError

PRECISIONS = ("fp32", "tf32", "bf16")


def tf32_supported(device: torch.device) -> bool:
    """Whether ``device`` has TF32 tensor cores: a CUDA device of compute capability >= 8.0 (Ampere and newer)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 natively (see the module docstring): a CUDA device of compute
    capability >= 8.0 (torch's ``is_bf16_supported`` also counts the emulated bfloat16 of older GPUs, which
    is slow), a CPU whose oneDNN reports native bfloat16 kernels."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    if device.type == "cpu":
        if not torch.backends.mkldnn.is_available():
            return False
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # an older or newer torch without the query
            return False
    return False


def effective_precision(name: str, device: torch.device) -> str:
    """What a run of ``trainer.precision=name`` computes in on ``device``: ``bf16`` or ``tf32`` where the device
    has it natively, else ``fp32`` (what summary.json records and a resume compares). Changes nothing.

    Raises:
        ConfigError: for a name other than fp32 / tf32 / bf16.
    """
    if name not in PRECISIONS:
        raise ConfigError("trainer.precision", name, "use fp32, tf32 or bf16")
    if (name == "bf16" and bf16_supported(device)) or (name == "tf32" and tf32_supported(device)):
        return name
    return "fp32"


def apply_precision(name: str, device: torch.device) -> tuple[torch.dtype | None, str]:
    """Set this process's TF32 switches for a run of ``trainer.precision=name`` on ``device`` and say what it
    computes in. On CUDA, ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``
    are on for ``tf32`` only (torch turns cuDNN's on by default, so ``fp32`` there would otherwise use TF32
    convolutions); CPUs have no TF32 and nothing changes there.

    Returns:
        (the autocast dtype, None for fp32 and tf32; :func:`effective_precision`).

    Raises:
        ConfigError: for a name other than fp32 / tf32 / bf16.

    Warns:
        UserWarning: bf16 or tf32 asked for on a device without it; fp32 is used instead.
    """
    precision = effective_precision(name, device)
    if precision != name:
        what = "bfloat16" if name == "bf16" else "TF32"
        warnings.warn(f"trainer.precision={name}: {device.type} here has no native {what} support; training in fp32",
                      stacklevel=2)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    return (torch.bfloat16 if precision == "bf16" else None), precision


def resolve_precision(name: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``trainer.precision`` on ``device``: None for fp32 and tf32, ``torch.bfloat16`` for bf16
    where the device has it (:func:`effective_precision`).

    Raises:
        ConfigError: for a name other than fp32 / tf32 / bf16.

    Warns:
        UserWarning: bf16 asked for on a device without native bfloat16; fp32 is used instead.
    """
    precision = effective_precision(name, device)
    if name == "bf16" and precision != "bf16":
        warnings.warn(f"trainer.precision=bf16: {device.type} here has no bfloat16 support; training in fp32",
                      stacklevel=2)
    return torch.bfloat16 if precision == "bf16" else None


def autocast(device: torch.device, dtype: torch.dtype | None):
    """The forward-pass context: ``torch.autocast(device.type, dtype)``, or a no-op for fp32 (dtype None)."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def is_conv_net(model: nn.Module) -> bool:
    """True when ``model`` has a 2-d convolution (it then runs channels-last)."""
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def to_channels_last(model: nn.Module) -> nn.Module:
    """Put a convolutional network's 4-d parameters and buffers in ``torch.channels_last``
    layout (in place; other networks are returned unchanged)."""
    if is_conv_net(model):
        model.to(memory_format=torch.channels_last)
    return model


def channels_last_input(x: torch.Tensor) -> torch.Tensor:
    """An (N, C, H, W) mini-batch in channels-last layout (same values); other shapes unchanged."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
