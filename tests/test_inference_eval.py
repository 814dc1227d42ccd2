"""bnexp/train/inference_eval.py (the inference_statistics study): test accuracy of a BN network with batch
statistics, running averages and Alg. 2 population statistics, against the formulas written out here
(Alg. 1 normalization per mini-batch; Alg. 2 steps 10-12: E[x] = mean of mu_B, Var[x] = m/(m-1) mean of
sigma2_B), and against the trainer's own evaluation on a run folder."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from bnexp.nets.datasets import BatchSampler
from bnexp.train.inference_eval import ORDER_SEED, RESULT, evaluate_modes, main, needs_eval, read_result


def tiny_net(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Sigmoid(), nn.Linear(8, 3))
    with torch.no_grad():
        net[1].weight.uniform_(0.5, 2.0)
        net[1].bias.uniform_(-1, 1)
        net[1].running_mean.uniform_(-1, 1)
        net[1].running_var.uniform_(0.5, 3.0)
    return net


def logits(net, x, mean, var):
    """The network's output with the BN layer normalizing by (mean, var): Alg. 1's transform, by hand."""
    lin, bn, out = net[0], net[1], net[3]
    h = x @ lin.weight.T + lin.bias
    y = bn.weight * (h - mean) / torch.sqrt(var + bn.eps) + bn.bias
    return torch.sigmoid(y) @ out.weight.T + out.bias


@torch.no_grad()
def test_the_three_modes_match_the_formulas():
    net = tiny_net()
    torch.manual_seed(1)
    test_x, train_x, m = torch.randn(103, 5), torch.randn(500, 5) * 1.5 + 0.3, 4
    order = torch.randperm(103, generator=torch.Generator().manual_seed(ORDER_SEED))
    x = test_x[order[:100]]  # floor(103 / 4) * 4 images, in the module's fixed order
    h = lambda v: v @ net[0].weight.T + net[0].bias  # noqa: E731
    # batch statistics: each mini-batch of 4 by its own mean and biased variance (Alg. 1)
    batch_logits = torch.cat([logits(net, c, h(c).mean(0), h(c).var(0, unbiased=False)) for c in x.split(m)])
    # labels = the batch-mode predictions: that mode must score 100%, the others what the formulas give
    test_y = torch.zeros(103, dtype=torch.long)
    test_y[order[:100]] = batch_logits.argmax(1)
    ema_pred = logits(net, x, net[1].running_mean, net[1].running_var).argmax(1)
    sampler = BatchSampler(500, m, 7, torch.device("cpu"))
    hs = [h(train_x[sampler.next()]) for _ in range(10)]  # K = ceil(40 / 4) mini-batches
    mu = torch.stack([b.mean(0) for b in hs]).mean(0)
    var = m / (m - 1) * torch.stack([b.var(0, unbiased=False) for b in hs]).mean(0)
    pop_pred = logits(net, x, mu, var).argmax(1)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    net.train()
    r = evaluate_modes(net, test_x, test_y, train_x, m, population_examples=40, seed=7)
    assert (r["m"], r["n_test"], r["population_batches"]) == (4, 100, 10)
    y = test_y[order[:100]]
    acc = r["accuracy"]
    assert acc["batch"] == pytest.approx(1.0, abs=0.011)  # one flip of a near tie allowed
    assert acc["ema"] == pytest.approx(float((ema_pred == y).float().mean()), abs=0.011)
    assert acc["population"] == pytest.approx(float((pop_pred == y).float().mean()), abs=0.011)
    assert acc["ema"] < 0.95 and acc["population"] < 0.95  # the modes differ here: the test can fail
    # the model is unchanged: weights, running averages and its training flag
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items()) and net.training


def test_bad_input_is_refused():
    net = tiny_net()
    x, y = torch.randn(10, 5), torch.zeros(10, dtype=torch.long)
    with pytest.raises(ValueError, match="m >= 2"):
        evaluate_modes(net, x, y, x, 1)
    with pytest.raises(ValueError, match="no BN layers"):
        evaluate_modes(nn.Sequential(nn.Linear(5, 3)), x, y, x, 2)


@pytest.mark.slow  # trains a run on real MNIST in this process, then evaluates it three ways (~4 s of CPU)
def test_a_run_folder_is_evaluated_once_and_matches_the_trainers_evaluation(tmp_path, data_root, capsys):
    from bnexp.config.schema import compose_config
    from bnexp.nets.datasets import load_data
    from bnexp.train.measurements import evaluate
    from bnexp.nets.models import build_model

    cfg = compose_config(["trainer.batch_size=4", "seed=3", f"data.root={data_root}"])
    data = load_data(cfg.data, torch.device("cpu"))
    model = build_model(cfg, data.input_shape, data.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    sampler = BatchSampler(len(data.train_y), 4, 0, torch.device("cpu"))
    for _ in range(50):  # a few real steps, so the running averages are not the initial 0 and 1
        idx = sampler.next()
        loss = nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    run = tmp_path / "bn=true,seed=3"
    run.mkdir()
    OmegaConf.save(OmegaConf.create(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)), run / "config.yaml")
    torch.save({"model": model.state_dict(), "step": 50}, run / "checkpoint.pt")
    (run / "summary.json").write_text(json.dumps({"status": "finished"}))
    plain = tmp_path / "bn=false,seed=3"  # no BN: nothing to compare, not evaluated
    plain.mkdir()
    OmegaConf.save(compose_config(["bn=false"]), plain / "config.yaml")
    (plain / "summary.json").write_text(json.dumps({"status": "finished"}))
    assert needs_eval(run) and not needs_eval(plain)
    assert main([str(tmp_path)]) == 0
    r = read_result(run)
    assert r["ema_full_test"] == evaluate(model, data.test_x, data.test_y)[1]  # the trainer's own number
    assert (r["m"], r["n_test"], r["population_batches"], r["momentum"], r["seed"], r["step"]) == (
        4, 10_000, 2500, 0.1, 3, 50)
    assert set(r["accuracy"]) == {"batch", "ema", "population"}
    assert not (plain / RESULT).exists()
    out = capsys.readouterr().out
    assert "bn=true,seed=3: batch" in out
    assert main([str(tmp_path)]) == 0 and capsys.readouterr().out == ""  # done already: skipped
    assert main([str(tmp_path / "missing")]) == 2
