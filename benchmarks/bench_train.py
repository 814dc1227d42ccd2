"""Per-step cost of bnexp's trainer against a bare PyTorch loop, measured in the same run.

Both train the default (paper Fig. 1) configuration -- MLP 784-100-100-100-10,
sigmoid, BN, mini-batch 60, plain SGD -- on real MNIST held as tensors, drawing
mini-batches from a seeded permutation. bnexp runs with its default logging
(test evaluation on the 10,000 test images every ``trainer.eval_every`` = 1000 steps and
at step 0, covariate-shift monitor with histograms every ``trainer.hist_every`` = 1000,
train-loss scalars every 50, a checkpoint every 5000, TensorBoard, metrics files); measured by
switching them off (``--breakdown``) and directly (``benchmarks/bench_logging.py``), the evaluation
adds about 3% per step, the monitor records about 7% and the step loop itself about 6% (README,
Benchmarks). The bare loop does only forward, loss, backward, SGD step.

Usage:
    python benchmarks/bench_train.py [--steps 10000] [--repeats 2] [--threads 1] [--breakdown] [overrides ...]

``--breakdown`` also times bnexp with the test evaluations, the monitor records, or both switched off
after step 0 (``trainer.eval_every`` / ``trainer.hist_every`` = 100000), each against the same bare loop.

Prints the seconds per step of each and the ratio bnexp / bare (target: <= 1.10 on CPU).
Timings on shared machines are noisy: the runs alternate and the best of the repeats is used.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bnexp.config import compose_config  # noqa: E402
from bnexp.data import BatchSampler, load_data  # noqa: E402
from bnexp.trainer import train  # noqa: E402


def bare_loop(cfg, steps: int) -> float:
    """Seconds per step of a plain PyTorch loop of the same network and mini-batch."""
    torch.manual_seed(cfg.seed)
    device = torch.device("cpu")
    data = load_data(cfg.data, device)
    layers: list[nn.Module] = [nn.Flatten()]
    width = 784
    for h in cfg.model.hidden:
        layers += [nn.Linear(width, h, bias=not cfg.bn.enabled)]
        if cfg.bn.enabled:
            layers.append(nn.BatchNorm1d(h))
        layers.append(nn.Sigmoid())
        width = h
    layers.append(nn.Linear(width, 10))
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, cfg.model.init_std)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    sampler = BatchSampler(len(data.train_y), cfg.trainer.batch_size, cfg.seed, device)
    t0 = time.perf_counter()
    for _ in range(steps):
        idx = sampler.next()
        loss = nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def bnexp_loop(cfg) -> float:
    """Seconds per step of bnexp's trainer (training loop incl. its periodic logging)."""
    with tempfile.TemporaryDirectory() as d:
        summary = train(cfg, Path(d))
    return summary["train_time_s"] / summary["step"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both loops")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time bnexp without evaluations, without monitor records, and without both")
    ap.add_argument("overrides", nargs="*", help="bnexp config overrides, e.g. data.root=../shared/data")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    base = [f"trainer.max_steps={args.steps}", "trainer.progress=false", "trainer.save_checkpoint=false",
            f"trainer.num_threads={args.threads}", *args.overrides]
    cfg = compose_config(base)
    off = {"without evaluations": ["trainer.eval_every=100000"],
           "without monitor records": ["trainer.hist_every=100000"],
           "without both (the step loop)": ["trainer.eval_every=100000", "trainer.hist_every=100000"]}
    variants = {"default": cfg, **({k: compose_config(base + v) for k, v in off.items()} if args.breakdown else {})}
    bare, ours = [], {k: [] for k in variants}
    for r in range(args.repeats):
        bare.append(bare_loop(cfg, args.steps))
        for k, c in variants.items():
            ours[k].append(bnexp_loop(c))
        print(f"repeat {r + 1}: bare {bare[-1] * 1e3:.3f} ms/step, bnexp {ours['default'][-1] * 1e3:.3f} ms/step")
    b, o = min(bare), min(ours["default"])
    print(f"config: MLP {list(cfg.model.hidden)} bn={cfg.bn.enabled} act={cfg.act.value} batch "
          f"{cfg.trainer.batch_size}, {args.steps} steps, {args.threads} thread(s)")
    print(f"bare PyTorch loop: {b * 1e3:.3f} ms/step")
    print(f"bnexp trainer:     {o * 1e3:.3f} ms/step (default logging: eval every "
          f"{cfg.trainer.eval_every}, monitor every {cfg.trainer.hist_every}, scalars every {cfg.trainer.log_every})")
    print(f"ratio bnexp / bare: {o / b:.3f}  (target <= 1.10)")
    for k in list(variants)[1:]:
        print(f"  {k}: {min(ours[k]) * 1e3:.3f} ms/step, ratio {min(ours[k]) / b:.3f}")


if __name__ == "__main__":
    main()
