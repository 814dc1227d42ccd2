"""The measurement schedule of the step loop (bnexp.train.measurements): who is called at which step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bnexp.train.distributed import Replicas
from bnexp.train.measurements import Diverged, Measurement, Schedule, TrainLoss


class _Recorder(Measurement):
    def __init__(self, name, every, phase="after", at_end=False, at_start=False, timed=False, all_replicas=False):
        super().__init__(every)
        self.name, self.phase, self.at_end, self.at_start, self.timed = name, phase, at_end, at_start, timed
        self.all_replicas = all_replicas
        self.calls: list[int] = []
        self.seen: list[int] = []

    def start(self, ctx):
        self.calls.append(0)

    def before_update(self, ctx):
        self.calls.append(ctx.step + 1)

    def observe(self, ctx):
        self.seen.append(ctx.step)

    def after_update(self, ctx):
        self.calls.append(ctx.step)


def _drive(measurements, max_steps, is_main=True, sync=None):
    """The step loop's calling pattern, without a model: returns the context stand-in and probe times."""
    ctx = SimpleNamespace(step=0)
    probe_time: dict[str, float] = {}
    sched = Schedule(measurements, max_steps, is_main, probe_time, sync=sync)
    assert sched.start(ctx) is None
    sched.reset(0)
    while ctx.step < max_steps:
        if ctx.step + 1 >= sched.next_before:
            sched.before_update(ctx)
        ctx.step += 1
        assert sched.after_update(ctx) is None
    return ctx, probe_time


def test_cadences_by_hand():
    a = _Recorder("a", 4, at_end=True, at_start=True, timed=True)
    b = _Recorder("b", 5, phase="before")
    c = _Recorder("c", 0, at_end=True)  # only at the end
    _, probe_time = _drive([b, a, c], 10)
    assert a.calls == [0, 4, 8, 10]
    assert b.calls == [5, 10]
    assert c.calls == [10]
    assert a.seen == list(range(1, 11))  # observe: every step, right after its update
    assert set(probe_time) == {"a"} and probe_time["a"] >= 0.0  # only timed ones are timed


def test_other_replicas_take_only_collective_measurements_at_the_same_steps():
    """Rank > 0 calls only the all_replicas measurements, but its due steps (where the loop may run
    a collective: the BN-statistics average) are rank 0's, also when cadences do not divide."""
    syncs = {}
    for rank0 in (True, False):
        loss = _Recorder("loss", 5, all_replicas=True)
        ev = _Recorder("eval", 3, at_end=True)
        steps = []
        _drive([loss, ev], 10, is_main=rank0, sync=lambda steps=steps: steps.append(len(steps)))
        syncs[rank0] = len(steps)
        assert loss.calls == [5, 10]
        assert ev.calls == ([3, 6, 9, 10] if rank0 else [])
    assert syncs[True] == syncs[False] == 5  # steps 3, 5, 6, 9, 10


def test_resumed_schedule_continues_from_the_step():
    a = _Recorder("a", 3)
    ctx = SimpleNamespace(step=7)
    sched = Schedule([a], 12)
    sched.reset(7)
    assert sched.next_after == 9 and sched.next_before == float("inf")
    while ctx.step < 12:
        ctx.step += 1
        sched.after_update(ctx)
    assert a.calls == [9, 12]


def test_divergence_is_returned_and_skips_the_rest_of_the_step():
    class Boom(_Recorder):
        def after_update(self, ctx):
            raise Diverged(ctx.step, "test")

    boom, later = Boom("boom", 2), _Recorder("later", 2)
    sched = Schedule([boom, later], 10)
    sched.reset(0)
    ctx = SimpleNamespace(step=1)
    assert sched.after_update(ctx) is None
    ctx.step = 2
    exc = sched.after_update(ctx)
    assert isinstance(exc, Diverged) and exc.step == 2 and later.calls == []


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
