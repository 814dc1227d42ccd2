"""The learning-rate schedule (``optim.schedule``: constant, exponential or step decay) and the current rate."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch-free at import: the report reads a run's schedule with lr_lambda
    import torch


def lr_lambda(schedule: str, decay_rate: float, decay_steps: int):
    """Multiplier of the base learning rate at a step: constant, exponential or step decay."""
    if schedule == "exponential":
        return lambda step: decay_rate ** (step / decay_steps)
    if schedule == "step":
        return lambda step: decay_rate ** (step // decay_steps)
    return lambda step: 1.0


def learning_rate(optimizer: torch.optim.Optimizer) -> float:
    """The learning rate of the optimizer's next update: the one source of the current rate.

    The scheduler (:func:`lr_lambda`) writes it into the optimizer's parameter groups at each of
    its steps; all groups share it here. The step loop reads it once per step, after the
    scheduler's step, into the measurements' context.
    """
    return optimizer.param_groups[0]["lr"]
