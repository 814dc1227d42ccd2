"""Model shapes, the BN switch (dropped biases, BN layer types), activations, init and build_model."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from bnexp.nets.bn import ReferenceBatchNorm, bn_layers
from bnexp.config.schema import CNNConfig, Config, MLPConfig
from bnexp.nets.models import CNN, MLP, HiddenLayer, build_model, hidden_layers, make_activation


def _bn_cfg(enabled=True, impl="torch", eps=1e-5, momentum=0.1):
    return SimpleNamespace(enabled=enabled, eps=eps, momentum=momentum, impl=impl)


def _paper_mlp(bn: bool, act="sigmoid", **kw):
    return MLP(784, [100, 100, 100], 10, act, _bn_cfg() if bn else None, **kw)


def _cfg(model: str, bn: bool, act: str, **model_overrides):
    cfg = OmegaConf.structured(Config)
    cfg.model = OmegaConf.structured(MLPConfig if model == "mlp" else CNNConfig)
    for k, v in model_overrides.items():
        cfg.model[k] = v
    cfg.bn.enabled = bn
    cfg.act = act
    return cfg


def _no_bn(layer) -> bool:
    """A hidden layer without BN: its ``bn`` slot is empty (None) or an identity."""
    return layer.bn is None or isinstance(layer.bn, nn.Identity)


def _act_io(model, x, side: str):
    """Per hidden layer, in order: the nonlinearity's input (side="in") or output ("out")."""
    seen = []

    def pre(mod, inp):
        seen.append(inp[0].detach())

    def post(mod, inp, out):
        seen.append(out.detach())

    handles = [layer.act.register_forward_pre_hook(pre) if side == "in"
               else layer.act.register_forward_hook(post) for _, layer in hidden_layers(model)]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


def _hidden_outputs(model, x):
    """Outputs of every hidden layer's nonlinearity, in order."""
    return _act_io(model, x, "out")


def _pre_activations(model, x):
    """Inputs to every hidden layer's nonlinearity, in order."""
    return _act_io(model, x, "in")


# --------------------------------------------------------------------------- MLP


@pytest.mark.parametrize("bn", [True, False])
@pytest.mark.parametrize("n", [2, 5])
def test_mlp_default_shapes(bn, n):
    torch.manual_seed(0)
    model = _paper_mlp(bn)
    out = model(torch.rand(n, 1, 28, 28))
    assert out.shape == (n, 10)
    layers = hidden_layers(model)
    assert len(layers) == 3
    widths = [(layer.affine.in_features, layer.affine.out_features) for _, layer in layers]
    assert widths == [(784, 100), (100, 100), (100, 100)]
    assert (model.classifier.in_features, model.classifier.out_features) == (100, 10)
    # flat (N, D) input works too
    assert model(torch.rand(n, 784)).shape == (n, 10)


def test_mlp_with_bn_drops_biases_and_adds_bn1d():
    model = _paper_mlp(True)
    layers = hidden_layers(model)
    assert len(layers) == 3
    for _, layer in layers:
        assert isinstance(layer.affine, nn.Linear)
        assert layer.affine.bias is None
        assert isinstance(layer.bn, nn.BatchNorm1d)
        assert layer.bn.num_features == layer.affine.out_features
        assert layer.bn.eps == 1e-5 and layer.bn.momentum == 0.1
    assert len(bn_layers(model)) == 3
    # the classifier is not batch-normalized and keeps its bias
    assert model.classifier.bias is not None
    # no Linear with a bias anywhere except the classifier
    linears_with_bias = [m for m in model.modules() if isinstance(m, nn.Linear) and m.bias is not None]
    assert linears_with_bias == [model.classifier]


def test_mlp_without_bn_keeps_biases_and_identity():
    model = _paper_mlp(False)
    for _, layer in hidden_layers(model):
        assert layer.affine.bias is not None
        assert _no_bn(layer)
        # biases are zero-initialized when init_std is given
        assert torch.count_nonzero(layer.affine.bias) == 0
    assert bn_layers(model) == []
    # bn_cfg with enabled=False behaves like no BN at all
    model2 = MLP(784, [100, 100, 100], 10, "sigmoid", _bn_cfg(enabled=False))
    assert bn_layers(model2) == []
    assert all(layer.affine.bias is not None for _, layer in hidden_layers(model2))


def test_mlp_bn_normalizes_pre_activations_in_training():
    # with gamma = 1, beta = 0 (init) the input to g has per-unit batch mean 0, variance ~1
    torch.manual_seed(1)
    model = _paper_mlp(True).train()
    bn_in = []
    handles = [layer.bn.register_forward_pre_hook(lambda mod, inp: bn_in.append(inp[0].detach()))
               for _, layer in hidden_layers(model)]
    try:
        pre = _pre_activations(model, torch.rand(32, 1, 28, 28))
    finally:
        for h in handles:
            h.remove()
    assert len(pre) == 3 and len(bn_in) == 3
    for z, wu in zip(pre, bn_in):
        assert z.shape == (32, 100)
        assert z.mean(0).abs().max() < 1e-5
        # biased variance of x_hat is s2 / (s2 + eps), s2 the batch variance of Wu (~1 when s2 >> eps)
        s2 = wu.var(0, unbiased=False)
        torch.testing.assert_close(z.var(0, unbiased=False), s2 / (s2 + 1e-5), rtol=1e-3, atol=1e-4)
    assert (pre[0].var(0, unbiased=False) - 1).abs().max() < 1e-2


def test_mlp_init_std():
    torch.manual_seed(2)
    model = _paper_mlp(False, init_std=0.01)
    w = hidden_layers(model)[0][1].affine.weight
    assert abs(w.std().item() - 0.01) < 0.001  # within 10% of 0.01
    assert abs(w.mean().item()) < 0.001
    for _, layer in hidden_layers(model):
        assert abs(layer.affine.weight.std().item() - 0.01) < 0.001
    assert abs(model.classifier.weight.std().item() - 0.01) < 0.002
    # a different init_std is honored
    model = _paper_mlp(True, init_std=0.1)
    w = hidden_layers(model)[0][1].affine.weight
    assert abs(w.std().item() - 0.1) < 0.01


def test_mlp_init_std_none_keeps_torch_default():
    torch.manual_seed(3)
    model = _paper_mlp(False, init_std=None)
    w = hidden_layers(model)[0][1].affine.weight
    # torch default: U(-1/sqrt(784), 1/sqrt(784)), std = 1/sqrt(3*784) ~ 0.0206
    bound = 1 / 784 ** 0.5
    assert w.abs().max() <= bound + 1e-7
    assert abs(w.std().item() - bound / 3 ** 0.5) < 0.002
    assert torch.count_nonzero(hidden_layers(model)[0][1].affine.bias) > 0


@pytest.mark.parametrize("act,cls", [("sigmoid", nn.Sigmoid), ("relu", nn.ReLU)])
@pytest.mark.parametrize("bn", [True, False])
def test_mlp_activation_switch(act, cls, bn):
    torch.manual_seed(4)
    model = _paper_mlp(bn, act=act, init_std=0.1)
    for _, layer in hidden_layers(model):
        assert isinstance(layer.act, cls)
    # behaviour: hidden outputs are in (0, 1) for sigmoid; >= 0 with exact zeros for relu
    x = torch.randn(16, 1, 28, 28)
    outs = _hidden_outputs(model, x)
    assert len(outs) == 3
    for h in outs:
        if act == "sigmoid":
            assert (h > 0).all() and (h < 1).all()
        else:
            assert (h >= 0).all() and (h == 0).any()


def test_make_activation_rejects_unknown():
    with pytest.raises(ValueError):
        make_activation("tanh")


def test_hidden_layer_forward_is_g_of_bn_of_affine():
    torch.manual_seed(5)
    affine = nn.Linear(4, 3, bias=False)
    bn = nn.BatchNorm1d(3)
    layer = HiddenLayer(affine, bn, nn.Sigmoid()).train()
    u = torch.randn(6, 4)
    z = u @ affine.weight.T
    expected = torch.sigmoid((z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=False) + bn.eps))
    torch.testing.assert_close(layer(u), expected, rtol=1e-5, atol=1e-6)
    # without BN: g(Wu + b)
    affine2 = nn.Linear(4, 3)
    layer2 = HiddenLayer(affine2, None, nn.ReLU())
    assert _no_bn(layer2)
    torch.testing.assert_close(layer2(u), torch.relu(u @ affine2.weight.T + affine2.bias))


def test_mlp_forward_is_its_hidden_layers_called_in_turn():
    """MLP.forward skips Module.__call__ per layer but computes what calling each HiddenLayer does,
    with the act hooks still firing, for BN before and after g."""
    for position in ("before", "after"):
        torch.manual_seed(3)
        bn_cfg = SimpleNamespace(enabled=True, eps=1e-5, momentum=0.1, impl="torch", position=position)
        model = MLP(20, [8, 6], 3, "sigmoid", bn_cfg).train()
        assert all(layer.after == (position == "after") for layer in model.hidden)
        x = torch.randn(5, 20)
        seen = []
        hooks = [layer.act.register_forward_hook(lambda m, i, o: seen.append(o.shape[1])) for layer in model.hidden]
        out = model(x)
        for h in hooks:
            h.remove()
        assert seen == [8, 6]
        h = x
        for layer in model.hidden:
            h = layer(h)
        torch.testing.assert_close(out, model.classifier(h), rtol=0, atol=0)


def test_reference_impl_switch():
    model = MLP(20, [8, 8], 3, "relu", _bn_cfg(impl="reference", eps=1e-3, momentum=0.2))
    layers = bn_layers(model)
    assert len(layers) == 2
    assert all(isinstance(b, ReferenceBatchNorm) for b in layers)
    assert all(b.eps == 1e-3 and b.momentum == 0.2 for b in layers)
    assert model(torch.randn(4, 20)).shape == (4, 3)
    cnn = CNN((1, 28, 28), [4], 1, 8, 10, "relu", _bn_cfg(impl="reference"))
    assert all(isinstance(b, ReferenceBatchNorm) for b in bn_layers(cnn))
    assert cnn(torch.randn(2, 1, 28, 28)).shape == (2, 10)


# --------------------------------------------------------------------------- CNN


@pytest.mark.parametrize("in_shape", [(1, 28, 28), (3, 32, 32)])
@pytest.mark.parametrize("bn", [True, False])
def test_cnn_shapes(in_shape, bn):
    torch.manual_seed(6)
    model = CNN(in_shape, [8, 16], 1, 32, 10, "relu", _bn_cfg() if bn else None)
    out = model(torch.randn(3, *in_shape))
    assert out.shape == (3, 10)
    # after two 2x2 pools: 28 -> 7, 32 -> 8
    side = in_shape[1] // 4
    assert model.fc.affine.in_features == 16 * side * side


@pytest.mark.parametrize("in_shape", [(1, 28, 28), (3, 32, 32)])
def test_cnn_with_bn_uses_bn2d_after_convs(in_shape):
    model = CNN(in_shape, [4, 6], 2, 12, 10, "relu", _bn_cfg())
    layers = hidden_layers(model)
    convs = [layer for _, layer in layers if isinstance(layer.affine, nn.Conv2d)]
    assert len(convs) == 4  # 2 stages x 2 convs
    assert [c.affine.out_channels for c in convs] == [4, 4, 6, 6]
    assert convs[0].affine.in_channels == in_shape[0]
    for c in convs:
        assert c.affine.bias is None
        assert c.affine.kernel_size == (3, 3) and c.affine.padding == (1, 1)
        assert isinstance(c.bn, nn.BatchNorm2d)
        assert c.bn.num_features == c.affine.out_channels
    # the fc hidden layer: linear without bias + BatchNorm1d
    assert layers[-1][1] is model.fc
    assert model.fc.affine.bias is None
    assert isinstance(model.fc.bn, nn.BatchNorm1d)
    assert model.classifier.bias is not None
    assert len(bn_layers(model)) == 5
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 2
    assert model(torch.randn(2, *in_shape)).shape == (2, 10)


def test_cnn_bn2d_normalizes_per_channel_over_n_h_w():
    torch.manual_seed(7)
    model = CNN((3, 32, 32), [5], 1, 8, 10, "sigmoid", _bn_cfg()).train()
    pre = _pre_activations(model, torch.rand(4, 3, 32, 32))
    z = pre[0]
    assert z.shape == (4, 5, 32, 32)
    assert z.mean(dim=(0, 2, 3)).abs().max() < 1e-4
    torch.testing.assert_close(z.var(dim=(0, 2, 3), unbiased=False), torch.ones(5), atol=1e-3, rtol=0)


def test_cnn_without_bn_keeps_biases():
    model = CNN((1, 28, 28), [4, 6], 1, 12, 10, "relu", None)
    for _, layer in hidden_layers(model):
        assert layer.affine.bias is not None
        assert _no_bn(layer)
    assert bn_layers(model) == []


@pytest.mark.parametrize("act,cls", [("sigmoid", nn.Sigmoid), ("relu", nn.ReLU)])
def test_cnn_activation_switch(act, cls):
    model = CNN((1, 28, 28), [4], 1, 8, 10, act, _bn_cfg())
    assert all(isinstance(layer.act, cls) for _, layer in hidden_layers(model))


def test_cnn_init_std():
    torch.manual_seed(8)
    model = CNN((3, 32, 32), [32, 64], 1, 128, 10, "relu", None, init_std=0.05)
    w = hidden_layers(model)[1][1].affine.weight  # 64*32*9 = 18432 values
    assert abs(w.std().item() - 0.05) < 0.005
    assert all(torch.count_nonzero(layer.affine.bias) == 0 for _, layer in hidden_layers(model))


@pytest.mark.parametrize("bn", [False, True])
def test_mlp_xavier_init_is_glorot_uniform(bn):
    """model.init=xavier: every weight matrix ~ U(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010,
    eq. 16), so Var W = 2 / (fan_in + fan_out); biases 0. Checked against the formula (bound, variance, a
    Kolmogorov-Smirnov test against that uniform) and against torch.nn.init.xavier_uniform_ (a two-sample KS test)."""
    from scipy import stats

    torch.manual_seed(11)
    model = _paper_mlp(bn, init="xavier", init_std=0.01)  # init_std is ignored by xavier
    weights = [layer.affine for _, layer in hidden_layers(model)] + [model.classifier]
    for lin in weights:
        w = lin.weight.detach().flatten().double()
        fan_in, fan_out = lin.in_features, lin.out_features
        a = (6 / (fan_in + fan_out)) ** 0.5
        assert w.abs().max() <= a and w.abs().max() > 0.95 * a
        rel_tol = 0.05 if w.numel() >= 10_000 else 0.12  # 1000 classifier weights: sampling SE ~3% of the var
        assert abs(w.var().item() / (2 / (fan_in + fan_out)) - 1) < rel_tol
        assert abs(w.mean().item()) < 4 * a / (3 * w.numel()) ** 0.5  # 4 standard errors of the mean
        assert stats.kstest(w.numpy(), stats.uniform(loc=-a, scale=2 * a).cdf).pvalue > 1e-3
        ref = nn.init.xavier_uniform_(torch.empty(fan_out, fan_in)).flatten().double()
        assert stats.ks_2samp(w.numpy(), ref.numpy()).pvalue > 1e-3
        if lin.bias is not None:
            assert torch.count_nonzero(lin.bias) == 0
    # not the paper's small Gaussian: layer 1's std is sqrt(2 / 884) ~ 0.048, not 0.01
    assert weights[0].weight.std().item() > 0.04


def test_cnn_xavier_init_uses_the_receptive_field():
    """For a 3x3 convolution fan_in = in_channels * 9 and fan_out = out_channels * 9 (torch's convention)."""
    torch.manual_seed(12)
    model = CNN((3, 32, 32), [32, 64], 1, 128, 10, "sigmoid", None, init="xavier")
    conv = hidden_layers(model)[1][1].affine  # 32 -> 64 channels, 18432 weights
    a = (6 / (32 * 9 + 64 * 9)) ** 0.5
    w = conv.weight.detach()
    assert w.abs().max() <= a and w.abs().max() > 0.95 * a
    assert abs(w.var().item() / (a * a / 3) - 1) < 0.05
    assert torch.count_nonzero(conv.bias) == 0


def test_xavier_is_a_valid_config_value():
    from bnexp.config.schema import compose_config, validate

    cfg = compose_config(["model.init=xavier"])
    validate(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, (1, 28, 28), 10)
    w = hidden_layers(model)[1][1].affine.weight  # 100 x 100: a = sqrt(6 / 200)
    assert w.abs().max() <= (6 / 200) ** 0.5 and w.std().item() > 0.09


def test_cnn_too_many_pool_stages_raises():
    with pytest.raises(ValueError):
        CNN((1, 28, 28), [2, 2, 2, 2, 2], 1, 4, 10, "relu", None)  # 28 -> 14 -> 7 -> 3 -> 1 -> 0


# --------------------------------------------------------------------------- hidden_layers


def test_hidden_layers_mlp_order():
    model = MLP(30, [7, 6, 5, 4], 3, "relu", _bn_cfg())
    layers = hidden_layers(model)
    assert [name for name, _ in layers] == ["layer1", "layer2", "layer3", "layer4"]
    assert [layer for _, layer in layers] == list(model.hidden)
    assert [layer.affine.out_features for _, layer in layers] == [7, 6, 5, 4]


def test_hidden_layers_cnn_order():
    model = CNN((1, 28, 28), [3, 5], 2, 9, 10, "relu", _bn_cfg())
    layers = hidden_layers(model)
    assert [name for name, _ in layers] == [f"layer{i}" for i in range(1, 6)]
    expected = [m for m in model.features if isinstance(m, HiddenLayer)] + [model.fc]
    assert [layer for _, layer in layers] == expected
    assert [getattr(layer.affine, "out_channels", None) or layer.affine.out_features
            for _, layer in layers] == [3, 3, 5, 5, 9]


# --------------------------------------------------------------------------- build_model


@pytest.mark.parametrize("model_name,bn,act,in_shape",
                         list(itertools.product(["mlp", "cnn"], [True, False], ["sigmoid", "relu"],
                                                [(1, 28, 28), (3, 32, 32)])))
def test_build_model_all_combinations(model_name, bn, act, in_shape):
    torch.manual_seed(9)
    cfg = _cfg(model_name, bn, act)
    model = build_model(cfg, in_shape, 10)
    assert isinstance(model, MLP if model_name == "mlp" else CNN)
    out = model(torch.randn(3, *in_shape))
    assert out.shape == (3, 10)
    assert torch.isfinite(out).all()
    layers = hidden_layers(model)
    act_cls = nn.Sigmoid if act == "sigmoid" else nn.ReLU
    for _, layer in layers:
        assert isinstance(layer.act, act_cls)
        if bn:
            assert layer.affine.bias is None
            expected = nn.BatchNorm2d if isinstance(layer.affine, nn.Conv2d) else nn.BatchNorm1d
            assert type(layer.bn) is expected
            assert layer.bn.eps == cfg.bn.eps and layer.bn.momentum == cfg.bn.momentum
        else:
            assert layer.affine.bias is not None
            assert _no_bn(layer)
    if model_name == "mlp":
        assert [layer.affine.out_features for _, layer in layers] == [100, 100, 100]
        assert layers[0][1].affine.in_features == in_shape[0] * in_shape[1] * in_shape[2]
    else:
        convs = [layer for _, layer in layers if isinstance(layer.affine, nn.Conv2d)]
        assert [c.affine.out_channels for c in convs] == [32, 64]
        assert model.fc.affine.out_features == 128
    # backward works too
    model.train()
    model(torch.randn(2, *in_shape)).sum().backward()


def test_build_model_honours_model_options():
    cfg = _cfg("mlp", True, "relu", hidden=[20, 10], init_std=0.05, dropout=0.3)
    cfg.bn.eps = 1e-3
    cfg.bn.momentum = 0.5
    model = build_model(cfg, (1, 28, 28), 7)
    assert [layer.affine.out_features for _, layer in hidden_layers(model)] == [20, 10]
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert len(dropouts) == 1 and dropouts[0].p == 0.3
    assert all(b.eps == 1e-3 and b.momentum == 0.5 for b in bn_layers(model))
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 7)

    cfg = _cfg("cnn", True, "sigmoid", channels=[4, 8, 8], convs_per_stage=2, fc=16)
    cfg.bn.impl = "reference"
    model = build_model(cfg, (3, 32, 32), 10)
    convs = [layer for _, layer in hidden_layers(model) if isinstance(layer.affine, nn.Conv2d)]
    assert [c.affine.out_channels for c in convs] == [4, 4, 8, 8, 8, 8]
    assert all(isinstance(b, ReferenceBatchNorm) for b in bn_layers(model))
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_build_model_unknown_name_raises():
    cfg = _cfg("mlp", True, "relu")
    cfg.model.name = "resnet"
    with pytest.raises(ValueError):
        build_model(cfg, (1, 28, 28), 10)
