"""Networks with a Batch Normalization switch.

Every hidden layer is a :class:`HiddenLayer`: an affine map Wu (+ b), optionally
BN on Wu (with the bias dropped, since BN's beta replaces it; paper Sec. 3.1-3.2),
then the nonlinearity g. The input to g -- the pre-activation, which is the BN
output when BN is on -- is what the covariate-shift monitor records; it is exposed
as the input of the ``act`` sub-module of every hidden layer.

The normalizer is BN (``bn.norm=batch``), LayerNorm (``layer``) or GroupNorm (``group``), all
from :mod:`bnexp.nets.bn`; ``bn.position=after`` puts it after g instead, z = N(g(Wu + b)), with the
bias kept (docs/normalizers.md). This module only chooses and places the layers.
"""

from __future__ import annotations

import math

import torch
from omegaconf import OmegaConf
from torch import nn

from bnexp.nets.bn import DEFAULT_GROUPS, GhostBatchNorm, GroupNorm, LayerNorm, NoisyBatchNorm, ReferenceBatchNorm
from bnexp.config.checks import option_value
from bnexp.errors import ConfigError


def make_activation(name: str) -> nn.Module:
    """``sigmoid`` or ``relu`` as a module. Raises ValueError for other names."""
    if name == "sigmoid":
        return nn.Sigmoid()
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unknown activation {name!r}")


class HiddenLayer(nn.Module):
    """z = g(BN(Wu)) with BN on, z = g(Wu + b) without (paper Sec. 3.2); with ``after``,
    z = BN(g(Wu + b)).

    Args:
        affine: ``nn.Linear`` or ``nn.Conv2d``, created without bias when a normalizer
            precedes g.
        bn: the normalizer of this layer (``nn.BatchNorm1d`` after a linear map,
            ``nn.BatchNorm2d`` -- per channel over (N, H, W) -- after a convolution, or
            another :mod:`bnexp.nets.bn` layer: LayerNorm, GroupNorm, noisy BN), or None.
        act: the nonlinearity g.
        after: apply ``bn`` to g's output instead of g's input (``bn.position=after``).
    """

    def __init__(self, affine: nn.Module, bn: nn.Module | None, act: nn.Module, after: bool = False):
        super().__init__()
        self.affine = affine
        self.bn = bn  # None without BN (no Identity call: the step loop is overhead-bound on CPU)
        self.act = act
        self.after = bool(after and bn is not None)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return hidden_step(self, u)


def hidden_step(layer: HiddenLayer, u: torch.Tensor) -> torch.Tensor:
    """``layer``'s map of ``u`` (:class:`HiddenLayer`): affine, then BN, g in the layer's order.

    A plain function, so that :class:`MLP` runs its layers without ``nn.Module.__call__`` (on CPU
    that small net is bound by per-call overhead); the sub-modules are called as usual, so hooks on
    ``affine``, ``bn`` and ``act`` (the monitor's) still fire.
    """
    z = layer.affine(u)
    if layer.bn is not None and not layer.after:
        z = layer.bn(z)
    z = layer.act(z)
    if layer.after:
        z = layer.bn(z)
    return z


def _option(bn_cfg, key: str, default: str) -> str:
    """``bn_cfg.<key>`` as text (:func:`bnexp.config.checks.option_value`), ``default`` when the node lacks it."""
    v = getattr(bn_cfg, key, None)
    return default if v is None else str(option_value(v))


def norm_after(bn_cfg) -> bool:
    """True when ``bn.position=after`` (the normalizer follows the nonlinearity and the bias stays)."""
    return bn_cfg is not None and bool(bn_cfg.enabled) and _option(bn_cfg, "position", "before") == "after"


def _norm_layer(num_features: int, conv: bool, bn_cfg) -> nn.Module:
    """The normalizer of a layer of ``num_features`` units (channels): BN (``bn.norm=batch``, see
    :func:`_bn_layer`), :class:`bnexp.nets.bn.LayerNorm` or :class:`bnexp.nets.bn.GroupNorm` (``bn.groups``
    groups; a node without the key: :data:`bnexp.nets.bn.DEFAULT_GROUPS`)."""
    kind = _option(bn_cfg, "norm", "batch")
    impl, eps = _option(bn_cfg, "impl", "torch"), float(bn_cfg.eps)
    if kind == "batch":
        return _bn_layer(num_features, conv, bn_cfg)
    if kind == "layer":
        return LayerNorm(num_features, eps=eps, impl=impl)
    if kind == "group":
        g = int(getattr(bn_cfg, "groups", DEFAULT_GROUPS))
        if num_features % g:
            raise ConfigError("bn.groups", g, f"must divide the width of every normalized layer ({num_features})")
        return GroupNorm(num_features, g, eps=eps, impl=impl)
    raise ConfigError("bn.norm", kind, "use batch, layer or group")


def _bn_layer(num_features: int, conv: bool, bn_cfg) -> nn.Module:
    ghost = getattr(bn_cfg, "ghost_batch_size", None)
    if _option(bn_cfg, "impl", "torch") == "reference":
        bn: nn.Module = ReferenceBatchNorm(num_features, eps=bn_cfg.eps, momentum=bn_cfg.momentum)
    elif ghost is not None:
        bn = GhostBatchNorm(num_features, int(ghost), eps=bn_cfg.eps, momentum=bn_cfg.momentum)
    else:
        cls = nn.BatchNorm2d if conv else nn.BatchNorm1d
        bn = cls(num_features, eps=bn_cfg.eps, momentum=bn_cfg.momentum)
    if getattr(bn_cfg, "noise", False):
        # the noise generator's seed is drawn from torch's (already seeded) global RNG
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        # bn.noise_scale k multiplies the spread around the identity (s = 1, m = 0): a, b - 1, c, d
        k = float(getattr(bn_cfg, "noise_scale", 1.0))
        bn = NoisyBatchNorm(bn, k * bn_cfg.noise_a, 1 + k * (bn_cfg.noise_b - 1), k * bn_cfg.noise_c,
                            k * bn_cfg.noise_d, seed=seed)
    return bn


INITS = ("normal", "kaiming", "xavier", "torch")


def _init_weights(model: nn.Module, init: str | None, init_std: float | None) -> None:
    """Initialize every linear/conv layer of ``model`` (``model.init``).

    * ``normal``: W ~ N(0, init_std^2), b = 0 (the paper's "small random Gaussian values", Sec. 4.1).
    * ``kaiming``: He et al. 2015 normal init, fan-in mode, ReLU gain: W ~ N(0, 2 / fan_in), b = 0,
      which keeps the pre-activation variance roughly constant from layer to layer in a plain
      ReLU network (He et al. 2015, Sec. 2.2, eq. 10). The classifier gets the same rule.
    * ``xavier``: Glorot & Bengio 2010 "normalized initialization" (eq. 16), W ~ U(-a, a) with
      a = sqrt(6 / (fan_in + fan_out)), i.e. Var W = 2 / (fan_in + fan_out) (gain 1, torch's gain for
      the sigmoid), b = 0; ``torch.nn.init.xavier_uniform_``. A control for the small Gaussian, which
      puts the plain sigmoid net on a slow start (docs/mnist/README.md, "Design").
    * ``torch``: torch's default (Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(fan_in),
      1/sqrt(fan_in)) weights and biases), left as constructed.
    * None: ``normal`` when ``init_std`` is given, else ``torch`` (the behaviour before ``model.init``).

    Raises:
        ConfigError: unknown ``init`` (key ``model.init``), or ``normal`` without a positive
            ``init_std`` (key ``model.init_std``).
    """
    if init is None:
        init = "torch" if init_std is None else "normal"
    if init not in INITS:
        raise ConfigError("model.init", init, "use normal, kaiming, xavier or torch")
    if init == "torch":
        return
    if init == "normal" and not (init_std is not None and init_std > 0):
        raise ConfigError("model.init_std", init_std, "model.init=normal needs a std > 0 (e.g. 0.01)")
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            if init == "normal":
                nn.init.normal_(m.weight, 0.0, init_std)
            elif init == "xavier":
                nn.init.xavier_uniform_(m.weight)
            else:
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class MLP(nn.Module):
    """Fully-connected network: flatten -> hidden layers -> (dropout) -> linear classifier.

    Input (N, C, H, W) or (N, D); output logits (N, num_classes). The paper's Fig. 1
    network is ``MLP(784, [100, 100, 100], 10, "sigmoid", bn)``.

    Args:
        in_features: D = C*H*W.
        hidden: widths of the hidden layers.
        num_classes: output width.
        act: ``sigmoid`` or ``relu``.
        bn_cfg: the ``bn`` config node (``enabled``, ``norm``, ``groups``, ``position``, ``eps``,
            ``momentum``, ``impl``, ``noise``, ``ghost_batch_size``), or None for no BN; a node
            without ``norm`` / ``position`` means BN before g.
        init_std: std of the Gaussian weight init (``init="normal"``).
        dropout: dropout probability before the classifier.
        init: ``normal``, ``kaiming``, ``xavier`` or ``torch``; None: ``normal`` when ``init_std`` is given,
            else torch's default (see :func:`_init_weights`).
    """

    def __init__(self, in_features: int, hidden: list[int], num_classes: int, act: str,
                 bn_cfg=None, init_std: float | None = 0.01, dropout: float = 0.0, init: str | None = None):
        super().__init__()
        use_bn = bn_cfg is not None and bn_cfg.enabled
        after = norm_after(bn_cfg)
        layers = []
        width = in_features
        for h in hidden:
            layers.append(HiddenLayer(nn.Linear(width, h, bias=not use_bn or after),
                                      _norm_layer(h, False, bn_cfg) if use_bn else None,
                                      make_activation(act), after))
            width = h
        self.hidden = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.classifier = nn.Linear(width, num_classes)
        _init_weights(self, init, init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for layer in self.hidden:
            h = hidden_step(layer, h)  # not layer(h): no Module.__call__ per layer (see hidden_step)
        if self.dropout is not None:
            h = self.dropout(h)
        return self.classifier(h)


class CNN(nn.Module):
    """Convolutional network for (N, C, H, W) images, H = W in {28, 32}.

    Stages of ``convs_per_stage`` [3x3 conv (padding 1) -> BN2d -> g] followed by a
    2x2 max-pool; then flatten -> fc hidden layer [linear -> BN1d -> g] -> (dropout)
    -> linear classifier. With BN on, the conv and fc biases are dropped. LayerNorm /
    GroupNorm take BN's place; ``bn.position=after`` puts the normalizer after g
    (biases kept).

    Args:
        in_shape: (C, H, W).
        channels: output channels of each stage.
        convs_per_stage: conv layers per stage.
        fc: width of the fully-connected hidden layer.
        num_classes: output width.
        act, bn_cfg, init_std, dropout, init: as in :class:`MLP`.
    """

    def __init__(self, in_shape: tuple[int, int, int], channels: list[int], convs_per_stage: int,
                 fc: int, num_classes: int, act: str, bn_cfg=None, init_std: float | None = None,
                 dropout: float = 0.0, init: str | None = None):
        super().__init__()
        use_bn = bn_cfg is not None and bn_cfg.enabled
        after = norm_after(bn_cfg)
        c, h, w = in_shape
        stages = []
        for out_c in channels:
            for _ in range(convs_per_stage):
                stages.append(HiddenLayer(nn.Conv2d(c, out_c, 3, padding=1, bias=not use_bn or after),
                                          _norm_layer(out_c, True, bn_cfg) if use_bn else None,
                                          make_activation(act), after))
                c = out_c
            stages.append(nn.MaxPool2d(2))
            h, w = h // 2, w // 2
        if h < 1 or w < 1:
            raise ValueError(f"{len(channels)} pooling stages are too many for {in_shape[1]}x{in_shape[2]} inputs")
        self.features = nn.Sequential(*stages)
        self.fc = HiddenLayer(nn.Linear(c * h * w, fc, bias=not use_bn or after),
                              _norm_layer(fc, False, bn_cfg) if use_bn else None, make_activation(act), after)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.classifier = nn.Linear(fc, num_classes)
        _init_weights(self, init, init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(self.features(x).flatten(1))
        if self.dropout is not None:
            h = self.dropout(h)
        return self.classifier(h)


def hidden_layers(model: nn.Module) -> list[tuple[str, HiddenLayer]]:
    """(name, layer) of every hidden layer, input to output; names like ``layer1``."""
    layers = [m for m in model.modules() if isinstance(m, HiddenLayer)]
    return [(f"layer{i + 1}", m) for i, m in enumerate(layers)]


def build_model(cfg, in_shape: tuple[int, int, int], num_classes: int,
                ghost_batch_size: int | None = None) -> nn.Module:
    """The network named by ``cfg.model.name`` with ``cfg.bn`` and ``cfg.act`` applied.

    BN layers: ``nn.BatchNorm1d/2d`` (``bn.impl=torch``), :class:`bnexp.nets.bn.ReferenceBatchNorm`
    (``bn.impl=reference``), :class:`bnexp.nets.bn.GhostBatchNorm` when ``bn.ghost_batch_size``
    is set; wrapped in :class:`bnexp.nets.bn.NoisyBatchNorm` for ``bn=noisy``. ``bn=layer`` /
    ``bn=group``: :class:`bnexp.nets.bn.LayerNorm` / :class:`bnexp.nets.bn.GroupNorm` in their place.
    ``bn.position=after``: the normalizer follows the nonlinearity, biases kept.

    Args:
        cfg: the whole run config.
        in_shape: (C, H, W) of the inputs.
        num_classes: number of output logits.
        ghost_batch_size: overrides ``bn.ghost_batch_size`` (the trainer sets it to the
            per-replica batch for ``bn.sync=false``).

    Raises:
        ValueError: unknown model name, or too many pooling stages for the input size.
        ConfigError: a bad ``model.init``, or ``model.init_std`` set with ``model.init`` kaiming / torch;
            ``bn.groups`` not dividing a layer's width.
    """
    m = cfg.model
    if m.get("init") in ("kaiming", "torch") and m.init_std is not None:
        raise ConfigError("model.init_std", m.init_std, f"is used only with model.init=normal (model.init={m.init})")
    act = cfg.act.value if hasattr(cfg.act, "value") else str(cfg.act)
    bn_cfg = cfg.bn
    if ghost_batch_size is not None:
        bn_cfg = OmegaConf.merge(bn_cfg, {"ghost_batch_size": int(ghost_batch_size)})
    if m.name == "mlp":
        return MLP(math.prod(in_shape), list(m.hidden), num_classes, act, bn_cfg, m.init_std, m.dropout,
                   init=m.get("init"))
    if m.name == "cnn":
        return CNN(in_shape, list(m.channels), m.convs_per_stage, m.fc, num_classes, act, bn_cfg,
                   m.init_std, m.dropout, init=m.get("init"))
    raise ValueError(f"unknown model {m.name!r}")
