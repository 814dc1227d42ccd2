"""The run configuration: one home per key.

Every key is a field of the dataclasses below, with its default, a one-line description (shown by
``bnexp train --help``) and its range (a :class:`bnexp.config.checks.Check`) in the field's metadata.
They are registered in Hydra's ConfigStore and are the first entry of ``conf/config.yaml``'s
defaults list, so OmegaConf type-checks every value and rejects unknown keys (struct mode) while
Hydra composes; :func:`validate` then walks the fields' checks and the few checks that span several
keys. The YAML files under ``conf/`` only choose group options and presets (and say why); a group
option states only where it differs from the dataclass defaults.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

from bnexp.config import checks as c
from bnexp.errors import ConfigError, UserError
from bnexp.config.resources import DATASETS
from bnexp.runfolders.runnames import safe_dirname, sweep_subdir

INITS = ("normal", "kaiming", "xavier", "torch")


def opt(default: Any, help: str, check: c.Check | None = None) -> Any:
    """A config field: ``default``, a one-line ``help`` text and the range ``check`` of its values."""
    meta = {"help": help, "check": check}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


def _net_dropout() -> Any:
    """The ``dropout`` field of every ``model`` option (MLP, CNN): no dropout by default."""
    return opt(0.0, "dropout probability before the classifier", c.interval(0, 1, "[)"))


def _net_init(default: str) -> Any:
    """The ``init`` field of every ``model`` option (MLP, CNN), ``default`` the option's own scheme."""
    return opt(default, "weights: normal (N(0, init_std^2)) | kaiming (He normal, fan-in) | xavier "
                        "(Glorot uniform) | torch (torch's default)",
               c.optional(c.one_of(*INITS), "normal if init_std is set, else torch"))


class Activation(str, Enum):
    """The hidden nonlinearity g in z = g(BN(Wu)) (paper Sec. 3.2)."""

    sigmoid = "sigmoid"
    relu = "relu"


class PopulationStats(str, Enum):
    """How inference-time BN statistics are obtained (paper Alg. 2).

    ``ema``: running (exponential moving) averages of the mini-batch mean and unbiased variance,
    updated at every training step. ``recompute``: Alg. 2 steps 10-12 after training: with frozen
    weights, E[x] = average of mu_B and Var[x] = m/(m-1) * average of sigma2_B over
    ``bn.recompute_batches`` training mini-batches.
    """

    ema = "ema"
    recompute = "recompute"


class Normalizer(str, Enum):
    """Which normalizer ``bn.enabled`` puts on every hidden layer (set by the group options
    ``bn=true|noisy`` (batch), ``bn=layer``, ``bn=group``; docs/normalizers.md).

    ``batch``: Batch Normalization (Alg. 1), statistics per unit over the mini-batch.
    ``layer``: Layer Normalization (Ba et al. 2016), statistics per example over all its units
    (conv: over (C, H, W)). ``group``: Group Normalization (Wu & He 2018), statistics per example
    over groups of ``bn.groups`` consecutive units (conv: channels, each with its H x W positions).
    """

    batch = "batch"
    layer = "layer"
    group = "group"


class Position(str, Enum):
    """Where the normalizer sits: ``before`` the nonlinearity, z = g(N(Wu)) (paper Sec. 3.2, the
    layer's bias dropped), or ``after`` it, z = N(g(Wu + b)) (the bias kept)."""

    before = "before"
    after = "after"


class Schedule(str, Enum):
    """Learning-rate schedule, applied per step."""

    constant = "constant"
    exponential = "exponential"  # lr * decay_rate ** (step / decay_steps)
    step = "step"  # lr * decay_rate ** floor(step / decay_steps)


@dataclass
class BNConfig:
    """Normalization of every hidden layer (group ``bn``: true, false, noisy, layer, group): by default
    Batch Normalization on Wu before the nonlinearity (paper Sec. 3.2). The keys after ``position``
    concern batch statistics and keep their defaults with ``bn=layer`` / ``bn=group``
    (:func:`bnexp.config.checks.check_normalizer`)."""

    enabled: bool = opt(True, "BN (or bn.norm's normalizer) on Wu before every hidden nonlinearity; the layer's "
                              "bias is dropped (Sec. 3.1-3.2)")
    norm: Normalizer = opt(Normalizer.batch, "the normalizer: batch (BN, bn=true|noisy) | layer (LayerNorm per "
                                             "example, bn=layer) | group (GroupNorm, bn=group), docs/normalizers.md")
    groups: int = opt(4, "bn=group: G groups of width/G consecutive units (channels); must divide every hidden "
                         "width (4 divides those of every preset)", c.at_least(1))
    position: Position = opt(Position.before, "before the nonlinearity, g(N(Wu)) (Sec. 3.2; bias dropped) | after "
                                              "it, N(g(Wu + b)) (bias kept)")
    population_stats: PopulationStats = opt(PopulationStats.ema, "inference statistics: ema (running averages) | "
                                            "recompute (Alg. 2, steps 10-12, after training)")
    recompute_batches: int = opt(100, "K training mini-batches averaged when population_stats=recompute",
                                 c.at_least(1))
    momentum: float = opt(0.1, "running-average momentum (population_stats=ema)", c.interval(0, 1, "(]"))
    eps: float = opt(1e-5, "epsilon of Alg. 1", c.in_float32())
    impl: str = opt("torch", "torch (nn.BatchNorm1d/2d, fast) | reference (bnexp.nets.bn, written from Alg. 1)",
                    c.one_of("torch", "reference"))
    # "noisy BN" (Santurkar et al. 2018, Sec. 2.1): after each BN layer, in training only, y <- s*y + m
    noise: bool = opt(False, "noisy BN (Santurkar et al. 2018): y <- s*y + m after each BN layer in training; "
                             "evaluation: y <- E[s]*y + E[m] = (1 + b)/2 * y")
    noise_a: float = opt(0.5, "noisy BN: mu_t ~ U(-a, a) per unit and step", c.at_least(0))
    noise_b: float = opt(1.25, "noisy BN: sigma_t ~ U(1, b) per unit and step", c.at_least(1))
    noise_c: float = opt(0.1, "noisy BN: m ~ U(mu_t - c, mu_t + c) per activation", c.at_least(0))
    noise_d: float = opt(0.1, "noisy BN: s ~ N(sigma_t, d^2) per activation", c.at_least(0))
    noise_scale: float = opt(1.0, "noisy BN strength: multiplies the spread around s = 1, m = 0 (a, b - 1, c, d); "
                                  "0 = plain BN", c.Check(lambda v: v >= 0, "must be a finite number >= 0 "
                                                                             "(1 = the default noise)"))
    sync: bool = opt(True, "torchrun, N replicas: statistics over the global mini-batch, else batch_size/N each "
                           "(docs/cluster.md)")
    ghost_batch_size: Optional[int] = opt(None, "g: normalize each ghost batch of g examples alone (Hoffer et al. "
                                                "2017); null: the whole mini-batch")


@dataclass
class MLPConfig:
    """Fully-connected network (``model=mlp``); the paper's Fig. 1 net is hidden=[100,100,100]."""

    name: str = opt("mlp", "the network (chosen with model=mlp|cnn)", c.one_of("mlp"))
    hidden: List[int] = opt([100, 100, 100], "units of each hidden layer", c.widths())
    init_std: Optional[float] = opt(0.01, "the std of init=normal: \"small random Gaussian values\" W ~ N(0, "
                                          "0.01^2), biases 0", c.optional(c.in_float32(), "with init=normal: 0.01"))
    dropout: float = _net_dropout()
    init: Optional[str] = _net_init("normal")


@dataclass
class CNNConfig:
    """Small convolutional network (``model=cnn``) for 28x28 (MNIST) and 32x32 (CIFAR-10) inputs.

    Each stage is ``convs_per_stage`` 3x3 convolutions (each followed by BN when enabled, then the
    nonlinearity) and a 2x2 max-pool; then one hidden fully-connected layer of ``fc`` units and the
    classifier.
    """

    name: str = opt("cnn", "the network (chosen with model=mlp|cnn)", c.one_of("cnn"))
    channels: List[int] = opt([32, 64], "channels of each stage (3x3 convs, then a 2x2 max-pool)", c.widths())
    convs_per_stage: int = opt(1, "3x3 convolutions per stage", c.at_least(1))
    fc: int = opt(128, "units of the hidden fully-connected layer", c.at_least(1))
    init_std: Optional[float] = opt(None, "the std of init=normal", c.optional(c.in_float32(), "torch's init"))
    dropout: float = _net_dropout()
    init: Optional[str] = _net_init("torch")


@dataclass
class DataConfig:
    """Dataset selection and loading (group ``data``: mnist, cifar10)."""

    name: str = opt("mnist", "the dataset (chosen with data=mnist|cifar10)", c.one_of(*DATASETS))
    root: Optional[str] = opt(None, "folder of the data files; null: $BNEXP_DATA_ROOT, else ~/.cache/bnexp/data")
    download: bool = opt(False, "fetch the dataset when it is missing (needs internet)")
    verify_checksums: bool = opt(True, "CIFAR-10: torchvision's md5 check of the batch files; false: load a "
                                       "re-encoded copy (with a warning)")
    scaling: str = opt("unit", "unit: pixels / 255 in [0, 1] (the paper leaves it open) | standardize: "
                               "per-channel z-score", c.one_of("unit", "standardize"))
    augment: str = opt("false", "false | standard (4-pixel-pad random crops + flips) | light (flips only)",
                       c.one_of("false", "standard", "light", "off", "none", "true", ignore_case=True))
    validation: int = opt(0, "training images held out as a validation split (one fixed seeded draw) and "
                             "evaluated instead of the test set, for tuning; 0: evaluate on the test set",
                          c.at_least(0))


@dataclass
class OptimConfig:
    """Plain mini-batch SGD and its learning-rate schedule (group ``optim``); the rate is top-level ``lr``."""

    name: str = opt("sgd", "the optimizer (only sgd)", c.Check(lambda v: v == "sgd", "only sgd is available"))
    momentum: float = opt(0.0, "SGD momentum", c.interval(0, 1, "[)"))
    nesterov: bool = opt(False, "Nesterov momentum")
    weight_decay: float = opt(0.0, "L2 penalty coefficient", c.at_least(0))
    schedule: Schedule = opt(Schedule.constant, "rate schedule per step: constant | exponential: lr * decay_rate ** "
                                                "(step / decay_steps) | step: ... ** floor(step / decay_steps)")
    decay_rate: float = opt(1.0, "factor of the rate per decay_steps (schedule exponential or step)",
                            c.interval(0, 1, "(]"))
    decay_steps: int = opt(1000, "steps per factor decay_rate", c.at_least(1))


@dataclass
class TrainerConfig:
    """The step-based training loop."""

    max_steps: int = opt(50_000, "training steps (SGD updates)", c.at_least(1))
    batch_size: int = opt(60, "mini-batch size m (>= 2 with BN: it needs m > 1)", c.at_least(1))
    eval_every: int = opt(1000, "steps between test-set evaluations", c.at_least(1))
    hist_every: int = opt(1000, "steps between covariate-shift monitor records", c.at_least(1))
    log_every: int = opt(50, "steps between train-loss scalars and divergence checks", c.at_least(1))
    probe_size: int = opt(1000, "fixed test images fed to the shift monitor", c.at_least(1))
    targets: List[float] = opt([0.9, 0.95, 0.97, 0.98], "test accuracies whose first step is recorded (steps "
                                                        "to target)", c.targets())
    device: str = opt("auto", "auto (cuda if available, else cpu) | cpu | cuda | cuda:N | mps", c.device())
    num_threads: int = opt(0, "torch intra-op threads; 0: 1 for small networks such as the paper MLP, else torch's "
                              "default", c.Check(lambda v: v >= 0, "must be >= 0 (0 keeps torch's default)"))
    progress: bool = opt(True, "show the rich progress bar")
    async_records: bool = opt(True, "write test evaluations and monitor records on a second thread beside the "
                                    "step loop (bnexp.train.background; same numbers); false: in the loop")
    save_checkpoint: bool = opt(True, "keep checkpoint.pt of the finished run")
    ckpt_every: int = opt(5000, "steps between checkpoints (atomic, complete state)", c.at_least(1))
    resume: Optional[bool] = opt(None, "null: resume the run folder's unfinished run; true: also find the newest "
                                       "unfinished run with the same overrides; false: start over")
    precision: str = opt("fp32", "fp32 | tf32: TF32 matrix products and convolutions on CUDA devices of compute "
                                 "capability >= 8.0 | bf16: bfloat16 autocast of the forward pass where the device "
                                 "has it natively; else fp32 (bnexp.train.precision)",
                         c.one_of("fp32", "tf32", "bf16"))
    trust_checkpoint: bool = opt(False, "load the run folder's checkpoint.pt even when it needs more than tensors "
                                        "(full unpickling, which can run code: only a file you trust); false: "
                                        "such a checkpoint is refused (bnexp.train.checkpoint)")


@dataclass
class MonitorConfig:
    """Covariate-shift monitor: what is recorded on the probe set every hist_every steps."""

    percentiles: List[float] = opt([15.0, 50.0, 85.0], "percentiles of each layer's input to the nonlinearity "
                                                       "(paper Fig. 1(b, c))", c.percentiles())
    unit: int = opt(0, "the fixed \"typical\" unit (channel for conv) of the last hidden layer", c.at_least(0))
    histograms: bool = opt(True, "also log TensorBoard histograms")
    max_values: int = opt(200_000, "cap on values per layer used for percentiles and histograms", c.at_least(100))
    shift_metrics: bool = opt(True, "per-unit shift to the previous / first record: Kolmogorov-Smirnov distance "
                                    "and W1 / initial spread (scale-free), raw W1, |delta mean|/std, |log std ratio|, "
                                    "with sampling-noise floors (bnexp.train.ics)")
    shift_max_values: int = opt(20_000, "cap on the values per layer kept for the shift metrics",
                                c.at_least(100))
    bn_stats: str = opt("batch", "statistics BN normalizes the probe with: batch (as in training) | population "
                                 "(running averages) | probe (one batch)", c.one_of("batch", "population", "probe"))
    grad_ics: bool = opt(False, "gradient-based ICS (Santurkar et al. 2018, Def. 2.1); about one step per layer")
    grad_ics_every: int = opt(1000, "steps between gradient-ICS probes", c.at_least(1))
    landscape: bool = opt(False, "loss-landscape smoothness along the gradient (Santurkar et al. 2018, Sec. 3.1)")
    landscape_every: int = opt(1000, "steps between landscape probes", c.at_least(1))
    landscape_step_sizes: List[float] = opt([0.25, 0.5, 1.0, 2.0, 4.0], "landscape steps, as multiples of the "
                                            "current learning rate", c.positive_list("multiples of the learning "
                                                                                     "rate"))
    landscape_rel_step_sizes: List[float] = opt([0.005, 0.01, 0.02, 0.05, 0.1], "scale-invariant landscape steps: "
                                                "relative to each parameter tensor's norm, and the filter-normalized "
                                                "probe's steps (the verdicts use that one)",
                                                c.positive_list("relative step lengths"))


@dataclass
class LoggerConfig:
    """Where a run's scalars go (group logger: tensorboard (default), csv, mlflow, or a list of them).

    Combine them as ``logger=[tensorboard,csv,mlflow]`` (bnexp.train.loggers). The run's own records
    (metrics.jsonl, shift.jsonl, summary.json) are written whatever the loggers. Result-neutral: a run resumes
    and its folder is named alike whichever loggers it has."""

    tensorboard: bool = opt(False, "TensorBoard event files in the run folder: scalars, Custom Scalars, histograms, "
                                   "HParams, images (logger=tensorboard)")
    csv: bool = opt(False, "every scalar as a row step,tag,value of scalars.csv in the run folder (logger=csv)")
    mlflow: bool = opt(False, "every scalar as an MLflow metric, the HParams as params (logger=mlflow; needs "
                              "pip install -e '.[mlflow]')")
    mlflow_tracking_uri: Optional[str] = opt(None, "MLflow store, no server needed: null: $MLFLOW_TRACKING_URI, "
                                                   "else sqlite:///mlflow.db in the folder bnexp runs from (a local "
                                                   "file); any sqlite:///PATH.db or a server's URL")
    mlflow_experiment: str = opt("bnexp", "the MLflow experiment's name")


@dataclass
class ScaleConfig:
    """Sizes of the CIFAR-10 presets (group ``scale``: cpu (these defaults), gpu); unused without experiment=NAME."""

    name: str = opt("cpu", "the scale (chosen with scale=cpu|gpu)")
    base_lr: float = opt(0.025, "the baseline's rate; the presets are multiples of it", c.positive())
    lr_grid: List[float] = opt([0.01, 0.025, 0.0625], "the baseline's rate grid of scripts/reproduce_cifar.sh "
                                                      "(factor 2.5 apart)", c.positive_list("rates"))
    base_weight_decay: float = opt(0.0005, "L2 coefficient of the baseline (BN-x5/x30 use 1/5 of it)", c.at_least(0))
    channels: List[int] = opt([8, 16, 32], "VGG-style stages of convs_per_stage 3x3 convs, each ending in a 2x2 "
                                           "max-pool", c.widths())
    convs_per_stage: int = opt(3, "3 x 3 convs + 1 fc = 10 hidden layers, no residual connections", c.at_least(1))
    fc: int = opt(64, "units of the hidden fully-connected layer", c.at_least(1))
    init: str = opt("kaiming", "He normal (fan-in) for every preset, the sigmoid ones included", c.one_of(*INITS))
    dropout: float = opt(0.3, "baseline dropout before the classifier (BN-x5/x30 drop it)", c.interval(0, 1, "[)"))
    batch_size: int = opt(64, "mini-batch size of every preset", c.at_least(2))
    baseline_steps: int = opt(6000, "the baseline's budget (~7.7 epochs of mini-batches of 64)", c.at_least(1))
    fast_steps: int = opt(1500, "BN-x5/x30/x5-Sigmoid budget: 1/4 of it (their halvings end at 1/6, then a tail)",
                          c.at_least(1))
    decay_rate: float = opt(0.5, "exponential decay: lr * decay_rate ** (step / decay_steps)", c.interval(0, 1, "(]"))
    halvings: int = opt(5, "the baseline's rate ends at decay_rate ** halvings of its start", c.at_least(1))
    fast_decay: int = opt(6, "BN-x5/x30/x5-Sigmoid decay this much faster (paper Sec. 4.2.1)", c.at_least(1))
    evals: int = opt(16, "test evaluations per run (eval_every = budget / evals)", c.at_least(1))
    precision: str = opt("fp32", "fp32 | bf16 (bf16 is not validated yet, docs/cifar/PLAN.md)",
                         c.one_of("fp32", "bf16"))


@dataclass
class Config:
    """The whole run configuration (``bnexp train`` composes it from ``conf/``)."""

    model: Any = MISSING  # MLPConfig or CNNConfig: the model group's options extend /schema/model/<name>
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    bn: BNConfig = field(default_factory=BNConfig)
    act: Activation = opt(Activation.sigmoid, "the hidden nonlinearity: sigmoid | relu")
    lr: float = opt(0.12, "learning rate (SGD step size); the same for BN and no BN (README)",
                    c.positive("the learning rate must be > 0"))
    seed: int = opt(0, "seeds torch, numpy, python and the mini-batch order",
                    c.Check(lambda v: 0 <= v < c.MAX_SEED, "must be an integer in [0, 2^62)"))
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    experiment: Optional[str] = opt(None, "the preset, set by experiment=NAME (or +experiment=NAME; conf/experiment/)")
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)


def _div(a, *divisors) -> int:
    """``${bnexp_div:a,b[,c]}`` = round(a / (b * c)), at least 1 (a preset's steps per decay or evaluation)."""
    d = 1.0
    for b in divisors:
        d *= float(b)
    if d <= 0:
        raise ValueError(f"cannot divide {a} by {' * '.join(map(str, divisors))}: the divisors must be > 0")
    return max(1, int(round(float(a) / d)))


def _neutral_keys() -> list[str]:
    """``${bnexp_neutral_keys:}``: the result-neutral keys (leave them out of run-folder names)."""
    from bnexp.runfolders.neutral_keys import RESULT_NEUTRAL_KEYS

    return [k for k in RESULT_NEUTRAL_KEYS if not k.startswith("hydra.")]


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore and bnexp's resolvers (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="bnexp_schema", node=Config)
    cs.store(group="schema/model", name="mlp", node=MLPConfig)
    cs.store(group="schema/model", name="cnn", node=CNNConfig)
    resolvers = {
        "bnexp_dirname": safe_dirname,
        "bnexp_sweep_subdir": sweep_subdir,  # sweep jobs are named by the swept keys only (bnexp.runfolders.runnames)
        "bnexp_mul": lambda a, b: float(a) * float(b),  # presets: 5x the base rate, weight decay / 5
        "bnexp_div": _div,
        "bnexp_neutral_keys": _neutral_keys,
    }
    for name, fn in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


register_configs()


# the checkout's conf/ (an editable install, tests, scripts), else the copy a wheel ships as bnexp/conf (setup.py)
_CHECKOUT_CONF, _SHIPPED_CONF = (Path(__file__).resolve().parents[i] / "conf" for i in (2, 1))
CONF_DIR = _CHECKOUT_CONF if _CHECKOUT_CONF.is_dir() or not _SHIPPED_CONF.is_dir() else _SHIPPED_CONF


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


def hydra_overrides(args: list[str]) -> list[str]:
    """The overrides as Hydra must read them: ``bn`` values quoted (:func:`quote_bn_overrides`) and a bare
    ``experiment=NAME`` (a preset, conf/experiment/) given the ``+`` that adds the group Hydra's defaults list
    lacks: ``["experiment=bn_x5"]`` -> ``["+experiment=bn_x5"]``. Without it Hydra would set the plain key
    ``experiment`` to the name and load no preset."""
    return [f"+{a}" if a.startswith("experiment=") else a for a in quote_bn_overrides(args)]


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose the run config from ``conf/`` outside the CLI (benchmarks, tests, notebooks).

    Args:
        overrides: Hydra overrides as on the command line, e.g. ``["bn=false", "lr=0.1"]``.

    Raises:
        hydra.errors.HydraException / omegaconf errors for unknown keys or wrong types
        (:func:`bnexp.config.explain.explain` words them for the user).
    """
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=hydra_overrides(list(overrides or [])))


def schema_fields(node: DictConfig) -> dict[str, dataclasses.Field]:
    """{key: dataclass field} of a config node built from a schema ({} for an untyped node)."""
    tp = OmegaConf.get_type(node)
    return {f.name: f for f in dataclasses.fields(tp)} if dataclasses.is_dataclass(tp) else {}


def unknown_key_message(key: str, schema: type | None, override: str | None = None) -> str:
    """One message for a key the schema ``schema`` (the node's dataclass) does not have, with the
    closest key of that node suggested (difflib) and, for a model key, the model it belongs to."""
    import difflib

    prefix, _, leaf = key.rpartition(".")
    given = f" (in {override})" if override and override.lstrip("+~").split("=")[0] != key else ""
    names = [f.name for f in dataclasses.fields(schema)] if dataclasses.is_dataclass(schema) else []
    full = (lambda n: f"{prefix}.{n}" if prefix else n)
    if schema in (MLPConfig, CNNConfig):
        this, other = ("mlp", CNNConfig) if schema is MLPConfig else ("cnn", MLPConfig)
        if leaf in {f.name for f in dataclasses.fields(other)}:
            return (f"unknown config key {key}{given}: model={this} has no such key (it belongs to model="
                    f"{'cnn' if this == 'mlp' else 'mlp'}); the keys of model={this} are {', '.join(names)}.")
    same = [n for n in names if n.lower() == leaf.lower()]  # BN=true: keys are lower case
    close = same or difflib.get_close_matches(leaf, names, n=2, cutoff=0.6)
    hint = f" Did you mean {' or '.join(full(n) for n in close)}?" if close else ""
    if same and override and "=" in override:
        hint = f" Keys are case-sensitive: did you mean {full(same[0])}={override.split('=', 1)[1]}?"
    return f"unknown config key {key}{given}.{hint} bnexp train --help lists every key with its default."


def check_schema_keys(cfg: DictConfig, prefix: str = "") -> None:
    """Refuse keys a schema does not define and schema keys that are gone.

    Hydra rejects an unknown ``key=value`` itself; ``+key=value`` adds a key even to a structured
    node and ``~key`` deletes one, so both are checked here.

    Raises:
        UserError: naming the key (and the closest valid key).
    """
    known = schema_fields(cfg)
    for key in cfg.keys():
        if known and key not in known:
            raise UserError(unknown_key_message(f"{prefix}{key}", OmegaConf.get_type(cfg)))
        child = cfg._get_node(key)
        if isinstance(child, DictConfig) and not child._is_missing() and not child._is_none():
            check_schema_keys(child, f"{prefix}{key}.")
    for key in known:
        if key not in cfg:
            raise UserError(f"config key {prefix}{key} was deleted (~{prefix}{key}); every run needs it: drop "
                            f"the ~{prefix}{key} override.")


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True, enum_to_str=True) \
        if isinstance(value, (DictConfig, ListConfig)) else value


def check_fields(cfg: DictConfig, prefix: str = "") -> None:
    """Each field's own range check (``check`` in its metadata), depth first in schema order.

    Raises:
        ConfigError: naming the first key whose value is outside its range.
    """
    for name, f in schema_fields(cfg).items():
        child = cfg._get_node(name)
        if isinstance(child, DictConfig):
            check_fields(child, f"{prefix}{name}.")
            continue
        check = f.metadata.get("check")
        if check is not None:
            value = _plain(cfg[name])
            if not check(value):
                raise ConfigError(f"{prefix}{name}", value, check.allowed)


def resolved(cfg: DictConfig) -> dict:
    """The config with every interpolation resolved, as plain Python (enums as their names).

    Raises:
        ConfigError: an interpolation (e.g. a preset's ``${bnexp_div:...}``) cannot be computed,
            naming its key.
    """
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    except OmegaConfBaseException as exc:
        cause = exc.__cause__ or exc
        raise ConfigError(getattr(exc, "full_key", None) or "?", "?",
                          f"cannot be computed: {str(getattr(cause, 'msg', cause)).splitlines()[0]}") from None


def validate(cfg: DictConfig) -> None:
    """Check a composed config: schema keys, representable numbers, each field's range, and the
    checks that span several keys (:func:`bnexp.config.checks.cross_checks`).

    Raises:
        UserError: an unknown or deleted key (``+key=`` / ``~key``).
        ConfigError: naming the key, the value and what is allowed, for the first violation found
            (lr <= 0, batch_size < 2 with BN on (paper Sec. 3.1: BN needs m > 1), max_steps < 1,
            percentiles outside (0, 100), unknown device, layer widths < 1, ...).
    """
    check_schema_keys(cfg)
    check_fields(cfg.scale, "scale.")  # the presets compute their budgets from it
    c.check_representable(resolved(cfg))
    check_fields(cfg)
    c.cross_checks(cfg, BNConfig(), MonitorConfig())
    if cfg.get("logger") is not None and cfg.logger.get("mlflow"):
        problem = c.mlflow_available()
        if problem:
            raise UserError(problem)


def describe(cfg: DictConfig, prefix: str = "") -> list[tuple[str, str, str]]:
    """(key, value, one-line description) of every leaf of ``cfg``, in schema order: what
    ``bnexp train --help`` lists. Values as on the command line (``null``, ``false``, ``[1, 2]``)."""
    out = []
    known = schema_fields(cfg)
    for key in cfg.keys():
        f = known.get(key)
        node = cfg._get_node(key)
        if isinstance(node, DictConfig):
            out += describe(node, f"{prefix}{key}.")
            continue
        try:
            value = _plain(cfg[key])
        except Exception:  # an interpolation that cannot be resolved here: show it as written
            value = node._value()
        out.append((f"{prefix}{key}", _as_override(value), f.metadata.get("help", "") if f is not None else ""))
    return out


def _as_override(value: Any) -> str:
    """A value as it is written on the command line: ``null``, ``true``, ``[100,100]``, ``1e-05``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_as_override(v) for v in value) + "]"
    return value.name if isinstance(value, Enum) else str(value)
