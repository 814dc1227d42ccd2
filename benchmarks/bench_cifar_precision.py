"""Steps/s of the CIFAR-10 Sec. 4.2 network in fp32 NCHW, fp32 channels-last and bf16 + channels-last.

The network is the one a preset builds (default ``+experiment=bn_baseline`` at ``scale=cpu``:
the 10-hidden-layer VGG-style CNN with BN); each variant runs the trainer's step -- forward
(under bfloat16 autocast for bf16), fp32 cross-entropy, backward, SGD with momentum and weight
decay -- on a fixed random mini-batch of the preset's size, with one torch thread. The variants
alternate, ``--repeats`` times, and the best of the repeats is kept. Also measured: one full
test-set evaluation (10,000 images, forward only) per variant.

Both wall-clock and process CPU time are printed: on a shared machine the CPU time per step is
the better estimate of what one uncontended core does. bf16 is measured whether or not
:func:`bnexp.train.precision.bf16_supported` says the CPU has native bfloat16 (the trainer would fall
back to fp32 where it has not).

Usage:
    python benchmarks/bench_cifar_precision.py [--steps 40] [--repeats 2] [--threads 1] [overrides ...]

Prints ms/step, steps/s, images/s and the ratios to fp32 NCHW, all measured in this run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bnexp.config.schema import compose_config  # noqa: E402
from bnexp.nets.models import build_model  # noqa: E402
from bnexp.train.precision import autocast, bf16_supported, channels_last_input, to_channels_last  # noqa: E402

VARIANTS = (("fp32 NCHW", False, None), ("fp32 channels-last", True, None),
            ("bf16 + channels-last", True, torch.bfloat16))


def _model(cfg, channels_last: bool) -> nn.Module:
    torch.manual_seed(0)
    m = build_model(cfg, (3, 32, 32), 10)
    return to_channels_last(m) if channels_last else m


def time_steps(cfg, channels_last: bool, dtype, steps: int, warmup: int = 5) -> tuple[float, float]:
    """(wall s, CPU s) per training step of the preset's network in one layout / precision."""
    model = _model(cfg, channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(cfg.trainer.batch_size, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (cfg.trainer.batch_size,), generator=g)
    cpu = torch.device("cpu")
    model.train()
    for i in range(warmup + steps):
        if i == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        xb = channels_last_input(x) if channels_last else x
        with autocast(cpu, dtype):
            logits = model(xb)
        loss = nn.functional.cross_entropy(logits.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps


@torch.no_grad()
def time_eval(cfg, channels_last: bool, dtype, n: int = 10000, chunk: int = 500) -> tuple[float, float]:
    """(wall s, CPU s) of one evaluation pass over ``n`` test-sized images (forward only, eval mode)."""
    model = _model(cfg, channels_last).eval()
    x = torch.randn(chunk, 3, 32, 32)
    x = channels_last_input(x) if channels_last else x
    cpu = torch.device("cpu")
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n // chunk):
        with autocast(cpu, dtype):
            model(x).float()
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-eval", action="store_true", help="skip the test-set evaluation timing")
    ap.add_argument("overrides", nargs="*", help="bnexp config overrides (default: +experiment=bn_baseline)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = compose_config(args.overrides or ["+experiment=bn_baseline"])
    m = cfg.model
    print(f"network: {m.name} channels {list(m.channels)} x {m.convs_per_stage} convs/stage, fc {m.fc}, "
          f"bn={cfg.bn.enabled}, act={cfg.act.value}, mini-batch {cfg.trainer.batch_size}, {args.threads} thread(s); "
          f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"native bf16: {bf16_supported(torch.device('cpu'))}")
    best = {name: (float("inf"), float("inf")) for name, _, _ in VARIANTS}
    for r in range(args.repeats):
        for name, cl, dt in VARIANTS:
            w, c = time_steps(cfg, cl, dt, args.steps)
            best[name] = (min(best[name][0], w), min(best[name][1], c))
            print(f"repeat {r + 1}: {name:22s} {w * 1e3:8.1f} ms/step wall, {c * 1e3:8.1f} ms/step CPU", flush=True)
    base_w, base_c = best[VARIANTS[0][0]]
    bs = cfg.trainer.batch_size
    print(f"\n{'variant':22s} {'steps/s (wall)':>15s} {'steps/s (CPU)':>14s} {'img/s (CPU)':>12s} "
          f"{'x fp32 NCHW (wall)':>19s} {'x fp32 NCHW (CPU)':>18s}")
    for name, _, _ in VARIANTS:
        w, c = best[name]
        print(f"{name:22s} {1 / w:15.2f} {1 / c:14.2f} {bs / c:12.0f} {base_w / w:19.2f} {base_c / c:18.2f}")
    if not args.no_eval:
        for name, cl, dt in VARIANTS:
            w, c = time_eval(cfg, cl, dt)
            print(f"test-set evaluation (10,000 images), {name}: {w:.2f} s wall, {c:.2f} s CPU "
                  f"= {c / best[name][1]:.0f} training steps")


if __name__ == "__main__":
    main()
