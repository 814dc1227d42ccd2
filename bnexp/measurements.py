"""Measurements taken during training, each a small object with its own cadence.

The step loop (:meth:`bnexp.trainer.Trainer.run`) knows nothing about what is measured:
it draws the mini-batch, calls the measurements due *before* the update with that
mini-batch, does forward, loss, backward and the SGD update, then calls the
measurements due *after* the update. A :class:`Schedule` tells it the next step at which
anything is due, so on all other steps the loop does one integer comparison per phase.

A measurement (:class:`Measurement`) has

* ``every`` -- its cadence in steps (0: never), ``phase`` -- ``"before"`` or ``"after"``
  the update, ``at_end`` -- also due at the last step, ``at_start`` -- also taken once
  before the first step of a fresh run;
* :meth:`~Measurement.before_update` / :meth:`~Measurement.after_update` -- the work at a
  due step, given the trainer (which holds the model, optimizer, writer, step, logs);
* :meth:`~Measurement.state_dict` / :meth:`~Measurement.load_state_dict` -- whatever it
  carries between steps, saved in checkpoints so that resume is exact;
* :meth:`~Measurement.finish` -- after the last step.

Adding a measurement: write a subclass here and add it (with its config key) to
:func:`build_measurements`. The records of ``metrics.jsonl``, ``shift.jsonl`` and
``ics.jsonl`` go through a :class:`RecordLog` each, which the trainer checkpoints and
rewrites on resume.

A measurement that finds the run numerically broken raises :class:`Diverged`; the loop
stops the run with status ``diverged``.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path

import torch
from torch import nn

from bnexp import rundir
from bnexp.distributed import all_sum
from bnexp.errors import Diverged  # the package's one divergence signal (re-exported here)
from bnexp.ics import gradient_ics, landscape_probe, layer_param_groups
from bnexp.models import hidden_layers
from bnexp.precision import autocast

log = logging.getLogger("bnexp")

NEVER = float("inf")


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
            :mod:`bnexp.precision`); None: fp32. The loss is computed in fp32 either way.

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
    return float(loss_sum) / len(y), float(correct) / len(y)


class Measurement:
    """Base class: a measurement taken every ``every`` steps, before or after the update.

    Args:
        every: cadence in steps; 0 means never.

    Class attributes:
        name: key of the measurement (in checkpoints; in ``summary.json`` ``probe_time_s``
            when ``timed``).
        phase: ``"after"`` (default) -- called after the update of step s with s the new step
            count; ``"before"`` -- called before the update that makes step s, with its mini-batch.
        at_start: also taken (by :meth:`start`) before the first step of a fresh run.
        at_end: also due at the last step (``trainer.max_steps``).
        timed: its seconds are reported separately from the training time.
        all_replicas: taken on every data-parallel replica (it has a collective part);
            otherwise on rank 0 only, with the full model and the whole global mini-batch.
    """

    name = "measurement"
    phase = "after"
    at_start = False
    at_end = False
    timed = False
    all_replicas = False

    def __init__(self, every: int):
        self.every = int(every)

    def due(self, step: int, max_steps: int) -> bool:
        """Whether it is due at ``step`` (for ``before`` measurements: the step the update will make)."""
        return (self.every > 0 and step % self.every == 0) or (self.at_end and step == max_steps)

    def next_due(self, step: int, max_steps: int) -> float:
        """The first step after ``step`` at which it may be due (``NEVER`` if none); may be early, never late."""
        nxt = (step // self.every + 1) * self.every if self.every > 0 else NEVER
        if self.at_end and step < max_steps:
            nxt = min(nxt, max_steps)
        return nxt

    def start(self, tr) -> None:
        """Taken once before the first step of a fresh run (only if ``at_start``)."""

    def before_update(self, tr, x: torch.Tensor, y: torch.Tensor) -> None:
        """Work before the update, on the step's mini-batch x (B, ...) and labels y (B,)."""

    def after_update(self, tr) -> None:
        """Work after the update; ``tr.step`` is the number of updates done."""

    def finish(self, tr) -> None:
        """After the last step of a finished or diverged run."""

    def state_dict(self) -> dict:
        """What it carries between steps (for checkpoints)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


class TrainLoss(Measurement):
    """Mean training loss and accuracy over the mini-batches since the last record, every
    ``trainer.log_every`` steps; stops the run on a non-finite loss.

    The step loop appends (loss, logits, labels) of every step to :attr:`window`, as
    device tensors, so the step does no host transfer; they are summed here. The sums
    since the last test evaluation are kept for its ``train_loss``/``train_accuracy``.
    With N data-parallel replicas each holds its share's loss (mean over m/N examples) and
    logits; the window sums are added over the replicas (one all-reduce), so the record is
    over the global mini-batches, and every replica takes the same divergence decision.

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

    def after_update(self, tr) -> None:
        step, window = tr.step, self.window
        n = len(window)
        losses, logits, labels = zip(*window)
        window.clear()
        loss_sum = float(torch.stack(losses).sum())
        # one argmax over all the window's logits (few large ops instead of 3 small ones per step)
        correct = float((torch.cat(logits).argmax(1) == torch.cat(labels)).sum())
        replicas = getattr(tr, "replicas", None)
        if replicas is not None and replicas.distributed:  # equal shares: the global mean loss is the mean of the share means
            loss_sum, correct = all_sum([loss_sum, correct], replicas)
            loss_sum /= replicas.world_size
        if not math.isfinite(loss_sum):
            raise Diverged(step, "training loss")
        if tr.writer is not None:
            tr.writer.add_scalar("Train/loss", loss_sum / n, step)
            tr.writer.add_scalar("Train/accuracy", correct / (n * self.batch_size), step)
        self.loss_sum += loss_sum
        self.correct += correct
        self.n += n
        tr.progress.update(step, loss=loss_sum / n)

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
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


class TestEvaluation(Measurement):
    """Test loss and accuracy on the full test set, every ``trainer.eval_every`` steps, at
    step 0 and at the end: one ``metrics.jsonl`` record (with the train loss/accuracy since
    the previous evaluation and the learning rate) and TensorBoard scalars ``Test/*``
    (capitalized: TensorBoard sorts tag groups by name, upper case first, and opens the first two).

    Raises:
        Diverged: a parameter is NaN or infinite.
    """

    name = "eval"
    at_start = True
    at_end = True
    timed = True

    def __init__(self, every: int, train_loss: TrainLoss, metrics: RecordLog):
        super().__init__(every)
        self.train_loss = train_loss
        self.metrics = metrics

    def _record(self, tr, train_loss, train_acc) -> dict:
        test_loss, test_acc = evaluate(tr.model, tr.data.test_x, tr.data.test_y,
                                       autocast_dtype=getattr(tr, "amp_dtype", None))
        step = tr.step
        rec = {"step": step, "epoch": tr.sampler.epoch, "test_loss": test_loss, "test_accuracy": test_acc,
               "train_loss": train_loss, "train_accuracy": train_acc,
               "lr": tr.optimizer.param_groups[0]["lr"], "wall_time_s": time.time() - tr.t_start}
        self.metrics.append(rec)
        tr.writer.add_scalar("Test/loss", test_loss, step)
        tr.writer.add_scalar("Test/accuracy", test_acc, step)
        tr.writer.add_scalar("Train/learning_rate", rec["lr"], step)
        return rec

    def start(self, tr) -> None:
        self._record(tr, None, None)

    def after_update(self, tr) -> None:
        step = tr.step
        if not _params_finite(tr.model):
            raise Diverged(step, "parameters")
        train_loss, train_acc = self.train_loss.take()
        rec = self._record(tr, train_loss, train_acc)
        tr.progress.update(step, acc=f"{rec['test_accuracy']:.4f}")
        if not tr.progress.enabled:
            log.info("step %d/%d  test acc %.4f  test loss %.4f  train loss %s", step, tr.max_steps,
                     rec["test_accuracy"], rec["test_loss"], f"{train_loss:.4f}" if train_loss is not None else "-")


class ShiftRecord(Measurement):
    """The covariate-shift monitor (:class:`bnexp.monitor.ShiftMonitor`) every
    ``trainer.hist_every`` steps, at step 0 and at the end: one ``shift.jsonl`` record,
    ``shift/*``, ``ics/*`` scalars and ``preact/*`` histograms; at the finish the
    percentile-band figure (paper Fig. 1(b, c)) as ``percentiles.png``."""

    name = "monitor"
    at_start = True
    at_end = True
    timed = True

    def __init__(self, every: int, monitor, shift: RecordLog):
        super().__init__(every)
        self.monitor = monitor
        self.shift = shift

    def start(self, tr) -> None:
        self.after_update(tr)

    def after_update(self, tr) -> None:
        self.shift.append(self.monitor.record(tr.step, tr.writer))

    def finish(self, tr) -> None:
        if self.monitor.history:
            cfg = tr.cfg
            fig = self.monitor.figure(f"bn={cfg.bn.enabled} act={tr.hp['act']} lr={cfg.lr:g} seed={cfg.seed}")
            rundir.save_figure(fig, tr.run_dir / "percentiles.png", dpi=100)  # atomic
            tr.writer.add_figure("shift/percentile_bands", fig, tr.step)

    def state_dict(self) -> dict:
        return self.monitor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.monitor.load_state_dict(state)


class GradientICS(Measurement):
    """Gradient-based ICS (Santurkar et al. 2018, Def. 2.1) every ``monitor.grad_ics_every``
    steps, on that step's mini-batch before its update: ``grad_ics/<layer>/{l2,l2_rel,cos}``
    scalars (not for layer 1, whose G' = G by definition) and an ``ics.jsonl`` record
    ``{"step", "kind": "grad_ics", "layers": {...}}`` with every layer (layer 1 ``trivial``)."""

    name = "grad_ics"
    phase = "before"
    timed = True

    def __init__(self, every: int, ics: RecordLog):
        super().__init__(every)
        self.ics = ics

    def before_update(self, tr, x: torch.Tensor, y: torch.Tensor) -> None:
        step = tr.step + 1
        groups, weights = layer_param_groups(tr.model)
        res = gradient_ics(tr.model, nn.functional.cross_entropy, x, y, tr.optimizer, groups, weights)
        names = [name for name, _ in hidden_layers(tr.model)] + ["classifier"]
        layers = {name: r for name, r in zip(names, res)}
        for name, r in layers.items():
            if r.get("trivial"):
                continue
            for k in ("l2", "l2_rel", "cos"):
                tr.writer.add_scalar(f"grad_ics/{name}/{k}", r[k], step)
        self.ics.append({"step": step, "kind": "grad_ics", "layers": layers})


class Landscape(Measurement):
    """Loss-landscape smoothness (Santurkar et al. 2018, Sec. 3.1, Fig. 4) along the gradient
    every ``monitor.landscape_every`` steps, before that step's update, with step sizes =
    ``monitor.landscape_step_sizes`` x the current learning rate (raw) and the scale-invariant
    probe with steps ``monitor.landscape_rel_step_sizes`` relative to each parameter tensor's norm
    (the one verdicts use): ``landscape/*`` and ``landscape_rel/*`` scalars and an ``ics.jsonl``
    record ``{"step", "kind": "landscape", ...}``."""

    name = "landscape"
    phase = "before"
    timed = True

    def __init__(self, every: int, step_sizes: list[float], ics: RecordLog,
                 rel_step_sizes: list[float] | None = None):
        super().__init__(every)
        self.step_sizes = [float(s) for s in step_sizes]
        self.rel_step_sizes = None if rel_step_sizes is None else [float(s) for s in rel_step_sizes]
        self.ics = ics

    def before_update(self, tr, x: torch.Tensor, y: torch.Tensor) -> None:
        step = tr.step + 1
        lr = tr.optimizer.param_groups[0]["lr"]
        res = landscape_probe(tr.model, nn.functional.cross_entropy, x, y, [m * lr for m in self.step_sizes],
                              self.rel_step_sizes)
        for k in ("loss_variation", "grad_predictiveness", "beta_smoothness"):
            tr.writer.add_scalar(f"landscape/{k}", res[k], step)
            if f"rel_{k}" in res:
                tr.writer.add_scalar(f"landscape_rel/{k}", res[f"rel_{k}"], step)
        self.ics.append({"step": step, "kind": "landscape", **res})


class Checkpoint(Measurement):
    """The complete run state to ``checkpoint.pt`` every ``trainer.ckpt_every`` steps before
    the last (the trainer writes the final one itself)."""

    name = "checkpoint"

    def due(self, step: int, max_steps: int) -> bool:
        return step % self.every == 0 and step < max_steps

    def after_update(self, tr) -> None:
        tr.checkpoint_in_loop()


class Schedule:
    """The measurements of a run in call order, and the next step at which any is due.

    Args:
        measurements: in the order they are called at a step where several are due.
        max_steps: the last step.

    Attributes:
        next_before / next_after: the next step (count after the update) at which a
            ``before`` / ``after`` measurement may be due; the loop compares against these.
    """

    def __init__(self, measurements: list[Measurement], max_steps: int):
        self.all = list(measurements)
        self.max_steps = int(max_steps)
        self.before = [m for m in self.all if m.phase == "before"]
        self.after = [m for m in self.all if m.phase == "after"]
        self.next_before = self.next_after = NEVER

    def reset(self, step: int) -> None:
        """Compute the next due steps from ``step`` (at the start or after a resume)."""
        self.next_before = min((m.next_due(step, self.max_steps) for m in self.before), default=NEVER)
        self.next_after = min((m.next_due(step, self.max_steps) for m in self.after), default=NEVER)

    def _call(self, tr, m: Measurement, fn, *args) -> None:
        if m.timed:
            t0 = time.time()
            try:
                fn(*args)
            finally:
                tr.probe_time[m.name] += time.time() - t0
        else:
            fn(*args)

    def run_start(self, tr) -> None:
        """The ``at_start`` measurements, before the first step of a fresh run."""
        for m in self.all:
            if m.at_start:
                self._call(tr, m, m.start, tr)

    def run_before(self, tr, x: torch.Tensor, y: torch.Tensor) -> None:
        """The ``before`` measurements due at step ``tr.step + 1``."""
        step = tr.step + 1
        for m in self.before:
            if m.due(step, self.max_steps):
                self._call(tr, m, m.before_update, tr, x, y)
        self.next_before = min((m.next_due(step, self.max_steps) for m in self.before), default=NEVER)

    def run_after(self, tr) -> None:
        """The ``after`` measurements due at step ``tr.step``.

        Raises:
            Diverged: from a measurement.
        """
        step = tr.step
        for m in self.after:
            if m.due(step, self.max_steps):
                self._call(tr, m, m.after_update, tr)
        self.next_after = min((m.next_due(step, self.max_steps) for m in self.after), default=NEVER)

    def finish(self, tr) -> None:
        """Every measurement's :meth:`Measurement.finish`."""
        for m in self.all:
            m.finish(tr)


def build_measurements(cfg, monitor, logs: dict[str, RecordLog], device: torch.device) -> list[Measurement]:
    """The measurements a config asks for, in call order.

    Before the update: gradient ICS (``monitor.grad_ics``), landscape probe (``monitor.landscape``).
    After it: train loss (``trainer.log_every``), test evaluation (``trainer.eval_every``),
    covariate-shift monitor (``trainer.hist_every``), checkpoint (``trainer.ckpt_every``).

    Args:
        cfg: the run config.
        monitor: the run's :class:`bnexp.monitor.ShiftMonitor`.
        logs: ``{"metrics", "shift", "ics"}`` record logs.
        device: where the training tensors live.
    """
    tcfg, mcfg = cfg.trainer, cfg.monitor
    train_loss = TrainLoss(tcfg.log_every, tcfg.batch_size, device)
    out: list[Measurement] = []
    if mcfg.grad_ics:
        out.append(GradientICS(mcfg.grad_ics_every, logs["ics"]))
    if mcfg.landscape:
        out.append(Landscape(mcfg.landscape_every, list(mcfg.landscape_step_sizes), logs["ics"],
                             list(mcfg.landscape_rel_step_sizes)))
    out += [train_loss,
            TestEvaluation(tcfg.eval_every, train_loss, logs["metrics"]),
            ShiftRecord(tcfg.hist_every, monitor, logs["shift"]),
            Checkpoint(tcfg.ckpt_every)]
    return out
