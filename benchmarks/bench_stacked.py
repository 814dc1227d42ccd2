"""Per-run training speed of a stack of R runs (hydra/launcher=stacked) against R separate trainer runs.

For each case, R runs of one config (seeds 0..R-1, rates spread over 0.1..1.0) are built as bnexp trainers
(:class:`bnexp.train.stack_loop.MemberTrainer`, the trainer of a stacked run) on the real data. Two step loops
are timed, interleaved in blocks so that this shared machine's drifting speed hits both alike:

* separate: each run steps alone through the trainer's own step (``Trainer._next_batch`` + ``_update``:
  mini-batch, forward, loss, backward, SGD update), one run after the other;
* stacked: the same R runs' mini-batches (their own samplers), one update of the batched model
  (:class:`bnexp.train.stacked_net.StackedNet`).

Measurements (evaluations, monitor) are left out of both: they cost the same per run either way. Printed per
case: per-run steps/s of each loop (median over the blocks) and their ratio, e.g. ``mlp R=8: ... 1.85x``.

Usage:
    python benchmarks/bench_stacked.py [--steps 50] [--blocks 5] [--device cpu|cuda] [--threads 1]
    [--cases mlp:1,mlp:8,mlp:32,cifar:1,cifar:4] [--require-faster mlp:8] [--json OUT.json]

Targets on 2 CPU cores (docs/stacked.md): MLP R=8 >= 1.6x, R=32 >= 2x. ``--require-faster CASE`` makes the
target a check: exit code 1, with one line saying so, when that case's stacked loop is not faster than its
separate runs (median ratio <= 1); scripts/gpu_check.sh asks it of MLP R=8 on CUDA. ``--json`` writes each
case's medians ({case: {"separate", "stacked", "ratio"}}, steps/s per run) for its table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from bnexp.config.schema import compose_config  # noqa: E402
from bnexp.nets.datasets import load_data  # noqa: E402
from bnexp.train.stack_loop import MemberTrainer  # noqa: E402
from bnexp.train.stacked_net import StackedNet  # noqa: E402

# the shared CIFAR-10 copy is re-encoded (../shared/README.md): its md5s are not the official ones
PRESETS = {"mlp": [], "cifar": ["+experiment=bn_baseline", "data.verify_checksums=false"]}


def build(preset: str, R: int, device: str, threads: int, tmp: Path) -> list[MemberTrainer]:
    base = PRESETS[preset] + [f"trainer.device={device}", f"trainer.num_threads={threads}", "trainer.progress=false"]
    rates = [0.1 + 0.9 * i / max(1, R - 1) for i in range(R)]
    data = None
    members = []
    for r in range(R):
        cfg = compose_config(base + [f"seed={r}", f"lr={rates[r]:.4f}"])
        if data is None:
            data = load_data(cfg.data, torch.device(device))
        import dataclasses

        m = MemberTrainer(cfg, tmp / f"{preset}{R}_{r}", dataclasses.replace(data))
        m.keep_rng()
        members.append(m)
    return members


def separate_block(members: list[MemberTrainer], steps: int, sync) -> float:
    t0 = time.perf_counter()
    for m in members:
        for _ in range(steps):
            x, y, _ = m._next_batch()
            m._update(x, y)
    sync()
    return time.perf_counter() - t0


def stacked_block(members: list[MemberTrainer], net: StackedNet, steps: int, sync) -> float:
    dev = members[0].device
    lr = torch.tensor([m.optimizer.param_groups[0]["lr"] for m in members], device=dev)
    wds = [m.optimizer.param_groups[0]["weight_decay"] for m in members]
    wd = torch.tensor(wds, device=dev) if any(wds) else None
    t0 = time.perf_counter()
    for _ in range(steps):
        xs, ys = zip(*[m._next_batch()[:2] for m in members])
        net.step(torch.stack(xs), torch.stack(ys), lr, wd, members[0].amp_dtype)
    sync()
    return time.perf_counter() - t0


def main() -> int:
    """Run the cases; returns the exit code (1 when ``--require-faster``'s case is not faster stacked)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=50, help="steps per run per block")
    p.add_argument("--blocks", type=int, default=5, help="interleaved blocks per loop (median taken)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cases", default="mlp:1,mlp:8,mlp:32,cifar:1,cifar:4")
    p.add_argument("--require-faster", metavar="CASE", help="exit 1 unless this case (one of --cases) is faster "
                                                             "stacked than as separate runs")
    p.add_argument("--json", metavar="PATH", help="write each case's median steps/s per run and ratio here")
    args = p.parse_args()
    cases = args.cases.split(",")
    if args.require_faster is not None and args.require_faster not in cases:
        print(f"error: --require-faster {args.require_faster} is not one of --cases {args.cases}", file=sys.stderr)
        return 2
    results: dict[str, dict[str, float]] = {}
    os.environ.setdefault("BNEXP_DATA_ROOT", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    print(f"device {args.device}, {torch.get_num_threads()} -> {args.threads} thread(s), torch {torch.__version__}; "
          f"{args.blocks} interleaved blocks of {args.steps} steps per run", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            preset, R = case.split(":")
            R = int(R)
            alone = build(preset, R, args.device, args.threads, Path(tmp))
            stacked_members = build(preset, R, args.device, args.threads, Path(tmp))
            net = StackedNet([m.model for m in stacked_members], [m.optimizer for m in stacked_members],
                             lambda i: stacked_members[i].own_rng(full=False))
            separate_block(alone, 3, sync)  # warm-up
            stacked_block(stacked_members, net, 3, sync)
            sep, stk = [], []
            for _ in range(args.blocks):
                sep.append(R * args.steps / separate_block(alone, args.steps, sync))
                stk.append(R * args.steps / stacked_block(stacked_members, net, args.steps, sync))
            ratios = [b / a for a, b in zip(sep, stk)]
            results[case] = {"separate": statistics.median(sep), "stacked": statistics.median(stk),
                             "ratio": statistics.median(ratios)}
            print(f"{preset} R={R}: separate {statistics.median(sep):.0f} steps/s per run, stacked "
                  f"{statistics.median(stk):.0f} steps/s per run; ratio {statistics.median(ratios):.2f}x", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "cases": results}, indent=1) + "\n")
    if args.require_faster is not None and results[args.require_faster]["ratio"] <= 1.0:
        print(f"bench_stacked: {args.require_faster} is not faster stacked than as separate runs "
              f"(ratio {results[args.require_faster]['ratio']:.2f}x)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
