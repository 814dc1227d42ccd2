"""LayerNorm / GroupNorm (``bn=layer``, ``bn=group``) and ``bn.position`` (docs/normalizers.md).

The math (bnexp.nets.bn.groupnorm) against independent references: torch.nn.functional.layer_norm /
group_norm, nn.LayerNorm / nn.GroupNorm (outputs and gradients), and a hand-computed example; the
placement of the normalizer in every hidden layer checked with forward hooks; the config's
validation (each message names its key); the run names, HParams columns and report labels of the
new kinds; and a few short trainings on real MNIST.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from torch import nn

from bnexp.nets.bn import DEFAULT_GROUPS, GroupNorm, LayerNorm, NoisyBatchNorm, group_norm, group_statistics, layer_norm
from bnexp.config.schema import CNNConfig, Config, MLPConfig, compose_config, validate
from bnexp.analysis.rules import normalizer, normalizer_label
from bnexp.errors import ConfigError
from bnexp.nets.models import CNN, MLP, build_model, hidden_layers

DT = torch.float64
SHAPES_GROUPS = [((6, 12), 1), ((6, 12), 3), ((6, 12), 6), ((5, 8, 4, 3), 1), ((5, 8, 4, 3), 2), ((5, 8, 4, 3), 8),
                 ((1, 4, 2, 2), 2)]


def _params(c: int, gen: torch.Generator):
    gamma = (torch.rand(c, generator=gen, dtype=DT) + 0.5).requires_grad_()
    beta = torch.randn(c, generator=gen, dtype=DT).requires_grad_()
    return gamma, beta


def _grads(out: torch.Tensor, upstream: torch.Tensor, *leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad((out * upstream).sum(), leaves)


# ---------------------------------------------------------------------------- the math vs torch


@pytest.mark.parametrize("shape,groups", SHAPES_GROUPS)
def test_group_norm_matches_torch_outputs_and_gradients(shape, groups):
    gen = torch.Generator().manual_seed(1)
    x = (torch.randn(shape, generator=gen, dtype=DT) * 3 + 2).requires_grad_()
    gamma, beta = _params(shape[1], gen)
    up = torch.randn(shape, generator=gen, dtype=DT)
    ours = group_norm(x, groups, gamma, beta, eps=1e-5)
    ref = F.group_norm(x, groups, gamma, beta, eps=1e-5)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(_grads(ours, up, x, gamma, beta), _grads(ref, up, x, gamma, beta)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape", [(6, 12), (5, 8, 4, 3), (1, 3)])
def test_layer_norm_is_torch_layer_norm_over_all_features_of_an_example(shape):
    """LN of a conv activation normalizes over (C, H, W) of each example (GroupNorm paper, Fig. 2),
    then scales and shifts per channel."""
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(shape, generator=gen, dtype=DT) - 1).requires_grad_()
    gamma, beta = _params(shape[1], gen)
    up = torch.randn(shape, generator=gen, dtype=DT)
    view = (1, -1) + (1,) * (len(shape) - 2)
    ref = F.layer_norm(x, shape[1:], eps=1e-5) * gamma.view(view) + beta.view(view)
    ours = layer_norm(x, gamma, beta, eps=1e-5)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-10)
    for a, b in zip(_grads(ours, up, x, gamma, beta), _grads(ref, up, x, gamma, beta)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_hand_computed_layer_and_group_norm():
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 10.0, 10.0]], dtype=DT)
    one, zero = torch.ones(4, dtype=DT), torch.zeros(4, dtype=DT)
    # LN, row 0: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25; row 1: mean 5, variance 25
    want = torch.tensor([[-1.5, -0.5, 0.5, 1.5], [-1.0, -1.0, 1.0, 1.0]], dtype=DT)
    want[0] /= math.sqrt(1.25)
    torch.testing.assert_close(layer_norm(x, one, zero, eps=0.0), want)
    # two groups of two: row 0 -> (1, 2), (3, 4): mean 1.5 / 3.5, variance 0.25 -> -1, 1, -1, 1;
    # row 1 -> (0, 0), (10, 10): variance 0 -> 0 / sqrt(eps) = 0, then gamma * 0 + beta
    gamma = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=DT)
    beta = torch.tensor([0.5, 0.0, 0.0, -0.5], dtype=DT)
    got = group_norm(x, 2, gamma, beta, eps=1e-5)
    s = 0.5 / math.sqrt(0.25 + 1e-5)
    torch.testing.assert_close(got, torch.tensor([[-s + 0.5, 2 * s, -3 * s, 4 * s - 0.5], [0.5, 0.0, 0.0, -0.5]],
                                                 dtype=DT))
    mu, sigma2 = group_statistics(x, 2)
    torch.testing.assert_close(mu, torch.tensor([[1.5, 3.5], [0.0, 10.0]], dtype=DT))
    torch.testing.assert_close(sigma2, torch.tensor([[0.25, 0.25], [0.0, 0.0]], dtype=DT))


@pytest.mark.parametrize("impl", ["torch", "reference"])
def test_layers_match_torch_modules_and_each_other(impl):
    gen = torch.Generator().manual_seed(3)
    # MLP: LayerNorm(d) is nn.LayerNorm(d) (per-feature weight and bias)
    ours, ref = LayerNorm(10, eps=1e-5, impl=impl).double(), nn.LayerNorm(10, eps=1e-5).double()
    with torch.no_grad():
        ours.weight.copy_(torch.rand(10, generator=gen) + 0.5)
        ours.bias.copy_(torch.randn(10, generator=gen))
    ref.load_state_dict({"weight": ours.weight.detach(), "bias": ours.bias.detach()})
    x = torch.randn(7, 10, generator=gen, dtype=DT)
    up = torch.randn(7, 10, generator=gen, dtype=DT)
    torch.testing.assert_close(ours(x), ref(x))
    (ours(x) * up).sum().backward()
    (ref(x) * up).sum().backward()
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad)
    torch.testing.assert_close(ours.bias.grad, ref.bias.grad)
    # conv: GroupNorm(C, G) is nn.GroupNorm(G, C); state_dict keys are the same (weight, bias)
    ours, ref = GroupNorm(8, 4, eps=1e-3, impl=impl).double(), nn.GroupNorm(4, 8, eps=1e-3).double()
    with torch.no_grad():
        ours.weight.copy_(torch.rand(8, generator=gen) + 0.5)
        ours.bias.copy_(torch.randn(8, generator=gen))
    ref.load_state_dict(ours.state_dict())
    x = torch.randn(3, 8, 5, 5, generator=gen, dtype=DT).requires_grad_()
    up = torch.randn(3, 8, 5, 5, generator=gen, dtype=DT)
    a, b = ours(x), ref(x)
    torch.testing.assert_close(a, b)
    ga = torch.autograd.grad((a * up).sum(), (x, ours.weight, ours.bias))
    gb = torch.autograd.grad((b * up).sum(), (x, ref.weight, ref.bias))
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v)
    assert not list(ours.buffers())  # no running statistics


def test_per_example_and_the_same_in_train_and_eval():
    gen = torch.Generator().manual_seed(4)
    gn = GroupNorm(6, 3)
    x = torch.randn(5, 6, 3, 3, generator=gen)
    y = gn(x)
    other = x.clone()
    other[1:] = torch.randn(4, 6, 3, 3, generator=gen) * 10
    torch.testing.assert_close(gn(other)[0], y[0])  # example 0 ignores the rest of the batch
    torch.testing.assert_close(gn(x[:1]), y[:1])   # a batch of one works
    gn.eval()
    assert torch.equal(gn(x), y)


def test_default_groups_divide_every_preset_width():
    """bn.groups' default (4) divides every hidden width of the presets, so bn=group runs on each."""
    from bnexp.config.schema import BNConfig

    assert BNConfig().groups == DEFAULT_GROUPS == 4
    for preset in (["model=mlp"], ["model=cnn"], ["+experiment=bn_baseline"], ["+experiment=bn_baseline", "scale=gpu"]):
        validate(compose_config([*preset, "bn=group"]))


def test_bad_groups_and_shapes_raise():
    with pytest.raises(ValueError, match="3 groups do not divide"):
        GroupNorm(10, 3)
    with pytest.raises(ValueError, match="impl"):
        GroupNorm(10, 2, impl="fast")
    with pytest.raises(ValueError, match=r"\(N, C\)"):
        group_norm(torch.randn(2, 4, 3), 2, torch.ones(4), torch.zeros(4))
    with pytest.raises(ValueError, match="do not divide"):
        group_statistics(torch.randn(2, 6), 4)


# ---------------------------------------------------------------------------- the models: kinds and placement


def _cfg(model: str, kind: str, position: str = "before", **model_overrides):
    cfg = OmegaConf.structured(Config)
    cfg.model = OmegaConf.structured(MLPConfig if model == "mlp" else CNNConfig)
    for k, v in model_overrides.items():
        cfg.model[k] = v
    cfg.bn.enabled = kind != "false"
    cfg.bn.noise = kind == "noisy"
    cfg.bn.norm = kind if kind in ("layer", "group") else "batch"
    cfg.bn.position = position
    return cfg


def _calls(model: nn.Module, x: torch.Tensor) -> list[tuple[str, str, torch.Tensor, torch.Tensor]]:
    """(layer name, role, input, output) of every affine / normalizer / nonlinearity call, in call order."""
    seen = []
    handles = []
    for name, layer in hidden_layers(model):
        for role in ("affine", "bn", "act"):
            mod = getattr(layer, role)
            if mod is not None:
                handles.append(mod.register_forward_hook(
                    lambda m, inp, out, name=name, role=role: seen.append((name, role, inp[0].detach(),
                                                                           out.detach()))))
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("model_name", ["mlp", "cnn"])
@pytest.mark.parametrize("kind", ["true", "noisy", "layer", "group"])
@pytest.mark.parametrize("position", ["before", "after"])
def test_normalizer_placement_seen_by_hooks(model_name, kind, position):
    """before: affine -> N -> g, N's input is the affine output (Wu), no bias; after: affine -> g -> N,
    N's input is g's output, the bias kept. Each call's input is the previous call's output."""
    torch.manual_seed(5)
    kw = {"hidden": [12, 8]} if model_name == "mlp" else {"channels": [4, 8], "fc": 16}
    model = build_model(_cfg(model_name, kind, position, **kw), (1, 28, 28), 10)
    model.train()
    calls = _calls(model, torch.rand(6, 1, 28, 28))
    layers = hidden_layers(model)
    order = ["affine", "bn", "act"] if position == "before" else ["affine", "act", "bn"]
    assert [(c[0], c[1]) for c in calls] == [(name, role) for name, _ in layers for role in order]
    for i in range(0, len(calls), 3):
        first, second, third = calls[i:i + 3]
        assert torch.equal(second[2], first[3]) and torch.equal(third[2], second[3])
    for _, layer in layers:
        assert (layer.affine.bias is None) == (position == "before")
        want = {"true": (nn.BatchNorm1d, nn.BatchNorm2d), "noisy": (NoisyBatchNorm,), "layer": (LayerNorm,),
                "group": (GroupNorm,)}[kind]
        assert isinstance(layer.bn, want)
        assert layer.after == (position == "after")


@pytest.mark.parametrize("kind,groups", [("layer", 1), ("group", 4), ("group", 2)])
def test_batch_free_normalizer_output_statistics_in_a_network(kind, groups):
    """With gamma = 1, beta = 0 and a negligible eps, each example's normalized Wu has mean 0 and
    (biased) variance 1 over each group of units (all units for LN) -- in the MLP and the CNN."""
    torch.manual_seed(6)
    for model_name, kw in (("mlp", {"hidden": [12, 8]}), ("cnn", {"channels": [4, 8], "fc": 16})):
        cfg = _cfg(model_name, kind, **kw)
        cfg.bn.groups = groups
        cfg.bn.eps = 1e-12
        model = build_model(cfg, (1, 28, 28), 10)
        for name, role, inp, out in _calls(model, torch.rand(5, 1, 28, 28)):
            if role != "bn":
                continue
            c = out.shape[1]
            g = 1 if kind == "layer" else groups
            v = out.reshape(out.shape[0], g, -1)
            torch.testing.assert_close(v.mean(2), torch.zeros(v.shape[:2]), atol=1e-5, rtol=0)
            torch.testing.assert_close(v.var(2, unbiased=False), torch.ones(v.shape[:2]), atol=1e-4, rtol=0)


def test_default_kinds_unchanged_and_direct_classes():
    """bn=true builds what it built before (BatchNorm before g, no bias); MLP / CNN take the bn node."""
    torch.manual_seed(7)
    model = build_model(_cfg("mlp", "true"), (1, 28, 28), 10)
    assert all(type(layer.bn) is nn.BatchNorm1d and not layer.after and layer.affine.bias is None
               for _, layer in hidden_layers(model))
    cfg = _cfg("cnn", "group")
    cfg.bn.groups = 2
    cnn = CNN((3, 32, 32), [4], 1, 8, 10, "relu", cfg.bn)
    assert [layer.bn.groups for _, layer in hidden_layers(cnn)] == [2, 2]
    mlp = MLP(784, [6], 10, "relu", _cfg("mlp", "layer", "after").bn)
    assert isinstance(mlp.hidden[0].bn, LayerNorm) and mlp.hidden[0].affine.bias is not None


# ---------------------------------------------------------------------------- validation (in process)


@pytest.mark.parametrize("overrides", [
    ["bn=layer"], ["bn=group"], ["bn=group", "bn.groups=20"], ["bn=group", "bn.groups=1"],
    ["bn=true", "bn.position=after"], ["bn=noisy", "bn.position=after"], ["bn=layer", "bn.position=after"],
    ["bn=layer", "trainer.batch_size=1"],  # no mini-batch statistics: m = 1 is fine
    ["bn=group", "model=cnn", "bn.groups=16"], ["bn=group", "model=cnn", "model.channels=[4,8]", "model.fc=12"],
    ["bn=layer", "model=cnn", "model.channels=[1,2]", "bn.impl=reference"],  # conv: one channel has H x W values
    ["bn=layer", "model.hidden=[3]"],
])
def test_sensible_combinations_validate(overrides):
    validate(compose_config(overrides))


@pytest.mark.parametrize("overrides,key,needles", [
    (["bn=group", "bn.groups=3"], "bn.groups", ["layer1 has 100 units (model.hidden[0])", "bn.groups=25 divides"]),
    (["bn=group", "model=cnn", "model.fc=100", "bn.groups=32"], "bn.groups",
     ["layer3 has 100 units (model.fc)", "bn.groups=4 divides them all"]),
    (["bn=group", "model=cnn", "model.channels=[6,12]"], "bn.groups",
     ["layer1 has 6 channels (model.channels[0])", "bn.groups=2 divides them all"]),
    (["bn=group", "bn.groups=50"], "bn.groups", ["groups of 2 units in layer1", "no gradient", "bn.groups <= 33"]),
    (["bn=group", "bn.groups=100"], "bn.groups", ["groups of 1 unit in layer1", "normalize to 0"]),
    (["bn=group", "model.hidden=[100,8]"], "bn.groups", ["groups of 2 units in layer2 (8 units, model.hidden[1])"]),
    (["bn=layer", "model.hidden=[100,2]"], "model.hidden[1]", ["groups of 2 units in layer2"]),
    (["bn=layer", "model.hidden=[1]"], "model.hidden[0]", ["groups of 1 unit in layer1"]),
    (["bn=layer", "bn.groups=5"], "bn.groups", ["only with bn=group", "bn=layer"]),
    (["bn=true", "bn.groups=5"], "bn.groups", ["only with bn=group", "bn=batch"]),
    (["bn=false", "bn.groups=5"], "bn.groups", ["only with bn=group", "bn=false"]),
    (["bn=false", "bn.position=after"], "bn.position", ["bn=false has no normalizer"]),
    (["bn=false", "bn.norm=layer"], "bn.norm", ["use bn=layer"]),
    (["bn=layer", "bn.ghost_batch_size=10"], "bn.ghost_batch_size", ["no meaning with bn=layer", "ghost"]),
    (["bn=group", "bn.population_stats=recompute"], "bn.population_stats", ["no running (population)"]),
    (["bn=layer", "bn.recompute_batches=5"], "bn.recompute_batches", ["no population statistics"]),
    (["bn=layer", "bn.momentum=0.2"], "bn.momentum", ["no running averages", "default (0.1)"]),
    (["bn=layer", "bn.sync=false"], "bn.sync", ["replicas"]),
    (["bn=noisy", "bn.norm=layer"], "bn.noise", ["noisy BN"]),
    (["bn=group", "bn.noise_scale=3"], "bn.noise_scale", ["noisy BN"]),
    (["bn=layer", "monitor.bn_stats=population"], "monitor.bn_stats", ["each probe image by itself"]),
    (["bn=true", "trainer.batch_size=1"], "trainer.batch_size", ["needs m > 1"]),  # BN still needs m > 1
])
def test_nonsense_combinations_name_their_key(overrides, key, needles):
    with pytest.raises(ConfigError) as e:
        validate(compose_config(overrides))
    assert e.value.key == key, str(e.value)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


@pytest.mark.parametrize("override,needle", [
    ("bn.norm=instance", "bn.norm takes one of batch, layer, group"),
    ("bn.position=middle", "bn.position takes one of before, after"),
    ("bn=instance", "use one of false, group, layer, noisy, true"),
])
def test_bad_values_are_explained_in_one_line(override, needle):
    """What ``bnexp train`` prints (``bnexp: error: <explain(...)>``, exit 2) for a value the schema
    or the group refuses."""
    from bnexp.config.explain import explain

    with pytest.raises(Exception) as e:
        compose_config([override])
    text = explain(e.value)
    assert text is not None and "\n" not in text and needle in text, text


def test_groups_range_from_the_schema():
    with pytest.raises(ConfigError) as e:
        validate(compose_config(["bn=group", "bn.groups=0"]))
    assert e.value.key == "bn.groups" and "must be >= 1" in e.value.allowed


# ---------------------------------------------------------------------------- names, HParams, labels


def test_run_names_tell_the_kinds_and_positions_apart():
    from bnexp.runfolders.runnames import safe_dirname, swept_name

    names = {swept_name([f"bn={k}", f"bn.position={p}"], {"bn", "bn.position"})
             for k in ("'true'", "'false'", "noisy", "layer", "group") for p in ("before", "after")}
    assert len(names) == 10 and "bn.position=after,bn=layer" in names
    assert safe_dirname("bn=group,bn.groups=4") == "bn=group,bn.groups=4"


def test_hparams_column_for_the_normalizer():
    from bnexp.train.tblog import flat_hparams, sweep_values

    cols = sweep_values(["bn='true','false',layer,group", "bn.position=before,after"])
    assert cols["bn.norm"] == ["batch", "group", "layer"] and cols["bn.position"] == ["before", "after"]
    assert "bn.norm" not in sweep_values(["bn='true','false'"])
    hp = flat_hparams(compose_config(["bn=group", "bn.position=after"]), swept=list(cols))
    assert hp["bn"] is True and hp["bn.norm"] == "group" and hp["bn.position"] == "after"


def test_normalizer_vocabulary_codes_and_labels():
    assert normalizer_label({"bn.enabled": False}) == "no BN"
    assert normalizer_label({"bn.enabled": True}) == "BN"  # a run from before bn.norm existed
    assert normalizer_label({"bn.enabled": True, "bn.noise": True, "bn.norm": "batch"}) == "noisy BN"
    assert normalizer_label({"bn.enabled": True, "bn.norm": "layer"}) == "LayerNorm"
    assert normalizer_label({"bn.enabled": True, "bn.norm": "group", "bn.position": "after"}) == "GroupNorm after g"
    assert normalizer_label({"bn.enabled": True, "bn.ghost_batch_size": 2}) == "ghost BN"
    assert normalizer_label({}) is None
    assert normalizer({"bn.enabled": True, "bn.norm": "Normalizer.layer"}) == "layer"  # an Enum written by name


# ---------------------------------------------------------------------------- short trainings (real MNIST)


@pytest.mark.slow  # trains a few hundred steps on real MNIST in this process (3-9 s of CPU)
@pytest.mark.parametrize("overrides", [
    ["bn=layer"],
    ["bn=group", "bn.position=after", "model=cnn", "model.channels=[4,8]", "model.fc=16", "act=relu", "lr=0.05"],
])
def test_new_kinds_train_beyond_chance(overrides, tmp_path, data_root, monkeypatch):
    """200 steps through the Python API: finished, recorded as what it is, above chance (10 classes:
    0.1; the paper MLP with BN is at ~0.9 after 200 steps at lr 0.12)."""
    from bnexp.train.trainer import train

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    cfg = compose_config(["trainer.progress=false", "trainer.num_threads=1", "trainer.device=cpu",
                          "trainer.max_steps=200", "trainer.eval_every=100", "trainer.hist_every=100",
                          "trainer.probe_size=200", "trainer.save_checkpoint=false", "seed=1", *overrides])
    validate(cfg)
    train(cfg, tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 200
    kind = cfg.bn.norm.value
    assert summary["bn_norm"] == kind and summary["bn_position"] == cfg.bn.position.value
    assert summary["population_stats"] == ("ema" if kind == "batch" else None)
    assert summary["final_test_accuracy"] > 0.5, summary["final_test_accuracy"]
    shift = [json.loads(line) for line in (tmp_path / "shift.jsonl").read_text().splitlines()]
    assert set(shift[-1]["bn_input"]) == {name for name, _ in hidden_layers(build_model(cfg, (1, 28, 28), 10))}


def test_report_labels_name_the_normalizer_and_its_place():
    from bnexp.report.groups import ConfigGroup, variant_label

    def group(**cfg):
        return ConfigGroup(key=json.dumps(cfg, sort_keys=True), label="", config=cfg, runs=[])

    cfgs = [{"bn.enabled": True, "bn.norm": "layer"}, {"bn.enabled": True, "bn.norm": "group"},
            {"bn.enabled": True, "bn.position": "after"}, {"bn.enabled": True}, {"bn.enabled": False}]
    groups = [group(**c) for c in cfgs]
    labels = [variant_label(g, groups).split(" bn")[0] for g in groups]
    assert labels[:2] == ["LayerNorm", "GroupNorm"] and labels[2].startswith("BN after g")
    assert labels[3].startswith("BN") and labels[4].startswith("no BN")
