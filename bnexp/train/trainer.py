"""The step-based training loop.

One call of :func:`train` is one run: it loads the data onto the device, builds the network, trains for
``trainer.max_steps`` mini-batch SGD steps and writes the run directory (see :mod:`bnexp.runfolders.rundir`). What is
measured along the way -- test evaluation, train loss, the covariate-shift monitor, gradient ICS, the
landscape probe -- are objects of :mod:`bnexp.train.measurements`, each with its own cadence; the loop takes each
where it runs, one line naming it and its cadence (:meth:`Trainer.measure_before_update`,
:meth:`Trainer.measure_after_update`), hands it a :class:`~bnexp.train.measurement_schedule.StepContext`, and
writes the checkpoints itself; evaluations and monitor records are written on a second thread
(:mod:`bnexp.train.background`). :meth:`Trainer.run` reads top to bottom.

Reliability: every ``trainer.ckpt_every`` steps and at the end the complete state (model with BN running
statistics, optimizer, scheduler, every RNG, the sampler's position, the monitor, records so far) is written
atomically to ``checkpoint.pt``; a run started in a folder holding an unfinished run's checkpoint continues
from it and ends bit-identical (on CPU) to an uninterrupted run; a checkpoint that is not this run's is set
aside or refused (:mod:`bnexp.train.resume`). SIGINT/SIGTERM -- from the moment :func:`train` starts -- stop the run
at the end of a step, save a checkpoint and record ``interrupted``; the cluster's preemption signal does the
same and hands over to submitit's requeue (:mod:`bnexp.train.preemption`). A non-finite value found by any
measurement, also at step 0, ends the run ``diverged`` (normally, so a sweep goes on). A file of the run that
cannot be written (a full disk, also in TensorBoard's writer thread) ends it ``failed`` with one
:class:`~bnexp.errors.OutputError`.

Data parallelism (``python -m bnexp.train.torchrun --nproc-per-node=N``, :mod:`bnexp.train.distributed`): one
process is a replica group of one, so the same loop runs either way: every replica draws the same seeded global
mini-batch and computes its share of m/N examples through DDP; BN statistics as
:func:`bnexp.train.distributed.bn_plan` says. Rank 0 alone takes the measurements (with the full model and the
whole global mini-batch) and writes the run directory; the replicas agree after every step on stopping (signal,
divergence) -- a no-op for one process -- and checkpoints record N.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from bnexp.train import distributed
from bnexp.runfolders import rundir, start
from bnexp.runfolders.rundir import PROBE_KINDS
from bnexp.train.background import Background
from bnexp.nets.bn import NoisyBatchNorm, recompute_population_statistics, replica_local, sync_batch_norm
from bnexp.config.checks import option_value, uses_batch_statistics
from bnexp.nets.datasets import BatchSampler, TensorData, load_data, make_augmenter
from bnexp.errors import ConfigError, Interrupted, OutputError, UserError
from bnexp.train.measurement_schedule import Schedule, StepContext
from bnexp.train.measurements import Diverged, RecordLog, build_measurements, evaluate
from bnexp.nets.models import build_model
from bnexp.train.monitor import ShiftMonitor, configuration_label
from bnexp.train.precision import apply_precision, autocast, channels_last_input, is_conv_net, to_channels_last
from bnexp.train.preemption import Preempted, PreemptionGuard
from bnexp.config.resources import default_num_threads
from bnexp.train.resume import check_same_run, incompatibility, read_checkpoint
from bnexp.train.loggers import open_loggers
from bnexp.train.device import resolve_device
from bnexp.train.event_writer import writer_failure
from bnexp.train.lr_schedule import learning_rate, lr_lambda
from bnexp.train.progress import Progress, shares_terminal
from bnexp.train.rng import rng_state, seed_everything, set_rng_state
from bnexp.runfolders.sweepsignals import wait_for_sweep_siblings
from bnexp.train.signal_guard import SignalGuard
from bnexp.train.tblog import flat_hparams, metric_names, not_reached_value, write_hparams_end, write_hparams_start

__all__ = ["Trainer", "train", "Interrupted", "evaluate"]

log = logging.getLogger("bnexp")


class Trainer:
    """One training run, with its whole state checkpointable.

    Args:
        cfg: a composed and validated :class:`bnexp.config.schema.Config`.
        run_dir: the run directory (created if needed).
        data: the dataset already on the device (a stack of runs shares one copy); None: loaded here.

    Raises:
        UserError: data missing or corrupt, device unavailable, probe larger than the test set.
    """

    CHECKPOINT = "checkpoint.pt"

    def __init__(self, cfg: DictConfig, run_dir: Path, data: TensorData | None = None):
        self.t_start = time.time()
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        tcfg = cfg.trainer
        torch.set_num_threads(default_num_threads(cfg))  # 0 (auto): 1 thread for small networks
        self.replicas = distributed.current()
        self.device = distributed.replica_device(resolve_device(tcfg.device), self.replicas)
        self.plan = distributed.bn_plan(cfg, self.replicas)
        self.data = load_data(cfg.data, self.device) if data is None else data
        if tcfg.probe_size > len(self.data.test_y):
            raise ConfigError("trainer.probe_size", tcfg.probe_size,
                              f"must be <= the evaluation set's size ({len(self.data.test_y)}: the "
                              f"{'validation split' if self.data.eval_split == 'validation' else 'test set'})")
        # trainer.precision (bnexp.train.precision): the forward pass's autocast dtype (None: fp32, tf32) and what
        # the run computes in (fp32 | tf32 | bf16: recorded, and compared on resume); sets the TF32 switches
        self.amp_dtype, self.precision = apply_precision(str(tcfg.get("precision", "fp32")), self.device)
        self.targets = sorted(float(t) for t in tcfg.targets)
        self.hp = flat_hparams(cfg)
        self.max_steps, self.ckpt_every = int(tcfg.max_steps), int(tcfg.ckpt_every)
        self.writer = None
        self.records = Background(False)  # the records thread of run() (bnexp.train.background)
        self._build_state()
        if self.channels_last:  # conv nets run channels-last (NHWC): the test set once, mini-batches per step
            self.data.test_x = channels_last_input(self.data.test_x)

    def _build_state(self) -> None:
        """The run's state at step 0, from the seed (again after an unusable checkpoint was loaded)."""
        cfg, tcfg = self.cfg, self.cfg.trainer
        seed_everything(cfg.seed)
        self.model = build_model(cfg, self.data.input_shape, self.data.num_classes,
                                 self.plan.ghost_batch_size).to(self.device)
        self.channels_last = is_conv_net(self.model)
        if self.channels_last:
            to_channels_last(self.model)
        if self.plan.sync:
            self.model = sync_batch_norm(self.model, self.device)
        # what the step loop calls: DDP (gradients averaged over the replicas) or the model itself
        self.net: nn.Module = distributed.data_parallel(self.model, self.replicas, self.device)
        self.agree = distributed.StepAgreement(
            self.replicas, list(self.model.buffers()) if self.plan.average_buffers else [])
        # N > 1 with dropout: reseed the global RNG per (replica, step); one process never needs to
        self.reseed = distributed.needs_step_seed(self.model, self.replicas)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.optim.momentum,
                                         nesterov=cfg.optim.nesterov, weight_decay=cfg.optim.weight_decay)
        schedule = str(option_value(cfg.optim.schedule))
        self.scheduler = (None if schedule == "constant" else torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(schedule, cfg.optim.decay_rate, cfg.optim.decay_steps)))
        self.sampler = BatchSampler(len(self.data.train_y), tcfg.batch_size, cfg.seed, self.device)
        self.augment = make_augmenter(cfg.data, cfg.seed, self.device)
        probe_x = self.data.test_x[:tcfg.probe_size]
        self.monitor = ShiftMonitor(self.model, channels_last_input(probe_x) if self.channels_last else probe_x,
                                    list(cfg.monitor.percentiles), cfg.monitor.unit, cfg.monitor.histograms,
                                    cfg.monitor.max_values, cfg.monitor.shift_metrics, cfg.monitor.shift_max_values,
                                    bn_stats=str(cfg.monitor.bn_stats), batch_size=int(tcfg.batch_size))
        self.monitor.glance = configuration_label(cfg.bn)  # Custom Scalars: one first chart per configuration
        # the records of metrics.jsonl, shift.jsonl and ics.jsonl (gradient-ICS and landscape)
        self.logs = {name: RecordLog(self.run_dir / f"{name}.jsonl") for name in ("metrics", "shift", "ics")}
        self.measurements = build_measurements(cfg, self.monitor, self.logs, self.device)
        self.step = 0
        self.train_time = 0.0  # seconds in the step loop, summed over resumptions
        self.wall_before = 0.0  # wall-clock seconds of the earlier sessions of a resumed run (its checkpoint's)
        # seconds spent in each timed measurement (inside train_time), reported separately in summary.json
        self.probe_time = {k: 0.0 for k in PROBE_KINDS}
        # takes each measurement where the step loop finds it due (bnexp.train.measurement_schedule.Schedule)
        self.schedule = Schedule(self.measurements, self.is_main, self.probe_time,
                                 self._measuring, sync=self.agree.average_buffers)
        self.resumed_from: int | None = None
        self._t_loop = 0.0

    @property
    def is_main(self) -> bool:
        """True in the process that measures and writes (rank 0, or the only process)."""
        return self.replicas.is_main

    def _measuring(self):
        """The context the measurements of a phase run in, entered where one is due (and around the
        recomputed population statistics): rank 0 measures the full model, its synchronized BN layers
        run locally."""
        return replica_local(self.model) if self.plan.sync else contextlib.nullcontext()

    @property
    def history(self) -> list[dict]:
        """The ``metrics.jsonl`` records so far (test evaluations)."""
        return self.logs["metrics"].records

    # ----- checkpoints -------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue this run exactly (the shift records once: as the log's)."""
        return {
            "step": self.step,
            "world_size": self.replicas.world_size,  # N replicas: a checkpoint resumes with the same N
            "precision": self.precision,  # fp32 | tf32 | bf16: a checkpoint resumes in the same arithmetic
            "model": self.model.state_dict(),  # includes BN running statistics
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "sampler": self.sampler.state_dict(),
            "augment": self.augment.state_dict() if self.augment is not None else None,
            "rng": rng_state(self.device),
            "noise": [m.noise_state() for m in self._noisy_layers()],
            "measurements": {m.name: m.state_dict() for m in self.measurements},
            "logs": {name: list(rec_log.records) for name, rec_log in self.logs.items()},
            "train_time": self.train_time,
            "wall_time": self.wall_time(),
            "probe_time": dict(self.probe_time),
            "config": OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (the config must be the same run's)."""
        self.step = int(state["step"])
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state["scheduler"] is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])
        if self.augment is not None and state.get("augment") is not None:
            self.augment.load_state_dict(state["augment"])
        set_rng_state(state["rng"], self.device)
        for m, ns in zip(self._noisy_layers(), state.get("noise", [])):
            m.load_noise_state(ns)
        for name, rec_log in self.logs.items():  # before the measurements: the monitor's history is its log
            rec_log.records = list(state["logs"].get(name, []))
        for m in self.measurements:
            if m.name in state["measurements"]:
                m.load_state_dict(state["measurements"][m.name])
        self.train_time = float(state["train_time"])
        # a checkpoint written before "wall_time" was kept: its train time is the best lower bound
        self.wall_before = max(float(state.get("wall_time", 0.0)), self.train_time)
        self.probe_time.update(state.get("probe_time", {}))

    def wall_time(self) -> float:
        """Wall-clock seconds of the run, summed over its sessions (a resumed run's earlier ones from its
        checkpoint): never less than ``train_time``, whose stretches lie inside them."""
        return self.wall_before + time.time() - self.t_start

    def _noisy_layers(self) -> list[NoisyBatchNorm]:
        return [m for m in self.model.modules() if isinstance(m, NoisyBatchNorm)]

    def save_checkpoint(self) -> None:
        """Write ``checkpoint.pt`` atomically (rank 0 only); on failure the previous checkpoint stays.

        Raises:
            UserError: the disk is full or the folder is not writable (the message says whether an
                earlier checkpoint remains to resume from).
        """
        if not self.is_main:
            return
        path = self.run_dir / self.CHECKPOINT
        had_one = path.exists()
        try:
            rundir.save_checkpoint(path, self.state_dict())
        except OSError as exc:
            kept = (f"the previous checkpoint is intact: resume from it with the same overrides and "
                    f"hydra.run.dir={self.run_dir}" if had_one
                    else "no checkpoint of this run exists yet, so a re-run starts it over")
            raise UserError(f"could not write the checkpoint in {self.run_dir} ({exc.strerror or exc}); {kept}. "
                            "Free disk space (or choose another output folder) first.") from None

    def _checkpoint_in_loop(self) -> None:
        """A checkpoint during the step loop: close the current stretch of ``train_time`` first,
        so the saved time is up to date, then flush TensorBoard and write ``checkpoint.pt``."""
        self.records.drain()  # the checkpoint holds every record of its step
        now = time.time()
        self.train_time += now - self._t_loop
        self._t_loop = now
        if self.writer is not None:
            self.writer.flush()
        self.save_checkpoint()

    def try_resume(self) -> bool:
        """Load ``checkpoint.pt`` of an unfinished run in the run directory, if there is one.

        Also truncates metrics/shift/ics.jsonl to the checkpoint's step, so a resumed run has no
        duplicated or missing records. Every replica loads the same file. A file that is not a
        readable checkpoint of this run -- truncated, not a checkpoint, keys missing, a network of
        other layers or shapes -- is set aside (kept, :func:`bnexp.runfolders.rundir.set_aside_unreadable_checkpoint`)
        and the run starts over from step 0.

        Returns:
            True if the run now continues from the checkpoint.

        Raises:
            CheckpointMismatch: the checkpoint is another config's, or was written with another
                number of replicas N; UntrustedCheckpoint: it needs more than tensors to load (the
                run directory is left untouched either way).
        """
        path = self.run_dir / self.CHECKPOINT
        if not path.exists():
            return False
        # to the CPU, tensors only (bnexp.train.checkpoint): each part moves itself to its device
        state, unreadable = read_checkpoint(path, trust=bool(self.cfg.trainer.get("trust_checkpoint", False)))
        if unreadable:
            return self._start_over(unreadable)
        check_same_run(state, OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True),
                       self.replicas.world_size, self.run_dir, self.precision)
        problem = incompatibility(state, self.model, self.optimizer)
        if problem:
            return self._start_over(problem)
        try:
            self.load_state_dict(state)
        except Exception as exc:  # a value of the wrong kind: this run's state is half loaded, build it anew
            self._build_state()
            return self._start_over(f"{type(exc).__name__}: {exc}")
        self.resumed_from = self.step
        if self.is_main:
            for rec_log in self.logs.values():
                rec_log.rewrite()
        log.info("resumed from the checkpoint at step %d of %s", self.step, self.run_dir)
        return True

    def _start_over(self, reason: str) -> bool:
        if self.is_main:  # (the other replicas read the same file and start over too)
            rundir.set_aside_unreadable_checkpoint(self.run_dir, reason)
        return False

    # ----- outputs ------------------------------------------------------------------
    def _begin(self) -> dict:
        """Open TensorBoard and write ``summary.json`` (status ``running``) and ``config.yaml`` (rank 0)."""
        cfg = self.cfg
        summary = self._base_summary()
        if self.is_main:
            self.writer = open_loggers(cfg, self.run_dir, self.resumed_from, self.hp)  # logger=... (bnexp.train.loggers)
            if self.resumed_from is None:
                write_hparams_start(self.writer, self.hp, metric_names(self.targets))
                self.writer.add_custom_scalars(
                    self.monitor.custom_scalars_layout(grad_ics=bool(cfg.monitor.grad_ics)))
                self.writer.add_text("config", "```\n" + OmegaConf.to_yaml(cfg) + "\n```", 0)
            log.info("model: %s, %d parameters, bn=%s act=%s lr=%g seed=%d, device %s, %d replica(s)",
                     cfg.model.name, summary["num_parameters"], cfg.bn.enabled, self.hp["act"], cfg.lr,
                     cfg.seed, self.device, self.replicas.world_size)
            rundir.write_json(self.run_dir / "summary.json", summary)
            rundir.write_text(self.run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        return summary

    def _base_summary(self) -> dict:
        cfg = self.cfg
        return {
            "status": "running", "step": self.step, "max_steps": int(cfg.trainer.max_steps),
            "run_dir": str(self.run_dir), "experiment": cfg.experiment,
            "bn": bool(cfg.bn.enabled), "act": self.hp["act"], "lr": float(cfg.lr), "seed": int(cfg.seed),
            "model": str(cfg.model.name), "data": str(cfg.data.name), "batch_size": int(cfg.trainer.batch_size),
            "device": str(self.device), "num_parameters": sum(p.numel() for p in self.model.parameters()),
            "resumed_from_step": self.resumed_from,
            "bn_noise": bool(cfg.bn.enabled and cfg.bn.get("noise", False)),
            **{f"bn_{k}": option_value(cfg.bn.get(k, d)) if cfg.bn.enabled else None  # normalizer and its place
               for k, d in (("norm", "batch"), ("position", "before"))},
            "evaluated_on": self.data.eval_split,  # test, or the validation split (data.validation)
            "precision": self.precision,  # what it computes in: fp32 | tf32 | bf16 (bnexp.train.precision)
            "channels_last": self.channels_last,
            "replicas": self.replicas.world_size,
            "bn_sync": bool(cfg.bn.sync) if cfg.bn.enabled and self.replicas.distributed else None,
            "bn_ghost_batch_size": self.plan.ghost_batch_size,
        }

    def _context(self) -> StepContext:
        """The measurements' view of this run (:class:`~bnexp.train.measurement_schedule.StepContext`)."""
        cfg = self.cfg
        return StepContext(model=self.model, optimizer=self.optimizer, test_x=self.data.test_x,
                           test_y=self.data.test_y, max_steps=self.max_steps, run_dir=self.run_dir,
                           title=f"bn={cfg.bn.enabled} act={self.hp['act']} lr={cfg.lr:g} seed={cfg.seed}",
                           amp_dtype=self.amp_dtype, replicas=self.replicas, t_start=self.t_start,
                           writer=self.writer, step=self.step, epoch=self.sampler.epoch,
                           lr=learning_rate(self.optimizer))

    # ----- the loop -----------------------------------------------------------------
    def run(self, signals: SignalGuard | None = None) -> dict:
        """Train to ``trainer.max_steps`` (from the checkpoint's step when resumed); write outputs.

        Each step: draw the global mini-batch -> the measurements due before the update ->
        forward (this replica's share), loss, backward, update -> the measurements due after
        it -> the replicas' agreement (a no-op for one process) -> a checkpoint every
        ``trainer.ckpt_every`` steps. What is measured at which step is read in
        :meth:`measure_before_update` and :meth:`measure_after_update`, one line per measurement.

        Args:
            signals: the SIGINT/SIGTERM guard already in place (:func:`train` installs one before
                the data loads); None: one is installed here.

        Returns:
            the summary written to ``summary.json``.

        Raises:
            Interrupted: after saving a checkpoint and recording status ``interrupted``
                (:class:`bnexp.train.preemption.Preempted` for the cluster's signal without requeue).
            SystemExit: from submitit, which requeues the job after the preemption checkpoint.
            UserError: a checkpoint could not be written.
            OSError: a file of the run (e.g. TensorBoard's) could not be written.
        """
        summary = self._begin()
        ctx = self._context()
        # CUDA replicas read what they agreed at due steps only (bnexp.train.distributed.StepAgreement)
        self.agree.read_now = lambda: (self.step in (self.schedule.due_at, self.max_steps)
                                       or self.step % self.ckpt_every == 0)
        progress = Progress(self.cfg.trainer.progress and self.is_main, self.max_steps, self.step,
                            label=self.run_dir.name if shares_terminal() else None)  # a parallel job: lines
        # a SIGINT/SIGTERM stops the loop at the end of a step, never inside one
        self.records = Background(bool(self.cfg.trainer.async_records) and self.is_main)
        with signals or SignalGuard() as signals, PreemptionGuard() as preemption, progress, self.records:
            ctx.progress, ctx.defer, self._t_loop = progress, self.records.submit, time.time()
            end = self._settle(signals, preemption, None)  # a signal while loading: stop before step 1
            if end is None and self.step == 0 and not self.history:  # a fresh run: step 0 is measured too
                end = self._settle(signals, preemption, self.measure_start(ctx))  # may find Diverged
            while end is None and self.step < self.max_steps:
                if self.reseed:  # each replica its own dropout masks, the same ones after a resume
                    torch.manual_seed(distributed.step_seed(self.cfg.seed, self.replicas.rank, self.step))
                ctx.x, ctx.y, ctx.epoch = self._next_batch()  # the global mini-batch, the same on every replica
                self.measure_before_update(ctx)  # gradient ICS, landscape: on this mini-batch, when due
                ctx.loss, ctx.logits, ctx.labels = self._update(ctx.x, ctx.y)
                self.step = ctx.step = self.step + 1
                ctx.lr = learning_rate(self.optimizer)
                # train loss, test evaluation, shift record, when due
                end = self._settle(signals, preemption, self.measure_after_update(ctx))
                if end is None and self.step % self.ckpt_every == 0 and self.step < self.max_steps:
                    self._checkpoint_in_loop()  # every trainer.ckpt_every steps (and at the end: _finish)
            self.records.drain()  # every record written, inside the loop's time
            self.train_time += time.time() - self._t_loop
            if isinstance(end, Preempted):
                self._finish_preempted(summary, preemption)  # raises: submitit requeues, or Preempted
        if isinstance(end, Interrupted):
            return self._finish_interrupted(summary, end)
        if isinstance(end, Diverged):  # from any measurement (loss, parameters, pre-activations)
            log.warning("training diverged: %s (lr=%g); stopping this run", end, self.cfg.lr)
        self.measure_finish(ctx)
        return self._finish(summary, end)

    # ----- what is measured when (bnexp.train.measurements): one line per measurement, in the order taken -----
    def measure_start(self, ctx: StepContext) -> Diverged | None:
        """Step 0 of a fresh run, before the first update.

        Returns:
            the :class:`Diverged` a measurement found (non-finite parameters or pre-activations), else None.
        """
        m = self.measurements
        with self.schedule.taking("start", ctx) as take:
            take(m.evaluation)  # metrics.jsonl's step-0 record
            take(m.shift)  # shift.jsonl's step-0 record
        return take.diverged

    def measure_before_update(self, ctx: StepContext) -> None:
        """The measurements on the mini-batch ``ctx.x``, ``ctx.y`` of update s = ``self.step + 1``, before
        it; a :class:`Diverged` found here is handed over after the update (:meth:`measure_after_update`)."""
        m, s = self.measurements, self.step + 1
        with self.schedule.taking("before_update", ctx, s) as take:
            if m.grad_ics and m.grad_ics.due(s, self.max_steps):  # monitor.grad_ics_every (with monitor.grad_ics)
                take(m.grad_ics)
            if m.landscape and m.landscape.due(s, self.max_steps):  # monitor.landscape_every (with monitor.landscape)
                take(m.landscape)

    def measure_after_update(self, ctx: StepContext) -> Diverged | None:
        """The measurements after update s = ``self.step`` (``ctx`` holds its loss and logits).

        Returns:
            the :class:`Diverged` a measurement found, here or before the update, else None (the later
            measurements of the step are skipped).
        """
        m, s = self.measurements, self.step
        m.train_loss.observe(ctx)  # every step: the loss and logits, kept on the device until logged
        if self.schedule.pending is not None:  # found before this update: the run ends here
            return self.schedule.pop_pending()
        with self.schedule.taking("after_update", ctx, s) as take:  # the replicas average BN statistics first
            if m.train_loss.due(s, self.max_steps):  # trainer.log_every, and the last step
                take(m.train_loss)  # Train/loss; a non-finite loss ends the run diverged
            if m.evaluation.due(s, self.max_steps):  # trainer.eval_every, and the last step
                take(m.evaluation)  # metrics.jsonl, Test/*
            if m.shift.due(s, self.max_steps):  # trainer.hist_every, and the last step
                take(m.shift)  # shift.jsonl, shift/*, preact/*
        return take.diverged

    def measure_finish(self, ctx: StepContext) -> None:
        """After the last step of a finished or diverged run (rank 0)."""
        if self.is_main:
            self.measurements.shift.finish(ctx)  # percentiles.png (paper Fig. 1(b, c))

    def _next_batch(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The next global mini-batch (augmented when ``data.augment`` says so): (B, C, H, W) inputs,
        (B,) labels, and the sampler's epoch."""
        idx = self.sampler.next()
        # index_select, not x[idx]: the same rows, 25-35 us less per step on CPU (advanced indexing's
        # general path was 4.5-6x slower for a (60, 1, 28, 28) gather, README Benchmarks)
        x, y = self.data.train_x.index_select(0, idx), self.data.train_y.index_select(0, idx)
        if self.augment is not None:
            x = self.augment(x)
        return x, y, self.sampler.epoch

    def _update(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Forward this replica's share of (x, y), cross-entropy loss, backward, SGD update, scheduler step.

        Returns:
            (loss, logits, labels), detached: the 0-d mean loss in nats, (B/N, classes), (B/N,).
        """
        x, y = distributed.local_share(x, self.replicas, self.plan.share), distributed.local_share(
            y, self.replicas, self.plan.share)
        if self.channels_last:
            x = channels_last_input(x)
        with autocast(self.device, self.amp_dtype):
            logits = self.net(x)
        logits = logits.float()  # the loss in fp32 (bf16 autocast); returns the tensor itself when already fp32
        loss = nn.functional.cross_entropy(logits, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return loss.detach(), logits.detach(), y

    def _settle(self, signals: SignalGuard, preemption: PreemptionGuard,
                diverged: Diverged | None) -> Diverged | Interrupted | None:
        """After a step, what all replicas agree ends the run (None: go on); one all-reduce for N > 1.

        Returns:
            a :class:`Diverged` (here or on another replica), :class:`Preempted` (the cluster's
            signal), :class:`Interrupted` (SIGINT/SIGTERM), or None.
        """
        stop, preempted, any_diverged = self.agree(signals.requested, preemption.requested, diverged is not None)
        if any_diverged:
            return diverged or Diverged(self.step, "a non-finite value on another replica")
        if preempted:
            return Preempted(preemption.signum)
        return Interrupted(signals.signum) if stop else None

    def _finish_preempted(self, summary: dict, preemption: PreemptionGuard) -> None:
        """The cluster's time-is-up signal: checkpoint at this step, then submitit's requeue.

        Raises:
            SystemExit: submitit requeued the job (rank 0 under submitit).
            Preempted: no requeue; the run stays ``interrupted`` with its checkpoint.
        """
        sig = preemption.signum
        log.warning("%s at step %d: saving a checkpoint of this step, then handing over to the cluster "
                    "launcher (requeue)", sig.name, self.step)
        if self.is_main:
            self._close_writer()
            self.save_checkpoint()
            summary.update({"status": "interrupted", "step": self.step, "signal": sig.name,
                            "train_time_s": self.train_time, "wall_time_s": self.wall_time()})
            rundir.write_json(self.run_dir / "summary.json", summary)
            preemption.hand_over()
        raise Preempted(sig)

    def _finish(self, summary: dict, diverged: Diverged | None) -> dict:
        """Alg. 2 population statistics if asked, the final summary, hparams, the last checkpoint.

        Rank 0 only; another replica returns ``{"status", "step", "rank"}`` and writes nothing."""
        cfg = self.cfg
        status = "diverged" if diverged is not None else "finished"
        if not self.is_main:
            return {"status": status, "step": self.step, "rank": self.replicas.rank}
        last = self.history[-1]
        final_acc, final_loss = last["test_accuracy"], last["test_loss"]
        extra: dict = {}
        pop = str(option_value(cfg.bn.population_stats))
        if status == "finished" and cfg.bn.enabled and pop == "recompute":
            extra["final_test_accuracy_ema"] = final_acc
            train_x, batch_size = self.data.train_x, int(cfg.trainer.batch_size)
            rec_sampler = BatchSampler(len(self.data.train_y), batch_size, cfg.seed + 1, self.device)
            batches = (train_x[rec_sampler.next()] for _ in range(cfg.bn.recompute_batches))
            with self._measuring():
                k = recompute_population_statistics(self.model, batches)
            final_loss, final_acc = evaluate(self.model, self.data.test_x, self.data.test_y,
                                             autocast_dtype=self.amp_dtype)
            self.writer.add_scalar("Test/accuracy_recomputed_population_stats", final_acc, self.step)
            log.info("population statistics recomputed over %d mini-batches (Alg. 2): test acc %.4f (ema: %.4f)",
                     k, final_acc, extra["final_test_accuracy_ema"])

        best = max(self.history, key=lambda r: r["test_accuracy"])
        steps_to_target = {f"{t:g}": rundir.first_reached(self.history, t) for t in self.targets}
        summary.update({
            "status": status, "step": self.step, "diverged_step": diverged.step if diverged else None,
            "final_test_accuracy": final_acc, "final_test_loss": final_loss,
            "best_test_accuracy": best["test_accuracy"], "best_step": best["step"],
            "targets": self.targets, "steps_to_target": steps_to_target,
            "population_stats": pop if uses_batch_statistics(cfg.bn) else None, **extra,
            "train_time_s": self.train_time,
            "steps_per_s": self.step / self.train_time if self.train_time > 0 else None,
            "probe_time_s": {k: round(v, 3) for k, v in self.probe_time.items()},
        })
        write_hparams_end(self.writer, {
            "hparams/final_test_accuracy": final_acc, "hparams/best_test_accuracy": best["test_accuracy"],
            **{f"hparams/steps_to_{t:g}": steps_to_target[f"{t:g}"] for t in self.targets},
        }, self.step, not_reached=not_reached_value(cfg.trainer.max_steps))
        self._close_writer()
        if cfg.trainer.save_checkpoint and status == "finished":
            try:
                self.save_checkpoint()
            except UserError as exc:  # the run is complete: its summary must still be written
                log.warning("final checkpoint not saved: %s", exc)
        summary["wall_time_s"] = self.wall_time()
        rundir.write_json(self.run_dir / "summary.json", summary)
        return summary

    def _finish_interrupted(self, summary: dict, exc: Interrupted) -> dict:
        """SIGINT/SIGTERM: save the checkpoint first, then the writer and the summary; in a sweep
        whose launcher leaves Ctrl-C to its workers, wait for the sibling runs to save theirs.

        Raises:
            Interrupted: always (every replica), after the checkpoint and status were written.
        """
        if not self.is_main:
            raise exc
        self.save_checkpoint()
        log.warning("%s at step %d: checkpoint saved", exc, self.step)
        if self.writer is not None:
            self.writer.status = "KILLED"  # MLflow's status of a stopped run (logger=mlflow)  # bnexp train prints the command that resumes
        try:
            self._close_writer()
        except OSError as err:  # the checkpoint is what matters here; the events stop where they stopped
            log.warning("TensorBoard events could not be completed: %s", err.strerror or err)
        summary.update({"status": "interrupted", "step": self.step, "signal": str(exc),
                        "train_time_s": self.train_time, "wall_time_s": self.wall_time()})
        rundir.write_json(self.run_dir / "summary.json", summary)
        wait_for_sweep_siblings(self.run_dir)
        raise exc

    def _close_writer(self) -> None:
        """Flush and close TensorBoard's writer (rank 0).

        Raises:
            OSError: its writer thread failed (e.g. the disk is full), now or before.
        """
        if self.writer is not None:
            self.writer.close()
            failure = writer_failure(self.writer)
            if failure is not None:
                raise failure

    def record_failure(self, exc: BaseException) -> UserError:
        """Record status ``failed`` after a file of the run could not be written (rank 0).

        Args:
            exc: the :class:`OSError` (TensorBoard's writer thread, a file of the run) or
                :class:`UserError` that ended the run.

        Returns:
            the one-line user error to raise: for an OSError an :class:`OutputError` naming the
            file (TensorBoard's event file when its writer thread failed).
        """
        failure = writer_failure(self.writer) if self.writer is not None else None
        if isinstance(exc, OSError):
            where = exc.filename or self.run_dir
            if failure is not None:
                where = max(self.run_dir.glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime, default=where)
            exc = OutputError(where, exc, resumable=(self.run_dir / self.CHECKPOINT).exists())
        if self.is_main:
            if self.writer is not None and failure is None:
                self.writer.status = "FAILED"
                with contextlib.suppress(OSError):
                    self.writer.close()
            summary = {**(rundir.read_summary(self.run_dir) or self._base_summary()), "status": "failed",
                       "step": self.step, "error": str(exc)}
            rundir.write_summary_even_on_a_full_disk(self.run_dir / "summary.json", summary)
        return exc


def train(cfg: DictConfig, run_dir: Path, resume: bool = True, on_begin=None) -> dict:
    """Run one training run in ``run_dir``, resuming an unfinished run's checkpoint if asked. SIGINT/SIGTERM
    from here on (data loading and resume included) stop at a step boundary with a checkpoint.

    Args:
        cfg: a composed and validated :class:`bnexp.config.schema.Config`.
        run_dir: the run directory.
        resume: continue from ``run_dir/checkpoint.pt`` when present.
        on_begin: called once the data and the model are ready, before anything in ``run_dir`` changes.

    Returns:
        the summary dict written to ``summary.json`` (status ``finished`` or ``diverged``).

    Raises:
        UserError: bad data, device or probe size; a file of the run that cannot be written
            (status ``failed`` recorded); a checkpoint of another config.
        Interrupted: SIGINT/SIGTERM, after a checkpoint and status ``interrupted`` were saved.
    """
    with SignalGuard() as signals:
        trainer = Trainer(cfg, run_dir)
        if on_begin is not None:
            on_begin()
        if trainer.is_main:  # a second Ctrl-C leaves neither "running" nor a half-written file
            signals.on_exit = lambda signum: start.abandon_run(run_dir, signum)
        if resume:
            trainer.try_resume()
        try:
            return trainer.run(signals)
        except (OSError, UserError) as exc:
            raise trainer.record_failure(exc) from None
