"""Measurements taken during training, each a small object with its own cadence.

The step loop (:meth:`bnexp.train.trainer.Trainer.run`) knows nothing about what is measured:
it draws the mini-batch, lets the measurements due *before* the update see it, does
forward, loss, backward and the SGD update, then lets the measurements due *after* the
update see the result. A :class:`Schedule` tells it the next step at which anything is
due, so on all other steps the loop does one integer comparison per phase.

What a measurement sees is a :class:`StepContext` -- the step, the model, the optimizer,
the current learning rate, the mini-batch, this step's loss and logits, the TensorBoard
writer, the progress bar and the few run facts it needs -- never the trainer itself.

A measurement (:class:`Measurement`) has

* ``every`` -- its cadence in steps (0: never), ``phase`` -- ``"before"`` or ``"after"``
  the update, ``at_end`` -- also due at the last step, ``at_start`` -- also taken once
  before the first step of a fresh run;
* :meth:`~Measurement.before_update` / :meth:`~Measurement.after_update` -- the work at a
  due step; :meth:`~Measurement.observe` -- a cheap look at every step (the train loss);
* :meth:`~Measurement.state_dict` / :meth:`~Measurement.load_state_dict` -- whatever it
  carries between steps, saved in checkpoints so that resume is exact;
* :meth:`~Measurement.finish` -- after the last step.

Adding a measurement: write a subclass here and add it (with its config key) to
:func:`build_measurements`. The records of ``metrics.jsonl``, ``shift.jsonl`` and
``ics.jsonl`` go through a :class:`RecordLog` each, which the trainer checkpoints and
rewrites on resume. Checkpoints are written by the loop, not by a measurement. Work that
needs nothing more of its step than what it took there goes to ``ctx.defer`` (the records
thread, :mod:`bnexp.train.background`), which runs it in order beside the loop.

A measurement that finds the run numerically broken raises :class:`Diverged`; the
schedule hands it to the loop, which stops the run with status ``diverged`` (with N
data-parallel replicas, all of them at the same step).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from bnexp.runfolders import rundir
from bnexp.train.distributed import Replicas, all_sum
from bnexp.errors import Diverged  # the package's one divergence signal (re-exported here)
from bnexp.train.ics import gradient_ics, landscape_probe, layer_param_groups
from bnexp.nets.models import hidden_layers
from bnexp.train.precision import autocast

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


@dataclass(eq=False)
class StepContext:
    """What a measurement sees: filled by the step loop, read by the measurements.

    Run facts (set once): ``model``, ``optimizer``, ``test_x`` (T, C, H, W) and ``test_y`` (T,),
    ``max_steps``, ``run_dir``, ``title`` (of the figures: ``bn=... act=... lr=... seed=...``),
    ``amp_dtype`` (``trainer.precision``'s autocast dtype, None for fp32), ``replicas``,
    ``t_start`` (the run's wall-clock start, seconds since the epoch), ``writer`` (TensorBoard
    ``SummaryWriter``, None on replicas other than rank 0), ``progress`` (:class:`bnexp.train.runtime.Progress`),
    ``defer`` (runs a job after the earlier ones, on the records thread or at once:
    :meth:`bnexp.train.background.Background.submit`; the job must not read the context, which moves on).

    Per step (the loop updates these):

    * ``step`` -- updates done so far (a ``before`` measurement is taken for update ``step + 1``);
    * ``epoch`` -- passes over the training set begun by the mini-batch sampler;
    * ``lr`` -- the learning rate of the next update (:func:`bnexp.train.runtime.learning_rate`, read
      once per step after the scheduler's step), the one source of the current rate;
    * ``x``, ``y`` -- the step's global mini-batch, (B, C, H, W) inputs and (B,) labels;
    * ``loss``, ``logits``, ``labels`` -- this replica's share of the step after the update: the
      detached mean cross-entropy (nats, 0-d), (B/N, classes) logits and (B/N,) labels.
    """

    model: nn.Module
    optimizer: torch.optim.Optimizer
    test_x: torch.Tensor
    test_y: torch.Tensor
    max_steps: int
    run_dir: Path
    title: str = ""
    amp_dtype: torch.dtype | None = None
    replicas: Replicas = Replicas()
    t_start: float = 0.0
    writer: Any = None
    progress: Any = None
    defer: Callable[[Callable[[], None]], None] = staticmethod(lambda job: job())
    step: int = 0
    epoch: int = 0
    lr: float = 0.0
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    labels: torch.Tensor | None = None


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

    def start(self, ctx: StepContext) -> None:
        """Taken once before the first step of a fresh run (only if ``at_start``)."""

    def before_update(self, ctx: StepContext) -> None:
        """Work before the update that makes step ``ctx.step + 1``, on its mini-batch ``ctx.x``, ``ctx.y``."""

    def observe(self, ctx: StepContext) -> None:
        """A look at every step right after its update (cheap: no host transfer); ``ctx.step`` updates done."""

    def after_update(self, ctx: StepContext) -> None:
        """Work after the update at a due step; ``ctx.step`` is the number of updates done."""

    def finish(self, ctx: StepContext) -> None:
        """After the last step of a finished or diverged run."""

    def state_dict(self) -> dict:
        """What it carries between steps (for checkpoints)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`."""


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
    at_start = True
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
    at_start = True
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

            png = rundir.save_figure(self.monitor.figure(ctx.title), ctx.run_dir / "percentiles.png", dpi=100,
                                     close=True)  # atomic
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


class Schedule:
    """The measurements of a run in call order, and the next step at which any is due.

    Every replica keeps the whole list, so that the due steps -- where the loop may run a
    collective (averaging per-replica BN statistics) -- are the same on every replica; only
    rank 0 calls the measurements that are not ``all_replicas``.

    Args:
        measurements: in the order they are called at a step where several are due.
        max_steps: the last step.
        is_main: this process is rank 0 (or the only one).
        probe_time: seconds per ``timed`` measurement name, added to (the trainer's, checkpointed).
        probes: a context-manager factory entered around the measurements of a step (rank 0's
            measurements with synchronized BN layers run them locally); None: nothing.
        sync: called on every replica before the ``after`` measurements of a due step (the trainer
            averages per-replica BN statistics there, so the measurements see their average).

    Attributes:
        next_before / next_after: the next step (count after the update) at which a
            ``before`` / ``after`` measurement may be due; the loop compares against these.
        due_at: the last step at which a ``before`` or ``after`` measurement was due (-1: none yet):
            the same steps on every replica, where the replicas may read what they agreed on.
    """

    def __init__(self, measurements: list[Measurement], max_steps: int, is_main: bool = True,
                 probe_time: dict[str, float] | None = None, probes: Callable[[], Any] | None = None,
                 sync: Callable[[], None] | None = None):
        self.all = list(measurements)
        self.max_steps = int(max_steps)
        self.calls = [m for m in self.all if is_main or m.all_replicas]
        self.before = [m for m in self.all if m.phase == "before"]
        self.after = [m for m in self.all if m.phase == "after"]
        self.observers = [m for m in self.calls if type(m).observe is not Measurement.observe]
        self.probe_time = probe_time if probe_time is not None else {}
        self.probes = probes or contextlib.nullcontext
        self.sync = sync
        self.next_before = self.next_after = NEVER
        self.due_at = -1  # the last step at which a measurement was due (on every replica alike)
        self.pending: Diverged | None = None  # found before the update, handed over after it

    def reset(self, step: int) -> None:
        """Compute the next due steps from ``step`` (at the start or after a resume)."""
        self.next_before = min((m.next_due(step, self.max_steps) for m in self.before), default=NEVER)
        self.next_after = min((m.next_due(step, self.max_steps) for m in self.after), default=NEVER)

    def _run(self, method: str, due: list[Measurement], ctx: StepContext) -> Diverged | None:
        """Call ``method`` of each of ``due`` this process takes; the first :class:`Diverged` stops and is returned."""
        with self.probes():
            for m in due:
                if m not in self.calls:
                    continue
                t0 = time.time()
                try:
                    getattr(m, method)(ctx)
                except Diverged as exc:
                    return exc
                finally:
                    if m.timed:
                        self.probe_time[m.name] = self.probe_time.get(m.name, 0.0) + time.time() - t0
        return None

    def start(self, ctx: StepContext) -> Diverged | None:
        """The ``at_start`` measurements, before the first step of a fresh run.

        Returns:
            the :class:`Diverged` a measurement raised (e.g. non-finite values at step 0), else None.
        """
        return self._run("start", [m for m in self.all if m.at_start], ctx)

    def before_update(self, ctx: StepContext) -> None:
        """The ``before`` measurements due at step ``ctx.step + 1`` (call when ``ctx.step + 1 >= next_before``).

        A :class:`Diverged` one of them raises is returned by the step's :meth:`after_update`.
        """
        step = self.due_at = ctx.step + 1
        self.pending = self._run("before_update", [m for m in self.before if m.due(step, self.max_steps)], ctx)
        self.next_before = min((m.next_due(step, self.max_steps) for m in self.before), default=NEVER)

    def after_update(self, ctx: StepContext) -> Diverged | None:
        """Every step: the observers; at a due step the ``after`` measurements due at ``ctx.step``.

        Returns:
            the :class:`Diverged` a measurement raised (the later ones of the step are skipped), else None.
        """
        for m in self.observers:
            m.observe(ctx)
        step = ctx.step
        if self.pending is not None:
            diverged, self.pending = self.pending, None
            return diverged
        if step < self.next_after:
            return None
        self.due_at = step
        if self.sync is not None:
            self.sync()
        diverged = self._run("after_update", [m for m in self.after if m.due(step, self.max_steps)], ctx)
        self.next_after = min((m.next_due(step, self.max_steps) for m in self.after), default=NEVER)
        return diverged

    def finish(self, ctx: StepContext) -> None:
        """Every measurement's :meth:`Measurement.finish` (those this process takes)."""
        for m in self.calls:
            m.finish(ctx)


def build_measurements(cfg, monitor, logs: dict[str, RecordLog], device: torch.device) -> list[Measurement]:
    """The measurements a config asks for, in call order.

    Before the update: gradient ICS (``monitor.grad_ics``), landscape probe (``monitor.landscape``).
    After it: train loss (``trainer.log_every``), test evaluation (``trainer.eval_every``),
    covariate-shift monitor (``trainer.hist_every``). Checkpoints (``trainer.ckpt_every``) are
    the loop's.

    Args:
        cfg: the run config.
        monitor: the run's :class:`bnexp.train.monitor.ShiftMonitor`.
        logs: ``{"metrics", "shift", "ics"}`` record logs.
        device: where the training tensors live.
    """
    tcfg, mcfg = cfg.trainer, cfg.monitor
    train_loss = TrainLoss(tcfg.log_every, tcfg.batch_size, device)
    out: list[Measurement] = []
    if mcfg.grad_ics:
        out.append(GradientICS(mcfg.grad_ics_every, logs["ics"]))
    if mcfg.landscape:
        # the filter-normalized probe takes the relative steps too: alpha = the fraction of its
        # own norm every filter moves (no key of its own, so configs stay as they are)
        out.append(Landscape(mcfg.landscape_every, list(mcfg.landscape_step_sizes), logs["ics"],
                             list(mcfg.landscape_rel_step_sizes), list(mcfg.landscape_rel_step_sizes)))
    out += [train_loss,
            TestEvaluation(tcfg.eval_every, train_loss, logs["metrics"]),
            ShiftRecord(tcfg.hist_every, monitor, logs["shift"])]
    return out
