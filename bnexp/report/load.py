"""Finding and loading the runs of a sweep folder (``bnexp report``'s input).

Every folder below the sweep folder holding ``summary.json`` or ``.hydra/config.yaml`` is one
run (see :mod:`bnexp.rundir` for the layout). Each is read into a :class:`Run` whose
``config`` is the flattened ``.hydra/config.yaml`` minus ``seed`` and :data:`IGNORED_KEYS`
(keys that do not change what is trained), or, when the config file is missing, the
summary's fields (:data:`SUMMARY_FIELDS`). A run is *completed* when its status is
``finished`` or ``diverged`` and it has ``metrics.jsonl``; missing or corrupt files make it
failed, never an exception.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from bnexp.rundir import COMPLETE_STATUSES, read_jsonl, read_summary

# Config keys that do not change the experiment: where data lives and whether it is
# fetched, progress display, threads, device, checkpointing, the reporting targets and
# TensorBoard histograms. ``seed`` is what is averaged over. Any ``hydra`` key too.
IGNORED_KEYS = frozenset({
    "seed", "data.root", "data.download", "data.verify_checksums", "trainer.progress",
    "trainer.num_threads", "trainer.device", "trainer.save_checkpoint", "trainer.targets",
    "monitor.histograms",
})
# summary.json field -> the config key it stands for (used when .hydra/config.yaml is missing).
SUMMARY_FIELDS = {"experiment": "experiment", "model": "model.name", "data": "data.name", "bn": "bn.enabled",
                  "act": "act", "lr": "lr", "batch_size": "trainer.batch_size", "max_steps": "trainer.max_steps",
                  "bn_noise": "bn.noise"}


class ReportError(Exception):
    """A user-level problem with the report's input or output folder (exit code 2)."""


@dataclass
class Run:
    """One run directory, read from disk.

    Attributes:
        path: the run directory.
        summary: summary.json ({} when missing or unreadable).
        config: the reduced, flattened config used for grouping (dotted keys).
        has_config: True when ``config`` comes from .hydra/config.yaml, False when from the summary.
        metrics: records of metrics.jsonl (each has ``step`` and ``test_accuracy``), by step.
        shift: records of shift.jsonl (each has ``step``), by step.
        status: ``finished``, ``diverged``, ``failed`` or ``incomplete``.
        seed: the run's seed, or None when unknown.
        error: why the run failed (None otherwise).
        ics: records of ics.jsonl (each has ``step`` and ``kind``: ``grad_ics`` or ``landscape``),
            by step; [] when the file is absent.
    """

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

    @property
    def completed(self) -> bool:
        """True for finished and diverged runs, the ones that enter the statistics."""
        return self.status in COMPLETE_STATUSES


def is_run_dir(path: Path) -> bool:
    """True when ``path`` is a run directory: it holds summary.json or .hydra/config.yaml."""
    path = Path(path)
    return (path / "summary.json").is_file() or (path / ".hydra" / "config.yaml").is_file()


def find_run_dirs(sweep_dir: Path) -> list[Path]:
    """Run directories under ``sweep_dir``: folders with summary.json or .hydra/config.yaml.

    Searches recursively (``sweep_dir`` itself included) and does not descend into a run
    directory once found.

    Returns:
        sorted paths; [] when there are none.
    """
    found = []
    for root, dirs, _ in os.walk(sweep_dir):
        root_p = Path(root)
        if is_run_dir(root_p):
            found.append(root_p)
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if d != ".hydra")
    return sorted(found)


def flatten(d: dict, prefix: str = "") -> dict:
    """Flatten nested dicts into dotted keys: {"bn": {"enabled": True}} -> {"bn.enabled": True}.

    Lists stay values (they are not split into items).
    """
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def ordered_keys(mappings: Iterable[Iterable[str]]) -> list[str]:
    """The keys of several mappings, each once, in the order they are first seen:
    [{"a": 1, "b": 2}, {"c": 3, "a": 4}] -> ["a", "b", "c"]."""
    return list(dict.fromkeys(k for m in mappings for k in m))


def reduce_config(flat: dict) -> dict:
    """Drop ``seed``, :data:`IGNORED_KEYS` and every ``hydra`` key from a flattened config."""
    return {k: v for k, v in flat.items()
            if k not in IGNORED_KEYS and k != "hydra" and not k.startswith("hydra.")}


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
    items = {k: canon(v) for k, v in config.items()
             if not any(k == e or k.startswith(e + ".") for e in ex)}
    return json.dumps(items, sort_keys=True, default=str)


def _read_config(run_dir: Path) -> dict | None:
    """The run's config as a dict: ``config.yaml`` (the resolved config bnexp writes, with
    preset interpolations such as ``${bnexp_mul:5,...}`` turned into values), else
    ``.hydra/config.yaml``; None when missing or unreadable."""
    for p in (run_dir / "config.yaml", run_dir / ".hydra" / "config.yaml"):
        try:
            cfg = yaml.safe_load(p.read_text())
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue
        if isinstance(cfg, dict):
            return cfg
    return None


def _read_records(path: Path, required: tuple[str, ...]) -> list[dict]:
    """Records of a JSON-lines file that are dicts holding ``required`` keys, sorted by step."""
    try:
        recs = read_jsonl(path)
    except (OSError, UnicodeDecodeError):
        return []
    recs = [r for r in recs if isinstance(r, dict) and all(k in r for k in required)
            and isinstance(r["step"], (int, float))]
    return sorted(recs, key=lambda r: r["step"])


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
        if not metrics:
            return "failed", "metrics.jsonl missing or empty"
        return st, None
    return "failed", f"unknown status {st!r} in summary.json"


def load_run(run_dir: Path) -> Run:
    """Read one run directory; never raises for missing or corrupt files (the run is then failed).

    The grouping config is the reduced .hydra/config.yaml (plus the summary's
    ``experiment`` when the config has none), else the summary's :data:`SUMMARY_FIELDS`.
    """
    run_dir = Path(run_dir)
    summary = read_summary(run_dir)
    summary = summary if isinstance(summary, dict) else None
    raw = _read_config(run_dir)
    metrics = _read_records(run_dir / "metrics.jsonl", ("step", "test_accuracy"))
    shift = _read_records(run_dir / "shift.jsonl", ("step",))
    ics = _read_records(run_dir / "ics.jsonl", ("step", "kind"))
    status, error = _run_status(summary, metrics)
    s = summary or {}
    if raw is not None:
        config = reduce_config(flatten(raw))
        if s.get("experiment") and experiment_name(config) is None:
            config["experiment"] = s["experiment"]
    else:
        config = {key: s[f] for f, key in SUMMARY_FIELDS.items() if s.get(f) is not None}
    seed = s.get("seed", raw.get("seed") if raw else None)
    try:
        seed = None if seed is None else int(seed)
    except (TypeError, ValueError):
        seed = None
    return Run(run_dir, s, config, raw is not None, metrics, shift, status, seed, error, ics)


def seed_order(run: Run) -> tuple:
    """Sort key of runs: by seed, runs without a known seed last, then by path."""
    return (run.seed is None, run.seed if run.seed is not None else 0, str(run.path))
