"""Measurements taken during training, each a small object with its own cadence.

The run's measurements, in the order a step takes them: gradient ICS and the landscape probe
before the update (on its mini-batch), then the train loss, the test evaluation and the
covariate-shift record after it; :func:`build_measurements` builds those a config asks for,
each with its cadence, as :class:`Measurements`. What a measurement is and how the step loop
takes it: :mod:`bnexp.train.measurement_schedule`.

Adding a measurement: write a subclass here, give it a field of :class:`Measurements` and
build it (with its config key) in :func:`build_measurements`, and take it in the trainer's
step loop where it runs (docs/development.md, "Adding a measurement"). The records of
``metrics.jsonl``, ``shift.jsonl`` and ``ics.jsonl`` go through a :class:`RecordLog` each,
which the trainer checkpoints and rewrites on resume. Checkpoints are written by the loop,
not by a measurement. Work that needs nothing more of its step than what it took there goes
to ``ctx.defer`` (the records thread, :mod:`bnexp.train.background`), which runs it in order
beside the loop.

A measurement that finds the run numerically broken raises :class:`Diverged`; the run
ends with status ``diverged``.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from bnexp.runfolders import rundir
from bnexp.train.distributed import all_sum
from bnexp.errors import Diverged  # the package's one divergence signal (re-exported here)
from bnexp.train.ics import gradient_ics, landscape_probe, layer_param_groups
# what a measurement is and how the loop takes it (Schedule: also importable from here)
from bnexp.train.measurement_schedule import Measurement, Schedule, StepContext  # noqa: F401
from bnexp.nets.models import hidden_layers
from bnexp.train.percentile_figure import plot_percentile_bands
from bnexp.train.precision import autocast

log = logging.getLogger("bnexp")


class RecordLog:
    """The records of one JSON-lines file of the run directory, also kept in memory.

    Args:
        path: the file, e.g. ``run_dir/metrics.jsonl``.

    Attributes:
        records: every record appended so far (checkpointed by the trainer).
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.records: list[dict] = []

    def append(self, rec: dict) -> None:
        """Keep ``rec`` and append it as one line to the file."""
        self.records.append(rec)
        rundir.append_jsonl(self.path, rec)

    def rewrite(self) -> None:
        """Rewrite the file from the records (after a resume: drops lines written after the checkpoint)."""
        rundir.write_jsonl(self.path, self.records)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 500,
             autocast_dtype: torch.dtype | None = None) -> tuple[float, float]:
    """Mean cross-entropy loss and accuracy of ``model`` in eval mode (population statistics) on (x, y).

    Args:
        x: (N, C, H, W) inputs; y: (N,) labels.
        chunk: examples per forward pass.
        autocast_dtype: the forward pass's autocast dtype (``trainer.precision``, see
            :mod:`bnexp.train.precision`); None: fp32. The loss is computed in fp32 either way.

    Returns:
        (loss in nats, accuracy in [0, 1]).
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=x.device)
    correct = torch.zeros((), device=x.device, dtype=torch.long)
    for i in range(0, len(y), chunk):
        with autocast(x.device, autocast_dtype):
            logits = model(x[i:i + chunk])
        logits = logits.float()
        loss_sum += nn.functional.cross_entropy(logits, y[i:i + chunk], reduction="sum")
        correct += (logits.argmax(1) == y[i:i + chunk]).sum()
    model.train(was_training)
    loss_sum, correct = torch.stack([loss_sum.double(), correct.double()]).tolist()  # one host read, exact
    return loss_sum / len(y), correct / len(y)


class TrainLoss(Measurement):
    """Mean training loss and accuracy over the mini-batches since the last record, every
    ``trainer.log_every`` steps; stops the run on a non-finite loss.

    Every step :meth:`observe` keeps the step's (loss, logits, labels) from the context in
    :attr:`window`, as device tensors, so the step does no host transfer; they are summed at
    the due step. The sums since the last test evaluation are kept for its
    ``train_loss``/``train_accuracy``. With N data-parallel replicas each holds its share's
    loss (mean over m/N examples) and logits; the window sums are added over the replicas (one
    all-reduce), so the record is over the global mini-batches, and every replica takes the
    same divergence decision.

    Raises:
        Diverged: the summed loss is NaN or infinite.
    """

    name = "train_loss"
    at_end = True
    all_replicas = True

    def __init__(self, every: int, batch_size: int, device: torch.device):
        super().__init__(every)
        self.batch_size = int(batch_size)
        self.device = device
        self.window: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.loss_sum = 0.0  # since the last test evaluation: summed mini-batch mean losses (nats)
        self.correct = 0.0   # correctly classified training examples
        self.n = 0           # mini-batches

    def observe(self, ctx: StepContext) -> None:
        self.window.append((ctx.loss, ctx.logits, ctx.labels))

    def after_update(self, ctx: StepContext) -> None:
        step, window, replicas = ctx.step, self.window, ctx.replicas
        n = len(window)
        losses, logits, labels = zip(*window)
        window.clear()
        # one argmax over the window's logits; both sums to the host in one copy (float64 holds both exactly)
        loss_sum, correct = torch.stack([torch.stack(losses).sum().double(),
                                         (torch.cat(logits).argmax(1) == torch.cat(labels)).sum().double()]).tolist()
        if replicas.distributed:  # equal shares: the global mean loss is the mean of the share means
            loss_sum, correct = all_sum([loss_sum, correct], replicas)
            loss_sum /= replicas.world_size
        if not math.isfinite(loss_sum):
            raise Diverged(step, "training loss")
        if ctx.writer is not None:
            ctx.writer.add_scalar("Train/loss", loss_sum / n, step)
            ctx.writer.add_scalar("Train/accuracy", correct / (n * self.batch_size), step)
        self.loss_sum += loss_sum
        self.correct += correct
        self.n += n
        ctx.progress.update(step, loss=loss_sum / n)

    def take(self) -> tuple[float | None, float | None]:
        """(mean train loss, train accuracy) since the last call, or (None, None) if no step was summed."""
        n = self.n
        out = (self.loss_sum / n, self.correct / (n * self.batch_size)) if n else (None, None)
        self.loss_sum = self.correct = 0.0
        self.n = 0
        return out

    def state_dict(self) -> dict:
        return {"loss_sum": self.loss_sum, "correct": self.correct, "n": self.n,
                "window": [(a.cpu(), b.cpu(), c.cpu()) for a, b, c in self.window]}

    def load_state_dict(self, state: dict) -> None:
        self.loss_sum, self.correct, self.n = state["loss_sum"], state["correct"], state["n"]
        dev = self.device
        self.window[:] = [(a.to(dev), b.to(dev), c.to(dev)) for a, b, c in state["window"]]


def _params_finite(model: nn.Module) -> bool:
    """Whether every parameter of ``model`` is finite, with one host sync for all of them."""
    return bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all())


class TestEvaluation(Measurement):
    """Test loss and accuracy on the full test set, every ``trainer.eval_every`` steps, at
    step 0 and at the end: one ``metrics.jsonl`` record (with the train loss/accuracy since
    the previous evaluation and the learning rate of the next update) and TensorBoard
    scalars ``Test/*``, ``Train/learning_rate`` (capitalized: TensorBoard sorts tag groups by name,
    upper case first, and opens the first two).

    Raises:
        Diverged: a parameter is NaN or infinite.
    """

    name = "eval"
    at_end = True
    timed = True

    def __init__(self, every: int, train_loss: TrainLoss, metrics: RecordLog):
        super().__init__(every)
        self.train_loss = train_loss
        self.metrics = metrics

    def _record(self, ctx: StepContext, train_loss, train_acc, report: bool) -> None:
        """Evaluate a copy of this step's network on the records thread (``ctx.defer``); record it."""
        model = copy.deepcopy(ctx.model)  # the loop trains on while the copy is evaluated
        step, epoch, lr, writer, progress = ctx.step, ctx.epoch, ctx.lr, ctx.writer, ctx.progress
        test_x, test_y, amp_dtype, t_start, max_steps = ctx.test_x, ctx.test_y, ctx.amp_dtype, ctx.t_start, ctx.max_steps

        def job() -> None:
            test_loss, test_acc = evaluate(model, test_x, test_y, autocast_dtype=amp_dtype)
            self.metrics.append({"step": step, "epoch": epoch, "test_loss": test_loss, "test_accuracy": test_acc,
                                 "train_loss": train_loss, "train_accuracy": train_acc,
                                 "lr": lr, "wall_time_s": time.time() - t_start})
            writer.add_scalar("Test/loss", test_loss, step)
            writer.add_scalar("Test/accuracy", test_acc, step)
            writer.add_scalar("Train/learning_rate", lr, step)
            if report:
                progress.update(step, acc=f"{test_acc:.4f}")
                if not progress.enabled:
                    log.info("step %d/%d  test acc %.4f  test loss %.4f  train loss %s", step, max_steps, test_acc,
                             test_loss, f"{train_loss:.4f}" if train_loss is not None else "-")
        ctx.defer(job)

    def start(self, ctx: StepContext) -> None:
        self._record(ctx, None, None, report=False)

    def after_update(self, ctx: StepContext) -> None:
        if not _params_finite(ctx.model):
            raise Diverged(ctx.step, "parameters")
        self._record(ctx, *self.train_loss.take(), report=True)


class ShiftRecord(Measurement):
    """The covariate-shift monitor (:class:`bnexp.train.monitor.ShiftMonitor`) every
    ``trainer.hist_every`` steps, at step 0 and at the end: one ``shift.jsonl`` record,
    ``shift/*``, ``ics/*`` scalars and ``preact/*`` histograms; at the finish the
    percentile-band figure (paper Fig. 1(b, c)) as ``percentiles.png``.

    The monitor's history is the ``shift.jsonl`` log's records: checkpoints store them once
    (as the log), and :meth:`load_state_dict` gives them back to the monitor."""

    name = "monitor"
    at_end = True
    timed = True

    def __init__(self, every: int, monitor, shift: RecordLog):
        super().__init__(every)
        self.monitor = monitor
        self.shift = shift

    def start(self, ctx: StepContext) -> None:
        self.after_update(ctx)

    def after_update(self, ctx: StepContext) -> None:
        acts, bn_in = self.monitor.capture_checked(ctx.step)  # Diverged: non-finite values
        step, writer = ctx.step, ctx.writer
        ctx.defer(lambda: self.shift.append(self.monitor.summarize(step, acts, bn_in, writer)))

    def finish(self, ctx: StepContext) -> None:
        if self.monitor.history:
            from bnexp.train.tblog import add_png

            figure = plot_percentile_bands(self.monitor.history, self.monitor.percentiles, ctx.title)
            png = rundir.save_figure(figure, ctx.run_dir / "percentiles.png", dpi=100, close=True)  # atomic
            add_png(ctx.writer, "shift/percentile_bands", png, ctx.step)  # the same pixels, drawn once

    def state_dict(self) -> dict:
        return self.monitor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore the monitor's trackers; its history from the shift log (restored before this)."""
        self.monitor.load_state_dict(state, history=self.shift.records)


class GradientICS(Measurement):
    """Gradient-based ICS (Santurkar et al. 2018, Def. 2.1) every ``monitor.grad_ics_every``
    steps, on that step's mini-batch before its update:
    ``grad_ics/<layer>/{l2,l2_rel,cos,move_rel,l2_rel_per_move}`` scalars (not for layer 1,
    whose G' = G by definition) and an ``ics.jsonl`` record ``{"step", "kind": "grad_ics",
    "layers": {...}}`` with every layer (layer 1 ``trivial``), each holding the keys of
    :func:`bnexp.train.ics.gradient_ics` (``l2``, ``l2_rel``, ``cos``, ``g_norm``, ``move_rel``,
    ``l2_rel_per_move``, ``trivial``)."""

    name = "grad_ics"
    phase = "before"
    timed = True

    def __init__(self, every: int, ics: RecordLog):
        super().__init__(every)
        self.ics = ics

    def before_update(self, ctx: StepContext) -> None:
        step, model = ctx.step + 1, ctx.model
        groups, weights = layer_param_groups(model)
        res = gradient_ics(model, nn.functional.cross_entropy, ctx.x, ctx.y, ctx.optimizer, groups, weights)
        names = [name for name, _ in hidden_layers(model)] + ["classifier"]
        layers = {name: r for name, r in zip(names, res)}
        for name, r in layers.items():
            if r.get("trivial"):
                continue
            for k in ("l2", "l2_rel", "cos", "move_rel", "l2_rel_per_move"):
                ctx.writer.add_scalar(f"grad_ics/{name}/{k}", r[k], step)
        self.ics.append({"step": step, "kind": "grad_ics", "layers": layers})


class Landscape(Measurement):
    """Loss-landscape smoothness (Santurkar et al. 2018, Sec. 3.1, Fig. 4) along the gradient
    every ``monitor.landscape_every`` steps, before that step's update (:func:`bnexp.train.ics.landscape_probe`):

    * raw, with step sizes = ``monitor.landscape_step_sizes`` x the current learning rate
      (``ctx.lr``): ``landscape/*`` scalars, record keys ``loss_variation``, ...;
    * per-tensor relative, steps ``monitor.landscape_rel_step_sizes`` relative to each parameter
      tensor's norm: ``landscape_rel/*``, ``rel_*``;
    * filter-normalized (Li et al. 2018), the same relative steps per filter, along the
      gradient and along a fixed random direction (seed ``fn_seed``): ``landscape_fn/*``
      (``loss_variation``, ``grad_predictiveness``, ``beta_smoothness``,
      ``random_loss_variation``), ``fn_*``;

    and one ``ics.jsonl`` record ``{"step", "kind": "landscape", ...}`` with every key."""

    name = "landscape"
    phase = "before"
    timed = True

    def __init__(self, every: int, step_sizes: list[float], ics: RecordLog,
                 rel_step_sizes: list[float] | None = None, fn_step_sizes: list[float] | None = None,
                 fn_seed: int = 0):
        super().__init__(every)
        self.step_sizes = [float(s) for s in step_sizes]
        self.rel_step_sizes = None if rel_step_sizes is None else [float(s) for s in rel_step_sizes]
        self.fn_step_sizes = None if fn_step_sizes is None else [float(s) for s in fn_step_sizes]
        self.fn_seed = int(fn_seed)
        self.ics = ics

    def before_update(self, ctx: StepContext) -> None:
        step = ctx.step + 1
        res = landscape_probe(ctx.model, nn.functional.cross_entropy, ctx.x, ctx.y,
                              [m * ctx.lr for m in self.step_sizes], self.rel_step_sizes,
                              fn_step_sizes=self.fn_step_sizes, fn_seed=self.fn_seed)
        for k in ("loss_variation", "grad_predictiveness", "beta_smoothness"):
            ctx.writer.add_scalar(f"landscape/{k}", res[k], step)
            for prefix in ("rel", "fn"):
                if f"{prefix}_{k}" in res:
                    ctx.writer.add_scalar(f"landscape_{prefix}/{k}", res[f"{prefix}_{k}"], step)
        if "fn_random_loss_variation" in res:
            ctx.writer.add_scalar("landscape_fn/random_loss_variation", res["fn_random_loss_variation"], step)
        self.ics.append({"step": step, "kind": "landscape", **res})


@dataclass(eq=False)
class Measurements:
    """A run's measurements by name, None where the config does not ask for one; iterating gives those
    present in the order a step takes them (before the update, then after it), the order of a
    checkpoint's ``measurements`` too. The step loop names each where it takes it
    (:meth:`bnexp.train.trainer.Trainer.measure_after_update`)."""

    train_loss: TrainLoss
    evaluation: TestEvaluation
    shift: ShiftRecord
    grad_ics: GradientICS | None = None
    landscape: Landscape | None = None

    def __iter__(self) -> Iterator[Measurement]:
        return iter([m for m in (self.grad_ics, self.landscape, self.train_loss, self.evaluation, self.shift)
                     if m is not None])


def build_measurements(cfg, monitor, logs: dict[str, RecordLog], device: torch.device) -> Measurements:
    """The measurements a config asks for, each with its cadence.

    Before the update: gradient ICS (``monitor.grad_ics``, every ``monitor.grad_ics_every`` steps),
    landscape probe (``monitor.landscape``, every ``monitor.landscape_every``). After it: train loss
    (every ``trainer.log_every``), test evaluation (``trainer.eval_every``), covariate-shift monitor
    (``trainer.hist_every``). Checkpoints (``trainer.ckpt_every``) are the loop's.

    Args:
        cfg: the run config.
        monitor: the run's :class:`bnexp.train.monitor.ShiftMonitor`.
        logs: ``{"metrics", "shift", "ics"}`` record logs.
        device: where the training tensors live.
    """
    tcfg, mcfg = cfg.trainer, cfg.monitor
    train_loss = TrainLoss(tcfg.log_every, tcfg.batch_size, device)
    # the filter-normalized landscape probe takes the relative steps too: alpha = the fraction of its
    # own norm every filter moves (no key of its own, so configs stay as they are)
    return Measurements(
        train_loss=train_loss,
        evaluation=TestEvaluation(tcfg.eval_every, train_loss, logs["metrics"]),
        shift=ShiftRecord(tcfg.hist_every, monitor, logs["shift"]),
        grad_ics=GradientICS(mcfg.grad_ics_every, logs["ics"]) if mcfg.grad_ics else None,
        landscape=Landscape(mcfg.landscape_every, list(mcfg.landscape_step_sizes), logs["ics"],
                            list(mcfg.landscape_rel_step_sizes), list(mcfg.landscape_rel_step_sizes))
        if mcfg.landscape else None)
