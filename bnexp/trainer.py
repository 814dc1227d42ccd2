"""The step-based training loop.

One call of :func:`train` is one run: it loads the data onto the device, builds
the network, trains for ``trainer.max_steps`` mini-batch SGD steps and writes the
run directory (see :mod:`bnexp.rundir`). What is measured along the way -- test
evaluation, train loss, the covariate-shift monitor, gradient ICS, the landscape
probe, checkpoints -- are objects of :mod:`bnexp.measurements`, each with its own
cadence; the loop only calls them before or after the update of a step.

Reliability: every ``trainer.ckpt_every`` steps and at the end the complete state
(model with BN running statistics, optimizer, scheduler, every RNG, the mini-batch
sampler's permutation and position, the shift monitor, metrics so far) is written
atomically to ``checkpoint.pt``; a run started in a directory holding an unfinished
run's checkpoint continues from it and ends bit-identical (on CPU) to an
uninterrupted run. SIGINT/SIGTERM save a checkpoint and record ``interrupted``.
A non-finite value found by any measurement (loss, parameters, pre-activations), also
at step 0, stops the run with status ``diverged`` and the step; the function then
returns normally, so a sweep goes on. An unreadable checkpoint is set aside (kept) and
the run starts over with the earlier attempt's records and TensorBoard events cut.
The cluster's preemption/timeout signal (SIGUSR2 under submitit) saves a checkpoint at
the end of the current step and hands over to submitit, which requeues the job
(:mod:`bnexp.preemption`).

Data parallelism (``torchrun --nproc-per-node=N``, :mod:`bnexp.distributed`): every
replica draws the same seeded global mini-batch and computes its share of m/N examples
through DDP; BN statistics as :func:`bnexp.distributed.bn_plan` says (``bn.sync``,
``bn.ghost_batch_size``). Rank 0 alone takes the measurements (with the full model and the
whole global mini-batch) and writes the run directory; the replicas agree after every step
on stopping (signal, divergence), and checkpoints record N.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from bnexp import distributed, rundir
from bnexp.bn import NoisyBatchNorm, recompute_population_statistics, replica_local, sync_batch_norm
from bnexp.data import BatchSampler, load_data, make_augmenter
from bnexp.errors import CheckpointMismatch, ConfigError, UserError
from bnexp.measurements import Diverged, RecordLog, Schedule, build_measurements, evaluate
from bnexp.models import build_model
from bnexp.monitor import ShiftMonitor
from bnexp.precision import autocast, channels_last_input, is_conv_net, resolve_precision, to_channels_last
from bnexp.preemption import Preempted, PreemptionGuard
from bnexp.runtime import (Interrupted, Progress, SignalGuard, lr_lambda, resolve_device, rng_state,
                           seed_everything, set_rng_state)
from bnexp.tblog import flat_hparams, metric_names, not_reached_value, write_hparams_end, write_hparams_start

__all__ = ["Trainer", "train", "Interrupted", "evaluate"]

log = logging.getLogger("bnexp")

PROBE_KINDS = ("eval", "monitor", "grad_ics", "landscape")


class Trainer:
    """One training run, with its whole state checkpointable.

    Args:
        cfg: a composed and validated :class:`bnexp.config.Config`.
        run_dir: the run directory (created if needed).

    Raises:
        UserError: data missing or corrupt, device unavailable, probe larger than the test set.
    """

    CHECKPOINT = "checkpoint.pt"

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.t_start = time.time()
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        tcfg = cfg.trainer
        from bnexp.resources import default_num_threads

        torch.set_num_threads(default_num_threads(cfg))  # 0 (auto): 1 thread for small networks
        self.replicas = distributed.current()
        self.device = distributed.replica_device(resolve_device(tcfg.device), self.replicas)
        self.plan = distributed.bn_plan(cfg, self.replicas)
        seed_everything(cfg.seed)
        self.data = load_data(cfg.data, self.device)
        if tcfg.probe_size > len(self.data.test_y):
            raise ConfigError("trainer.probe_size", tcfg.probe_size,
                              f"must be <= the test-set size ({len(self.data.test_y)})")
        self.model = build_model(cfg, self.data.input_shape, self.data.num_classes,
                                 self.plan.ghost_batch_size).to(self.device)
        # trainer.precision (bnexp.precision): the forward pass's autocast dtype, None for fp32
        self.amp_dtype = resolve_precision(str(tcfg.get("precision", "fp32")), self.device)
        # conv nets run channels-last (NHWC): weights here, the test set once, mini-batches per step
        self.channels_last = is_conv_net(self.model)
        if self.channels_last:
            to_channels_last(self.model)
            self.data.test_x = channels_last_input(self.data.test_x)
        if self.plan.sync:
            self.model = sync_batch_norm(self.model, self.device)
        # what the step loop calls: DDP (gradients averaged over the replicas) or the model itself
        self.net: nn.Module = self.model
        if self.replicas.distributed:
            import inspect

            from torch.nn.parallel import DistributedDataParallel as DDP

            # no buffer broadcast at each forward: BN buffers are identical (sync) or averaged
            # by StepAgreement (torch >= 2.15 renamed broadcast_buffers to forward_sync_buffers)
            key = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DDP).parameters
                   else "broadcast_buffers")
            self.net = DDP(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                           **{key: False})
        self.agree = distributed.StepAgreement(
            self.replicas, list(self.model.buffers()) if self.plan.average_buffers else [])
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.optim.momentum,
                                         nesterov=cfg.optim.nesterov, weight_decay=cfg.optim.weight_decay)
        schedule = str(getattr(cfg.optim.schedule, "value", cfg.optim.schedule))
        self.scheduler = (None if schedule == "constant" else torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(schedule, cfg.optim.decay_rate, cfg.optim.decay_steps)))
        self.sampler = BatchSampler(len(self.data.train_y), tcfg.batch_size, cfg.seed, self.device)
        self.augment = make_augmenter(cfg.data, cfg.seed, self.device)
        self.monitor = ShiftMonitor(self.model, self.data.test_x[:tcfg.probe_size], list(cfg.monitor.percentiles),
                                    cfg.monitor.unit, cfg.monitor.histograms, cfg.monitor.max_values,
                                    cfg.monitor.shift_metrics, cfg.monitor.shift_max_values,
                                    bn_stats=str(cfg.monitor.bn_stats), batch_size=int(tcfg.batch_size))
        self.targets = sorted(float(t) for t in tcfg.targets)
        self.hp = flat_hparams(cfg)
        self.max_steps = int(tcfg.max_steps)
        # the records of metrics.jsonl, shift.jsonl and ics.jsonl (gradient-ICS and landscape)
        self.logs = {name: RecordLog(self.run_dir / f"{name}.jsonl") for name in ("metrics", "shift", "ics")}
        self.measurements = build_measurements(cfg, self.monitor, self.logs, self.device)
        if not self.replicas.is_main:  # the other replicas only join the collective ones
            self.measurements = [m for m in self.measurements if m.all_replicas]
        # progress of the run (all of it goes into checkpoints)
        self.step = 0
        self.train_time = 0.0  # seconds in the step loop, summed over resumptions
        # seconds spent in each timed measurement (inside train_time), reported separately in summary.json
        self.probe_time = {k: 0.0 for k in PROBE_KINDS}
        self.resumed_from: int | None = None
        self.writer = None
        self.progress: Progress | None = None
        self._t_loop = 0.0

    @property
    def is_main(self) -> bool:
        """True in the process that measures and writes (rank 0, or the only process)."""
        return self.replicas.is_main

    def _probe_context(self):
        """Rank 0's measurements on the full model: synchronized BN layers run locally."""
        return replica_local(self.model) if self.plan.sync else contextlib.nullcontext()

    @property
    def history(self) -> list[dict]:
        """The ``metrics.jsonl`` records so far (test evaluations)."""
        return self.logs["metrics"].records

    # ----- checkpoints -------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue this run exactly."""
        return {
            "step": self.step,
            "world_size": self.replicas.world_size,  # N replicas: a checkpoint resumes with the same N
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
        for m in self.measurements:
            if m.name in state["measurements"]:
                m.load_state_dict(state["measurements"][m.name])
        for name, rec_log in self.logs.items():
            rec_log.records = list(state["logs"].get(name, []))
        self.train_time = float(state["train_time"])
        self.probe_time.update(state.get("probe_time", {}))

    def _noisy_layers(self) -> list[NoisyBatchNorm]:
        return [m for m in self.model.modules() if isinstance(m, NoisyBatchNorm)]

    def save_checkpoint(self) -> None:
        """Write ``checkpoint.pt`` atomically (rank 0 only); on failure the previous checkpoint stays.

        Raises:
            UserError: the disk is full or the folder is not writable.
        """
        if not self.is_main:
            return
        try:
            rundir.save_checkpoint(self.run_dir / self.CHECKPOINT, self.state_dict())
        except OSError as exc:
            raise UserError(f"could not write the checkpoint in {self.run_dir} ({exc.strerror or exc}); "
                            "the previous checkpoint is intact. Free disk space (or choose another "
                            "output folder) and re-run the same command to resume.") from None

    def checkpoint_in_loop(self) -> None:
        """A checkpoint during the step loop: close the current stretch of ``train_time`` first,
        so the saved time is up to date, then flush TensorBoard and write ``checkpoint.pt``."""
        now = time.time()
        self.train_time += now - self._t_loop
        self._t_loop = now
        if self.writer is not None:
            self.writer.flush()
        self.save_checkpoint()

    def try_resume(self) -> bool:
        """Load ``checkpoint.pt`` of an unfinished run in the run directory, if there is one.

        Also truncates metrics.jsonl and shift.jsonl to the checkpoint's step, so a
        resumed run has no duplicated or missing records. Every replica loads the same file.

        Raises:
            CheckpointMismatch: the checkpoint is another config's, or was written with another
                number of replicas N (the run directory is left untouched).
        """
        path = self.run_dir / self.CHECKPOINT
        if not path.exists():
            return False
        try:
            state = torch.load(path, map_location=self.device, weights_only=False)
        except Exception as exc:  # unreadable: set aside (kept), every record and TB event cut, start over
            if self.is_main:  # (the other replicas read the same file and start over too)
                rundir.set_aside_unreadable_checkpoint(self.run_dir, f"{type(exc).__name__}: {exc}")
            return False
        if not isinstance(state, dict) or "step" not in state:
            if self.is_main:
                rundir.set_aside_unreadable_checkpoint(self.run_dir, "not a bnexp checkpoint")
            return False
        if state.get("config") != OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True):
            ignored = set(rundir.RESULT_NEUTRAL_KEYS)
            old = _flatten(state.get("config") or {})
            new = _flatten(OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True))
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in ignored)
            if changed:
                raise CheckpointMismatch(
                    f"the checkpoint in {self.run_dir} belongs to a run with a different config "
                    f"(differs in: {', '.join(changed)}); use a new run directory, or "
                    "trainer.resume=false to start this one over.")
        n_saved, n = int(state.get("world_size", 1)), self.replicas.world_size
        if n_saved != n:
            raise CheckpointMismatch(
                f"the checkpoint in {self.run_dir} was written by a run with {n_saved} replica(s); this one "
                f"has {n}. Resume it with the same number of processes (torchrun --nproc-per-node={n_saved} "
                "..., or no torchrun for 1 replica).")
        self.load_state_dict(state)
        self.resumed_from = self.step
        if self.is_main:
            for rec_log in self.logs.values():
                rec_log.rewrite()
        log.info("resumed from the checkpoint at step %d of %s", self.step, self.run_dir)
        return True

    # ----- logging ------------------------------------------------------------------
    def _open_writer(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        if self.resumed_from is None:
            self.writer = SummaryWriter(log_dir=str(self.run_dir))
            write_hparams_start(self.writer, self.hp, metric_names(self.targets))
            self.writer.add_custom_scalars(self.monitor.custom_scalars_layout(grad_ics=bool(self.cfg.monitor.grad_ics)))
            self.writer.add_text("config", "```\n" + OmegaConf.to_yaml(self.cfg) + "\n```", 0)
        else:
            # TensorBoard drops the events after the checkpoint from the earlier event files.
            self.writer = SummaryWriter(log_dir=str(self.run_dir), purge_step=self.resumed_from + 1)

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
            "precision": "bf16" if self.amp_dtype is not None else "fp32",
            "channels_last": self.channels_last,
            "replicas": self.replicas.world_size,
            "bn_sync": bool(cfg.bn.sync) if cfg.bn.enabled and self.replicas.distributed else None,
            "bn_ghost_batch_size": self.plan.ghost_batch_size,
        }

    # ----- the loop -----------------------------------------------------------------
    def run(self) -> dict:
        """Train to ``trainer.max_steps`` (from the checkpoint's step when resumed); write outputs.

        Each step: draw the global mini-batch -> the measurements due before the update ->
        forward (this replica's share), loss, backward, update -> the measurements due after
        it (:mod:`bnexp.measurements`) -> with N > 1 replicas, the per-step agreement.

        Returns:
            the summary written to ``summary.json``.

        Raises:
            Interrupted: after saving a checkpoint and recording status ``interrupted``
                (:class:`bnexp.preemption.Preempted` for the cluster's signal without requeue).
            SystemExit: from submitit, which requeues the job after the preemption checkpoint.
            UserError: a checkpoint could not be written.
        """
        cfg = self.cfg
        net, optimizer, scheduler, sampler = self.net, self.optimizer, self.scheduler, self.sampler
        summary = self._base_summary()
        if self.is_main:
            self._open_writer()
            log.info("model: %s, %d parameters, bn=%s act=%s lr=%g seed=%d, device %s, %d replica(s)",
                     cfg.model.name, summary["num_parameters"], cfg.bn.enabled, self.hp["act"], cfg.lr,
                     cfg.seed, self.device, self.replicas.world_size)
            rundir.write_json(self.run_dir / "summary.json", summary)
            rundir.write_text(self.run_dir / "config.yaml", OmegaConf.to_yaml(self.cfg, resolve=True))

        max_steps = self.max_steps
        train_x, train_y, augment = self.data.train_x, self.data.train_y, self.augment
        device, amp_dtype, channels_last = self.device, self.amp_dtype, self.channels_last
        schedule = Schedule(self.measurements, max_steps)
        # per-step (loss, logits, labels), left on the device for the train-loss measurement
        window = next(m for m in self.measurements if m.name == "train_loss").window
        status, diverged_step, interrupted, preempted = "finished", None, None, False
        self.progress = progress = Progress(cfg.trainer.progress and self.is_main, max_steps, self.step)
        progress.update(self.step)
        probes = self._probe_context()
        self.model.train()
        many = self.replicas.distributed
        rank, share = self.replicas.rank, self.plan.share
        lo, hi = rank * share, (rank + 1) * share
        self._t_loop = time.time()
        # a first SIGINT/SIGTERM stops the loop at the end of a step, never inside one
        with SignalGuard() as signals, PreemptionGuard() as preemption:
            try:
                if self.step == 0:
                    diverged_here = None
                    try:
                        with probes:
                            schedule.run_start(self)  # may raise Diverged at step 0
                    except Diverged as exc:
                        if not many:
                            raise
                        diverged_here = exc
                    if many and self.agree(False, False, diverged_here is not None)[2]:
                        raise diverged_here or Diverged(0, "a non-finite value on another replica")
                    self.model.train()
                schedule.reset(self.step)
                while self.step < max_steps:
                    if many:  # each replica its own dropout masks, reproducible after a resume
                        torch.manual_seed(distributed.step_seed(cfg.seed, rank, self.step))
                    idx = sampler.next()  # the global mini-batch: the same on every replica
                    x, y = train_x[idx], train_y[idx]
                    if augment is not None:
                        x = augment(x)
                    if self.step + 1 >= schedule.next_before:
                        with probes:
                            schedule.run_before(self, x, y)
                    if many:
                        x, y = x[lo:hi], y[lo:hi]  # this replica's share
                    if channels_last:
                        x = channels_last_input(x)
                    with autocast(device, amp_dtype):
                        logits = net(x)
                    logits = logits.float()  # no-op in fp32; the loss is computed in fp32
                    loss = nn.functional.cross_entropy(logits, y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    if scheduler is not None:
                        scheduler.step()
                    self.step += 1
                    window.append((loss.detach(), logits.detach(), y))
                    if not many:
                        if self.step >= schedule.next_after:
                            schedule.run_after(self)
                        if preemption.requested:
                            preempted = True
                            break
                        if signals.requested:
                            raise Interrupted(signals.signum)
                        continue
                    diverged_here = None
                    if self.step >= schedule.next_after:
                        if self.agree.buffers:  # per-replica BN statistics: measurements and the
                            self.agree()        # checkpoint see their average (repeated below: a no-op)
                        try:
                            with probes:
                                schedule.run_after(self)
                        except Diverged as exc:
                            diverged_here = exc
                    stop, preempted, diverged = self.agree(signals.requested, preemption.requested,
                                                           diverged_here is not None)
                    if diverged:
                        raise diverged_here or Diverged(self.step, "a non-finite value on another replica")
                    if preempted:
                        break
                    if stop:
                        raise Interrupted(signals.signum)
            except Diverged as exc:  # from any measurement (loss, parameters, pre-activations)
                status, diverged_step = "diverged", exc.step
                log.warning("training diverged: %s (lr=%g); stopping this run", exc, cfg.lr)
            except Interrupted as exc:
                interrupted = exc
            finally:
                progress.stop()
            self.train_time += time.time() - self._t_loop
            if preempted:
                self._finish_preempted(summary, preemption)
        if interrupted is not None:
            return self._finish_interrupted(summary, interrupted)
        schedule.finish(self)
        return self._finish(summary, status, diverged_step)

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
            self.writer.flush()
            self.writer.close()
            self.save_checkpoint()
            summary.update({"status": "interrupted", "step": self.step, "signal": sig.name,
                            "train_time_s": self.train_time, "wall_time_s": time.time() - self.t_start})
            rundir.write_json(self.run_dir / "summary.json", summary)
            preemption.hand_over()
        raise Preempted(sig)

    def _finish(self, summary: dict, status: str, diverged_step: int | None) -> dict:
        """Alg. 2 population statistics if asked, the final summary, hparams, the last checkpoint.

        Rank 0 only; another replica returns ``{"status", "step", "rank"}`` and writes nothing."""
        cfg = self.cfg
        if not self.is_main:
            return {"status": status, "step": self.step, "rank": self.replicas.rank}
        last = self.history[-1]
        final_acc, final_loss = last["test_accuracy"], last["test_loss"]
        extra: dict = {}
        pop = str(getattr(cfg.bn.population_stats, "value", cfg.bn.population_stats))
        if status == "finished" and cfg.bn.enabled and pop == "recompute":
            extra["final_test_accuracy_ema"] = final_acc
            train_x, batch_size = self.data.train_x, int(cfg.trainer.batch_size)
            rec_sampler = BatchSampler(len(self.data.train_y), batch_size, cfg.seed + 1, self.device)
            batches = (train_x[rec_sampler.next()] for _ in range(cfg.bn.recompute_batches))
            with self._probe_context():
                k = recompute_population_statistics(self.model, batches)
            final_loss, final_acc = evaluate(self.model, self.data.test_x, self.data.test_y,
                                             autocast_dtype=self.amp_dtype)
            self.writer.add_scalar("Test/accuracy_recomputed_population_stats", final_acc, self.step)
            log.info("population statistics recomputed over %d mini-batches (Alg. 2): test acc %.4f (ema: %.4f)",
                     k, final_acc, extra["final_test_accuracy_ema"])

        best = max(self.history, key=lambda r: r["test_accuracy"])
        steps_to_target = {f"{t:g}": rundir.first_reached(self.history, t) for t in self.targets}
        summary.update({
            "status": status, "step": self.step, "diverged_step": diverged_step,
            "final_test_accuracy": final_acc, "final_test_loss": final_loss,
            "best_test_accuracy": best["test_accuracy"], "best_step": best["step"],
            "targets": self.targets, "steps_to_target": steps_to_target,
            "population_stats": pop if cfg.bn.enabled else None, **extra,
            "train_time_s": self.train_time,
            "steps_per_s": self.step / self.train_time if self.train_time > 0 else None,
            "probe_time_s": {k: round(v, 3) for k, v in self.probe_time.items()},
        })
        write_hparams_end(self.writer, {
            "hparams/final_test_accuracy": final_acc, "hparams/best_test_accuracy": best["test_accuracy"],
            **{f"hparams/steps_to_{t:g}": steps_to_target[f"{t:g}"] for t in self.targets},
        }, self.step, not_reached=not_reached_value(cfg.trainer.max_steps))
        self.writer.close()
        if cfg.trainer.save_checkpoint and status == "finished":
            try:
                self.save_checkpoint()
            except UserError as exc:  # the run is complete: its summary must still be written
                log.warning("final checkpoint not saved: %s", exc)
        summary["wall_time_s"] = time.time() - self.t_start
        rundir.write_json(self.run_dir / "summary.json", summary)
        return summary

    def _finish_interrupted(self, summary: dict, exc: Interrupted) -> dict:
        if not self.is_main:
            raise exc
        log.warning("%s at step %d: saving a checkpoint; re-run the same command to resume", exc, self.step)
        self.writer.flush()
        self.writer.close()
        self.save_checkpoint()
        summary.update({"status": "interrupted", "step": self.step, "signal": str(exc),
                        "train_time_s": self.train_time, "wall_time_s": time.time() - self.t_start})
        rundir.write_json(self.run_dir / "summary.json", summary)
        raise exc


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def train(cfg: DictConfig, run_dir: Path, resume: bool = True) -> dict:
    """Run one training run in ``run_dir``, resuming an unfinished run's checkpoint if asked.

    Args:
        cfg: a composed and validated :class:`bnexp.config.Config`.
        run_dir: the run directory.
        resume: continue from ``run_dir/checkpoint.pt`` when present.

    Returns:
        the summary dict written to ``summary.json`` (status ``finished`` or ``diverged``).

    Raises:
        UserError: bad data, device or probe size; a checkpoint that cannot be written.
        Interrupted: SIGINT/SIGTERM, after a checkpoint and status ``interrupted`` were saved.
    """
    trainer = Trainer(cfg, run_dir)
    if resume:
        trainer.try_resume()
    return trainer.run()
