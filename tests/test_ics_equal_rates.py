"""Gradient ICS matched at equal learning rates (docs/ics/PLAN.md, amendment of 2026-11-29;
bnexp.report.ics_stats.matched_at_equal_rates): two identical nets whose probed quantity depends only on the
learning rate, probed along one decaying schedule, one net merely reaching a given loss earlier, must not come out
"BN reduces gradient ICS"; the committed rate-blind matching does (so this test fails on a matching that ignores
the rate); rates that never agree are marked schedule-confounded instead of matched."""

from __future__ import annotations

import math

import pytest

from bnexp.report.claims import Claim, evaluate
from bnexp.report.ics_stats import Probe, matched_at_equal_rates, matched_progress, rate_at
from bnexp.report.ics_verdicts import confounded_text

CLAIM = Claim("BN reduces gradient ICS", "BN / no-BN, matched", "<", 1.0)
STEPS = range(1000, 6001, 1000)
LR, DECAY = 0.025, 1 / 32  # the CIFAR-10 preset's rate, decayed 32x over the run


def _rate(step, schedule="exponential"):
    return rate_at(LR, schedule, DECAY, 6000, step)


def _value(rate):
    """The probed quantity of both nets: a function of the rate alone, rising as the rate decays (as
    l2_rel_per_move does on CIFAR-10)."""
    return 1.0 / math.sqrt(rate)


def _probes(speed, schedule="exponential"):
    """A net whose loss falls at ``speed`` (per 1,000 steps) to a floor of 0.3, probed every 1,000 steps."""
    return [Probe(s, _rate(s, schedule), 0.3 + 2.0 * math.exp(-speed * s / 1000), _value(_rate(s, schedule)))
            for s in STEPS]


def test_rate_at_is_the_trainers_schedule():
    import torch

    from bnexp.train.lr_schedule import lr_lambda

    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda("exponential", DECAY, 6000))
    for step in range(1, 3001):
        opt.step()
        sched.step()
        if step % 1000 == 0:
            assert opt.param_groups[0]["lr"] == pytest.approx(_rate(step))
    assert _rate(6000) == pytest.approx(LR / 32) and _rate(3000, "constant") == LR


def _per_seed(match):
    # seed s: the "BN" net learns faster (2 + s/4 per 1,000 steps), the "no BN" net slowly (0.3)
    return {s: match(_probes(2.0 + s / 4), _probes(0.3)) for s in range(5)}


def test_identical_nets_on_one_decaying_schedule_are_not_called_different():
    eq = _per_seed(matched_at_equal_rates)
    assert all(not m.confounded and m.step_a == m.step_b for m in eq.values())
    assert all(m.ratio == pytest.approx(1.0) for m in eq.values())
    assert evaluate(CLAIM, {s: m.ratio for s, m in eq.items()}, [], scale="log")["verdict"] != "supported"
    # the rate-blind matching (the committed one) scores the fast net early, at a high rate: "supported"
    blind = _per_seed(lambda a, b: matched_progress([(p.step, p.loss, p.value) for p in a],
                                                    [(p.step, p.loss, p.value) for p in b]))
    assert all(m.step_a < m.step_b for m in blind.values())
    assert evaluate(CLAIM, {s: m.ratio for s, m in blind.items()}, [], scale="log")["verdict"] == "supported"


def test_at_a_constant_rate_the_equal_rate_matching_is_the_committed_one():
    a, b = _probes(2.0, "constant"), _probes(0.3, "constant")
    eq, blind = matched_at_equal_rates(a, b), matched_progress([(p.step, p.loss, p.value) for p in a],
                                                               [(p.step, p.loss, p.value) for p in b])
    assert not eq.confounded and (eq.step_a, eq.step_b, eq.level) == (blind.step_a, blind.step_b,
                                                                        pytest.approx(blind.level))


def test_rates_that_never_agree_are_schedule_confounded():
    a = [Probe(p.step, 0.1, p.loss, p.value) for p in _probes(2.0, "constant")]
    b = [Probe(p.step, 0.05, p.loss, p.value) for p in _probes(0.3, "constant")]
    m = matched_at_equal_rates(a, b)
    assert m.confounded and (m.rate_a, m.rate_b) == (0.1, 0.05)
    text = confounded_text({0: {"step_a": m.step_a, "step_b": m.step_b, "rate_a": 0.1, "rate_b": 0.05}},
                           ("BN", "no BN"))
    assert text.startswith("schedule-confounded") and "at 0.1" in text and "at 0.05" in text
    assert confounded_text({0: {"step_a": 1, "step_b": 2, "rate_a": 0.1, "rate_b": 0.1005}}, ("BN", "no BN")) is None
    assert matched_at_equal_rates([], b) is None
