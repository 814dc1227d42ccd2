"""The step-based training loop, with the covariate-shift monitor beside it.

One call of :func:`train` is one run: it loads the data onto the device, builds
the network, trains for ``trainer.max_steps`` mini-batch SGD steps, evaluates on
the full test set every ``trainer.eval_every`` steps, records the shift monitor
every ``trainer.hist_every`` steps, and writes the run directory (see
:mod:`bnexp.rundir`). A non-finite loss or parameter stops the run with status
``diverged``; the function then returns normally, so a sweep goes on.
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from bnexp import rundir
from bnexp.bn import bn_layers, recompute_population_statistics
from bnexp.data import BatchSampler, load_data
from bnexp.errors import ConfigError
from bnexp.models import build_model
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
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int = 5000) -> tuple[float, float]:
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


def _first_reached(history: list[dict], target: float) -> int | None:
    for rec in history:
        if rec["test_accuracy"] >= target:
            return rec["step"]
    return None


def train(cfg: DictConfig, run_dir: Path) -> dict:
    """Run one training run and write its outputs into ``run_dir``.

    Args:
        cfg: a composed and validated :class:`bnexp.config.Config`.
        run_dir: the run directory (created if needed).

    Returns:
        the summary dict also written to ``summary.json``: status (``finished`` or
        ``diverged``), step, final/best test accuracy, steps_to_target, wall time, steps/s.

    Raises:
        UserError: data missing or corrupt, device unavailable, output folder not writable.
        KeyboardInterrupt: after recording status ``interrupted``.
    """
    t_start = time.time()
    run_dir = Path(run_dir)
    tcfg = cfg.trainer
    if tcfg.num_threads > 0:
        torch.set_num_threads(tcfg.num_threads)
    device = resolve_device(tcfg.device)
    seed_everything(cfg.seed)

    data = load_data(cfg.data, device)
    if tcfg.probe_size > len(data.test_y):
        raise ConfigError("trainer.probe_size", tcfg.probe_size,
                          f"must be <= the test-set size ({len(data.test_y)})")
    model = build_model(cfg, data.input_shape, data.num_classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.optim.momentum,
                                nesterov=cfg.optim.nesterov, weight_decay=cfg.optim.weight_decay)
    schedule = str(getattr(cfg.optim.schedule, "value", cfg.optim.schedule))
    scheduler = (None if schedule == "constant" else torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_lambda(schedule, cfg.optim.decay_rate, cfg.optim.decay_steps)))
    sampler = BatchSampler(len(data.train_y), tcfg.batch_size, cfg.seed, device)
    monitor = ShiftMonitor(model, data.test_x[:tcfg.probe_size], list(cfg.monitor.percentiles),
                           cfg.monitor.unit, cfg.monitor.histograms, cfg.monitor.max_values)

    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(run_dir))
    hp = flat_hparams(cfg)
    targets = sorted(float(t) for t in tcfg.targets)
    write_hparams_start(writer, hp, metric_names(targets))
    writer.add_custom_scalars(monitor.custom_scalars_layout())
    writer.add_text("config", "```\n" + OmegaConf.to_yaml(cfg) + "\n```", 0)
    n_params = sum(p.numel() for p in model.parameters())
    log.info("model: %s, %d parameters, bn=%s act=%s lr=%g seed=%d, device %s", cfg.model.name, n_params,
             cfg.bn.enabled, hp["act"], cfg.lr, cfg.seed, device)

    metrics_path = run_dir / "metrics.jsonl"
    shift_path = run_dir / "shift.jsonl"
    history: list[dict] = []
    summary = {
        "status": "running", "step": 0, "max_steps": int(tcfg.max_steps), "run_dir": str(run_dir),
        "bn": bool(cfg.bn.enabled), "act": hp["act"], "lr": float(cfg.lr), "seed": int(cfg.seed),
        "model": str(cfg.model.name), "data": str(cfg.data.name), "batch_size": int(tcfg.batch_size),
        "device": str(device), "num_parameters": n_params,
    }
    rundir.write_json(run_dir / "summary.json", summary)

    def do_eval(step: int, train_loss: float | None, train_acc: float | None) -> dict:
        test_loss, test_acc = evaluate(model, data.test_x, data.test_y)
        rec = {"step": step, "epoch": sampler.epoch, "test_loss": test_loss, "test_accuracy": test_acc,
               "train_loss": train_loss, "train_accuracy": train_acc,
               "lr": optimizer.param_groups[0]["lr"], "wall_time_s": time.time() - t_start}
        history.append(rec)
        rundir.append_jsonl(metrics_path, rec)
        writer.add_scalar("test/loss", test_loss, step)
        writer.add_scalar("test/accuracy", test_acc, step)
        writer.add_scalar("train/learning_rate", rec["lr"], step)
        return rec

    def do_monitor(step: int) -> None:
        rec = monitor.record(step, writer)
        rundir.append_jsonl(shift_path, rec)

    status, diverged_step = "finished", None
    # Plain Python ints: reading a DictConfig attribute inside the step loop costs microseconds.
    max_steps, batch_size = int(tcfg.max_steps), int(tcfg.batch_size)
    log_every, eval_every, hist_every = int(tcfg.log_every), int(tcfg.eval_every), int(tcfg.hist_every)
    use_scheduler = scheduler is not None
    progress = _Progress(tcfg.progress, max_steps)
    last = do_eval(0, None, None)
    do_monitor(0)
    model.train()
    # Per-step losses and (logits, labels) stay on the device until the next log point,
    # so the step itself does no extra arithmetic and no device-to-host transfer.
    log_losses: list[torch.Tensor] = []
    log_outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
    ev_loss_sum = ev_correct = 0.0
    ev_n = 0
    train_x, train_y = data.train_x, data.train_y
    t_loop = time.time()
    step = 0
    try:
        for step in range(1, max_steps + 1):
            idx = sampler.next()
            x, y = train_x[idx], train_y[idx]
            logits = model(x)
            loss = nn.functional.cross_entropy(logits, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if use_scheduler:
                scheduler.step()
            log_losses.append(loss.detach())
            log_outputs.append((logits.detach(), y))

            if step % log_every == 0 or step == max_steps:
                n = len(log_losses)
                loss_sum = float(torch.stack(log_losses).sum())
                with torch.no_grad():
                    correct = float(sum((lg.argmax(1) == yy).sum() for lg, yy in log_outputs))
                log_losses.clear()
                log_outputs.clear()
                if not math.isfinite(loss_sum):
                    status, diverged_step = "diverged", step
                    log.warning("training diverged: non-finite loss at step %d (lr=%g); stopping this run",
                                step, cfg.lr)
                    break
                writer.add_scalar("train/loss", loss_sum / n, step)
                writer.add_scalar("train/accuracy", correct / (n * batch_size), step)
                ev_loss_sum += loss_sum
                ev_correct += correct
                ev_n += n
                progress.update(step, loss=loss_sum / n, sps=step / max(time.time() - t_loop, 1e-9))
            if step % eval_every == 0 or step == max_steps:
                if not _params_finite(model):
                    status, diverged_step = "diverged", step
                    log.warning("training diverged: non-finite parameters at step %d; stopping this run", step)
                    break
                train_loss = ev_loss_sum / ev_n if ev_n else None
                train_acc = ev_correct / (ev_n * batch_size) if ev_n else None
                last = do_eval(step, train_loss, train_acc)
                ev_loss_sum = ev_correct = 0.0
                ev_n = 0
                progress.update(step, acc=f"{last['test_accuracy']:.4f}")
                if not tcfg.progress:
                    log.info("step %d/%d  test acc %.4f  test loss %.4f  train loss %s", step, max_steps,
                             last["test_accuracy"], last["test_loss"],
                             f"{train_loss:.4f}" if train_loss is not None else "-")
            if step % hist_every == 0:
                do_monitor(step)
    except KeyboardInterrupt:
        status = "interrupted"
        log.warning("interrupted at step %d", step)
    finally:
        progress.stop()
    train_time = time.time() - t_loop
    steps_done = step

    final_acc, final_loss = last["test_accuracy"], last["test_loss"]
    summary_extra: dict = {}
    if status == "finished" and cfg.bn.enabled and str(getattr(cfg.bn.population_stats, "value",
                                                               cfg.bn.population_stats)) == "recompute":
        summary_extra["final_test_accuracy_ema"] = final_acc
        rec_sampler = BatchSampler(len(data.train_y), tcfg.batch_size, cfg.seed + 1, device)
        batches = (data.train_x[rec_sampler.next()] for _ in range(cfg.bn.recompute_batches))
        k = recompute_population_statistics(model, batches)
        final_loss, final_acc = evaluate(model, data.test_x, data.test_y)
        writer.add_scalar("test/accuracy_recomputed_population_stats", final_acc, steps_done)
        log.info("population statistics recomputed over %d mini-batches (Alg. 2): test acc %.4f (ema: %.4f)",
                 k, final_acc, summary_extra["final_test_accuracy_ema"])

    if status != "interrupted" and steps_done > 0 and (not monitor.history or
                                                       monitor.history[-1]["step"] != steps_done):
        if status == "finished":
            do_monitor(steps_done)
    best = max(history, key=lambda r: r["test_accuracy"])
    steps_to_target = {f"{t:g}": _first_reached(history, t) for t in targets}
    summary.update({
        "status": status, "step": steps_done, "diverged_step": diverged_step,
        "final_test_accuracy": final_acc, "final_test_loss": final_loss,
        "best_test_accuracy": best["test_accuracy"], "best_step": best["step"],
        "targets": targets, "steps_to_target": steps_to_target,
        "population_stats": str(getattr(cfg.bn.population_stats, "value", cfg.bn.population_stats))
        if cfg.bn.enabled else None,
        **summary_extra,
        "wall_time_s": time.time() - t_start, "train_time_s": train_time,
        "steps_per_s": steps_done / train_time if train_time > 0 else None,
    })
    if monitor.history and status != "interrupted":
        try:
            fig = monitor.figure(f"bn={cfg.bn.enabled} act={hp['act']} lr={cfg.lr:g} seed={cfg.seed}")
            fig.savefig(run_dir / "percentiles.png", dpi=100)
            writer.add_figure("shift/percentile_bands", fig, steps_done)
        except ValueError:
            pass
    write_hparams_end(writer, {
        "hparams/final_test_accuracy": final_acc, "hparams/best_test_accuracy": best["test_accuracy"],
        **{f"hparams/steps_to_{t:g}": steps_to_target[f"{t:g}"] for t in targets},
    }, steps_done)
    writer.close()
    if tcfg.save_checkpoint and status != "diverged":
        rundir.save_checkpoint(run_dir / "checkpoint.pt", {
            "step": steps_done, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None, "sampler": sampler.state_dict(),
            "config": OmegaConf.to_container(cfg, resolve=True, enum_to_str=True),
            "bn_layers": len(bn_layers(model)),
        })
    summary["wall_time_s"] = time.time() - t_start
    rundir.write_json(run_dir / "summary.json", summary)
    if status == "interrupted":
        raise KeyboardInterrupt
    return summary
