"""Range checks of config values: the small validators declared beside each field, and the checks
that span several keys.

A field of the schemas in :mod:`bnexp.config.schema` names its range as ``check=...`` (e.g.
``at_least(1)``); :func:`bnexp.config.schema.validate` walks the fields and calls it. What types cannot say
and one field alone cannot either (BN needs mini-batches of m > 1, the monitored unit must exist in
the last hidden layer, the run must fit in memory) is in :func:`cross_checks`. Every failure is a
:class:`~bnexp.errors.ConfigError` naming the key, the value and what is allowed.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

from bnexp.errors import ConfigError
from bnexp.config.resources import DATASETS, input_shape, max_pooling_stages

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
    """> 0 and not rounding to 0 in float32 (the smallest float32 is about 1.4e-45). numpy is imported when a
    value is checked, not when the schema is defined (``bnexp train`` refuses a typo before heavy imports)."""

    def positive_in_float32(v) -> bool:
        import numpy as np

        return v > 0 and bool(np.float32(v) > 0)

    return Check(positive_in_float32, "must be > 0 and not round to 0 in float32 (>= 1.5e-45)")


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
    """Refuse a run whose estimated peak memory (:func:`bnexp.config.resources.memory_estimate`) exceeds
    the memory available now, before anything is allocated.

    Raises:
        ConfigError: naming the key behind the largest part of the estimate.
    """
    from bnexp.config.resources import available_memory, memory_estimate

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


MLFLOW_INSTALL = 'pip install -e ".[mlflow]" (or: pip install mlflow-skinny sqlalchemy alembic)'


def mlflow_available() -> str | None:
    """None when ``logger=mlflow`` can run here, else the one-line reason (a package to install): checked by
    :func:`bnexp.config.schema.validate` before a run starts and by :class:`bnexp.train.loggers.MLflowScalars`."""
    import importlib.util

    if importlib.util.find_spec("mlflow") is None:
        return f"logger=mlflow needs the mlflow package: {MLFLOW_INSTALL}"
    return None


def option_value(v: Any) -> Any:
    """A config value as plain Python: an Enum's value (``Normalizer.layer`` -> ``"layer"``), else the value."""
    return getattr(v, "value", v)


def uses_batch_statistics(bn) -> bool:
    """True for Batch Normalization (``bn=true|noisy``): a normalizer whose statistics are taken over
    the mini-batch; False for ``bn=false`` and the per-example ``bn=layer`` / ``bn=group``."""
    return bool(bn.enabled) and option_value(bn.get("norm", "batch")) == "batch"


def normalized_layers(cfg) -> list[tuple[str, int, str, bool]]:
    """The hidden layers a normalizer acts on, input to output: (name, width, config key, conv).

    ``layer1``, ``layer2``, ... as :func:`bnexp.nets.models.hidden_layers` names them; the width is the
    layer's units (fully-connected) or channels (conv), the key the config entry that sets it
    (``model.hidden[0]``, ``model.channels[1]``, ``model.fc``).
    """
    m = cfg.model
    if m.name == "mlp":
        return [(f"layer{i + 1}", int(w), f"model.hidden[{i}]", False) for i, w in enumerate(m.hidden)]
    out = [(int(w), f"model.channels[{i}]", True) for i, w in enumerate(m.channels) for _ in range(m.convs_per_stage)]
    out.append((int(m.fc), "model.fc", False))
    return [(f"layer{i + 1}", w, key, conv) for i, (w, key, conv) in enumerate(out)]


# A group of k units of a fully-connected layer normalizes to a point of a (k-2)-sphere: k = 1 gives
# 0 and k = 2 gives (-1, 1) or (1, -1), whose derivative is 0 (up to eps); k >= 3 is a normalizer.
MIN_GROUP_UNITS = 3

# bn.* keys that only concern batch statistics (BN's running averages, Alg. 2, ghost batches,
# cross-replica statistics, noisy BN): with bn=layer / bn=group they must keep their defaults.
BATCH_ONLY_KEYS = {
    "noise": "noisy BN is batch normalization with injected noise, bn=noisy",
    "noise_a": "the noise ranges belong to noisy BN, bn=noisy",
    "noise_b": "the noise ranges belong to noisy BN, bn=noisy",
    "noise_c": "the noise ranges belong to noisy BN, bn=noisy",
    "noise_d": "the noise ranges belong to noisy BN, bn=noisy",
    "noise_scale": "the noise strength belongs to noisy BN, bn=noisy",
    "ghost_batch_size": "ghost batches split the mini-batch for BN's statistics",
    "population_stats": "there are no running (population) statistics: the statistics are each example's own, the "
                        "same in training and at inference",
    "recompute_batches": "there are no population statistics to recompute",
    "momentum": "there are no running averages",
    "sync": "no statistics are shared across replicas",
}


def check_normalizer(cfg, bn_defaults, monitor_defaults) -> None:
    """The combinations of ``bn``'s normalizer keys that make sense (docs/normalizers.md).

    * ``bn=false``: no normalizer, so ``bn.norm`` other than batch, ``bn.position=after`` and
      ``bn.groups`` are refused;
    * ``bn.groups`` only with ``bn=group``;
    * ``bn=layer`` / ``bn=group`` normalize each example by itself: the batch-only keys
      (:data:`BATCH_ONLY_KEYS`) and ``monitor.bn_stats`` must keep their defaults;
    * ``bn=group``: ``bn.groups`` must divide every normalized layer's width; a group (for
      ``bn=layer`` the whole layer) of a fully-connected layer needs >= 3 units
      (:data:`MIN_GROUP_UNITS`: one unit normalizes to 0, two to -1 and +1 with no gradient).

    Raises:
        ConfigError: naming the first offending key (with the layer and its width where one is at fault).
    """
    bn, defaults = cfg.bn, bn_defaults  # BNConfig(), MonitorConfig(): passed in (no import cycle)
    norm, position = option_value(bn.get("norm", "batch")), option_value(bn.get("position", "before"))
    groups = bn.get("groups", defaults.groups)
    if not bn.enabled:
        if norm != "batch":
            raise ConfigError("bn.norm", norm, f"bn=false has no normalizer: use bn={norm} (not bn=false "
                                               f"bn.norm={norm})")
        if position != "before":
            raise ConfigError("bn.position", position, "bn=false has no normalizer to place: use it with bn=true, "
                                                       "noisy, layer or group")
    if groups != defaults.groups and (not bn.enabled or norm != "group"):
        raise ConfigError("bn.groups", groups, f"is used only with bn=group (this run has "
                                               f"bn={'false' if not bn.enabled else norm})")
    if not bn.enabled or norm == "batch":
        return
    for key, why in BATCH_ONLY_KEYS.items():
        value, default = option_value(bn.get(key)), option_value(getattr(defaults, key))
        if value != default:
            raise ConfigError(f"bn.{key}", value, f"has no meaning with bn={norm}, which normalizes each example by "
                                                  f"itself: {why}; leave it at its default "
                                                  f"({'null' if default is None else default})")
    bn_stats, default_stats = option_value(cfg.monitor.bn_stats), monitor_defaults.bn_stats
    if bn_stats != default_stats:
        raise ConfigError("monitor.bn_stats", bn_stats, f"chooses the statistics BN normalizes the probe with; bn="
                                                        f"{norm} normalizes each probe image by itself: use "
                                                        f"{default_stats} (the default)")
    layers = normalized_layers(cfg)
    g = groups if norm == "group" else 1
    for name, width, key, conv in layers:
        if width % g:
            fit = _common_groups([w for _, w, _, c in layers], [c for *_, c in layers])
            raise ConfigError("bn.groups", g, f"must divide the width of every normalized layer: {name} has {width} "
                                              f"{'channels' if conv else 'units'} ({key})"
                                              + (f"; bn.groups={fit} divides them all" if fit else ""))
        if conv:  # a group of one channel still has the H x W values of its positions
            continue
        if width // g < MIN_GROUP_UNITS:
            k = width // g
            what = "every value would normalize to 0 (beta)" if k == 1 else \
                "they would normalize to -1 and +1, through which no gradient passes"
            raise ConfigError("bn.groups" if g > 1 else key, g if g > 1 else width,
                              f"bn={norm} leaves groups of {k} unit{'s' if k > 1 else ''} in {name} ({width} units, "
                              f"{key}): {what}; a fully-connected layer needs >= {MIN_GROUP_UNITS} units per group"
                              + (f" (bn.groups <= {width // MIN_GROUP_UNITS})" if g > 1 and width >= 3 else ""))


def _common_groups(widths: list[int], conv: list[bool]) -> int | None:
    """The largest G <= 32 dividing every width and leaving >= MIN_GROUP_UNITS units per fully-connected
    group, or None."""
    ok = [g for g in range(2, 33) if all(w % g == 0 and (c or w // g >= MIN_GROUP_UNITS)
                                         for w, c in zip(widths, conv))]
    return max(ok, default=None)


def cross_checks(cfg, bn_defaults, monitor_defaults) -> None:
    """The checks that span several keys, after every field passed its own check.

    Raises:
        ConfigError: a normalizer combination that makes no sense (:func:`check_normalizer`);
            mini-batches (or a BN-normalized probe) of 1 with BN on (paper Sec. 3.1: BN needs
            m > 1; LayerNorm / GroupNorm need no mini-batch); more pooling stages than the images
            allow; the monitored unit outside the last hidden layer; a mini-batch or probe larger than the data set; a run that does not
            fit in memory.
    """
    t, m, data = cfg.trainer, cfg.model, cfg.data.name
    check_normalizer(cfg, bn_defaults, monitor_defaults)
    batch_stats = uses_batch_statistics(cfg.bn)
    if batch_stats and t.batch_size < 2:
        raise ConfigError("trainer.batch_size", t.batch_size, "with bn=true the mini-batch size must be >= 2, "
                          "since BN normalizes over the mini-batch and needs m > 1 (paper Sec. 3.1)")
    if batch_stats and cfg.monitor.bn_stats != "population" and t.probe_size < 2:
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
