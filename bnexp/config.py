"""Config schemas (Hydra structured configs) and semantic validation.

The dataclasses below are registered in Hydra's ConfigStore, so every value a
user gives on the command line is type-checked by OmegaConf before training
starts (``lr=abc`` and ``act=tanhh`` fail with Hydra's own one-line message).
:func:`validate` adds the range checks that types cannot express (``lr > 0``,
``batch_size >= 2`` when BN is on, ...) and raises :class:`~bnexp.errors.ConfigError`.

The YAML files under ``conf/`` select defaults and document the choices; this
module defines what keys exist and their types.
"""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from bnexp.errors import ConfigError, UserError
from bnexp.resources import DATASETS, input_shape, max_pooling_stages
from bnexp.runnames import safe_dirname, sweep_subdir


class Activation(str, Enum):
    """The hidden nonlinearity g in z = g(BN(Wu)) (paper Sec. 3.2)."""

    sigmoid = "sigmoid"
    relu = "relu"


class PopulationStats(str, Enum):
    """How inference-time BN statistics are obtained (paper Alg. 2).

    ``ema``: running (exponential moving) averages of the mini-batch mean and
    unbiased variance, updated at every training step (the usual approximation).
    ``recompute``: Alg. 2 steps 10-12 after training: with frozen weights,
    E[x] = average of mu_B and Var[x] = m/(m-1) * average of sigma2_B over
    ``bn.recompute_batches`` training mini-batches.
    """

    ema = "ema"
    recompute = "recompute"


class Schedule(str, Enum):
    """Learning-rate schedule, applied per step."""

    constant = "constant"
    exponential = "exponential"  # lr * decay_rate ** (step / decay_steps)
    step = "step"  # lr * decay_rate ** floor(step / decay_steps)


@dataclass
class BNConfig:
    """Batch Normalization switch and options (config group ``bn``: true/false)."""

    enabled: bool = True
    population_stats: PopulationStats = PopulationStats.ema
    recompute_batches: int = 100  # K mini-batches for population_stats=recompute
    momentum: float = 0.1  # running-average momentum for population_stats=ema
    eps: float = 1e-5  # epsilon of Alg. 1
    impl: str = "torch"  # torch: nn.BatchNorm1d/2d (fast); reference: bnexp.bn.ReferenceBatchNorm
    # "noisy BN" (Santurkar et al. 2018, Sec. 2.1): after each BN layer, in training only,
    # y <- s*y + m with mu_t ~ U(-a, a), sigma_t ~ U(1, b) per unit and step,
    # m ~ U(mu_t - c, mu_t + c), s ~ N(sigma_t, d^2) per activation.
    noise: bool = False
    noise_a: float = 0.5
    noise_b: float = 1.25
    noise_c: float = 0.1
    noise_d: float = 0.1
    # strength: multiplies the noise's spread around the identity (s = 1, m = 0): a, b - 1, c, d
    noise_scale: float = 1.0
    sync: bool = True  # torchrun, N replicas: statistics over the global mini-batch, else m/N each (docs/cluster.md)
    ghost_batch_size: Optional[int] = None  # g: each ghost batch of g examples normalized alone; null: whole batch


@dataclass
class MLPConfig:
    """Fully-connected network; the paper's Fig. 1 net is hidden=[100,100,100]."""

    name: str = "mlp"
    hidden: List[int] = field(default_factory=lambda: [100, 100, 100])
    init_std: Optional[float] = 0.01  # N(0, init_std^2) weights, zero biases; null: torch default
    dropout: float = 0.0  # dropout before the classifier
    init: Optional[str] = None  # normal | kaiming | torch (bnexp.models); null: normal if init_std set, else torch


@dataclass
class CNNConfig:
    """Small convolutional network for 28x28 (MNIST) and 32x32 (CIFAR-10) inputs.

    Each stage is ``convs_per_stage`` 3x3 convolutions (each followed by BN when
    enabled, then the nonlinearity) and a 2x2 max-pool; then one hidden
    fully-connected layer of ``fc`` units and the classifier.
    """

    name: str = "cnn"
    channels: List[int] = field(default_factory=lambda: [32, 64])
    convs_per_stage: int = 1
    fc: int = 128
    init_std: Optional[float] = None  # null: torch's default (Kaiming-uniform) init
    dropout: float = 0.0
    init: Optional[str] = None  # normal | kaiming | torch (bnexp.models); null: normal if init_std set, else torch


@dataclass
class DataConfig:
    """Dataset selection and loading (config group ``data``)."""

    name: str = "mnist"
    root: Optional[str] = None  # null: $BNEXP_DATA_ROOT, else ~/.cache/bnexp/data
    download: bool = False  # fetch the dataset when it is missing (needs internet)
    verify_checksums: bool = True  # CIFAR-10: torchvision's md5 check of the batch files
    scaling: str = "unit"  # unit: pixels / 255 in [0, 1]; standardize: per-channel z-score
    augment: str = "false"  # false | standard (4-pixel-pad random crops + flips) | light (flips only)


@dataclass
class OptimConfig:
    """Optimizer and learning-rate schedule (config group ``optim``); the rate is top-level ``lr``."""

    name: str = "sgd"
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0  # L2 penalty coefficient
    schedule: Schedule = Schedule.constant
    decay_rate: float = 1.0
    decay_steps: int = 1000


@dataclass
class TrainerConfig:
    """The step-based training loop."""

    max_steps: int = 50_000
    batch_size: int = 60  # mini-batch size m
    eval_every: int = 1000  # steps between test-set evaluations
    hist_every: int = 1000  # steps between covariate-shift monitor records
    log_every: int = 50  # steps between train-loss scalars and divergence checks
    probe_size: int = 1000  # fixed test images fed to the shift monitor
    targets: List[float] = field(default_factory=lambda: [0.9, 0.95, 0.97, 0.98])
    device: str = "auto"  # auto (cuda if available, else cpu), cpu, cuda, cuda:N, mps
    # torch intra-op threads; 0: auto (bnexp.resources.default_num_threads): one thread for small
    # networks such as the paper MLP, where a second thread gains little and, with another
    # process competing for the cores, loses most of the speed; torch's default otherwise
    num_threads: int = 0
    progress: bool = True  # rich progress bar
    save_checkpoint: bool = True  # keep checkpoint.pt of the finished run
    ckpt_every: int = 5000  # steps between checkpoints (atomic, complete state)
    # null: resume when the run directory holds an unfinished run's checkpoint (re-running a
    # sweep or a hydra.run.dir); true: also look for the newest unfinished run with the same
    # overrides under the runs folder; false: always start over.
    resume: Optional[bool] = None
    precision: str = "fp32"  # fp32 | bf16: bfloat16 autocast of the forward pass (bnexp.precision)


@dataclass
class MonitorConfig:
    """Covariate-shift monitor: what is recorded on the probe set every hist_every steps."""

    percentiles: List[float] = field(default_factory=lambda: [15.0, 50.0, 85.0])
    unit: int = 0  # the fixed "typical" unit (channel for conv) of the last hidden layer
    histograms: bool = True
    max_values: int = 200_000  # cap on values per layer used for percentiles/histograms
    # Distribution-shift metrics at every monitor step (cheap): Wasserstein-1 between the
    # layer's pooled values now and at the previous / first record, per-unit |delta mean|/std
    # and |log std ratio| (bnexp.ics.DistributionShiftTracker).
    shift_metrics: bool = True
    shift_max_values: int = 20_000  # cap on the values per layer kept for the Wasserstein-1 distances
    # Statistics BN normalizes the probe with: batch (mini-batches of trainer.batch_size, as the
    # nonlinearity sees them in training) | population (running averages, as at inference) |
    # probe (the whole probe set as one batch). See bnexp.monitor.
    bn_stats: str = "batch"
    # Gradient-based ICS (Santurkar et al. 2018, Def. 2.1) every grad_ics_every steps
    # (cost: about one training step per hidden layer, on copies of the model).
    grad_ics: bool = False
    grad_ics_every: int = 1000
    # Loss-landscape smoothness (Santurkar et al. 2018, Sec. 3.1) every landscape_every
    # steps: move along the gradient by these multiples of the current learning rate
    # (cost: one forward/backward per step size, on a copy of the model).
    landscape: bool = False
    landscape_every: int = 1000
    landscape_step_sizes: List[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 4.0])
    # Scale-invariant probe (the one verdicts use): steps of these lengths measured relative to
    # each parameter tensor's norm (0.01 = the tensors move by about 1% of their norms; a plain
    # SGD step of the default MNIST runs is 0.1-1 in these units, mostly in the small tensors)
    landscape_rel_step_sizes: List[float] = field(default_factory=lambda: [0.005, 0.01, 0.02, 0.05, 0.1])


@dataclass
class Config:
    """The whole run configuration (``bnexp train`` composes it from ``conf/``)."""

    model: Any = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    bn: BNConfig = field(default_factory=BNConfig)
    act: Activation = Activation.sigmoid
    lr: float = 0.12
    seed: int = 0
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    experiment: Optional[str] = None  # preset name, set by +experiment=NAME (conf/experiment/)
    scale: Any = None  # CPU/GPU scale of the experiment presets (conf/scale/), set with scale=cpu|gpu


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="bnexp_schema", node=Config)
    cs.store(group="schema/model", name="mlp", node=MLPConfig)
    cs.store(group="schema/model", name="cnn", node=CNNConfig)
    if not OmegaConf.has_resolver("bnexp_dirname"):
        OmegaConf.register_new_resolver("bnexp_dirname", safe_dirname)
    if not OmegaConf.has_resolver("bnexp_sweep_subdir"):
        # sweep jobs are named by the swept keys only (bnexp.runnames)
        OmegaConf.register_new_resolver("bnexp_sweep_subdir", sweep_subdir)
    if not OmegaConf.has_resolver("bnexp_mul"):
        # ${bnexp_mul:a,b} = a * b (presets: 5x the base rate, weight decay / 5)
        OmegaConf.register_new_resolver("bnexp_mul", lambda a, b: float(a) * float(b))
    if not OmegaConf.has_resolver("bnexp_div"):
        # ${bnexp_div:steps,k} = round(steps / k), at least 1 (presets: decay k x faster)
        OmegaConf.register_new_resolver("bnexp_div", lambda a, b: max(1, int(round(float(a) / float(b)))))


register_configs()


CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def quote_bn_overrides(args: list[str]) -> list[str]:
    """Quote bare true/false values of ``bn=`` overrides so Hydra reads them as option names.

    ``bn`` is a config group whose options are named ``true`` and ``false``; Hydra's
    grammar would parse a bare ``true`` as a boolean and refuse it as a group option.
    ``["bn=true,false", "lr=0.1"]`` -> ``["bn='true','false'", "lr=0.1"]``.
    """
    out = []
    for a in args:
        m = re.match(r"^([+~]{0,2}bn=)(.*)$", a)
        if m:
            value = re.sub(r"(?<![\'\"\w])(true|false)(?![\'\"\w])",
                           lambda t: f"'{t.group(1).lower()}'", m.group(2), flags=re.IGNORECASE)
            a = m.group(1) + value
        out.append(a)
    return out


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose the run config from ``conf/`` outside the CLI (benchmarks, tests, notebooks).

    Args:
        overrides: Hydra overrides as on the command line, e.g. ``["bn=false", "lr=0.1"]``.

    Raises:
        hydra.errors.HydraException / omegaconf errors for unknown keys or wrong types.
    """
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=quote_bn_overrides(list(overrides or [])))


DATASET_NAMES = tuple(DATASETS)
FLOAT32_MAX = 3.4028234663852886e38
INT64_MAX = 2**63 - 1
MAX_SEED = 2**62  # seeds are offset (seed + 1, seed + 7919) for the other generators


def _positive_in_float32(x: float) -> bool:
    import numpy as np

    return bool(np.float32(x) > 0)


def schema_keys(model: str | None = None) -> set[str]:
    """Every valid dotted config key (leaves), from the schemas and the ``conf/scale`` options.

    Args:
        model: ``mlp`` or ``cnn`` for that model's keys only; None for the keys of both.
    """
    import dataclasses

    def leaves(cls, prefix: str) -> set[str]:
        out = set()
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(f.type if isinstance(f.type, type) else None):
                out |= leaves(f.type, key + ".")
            else:
                default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
                if dataclasses.is_dataclass(default):
                    out |= leaves(type(default), key + ".")
                else:
                    out.add(key)
        return out

    keys = leaves(Config, "") - {"model", "scale"}
    for cls in ([MLPConfig, CNNConfig] if model is None else [{"mlp": MLPConfig, "cnn": CNNConfig}[model]]):
        keys |= leaves(cls, "model.")
    import yaml

    for f in sorted((CONF_DIR / "scale").glob("*.yaml")):
        keys |= {f"scale.{k}" for k in (yaml.safe_load(f.read_text()) or {})}
    return keys


def unknown_key_message(key: str, override: str | None, valid: set[str], model: str | None = None) -> str:
    """One message for an unknown key, with the closest valid key suggested (difflib).

    The suggestion comes from the key's own section (``trainer.max_step`` -> ``trainer.max_steps``)
    when one is close enough, else from all keys.
    """
    import difflib

    section = key.split(".")[0] + "." if "." in key else ""
    given = f" (in {override})" if override and override != key else ""
    if section == "model." and model in ("mlp", "cnn"):
        other = "cnn" if model == "mlp" else "mlp"
        if key in schema_keys(other):
            names = ", ".join(sorted(k[len(section):] for k in valid if k.startswith(section)))
            return (f"unknown config key {key}{given}: model={model} has no such key (it belongs to "
                    f"model={other}); the keys of model={model} are {names}.")
    tails = {k[len(section):]: k for k in valid if section and k.startswith(section)}
    close = [tails[t] for t in difflib.get_close_matches(key[len(section):], sorted(tails), n=1, cutoff=0.7)]
    close = close or difflib.get_close_matches(key, sorted(valid), n=2, cutoff=0.8)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    return f"unknown config key {key}{given}.{hint} bnexp train --help lists every key with its default."


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse keys the schemas do not define (a ``+``-added typo such as ``+trainer.max_step=10``).

    Raises:
        UserError: naming the unknown key and the closest valid keys.
    """
    model = cfg.model.get("name") if isinstance(cfg.get("model"), DictConfig) else None
    valid = schema_keys(model if model in ("mlp", "cnn") else None)

    def walk(node: dict, prefix: str):
        for k, child in node.items():
            key = f"{prefix}{k}"
            if key in valid:
                continue
            if isinstance(child, dict) and any(v.startswith(key + ".") for v in valid):
                walk(child, key + ".")
            elif not (key in ("model", "scale") and child is None):
                raise UserError(unknown_key_message(key, None, valid, model))

    walk(OmegaConf.to_container(cfg, resolve=False), "")


def check_override_keys(args: list[str]) -> str | None:
    """Check the keys of command-line overrides before Hydra composes (and creates folders).

    Group choices (``model=cnn``, ``+experiment=NAME``), ``hydra.*`` keys and deletions
    are left to Hydra. Returns an error message naming the unknown key and the closest
    valid ones, or None when every key is known (or the line does not parse: Hydra then
    reports it).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    lines = [a for a in args if not a.startswith("-")]
    try:
        overrides = OverridesParser.create().parse_overrides(quote_bn_overrides(lines))
    except Exception:  # a syntax error: Hydra's own message is the right one
        return None
    groups = {d.name for d in CONF_DIR.iterdir() if d.is_dir()}
    models: set[str] = set()
    for o in overrides:
        if o.key_or_group == "model":
            models |= {str(v) for v in o.sweep_string_iterator()} if o.is_sweep_override() else {str(o.value())}
        elif o.key_or_group == "experiment":
            models.add("cnn")  # every preset in conf/experiment/ is a CIFAR-10 CNN
    model = next(iter(models)) if len(models) == 1 else None
    valid = schema_keys(model if model in ("mlp", "cnn") else None)
    for o in overrides:
        key = o.key_or_group
        if o.type == OverrideType.DEL or key in groups or key.startswith(("hydra.", "hydra/")) or "/" in key:
            continue
        if key not in valid and not any(v.startswith(key + ".") for v in valid):
            return unknown_key_message(key, o.input_line, valid, model)
    return None


def check_representable(cfg: DictConfig) -> None:
    """Every number of the config must be one torch can hold: floats finite and within float32's
    range, integers within int64 (seed within [0, 2^62)).

    Raises:
        ConfigError: naming the first offending key.
    """
    import math

    def walk(node, prefix: str):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            key = f"{prefix}.{k}" if isinstance(node, dict) and prefix else (str(k) if isinstance(node, dict)
                                                                              else prefix)
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

    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    walk(container, "")
    if not 0 <= cfg.seed < MAX_SEED:
        raise ConfigError("seed", cfg.seed, "must be an integer in [0, 2^62)")


def check_memory(cfg: DictConfig) -> None:
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
    widths = "model.hidden" if m.name == "mlp" else "model.channels / model.fc"
    key, value = {"parameters": (widths, list(m.hidden) if m.name == "mlp" else [list(m.channels), m.fc]),
                  "activations": ("trainer.batch_size", cfg.trainer.batch_size),
                  "probe": ("trainer.probe_size", cfg.trainer.probe_size)}[part]
    gb = 1024.0 ** 3
    raise ConfigError(key, value, f"the run would need about {total / gb:.1f} GiB of memory (estimate: "
                                  + ", ".join(f"{k} {v / gb:.1f} GiB" for k, v in est.items())
                                  + f"), but {avail / gb:.1f} GiB are available; make it smaller")


KNOWN_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def validate(cfg: DictConfig) -> None:
    """Check the semantic ranges of a composed config.

    Raises:
        ConfigError: naming the key, the value and what is allowed, for the first
            violation found (lr <= 0, batch_size < 2 with BN on (paper Sec. 3.1:
            BN needs m > 1), max_steps < 1, eval/hist/log intervals < 1,
            percentiles outside (0, 100), unknown device, layer widths < 1, ...).
    """
    check_known_keys(cfg)
    check_representable(cfg)
    t = cfg.trainer
    if cfg.data.name not in DATASET_NAMES:
        raise ConfigError("data.name", cfg.data.name, f"use one of {', '.join(DATASET_NAMES)}")
    if not cfg.lr > 0:
        raise ConfigError("lr", cfg.lr, "the learning rate must be > 0")
    if t.max_steps < 1:
        raise ConfigError("trainer.max_steps", t.max_steps, "must be >= 1")
    min_batch = 2 if cfg.bn.enabled else 1
    if t.batch_size < min_batch:
        why = ("with bn=true the mini-batch size must be >= 2, since BN normalizes over "
               "the mini-batch and needs m > 1 (paper Sec. 3.1)") if cfg.bn.enabled else "must be >= 1"
        raise ConfigError("trainer.batch_size", t.batch_size, why)
    for key in ("eval_every", "hist_every", "log_every"):
        if t[key] < 1:
            raise ConfigError(f"trainer.{key}", t[key], "must be >= 1")
    if t.ckpt_every < 1:
        raise ConfigError("trainer.ckpt_every", t.ckpt_every, "must be >= 1")
    if t.probe_size < 1:
        raise ConfigError("trainer.probe_size", t.probe_size, "must be >= 1")
    if not t.targets:
        raise ConfigError("trainer.targets", list(t.targets), "give at least one test-accuracy target")
    for target in t.targets:
        if not 0.0 < target <= 1.0:
            raise ConfigError("trainer.targets", list(t.targets), "targets are test accuracies in (0, 1]")
    if not KNOWN_DEVICE.match(t.device):
        raise ConfigError("trainer.device", t.device, "use auto, cpu, cuda, cuda:N or mps")
    if t.num_threads < 0:
        raise ConfigError("trainer.num_threads", t.num_threads, "must be >= 0 (0 keeps torch's default)")
    pcts = list(cfg.monitor.percentiles)
    if not pcts or any(not 0.0 < p < 100.0 for p in pcts) or pcts != sorted(set(pcts)):
        raise ConfigError("monitor.percentiles", pcts,
                          "a non-empty, increasing list of distinct percentiles, each in (0, 100)")
    if cfg.monitor.unit < 0:
        raise ConfigError("monitor.unit", cfg.monitor.unit, "must be >= 0")
    for key in ("grad_ics_every", "landscape_every"):
        if cfg.monitor[key] < 1:
            raise ConfigError(f"monitor.{key}", cfg.monitor[key], "must be >= 1")
    if not cfg.monitor.landscape_step_sizes or any(not s > 0 for s in cfg.monitor.landscape_step_sizes):
        raise ConfigError("monitor.landscape_step_sizes", list(cfg.monitor.landscape_step_sizes),
                          "a non-empty list of positive multiples of the learning rate")
    if not cfg.monitor.landscape_rel_step_sizes or any(not s > 0 for s in cfg.monitor.landscape_rel_step_sizes):
        raise ConfigError("monitor.landscape_rel_step_sizes", list(cfg.monitor.landscape_rel_step_sizes),
                          "a non-empty list of positive relative step lengths")
    if cfg.monitor.bn_stats not in ("batch", "population", "probe"):
        raise ConfigError("monitor.bn_stats", cfg.monitor.bn_stats,
                          "use batch (mini-batch statistics, as in training), population (running "
                          "averages, as at inference) or probe (the whole probe set's statistics)")
    if cfg.monitor.shift_max_values < 100:
        raise ConfigError("monitor.shift_max_values", cfg.monitor.shift_max_values, "must be >= 100")
    if cfg.monitor.max_values < 100:
        raise ConfigError("monitor.max_values", cfg.monitor.max_values, "must be >= 100")
    bn = cfg.bn
    if not bn.eps > 0 or not _positive_in_float32(bn.eps):
        raise ConfigError("bn.eps", bn.eps, "must be > 0 and not round to 0 in float32 (>= 1.5e-45)")
    if not 0.0 < bn.momentum <= 1.0:
        raise ConfigError("bn.momentum", bn.momentum, "must lie in (0, 1]")
    if bn.noise_a < 0 or bn.noise_b < 1 or bn.noise_c < 0 or bn.noise_d < 0:
        raise ConfigError("bn.noise_a/b/c/d", [bn.noise_a, bn.noise_b, bn.noise_c, bn.noise_d],
                          "need a >= 0, b >= 1, c >= 0, d >= 0")
    if not (bn.noise_scale >= 0 and bn.noise_scale < float("inf")):
        raise ConfigError("bn.noise_scale", bn.noise_scale, "must be a finite number >= 0 (1 = the default noise)")
    if bn.impl not in ("torch", "reference"):
        raise ConfigError("bn.impl", bn.impl, "use torch or reference")
    if bn.recompute_batches < 1:
        raise ConfigError("bn.recompute_batches", bn.recompute_batches, "must be >= 1")
    o = cfg.optim
    if o.name not in ("sgd",):
        raise ConfigError("optim.name", o.name, "only sgd is available")
    if not 0.0 <= o.momentum < 1.0:
        raise ConfigError("optim.momentum", o.momentum, "must lie in [0, 1)")
    if o.weight_decay < 0:
        raise ConfigError("optim.weight_decay", o.weight_decay, "must be >= 0")
    if not 0.0 < o.decay_rate <= 1.0:
        raise ConfigError("optim.decay_rate", o.decay_rate, "must lie in (0, 1]")
    if o.decay_steps < 1:
        raise ConfigError("optim.decay_steps", o.decay_steps, "must be >= 1")
    m = cfg.model
    widths_key = "model.hidden" if m.name == "mlp" else "model.channels"
    widths = list(m.hidden) if m.name == "mlp" else list(m.channels) + [m.fc]
    if m.name == "cnn" and m.fc < 1:
        raise ConfigError("model.fc", m.fc, "layer widths must be >= 1")
    if not widths or any(w < 1 for w in widths):
        raise ConfigError(widths_key, widths, "at least one layer, and every width must be >= 1")
    if m.name == "cnn" and m.convs_per_stage < 1:
        raise ConfigError("model.convs_per_stage", m.convs_per_stage, "must be >= 1")
    if m.init_std is not None and not m.init_std > 0:
        raise ConfigError("model.init_std", m.init_std, "must be > 0, or null for torch's default init")
    if not 0.0 <= m.dropout < 1.0:
        raise ConfigError("model.dropout", m.dropout, "must lie in [0, 1)")
    if m.name == "cnn" and len(m.channels) > max_pooling_stages(cfg.data.name):
        shape = input_shape(cfg.data.name)
        raise ConfigError("model.channels", list(m.channels),
                          f"{len(m.channels)} stages, each ending in a 2x2 max-pool, are too many for "
                          f"{shape[1]}x{shape[2]} {cfg.data.name} images: use at most "
                          f"{max_pooling_stages(cfg.data.name)} stages")
    width_last = m.hidden[-1] if m.name == "mlp" else m.fc
    if cfg.monitor.unit >= width_last:
        raise ConfigError("monitor.unit", cfg.monitor.unit,
                          f"must be < the width of the last hidden layer ({width_last} units: "
                          f"{'model.hidden[-1]' if m.name == 'mlp' else 'model.fc'})")
    _, n_train, n_test, _ = DATASETS[cfg.data.name]
    if t.batch_size > n_train:
        raise ConfigError("trainer.batch_size", t.batch_size,
                          f"must be <= the {cfg.data.name} training-set size ({n_train})")
    if t.probe_size > n_test:
        raise ConfigError("trainer.probe_size", t.probe_size, f"must be <= the {cfg.data.name} test-set "
                                                              f"size ({n_test})")
    if m.init_std is not None and not _positive_in_float32(m.init_std):
        raise ConfigError("model.init_std", m.init_std, "rounds to 0 in float32; use a value >= 1.5e-45")
    if str(cfg.data.augment).lower() not in ("false", "off", "none", "true", "standard", "light"):
        raise ConfigError("data.augment", cfg.data.augment, "use false, standard (crops + flips) or light (flips)")
    if cfg.data.scaling not in ("unit", "standardize"):
        raise ConfigError("data.scaling", cfg.data.scaling, "use unit or standardize")
    check_memory(cfg)

