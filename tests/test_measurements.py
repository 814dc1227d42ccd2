"""The step loop's measurements (bnexp.train.measurements): who is called at which step, driven through the
trainer's own measuring methods (Trainer.measure_start / measure_before_update / measure_after_update /
measure_finish) on a stand-in trainer without a model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bnexp.train.distributed import Replicas
from bnexp.train.measurements import Diverged, Measurement, Schedule, TrainLoss
from bnexp.train.trainer import Trainer


class _Recorder(Measurement):
    def __init__(self, name, every, at_end=False, timed=False, all_replicas=False, order=None):
        super().__init__(every)
        self.name, self.at_end, self.timed, self.all_replicas = name, at_end, timed, all_replicas
        self.calls: list[int] = []
        self.seen: list[int] = []
        self.finished = 0
        self.order = order if order is not None else []

    def _took(self, step, what=""):
        self.calls.append(step)
        self.order.append((what + self.name, step))

    def start(self, ctx):
        self._took(0)

    def before_update(self, ctx):
        self._took(ctx.step + 1)

    def observe(self, ctx):
        self.seen.append(ctx.step)

    def after_update(self, ctx):
        self._took(ctx.step)

    def finish(self, ctx):
        self.finished += 1
        self.order.append(("finish " + self.name, ctx.step))


def _trainer(max_steps, is_main=True, sync=None, step=0, train_loss=None, evaluation=None, shift=None,
             grad_ics=None, landscape=None):
    """A stand-in trainer without a model, holding what the production measuring methods
    (:meth:`Trainer.measure_start`, ``measure_before_update``, ``measure_after_update``, ``measure_finish``)
    read: its five measurements (a missing one a recorder that is never due), step, max_steps, rank and the
    schedule the trainer builds (with ``sync`` as the replicas' BN average)."""
    m = SimpleNamespace(train_loss=train_loss or _Recorder("loss", 0), evaluation=evaluation or _Recorder("eval", 0),
                        shift=shift or _Recorder("shift", 0), grad_ics=grad_ics, landscape=landscape)
    probe_time: dict[str, float] = {}
    schedule = Schedule([x for x in vars(m).values() if x is not None], is_main, probe_time, sync=sync)
    return SimpleNamespace(measurements=m, max_steps=max_steps, is_main=is_main, step=step, schedule=schedule,
                           probe_time=probe_time)


def _step(t, ctx):
    """One step of Trainer.run's loop around the update: the measurements before it, then after it."""
    Trainer.measure_before_update(t, ctx)
    t.step = ctx.step = t.step + 1
    return Trainer.measure_after_update(t, ctx)


def _drive(t):
    """Trainer.run's calling pattern from step 0 of a fresh run to the last step, then measure_finish."""
    ctx = SimpleNamespace(step=t.step)
    assert Trainer.measure_start(t, ctx) is None
    while t.step < t.max_steps:
        assert _step(t, ctx) is None
    Trainer.measure_finish(t, ctx)
    return ctx


def test_cadences_by_hand():
    order: list[tuple[str, int]] = []
    ev = _Recorder("eval", 4, at_end=True, timed=True, order=order)
    grad = _Recorder("grad_ics", 5, order=order)
    shift = _Recorder("shift", 0, at_end=True, order=order)  # only at the end (and at step 0)
    loss = _Recorder("loss", 3, order=order)
    t = _trainer(10, train_loss=loss, evaluation=ev, shift=shift, grad_ics=grad)
    _drive(t)
    assert ev.calls == [0, 4, 8, 10]
    assert grad.calls == [5, 10]  # before the update that makes step 5, 10
    assert shift.calls == [0, 10] and shift.finished == 1
    assert loss.calls == [3, 6, 9] and loss.seen == list(range(1, 11))  # observe: every step, right after its update
    assert order[:2] == [("eval", 0), ("shift", 0)]
    assert order[-4:] == [("grad_ics", 10), ("eval", 10), ("shift", 10), ("finish shift", 10)]
    assert set(t.probe_time) == {"eval"} and t.probe_time["eval"] >= 0.0  # only timed ones are timed


def test_other_replicas_take_only_collective_measurements_at_the_same_steps():
    """Rank > 0 calls only the all_replicas measurements, but its due steps (where the loop may run
    a collective: the BN-statistics average) are rank 0's, also when cadences do not divide."""
    syncs = {}
    for rank0 in (True, False):
        loss = _Recorder("loss", 5, all_replicas=True)
        ev = _Recorder("eval", 3, at_end=True)
        steps = []
        t = _trainer(10, is_main=rank0, sync=lambda steps=steps: steps.append(len(steps)), train_loss=loss,
                     evaluation=ev)
        _drive(t)
        syncs[rank0] = len(steps)
        assert loss.calls == [5, 10]
        assert ev.calls == ([0, 3, 6, 9, 10] if rank0 else [])
        assert t.schedule.due_at == 10
    assert syncs[True] == syncs[False] == 5  # steps 3, 5, 6, 9, 10


def test_resumed_run_continues_from_the_step():
    ev = _Recorder("eval", 3)
    t = _trainer(12, step=7, evaluation=ev)  # resumed at step 7: no step-0 measurements
    ctx = SimpleNamespace(step=7)
    while t.step < 12:
        assert _step(t, ctx) is None
    assert ev.calls == [9, 12] and t.schedule.due_at == 12


def test_divergence_is_returned_and_skips_the_rest_of_the_step():
    class Boom(_Recorder):
        def after_update(self, ctx):
            raise Diverged(ctx.step, "test")

    boom, later = Boom("loss", 2), _Recorder("eval", 2)
    t = _trainer(10, train_loss=boom, evaluation=later)
    ctx = SimpleNamespace(step=0)
    assert _step(t, ctx) is None
    exc = _step(t, ctx)
    assert isinstance(exc, Diverged) and exc.step == 2 and later.calls == []


def test_divergence_before_the_update_is_handed_over_after_it():
    """A Diverged found before update s (gradient ICS) comes back from that step's after-update call, and the
    after-update measurements of step s are skipped; the train loss still observes the update."""
    class Boom(_Recorder):
        def before_update(self, ctx):
            raise Diverged(ctx.step + 1, "test")

    loss, ev = _Recorder("loss", 1), _Recorder("eval", 1)
    t = _trainer(10, train_loss=loss, evaluation=ev, grad_ics=Boom("grad_ics", 2))
    ctx = SimpleNamespace(step=0)
    assert _step(t, ctx) is None and ev.calls == [1]
    exc = _step(t, ctx)
    assert isinstance(exc, Diverged) and exc.step == 2
    assert ev.calls == [1] and loss.calls == [1] and loss.seen == [1, 2] and t.schedule.pending is None


def test_train_loss_window_sums_and_divergence():
    writer = SimpleNamespace(scalars=[], add_scalar=lambda tag, v, s: writer.scalars.append((tag, v, s)))
    ctx = SimpleNamespace(step=1, writer=writer, progress=SimpleNamespace(update=lambda *a, **k: None),
                          replicas=Replicas())
    tl = TrainLoss(2, batch_size=3, device=torch.device("cpu"))
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    # step 1: labels 0,1,1 -> 2 correct; step 2: labels 0,0,0 -> 2 correct; the loss comes in the context
    for ctx.step, loss, labels in ((1, 0.5, [0, 1, 1]), (2, 1.5, [0, 0, 0])):
        ctx.loss, ctx.logits, ctx.labels = torch.tensor(loss), logits, torch.tensor(labels)
        tl.observe(ctx)
    tl.after_update(ctx)
    assert tl.window == []
    assert writer.scalars == [("Train/loss", 1.0, 2), ("Train/accuracy", 4 / 6, 2)]
    assert tl.take() == (1.0, 4 / 6)
    assert tl.take() == (None, None)
    ctx.loss = torch.tensor(float("nan"))
    tl.observe(ctx)
    with pytest.raises(Diverged) as exc:
        tl.after_update(ctx)
    assert exc.value.step == 2
