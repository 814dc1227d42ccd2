"""Host reads of device values -- each one a host synchronisation on a GPU -- counted on the CPU, where the
same calls happen: a finiteness check of all parameters or of all the monitor's layers reads once, the train
loss's log once, and CUDA replicas read what they agreed on only where :attr:`StepAgreement.read_now` says
(bnexp.train.distributed), CPU replicas every step as before."""

from __future__ import annotations

import contextlib

import pytest
import torch

from bnexp.config.schema import compose_config
from bnexp.errors import Diverged
from bnexp.train import distributed
from bnexp.train.measurements import StepContext, TrainLoss, _params_finite

from conftest import SHORT_RUN


@contextlib.contextmanager
def host_reads(monkeypatch):
    """Count the calls that copy a tensor's value to the host (bool, float, int, item, tolist)."""
    calls: list[str] = []
    for name in ("__bool__", "__float__", "__int__", "__index__", "item", "tolist"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, _name=name, **k):
            calls.append(_name)
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    yield calls
    monkeypatch.undo()


@pytest.fixture
def trainer(tmp_path, data_root, monkeypatch):
    from bnexp.train.trainer import Trainer

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    return Trainer(compose_config([*SHORT_RUN, "seed=3"]), tmp_path / "run")


def test_a_finiteness_check_reads_the_host_once(trainer, monkeypatch):
    params = list(trainer.model.parameters())
    assert len(params) > 4 and len(trainer.monitor.capture_all()[0]) > 1
    with host_reads(monkeypatch) as calls:
        assert _params_finite(trainer.model)
    assert len(calls) == 1, calls
    with host_reads(monkeypatch) as calls:
        trainer.monitor.capture_checked(0)
    assert len(calls) == 1, calls
    with torch.no_grad():
        params[-1].fill_(float("nan"))  # the output layer's bias: the parameters diverged, no monitored layer
    assert not _params_finite(trainer.model)
    trainer.monitor.capture_checked(0)
    with torch.no_grad():
        params[0][0, 0] = float("inf")  # the first layer's weight: every monitored layer from there on
    with pytest.raises(Diverged, match=r"non-finite pre-activations of \S+ \(input to its nonlinearity\) at step 7"):
        trainer.monitor.capture_checked(7)


def test_the_train_loss_log_reads_the_host_once(monkeypatch):
    m = TrainLoss(every=3, batch_size=4, device=torch.device("cpu"))
    ctx = StepContext(model=None, optimizer=None, test_x=None, test_y=None, max_steps=3, run_dir=None)
    ctx.progress = type("P", (), {"update": lambda *a, **k: None})()
    torch.manual_seed(0)
    losses, correct = [], 0
    for step in (1, 2, 3):
        ctx.step, ctx.loss = step, torch.rand(()) * 3
        ctx.logits, ctx.labels = torch.randn(4, 10), torch.randint(0, 10, (4,))
        losses.append(ctx.loss)
        correct += int((ctx.logits.argmax(1) == ctx.labels).sum())
        m.observe(ctx)
    with host_reads(monkeypatch) as calls:
        m.after_update(ctx)
    assert len(calls) == 1, calls
    assert m.take() == (float(torch.stack(losses).sum()) / 3, correct / 12)


@pytest.mark.parametrize("backend, read", [("nccl", False), ("nccl", True), ("gloo", False)])
def test_replicas_read_their_agreement_only_where_told(backend, read, monkeypatch):
    """The all-reduce is replaced by the identity (one process stands for N = 2): what is checked is which
    steps read the flags back. CUDA replicas read them only where ``read_now`` says; gloo's every step."""
    monkeypatch.setattr(distributed.dist, "all_reduce", lambda t, op=None: None)
    buffer = torch.full((3,), 4.0)
    agree = distributed.StepAgreement(distributed.Replicas(rank=0, world_size=2, backend=backend), [buffer])
    agree.read_now = lambda: read
    with host_reads(monkeypatch) as calls:
        flags = agree(True, False)
    reads = backend == "gloo" or read
    assert len(calls) == (1 if reads else 0), calls
    assert flags == ((True, False) if reads else (False, False))
    assert torch.equal(buffer, torch.full((3,), 2.0))  # averaged on the device either way (sum 4 over N = 2)


# the train loss, evaluations, monitor records and checkpoints due in 40 steps, on the loop's own thread (the
# GPU tier adds the ICS probes, which the CPU takes seconds for)
DUE_RUN = [*SHORT_RUN, "seed=3", "trainer.max_steps=40", "trainer.log_every=5", "trainer.eval_every=20",
           "trainer.hist_every=15", "trainer.ckpt_every=10", "trainer.async_records=false"]


@pytest.mark.slow  # 40 steps with evaluations and records
def test_the_step_loop_reads_the_host_only_where_something_is_due(tmp_path, data_root, monkeypatch):
    """The CPU stand-in of the GPU tier's sync count (tests/test_gpu.py): a step where nothing is due reads
    no device value, a step where only the train loss is logged reads one."""
    from bnexp.train.trainer import Trainer

    from conftest import StepSyncs, due_kinds

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    trainer = Trainer(compose_config(DUE_RUN), tmp_path / "run")
    with host_reads(monkeypatch) as calls:
        syncs = StepSyncs(calls)
        syncs.wrap(monkeypatch, trainer, "_update")
        assert trainer.run()["status"] == "finished"
    per_step = syncs.per_step()
    assert len(per_step) == 39
    kinds = {s: due_kinds(trainer, s) for s in per_step}
    assert set().union(*kinds.values()) == {"train_loss", "eval", "monitor", "checkpoint"}
    assert {s: n for s, n in per_step.items() if not kinds[s] and n} == {}
    assert {s: n for s, n in per_step.items() if kinds[s] == {"train_loss"} and n != 1} == {}
