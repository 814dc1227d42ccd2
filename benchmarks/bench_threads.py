"""Training speed of the paper's MLP with 1 and 2 torch threads, idle and under CPU load, in one run.

Why: ``trainer.num_threads=0`` (auto) picks one thread for small networks
(:func:`bnexp.config.resources.default_num_threads`). This benchmark is the measurement behind
that default: the paper's Fig. 1 network (784-100-100-100-10, sigmoid, BN, mini-batch 60,
plain SGD) trained on real MNIST by bnexp's own model and sampler, with

- ``idle``: nothing else running (as far as this process can arrange);
- ``loaded``: one other CPU-bound process (a busy loop) running at the same time,

for each thread count. The settings alternate and the best of ``--repeats`` is kept.

Usage:
    python benchmarks/bench_threads.py [--seconds 4] [--repeats 2] [--threads 1 2] [overrides ...]

Prints steps/s for every (threads, load) pair and, per thread count, the loaded speed as a
fraction of the idle speed (the default should keep at least half).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bnexp.config.schema import compose_config  # noqa: E402
from bnexp.nets.datasets import BatchSampler, load_data  # noqa: E402
from bnexp.nets.models import build_model  # noqa: E402
from bnexp.config.resources import default_num_threads  # noqa: E402


def _spin(stop) -> None:
    """A CPU-bound competitor: a busy loop until ``stop`` is set."""
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x += 1


def steps_per_s(cfg, data, threads: int, seconds: float) -> float:
    """Training steps per second of the configured network with ``threads`` intra-op threads,
    timed over about ``seconds`` of training (a slow setting still ends in time)."""
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, data.input_shape, data.num_classes)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    sampler = BatchSampler(len(data.train_y), cfg.trainer.batch_size, cfg.seed, torch.device("cpu"))
    for _ in range(20):  # warm-up
        idx = sampler.next()
        loss = nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    t0 = time.perf_counter()
    steps = 0
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            idx = sampler.next()
            loss = nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        steps += 10
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="training time per measurement")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("overrides", nargs="*", help="config overrides (default: the paper's Fig. 1 setup)")
    args = ap.parse_args()
    cfg = compose_config(args.overrides)
    data = load_data(cfg.data, torch.device("cpu"))
    print(f"network: {cfg.model.name} {list(cfg.model.hidden) if cfg.model.name == 'mlp' else ''} "
          f"bn={cfg.bn.enabled} batch={cfg.trainer.batch_size}; auto threads -> {default_num_threads(cfg)}; "
          f"{mp.cpu_count()} cores")
    best: dict[tuple[int, str], float] = {}
    for _ in range(args.repeats):
        for load in ("idle", "loaded"):
            stop, competitor = None, None
            if load == "loaded":
                stop = mp.Event()
                competitor = mp.Process(target=_spin, args=(stop,), daemon=True)
                competitor.start()
                time.sleep(0.5)
            try:
                for n in args.threads:
                    sps = steps_per_s(cfg, data, n, args.seconds)
                    best[(n, load)] = max(best.get((n, load), 0.0), sps)
            finally:
                if competitor is not None:
                    stop.set()
                    competitor.join(timeout=10)
    print(f"{'threads':>7} {'idle steps/s':>13} {'loaded steps/s':>15} {'loaded/idle':>12}")
    for n in args.threads:
        idle, loaded = best[(n, "idle")], best[(n, "loaded")]
        print(f"{n:>7} {idle:>13.0f} {loaded:>15.0f} {loaded / idle:>12.2f}")


if __name__ == "__main__":
    main()
