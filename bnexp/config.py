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

from bnexp.errors import ConfigError
from bnexp.runnames import MAX_DIRNAME, sweep_subdir  # noqa: F401  (MAX_DIRNAME: for callers)
from bnexp.runnames import safe_dirname as _safe_dirname


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


@dataclass
class MLPConfig:
    """Fully-connected network; the paper's Fig. 1 net is hidden=[100,100,100]."""

    name: str = "mlp"
    hidden: List[int] = field(default_factory=lambda: [100, 100, 100])
    init_std: Optional[float] = 0.01  # N(0, init_std^2) weights, zero biases; null: torch default
    dropout: float = 0.0  # dropout before the classifier


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
    num_threads: int = 0  # torch intra-op threads; 0 keeps torch's default
    progress: bool = True  # rich progress bar
    save_checkpoint: bool = True  # keep checkpoint.pt of the finished run
    ckpt_every: int = 5000  # steps between checkpoints (atomic, complete state)
    # null: resume when the run directory holds an unfinished run's checkpoint (re-running a
    # sweep or a hydra.run.dir); true: also look for the newest unfinished run with the same
    # overrides under the runs folder; false: always start over.
    resume: Optional[bool] = None


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
        OmegaConf.register_new_resolver("bnexp_dirname", _safe_dirname)
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


KNOWN_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def validate(cfg: DictConfig) -> None:
    """Check the semantic ranges of a composed config.

    Raises:
        ConfigError: naming the key, the value and what is allowed, for the first
            violation found (lr <= 0, batch_size < 2 with BN on (paper Sec. 3.1:
            BN needs m > 1), max_steps < 1, eval/hist/log intervals < 1,
            percentiles outside (0, 100), unknown device, layer widths < 1, ...).
    """
    t = cfg.trainer
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
    for target in t.targets:
        if not 0.0 < target <= 1.0:
            raise ConfigError("trainer.targets", list(t.targets), "targets are test accuracies in (0, 1]")
    if not KNOWN_DEVICE.match(t.device):
        raise ConfigError("trainer.device", t.device, "use auto, cpu, cuda, cuda:N or mps")
    if t.num_threads < 0:
        raise ConfigError("trainer.num_threads", t.num_threads, "must be >= 0 (0 keeps torch's default)")
    for p in cfg.monitor.percentiles:
        if not 0.0 < p < 100.0:
            raise ConfigError("monitor.percentiles", list(cfg.monitor.percentiles), "each must lie in (0, 100)")
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
    if not bn.eps > 0:
        raise ConfigError("bn.eps", bn.eps, "must be > 0")
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
    width_last = m.hidden[-1] if m.name == "mlp" else m.fc
    if cfg.monitor.unit >= width_last:
        raise ConfigError("monitor.unit", cfg.monitor.unit,
                          f"must be < the width of the last hidden layer ({width_last})")
    if str(cfg.data.augment).lower() not in ("false", "off", "none", "true", "standard", "light"):
        raise ConfigError("data.augment", cfg.data.augment, "use false, standard (crops + flips) or light (flips)")
    if cfg.data.scaling not in ("unit", "standardize"):
        raise ConfigError("data.scaling", cfg.data.scaling, "use unit or standardize")


MIN_RECORDS = 5


def record_count(max_steps: int, every: int) -> int:
    """Records a run writes for an interval: one at step 0, one every ``every`` steps and one at
    the last step when it is not a multiple of ``every``."""
    return 1 + max_steps // every + (1 if max_steps % every else 0)


def sparse_record_warnings(cfg: DictConfig) -> list[str]:
    """Warnings for intervals that leave fewer than ``MIN_RECORDS`` records (too few for
    ``bnexp report`` to give a verdict from): one message per key, naming it."""
    t = cfg.trainer
    out = []
    for key, what in (("eval_every", "test evaluations"), ("hist_every", "covariate-shift monitor records")):
        n = record_count(int(t.max_steps), int(t[key]))
        if n < MIN_RECORDS:
            out.append(f"trainer.{key}={t[key]} with trainer.max_steps={t.max_steps} gives only {n} {what} "
                       f"(fewer than {MIN_RECORDS}); bnexp report needs at least {MIN_RECORDS} for a verdict. "
                       f"Use trainer.{key}<={max(1, int(t.max_steps) // (MIN_RECORDS - 1))}.")
    return out
