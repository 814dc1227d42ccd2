"""What a run costs before it starts: input shapes, memory estimate, step cost, thread default.

Everything here reads only the composed config (no data loaded, nothing allocated), so
:func:`bnexp.config.schema.validate` can refuse a run that cannot fit in memory before a single
tensor is created, and the trainer can pick a thread count that suits the network.
"""

from __future__ import annotations

import math
import os

# name: ((C, H, W), train images, test images, classes) of the datasets bnexp loads
DATASETS = {
    "mnist": ((1, 28, 28), 60_000, 10_000, 10),
    "cifar10": ((3, 32, 32), 50_000, 10_000, 10),
}

FLOAT_BYTES = 4  # float32, torch's default dtype


def input_shape(data_name: str) -> tuple[int, int, int]:
    """(C, H, W) of one image of the named dataset (KeyError for an unknown name)."""
    return DATASETS[data_name][0]


def layer_shapes(cfg) -> list[tuple[str, tuple[int, ...], int]]:
    """Every weight layer of the configured network, input to output.

    Returns:
        [(kind, output shape per example, weights)] with kind ``conv``, ``fc`` or ``classifier``;
        output shape (C, H, W) for conv layers (before pooling) and (units,) otherwise;
        weights = number of weight entries (biases and BN parameters are negligible).

    Raises:
        ValueError: too many pooling stages for the input size.
    """
    c, h, w = input_shape(cfg.data.name)
    m = cfg.model
    out: list[tuple[str, tuple[int, ...], int]] = []
    if m.name == "mlp":
        width = c * h * w
        for units in m.hidden:
            out.append(("fc", (int(units),), width * int(units)))
            width = int(units)
    else:
        for ch in m.channels:
            for _ in range(int(m.convs_per_stage)):
                out.append(("conv", (int(ch), h, w), c * int(ch) * 9))
                c = int(ch)
            h, w = h // 2, w // 2
        if h < 1 or w < 1:
            raise ValueError("too many pooling stages")
        width = c * h * w
        out.append(("fc", (int(m.fc),), width * int(m.fc)))
        width = int(m.fc)
    out.append(("classifier", (DATASETS[cfg.data.name][3],), width * DATASETS[cfg.data.name][3]))
    return out


def max_pooling_stages(data_name: str) -> int:
    """The most 2x2 max-pool stages the dataset's images allow (28 -> 4 stages, 32 -> 5)."""
    _, h, w = input_shape(data_name)
    return int(math.floor(math.log2(min(h, w))))


def step_flops(cfg) -> float:
    """Floating-point operations of one training step (forward + backward ~ 3 x 2 x MACs per example)."""
    macs = 0
    for kind, shape, weights in layer_shapes(cfg):
        macs += weights * (shape[1] * shape[2] if kind == "conv" else 1)
    return 6.0 * macs * int(cfg.trainer.batch_size)


def memory_estimate(cfg) -> dict[str, float]:
    """Bytes a run needs at its peak, by what the config key controls (a rough upper estimate).

    - ``data``: train and test images as float32 on the device, plus the copies made while
      loading and scaling (x3);
    - ``parameters``: weights, gradients, optimizer state and a checkpoint copy (x5);
    - ``activations``: every layer's output for one mini-batch, kept for backward (x4: affine
      output, BN output, nonlinearity, gradient);
    - ``probe``: the shift monitor's captured pre-activations of every layer on the probe set,
      and the test-set evaluation in chunks of 500 images.
    """
    (c, h, w), n_train, n_test, _ = DATASETS[cfg.data.name]
    layers = layer_shapes(cfg)
    per_example = sum(math.prod(shape) for _, shape, _ in layers)
    weights = sum(wt for _, _, wt in layers)
    return {
        "data": 3.0 * (n_train + n_test) * c * h * w * FLOAT_BYTES,
        "parameters": 5.0 * weights * FLOAT_BYTES,
        "activations": 4.0 * int(cfg.trainer.batch_size) * per_example * FLOAT_BYTES,
        "probe": (2.0 * int(cfg.trainer.probe_size) + 2.0 * 500) * per_example * FLOAT_BYTES,
    }


def available_memory() -> float | None:
    """Bytes of memory available to a new allocation (MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


# Below this many FLOPs per step (the paper's MLP: 3.6e7) a second intra-op thread gains
# little, and loses most of the speed when another process competes for the cores
# (benchmarks/bench_threads.py); above it (the default CNN: 1.5e9) torch's default is kept.
SMALL_STEP_FLOPS = 2e8
_torch_default_threads: int | None = None  # torch's own default, seen before bnexp changes it


def torch_default_threads() -> int:
    """torch's intra-op thread count as it was when bnexp first asked (before any run of this
    process set its own with ``torch.set_num_threads``)."""
    global _torch_default_threads
    import torch

    if _torch_default_threads is None:
        _torch_default_threads = torch.get_num_threads()
    return _torch_default_threads


def default_num_threads(cfg) -> int:
    """The intra-op thread count for ``trainer.num_threads=0`` (auto).

    1 for networks whose step costs less than :data:`SMALL_STEP_FLOPS` (the paper's MLP),
    where a second thread gains little; otherwise torch's default (the number of cores).
    An explicit ``trainer.num_threads=N`` (N >= 1) is returned as given.
    """
    default = torch_default_threads()
    n = int(cfg.trainer.num_threads)
    if n > 0:
        return n
    try:
        small = step_flops(cfg) < SMALL_STEP_FLOPS
    except (KeyError, ValueError):
        small = False
    return 1 if small else default
