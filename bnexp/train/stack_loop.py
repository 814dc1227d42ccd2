"""Many runs in one process: the step loop of a stack (``hydra/launcher=stacked``, docs/stacked.md).

:func:`train_stack` trains R runs that differ only in stackable keys (seed, rate, init std, dropout, weight
decay, noise scale: :mod:`bnexp.config.stacks`) as one batched model (:class:`bnexp.train.stacked_net.StackedNet`).
Every run is the run it would be alone: each has its own :class:`MemberTrainer` -- a
:class:`bnexp.train.trainer.Trainer` built from the run's config and seed, in the run's folder -- with its
own parameters, sampler (data order), torch/python/numpy RNG state (dropout masks, measurements), noise
generators, rate and schedule, BN running statistics, measurements, records, TensorBoard writer,
checkpoints and summary. Only the update is batched; the run's model views its slice of the stacked
tensors, so the run's measurements (test evaluation, monitor records, gradient ICS, landscape) run on the
run's own plain model, under the run's own RNG state.

A run that ends -- finished at ``trainer.max_steps``, ``diverged``, or failed writing a file -- leaves
the stack with its own summary, and the others go on in a stack rebuilt without it (a diverged run's
parameters are frozen where it stopped). SIGINT/SIGTERM or the cluster's preemption signal stop every
run at the end of a step with a checkpoint each (status ``interrupted``); re-running resumes each run from
its own checkpoint, also when the runs resume at different steps.

The launcher (:mod:`hydra_plugins.bnexp_stacked_launcher`) prepares each run's folder through bnexp's
ordinary per-run path (:func:`bnexp.cli.run_job`: refusals, skip-if-finished, lock), in which
:func:`member_train` takes the place of :func:`bnexp.train.trainer.train`.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import re
import threading
import time
import warnings
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig

from bnexp.errors import Interrupted, UserError
from bnexp.nets.datasets import host_to_device, load_data
from bnexp.runfolders import rundir
from bnexp.train.background import Background
from bnexp.train.measurements import Diverged
from bnexp.train.preemption import Preempted, PreemptionGuard
from bnexp.train.device import resolve_device
from bnexp.train.lr_schedule import learning_rate
from bnexp.train.progress import Progress
from bnexp.train.rng import rng_state, set_rng_state
from bnexp.runfolders.sweepsignals import wait_for_sweep_siblings
from bnexp.train.signal_guard import SignalGuard
from bnexp.train.stacked_net import StackedNet
from bnexp.train.trainer import Trainer, train

log = logging.getLogger("bnexp")

#: the index (in its stack) of the run whose work is being done, for the per-run train.log (None: all runs)
MEMBER: contextvars.ContextVar[int | None] = contextvars.ContextVar("bnexp_stack_member", default=None)


class MemberTrainer(Trainer):
    """One run of a stack: a :class:`~bnexp.train.trainer.Trainer` whose global RNG state is kept aside.

    torch's (and python's, numpy's) global generators are shared by the process; each run keeps its own
    state (:attr:`rng`) and :meth:`own_rng` swaps it in around whatever the run does that draws from them
    (dropout masks, measurements, checkpoints), so the run draws exactly what it would draw alone.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, data):
        super().__init__(cfg, run_dir, data=data)
        self.rng: dict | None = None
        self._rng_depth = 0

    def keep_rng(self) -> None:
        """Take the global RNG state now as this run's (after it was built, or resumed)."""
        self.rng = rng_state(self.device)

    @contextlib.contextmanager
    def own_rng(self, full: bool = True):
        """Run the body with this run's RNG state as the global one, then keep the state it leaves.

        Args:
            full: python, numpy and torch (and CUDA) generators; False: torch's (and CUDA's) only,
                the cheap swap of the per-step dropout masks.
        """
        if self._rng_depth:  # nested: already this run's
            yield
            return
        dev = self.device
        outer = rng_state(dev) if full else {"torch": torch.get_rng_state(),
                                              **({"cuda": torch.cuda.get_rng_state(dev)} if dev.type == "cuda" else {})}
        _set_rng(self.rng, dev, full)
        self._rng_depth += 1
        token = MEMBER.set(getattr(self, "index", None))
        try:
            yield
        finally:
            MEMBER.reset(token)
            self._rng_depth -= 1
            now = rng_state(dev) if full else {"torch": torch.get_rng_state(),
                                                **({"cuda": torch.cuda.get_rng_state(dev)} if dev.type == "cuda" else {})}
            self.rng.update(now)
            _set_rng(outer, dev, full)

    def _measuring(self):
        """:meth:`Trainer._measuring` under this run's RNG state: the measurements of a due step draw what
        they would draw alone."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.own_rng())
        stack.enter_context(super()._measuring())
        return stack

    def state_dict(self) -> dict:
        """:meth:`Trainer.state_dict` with this run's RNG state and its own copies of the tensors that view
        the stack (a view would save the whole stack's storage)."""
        with self.own_rng():
            state = super().state_dict()
        state["model"] = {k: v.clone() for k, v in state["model"].items()}
        for s in state["optimizer"].get("state", {}).values():
            if isinstance(s.get("momentum_buffer"), torch.Tensor):
                s["momentum_buffer"] = s["momentum_buffer"].clone()
        return state


def _set_rng(state: dict, device: torch.device, full: bool) -> None:
    if full:
        set_rng_state(state, device)
        return
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


@dataclasses.dataclass
class _Run:
    """A member's loop state: its trainer, context and summary so far."""

    trainer: MemberTrainer
    index: int
    ctx: object = None
    summary: dict | None = None


def train_stack(jobs: list[tuple[DictConfig, Path, bool]]) -> list[dict | BaseException]:
    """Train the runs of one stack together; the stacked counterpart of :func:`bnexp.train.trainer.train`.

    Args:
        jobs: (config, run folder, resume) of each run; the configs differ only in stackable keys
            (:func:`bnexp.config.stacks.stack_key`), their folders were prepared by :func:`bnexp.cli.run_job`.

    Returns:
        per job, what :func:`~bnexp.train.trainer.train` would have returned or raised: the summary
        (status ``finished`` or ``diverged``), or the exception -- :class:`Interrupted` (checkpoint and
        status ``interrupted`` saved), a :class:`~bnexp.errors.UserError` (status ``failed`` recorded), or
        another exception (internal).
    """
    results: list[dict | BaseException | None] = [None] * len(jobs)
    with SignalGuard() as signals, PreemptionGuard() as preemption:
        cfg0 = jobs[0][0]
        try:
            data = load_data(cfg0.data, resolve_device(cfg0.trainer.device))
        except BaseException as exc:  # noqa: BLE001 - every run gets the error it would have got alone
            return [exc] * len(jobs)
        runs: list[_Run] = []
        for i, (cfg, run_dir, resume) in enumerate(jobs):
            mb = None
            try:
                mb = MemberTrainer(cfg, run_dir, dataclasses.replace(data))
                mb.index = i
                if resume:
                    mb.try_resume()
                mb.keep_rng()
                runs.append(_Run(mb, i))
            except (OSError, UserError) as exc:
                results[i] = mb.record_failure(exc) if mb is not None else exc
            except Exception as exc:  # noqa: BLE001
                results[i] = exc
        _loop(runs, results, signals, preemption)
    return results  # type: ignore[return-value]


def _loop(runs: list[_Run], results: list, signals: SignalGuard, preemption: PreemptionGuard) -> None:
    """Begin every run, then step the stack until every run has ended (see the module docstring)."""
    records = Background(any(bool(r.trainer.cfg.trainer.async_records) for r in runs))
    with records:
        active: list[_Run] = []
        for run in runs:
            end = _guarded(run, results, lambda run=run: _begin(run, records, signals, preemption))
            if end is _FAILED:
                continue
            if end is None and run.trainer.step < run.trainer.max_steps:
                active.append(run)
            else:
                _leave(run, results, end, records)
        net = _stack(active)
        lr, wd = _rates(active)
        scheduled = any(r.trainer.scheduler is not None for r in active)
        while active:
            stop = _stop(signals, preemption)
            if stop is not None:
                _interrupt_all(active, results, stop, records, preemption)
                return
            xs, ys, failed = [], [], []
            for run in active:  # each run's mini-batch, and its measurements due before the update
                mb, ctx = run.trainer, run.ctx
                ctx.x, ctx.y, ctx.epoch = mb._next_batch()
                xs.append(ctx.x)
                ys.append(ctx.y)
                if _guarded(run, results, lambda mb=mb, ctx=ctx: mb.measure_before_update(ctx)) is _FAILED:
                    failed.append(run)
            if failed:  # a file of a run could not be written: that run has ended, the others make this step
                keep = [i for i, run in enumerate(active) if run not in failed]
                active, xs, ys = [active[i] for i in keep], [xs[i] for i in keep], [ys[i] for i in keep]
                net = _stack(active)
                lr, wd = _rates(active)
                if not active:
                    break
            if scheduled:
                lr, _ = _rates(active)
            loss, logits = net.step(torch.stack(xs), torch.stack(ys), lr, wd, active[0].trainer.amp_dtype)
            leaving = []
            for r, run in enumerate(active):
                mb, ctx = run.trainer, run.ctx
                if mb.scheduler is not None:
                    _scheduler_step(mb.scheduler)
                mb.step = ctx.step = mb.step + 1
                ctx.lr = learning_rate(mb.optimizer)
                ctx.loss, ctx.logits, ctx.labels = loss[r], logits[r], ys[r]
                end = _guarded(run, results, lambda run=run: _after_update(run))
                if end is _FAILED:
                    leaving.append(run)
                elif end is not None or mb.step >= mb.max_steps:
                    _leave(run, results, end, records)
                    leaving.append(run)
            if leaving:
                active = [run for run in active if run not in leaving]
                net = _stack(active)
                lr, wd = _rates(active)


_FAILED = object()


def _scheduler_step(scheduler) -> None:
    """The run's rate schedule one step on (its optimizer's rate: the next update's); torch's warning that
    the optimizer did not step first is beside the point -- the stack made the run's update."""
    if getattr(scheduler, "_step_count", 2) <= 1:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=re.escape("Detected call of `lr_scheduler.step()`"))
            scheduler.step()
    else:
        scheduler.step()


def _guarded(run: _Run, results: list, work: Callable[[], object]) -> object:
    """``work()`` for one run; a file it cannot write (or a user error) ends that run ``failed`` (its
    summary says so) and returns ``_FAILED``; the other runs go on."""
    token = MEMBER.set(run.index)
    try:
        return work()
    except (OSError, UserError) as exc:
        results[run.index] = run.trainer.record_failure(exc)
    except Exception as exc:  # noqa: BLE001 - an internal error of one run: recorded, the others go on
        results[run.index] = exc
    finally:
        MEMBER.reset(token)
    return _FAILED


def _begin(run: _Run, records: Background, signals: SignalGuard, preemption: PreemptionGuard):
    """:meth:`Trainer.run`'s beginning for one run: outputs opened, step-0 measurements of a fresh run."""
    mb = run.trainer
    run.summary = mb._begin()
    mb.records = records
    ctx = run.ctx = mb._context()
    ctx.progress, ctx.defer, mb._t_loop = Progress(False, mb.max_steps, mb.step), records.submit, time.time()
    if mb.step == 0 and not mb.history:
        return mb.measure_start(ctx)  # may find Diverged at step 0
    return None


def _after_update(run: _Run):
    """The measurements after a run's update (:meth:`Trainer.measure_after_update`) and its checkpoint."""
    mb = run.trainer
    end = mb.measure_after_update(run.ctx)
    if end is None and mb.step % mb.ckpt_every == 0 and mb.step < mb.max_steps:
        with mb.own_rng():
            mb._checkpoint_in_loop()
    return end


def _leave(run: _Run, results: list, end: Diverged | None, records: Background) -> None:
    """A run that finished or diverged: its final measurements and summary (:meth:`Trainer._finish`)."""
    mb = run.trainer

    def finish():
        records.drain()
        mb.train_time += time.time() - mb._t_loop
        if isinstance(end, Diverged):
            log.warning("training diverged: %s (lr=%g); stopping this run, the others of its stack go on",
                        end, mb.cfg.lr)
        with mb.own_rng():
            mb.measure_finish(run.ctx)
            return mb._finish(run.summary, end)

    out = _guarded(run, results, finish)
    if out is not _FAILED:
        results[run.index] = out


def _stop(signals: SignalGuard, preemption: PreemptionGuard) -> Interrupted | None:
    if preemption.requested:
        return Preempted(preemption.signum)
    return Interrupted(signals.signum) if signals.requested else None


def _interrupt_all(active: list[_Run], results: list, stop: Interrupted, records: Background,
                   preemption: PreemptionGuard) -> None:
    """SIGINT/SIGTERM or preemption: every run still training saves its checkpoint at this step and records
    ``interrupted`` (as :meth:`Trainer._finish_interrupted`); then, under submitit, the requeue."""
    records.drain()
    for run in active:
        mb = run.trainer

        def save(run=run, mb=mb):
            mb.train_time += time.time() - mb._t_loop
            mb.save_checkpoint()
            log.warning("%s at step %d: checkpoint saved; re-run the same command to resume", stop, mb.step)
            try:
                mb._close_writer()
            except OSError as err:
                log.warning("TensorBoard events could not be completed: %s", err.strerror or err)
            run.summary.update({"status": "interrupted", "step": mb.step, "signal": str(stop),
                                "train_time_s": mb.train_time, "wall_time_s": mb.wall_time()})
            rundir.write_json(mb.run_dir / "summary.json", run.summary)

        if _guarded(run, results, save) is not _FAILED:
            results[run.index] = Interrupted(stop.signum) if not isinstance(stop, Preempted) else stop
    if active:
        wait_for_sweep_siblings(active[0].trainer.run_dir)
    if isinstance(stop, Preempted):
        with contextlib.suppress(Preempted):  # every run already has its Preempted result
            preemption.hand_over()  # submitit: requeue (SystemExit, which ends the process's stacks)


def _stack(active: list[_Run]) -> StackedNet | None:
    """The batched model of the runs still training (rebuilt when one leaves)."""
    if not active:
        return None
    return StackedNet([r.trainer.model for r in active], [r.trainer.optimizer for r in active],
                      lambda i: active[i].trainer.own_rng(full=False))


def _rates(active: list[_Run]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(R,) learning rates of the next update (each run's scheduler included) and weight decays (None: all 0)."""
    if not active:
        return None, None
    dev = active[0].trainer.device
    lr = host_to_device(torch.tensor([learning_rate(r.trainer.optimizer) for r in active]), dev)
    wds = [float(r.trainer.optimizer.param_groups[0]["weight_decay"]) for r in active]
    return lr, (host_to_device(torch.tensor(wds), dev) if any(wds) else None)


# ----- the launcher's hand-over ---------------------------------------------------------------------
class _Slot(threading.local):
    coordinator = None
    index = None


_slot = _Slot()


def member_train(cfg: DictConfig, run_dir: Path, resume: bool = True, on_begin=None) -> dict:
    """:func:`bnexp.train.trainer.train`, or, in a stack's preparing thread, this run's share of the stack.

    In a thread the stacked launcher started for run i (:class:`StackCoordinator`), calls ``on_begin`` (bnexp
    has decided to train in ``run_dir``: Hydra's files are written there, in this job's own thread, where
    Hydra's global state is this job's), hands (cfg, run_dir, resume) to the coordinator and waits until the
    stack has trained; returns the run's summary or raises what training it alone would have raised.
    Anywhere else: ``train(cfg, run_dir, resume, on_begin)``.
    """
    coordinator = _slot.coordinator
    if coordinator is None:
        from bnexp.train import trainer

        # looked up now: a patched trainer.train is the one called
        return trainer.train(cfg, run_dir, resume, on_begin=on_begin)
    if on_begin is not None:
        on_begin()
    return coordinator.hand_over(_slot.index, cfg, run_dir, resume)


class StackCoordinator:
    """Runs each member's ordinary job (Hydra's ``run_job`` -> :func:`bnexp.cli.run_job`) in its own thread,
    one after the other, up to the point where it would train; trains the ready ones as one stack in the
    calling (main) thread; then lets each job finish (summary table, Hydra's callbacks), one after the other.

    Only one thread runs at a time, so Hydra's global state (``HydraConfig``, logging) is always the
    current job's.
    """

    def __init__(self, router: "RunLogRouter | None" = None):
        self.router = router
        self.log_files: dict[int, list[logging.FileHandler]] = {}
        self.cv = threading.Condition()
        self.ready: dict[int, tuple[DictConfig, Path, bool]] = {}
        self.results: dict[int, dict | BaseException] = {}
        self.done: set[int] = set()

    def hand_over(self, index: int, cfg: DictConfig, run_dir: Path, resume: bool) -> dict:
        self.log_files[index] = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        with self.cv:
            self.ready[index] = (cfg, Path(run_dir), resume)
            self.cv.notify_all()
            self.cv.wait_for(lambda: index in self.results)
            out = self.results[index]
        if isinstance(out, BaseException):
            raise out
        return out

    def run(self, jobs: list[Callable[[], object]]) -> list[object]:
        """Run each of ``jobs`` (a member's job, which ends in :func:`member_train` if it trains) and return
        what each returned, or the BaseException it raised."""
        outs: list[object] = [None] * len(jobs)
        threads = []
        for i, job in enumerate(jobs):
            def target(i=i, job=job):
                _slot.coordinator, _slot.index = self, i
                try:
                    outs[i] = job()
                except BaseException as exc:  # noqa: BLE001 - SystemExit of an interrupted run included
                    outs[i] = exc
                finally:
                    with self.cv:
                        self.done.add(i)
                        self.cv.notify_all()

            t = threading.Thread(target=target, name=f"bnexp-stack-run-{i}", daemon=True)
            threads.append(t)
            t.start()
            with self.cv:
                self.cv.wait_for(lambda: i in self.ready or i in self.done)
        order = sorted(self.ready)
        if self.router is not None:
            self.router.open({pos: self.log_files.get(i, []) for pos, i in enumerate(order)})
        if len(order) == 1:  # one run left to train: the ordinary loop
            cfg, run_dir, resume = self.ready[order[0]]
            try:
                trained = [train(cfg, run_dir, resume)]
            except BaseException as exc:  # noqa: BLE001
                trained = [exc]
        elif order:
            try:
                trained = train_stack([self.ready[i] for i in order])
            except BaseException as exc:  # noqa: BLE001 - submitit's requeue, an internal error: every run gets it
                trained = [exc] * len(order)
        else:
            trained = []
        if self.router is not None:
            self.router.close()
        for i, res in zip(order, trained):
            with self.cv:
                self.results[i] = res
                self.cv.notify_all()
            threads[i].join()
        for t in threads:
            t.join()
        return outs


class RunLogRouter(logging.Handler):
    """While a stack trains: each log record goes to the ``train.log`` of the run whose work is being done
    (:data:`MEMBER`), or to every run's when it is the stack's (None); the console handlers stay."""

    def __init__(self):
        super().__init__()
        self.files: dict[int, list[logging.Handler]] = {}
        self._saved: list[logging.Handler] | None = None

    def open(self, files: dict[int, list[logging.FileHandler]]) -> None:
        """Route to a new (appending) handler per run, in place of the root logger's file handlers."""
        root = logging.getLogger()
        self._saved = list(root.handlers)
        for pos, handlers in files.items():
            self.files[pos] = []
            for h in handlers:
                fh = logging.FileHandler(h.baseFilename, mode="a", encoding=getattr(h, "encoding", None))
                fh.setFormatter(h.formatter)
                fh.setLevel(h.level)
                self.files[pos].append(fh)
        root.handlers = [h for h in self._saved if not isinstance(h, logging.FileHandler)] + [self]

    def close(self) -> None:
        """Close the runs' handlers and give the root logger its handlers back."""
        if self._saved is not None:
            logging.getLogger().handlers = self._saved
            self._saved = None
        for handlers in self.files.values():
            for h in handlers:
                h.close()
        self.files = {}
        super().close()

    def emit(self, record: logging.LogRecord) -> None:
        member = MEMBER.get()
        targets = self.files.values() if member is None else [self.files.get(member, [])]
        for handlers in targets:
            for h in handlers:
                if record.levelno >= h.level:
                    h.handle(record)


@contextlib.contextmanager
def route_run_logs():
    """A :class:`RunLogRouter` for one stack, closed (root handlers restored) at the end."""
    router = RunLogRouter()
    try:
        yield router
    finally:
        router.close()
