"""Seeds as bands in TensorBoard: one aggregate run per configuration of a sweep, beside its runs.

``SWEEP/aggregate/<name>/`` (:data:`bnexp.runfolders.rundir.AGGREGATE_DIR`), ``<name>`` the configuration's run
folder name without its seed (``bn=true,seed=0`` -> ``bn=true``), holds one event file with, at every evaluation
step of its seeds, the seed mean and the 95% Student-t band of test accuracy, test loss, train loss and the drift of
the deepest hidden layer's input to g (:mod:`bnexp.analysis.seed_bands`, the same numbers as the report's
accuracy-vs-steps figure), tags ``over_seeds/<quantity>/mean``, ``/low``, ``/high`` and ``/seeds`` (how many seeds
the step's mean and band are over: a run that diverged or has no record at a step is left out of it; a step with
one seed has a mean but no band). Its Custom Scalars layout is the category ``over seeds``: one margin chart per
quantity, whose series are the same tags in every aggregate run, so every configuration is drawn in one chart on
one y axis (docs/tensorboard.md); after it, the per-seed runs' own categories, merged (:func:`merged_layouts`).

What bnexp controls of TensorBoard's colours: TensorBoard gives a run the colour of its place in the run list
(``tensorboardColorBlindAssist``: orange, blue, red, light blue, magenta, teal, grey, then again), and lists runs by
their first event's time. The aggregate runs' events carry their seeds' times (the earliest seed's start, less one
second per place, plus the mean elapsed time at the step), so they come first, BN and no BN alternating: BN takes
the warm colours (orange, red, magenta) and no BN the cool ones (blue, light blue, teal), as in the report's
figures (with more than three settings per family, or other normalizers, the palette repeats). The per-seed runs
keep the colours of their places after them.

The aggregate is rewritten whole (written into a hidden folder, then swapped in): a second report leaves the same
event data, never a second event file. It is no run: :func:`bnexp.runfolders.rundir.find_run_dirs` never enters it,
and it writes no HParams summaries, so the HParams dashboard lists the runs only. Written by ``bnexp report`` and
at a sweep's end (:class:`AggregateRuns`), when a run of the sweep has TensorBoard event files; configurations with
fewer than 2 completed seeds have no aggregate.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hydra.experimental.callback import Callback

from bnexp.analysis.runs import Run, load_sweep
from bnexp.analysis.seed_bands import seed_band
from bnexp.report.fmt import label
from bnexp.report.groups import ConfigGroup, group_runs
from bnexp.runfolders.rundir import AGGREGATE_DIR, HYDRA_CONFIG, find_run_dirs
from bnexp.runfolders.runnames import safe_dirname

PREFIX = "over_seeds"
# the Custom Scalars category of the aggregate runs and its charts' titles: templates/columns.md.j2's
CATEGORY = label("aggregate_category")
# the charts of the category, in reading order (the drift first: BN against no BN on one scale)
CHART_ORDER = ("drift", "test_accuracy", "test_loss", "train_loss")
CHART_TITLES = {q: label("chart_title", q) for q in CHART_ORDER}
EVENTS = "events.out.tfevents.bnexp-aggregate"
MIN_SEEDS = 2
LAYOUT_WITHIN = 100  # events of a run's event file searched for its Custom Scalars layout
FAMILY_ORDER = ("BN", "no BN")  # alternate in the run list: TensorBoard's warm colours for BN, cool for no BN


def tags(quantity: str) -> dict[str, str]:
    """{"mean", "low", "high", "seeds"}: the scalar tags of ``quantity`` in an aggregate run."""
    return {k: f"{PREFIX}/{quantity}/{k}" for k in ("mean", "low", "high", "seeds")}


def run_layout(run_dir: Path):
    """The Custom Scalars layout a run wrote (``layout_pb2.Layout``, the first one among the first
    :data:`LAYOUT_WITHIN` events of each of its event files: the trainer writes it at the start), else None."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    for path in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        try:
            for i, event in enumerate(EventFileLoader(str(path)).Load()):
                if i >= LAYOUT_WITHIN:  # the trainer writes it when the run starts: no need to read the histograms
                    break
                for value in event.summary.value:
                    if value.tag == metadata.CONFIG_SUMMARY_TAG and value.tensor.string_val:
                        out = layout_pb2.Layout()
                        out.ParseFromString(value.tensor.string_val[0])
                        return out
        except Exception:  # a truncated or unreadable file: no layout from it
            continue
    return None


def merged_layouts(layouts: list) -> list:
    """The categories of ``layouts`` (in the order they first appear), each with the charts of every layout that has
    it, once each, in order of appearance: what TensorBoard means to show for several runs' layouts. Its own merge
    (``CustomScalarsPlugin.layout_impl``) adds a later run's charts only to the categories of the first run (by
    name); with the aggregate run first, a per-seed category would keep one configuration's charts (the "each seed"
    row: ``without BN`` but not ``with BN``). The aggregate run therefore carries this merge after its own."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    cats: dict[str, object] = {}
    for lay in layouts:
        for cat in lay.category:
            merged = cats.setdefault(cat.title, layout_pb2.Category(title=cat.title, closed=cat.closed))
            merged.chart.extend([c for c in cat.chart if c not in merged.chart])
    return list(cats.values())


def layout(runs: list[Run] = ()):
    """The Custom Scalars layout of an aggregate run (``layout_pb2.Layout``): the category :data:`CATEGORY` with a
    margin chart per quantity (value the mean, lower and upper the band; TensorBoard draws a category's margin charts
    last to first, so they are listed in the reverse of :data:`CHART_ORDER`), then :func:`merged_layouts` of the
    ``runs``' own layouts."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    charts = [layout_pb2.Chart(title=CHART_TITLES[q], margin=layout_pb2.MarginChartContent(series=[
        layout_pb2.MarginChartContent.Series(value=t["mean"], lower=t["low"], upper=t["high"])]))
        for q in CHART_ORDER[::-1] for t in [tags(q)]]
    own = [lay for lay in (run_layout(r.path) for r in runs) if lay is not None]
    return layout_pb2.Layout(category=[layout_pb2.Category(title=CATEGORY, chart=charts), *merged_layouts(own)])


def family(group: ConfigGroup) -> str | None:
    """The colour family of a configuration (:func:`bnexp.analysis.rules.colour_family` of its normalizer)."""
    from bnexp.analysis.rules import colour_family

    return colour_family(group.normalizer)


def run_order(groups: list[ConfigGroup]) -> list[ConfigGroup]:
    """The aggregate runs' order in TensorBoard's run list: BN and no BN alternating (BN first), in the groups'
    order within a family, then every other configuration."""
    fams = {f: [g for g in groups if family(g) == f] for f in FAMILY_ORDER}
    out = [g for pair in zip(*fams.values()) for g in pair]
    longest = max(fams.values(), key=len)
    out += longest[min(len(v) for v in fams.values()):]
    return out + [g for g in groups if g not in out]


def _seedless(name: str) -> str:
    return ",".join(p for p in name.split(",") if not p.startswith("seed="))


def aggregate_names(groups: list[ConfigGroup]) -> dict[str, str]:
    """{group.key: folder name}: its runs' folder name without the ``seed=`` item when they agree
    (``bn=false,seed=1`` -> ``bn=false``), else the configuration's label as a folder name; ``seeds`` when
    nothing is left; ``_2``, ``_3`` appended where two configurations would share a name."""
    out: dict[str, str] = {}
    used: Counter = Counter()
    for g in groups:
        names = {_seedless(Path(r.path).name) for r in g.runs}
        name = names.pop() if len(names) == 1 else safe_dirname(g.label or "")
        name = name or "seeds"
        used[name] += 1
        out[g.key] = name if used[name] == 1 else f"{name}_{used[name]}"
    return out


def _first_event_time(run_dir: Path) -> float | None:
    """The wall time of the first event of the run's earliest event file (None without a readable one)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    times = []
    for p in sorted(Path(run_dir).glob("events.out.tfevents.*")):
        try:
            times.append(next(iter(EventFileLoader(str(p)).Load())).wall_time)
        except Exception:  # an empty, truncated or unreadable file: no time from it
            continue
    return min(times) if times else None


def _start_time(runs: list[Run]) -> float:
    """The earliest start of ``runs``: their first TensorBoard event, else the time their .hydra/config.yaml was
    written (never changed after the start), else 0."""
    times = []
    for r in runs:
        t = _first_event_time(r.path)
        if t is None and (Path(r.path) / HYDRA_CONFIG).is_file():
            t = (Path(r.path) / HYDRA_CONFIG).stat().st_mtime
        if t is not None:
            times.append(t)
    return min(times) if times else 0.0


def _elapsed(runs: list[Run], steps: np.ndarray) -> np.ndarray:
    """The mean over seeds of metrics.jsonl's ``wall_time_s`` (seconds since the run started) at ``steps``,
    interpolated between the steps that have one (0 without any)."""
    recs = pd.DataFrame([(int(m["step"]), float(m["wall_time_s"])) for r in runs for m in r.metrics
                         if isinstance(m.get("step"), (int, float)) and isinstance(m.get("wall_time_s"), (int, float))],
                        columns=["step", "t"])
    if recs.empty:
        return np.zeros(len(steps))
    mean = recs.groupby("step")["t"].mean()
    return np.interp(steps, mean.index.to_numpy(dtype=float), mean.to_numpy())


def _events(runs: list[Run], start: float, lay) -> list:
    """The events of one aggregate run: the file version, the layout, then per quantity and step the mean, the
    band (where there are 2 or more seeds) and the seed count, in step order."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.plugins.custom_scalar import metadata as cs_metadata

    # the layout summary as tensorboard.plugins.custom_scalar.summary.pb builds it (which imports TensorFlow)
    config = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
        tag=cs_metadata.CONFIG_SUMMARY_TAG, metadata=cs_metadata.create_summary_metadata(),
        tensor=tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[lay.SerializeToString()],
                                      tensor_shape=tensor_shape_pb2.TensorShapeProto()))])
    events = [event_pb2.Event(wall_time=start, file_version="brain.Event:2"),
              event_pb2.Event(wall_time=start, step=0, summary=config)]
    rows = []
    for q in CHART_ORDER:
        band = seed_band(runs, q)
        t = tags(q)
        for step, n, mean, low, high in band.itertuples(index=False):
            values = [(t["seeds"], n), (t["mean"], mean)] + ([(t["low"], low), (t["high"], high)] if n >= 2 else [])
            rows += [(int(step), tag, float(v)) for tag, v in values]
    rows.sort(key=lambda r: r[0])
    steps = np.array([r[0] for r in rows], dtype=float)
    walls = start + _elapsed(runs, steps)
    for (step, tag, value), wall in zip(rows, walls):
        scalar = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])  # as torch's
        events.append(event_pb2.Event(wall_time=float(wall), step=step, summary=scalar))
    return events


def _write_events(folder: Path, events: list) -> Path:
    """Write ``events`` into one event file in ``folder`` with TensorBoard's record writer."""
    from tensorboard.summary.writer.record_writer import RecordWriter

    folder.mkdir(parents=True)
    path = folder / EVENTS
    with open(path, "wb") as f:
        writer = RecordWriter(f)
        for e in events:
            writer.write(e.SerializeToString())
        writer.flush()
    return path


def _clear_leftovers(sweep_dir: Path) -> None:
    for p in sweep_dir.glob(f".{AGGREGATE_DIR}.*"):  # an earlier write that was interrupted
        shutil.rmtree(p, ignore_errors=True)


def write_aggregates(sweep_dir: Path, groups: list[ConfigGroup]) -> list[Path]:
    """Rewrite ``sweep_dir/aggregate/`` whole: one aggregate run (module docstring) per configuration of ``groups``
    with at least :data:`MIN_SEEDS` completed runs; nothing (and an earlier aggregate folder removed) when none
    has, or when no run of ``groups`` holds TensorBoard event files.

    Args:
        sweep_dir: the sweep folder the runs are in.
        groups: the configurations (:func:`bnexp.report.groups.group_runs`; the report's, duplicates dropped).

    Returns:
        the event files written, in run-list order.

    Raises:
        OSError: the folder cannot be written (the earlier aggregate folder, if any, is then unchanged).
    """
    sweep_dir = Path(sweep_dir)
    final = sweep_dir / AGGREGATE_DIR
    _clear_leftovers(sweep_dir)
    has_tb = any(next(Path(r.path).glob("events.out.tfevents.*"), None) for g in groups for r in g.runs)
    shown = [g for g in groups if len(g.completed) >= MIN_SEEDS] if has_tb else []
    if not shown:
        if final.is_dir():
            shutil.rmtree(final)
        return []
    ordered, names = run_order(shown), aggregate_names(shown)
    every = sorted((r for g in groups for r in g.runs), key=lambda r: str(r.path))
    first, lay = _start_time(every), layout(every)
    tmp = sweep_dir / f".{AGGREGATE_DIR}.tmp-{os.getpid()}"
    try:
        written = [_write_events(tmp / names[g.key], _events(g.completed, first - (len(ordered) - i), lay))
                   for i, g in enumerate(ordered)]
        old = sweep_dir / f".{AGGREGATE_DIR}.old-{os.getpid()}"
        if final.is_dir():
            final.rename(old)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(sweep_dir / f".{AGGREGATE_DIR}.old-{os.getpid()}", ignore_errors=True)
    return [final / p.relative_to(tmp) for p in written]


def write_sweep_aggregates(sweep_dir: Path) -> list[Path]:
    """:func:`write_aggregates` of a sweep folder read from disk (its runs grouped as the report groups them,
    one run per configuration and seed)."""
    from bnexp.report.duplicate_seeds import drop_duplicate_seeds

    sweep = load_sweep(find_run_dirs(Path(sweep_dir)))
    groups = group_runs(sweep.runs)
    drop_duplicate_seeds(groups, sweep.table)
    return write_aggregates(Path(sweep_dir), groups)


class AggregateRuns(Callback):
    """Hydra callback (``conf/config.yaml``, ``hydra.callbacks``): at a multirun's end, the sweep's aggregate
    TensorBoard runs (:func:`write_sweep_aggregates`); a problem is one warning line, never a failed sweep."""

    def on_multirun_end(self, config, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir)).absolute()
        if not sweep_dir.is_dir():
            return
        try:
            write_sweep_aggregates(sweep_dir)
        except Exception as exc:  # the runs are done; the aggregate can be written again by bnexp report
            from rich.console import Console

            Console(stderr=True).print(f"[bold yellow]bnexp: warning:[/] the sweep's aggregate TensorBoard runs "
                                       f"were not written ({type(exc).__name__}: {exc}); bnexp report "
                                       f"{sweep_dir} writes them.", highlight=False, soft_wrap=True)
