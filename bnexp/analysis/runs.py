"""Loading a sweep: every run directory read once (:mod:`bnexp.runfolders.rundir` reads the files) into
:class:`Run` objects, and their records into DataFrames (:class:`Sweep`).

A run's ``config`` is the flattened config (``config.yaml``, else ``.hydra/config.yaml``) minus ``seed`` and
:data:`IGNORED_KEYS` (keys that do not change what is trained), plus the summary's ``experiment`` when it has
none; or, when no config is readable, the summary's fields (:data:`SUMMARY_FIELDS`). A run is *completed* when
its status is ``finished`` or ``diverged`` and it has metrics or summary.json's final test accuracy; missing or
corrupt files make it failed, never an exception (a corrupt JSON-lines line is skipped with a warning, the later
records kept).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from bnexp.analysis.rules import CHANCE, NUM_CLASSES, normalizer, option_text
from bnexp.runfolders.neutral_keys import RESULT_NEUTRAL_KEYS
from bnexp.runfolders.rundir import (COMPLETE_STATUSES, CONFIG, HYDRA_CONFIG, ICS, INFERENCE, METRICS, REACHED_TOL,
                                     SHIFT, SUMMARY, find_run_dirs, first_reached, flatten, is_run_dir, read_config,
                                     read_records, read_summary)

log = logging.getLogger("bnexp.report")

__all__ = ["ReportError", "Run", "Sweep", "find_run_dirs", "is_run_dir", "load_run", "load_sweep", "sweep_of"]

# Config keys that do not change the experiment, left out of the grouping: the result-neutral keys of
# bnexp.runfolders.rundir (one list for resuming and reporting), checkpointing, the reporting targets and
# TensorBoard histograms; ``seed`` is what is averaged over. Any ``hydra`` key too.
IGNORED_KEYS = frozenset({"seed", *RESULT_NEUTRAL_KEYS, "trainer.save_checkpoint", "trainer.targets",
                          "monitor.histograms"})
# summary.json field -> the config key it stands for (used when no config file is readable).
SUMMARY_FIELDS = {"experiment": "experiment", "model": "model.name", "data": "data.name", "bn": "bn.enabled",
                  "act": "act", "lr": "lr", "batch_size": "trainer.batch_size", "max_steps": "trainer.max_steps",
                  "bn_noise": "bn.noise"}


INFERENCE_KINDS = ("batch", "ema", "population")  # the test accuracies of inference_stats.json


class ReportError(Exception):
    """A user-level problem with the report's input or output folder (exit code 2)."""


@dataclass
class Run:
    """One run directory, read from disk: its ``summary`` ({} when unreadable), the reduced flattened
    ``config`` used for grouping (from a config file when ``has_config``, else from the summary), the
    records of metrics.jsonl (with ``test_accuracy``), shift.jsonl and ics.jsonl (with ``kind``) by
    step, ``status`` (finished, diverged, failed or incomplete), ``seed`` (None when unknown), the
    ``error`` of a failed run, ``inference`` ({kind: test accuracy} of inference_stats.json,
    :func:`read_inference`) and ``id``, its position in its :class:`Sweep` (column ``run``)."""

    path: Path
    summary: dict
    config: dict
    has_config: bool
    metrics: list[dict]
    shift: list[dict]
    status: str
    seed: int | None
    error: str | None = None
    ics: list[dict] = field(default_factory=list)
    inference: dict = field(default_factory=dict)
    id: int = -1

    @property
    def completed(self) -> bool:
        """True for finished and diverged runs, the ones that enter the statistics."""
        return self.status in COMPLETE_STATUSES


def ordered_keys(mappings: Iterable[Iterable[str]]) -> list[str]:
    """The keys of several mappings, each once, in the order first seen: [{"a", "b"}, {"c", "a"}] -> a, b, c."""
    return list(dict.fromkeys(k for m in mappings for k in m))


def experiment_name(config: dict) -> str | None:
    """The preset name in a flattened config (``experiment`` or ``experiment.name``), else None."""
    v = config.get("experiment", config.get("experiment.name"))
    return None if v in (None, "") else str(v)


def canon(v: Any) -> Any:
    """A comparable form of a config value: numbers as float (1 == 1.0), lists item by item."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    if isinstance(v, dict):
        return {str(k): canon(x) for k, x in v.items()}
    return str(v)


def config_key(config: dict, exclude: Iterable[str] = ()) -> str:
    """Canonical JSON of a flattened config (keys in ``exclude`` or under ``exclude.`` dropped)."""
    ex = tuple(exclude)
    items = {k: canon(v) for k, v in config.items() if not any(k == e or k.startswith(e + ".") for e in ex)}
    return json.dumps(items, sort_keys=True, default=str)


# summary.json keys the report reads as numbers; a value of another type is dropped with one warning.
NUMBER_KEYS = ("best_test_accuracy", "final_test_accuracy", "final_test_accuracy_ema", "step", "max_steps", "seed",
               "batch_size", "best_step", "diverged_step", "lr")
TEXT_KEYS = ("status", "experiment", "error")
AGREE_TOL = 1e-6  # accuracies of summary.json and metrics.jsonl that differ by more disagree


def is_number(v: Any) -> bool:
    """Whether ``v`` read from a JSON or YAML file is a finite number (not a bool, text, NaN or infinity)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def read_sweep_record(path: Path, fields: dict, without: str) -> dict | None:
    """A sweep's own JSON record (study.json, ics_design.json): the object at ``path``; None when absent, or when
    unreadable or not an object (a warning naming the file and saying ``without``, what the report does then).
    ``fields`` maps an optional key to (check, what it should be): a value that fails its check is dropped with
    a warning naming the file and the key (never a traceback)."""
    try:
        d = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s is unreadable (%s); %s", path, exc, without)
        return None
    if not isinstance(d, dict):
        log.warning("%s is not a JSON object; %s", path, without)
        return None
    for key, (ok, want) in fields.items():
        if d.get(key) is not None and not ok(d[key]):
            log.warning("%s: key %s is %s, not %s; ignored", path, key, json.dumps(d.pop(key), default=str)[:40],
                        want)
    return d


def clean_summary(summary: dict, path: Path) -> dict:
    """``summary`` (read from ``path``, a summary.json) without the values of the wrong type: a non-number
    under :data:`NUMBER_KEYS` (``null`` stays), a non-string under :data:`TEXT_KEYS`, a ``steps_to_target`` that is
    not an object and its entries that are not a whole number of steps or ``null``. Each dropped value is one
    warning naming the file and the key; the report then uses the run's other files for it (never a traceback)."""
    out = dict(summary)

    def drop(key: str, value: Any, want: str) -> None:
        log.warning("%s: key %s is %s, not %s; ignored (the report uses the run's other files for it)",
                    path, key, json.dumps(value, default=str)[:40], want)

    checks = ((NUMBER_KEYS, is_number, "a number"), (TEXT_KEYS, lambda v: isinstance(v, str), "a string"))
    for keys, ok, want in checks:
        for key in keys:
            if out.get(key) is not None and not ok(out[key]):
                drop(key, out.pop(key), want)
    steps = out.get("steps_to_target")
    if steps is not None and not isinstance(steps, dict):
        drop("steps_to_target", out.pop("steps_to_target"), "an object {target: steps}")
    elif steps:
        kept = {}
        for k, v in steps.items():
            try:
                float(k)
            except ValueError:
                drop(f"steps_to_target.{k}", v, "a target accuracy key")
                continue
            if v is None or (is_number(v) and float(v).is_integer() and v >= 0):
                kept[k] = v
            else:
                drop(f"steps_to_target.{k}", v, "a whole number of steps or null")
        out["steps_to_target"] = kept
    return out


def _run_status(summary: dict | None, metrics: list[dict]) -> tuple[str, str | None]:
    """(status, error) of a run: finished | diverged | failed | incomplete."""
    if summary is None:
        return "failed", "summary.json missing or unreadable"
    st = summary.get("status")
    if st == "failed":
        return "failed", str(summary.get("error") or "status failed")
    if st in ("running", "interrupted"):
        return "incomplete", f"status {st}"
    if st in COMPLETE_STATUSES:
        return (st, None) if metrics or is_number(summary.get("final_test_accuracy")) else (
            "failed", "metrics.jsonl missing or empty")
    return "failed", f"unknown status {st!r} in summary.json"


def _check_sources(run_dir: Path, summary: dict, metrics: list[dict], status: str) -> None:
    """Warn (once per run, naming both files) where summary.json, written last, and metrics.jsonl disagree on
    the final test accuracy (``final_test_accuracy_ema`` when Alg. 2 replaced it) or a ``steps_to_target``;
    :func:`run_table` uses summary.json's values."""
    if status not in COMPLETE_STATUSES:
        return
    if not metrics:
        log.warning("%s: %s is missing or empty; its final test accuracy and steps to targets are taken from "
                    "%s", run_dir, METRICS, SUMMARY)
        return
    diffs = []
    last = metrics[-1].get("test_accuracy")
    final = _first(summary.get("final_test_accuracy_ema"), summary.get("final_test_accuracy"))
    if is_number(final) and is_number(last) and abs(final - last) > AGREE_TOL:
        diffs.append(f"final test accuracy {final:.4g} vs {last:.4g}")
    for k, v in (summary.get("steps_to_target") or {}).items():
        seen = first_reached(metrics, float(k))
        if seen != v:
            diffs.append(f"steps to {k}: {'not reached' if v is None else v} vs "
                         f"{'not reached' if seen is None else seen}")
    if diffs:
        log.warning("%s: %s and %s disagree (%s); the report uses %s's (written last)", run_dir, SUMMARY,
                    METRICS, "; ".join(diffs), SUMMARY)


def load_run(run_dir: Path) -> Run:
    """Read one run directory into a :class:`Run` (its config as the module docstring says, less a
    trainer.max_steps that is not a whole number, with a warning); never raises for missing or corrupt files (the
    run is then failed)."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    if summary is not None:
        summary = clean_summary(summary, run_dir / SUMMARY)
    raw = read_config(run_dir)
    if raw is None and (broken := [f for f in (CONFIG, HYDRA_CONFIG) if (run_dir / f).exists()]):
        log.warning("%s: %s not a readable YAML mapping; the run's config is taken from %s", run_dir,
                    " and ".join(broken) + (" are" if len(broken) > 1 else " is"), SUMMARY)
    metrics = read_records(run_dir, METRICS, ("step", "test_accuracy"))
    status, error = _run_status(summary, metrics)
    _check_sources(run_dir, summary or {}, metrics, status)
    s = summary or {}
    if raw is not None:
        config = {k: v for k, v in flatten(raw).items()
                  if k not in IGNORED_KEYS and k != "hydra" and not k.startswith(("hydra.", "logger."))}
        if s.get("experiment") and experiment_name(config) is None:
            config["experiment"] = s["experiment"]
        if (v := config.get("trainer.max_steps")) is not None and not (is_number(v) and float(v).is_integer()):
            log.warning("%s: key trainer.max_steps is %s, not a whole number of steps; ignored (the budget comes "
                        "from %s)", run_dir, json.dumps(config.pop("trainer.max_steps"), default=str)[:40], SUMMARY)
    else:
        config = {key: s[f] for f, key in SUMMARY_FIELDS.items() if s.get(f) is not None}
    try:
        seed = int(s.get("seed", (raw or {}).get("seed")))
    except (TypeError, ValueError):
        seed = None
    return Run(run_dir, s, config, raw is not None, metrics, read_records(run_dir, SHIFT), status, seed, error,
               read_records(run_dir, ICS, ("step", "kind")), read_inference(run_dir))


def read_inference(run_dir: Path) -> dict:
    """{kind: test accuracy (fraction) or None} for each of :data:`INFERENCE_KINDS` from the run's
    inference_stats.json (:mod:`bnexp.train.inference_eval` writes it; {} when absent). A file that is not a JSON
    object, an ``accuracy`` that is not an object, or an accuracy that is not a number is a warning naming the file
    and key, and counts as not evaluated."""
    path = Path(run_dir) / INFERENCE
    if not path.is_file():
        return {}
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError):
        res = None
    if not isinstance(res, dict):
        log.warning("%s: not a readable JSON object; ignored (the run counts as not evaluated)", path)
        res = {}
    acc = res.get("accuracy") or {}
    if not isinstance(acc, dict):
        log.warning("%s: key accuracy is not an object of accuracies; ignored", path)
        acc = {}
    for k in [k for k in INFERENCE_KINDS if acc.get(k) is not None and not is_number(acc[k])]:
        log.warning("%s: key accuracy.%s is not a number; ignored", path, k)
        acc = {**acc, k: None}
    return {k: acc.get(k) for k in INFERENCE_KINDS}


def seed_order(run: Run) -> tuple:
    """Sort key of runs: by seed, runs without a known seed last, then by path."""
    return (run.seed is None, run.seed if run.seed is not None else 0, str(run.path))


def records_frame(runs: list[Run], attr: str) -> pd.DataFrame:
    """Every run's records of ``attr`` ("metrics", "shift" or "ics") as one DataFrame: a row per
    record, nested keys flattened by :func:`pandas.json_normalize` ("layers.layer1.p50",
    "shift_metrics.layer2.w1_first"), the run's :attr:`Run.id` in column ``run``, by run and step."""
    recs = [{**rec, "run": r.id} for r in runs for rec in getattr(r, attr)]
    return pd.json_normalize(recs) if recs else pd.DataFrame({"run": [], "step": []})


@dataclass
class Sweep:
    """A sweep loaded once: its ``runs`` (in the order of their folders); ``table``, the per-run table
    (:func:`run_table`); and the long tables ``metrics``, ``shift``, ``ics``: :func:`records_frame` of the
    runs' metrics.jsonl, shift.jsonl and ics.jsonl (column ``run`` = :attr:`Run.id`)."""

    runs: list[Run]
    table: pd.DataFrame
    metrics: pd.DataFrame
    shift: pd.DataFrame
    ics: pd.DataFrame

    def rows(self, name: str, run: Run) -> pd.DataFrame:
        """The records of one run in the frame ``name`` ("metrics", "shift" or "ics"), by step, without
        the columns that are empty for this run (other runs' layers or keys)."""
        frame = getattr(self, name)
        return frame[frame["run"] == run.id].dropna(axis=1, how="all")

    def reach(self, target: float) -> pd.DataFrame:
        """The table's ``steps_to_T`` and ``censored_T`` columns of ``target`` (added when missing) as
        columns ``steps`` and ``censored``, one row per run."""
        k = target_key(target)
        if f"steps_to_{k}" not in self.table:
            extra = run_table(self.runs, self.metrics, [target])
            self.table[[f"steps_to_{k}", f"censored_{k}"]] = extra[[f"steps_to_{k}", f"censored_{k}"]]
        return self.table[[f"steps_to_{k}", f"censored_{k}"]].set_axis(["steps", "censored"], axis=1)


def _recorded_steps(summary: dict, target: float, default: float) -> float:
    """The steps of ``target`` in a cleaned summary's ``steps_to_target`` (NaN: not reached), else ``default``."""
    for k, v in (summary.get("steps_to_target") or {}).items():
        if abs(float(k) - target) < 1e-12:
            return math.nan if v is None else int(v)
    return default


def target_key(target: float) -> str:
    """The key of a target in summary.json, report.json and the table's columns: 0.95 -> "0.95"."""
    return f"{target:g}"


def numeric(values) -> pd.Series:
    """``values`` as a float Series: NaN for missing, non-numeric and non-finite entries."""
    s = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(float)
    return s.where(np.isfinite(s))


def _first(*values):
    """The first value that is not None."""
    return next((v for v in values if v is not None), None)


def written_at(run_dir: Path) -> float:
    """When the run last wrote its summary.json (its folder's time without one), seconds since the epoch; 0 when
    unreadable."""
    for p in (Path(run_dir) / SUMMARY, Path(run_dir)):
        try:
            return p.stat().st_mtime
        except OSError:
            continue
    return 0.0


def coordinates(runs: list[Run]) -> dict[str, list]:
    """The coordinates the designs vary, one value per run, each read once from the run's reduced config (else
    its summary.json): ``preset`` (the experiment preset, :func:`experiment_name`; None: a plain run), ``rate``
    (``lr`` as read, NaN when absent: a hand edit may make it text, which the readers refuse), ``ghost``
    (bn.ghost_batch_size), ``groups`` (bn.groups), ``momentum`` (bn.momentum), ``position`` (bn.position as text,
    "before" by default), ``nonlinearity`` (``act`` as text), ``net`` (model.name, "mlp" by default), ``depth``
    (hidden layers of an MLP, None for another net) and ``wall_time_s`` (summary.json's)."""
    def first(r: Run, key: str, field: str, default=None):
        return r.config.get(key, r.summary.get(field, default))

    return {"preset": [experiment_name(r.config) or r.summary.get("experiment") for r in runs],
            "rate": [first(r, "lr", "lr", math.nan) for r in runs],
            "ghost": [r.config.get("bn.ghost_batch_size") for r in runs],
            "groups": [r.config.get("bn.groups") for r in runs],
            "momentum": [r.config.get("bn.momentum") for r in runs],
            "position": [option_text(r.config.get("bn.position", "before")) for r in runs],
            "nonlinearity": [option_text(first(r, "act", "act")) for r in runs],
            "net": [str(first(r, "model.name", "model", "mlp")) for r in runs],
            "depth": [len(h) if isinstance(h := r.config.get("model.hidden"), list) else None for r in runs],
            "wall_time_s": [r.summary.get("wall_time_s") for r in runs]}


def run_table(runs: list[Run], metrics: pd.DataFrame, targets: Iterable[float]) -> pd.DataFrame:
    """The per-run table, one row per run (index ``run`` = :attr:`Run.id`), every number under one rule:

    path, seed, status, error, the reduced config's keys, the summary's top-level fields (``summary.<f>``);
    ``m`` (mini-batch size), ``budget`` (trainer.max_steps, else the summary's max_steps or last step);
    ``budget_set`` (the budget the run was given: trainer.max_steps, else the summary's max_steps; None without),
    ``steps_done`` (the SGD steps it trained: the summary's step, else its last evaluation's, else 0) and
    ``written`` (when it last wrote summary.json, else its folder's time; 0 when unreadable: :func:`written_at`);
    ``norm`` (the normalizer code, :func:`bnexp.analysis.rules.normalizer`); the designs' :func:`coordinates`
    (preset, rate, ghost, groups, momentum, position, nonlinearity, net, depth, wall_time_s); ``max_test_accuracy``
    (the best evaluation of metrics.jsonl, else summary ``best_test_accuracy``), ``final_test_accuracy``
    (the summary's, else the last record's), ``final_train_accuracy`` (the last record with one), both
    1 / NUM_CLASSES for a diverged run, ``inference.<kind>`` (the run's :func:`read_inference` accuracies, None
    when not evaluated), and ``left_chance`` (completed and above CHANCE): the chance rule of
    :mod:`bnexp.analysis.rules`; ``first_eval`` (the step of the run's first evaluation after step 0, NaN
    without one: a target reached there is reached somewhere in (0, first_eval], an upper bound,
    :meth:`bnexp.analysis.rules.Censored.steps`); per target T ``steps_to_T`` (summary ``steps_to_target`` when
    it lists T, else the first evaluation at or above T within :data:`bnexp.runfolders.rundir.REACHED_TOL`; NaN:
    not reached) and ``censored_T`` (completed and not reached: the budget is a lower bound on its steps).
    Accuracies are fractions, steps SGD steps."""
    t = pd.DataFrame([{"path": str(r.path), "seed": r.seed, "status": r.status, "error": r.error, **r.config,
                       **{f"summary.{k}": v for k, v in r.summary.items() if not isinstance(v, (dict, list))}}
                      for r in runs], index=pd.RangeIndex(len(runs), name="run"),
                     columns=None if runs else ["path", "seed", "status", "error"])
    t["m"] = pd.Series([_first(r.config.get("trainer.batch_size"), r.summary.get("batch_size")) for r in runs],
                       index=t.index, dtype=object)  # ints stay ints where a run lacks the value
    t["budget"] = pd.Series([_first(r.config.get("trainer.max_steps"), r.summary.get("max_steps"),
                                    r.summary.get("step")) for r in runs], index=t.index, dtype=object)
    t["budget_set"] = pd.Series([r.config.get("trainer.max_steps", r.summary.get("max_steps")) for r in runs],
                                index=t.index, dtype=object)
    t["steps_done"] = pd.Series([float(_first(r.summary.get("step"), r.metrics[-1].get("step") if r.metrics else None)
                                       or 0) for r in runs], index=t.index, dtype=float)
    t["written"] = pd.Series([written_at(r.path) for r in runs], index=t.index, dtype=float)
    t["norm"] = [normalizer(r.config) for r in runs]
    for name, values in coordinates(runs).items():
        t[name] = pd.Series(values, index=t.index, dtype=object)  # Python values as read: 2 stays 2, None None
    summ = {k: numeric([r.summary.get(k) for r in runs]).set_axis(t.index)
            for k in ("best_test_accuracy", "final_test_accuracy")}
    acc = numeric(metrics.get("test_accuracy", [])).set_axis(metrics.index)
    by_run = acc.groupby(metrics["run"])
    t["max_test_accuracy"] = by_run.max().reindex(t.index).fillna(summ["best_test_accuracy"])
    diverged = t["status"] == "diverged"
    t["final_test_accuracy"] = summ["final_test_accuracy"].fillna(
        by_run.agg(lambda s: s.iloc[-1]).reindex(t.index)).mask(diverged, 1 / NUM_CLASSES)
    train = numeric(metrics.get("train_accuracy", pd.Series(index=metrics.index, dtype=float))).set_axis(metrics.index)
    t["final_train_accuracy"] = train.groupby(metrics["run"]).last().reindex(t.index).mask(diverged, 1 / NUM_CLASSES)
    for k in INFERENCE_KINDS:
        t[f"inference.{k}"] = pd.Series([r.inference.get(k) for r in runs], index=t.index, dtype=object)
    done = t["status"].isin(COMPLETE_STATUSES)
    t["left_chance"] = done & (t["max_test_accuracy"] > CHANCE)
    t["first_eval"] = math.nan
    if len(metrics):
        evaluated = numeric(metrics["step"]).set_axis(metrics.index)[acc.notna()]
        t["first_eval"] = evaluated[evaluated > 0].groupby(metrics["run"]).min().reindex(t.index).astype(float)
    for target in targets:
        first = metrics["step"][acc >= target - REACHED_TOL].groupby(metrics["run"]).min().reindex(t.index)
        steps = pd.Series([_recorded_steps(r.summary, target, c) for r, c in zip(runs, first)], index=t.index,
                          dtype=float)
        t[f"steps_to_{target_key(target)}"] = steps
        t[f"censored_{target_key(target)}"] = done & steps.isna()
    return t


def load_sweep(run_dirs: list[Path], targets: Iterable[float] = ()) -> Sweep:
    """Read every run directory (:func:`load_run`) into a :class:`Sweep` whose table has the steps to
    every target of ``targets`` (:func:`run_table`)."""
    return sweep_of([load_run(d) for d in run_dirs], targets)


def sweep_of(runs: list[Run], targets: Iterable[float] = ()) -> Sweep:
    """A :class:`Sweep` of runs already read (their ids renumbered 0..n-1 in this order)."""
    for i, r in enumerate(runs):
        r.id = i
    metrics = records_frame(runs, "metrics")
    return Sweep(runs, run_table(runs, metrics, targets), metrics, *(records_frame(runs, a) for a in ("shift", "ics")))


def native(v):
    """A pandas / numpy value as a Python one (NaN -> None), for report.json and the figures."""
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and math.isnan(v) else v
