"""Range checks of config values: the small validators declared beside each field, and the checks
that span several keys.

A field of the schemas in :mod:`bnexp.config` names its range as ``check=...`` (e.g.
``at_least(1)``); :func:`bnexp.config.validate` walks the fields and calls it. What types cannot say
and one field alone cannot either (BN needs mini-batches of m > 1, the monitored unit must exist in
the last hidden layer, the run must fit in memory) is in :func:`cross_checks`. Every failure is a
:class:`~bnexp.errors.ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from bnexp.errors import ConfigError
from bnexp.resources import DATASETS, input_shape, max_pooling_stages

FLOAT32_MAX = 3.4028234663852886e38
INT64_MAX = 2**63 - 1
MAX_SEED = 2**62  # seeds are offset (seed + 1, seed + 7919) for the other generators


class Check:
    """The range of one config value: ``check(value)`` is True when the value is allowed.

    Args:
        ok: the predicate, called with the resolved value (lists as Python lists).
        allowed: what is allowed, in words (the end of the error message and of ``--help``).
    """

    def __init__(self, ok: Callable[[Any], bool], allowed: str):
        self.ok, self.allowed = ok, allowed

    def __call__(self, value: Any) -> bool:
        try:
            return bool(self.ok(value))
        except TypeError:  # e.g. a None where a number is needed
            return False


def at_least(lo: float) -> Check:
    """``value >= lo``."""
    return Check(lambda v: v >= lo, f"must be >= {lo}")


def positive(allowed: str = "must be > 0") -> Check:
    """``value > 0`` (NaN fails)."""
    return Check(lambda v: v > 0, allowed)


def interval(lo: float, hi: float, closed: str = "[]") -> Check:
    """``value`` in the interval from ``lo`` to ``hi``; ``closed`` gives its brackets, e.g. ``"(]"``."""
    left = (lambda v: v >= lo) if closed[0] == "[" else (lambda v: v > lo)
    right = (lambda v: v <= hi) if closed[1] == "]" else (lambda v: v < hi)
    return Check(lambda v: left(v) and right(v), f"must lie in {closed[0]}{lo:g}, {hi:g}{closed[1]}")


def one_of(*names: str, ignore_case: bool = False) -> Check:
    """``value`` is one of ``names`` (its text; with ``ignore_case`` in any case)."""
    norm = (lambda s: str(s).lower()) if ignore_case else str
    return Check(lambda v: norm(v) in {norm(n) for n in names}, "use " + ", ".join(names[:-1]) + f" or {names[-1]}")


def optional(check: Check, none: str) -> Check:
    """``check``, or None (``none`` says what None means)."""
    return Check(lambda v: v is None or check(v), f"{check.allowed}, or null ({none})")


def widths() -> Check:
    """A non-empty list of layer widths, each >= 1."""
    return Check(lambda v: len(v) > 0 and all(w >= 1 for w in v), "at least one layer, and every width must be >= 1")


def positive_list(what: str) -> Check:
    """A non-empty list of numbers, each > 0."""
    return Check(lambda v: len(v) > 0 and all(x > 0 for x in v), f"a non-empty list of positive {what}")


def in_float32() -> Check:
    """> 0 and not rounding to 0 in float32 (the smallest float32 is about 1.4e-45)."""
    import numpy as np

    return Check(lambda v: v > 0 and bool(np.float32(v) > 0),
                 "must be > 0 and not round to 0 in float32 (>= 1.5e-45)")


def device() -> Check:
    """A device string torch knows."""
    pattern = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
    return Check(lambda v: bool(pattern.match(str(v))), "use auto, cpu, cuda, cuda:N or mps")


def percentiles() -> Check:
    """A non-empty, increasing list of distinct percentiles in (0, 100)."""
    return Check(lambda v: len(v) > 0 and all(0 < p < 100 for p in v) and list(v) == sorted(set(v)),
                 "a non-empty, increasing list of distinct percentiles, each in (0, 100)")


def targets() -> Check:
    """A non-empty list of test accuracies in (0, 1]."""
    return Check(lambda v: len(v) > 0 and all(0 < t <= 1 for t in v),
                 "a non-empty list of test-accuracy targets, each in (0, 1]")


def check_representable(container: dict) -> None:
    """Every number of the resolved config must be one torch can hold: floats finite and within
    float32's range, integers within int64.

    Args:
        container: ``OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)``.

    Raises:
        ConfigError: naming the first offending key.
    """

    def walk(node, prefix: str):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            key = (f"{prefix}.{k}" if prefix else str(k)) if isinstance(node, dict) else prefix
            if isinstance(v, (dict, list)):
                walk(v, key)
            elif isinstance(v, bool) or v is None or isinstance(v, str):
                continue
            elif isinstance(v, float):
                if not math.isfinite(v):
                    raise ConfigError(key, v, "must be a finite number")
                if abs(v) > FLOAT32_MAX:
                    raise ConfigError(key, v, f"overflows float32 (|x| <= {FLOAT32_MAX:.3g})")
            elif isinstance(v, int) and abs(v) > INT64_MAX:
                raise ConfigError(key, v, "overflows a 64-bit integer (|n| < 2^63)")

    walk(container, "")


def check_memory(cfg) -> None:
    """Refuse a run whose estimated peak memory (:func:`bnexp.resources.memory_estimate`) exceeds
    the memory available now, before anything is allocated.

    Raises:
        ConfigError: naming the key behind the largest part of the estimate.
    """
    from bnexp.resources import available_memory, memory_estimate

    est = memory_estimate(cfg)
    avail = available_memory()
    total = sum(est.values())
    if avail is None or total <= avail:
        return
    part = max(("parameters", "activations", "probe"), key=lambda k: est[k])
    m = cfg.model
    widths_key = "model.hidden" if m.name == "mlp" else "model.channels / model.fc"
    key, value = {"parameters": (widths_key, list(m.hidden) if m.name == "mlp" else [list(m.channels), m.fc]),
                  "activations": ("trainer.batch_size", cfg.trainer.batch_size),
                  "probe": ("trainer.probe_size", cfg.trainer.probe_size)}[part]
    gb = 1024.0 ** 3
    raise ConfigError(key, value, f"the run would need about {total / gb:.1f} GiB of memory (estimate: "
                                  + ", ".join(f"{k} {v / gb:.1f} GiB" for k, v in est.items())
                                  + f"), but {avail / gb:.1f} GiB are available; make it smaller")


def cross_checks(cfg) -> None:
    """The checks that span several keys, after every field passed its own check.

    Raises:
        ConfigError: mini-batches (or a BN-normalized probe) of 1 with BN on (paper Sec. 3.1: BN
            needs m > 1); more pooling stages than the images allow; the monitored unit outside the
            last hidden layer; a mini-batch or probe larger than the data set; a run that does not
            fit in memory.
    """
    t, m, data = cfg.trainer, cfg.model, cfg.data.name
    if cfg.bn.enabled and t.batch_size < 2:
        raise ConfigError("trainer.batch_size", t.batch_size, "with bn=true the mini-batch size must be >= 2, "
                          "since BN normalizes over the mini-batch and needs m > 1 (paper Sec. 3.1)")
    if cfg.bn.enabled and cfg.monitor.bn_stats != "population" and t.probe_size < 2:
        raise ConfigError("trainer.probe_size", t.probe_size, "with bn=true the shift monitor normalizes the probe "
                          "with its own mini-batch statistics, which need >= 2 images (or use "
                          "monitor.bn_stats=population)")
    if m.name == "cnn" and len(m.channels) > max_pooling_stages(data):
        shape = input_shape(data)
        raise ConfigError("model.channels", list(m.channels),
                          f"{len(m.channels)} stages, each ending in a 2x2 max-pool, are too many for "
                          f"{shape[1]}x{shape[2]} {data} images: use at most {max_pooling_stages(data)} stages")
    width_last = m.hidden[-1] if m.name == "mlp" else m.fc
    if cfg.monitor.unit >= width_last:
        raise ConfigError("monitor.unit", cfg.monitor.unit,
                          f"must be < the width of the last hidden layer ({width_last} units: "
                          f"{'model.hidden[-1]' if m.name == 'mlp' else 'model.fc'})")
    _, n_train, n_test, _ = DATASETS[data]
    if t.batch_size > n_train:
        raise ConfigError("trainer.batch_size", t.batch_size, f"must be <= the {data} training-set size ({n_train})")
    if t.probe_size > n_test:
        raise ConfigError("trainer.probe_size", t.probe_size, f"must be <= the {data} test-set size ({n_test})")
    check_memory(cfg)
