"""The step-based training loop, with the covariate-shift monitor beside it.

One call of :func:`train` is one run: it loads the data onto the device, builds
the network, trains for ``trainer.max_steps`` mini-batch SGD steps, evaluates on
the full test set every ``trainer.eval_every`` steps, records the shift monitor
every ``trainer.hist_every`` steps, and writes the run directory (see
:mod:`bnexp.rundir`).

Reliability: every ``trainer.ckpt_every`` steps and at the end the complete state
(model with BN running statistics, optimizer, scheduler, every RNG, the mini-batch
sampler's permutation and position, the shift monitor, metrics so far) is written
atomically to ``checkpoint.pt``; a run started in a directory holding an unfinished
run's checkpoint continues from it and ends bit-identical (on CPU) to an
uninterrupted run. SIGINT/SIGTERM save a checkpoint and record ``interrupted``.
A non-finite loss or parameter stops the run with status ``diverged``; the function
then returns normally, so a sweep goes on.
"""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from bnexp import rundir
from bnexp.bn import recompute_population_statistics
from bnexp.data import BatchSampler, load_data, make_augmenter
from bnexp.errors import ConfigError, UserError
from bnexp.models import build_model
from bnexp.models import hidden_layers as hidden_layers_of
from bnexp.monitor import ShiftMonitor
from bnexp.tblog import flat_hparams, metric_names, write_hparams_end, write_hparams_start

log = logging.getLogger("bnexp")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda if available, else cpu; other names as given.

    Raises:
        ConfigError: when the named device is not available on this machine.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("trainer.device", name, "CUDA is not available on this machine; use auto or cpu")
    if name == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("trainer.device", name, "MPS is not available on this machine; use auto or cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA) generators."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def lr_lambda(schedule: str, decay_rate: float, decay_steps: int):
    """Multiplier of the base learning rate at a step: constant, exponential or step decay."""
    if schedule == "exponential":
        return lambda step: decay_rate ** (step / decay_steps)
    if schedule == "step":
        return lambda step: decay_rate ** (step // decay_steps)
    return lambda step: 1.0


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 500) -> tuple[float, float]:
    """Mean cross-entropy loss and accuracy of ``model`` in eval mode on (x, y).

    Args:
        x: (N, C, H, W) inputs; y: (N,) labels.

    Returns:
        (loss in nats, accuracy in [0, 1]).
    """
    was_training = model.training
    model.eval()
    loss_sum = torch.zeros((), device=x.device)
    correct = torch.zeros((), device=x.device, dtype=torch.long)
    for i in range(0, len(y), chunk):
        logits = model(x[i:i + chunk])
        loss_sum += nn.functional.cross_entropy(logits, y[i:i + chunk], reduction="sum")
        correct += (logits.argmax(1) == y[i:i + chunk]).sum()
    model.train(was_training)
    return float(loss_sum) / len(y), float(correct) / len(y)


def _params_finite(model: nn.Module) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


class _Progress:
    """A rich progress bar (step, steps/s, ETA, loss, latest test accuracy), or nothing."""

    def __init__(self, enabled: bool, total: int):
        self.enabled = enabled
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        import rich

        console: Console = rich.get_console()
        self.progress = Progress(
            TextColumn("step"), MofNCompleteColumn(), BarColumn(),
            TextColumn("{task.fields[sps]:>6.0f} steps/s"), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("loss {task.fields[loss]:.4f}"), TextColumn("test acc {task.fields[acc]}"),
            console=console, transient=False, refresh_per_second=4,
        )
        self.task = self.progress.add_task("train", total=total, sps=0.0, loss=float("nan"), acc="-")
        self.progress.start()

    def update(self, step: int, **fields) -> None:
        if self.enabled:
            self.progress.update(self.task, completed=step, **fields)

    def stop(self) -> None:
        if self.enabled:
            self.progress.stop()


class Interrupted(Exception):
    """Raised inside the step loop by SIGINT/SIGTERM; carries the signal number."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _SignalGuard:
    """Context: the first SIGINT/SIGTERM raises :class:`Interrupted` in the step loop (so a
    checkpoint is saved); a second one exits at once. Only in the main thread."""

    def __enter__(self):
        self.saved = {}
        try:
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self._first)
        except ValueError:  # not the main thread (e.g. some launchers): leave signals alone
            self.saved = {}
        return self

    def _first(self, signum, frame):
        for sig in self.saved:
            signal.signal(sig, self._second)
        raise Interrupted(signum)

    @staticmethod
    def _second(signum, frame):
        os._exit(128 + signum)

    def __exit__(self, *exc):
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        return False


def _rng_state(device: torch.device) -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict, device: torch.device) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


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
        if tcfg.num_threads > 0:
            torch.set_num_threads(tcfg.num_threads)
        self.device = resolve_device(tcfg.device)
        seed_everything(cfg.seed)
        self.data = load_data(cfg.data, self.device)
        if tcfg.probe_size > len(self.data.test_y):
            raise ConfigError("trainer.probe_size", tcfg.probe_size,
                              f"must be <= the test-set size ({len(self.data.test_y)})")
        self.model = build_model(cfg, self.data.input_shape, self.data.num_classes).to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=cfg.lr, momentum=cfg.optim.momentum,
                                         nesterov=cfg.optim.nesterov, weight_decay=cfg.optim.weight_decay)
        schedule = str(getattr(cfg.optim.schedule, "value", cfg.optim.schedule))
        self.scheduler = (None if schedule == "constant" else torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lr_lambda(schedule, cfg.optim.decay_rate, cfg.optim.decay_steps)))
        self.sampler = BatchSampler(len(self.data.train_y), tcfg.batch_size, cfg.seed, self.device)
        self.augment = make_augmenter(cfg.data, cfg.seed, self.device)
        self.monitor = ShiftMonitor(self.model, self.data.test_x[:tcfg.probe_size], list(cfg.monitor.percentiles),
                                    cfg.monitor.unit, cfg.monitor.histograms, cfg.monitor.max_values,
                                    cfg.monitor.shift_metrics, cfg.monitor.shift_max_values)
        self.targets = sorted(float(t) for t in tcfg.targets)
        self.hp = flat_hparams(cfg)
        # progress of the run (all of it goes into checkpoints)
        self.step = 0
        self.history: list[dict] = []
        self.ev_loss_sum = 0.0
        self.ev_correct = 0.0
        self.ev_n = 0
        self.log_losses: list[torch.Tensor] = []
        self.log_outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.train_time = 0.0  # seconds in the step loop, summed over resumptions
        # seconds spent in each measurement (inside train_time), reported separately in summary.json
        self.probe_time = {"eval": 0.0, "monitor": 0.0, "grad_ics": 0.0, "landscape": 0.0}
        self.ics_history: list[dict] = []  # gradient-ICS and landscape records (ics.jsonl)
        self.resumed_from: int | None = None
        self.writer = None

    # ----- checkpoints -------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to continue this run exactly."""
        return {
            "step": self.step,
            "model": self.model.state_dict(),  # includes BN running statistics
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "sampler": self.sampler.state_dict(),
            "augment": self.augment.state_dict() if self.augment is not None else None,
            "rng": _rng_state(self.device),
            "monitor": self.monitor.state_dict(),
            "history": list(self.history),
            "accumulators": {"ev_loss_sum": self.ev_loss_sum, "ev_correct": self.ev_correct, "ev_n": self.ev_n,
                             "log_losses": [t.cpu() for t in self.log_losses],
                             "log_outputs": [(a.cpu(), b.cpu()) for a, b in self.log_outputs]},
            "train_time": self.train_time,
            "probe_time": dict(self.probe_time),
            "ics_history": list(self.ics_history),
            "noise": [m.noise_state() for m in self._noisy_layers()],
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
        _set_rng_state(state["rng"], self.device)
        self.monitor.load_state_dict(state["monitor"])
        self.history = list(state["history"])
        acc = state["accumulators"]
        self.ev_loss_sum, self.ev_correct, self.ev_n = acc["ev_loss_sum"], acc["ev_correct"], acc["ev_n"]
        self.log_losses = [t.to(self.device) for t in acc["log_losses"]]
        self.log_outputs = [(a.to(self.device), b.to(self.device)) for a, b in acc["log_outputs"]]
        self.train_time = float(state["train_time"])
        self.probe_time = dict(state.get("probe_time", self.probe_time))
        self.ics_history = list(state.get("ics_history", []))
        for m, ns in zip(self._noisy_layers(), state.get("noise", [])):
            m.load_noise_state(ns)

    def _noisy_layers(self) -> list:
        from bnexp.bn import NoisyBatchNorm

        return [m for m in self.model.modules() if isinstance(m, NoisyBatchNorm)]

    def save_checkpoint(self) -> None:
        """Write ``checkpoint.pt`` atomically; on failure the previous checkpoint stays.

        Raises:
            UserError: the disk is full or the folder is not writable.
        """
        try:
            rundir.save_checkpoint(self.run_dir / self.CHECKPOINT, self.state_dict())
        except OSError as exc:
            raise UserError(f"could not write the checkpoint in {self.run_dir} ({exc.strerror or exc}); "
                            "the previous checkpoint is intact. Free disk space (or choose another "
                            "output folder) and re-run the same command to resume.") from None

    def try_resume(self) -> bool:
        """Load ``checkpoint.pt`` of an unfinished run in the run directory, if there is one.

        Also truncates metrics.jsonl and shift.jsonl to the checkpoint's step, so a
        resumed run has no duplicated or missing records.
        """
        path = self.run_dir / self.CHECKPOINT
        if not path.exists():
            return False
        try:
            state = torch.load(path, map_location=self.device, weights_only=False)
        except Exception as exc:  # unreadable checkpoint: start over, say so
            log.warning("checkpoint %s is unreadable (%s): starting the run from scratch", path, exc)
            return False
        if state.get("config") != OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True):
            ignored = {"trainer.progress", "trainer.num_threads", "trainer.device", "trainer.resume",
                       "data.root", "data.download"}
            old = _flatten(state.get("config") or {})
            new = _flatten(OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True))
            changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k) and k not in ignored)
            if changed:
                raise UserError(f"the checkpoint in {self.run_dir} belongs to a run with a different config "
                                f"(differs in: {', '.join(changed)}); use a new run directory, or "
                                "trainer.resume=false to start this one over.")
        self.load_state_dict(state)
        self.resumed_from = self.step
        rundir.write_jsonl(self.run_dir / "metrics.jsonl", self.history)
        rundir.write_jsonl(self.run_dir / "shift.jsonl", self.monitor.history)
        rundir.write_jsonl(self.run_dir / "ics.jsonl", self.ics_history)
        log.info("resumed from the checkpoint at step %d of %s", self.step, self.run_dir)
        return True

    # ----- logging ------------------------------------------------------------------
    def _open_writer(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        if self.resumed_from is None:
            self.writer = SummaryWriter(log_dir=str(self.run_dir))
            write_hparams_start(self.writer, self.hp, metric_names(self.targets))
            self.writer.add_custom_scalars(self.monitor.custom_scalars_layout())
            self.writer.add_text("config", "```\n" + OmegaConf.to_yaml(self.cfg) + "\n```", 0)
        else:
            # TensorBoard drops the events after the checkpoint from the earlier event files.
            self.writer = SummaryWriter(log_dir=str(self.run_dir), purge_step=self.resumed_from + 1)

    def _evaluate(self, train_loss: float | None, train_acc: float | None) -> dict:
        t0 = time.time()
        test_loss, test_acc = evaluate(self.model, self.data.test_x, self.data.test_y)
        self.probe_time["eval"] += time.time() - t0
        rec = {"step": self.step, "epoch": self.sampler.epoch, "test_loss": test_loss, "test_accuracy": test_acc,
               "train_loss": train_loss, "train_accuracy": train_acc,
               "lr": self.optimizer.param_groups[0]["lr"], "wall_time_s": time.time() - self.t_start}
        self.history.append(rec)
        rundir.append_jsonl(self.run_dir / "metrics.jsonl", rec)
        self.writer.add_scalar("test/loss", test_loss, self.step)
        self.writer.add_scalar("test/accuracy", test_acc, self.step)
        self.writer.add_scalar("train/learning_rate", rec["lr"], self.step)
        return rec

    def _record_shift(self) -> None:
        t0 = time.time()
        rec = self.monitor.record(self.step, self.writer)
        rundir.append_jsonl(self.run_dir / "shift.jsonl", rec)
        self.probe_time["monitor"] += time.time() - t0

    def _grad_ics(self, x: torch.Tensor, y: torch.Tensor, step: int) -> None:
        """Gradient-based ICS (Santurkar et al. 2018, Def. 2.1) on this step's mini-batch, before
        its update; logged as ``grad_ics/<layer>/{l2,cos}`` and an ``ics.jsonl`` record."""
        from bnexp.ics import gradient_ics, layer_param_groups

        t0 = time.time()
        groups, weights = layer_param_groups(self.model)
        res = gradient_ics(self.model, nn.functional.cross_entropy, x, y, self.optimizer, groups, weights)
        names = [name for name, _ in hidden_layers_of(self.model)] + ["classifier"]
        layers = {name: r for name, r in zip(names, res)}
        for name, r in layers.items():
            self.writer.add_scalar(f"grad_ics/{name}/l2", r["l2"], step)
            self.writer.add_scalar(f"grad_ics/{name}/cos", r["cos"], step)
        rec = {"step": step, "kind": "grad_ics", "layers": layers}
        self.ics_history.append(rec)
        rundir.append_jsonl(self.run_dir / "ics.jsonl", rec)
        self.probe_time["grad_ics"] += time.time() - t0

    def _landscape(self, x: torch.Tensor, y: torch.Tensor, step: int) -> None:
        """Loss-landscape smoothness (Santurkar et al. 2018, Sec. 3.1) along the gradient, with
        step sizes = ``monitor.landscape_step_sizes`` x the current learning rate."""
        from bnexp.ics import landscape_probe

        t0 = time.time()
        lr = self.optimizer.param_groups[0]["lr"]
        res = landscape_probe(self.model, nn.functional.cross_entropy, x, y,
                              [m * lr for m in self.cfg.monitor.landscape_step_sizes])
        for k in ("loss_variation", "grad_predictiveness", "beta_smoothness"):
            self.writer.add_scalar(f"landscape/{k}", res[k], step)
        rec = {"step": step, "kind": "landscape", **res}
        self.ics_history.append(rec)
        rundir.append_jsonl(self.run_dir / "ics.jsonl", rec)
        self.probe_time["landscape"] += time.time() - t0

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
        }

    # ----- the loop -----------------------------------------------------------------
    def run(self) -> dict:
        """Train to ``trainer.max_steps`` (from the checkpoint's step when resumed); write outputs.

        Returns:
            the summary written to ``summary.json``.

        Raises:
            Interrupted: after saving a checkpoint and recording status ``interrupted``.
            UserError: a checkpoint could not be written.
        """
        cfg, tcfg = self.cfg, self.cfg.trainer
        model, optimizer, scheduler, sampler = self.model, self.optimizer, self.scheduler, self.sampler
        self._open_writer()
        log.info("model: %s, %d parameters, bn=%s act=%s lr=%g seed=%d, device %s", cfg.model.name,
                 sum(p.numel() for p in model.parameters()), cfg.bn.enabled, self.hp["act"], cfg.lr, cfg.seed,
                 self.device)
        summary = self._base_summary()
        rundir.write_json(self.run_dir / "summary.json", summary)
        rundir.atomic_write_bytes(self.run_dir / "config.yaml", OmegaConf.to_yaml(self.cfg, resolve=True).encode())

        # Plain Python ints: reading a DictConfig attribute inside the step loop costs microseconds.
        max_steps, batch_size = int(tcfg.max_steps), int(tcfg.batch_size)
        log_every, eval_every, hist_every = int(tcfg.log_every), int(tcfg.eval_every), int(tcfg.hist_every)
        ckpt_every = int(tcfg.ckpt_every)
        train_x, train_y, augment = self.data.train_x, self.data.train_y, self.augment
        mcfg = cfg.monitor
        grad_ics_every = int(mcfg.grad_ics_every) if mcfg.grad_ics else 0
        landscape_every = int(mcfg.landscape_every) if mcfg.landscape else 0
        status, diverged_step, interrupted = "finished", None, None
        progress = _Progress(tcfg.progress, max_steps)
        progress.update(self.step)
        if self.step == 0:
            self._evaluate(None, None)
            self._record_shift()
        last = self.history[-1]
        model.train()
        t_loop = time.time()
        steps_at_start = self.step
        with _SignalGuard():
            try:
                while self.step < max_steps:
                    idx = sampler.next()
                    x, y = train_x[idx], train_y[idx]
                    if augment is not None:
                        x = augment(x)
                    if grad_ics_every and (self.step + 1) % grad_ics_every == 0:
                        self._grad_ics(x, y, self.step + 1)
                    if landscape_every and (self.step + 1) % landscape_every == 0:
                        self._landscape(x, y, self.step + 1)
                    logits = model(x)
                    loss = nn.functional.cross_entropy(logits, y)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    if scheduler is not None:
                        scheduler.step()
                    self.step += 1
                    step = self.step
                    # Per-step losses and (logits, labels) stay on the device until the next log
                    # point, so the step itself does no extra arithmetic and no host transfer.
                    self.log_losses.append(loss.detach())
                    self.log_outputs.append((logits.detach(), y))

                    if step % log_every == 0 or step == max_steps:
                        n = len(self.log_losses)
                        loss_sum = float(torch.stack(self.log_losses).sum())
                        with torch.no_grad():
                            correct = float(sum((lg.argmax(1) == yy).sum() for lg, yy in self.log_outputs))
                        self.log_losses.clear()
                        self.log_outputs.clear()
                        if not math.isfinite(loss_sum):
                            status, diverged_step = "diverged", step
                            log.warning("training diverged: non-finite loss at step %d (lr=%g); stopping "
                                        "this run", step, cfg.lr)
                            break
                        self.writer.add_scalar("train/loss", loss_sum / n, step)
                        self.writer.add_scalar("train/accuracy", correct / (n * batch_size), step)
                        self.ev_loss_sum += loss_sum
                        self.ev_correct += correct
                        self.ev_n += n
                        progress.update(step, loss=loss_sum / n,
                                        sps=(step - steps_at_start) / max(time.time() - t_loop, 1e-9))
                    if step % eval_every == 0 or step == max_steps:
                        if not _params_finite(model):
                            status, diverged_step = "diverged", step
                            log.warning("training diverged: non-finite parameters at step %d; stopping "
                                        "this run", step)
                            break
                        n = self.ev_n
                        train_loss = self.ev_loss_sum / n if n else None
                        train_acc = self.ev_correct / (n * batch_size) if n else None
                        last = self._evaluate(train_loss, train_acc)
                        self.ev_loss_sum = self.ev_correct = 0.0
                        self.ev_n = 0
                        progress.update(step, acc=f"{last['test_accuracy']:.4f}")
                        if not tcfg.progress:
                            log.info("step %d/%d  test acc %.4f  test loss %.4f  train loss %s", step, max_steps,
                                     last["test_accuracy"], last["test_loss"],
                                     f"{train_loss:.4f}" if train_loss is not None else "-")
                    if step % hist_every == 0 or step == max_steps:
                        self._record_shift()
                    if step % ckpt_every == 0 and step < max_steps:
                        self.train_time += time.time() - t_loop
                        t_loop = time.time()
                        steps_at_start = step
                        self.writer.flush()
                        self.save_checkpoint()
            except Interrupted as exc:
                interrupted = exc
            finally:
                progress.stop()
        self.train_time += time.time() - t_loop

        if interrupted is not None:
            return self._finish_interrupted(summary, interrupted)

        final_acc, final_loss = last["test_accuracy"], last["test_loss"]
        extra: dict = {}
        pop = str(getattr(cfg.bn.population_stats, "value", cfg.bn.population_stats))
        if status == "finished" and cfg.bn.enabled and pop == "recompute":
            extra["final_test_accuracy_ema"] = final_acc
            rec_sampler = BatchSampler(len(train_y), batch_size, cfg.seed + 1, self.device)
            batches = (train_x[rec_sampler.next()] for _ in range(cfg.bn.recompute_batches))
            k = recompute_population_statistics(model, batches)
            final_loss, final_acc = evaluate(model, self.data.test_x, self.data.test_y)
            self.writer.add_scalar("test/accuracy_recomputed_population_stats", final_acc, self.step)
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
        if self.monitor.history:
            fig = self.monitor.figure(f"bn={cfg.bn.enabled} act={self.hp['act']} lr={cfg.lr:g} seed={cfg.seed}")
            fig.savefig(self.run_dir / "percentiles.png", dpi=100)
            self.writer.add_figure("shift/percentile_bands", fig, self.step)
        write_hparams_end(self.writer, {
            "hparams/final_test_accuracy": final_acc, "hparams/best_test_accuracy": best["test_accuracy"],
            **{f"hparams/steps_to_{t:g}": steps_to_target[f"{t:g}"] for t in self.targets},
        }, self.step)
        self.writer.close()
        if tcfg.save_checkpoint and status == "finished":
            self.save_checkpoint()
        summary["wall_time_s"] = time.time() - self.t_start
        rundir.write_json(self.run_dir / "summary.json", summary)
        return summary

    def _finish_interrupted(self, summary: dict, exc: Interrupted) -> dict:
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
