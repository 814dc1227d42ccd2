"""The trainer's step loop names each measurement where it takes it (``Trainer.measure_start``,
``measure_before_update``, ``measure_after_update``): which one it takes at which step and in which order,
by hand; that this is what each measurement's own cadence says; and how a divergence ends a step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bnexp.config.schema import compose_config
from bnexp.errors import Diverged

from conftest import SHORT_RUN

# cadences that do not divide each other, and a last step that is due for none of them
CADENCES = ["trainer.max_steps=10", "trainer.log_every=3", "trainer.eval_every=4", "trainer.hist_every=5",
            "monitor.grad_ics=true", "monitor.grad_ics_every=2", "monitor.landscape=true",
            "monitor.landscape_every=3"]


@pytest.fixture
def trainer(tmp_path):
    """A trainer of the MLP on 200 random MNIST-shaped images (no update is made; nothing is measured)."""
    import torch

    from bnexp.nets.datasets import TensorData
    from bnexp.train.trainer import Trainer

    g = torch.Generator().manual_seed(0)
    data = TensorData(torch.rand(200, 1, 28, 28, generator=g), torch.randint(0, 10, (200,), generator=g),
                      torch.rand(100, 1, 28, 28, generator=g), torch.randint(0, 10, (100,), generator=g), 10, "mnist")
    return Trainer(compose_config([*SHORT_RUN, *CADENCES]), tmp_path / "run", data=data)


def _record_calls(trainer, monkeypatch, raise_at: dict[tuple[str, int], str] | None = None) -> list:
    """Replace each measurement's work by a record (update s, phase, name); ``raise_at[(name, s)]``: raise
    :class:`Diverged` there instead."""
    taken: list[tuple[int, str, str]] = []

    def work(m, method):
        def call(ctx):
            s = trainer.step + (method == "before_update")  # the update the call belongs to
            taken.append((s, method, m.name))
            if (m.name, s) in (raise_at or {}):
                raise Diverged(s, raise_at[(m.name, s)])
        return call

    for m in trainer.measurements:
        for method in ("start", "before_update", "after_update"):
            monkeypatch.setattr(m, method, work(m, method))
        monkeypatch.setattr(m, "observe", lambda ctx: None)
    return taken


def _drive(trainer) -> list:
    """The step loop's calls around updates that are not made; returns what each after-update phase returned."""
    ctx = SimpleNamespace()
    ends = [trainer.measure_start(ctx)]
    while trainer.step < trainer.max_steps:
        trainer.measure_before_update(ctx)
        trainer.step += 1
        ends.append(trainer.measure_after_update(ctx))
    return ends


def test_each_measurement_at_its_cadence_in_the_order_of_a_step(trainer, monkeypatch):
    taken = _record_calls(trainer, monkeypatch)
    assert _drive(trainer) == [None] * 11
    B, A = "before_update", "after_update"
    assert taken == [
        (0, "start", "eval"), (0, "start", "monitor"),
        (2, B, "grad_ics"),
        (3, B, "landscape"), (3, A, "train_loss"),
        (4, B, "grad_ics"), (4, A, "eval"),
        (5, A, "monitor"),
        (6, B, "grad_ics"), (6, B, "landscape"), (6, A, "train_loss"),
        (8, B, "grad_ics"), (8, A, "eval"),
        (9, B, "landscape"), (9, A, "train_loss"),
        (10, B, "grad_ics"), (10, A, "train_loss"), (10, A, "eval"), (10, A, "monitor"),  # the last step
    ]
    # the loop's lines and each measurement's own cadence (Measurement.due, which the schedule's
    # list form and the GPU tier's sync budget read) say the same steps
    by_due = [(s, "before_update" if m.phase == "before" else "after_update", m.name)
              for s in range(1, 11) for m in trainer.measurements if m.due(s, 10)]
    assert sorted(t for t in taken if t[1] != "start") == sorted(by_due)
    assert trainer.schedule.due_at == 10


def test_a_divergence_before_the_update_ends_the_step_after_it(trainer, monkeypatch):
    taken = _record_calls(trainer, monkeypatch, raise_at={("grad_ics", 6): "gradient"})
    ends = _drive(trainer)
    found = [e for e in ends if e is not None]
    assert ends[6] is found[0] and found[0].step == 6
    # landscape, due on the same mini-batch, and the after-update measurements of step 6 are skipped
    assert [t for t in taken if t[0] == 6] == [(6, "before_update", "grad_ics")]


def test_a_divergence_after_the_update_skips_the_rest_of_that_step(trainer, monkeypatch):
    taken = _record_calls(trainer, monkeypatch, raise_at={("train_loss", 10): "training loss"})
    ends = _drive(trainer)
    assert ends[10].step == 10 and ends[:10] == [None] * 10
    assert [t for t in taken if t[0] == 10] == [(10, "before_update", "grad_ics"), (10, "after_update", "train_loss")]
