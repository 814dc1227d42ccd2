"""How the step loop takes a measurement: what a measurement is, what it sees, and when it is taken.

A measurement (:class:`Measurement`; the run's own are in :mod:`bnexp.train.measurements`) has

* ``every`` -- its cadence in steps (0: never), ``at_end`` -- also due at the last step
  (:meth:`~Measurement.due`); whether it is taken before or after the update, and at step 0 of a
  fresh run, is where the step loop names it;
* :meth:`~Measurement.before_update` / :meth:`~Measurement.after_update` -- the work at a
  due step; :meth:`~Measurement.observe` -- a cheap look at every step (the train loss);
* :meth:`~Measurement.state_dict` / :meth:`~Measurement.load_state_dict` -- whatever it
  carries between steps, saved in checkpoints so that resume is exact;
* :meth:`~Measurement.finish` -- after the last step.

What a measurement sees is a :class:`StepContext` -- the step, the model, the optimizer,
the current learning rate, the mini-batch, this step's loss and logits, the TensorBoard
writer, the progress bar and the few run facts it needs -- never the trainer itself.

The step loop (:meth:`bnexp.train.trainer.Trainer.run`) names each measurement where it takes
it, with its cadence (``if s % m.evaluation.every == 0 or last: take(m.evaluation)``), and
hands it to a :class:`Taking` of the run's :class:`Schedule`, which does what every
measurement needs around its work: rank 0 only (unless ``all_replicas``), the replicas' BN
average and the measuring context at the first due one of a phase, its seconds, and a
:class:`~bnexp.errors.Diverged` that skips the rest of the phase and is handed to the loop,
which stops the run with status ``diverged`` (with N data-parallel replicas, all of them at
the same step).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn

from bnexp.errors import Diverged
from bnexp.train.distributed import Replicas


@dataclass(eq=False)
class StepContext:
    """What a measurement sees: filled by the step loop, read by the measurements.

    Run facts (set once): ``model``, ``optimizer``, ``test_x`` (T, C, H, W) and ``test_y`` (T,),
    ``max_steps``, ``run_dir``, ``title`` (of the figures: ``bn=... act=... lr=... seed=...``),
    ``amp_dtype`` (``trainer.precision``'s autocast dtype, None for fp32), ``replicas``,
    ``t_start`` (the run's wall-clock start, seconds since the epoch), ``writer`` (TensorBoard
    ``SummaryWriter``, None on replicas other than rank 0), ``progress`` (:class:`bnexp.train.progress.Progress`),
    ``defer`` (runs a job after the earlier ones, on the records thread or at once:
    :meth:`bnexp.train.background.Background.submit`; the job must not read the context, which moves on).

    Per step (the loop updates these):

    * ``step`` -- updates done so far (a ``before`` measurement is taken for update ``step + 1``);
    * ``epoch`` -- passes over the training set begun by the mini-batch sampler;
    * ``lr`` -- the learning rate of the next update (:func:`bnexp.train.lr_schedule.learning_rate`, read
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
    """Base class: a measurement taken every ``every`` steps, before or after the update (where the step loop,
    :meth:`bnexp.train.trainer.Trainer.measure_after_update` and its siblings, names it).

    Args:
        every: cadence in steps; 0 means never.

    Class attributes:
        name: key of the measurement (in checkpoints; in ``summary.json`` ``probe_time_s``
            when ``timed``).
        phase: ``"after"`` (default) -- taken after the update of step s with s the new step count;
            ``"before"`` -- before the update that makes step s, with its mini-batch (the hook the step loop
            calls it by; tests/test_step_loop.py checks the loop's lines against it).
        at_end: also due at the last step (``trainer.max_steps``).
        timed: its seconds are reported separately from the training time.
        all_replicas: taken on every data-parallel replica (it has a collective part);
            otherwise on rank 0 only, with the full model and the whole global mini-batch.
    """

    name = "measurement"
    phase = "after"
    at_end = False
    timed = False
    all_replicas = False

    def __init__(self, every: int):
        self.every = int(every)

    def due(self, step: int, max_steps: int) -> bool:
        """Whether it is due at ``step`` (for ``before`` measurements: the step the update will make)."""
        return (self.every > 0 and step % self.every == 0) or (self.at_end and step == max_steps)

    def start(self, ctx: StepContext) -> None:
        """Taken once before the first step of a fresh run (where the step loop names it:
        :meth:`bnexp.train.trainer.Trainer.measure_start`)."""

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


class Schedule:
    """The measurements of a run, and how the step loop takes each at a step where it is due.

    The loop (:meth:`bnexp.train.trainer.Trainer.run`) names each measurement where it runs, with its
    cadence (``if m.evaluation.due(s, self.max_steps): ...``, :meth:`Measurement.due`), and hands it to a
    :class:`Taking` of this schedule, which does what every measurement needs around its work: rank 0
    alone calls it unless it is ``all_replicas``; the first time anything is due in a phase, the
    replicas' ``sync`` (after the update) and the ``probes`` context; its seconds when ``timed``; and a :class:`Diverged` it raises
    skips the later measurements of that phase and is handed back.

    Every replica takes the same steps as due -- where the loop may run a collective (averaging
    per-replica BN statistics) -- whether or not it calls the measurement itself.

    Args:
        measurements: in the order they are called at a step where several are due.
        is_main: this process is rank 0 (or the only one).
        probe_time: seconds per ``timed`` measurement name, added to (the trainer's, checkpointed).
        probes: a context-manager factory entered around the measurements of a phase where any is due
            (rank 0's measurements with synchronized BN layers run them locally; a stacked run swaps in
            its own RNG state); None: nothing.
        sync: called on every replica before the first ``after`` measurement of a due step (the trainer
            averages per-replica BN statistics there, so the measurements see their average).

    Attributes:
        due_at: the last step at which a ``before`` or ``after`` measurement was due (-1: none yet):
            the same steps on every replica, where the replicas may read what they agreed on.
        pending: a :class:`Diverged` found before the update, handed over after it.
    """

    def __init__(self, measurements: Iterable[Measurement], is_main: bool = True,
                 probe_time: dict[str, float] | None = None, probes: Callable[[], Any] | None = None,
                 sync: Callable[[], None] | None = None):
        self.calls = [m for m in measurements if is_main or m.all_replicas]
        self.probe_time = probe_time if probe_time is not None else {}
        self.probes = probes or contextlib.nullcontext
        self.sync = sync
        self.due_at = -1  # the last step at which a measurement was due (on every replica alike)
        self.pending: Diverged | None = None  # found before the update, handed over after it
        self._takings: dict[str, Taking] = {}

    def taking(self, method: str, ctx: StepContext, step: int | None = None) -> "Taking":
        """A :class:`Taking` of one phase: ``method`` is ``"start"`` (step 0 of a fresh run, ``step``
        None), ``"before_update"`` (update ``step``'s mini-batch) or ``"after_update"`` (``step``
        updates done). One object per method, used again at every step (the loop asks twice a step)."""
        taking = self._takings.get(method)
        if taking is None:
            taking = self._takings[method] = Taking(self, method)
        taking.begin(ctx, step)
        return taking

    def pop_pending(self) -> Diverged | None:
        """The :class:`Diverged` found before this step's update (then forgotten), else None."""
        diverged, self.pending = self.pending, None
        return diverged


class Taking:
    """The measurements due in one phase of one step, taken one call each: ``take(m)``.

    A context manager (:meth:`Schedule.taking`); nothing happens until the first call, so a phase in
    which nothing is due costs nothing. At the first call: the schedule's ``due_at`` becomes the step
    (before and after the update), its ``sync`` runs (after the update: every replica averages its BN
    statistics), and its ``probes`` context is entered, until the end of the phase. Each call then runs
    ``m``'s ``method`` on this process (rank 0, or every replica for an ``all_replicas`` one), timing
    it when ``timed``. After a :class:`Diverged` the later calls of the phase do nothing; it is
    :attr:`diverged`, and a ``before_update`` phase also leaves it as the schedule's ``pending`` (the
    step's update still runs; the loop ends the run after it).

    Attributes:
        diverged: the :class:`Diverged` a measurement of this phase raised, else None.
    """

    def __init__(self, schedule: Schedule, method: str):
        self.schedule, self.method = schedule, method
        self.ctx: StepContext | None = None
        self.step: int | None = None
        self.diverged: Diverged | None = None
        self._open: contextlib.ExitStack | None = None

    def begin(self, ctx: StepContext, step: int | None) -> None:
        """Start the phase of ``step`` (None: step 0 of a fresh run, before any update) with nothing taken."""
        self.ctx, self.step, self.diverged, self._open = ctx, step, None, None

    def __enter__(self) -> "Taking":
        return self

    def __call__(self, m: Measurement) -> None:
        """Take ``m`` now (the caller has found it due)."""
        sched = self.schedule
        if self._open is None:
            if self.step is not None:
                sched.due_at = self.step
            if self.method == "after_update" and sched.sync is not None:
                sched.sync()
            self._open = contextlib.ExitStack()
            self._open.enter_context(sched.probes())
        if self.diverged is not None or m not in sched.calls:
            return
        t0 = time.time()
        try:
            getattr(m, self.method)(self.ctx)
        except Diverged as exc:
            self.diverged = exc
        finally:
            if m.timed:
                sched.probe_time[m.name] = sched.probe_time.get(m.name, 0.0) + time.time() - t0

    def __exit__(self, *exc) -> bool:
        if self._open is not None:
            self._open.close()
            self._open = None
        if self.method == "before_update":
            self.schedule.pending = self.diverged
        return False
