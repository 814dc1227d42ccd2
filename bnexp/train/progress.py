"""The progress bar of a run (``trainer.progress``): a live rich bar, or labelled progress lines when the
run shares its terminal with the other jobs of a parallel sweep."""

from __future__ import annotations

import datetime
import time


def shares_terminal() -> bool:
    """True in a parallel sweep's job: a process started by another (Hydra's joblib launcher runs each job in a
    worker process), whose terminal other jobs write to at the same time."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


class Progress:
    """A rich progress bar (step, steps/s, ETA, loss, latest test accuracy), plain progress lines, or nothing.

    The bar fits an 80-column terminal up to 1,000,000 steps (``step 49500/50000 ━━━━━━━ 850/s ETA 0:00:52 loss
    0.1234 test acc 0.9712``); loss and accuracy read ``-`` until their first value (no NaN before the first
    logged loss). A run that shares the terminal with other runs (a parallel sweep's job: ``label`` set) prints
    instead one line per tenth of its steps, led by its label (``bn=true,seed=1: step 2000/4000 (50%), 850/s,
    ETA 0:00:02, loss 0.1234, test acc 0.9712``): two live bars on one terminal overwrite each other.

    Args:
        enabled: show it (``trainer.progress``).
        total: ``trainer.max_steps``.
        start: the step the run starts (or resumes) at; steps/s count from there.
        console: the rich console to draw on (default: rich's global console, i.e. the terminal).
        label: the run's name (its folder's), for plain lines; None: the live bar.
    """

    BAR_WIDTH = 7  # columns of the bar itself
    LINES = 10  # plain lines per run (one per tenth of its steps), besides the first

    def __init__(self, enabled: bool, total: int, start: int = 0, console=None, label: str | None = None):
        self.enabled, self.label, self.total = enabled, label, total
        self.t0, self.step0 = time.time(), start
        self.fields = {"sps": "-", "loss": "-", "acc": "-"}
        self.next_line = start
        if not enabled:
            return
        import rich

        self.console = console or rich.get_console()
        if label is not None:
            self._line(start)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("step"), MofNCompleteColumn(), BarColumn(bar_width=self.BAR_WIDTH),
            TextColumn("{task.fields[sps]}/s"), TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("test acc {task.fields[acc]}"),
            console=self.console, transient=False, refresh_per_second=4,
        )
        self.task = self.progress.add_task("train", total=total, completed=start, **self.fields)
        self.progress.start()

    def update(self, step: int, **fields) -> None:
        """Move to ``step``; ``loss=`` (a float; also refreshes steps/s) and ``acc=`` (text) set those
        columns."""
        if not self.enabled:
            return
        if "loss" in fields:
            fields["sps"] = f"{(step - self.step0) / max(time.time() - self.t0, 1e-9):.0f}"
            fields["loss"] = f"{fields['loss']:.4f}"
        self.fields.update(fields)
        if self.label is None:
            self.progress.update(self.task, completed=step, **fields)
        elif step >= self.next_line:
            self._line(step)

    def _line(self, step: int) -> None:
        """One plain progress line, and the step of the next one (the next tenth of the run)."""
        f = self.fields
        eta = "-"
        if f["sps"] != "-" and float(f["sps"]) > 0:
            eta = str(datetime.timedelta(seconds=round((self.total - step) / float(f["sps"]))))
        self.console.print(f"{self.label}: step {step}/{self.total} ({100 * step / max(self.total, 1):.0f}%), "
                           f"{f['sps']}/s, ETA {eta}, loss {f['loss']}, test acc {f['acc']}",
                           markup=False, highlight=False, soft_wrap=True)
        tenth = max(1, self.total // self.LINES)
        self.next_line = (step // tenth + 1) * tenth

    def stop(self) -> None:
        """Remove the bar (idempotent)."""
        if self.enabled and self.label is None:
            self.progress.stop()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False
