"""Per-step cost of bnexp's trainer against a bare PyTorch loop, measured in the same run.

Both train the default (paper Fig. 1) configuration -- MLP 784-100-100-100-10,
sigmoid, BN, mini-batch 60, plain SGD -- on real MNIST held as tensors, drawing
mini-batches from a seeded permutation. bnexp runs with its default logging
(test evaluation on the 10,000 test images every ``trainer.eval_every`` = 1000 steps and
at step 0, covariate-shift monitor with histograms every ``trainer.hist_every`` = 1000,
train-loss scalars every 50, a checkpoint every 5000, TensorBoard, metrics files); measured by
switching them off (``--breakdown``, two runs), the step loop itself adds about 1-3% per step, the monitor
records about 2-4% and the evaluations 0-2% (near the noise) with the records thread (README, Benchmarks). The
bare loop does only forward, loss, backward, SGD step, and draws its mini-batch as ``x[idx]`` (bnexp's
loop uses ``index_select``, 25-35 us less per step on CPU).

Usage:
    python benchmarks/bench_train.py [--steps 10000] [--repeats 3] [--block 100] [--threads 1] [--breakdown] [overrides ...]

``--breakdown`` also times bnexp with the test evaluations, the monitor records, or both switched off
after step 0 (``trainer.eval_every`` / ``trainer.hist_every`` = 100000), and with
``trainer.async_records=false`` (evaluations and monitor records written in the step loop).

Design: this shared machine's speed drifts by more than the effects measured (the bare loop alone
took 1.4 to 2.7 ms per step in runs minutes apart, and separate 20-second runs paired bare, bnexp,
bare still gave ratios from 0.87 to 1.35 for the same code). So the two loops run interleaved in one
process: a benchmark-only measurement (``BareBlocks``), called after every update of bnexp's loop,
runs ``--block`` steps of the bare loop (its own network, optimizer and sampler) every ``--block``
steps, timed on their own; bnexp's seconds per step are its loop time (``train_time_s``) minus those
blocks. A block waits while the records thread (``trainer.async_records``) has work, so the records'
interference with the loop is charged to bnexp, never to the bare loop. The printed ratio is the
median over ``--repeats`` runs (each run's ratio is printed too). Also printed: the process CPU
seconds per step of bnexp (whole ``train`` call incl. setup and the records thread, minus the bare
blocks) against the bare loop's: with ``trainer.async_records`` the records run on a second core, so
they cost CPU, not wall time. Target: ratio <= 1.10 on CPU.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bnexp.config.schema import compose_config  # noqa: E402
from bnexp.nets.datasets import BatchSampler, load_data  # noqa: E402
from bnexp.train.signal_guard import SignalGuard  # noqa: E402
from bnexp.train.trainer import Trainer  # noqa: E402


class BareLoop:
    """A plain PyTorch loop of the same network and mini-batch: forward, loss, backward, SGD step."""

    def __init__(self, cfg):
        torch.manual_seed(cfg.seed)
        self.data = load_data(cfg.data, torch.device("cpu"))
        layers: list[nn.Module] = [nn.Flatten()]
        width = 784
        for h in cfg.model.hidden:
            layers += [nn.Linear(width, h, bias=not cfg.bn.enabled)]
            if cfg.bn.enabled:
                layers.append(nn.BatchNorm1d(h))
            layers.append(nn.Sigmoid())
            width = h
        layers.append(nn.Linear(width, 10))
        self.model = nn.Sequential(*layers)
        for m in self.model.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, cfg.model.init_std)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)
        self.sampler = BatchSampler(len(self.data.train_y), cfg.trainer.batch_size, cfg.seed, torch.device("cpu"))
        self.steps, self.wall, self.cpu = 0, 0.0, 0.0

    def run(self, steps: int) -> None:
        """``steps`` steps, their wall and CPU seconds added to :attr:`wall` / :attr:`cpu`."""
        data, model, opt = self.data, self.model, self.opt
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            idx = self.sampler.next()
            loss = nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        self.wall += time.perf_counter() - t0
        self.cpu += time.process_time() - c0
        self.steps += steps


class BareBlocks:
    """Benchmark only: after every ``block`` updates of bnexp's loop, ``block`` bare steps -- once the
    records thread is idle (``busy()`` False), so the bare loop never shares the machine with it.
    :meth:`wrap` puts it right after each update of a trainer (``Trainer._update``)."""

    def __init__(self, bare: BareLoop, block: int, busy):
        self.bare, self.block, self.busy, self.owed = bare, block, busy, 0

    def after_update(self) -> None:
        self.owed += 1
        if self.owed >= self.block and not self.busy():
            self.bare.run(self.owed)
            self.owed = 0

    def wrap(self, trainer: Trainer) -> None:
        update = trainer._update

        def update_then_bare(x, y):
            out = update(x, y)
            self.after_update()
            return out

        trainer._update = update_then_bare


def interleaved(cfg, block: int) -> tuple[float, float, float, float]:
    """One bnexp run with the bare loop interleaved: (bnexp wall, bare wall, bnexp CPU, bare CPU) seconds
    per step; bnexp's without the bare blocks."""
    bare = BareLoop(cfg)
    with tempfile.TemporaryDirectory() as d, SignalGuard():
        c0 = time.process_time()
        trainer = Trainer(cfg, Path(d))
        BareBlocks(bare, block, lambda: trainer.records.busy()).wrap(trainer)
        summary = trainer.run()
        cpu = time.process_time() - c0
    steps = summary["step"]
    return ((summary["train_time_s"] - bare.wall) / steps, bare.wall / bare.steps,
            (cpu - bare.cpu) / steps, bare.cpu / bare.steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--block", type=int, default=100, help="bare steps per block (one block per this many bnexp steps)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for both loops")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time bnexp without evaluations, without monitor records, without both, and "
                         "with the records written in the step loop")
    ap.add_argument("overrides", nargs="*", help="bnexp config overrides, e.g. data.root=../shared/data")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    base = [f"trainer.max_steps={args.steps}", "trainer.progress=false", "trainer.save_checkpoint=false",
            f"trainer.num_threads={args.threads}", *args.overrides]
    cfg = compose_config(base)
    off = {"without evaluations": ["trainer.eval_every=100000"],
           "without monitor records": ["trainer.hist_every=100000"],
           "without both (the step loop)": ["trainer.eval_every=100000", "trainer.hist_every=100000"],
           "records in the step loop (async_records=false)": ["trainer.async_records=false"]}
    variants = {"default": cfg, **({k: compose_config(base + v) for k, v in off.items()} if args.breakdown else {})}
    runs: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in variants}
    for r in range(args.repeats):
        for k, c in variants.items():
            runs[k].append(interleaved(c, args.block))
        print(f"repeat {r + 1}: " + ", ".join(f"{k} {runs[k][-1][0] / runs[k][-1][1]:.3f}" for k in variants),
              flush=True)

    def med(k: str, i: int) -> float:
        return statistics.median(x[i] for x in runs[k])

    ratios = [x[0] / x[1] for x in runs["default"]]
    print(f"config: MLP {list(cfg.model.hidden)} bn={cfg.bn.enabled} act={cfg.act.value} batch "
          f"{cfg.trainer.batch_size}, {args.steps} steps, {args.threads} thread(s), {args.repeats} repeats, "
          f"bare blocks of {args.block}")
    print(f"bare PyTorch loop: {med('default', 1) * 1e3:.3f} ms/step (median; runs "
          f"{', '.join(f'{x[1] * 1e3:.3f}' for x in runs['default'])})")
    print(f"bnexp trainer:     {med('default', 0) * 1e3:.3f} ms/step (median; default logging: eval every "
          f"{cfg.trainer.eval_every}, monitor every {cfg.trainer.hist_every}, scalars every {cfg.trainer.log_every})")
    print(f"ratio bnexp / bare: {statistics.median(ratios):.3f}  (median of the runs' ratios "
          f"{', '.join(f'{x:.3f}' for x in ratios)}; target <= 1.10)")
    cpu = [x[2] / x[3] for x in runs["default"]]
    print(f"CPU per step: bare {med('default', 3) * 1e3:.3f} ms, bnexp {med('default', 2) * 1e3:.3f} ms incl. "
          f"setup and the records thread (ratio {statistics.median(cpu):.3f}; runs {', '.join(f'{x:.3f}' for x in cpu)})")
    for k in list(variants)[1:]:
        rs = [x[0] / x[1] for x in runs[k]]
        print(f"  {k}: {med(k, 0) * 1e3:.3f} ms/step, ratio {statistics.median(rs):.3f} "
              f"({', '.join(f'{x:.3f}' for x in rs)})")


if __name__ == "__main__":
    main()
