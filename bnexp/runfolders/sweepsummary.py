"""The end of a run and of a sweep: the run's table (:func:`print_summary`); for a sweep one table across its
runs and the commands that come next.

:class:`SweepSummary`, a Hydra callback registered in ``conf/config.yaml`` under ``hydra.callbacks``,
prints when a multirun ends (``on_multirun_end``, in the main process, after every job, whatever the
launcher): one row per run folder of the sweep (status, final and best test accuracy, steps to each
target, read from each run's ``summary.json``), then ``bnexp report SWEEP_DIR`` and
``tensorboard --logdir SWEEP_DIR``, and, once for the sweep, a record cadence too sparse for the
report's verdicts (:func:`bnexp.runfolders.record_counts.sparse_record_warnings`, with the setting to use).
The jobs themselves print one line each instead of the single-run table.

Standard library, rich and Hydra only (no torch): Hydra instantiates callbacks before a config is
validated.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


def _num(x: Any, fmt: str = ".4f") -> str:
    return format(x, fmt) if isinstance(x, (int, float)) and not isinstance(x, bool) else "-"


def summary_rows(sweep_dir: Path) -> tuple[list[str], list[list[str]]]:
    """The sweep's table: a header and one row per run folder (sorted by folder name).

    Args:
        sweep_dir: the sweep folder (``hydra.sweep.dir``).

    Returns:
        (header, rows): ``run`` (the folder relative to the sweep, named by the swept keys, e.g.
        ``bn=false,seed=1``), ``status`` (with the step reached when the run stopped early), ``final`` and
        ``best`` (test accuracies, fractions) and ``P%`` (the first step whose test accuracy reached P%,
        for each target of the runs; ``-``: never reached).
    """
    from bnexp.runfolders import rundir

    runs = [(d, rundir.read_summary(d) or {}) for d in rundir.find_run_dirs(sweep_dir)]
    targets: list[str] = []
    for _, s in runs:
        targets = targets or list((s.get("steps_to_target") or {}).keys())
    header = ["run", "status", "final", "best", *[f"{float(t):.0%}" for t in targets]]
    rows = []
    for d, s in sorted(runs, key=lambda r: str(r[0])):
        reached = s.get("steps_to_target") or {}
        status = str(s.get("status", "-"))
        if status not in ("finished", "-") and isinstance(s.get("step"), int):
            status += f" @{s['step']:,}"
        rows.append([str(d.relative_to(sweep_dir)) if d != sweep_dir else ".", status,
                     _num(s.get("final_test_accuracy")), _num(s.get("best_test_accuracy")),
                     *[_num(reached.get(t), ",") for t in targets]])
    return header, rows


def cadence_notes(sweep_dir: Path) -> list[str]:
    """The record-cadence warnings of the sweep's runs (each distinct message once)."""
    from omegaconf import OmegaConf

    from bnexp.runfolders import rundir
    from bnexp.runfolders.record_counts import sparse_record_warnings

    notes: list[str] = []
    for d in rundir.find_run_dirs(sweep_dir):
        config = rundir.read_config(d)
        if not isinstance(config, dict) or "trainer" not in config:
            continue
        try:
            found = sparse_record_warnings(OmegaConf.create(config))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        notes += [n for n in found if n not in notes]
    return notes


class SweepSummary(Callback):
    """Hydra callback: the sweep's one summary table and the next commands, when a multirun ends."""

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        from rich.console import Console
        from rich.table import Table

        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        if not sweep_dir.is_dir():
            return
        header, rows = summary_rows(sweep_dir)
        console = Console()
        if rows:
            from rich import box

            table = Table(title=f"bnexp sweep: {len(rows)} run(s) in {sweep_dir}", title_justify="left",
                          box=box.SIMPLE_HEAD, caption="final, best: test accuracy; P%: the first step with test accuracy >= P% (-: never)",
                          caption_justify="left")
            for i, h in enumerate(header):
                table.add_column(h, justify="left" if i < 2 else "right", no_wrap=True)
            for row in rows:
                table.add_row(*row)
            needed = sum(max(len(h), *(len(r[i]) for r in rows)) + 3 for i, h in enumerate(header)) + 1
            if needed <= console.width:
                console.print(table)
            else:  # a narrow terminal: one line per run, wrapped by the terminal, never cut
                console.print(f"bnexp sweep: {len(rows)} run(s) in {sweep_dir}", highlight=False, soft_wrap=True)
                for row in rows:
                    console.print("  " + "  ".join([row[0], row[1]] + [f"{h} {v}" for h, v in zip(header[2:], row[2:])]),
                                  highlight=False, soft_wrap=True)
                console.print(table.caption, highlight=False, soft_wrap=True)
        for note in cadence_notes(sweep_dir):
            console.print(f"note: {note}", highlight=False, soft_wrap=True)
        where = shlex.quote(str(sweep_dir))
        console.print(f"next: bnexp report {where}    (tables, claims and figures of this sweep)\n"
                      f"      tensorboard --logdir {where}", highlight=False, soft_wrap=True)


def print_summary(summary: dict) -> None:
    """The end-of-run rich table: status, accuracies, steps-to-target, whether the run resumed (from which
    step's checkpoint), time."""
    from rich.console import Console
    from rich.table import Table

    def num(x, fmt=".4f"):
        return format(x, fmt) if isinstance(x, (int, float)) else "-"

    table = Table(title=f"bnexp run: {summary.get('status')}", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    table.add_row("config", f"model={summary.get('model')} bn={str(summary.get('bn')).lower()} "
                            f"act={summary.get('act')} lr={num(summary.get('lr'), 'g')} seed={summary.get('seed')}")
    table.add_row("steps", f"{num(summary.get('step'), ',')} / {num(summary.get('max_steps'), ',')}")
    if summary.get("diverged_step") is not None:
        table.add_row("diverged at step", f"{summary['diverged_step']:,}")

    table.add_row("final test accuracy", num(summary.get("final_test_accuracy")))
    table.add_row("best test accuracy", f"{num(summary.get('best_test_accuracy'))} "
                                        f"(step {summary.get('best_step', 0):,})")
    for target, step in (summary.get("steps_to_target") or {}).items():
        table.add_row(f"steps to {float(target):.0%}", f"{step:,}" if step is not None else "not reached")
    resumed = summary.get("resumed_from_step")
    if resumed is not None:  # the times are summed over the run's sessions
        table.add_row("resumed", f"from the checkpoint of step {resumed:,}")
    table.add_row("wall time" + (" (all sessions)" if resumed is not None else ""),
                  f"{summary.get('wall_time_s', 0):.1f} s ({summary.get('steps_per_s') or 0:.0f} steps/s)")
    console = Console()
    console.print(table)
    console.print(f"run dir: {summary.get('run_dir')}", highlight=False, soft_wrap=True)  # never cut
