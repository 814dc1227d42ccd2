"""The measurement schedule of the step loop (bnexp.measurements): who is called at which step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bnexp.measurements import Checkpoint, Diverged, Measurement, Schedule, TrainLoss


class _Recorder(Measurement):
    def __init__(self, name, every, phase="after", at_end=False, at_start=False, timed=False):
        super().__init__(every)
        self.name, self.phase, self.at_end, self.at_start, self.timed = name, phase, at_end, at_start, timed
        self.calls: list[int] = []

    def start(self, tr):
        self.calls.append(0)

    def before_update(self, tr, x, y):
        self.calls.append(tr.step + 1)

    def after_update(self, tr):
        self.calls.append(tr.step)


def _drive(measurements, max_steps):
    """The step loop's calling pattern, without a model: returns the trainer stand-in."""
    tr = SimpleNamespace(step=0, probe_time={m.name: 0.0 for m in measurements})
    sched = Schedule(measurements, max_steps)
    sched.run_start(tr)
    sched.reset(0)
    while tr.step < max_steps:
        if tr.step + 1 >= sched.next_before:
            sched.run_before(tr, None, None)
        tr.step += 1
        if tr.step >= sched.next_after:
            sched.run_after(tr)
    return tr


def test_cadences_by_hand():
    a = _Recorder("a", 4, at_end=True, at_start=True, timed=True)
    b = _Recorder("b", 5, phase="before")
    c = _Recorder("c", 0, at_end=True)  # only at the end
    ck = Checkpoint(5)
    ck_calls = []
    ck.after_update = lambda tr: ck_calls.append(tr.step)
    tr = _drive([b, a, c, ck], 10)
    assert a.calls == [0, 4, 8, 10]
    assert b.calls == [5, 10]
    assert c.calls == [10]
    assert ck_calls == [5]  # not at the last step: the trainer writes the final checkpoint itself
    assert tr.probe_time["a"] >= 0.0


def test_resumed_schedule_continues_from_the_step():
    a = _Recorder("a", 3)
    tr = SimpleNamespace(step=7, probe_time={})
    sched = Schedule([a], 12)
    sched.reset(7)
    assert sched.next_after == 9 and sched.next_before == float("inf")
    while tr.step < 12:
        tr.step += 1
        if tr.step >= sched.next_after:
            sched.run_after(tr)
    assert a.calls == [9, 12]


def test_train_loss_window_sums_and_divergence():
    writer = SimpleNamespace(scalars=[], add_scalar=lambda tag, v, s: writer.scalars.append((tag, v, s)))
    tr = SimpleNamespace(step=2, writer=writer, progress=SimpleNamespace(update=lambda *a, **k: None),
                         cfg=SimpleNamespace(lr=0.1))
    tl = TrainLoss(2, batch_size=3, device=torch.device("cpu"))
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]])
    # step 1: labels 0,1,1 -> 2 correct; step 2: labels 0,0,0 -> 2 correct
    tl.window += [(torch.tensor(0.5), logits, torch.tensor([0, 1, 1])),
                  (torch.tensor(1.5), logits, torch.tensor([0, 0, 0]))]
    tl.after_update(tr)
    assert tl.window == []
    assert writer.scalars == [("Train/loss", 1.0, 2), ("Train/accuracy", 4 / 6, 2)]
    assert tl.take() == (1.0, 4 / 6)
    assert tl.take() == (None, None)
    tl.window.append((torch.tensor(float("nan")), logits, torch.tensor([0, 0, 0])))
    with pytest.raises(Diverged) as exc:
        tl.after_update(tr)
    assert exc.value.step == 2
