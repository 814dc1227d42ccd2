"""What one test evaluation and one covariate-shift monitor record cost, against one bare training step.

bench_train.py times whole runs; on a shared machine its ratios move by several percent between runs.
This script times the pieces of the default logging directly, on the default (paper Fig. 1)
configuration after a few training steps: the test evaluation (10,000 images, ``evaluate``), the
monitor record (``ShiftMonitor.record`` with a TensorBoard writer) split into the probe's forward
pass, the distribution-shift measures (``DistributionShiftTracker.update`` of the layers and of their
BN inputs; their sampling-noise floors separately) and the rest (percentiles, histograms, scalars), and
a bare step (forward, loss, backward, SGD) of the same network. From these it prints what the default
cadences (``trainer.eval_every`` = ``trainer.hist_every`` = 1000, plus step 0) add per step, as a
fraction of the bare step. Medians over ``--repeats`` (the parts of the record: means).

With ``trainer.async_records=true`` (the default) the step loop itself does only the copy of the
network and the probe's forward pass; the rest runs on the records thread (``bnexp.train.background``), so
these are CPU costs there and, with a free second core, not the loop's wall time.

Usage:
    python benchmarks/bench_logging.py [--repeats 9] [--threads 1] [overrides ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bnexp.config.schema import compose_config  # noqa: E402
from bnexp.train.measurements import evaluate  # noqa: E402
from bnexp.train.trainer import Trainer  # noqa: E402


def median_ms(fn, repeats: int) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``repeats`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


class Stopwatch:
    """Wraps a method of one object and adds up the seconds spent in it."""

    def __init__(self, obj, name: str):
        self.total, inner = 0.0, getattr(obj, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - t0
        setattr(obj, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="bnexp config overrides, e.g. data.root=../shared/data")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = compose_config(["trainer.progress=false", "trainer.save_checkpoint=false",
                          f"trainer.num_threads={args.threads}", *args.overrides])
    from torch.utils.tensorboard import SummaryWriter

    with tempfile.TemporaryDirectory() as d:
        t = Trainer(cfg, Path(d))
        model, data, mon = t.model, t.data, t.monitor
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
        gen = torch.Generator().manual_seed(0)

        def bare_step():
            idx = torch.randint(len(data.train_y), (cfg.trainer.batch_size,), generator=gen)
            loss = nn.functional.cross_entropy(model(data.train_x[idx]), data.train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        for _ in range(200):  # away from the initial weights, so the records see a trained-ish net
            bare_step()
        step_ms = median_ms(lambda: [bare_step() for _ in range(100)], args.repeats) / 100
        eval_ms = median_ms(lambda: evaluate(model, data.test_x, data.test_y), args.repeats)
        writer = SummaryWriter(str(Path(d) / "tb"))
        trackers = [tr for tr in (mon.tracker, mon.bn_tracker) if tr is not None]
        watches = {"shift measures": [Stopwatch(tr, "update") for tr in trackers],
                   "  of which floors": [Stopwatch(tr, "_floors") for tr in trackers],
                   "probe forward pass": [Stopwatch(mon, "capture_all")]}
        steps = iter(range(1, 10 ** 9))
        record_ms = median_ms(lambda: mon.record(next(steps), writer), args.repeats)
        calls = args.repeats + 1
        parts = {k: 1e3 * sum(w.total for w in ws) / calls for k, ws in watches.items()}
        writer.close()
    rest = record_ms - parts["shift measures"] - parts["probe forward pass"]
    per_step = 1001 / 1000 / 1000  # records per step at the default cadence (every 1000 steps and step 0)
    print(f"config: MLP {list(cfg.model.hidden)} bn={cfg.bn.enabled} act={cfg.act.value} batch "
          f"{cfg.trainer.batch_size}, {args.threads} thread(s), medians of {args.repeats}")
    print(f"bare training step:                   {step_ms:8.3f} ms")
    print(f"test evaluation:                      {eval_ms:8.1f} ms  (= {eval_ms / step_ms:.0f} bare steps; every 1000 steps: "
          f"+{100 * eval_ms * per_step / step_ms:.1f}% per step)")
    print(f"monitor record:                       {record_ms:8.1f} ms  (= {record_ms / step_ms:.0f} bare steps; every 1000 steps: "
          f"+{100 * record_ms * per_step / step_ms:.1f}% per step)")
    for k, v in (*((k, parts[k]) for k in ("probe forward pass", "shift measures", "  of which floors")),
                 ("percentiles, histograms, scalars", rest)):
        print(f"  {k + ':':37s}{v:8.1f} ms")
    print("the step loop's own part with trainer.async_records=true: the probe's forward pass and a copy of "
          "the network; the rest runs on the records thread")


if __name__ == "__main__":
    main()
