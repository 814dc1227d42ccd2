"""``bnexp report SWEEP_DIR``: tables, verdicts and figures from a sweep's run directories.

What it reproduces (Ioffe & Szegedy, 2015):

* Sec. 4.1 / Fig. 1(a): test accuracy vs training steps, with and without BN, and
  the number of steps each configuration needs to reach given test accuracies;
  the speedup of BN = mean steps without BN / mean steps with BN.
* Sec. 4.1 / Fig. 1(b, c): the 15th, 50th and 85th percentiles of the input to a
  typical sigmoid of the last hidden layer over training, without and with BN,
  and per layer how far the median and the 15-85 spread moved (stability).
* Sec. 4.2 (table of the CIFAR-style presets): the steps each preset needs to reach
  the baseline's best test accuracy, as a multiple of the baseline's steps.

And, when the runs recorded the measurements of :mod:`bnexp.ics`, the section "Does BN
reduce internal covariate shift?" (:data:`ICS_TITLE`): per configuration the BN paper's
distribution view (how far each layer's input distribution moved, Wasserstein-1, from
``shift.jsonl``'s ``shift_metrics``) beside Santurkar et al. 2018's gradient-based ICS
(Def. 2.1) and loss-landscape smoothness (Sec. 3.1) from ``ics.jsonl``, the probes' cost,
BN vs no BN and noisy BN vs BN verdicts, and what the sweep supports (see
:func:`ics_section`). Configurations that differ in bn.enabled / bn.noise are then named
"BN", "noisy BN" and "no BN" (:func:`variant_label`).

Inputs: every folder below SWEEP_DIR holding ``summary.json`` or
``.hydra/config.yaml`` is one run (see :mod:`bnexp.rundir` for the layout). Runs are
grouped into *configurations*: the flattened ``.hydra/config.yaml`` minus ``seed``
and minus :data:`IGNORED_KEYS` (keys that do not change what is trained), or, when
the config file is missing, the summary's fields (:data:`SUMMARY_FIELDS`).

Statistics: "mean ± std" is over the seeds (completed runs) of a configuration,
and std is the **population** standard deviation (``numpy.std``, ddof=0), so one
seed gives std 0. Steps to a target are averaged only over the seeds that reached
it; the others are counted as "not reached (k/n)". A run is *completed* when its
status is ``finished`` or ``diverged`` and it has ``metrics.jsonl``; a run with
status ``failed``, an unreadable or missing ``summary.json``, or missing metrics
counts as failed; ``running``/``interrupted`` runs count as incomplete. Failed and
incomplete runs are left out of every mean. No value is ever made up: a missing
value is written as "not reached" or "n/a" (an empty cell in the CSV, null in JSON).

Outputs, written into SWEEP_DIR: :data:`REPORT_FILES`, plus :data:`ICS_FILES` for the
kinds of ICS measurement the runs hold (only then).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import yaml

from bnexp.rundir import COMPLETE_STATUSES, first_reached, read_jsonl, read_summary, write_json

REPORT_FILES = ("report.md", "report.csv", "report.json", "accuracy_vs_steps.png", "percentiles.png",
                "stability.png")
# Figures of the ICS section, each written only when some run holds its data.
ICS_FILES = ("ics_distribution.png", "ics_gradient.png", "ics_landscape.png")
DEFAULT_TARGETS = (0.9, 0.95, 0.97, 0.98)

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
# Short names of config keys in configuration labels.
KEY_ALIASES = {"bn.enabled": "bn", "model.name": "model", "data.name": "data", "optim.name": "optim"}
# Keys named in the label when nothing varies across the sweep.
SALIENT_KEYS = ("bn.enabled", "act", "lr")
STD_NOTE = "std is the population standard deviation over seeds (numpy.std, ddof=0)"
SEC42_TITLE = "Steps to reach the baseline's best accuracy (paper Sec. 4.2 form)"
ICS_TITLE = "Does BN reduce internal covariate shift?"
# Verdict thresholds of the ICS section. A measure is "lower" with BN only when it is below
# (1 - ICS_MARGIN) x the no-BN value; cos(G, G') differs only when apart by more than
# COS_MARGIN; noisy BN is "nearly as fast" as BN when it needs at most NEARLY_AS_FAST x BN's steps.
ICS_MARGIN = 0.1
COS_MARGIN = 0.02
NEARLY_AS_FAST = 1.5


class ReportError(Exception):
    """A user-level problem with the report's input or output folder (exit code 2)."""


# ----------------------------------------------------------------------------- runs


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


@dataclass
class ConfigGroup:
    """The runs (seeds) of one configuration.

    Attributes:
        key: canonical JSON of ``config`` (the grouping key).
        config: the reduced, flattened config shared by the runs.
        runs: the runs, sorted by seed.
        label: short label (the keys that vary across the sweep, or the experiment name).
        variant_label: the label naming the BN variant ("BN", "noisy BN", "no BN") plus the
            other varying keys, see :func:`variant_label`; used by the ICS section.
    """

    key: str
    config: dict
    runs: list[Run] = field(default_factory=list)
    label: str = ""
    variant_label: str = ""

    @property
    def completed(self) -> list[Run]:
        """The finished and diverged runs."""
        return [r for r in self.runs if r.completed]

    @property
    def bn(self) -> bool | None:
        """bn.enabled of the configuration (None when unknown)."""
        v = self.config.get("bn.enabled")
        return None if v is None else bool(v)

    @property
    def noisy(self) -> bool:
        """True for noisy BN (BN followed by injected time-varying noise, Santurkar et al. 2018):
        bn.enabled and bn.noise of the config, else the summaries' ``bn_noise``."""
        if self.bn is not True:
            return False
        v = self.config.get("bn.noise")
        if v is None:
            return any(r.summary.get("bn_noise") is True for r in self.runs)
        return bool(v)

    @property
    def experiment(self) -> str | None:
        """The experiment (preset) name, or None."""
        return experiment_name(self.config)

    @property
    def max_steps(self) -> int | None:
        """trainer.max_steps of the configuration, else the largest summary ``max_steps``."""
        v = self.config.get("trainer.max_steps")
        if v is None:
            vals = [r.summary.get("max_steps") for r in self.runs if r.summary.get("max_steps") is not None]
            v = max(vals) if vals else None
        return None if v is None else int(v)


def find_run_dirs(sweep_dir: Path) -> list[Path]:
    """Run directories under ``sweep_dir``: folders with summary.json or .hydra/config.yaml.

    Searches recursively (``sweep_dir`` itself included) and does not descend into a run
    directory once found.

    Returns:
        sorted paths; [] when there are none.
    """
    found = []
    for root, dirs, files in os.walk(sweep_dir):
        root_p = Path(root)
        if "summary.json" in files or (root_p / ".hydra" / "config.yaml").is_file():
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


def reduce_config(flat: dict) -> dict:
    """Drop ``seed``, :data:`IGNORED_KEYS` and every ``hydra`` key from a flattened config."""
    return {k: v for k, v in flat.items()
            if k not in IGNORED_KEYS and k != "hydra" and not k.startswith("hydra.")}


def experiment_name(config: dict) -> str | None:
    """The preset name in a flattened config (``experiment`` or ``experiment.name``), else None."""
    v = config.get("experiment", config.get("experiment.name"))
    return None if v in (None, "") else str(v)


def _canon(v: Any) -> Any:
    """A comparable form of a config value: numbers as float (1 == 1.0), lists item by item."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, (list, tuple)):
        return [_canon(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _canon(x) for k, x in v.items()}
    return str(v)


def config_key(config: dict, exclude: Iterable[str] = ()) -> str:
    """Canonical JSON of a flattened config (keys in ``exclude`` or under ``exclude.`` dropped)."""
    ex = tuple(exclude)
    items = {k: _canon(v) for k, v in config.items()
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


def _seed_order(run: Run) -> tuple:
    return (run.seed is None, run.seed if run.seed is not None else 0, str(run.path))


def group_runs(runs: list[Run]) -> list[ConfigGroup]:
    """Group runs by configuration (the reduced config; ``seed`` is not part of it).

    A run without .hydra/config.yaml joins the one config-backed configuration whose
    keys agree with all its summary fields; otherwise it forms its own configuration.

    Returns:
        the configurations, runs sorted by seed, in :func:`_group_order`; labels set.
    """
    groups: dict[str, ConfigGroup] = {}
    for run in (r for r in runs if r.has_config):
        key = config_key(run.config)
        groups.setdefault(key, ConfigGroup(key, dict(run.config))).runs.append(run)
    backed = list(groups.values())
    for run in (r for r in runs if not r.has_config):
        matches = [g for g in backed if run.config and all(
            k in g.config and _canon(g.config[k]) == _canon(v) for k, v in run.config.items())]
        if len(matches) == 1:
            matches[0].runs.append(run)
            continue
        key = "summary:" + config_key(run.config)
        groups.setdefault(key, ConfigGroup(key, dict(run.config))).runs.append(run)
    out = list(groups.values())
    for g in out:
        g.runs.sort(key=_seed_order)
    label_groups(out)
    out.sort(key=_group_order)
    return out


def varying_keys(groups: list[ConfigGroup]) -> list[str]:
    """Config keys with more than one value across the configurations (missing keys ignored).

    Order: ``experiment`` and ``bn.enabled`` first, then as in the first config.
    """
    order: list[str] = []
    for g in groups:
        order.extend(k for k in g.config if k not in order)
    out = [k for k in order
           if len({json.dumps(_canon(g.config[k]), sort_keys=True) for g in groups if k in g.config}) > 1]
    front = [k for k in ("experiment", "bn.enabled") if k in out]
    return front + [k for k in out if k not in front]


def format_value(v: Any) -> str:
    """A config value as written in labels: true/false, 0.5, [32,64], null."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(format_value(x) for x in v) + "]"
    return str(v)


def _kv_label(config: dict, keys: Iterable[str]) -> str:
    return " ".join(f"{KEY_ALIASES.get(k, k)}={format_value(config[k])}" for k in keys if k in config)


def bn_variant(group: ConfigGroup) -> str | None:
    """The BN variant of a configuration: "BN", "noisy BN" or "no BN" (None when bn.enabled is unknown)."""
    if group.bn is None:
        return None
    if not group.bn:
        return "no BN"
    return "noisy BN" if group.noisy else "BN"


def variant_label(group: ConfigGroup, groups: list[ConfigGroup]) -> str:
    """A label naming the BN variant plus the other keys that vary across the sweep.

    E.g. "BN", "noisy BN lr=0.12", "no BN lr=0.12"; a preset: "bn_x5: BN", and when its
    name is shared by several configurations "bn_baseline: noisy BN" plus the other varying
    keys. Configurations built from summaries only are marked "[no config]"; when
    bn.enabled is unknown the group's label is returned.
    """
    v = bn_variant(group)
    if v is None:
        return group.label
    keys = [k for k in varying_keys(groups) if not (k.startswith("bn.") or k.startswith("experiment"))]
    kv = _kv_label(group.config, keys)
    exp = group.experiment
    if exp:
        shared = sum(g.experiment == exp for g in groups) > 1
        label = f"{exp}: {v}" + (f" {kv}" if shared and kv else "")
    else:
        label = f"{v} {kv}".strip()
    if group.key.startswith("summary:"):
        label += " [no config]"
    return label


def variant_labels_apply(groups: list[ConfigGroup]) -> bool:
    """True when the report's labels name the BN variants ("BN", "noisy BN", "no BN"): the
    configurations differ in bn.enabled / bn.noise and the configs know bn.noise (a noisy BN
    configuration exists, or some config has the key). Older sweeps keep "bn=true" labels."""
    variants = {bn_variant(g) for g in groups} - {None}
    return len(variants) > 1 and ("noisy BN" in variants or any("bn.noise" in g.config for g in groups))


def _dedupe(labels: list[str]) -> list[str]:
    """Append " #2", " #3", ... to repeated labels."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label + (f" #{seen[label]}" if seen[label] > 1 else ""))
    return out


def label_groups(groups: list[ConfigGroup]) -> None:
    """Set each group's label: its experiment name, else the keys that vary across the sweep.

    Experiment names shared by several configurations get the other varying keys
    appended; configurations built from summaries only are marked "[no config]". When
    :func:`variant_labels_apply`, configurations other than uniquely named presets get
    their :func:`variant_label` instead ("BN lr=0.12", "noisy BN lr=0.12", "no BN lr=0.12").
    Also sets every group's ``variant_label``.
    """
    vary = varying_keys(groups)
    other = [k for k in vary if k not in ("experiment", "experiment.name")]
    names = [g.experiment for g in groups]
    use_variants = variant_labels_apply(groups)
    for g in groups:
        if use_variants and g.config and bn_variant(g) and not (g.experiment and names.count(g.experiment) == 1):
            g.label = variant_label(g, groups)  # already marked "[no config]" where it applies
            continue
        if g.experiment:
            extra = _kv_label(g.config, other) if names.count(g.experiment) > 1 else ""
            label = f"{g.experiment} {extra}".strip()
        else:
            label = _kv_label(g.config, vary if vary else SALIENT_KEYS) or "all runs"
        if not g.config:
            label = "unknown configuration"
        if g.key.startswith("summary:"):
            label += " [no config]"
        g.label = label
    seen: dict[str, int] = {}
    for g in groups:
        seen[g.label] = seen.get(g.label, 0) + 1
        if seen[g.label] > 1:
            g.label += f" #{seen[g.label]}"
    for g, label in zip(groups, _dedupe([variant_label(g, groups) for g in groups])):
        g.variant_label = label


def pair_key(group: ConfigGroup) -> str:
    """The configuration without its ``bn.*`` keys and experiment name: BN and no BN of one setting share it."""
    return ("summary:" if group.key.startswith("summary:") else "") + config_key(
        group.config, ("bn", "experiment"))


def pair_label(group: ConfigGroup, groups: list[ConfigGroup]) -> str:
    """The varying keys of ``group`` other than bn.* and experiment, e.g. "lr=0.5" ("" if none)."""
    keys = [k for k in varying_keys(groups) if not (k.startswith("bn.") or k.startswith("experiment"))]
    return _kv_label(group.config, keys)


def _sort_value(v: Any) -> tuple:
    """Sort key of a config value: booleans, then numbers by value, then text."""
    if isinstance(v, bool):
        return (0, int(v), "")
    if isinstance(v, (int, float)):
        return (1, float(v) if math.isfinite(v) else math.inf, "")
    if isinstance(v, str):
        return (2, 0.0, v)
    return (3, 0.0, json.dumps(_canon(v), sort_keys=True, default=str))


def _group_order(g: ConfigGroup) -> tuple:
    """Sort key: the baseline preset first, then presets by name, then by setting with BN first."""
    exp = g.experiment
    vals = tuple((k, _sort_value(v)) for k, v in sorted(g.config.items())
                 if not k.startswith("bn.") and k != "experiment")
    return (exp != "baseline", exp is None, exp or "", vals, g.bn is not True, g.label)


def match_no_bn(group: ConfigGroup, groups: list[ConfigGroup]) -> ConfigGroup | None:
    """The no-BN configuration matching a BN one: same config except bn.* and experiment, bn.enabled false.

    Returns:
        the first such configuration, or None (also when ``group`` is not a BN configuration).
    """
    if group.bn is not True:
        return None
    pk = pair_key(group)
    for g in groups:
        if g.bn is False and pair_key(g) == pk:
            return g
    return None


# ------------------------------------------------------------------------ statistics


def target_key(target: float) -> str:
    """The key of a target in summary.json and the report: 0.95 -> "0.95"."""
    return f"{target:g}"


def steps_to_target(run: Run, target: float) -> int | None:
    """Steps the run needed to reach ``target``: summary ``steps_to_target`` if it lists the
    target, else recomputed from metrics.jsonl (Sec. 4.1). None = not reached."""
    recorded = run.summary.get("steps_to_target")
    if isinstance(recorded, dict):
        for k, v in recorded.items():
            try:
                if abs(float(k) - target) < 1e-12:
                    return None if v is None else int(v)
            except (TypeError, ValueError):
                continue
    return first_reached(run.metrics, target)


def _finite(values: Iterable) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)]


def mean_std(values: Iterable) -> tuple[float | None, float | None]:
    """(mean, population std with ddof=0) of the finite values; (None, None) when there are none."""
    v = _finite(values)
    if not v:
        return None, None
    return float(np.mean(v)), float(np.std(v))


def max_accuracy(run: Run) -> float | None:
    """The run's maximum test accuracy over metrics.jsonl (else summary best_test_accuracy)."""
    accs = _finite(r.get("test_accuracy") for r in run.metrics)
    if accs:
        return max(accs)
    v = _finite([run.summary.get("best_test_accuracy")])
    return v[0] if v else None


def final_accuracy(run: Run) -> float | None:
    """The run's final test accuracy: summary final_test_accuracy, else the last metrics record."""
    v = _finite([run.summary.get("final_test_accuracy")])
    if v:
        return v[0]
    accs = _finite([run.metrics[-1].get("test_accuracy")]) if run.metrics else []
    return accs[0] if accs else None


def accuracy_stat(values: list[float | None]) -> dict:
    """{"mean", "std", "n", "per_seed"} of accuracies in [0, 1] (None values left out of mean/std)."""
    m, s = mean_std(values)
    return {"mean": m, "std": s, "n": len(_finite(values)), "per_seed": values}


def reach_stat(steps: list[int | None]) -> dict:
    """Steps-to-target statistics over seeds.

    Args:
        steps: per seed, the step at which the target was reached, or None.

    Returns:
        {"n", "reached", "not_reached", "mean", "std", "per_seed", "text"}; mean/std (steps)
        are over the seeds that reached the target only (None when none did).
    """
    reached = [s for s in steps if s is not None]
    m, sd = mean_std(reached)
    st = {"n": len(steps), "reached": len(reached), "not_reached": len(steps) - len(reached),
          "mean": m, "std": sd, "per_seed": list(steps)}
    st["text"] = format_steps(st)
    return st


def format_steps(st: dict) -> str:
    """Cell text of a :func:`reach_stat`: "1,200 ± 163", "2,200 ± 200; not reached (1/3)",
    "not reached", or "n/a" when there are no completed runs."""
    if st["n"] == 0:
        return "n/a"
    if st["reached"] == 0:
        return "not reached"
    text = f"{st['mean']:,.0f} ± {st['std']:,.0f}"
    if st["not_reached"]:
        text += f"; not reached ({st['not_reached']}/{st['n']})"
    return text


def format_acc(st: dict) -> str:
    """Accuracy statistic in percent: "97.12 ± 0.05" ("n/a" when missing)."""
    if st["mean"] is None:
        return "n/a"
    return f"{100 * st['mean']:.2f} ± {100 * st['std']:.2f}"


def format_target(t: float) -> str:
    """0.95 -> "95%", 0.975 -> "97.5%"."""
    return f"{100 * t:g}%"


def compute_speedup(bn: dict, no_bn: dict, no_bn_max_steps: int | None) -> dict:
    """Speedup of BN over no BN at one target (Sec. 4.1, Fig. 1a): mean no-BN steps / mean BN steps.

    Args:
        bn, no_bn: :func:`reach_stat` of the BN and the matching no-BN configuration.
        no_bn_max_steps: the no-BN runs' step budget (trainer.max_steps).

    Returns:
        {"value", "lower_bound", "text"}: the ratio when both reached the target in all
        seeds; when BN did in all seeds and no BN in none, ``max_steps / mean BN steps``
        with lower_bound true and text ">= X.Xx (lower bound)"; else value None, "n/a".
    """
    bn_all = bn["n"] > 0 and bn["reached"] == bn["n"] and (bn["mean"] or 0) > 0
    if bn_all and no_bn["n"] > 0 and no_bn["reached"] == no_bn["n"]:
        v = no_bn["mean"] / bn["mean"]
        return {"value": v, "lower_bound": False, "text": f"{v:.1f}x"}
    if bn_all and no_bn["n"] > 0 and no_bn["reached"] == 0 and no_bn_max_steps:
        v = no_bn_max_steps / bn["mean"]
        return {"value": v, "lower_bound": True, "text": f">= {v:.1f}x (lower bound)"}
    return {"value": None, "lower_bound": None, "text": "n/a"}


def _band_keys(rec: dict) -> tuple[str, str, str] | None:
    """(lowest, middle, highest) percentile keys of a monitor record, e.g. ("p15", "p50", "p85")."""
    ps = []
    for k in rec:
        if k.startswith("p"):
            try:
                ps.append((float(k[1:]), k))
            except ValueError:
                pass
    if len(ps) < 2:
        return None
    ps.sort()
    return ps[0][1], ps[len(ps) // 2][1], ps[-1][1]


def layer_stability(shift: list[dict]) -> dict[str, dict]:
    """How each layer's input to the nonlinearity moved between the first and the last monitor record.

    Implements the numbers behind Fig. 1(b, c) (Sec. 4.1), per layer of ``shift.jsonl``.

    Args:
        shift: shift.jsonl records sorted by step (at least two distinct steps needed).

    Returns:
        {layer: {"median_shift": |p50_end - p50_first| (pre-activation units),
                 "spread_ratio": (p85 - p15)_end / (p85 - p15)_first}}; a value is None when
        it cannot be computed (missing keys, non-finite values, zero first spread).
        {} when there are fewer than two records.
    """
    if len(shift) < 2 or shift[0]["step"] == shift[-1]["step"]:
        return {}
    first, end = shift[0].get("layers") or {}, shift[-1].get("layers") or {}
    out = {}
    for name, a in first.items():
        b = end.get(name)
        keys = _band_keys(a) if isinstance(a, dict) else None
        if not isinstance(b, dict) or keys is None:
            continue
        lo, mid, hi = keys
        vals = _finite([a.get(lo), a.get(mid), a.get(hi), b.get(lo), b.get(mid), b.get(hi)])
        if len(vals) < 6:
            out[name] = {"median_shift": None, "spread_ratio": None}
            continue
        spread0 = a[hi] - a[lo]
        out[name] = {"median_shift": abs(b[mid] - a[mid]),
                     "spread_ratio": (b[hi] - b[lo]) / spread0 if spread0 > 0 else None}
    return out


def config_stability(group: ConfigGroup) -> dict[str, dict]:
    """Mean over the finished runs (seeds) of :func:`layer_stability`.

    Diverged runs are left out (their last record is not the end of training).

    Returns:
        {layer: {"median_shift": mean, "spread_ratio": mean, "n": seeds with values,
                 "per_seed": {"median_shift": [...], "spread_ratio": [...]}}}.
    """
    per_run = [layer_stability(r.shift) for r in group.runs if r.status == "finished"]
    layers: list[str] = []
    for s in per_run:
        layers.extend(k for k in s if k not in layers)
    out = {}
    for layer in layers:
        ms = [s[layer]["median_shift"] for s in per_run if layer in s]
        sr = [s[layer]["spread_ratio"] for s in per_run if layer in s]
        out[layer] = {"median_shift": mean_std(ms)[0], "spread_ratio": mean_std(sr)[0],
                      "n": len(_finite(ms)), "per_seed": {"median_shift": ms, "spread_ratio": sr}}
    return out


def _run_record(run: Run, targets: list[float]) -> dict:
    """Per-seed values of one run, as stored in report.json."""
    rec = {"path": str(run.path), "seed": run.seed, "status": run.status, "error": run.error}
    if run.completed:
        rec.update({
            "max_test_accuracy": max_accuracy(run), "final_test_accuracy": final_accuracy(run),
            "steps_to_target": {target_key(t): steps_to_target(run, t) for t in targets},
            "diverged_step": run.summary.get("diverged_step"),
            "steps": run.summary.get("step"), "wall_time_s": run.summary.get("wall_time_s"),
            "stability": layer_stability(run.shift) if run.status == "finished" else {},
        })
    return rec


def summarize_group(group: ConfigGroup, targets: list[float]) -> dict:
    """All statistics of one configuration (over its completed runs), as stored in report.json.

    Returns:
        {"label", "config", "bn", "experiment", "max_steps", "runs", "completed",
         "diverged", "failed", "incomplete", "max_test_accuracy", "final_test_accuracy",
         "steps_to_target": {target: reach_stat}, "stability", "ics" (:func:`ics_summary`, None
         without ICS data), "seeds": [per-run records]}.
    """
    done = group.completed
    seeds = [_run_record(r, targets) for r in group.runs]
    return {
        "label": group.label, "config": group.config, "bn": group.bn, "experiment": group.experiment,
        "max_steps": group.max_steps, "runs": len(group.runs), "completed": len(done),
        "diverged": sum(r.status == "diverged" for r in group.runs),
        "failed": sum(r.status == "failed" for r in group.runs),
        "incomplete": sum(r.status == "incomplete" for r in group.runs),
        "max_test_accuracy": accuracy_stat([max_accuracy(r) for r in done]),
        "final_test_accuracy": accuracy_stat([final_accuracy(r) for r in done]),
        "steps_to_target": {target_key(t): reach_stat([steps_to_target(r, t) for r in done]) for t in targets},
        "stability": config_stability(group),
        "ics": ics_summary(group),
        "seeds": seeds,
    }


# ----------------------------------------------------------------------- Sec. 4.2


def format_multiple(m: float | None) -> str:
    """Steps as a multiple of the baseline's: 0.21 -> "0.21x (4.8x fewer)", 2.5 -> "2.50x (2.5x more)"."""
    if m is None:
        return "n/a"
    if abs(m - 1.0) < 1e-9:
        return "1.00x"
    if m < 1.0:
        return f"{m:.2f}x ({1 / m:.1f}x fewer)" if m > 0 else f"{m:.2f}x"
    return f"{m:.2f}x ({m:.1f}x more)"


def sec42_table(groups: list[ConfigGroup]) -> dict | None:
    """Paper Sec. 4.2 table: steps of every preset to reach the baseline's best test accuracy.

    The target is the mean over the baseline's completed seeds of each seed's maximum
    test accuracy; steps are recomputed from metrics.jsonl (first evaluation >= target).

    Returns:
        None when no configuration is named "baseline"; else {"baseline", "target",
        "target_per_seed", "rows": [{"label", "experiment", "runs", "completed", "diverged",
        "failed", "steps" (reach_stat), "multiple", "multiple_text", "max_test_accuracy"}]}
        with the baseline first. ``multiple`` = mean preset steps / mean baseline steps
        (over the seeds that reached the target), None when either has none.
    """
    presets = [g for g in groups if g.experiment]
    base = next((g for g in presets if g.experiment == "baseline"), None)
    if base is None:
        return None
    base_max = [max_accuracy(r) for r in base.completed]
    target, _ = mean_std(base_max)
    out = {"baseline": base.label, "target": target, "target_per_seed": base_max, "rows": []}
    if target is None:
        return out
    base_steps = reach_stat([first_reached(r.metrics, target) for r in base.completed])
    for g in [base] + [p for p in presets if p is not base]:
        steps = reach_stat([first_reached(r.metrics, target) for r in g.completed])
        m = (steps["mean"] / base_steps["mean"] if steps["reached"] and base_steps["reached"]
             and base_steps["mean"] > 0 else None)
        text = "1.00x (reference)" if g is base else format_multiple(m)
        if m is not None and steps["not_reached"] and g is not base:
            text += f" [over {steps['reached']}/{steps['n']} seeds]"
        out["rows"].append({
            "label": g.label, "experiment": g.experiment, "runs": len(g.runs), "completed": len(g.completed),
            "diverged": sum(r.status == "diverged" for r in g.runs),
            "failed": sum(r.status == "failed" for r in g.runs),
            "steps": steps, "multiple": m, "multiple_text": text,
            "max_test_accuracy": accuracy_stat([max_accuracy(r) for r in g.completed]),
        })
    return out


# -------------------------------------------------------------------------- verdicts


def _side_phrase(side: str, t: float, st: dict, max_steps: int | None, diverged: int) -> str:
    """One side of a comparison: "BN reached 95% in 1,200 ± 163 steps", "no BN did not reach ..."."""
    within = f" within {max_steps:,} steps" if max_steps else ""
    div = f" ({diverged} diverged)" if diverged else ""
    if st["n"] == 0:
        return f"{side} has no completed runs"
    if st["reached"] == st["n"]:
        return f"{side} reached {format_target(t)} in {st['mean']:,.0f} ± {st['std']:,.0f} steps"
    if st["reached"] == 0:
        return f"{side} did not reach {format_target(t)}{within} in {st['n']}/{st['n']} runs{div}"
    return (f"{side} reached {format_target(t)} in {st['reached']}/{st['n']} runs "
            f"({st['mean']:,.0f} ± {st['std']:,.0f} steps over those) and did not{within} in "
            f"{st['not_reached']}/{st['n']}{div}")


def _fewer(v: float) -> str:
    return f"{v:.1f}x fewer steps" if v >= 1 else f"{1 / v:.1f}x more steps"


def target_verdict(ctx: str, t: float, bn: dict, nb: dict, sp: dict, nb_max: int | None,
                   nb_div: int, bn_max: int | None, bn_div: int) -> str:
    """The verdict line of one BN/no-BN pair at one target, e.g.
    "At lr=0.5: BN reached 95% in 3,100 ± 200 steps, no BN in 48,000 ± 1,500: 15.5x fewer steps."."""
    pre = f"{ctx}: " if ctx else ""
    if sp["value"] is not None and not sp["lower_bound"]:
        return (f"{pre}BN reached {format_target(t)} in {bn['mean']:,.0f} ± {bn['std']:,.0f} steps, "
                f"no BN in {nb['mean']:,.0f} ± {nb['std']:,.0f}: {_fewer(sp['value'])}.")
    line = f"{pre}{_side_phrase('BN', t, bn, bn_max, bn_div)}; {_side_phrase('no BN', t, nb, nb_max, nb_div)}"
    if sp["lower_bound"]:
        line += f": at least {sp['value']:.1f}x fewer steps (lower bound: max_steps / BN steps)"
    return line + "."


def accuracy_verdict(ctx: str, bn: dict, nb: dict) -> str | None:
    """Final (and max) test accuracy of BN vs no BN, e.g.
    "At lr=0.5: final test accuracy BN 98.10 ± 0.05%, no BN 96.00 ± 0.10%: BN higher by 2.10 points."."""
    fb, fn = bn["final_test_accuracy"], nb["final_test_accuracy"]
    if fb["mean"] is None or fn["mean"] is None:
        return None
    pre = f"{ctx}: " if ctx else ""
    d = 100 * (fb["mean"] - fn["mean"])
    cmp = "equal" if abs(d) < 0.005 else (f"BN higher by {d:.2f} points" if d > 0 else
                                          f"BN lower by {-d:.2f} points")
    line = f"{pre}final test accuracy BN {format_acc(fb)}%, no BN {format_acc(fn)}%: {cmp}"
    mb, mn = bn["max_test_accuracy"], nb["max_test_accuracy"]
    if mb["mean"] is not None and mn["mean"] is not None:
        line += f" (max {format_acc(mb)}% vs {format_acc(mn)}%)"
    div = [f"{side} {s['diverged']}/{s['completed']} diverged" for side, s in (("BN", bn), ("no BN", nb))
           if s["diverged"]]
    if div:
        line += f" [{', '.join(div)}: their final value is the last evaluation before divergence]"
    return line + "."


def _context(bn_g: ConfigGroup, nb_g: ConfigGroup, groups: list[ConfigGroup]) -> str:
    """Prefix of a pair's verdicts: "At lr=0.5", "baseline vs bn_baseline", "noisy BN vs no BN at
    lr=0.5" (the side called "BN" in the verdict is then noisy BN), or ""."""
    if bn_g.experiment or nb_g.experiment:
        return f"{bn_g.label} vs {nb_g.label}"
    pl = pair_label(bn_g, groups)
    if bn_g.noisy:
        return "noisy BN vs no BN" + (f" at {pl}" if pl else "")
    return f"At {pl}" if pl else ""


def verdict_lines(groups: list[ConfigGroup], stats: dict[str, dict], targets: list[float],
                  sec42: dict | None) -> list[str]:
    """Verdict sentences computed from the statistics: per BN/no-BN pair and target (Sec. 4.1),
    final accuracy, diverged and failed runs, and the Sec. 4.2 multiples."""
    lines: list[str] = []
    for g in groups:
        nb_g = match_no_bn(g, groups)
        s = stats[g.key]
        if nb_g is None:
            if g.bn and not g.experiment:
                lines.append(f"{g.label}: no matching no-BN configuration in this sweep; no speedup computed.")
            continue
        n = stats[nb_g.key]
        ctx = _context(g, nb_g, groups)
        for t in targets:
            tk = target_key(t)
            sp = s["speedup"][tk]
            lines.append(target_verdict(ctx, t, s["steps_to_target"][tk], n["steps_to_target"][tk], sp,
                                        nb_g.max_steps, n["diverged"], g.max_steps, s["diverged"]))
        acc = accuracy_verdict(ctx, s, n)
        if acc:
            lines.append(acc)
    for g in groups:
        s = stats[g.key]
        if s["diverged"]:
            at = [r.summary.get("diverged_step") for r in g.runs if r.status == "diverged"]
            at_txt = ", ".join(f"{a:,}" for a in at if isinstance(a, int))
            lines.append(f"{g.label}: {s['diverged']}/{s['completed']} completed runs diverged"
                         + (f" (at steps {at_txt})." if at_txt else "."))
        if s["failed"]:
            errs = sorted({r.error or "unknown error" for r in g.runs if r.status == "failed"})
            lines.append(f"{g.label}: {s['failed']}/{s['runs']} runs failed ({'; '.join(errs)}).")
        if s["incomplete"]:
            lines.append(f"{g.label}: {s['incomplete']}/{s['runs']} runs are incomplete (running or "
                         "interrupted) and are left out.")
    lines.extend(_sec42_verdicts(sec42))
    return lines


def steps_phrase(st: dict) -> str:
    """A :func:`reach_stat` in a sentence: "5,000 ± 816 steps", or with the seeds that did not
    reach the target: "2,500 ± 500 steps in 2/3 runs (not reached in 1/3)"."""
    if st["reached"] == 0:
        return f"not reached in {st['n']}/{st['n']} runs" if st["n"] else "n/a"
    text = f"{st['mean']:,.0f} ± {st['std']:,.0f} steps"
    if st["not_reached"]:
        text += f" in {st['reached']}/{st['n']} runs (not reached in {st['not_reached']}/{st['n']})"
    return text


def _sec42_verdicts(sec42: dict | None) -> list[str]:
    """One line per preset of the Sec. 4.2 table."""
    if not sec42 or sec42["target"] is None:
        return []
    tgt = f"{100 * sec42['target']:.2f}%"
    base = steps_phrase(sec42["rows"][0]["steps"])
    out = []
    for row in sec42["rows"][1:]:
        st = row["steps"]
        if st["reached"] == 0:
            out.append(f"{row['label']} did not reach the baseline's best accuracy ({tgt}) in "
                       f"{st['n']}/{st['n']} runs.")
            continue
        out.append(f"{row['label']} reached the baseline's best accuracy ({tgt}) in {steps_phrase(st)}, "
                   f"the baseline in {base}: {row['multiple_text']}.")
    return out


# ------------------------------------------------- Does BN reduce internal covariate shift?


def _layer_avg(layers: Any, key: str) -> float | None:
    """Mean over the layers of ``{layer: {key: value}}`` of the finite values of ``key`` (None if none)."""
    if not isinstance(layers, dict):
        return None
    vals = _finite(v.get(key) for v in layers.values() if isinstance(v, dict))
    return float(np.mean(vals)) if vals else None


def value_stat(values: list[float | None]) -> dict:
    """{"mean", "std", "n", "per_seed"} over seeds of any measurement (None values left out of mean/std)."""
    m, s = mean_std(values)
    return {"mean": m, "std": s, "n": len(_finite(values)), "per_seed": list(values)}


def _shift_metric_records(run: Run) -> list[dict]:
    """shift.jsonl records of the run that carry ``shift_metrics`` (by step)."""
    return [r for r in run.shift if isinstance(r.get("shift_metrics"), dict) and r["shift_metrics"]]


def distribution_series(run: Run) -> tuple[list[int], list[float | None]]:
    """(steps, W1 from the first record averaged over layers) of one run's shift_metrics, for the figure."""
    recs = _shift_metric_records(run)
    return [int(r["step"]) for r in recs], [_layer_avg(r["shift_metrics"], "w1_first") for r in recs]


def run_distribution_view(run: Run) -> dict | None:
    """The BN paper's distribution view of one run (Ioffe & Szegedy 2015, Sec. 1-2).

    From ``shift.jsonl``'s ``shift_metrics`` (see :class:`bnexp.ics.DistributionShiftTracker`):
    how far each layer's pooled input to the nonlinearity, on the fixed probe set, moved.

    Returns:
        None when no record has shift_metrics; else {"records", "final_step",
        "w1_prev_mean": mean over the records after the first (step 0, the reference whose
        values are 0 by definition) of w1_prev averaged over layers,
        "final_w1_first" / "final_mean_shift_first" / "final_log_std_ratio_first": the last
        record's values averaged over layers, "final_w1_first_per_layer": {layer: w1_first}};
        the final values are None when there is no record after the first.
    """
    recs = _shift_metric_records(run)
    if not recs:
        return None
    later = [r for r in recs if r["step"] > recs[0]["step"]]
    last = later[-1]["shift_metrics"] if later else None
    return {
        "records": len(recs), "final_step": int(later[-1]["step"]) if later else None,
        "w1_prev_mean": mean_std([_layer_avg(r["shift_metrics"], "w1_prev") for r in later])[0],
        "final_w1_first": _layer_avg(last, "w1_first"),
        "final_mean_shift_first": _layer_avg(last, "mean_shift_first"),
        "final_log_std_ratio_first": _layer_avg(last, "log_std_ratio_first"),
        "final_w1_first_per_layer": ({k: v.get("w1_first") for k, v in last.items() if isinstance(v, dict)}
                                     if last else {}),
    }


def _grad_ics_records(run: Run) -> list[dict]:
    return [r for r in run.ics if r.get("kind") == "grad_ics" and isinstance(r.get("layers"), dict) and r["layers"]]


def _grad_layers(recs: list[dict]) -> tuple[list[str], list[str]]:
    """(all layer names in order, the hidden layers after the first: layer2..layerK).

    The classifier is not a hidden layer; layer1's gradient-based ICS is 0 (cos 1) by
    definition, since no layer precedes it (Santurkar et al. 2018, Def. 2.1).
    """
    names: list[str] = []
    for r in recs:
        names.extend(k for k in r["layers"] if k not in names)
    hidden = [n for n in names if n != "classifier"]
    return names, hidden[1:]


def _probe_avg(rec: dict, layers: list[str], key: str) -> float | None:
    return _layer_avg({n: rec["layers"].get(n) for n in layers}, key)


def gradient_series(run: Run) -> tuple[list[int], list[float | None], list[float | None]]:
    """(steps, ||G - G'|| and cos(G, G') averaged over layer2..layerK) of one run's grad_ics probes."""
    recs = _grad_ics_records(run)
    _, later = _grad_layers(recs)
    return ([int(r["step"]) for r in recs], [_probe_avg(r, later, "l2") for r in recs],
            [_probe_avg(r, later, "cos") for r in recs])


def run_gradient_view(run: Run) -> dict | None:
    """Santurkar et al.'s gradient-based ICS (2018, Def. 2.1) of one run, from ``ics.jsonl``.

    Returns:
        None without grad_ics records; else {"probes", "layers" (layer2..layerK),
        "l2" / "cos": mean over probes of ||G_i - G'_i||_2 / cos(G_i, G'_i) averaged over
        layer2..layerK (None with a single hidden layer; NaN cosines left out),
        "per_layer": {layer: {"l2", "cos", "g_norm"}: mean over probes} (layer1 and the
        classifier included)}.
    """
    recs = _grad_ics_records(run)
    if not recs:
        return None
    names, later = _grad_layers(recs)
    per_layer = {n: {k: mean_std([(r["layers"].get(n) or {}).get(k) for r in recs
                                  if isinstance(r["layers"].get(n), dict)])[0] for k in ("l2", "cos", "g_norm")}
                 for n in names}
    return {"probes": len(recs), "layers": later,
            "l2": mean_std([_probe_avg(r, later, "l2") for r in recs])[0],
            "cos": mean_std([_probe_avg(r, later, "cos") for r in recs])[0], "per_layer": per_layer}


LANDSCAPE_KEYS = ("loss_variation", "grad_predictiveness", "beta_smoothness")


def _landscape_records(run: Run) -> list[dict]:
    return [r for r in run.ics if r.get("kind") == "landscape"]


def landscape_series(run: Run) -> tuple[list[int], dict[str, list[float | None]]]:
    """(steps, {key: values}) of one run's landscape probes, keys :data:`LANDSCAPE_KEYS`."""
    recs = _landscape_records(run)
    vals = {k: [(_finite([r.get(k)]) or [None])[0] for r in recs] for k in LANDSCAPE_KEYS}
    return [int(r["step"]) for r in recs], vals


def run_landscape_view(run: Run) -> dict | None:
    """Loss-landscape smoothness along the gradient (Santurkar et al. 2018, Sec. 3.1) of one run.

    Returns:
        None without landscape records; else {"probes", "loss_variation",
        "grad_predictiveness", "beta_smoothness"}: means over the probes (finite values).
    """
    recs = _landscape_records(run)
    if not recs:
        return None
    return {"probes": len(recs), **{k: mean_std([r.get(k) for r in recs])[0] for k in LANDSCAPE_KEYS}}


PROBE_KINDS = ("eval", "monitor", "grad_ics", "landscape")


def ics_summary(group: ConfigGroup) -> dict | None:
    """The ICS measurements of one configuration: means ± std over its finished seeds.

    Diverged runs are left out (as for the stability numbers: their last record is not the
    end of training). Each view's values are per seed those of :func:`run_distribution_view`,
    :func:`run_gradient_view` and :func:`run_landscape_view`; a view is None ("not measured")
    when no finished seed has its data.

    Returns:
        None when no finished run has any of the three views; else {"label" (the
        :func:`variant_label`), "variant", "seeds" (finished runs), "distribution":
        {"seeds", "w1_prev_mean", "final_w1_first", "final_mean_shift_first",
        "final_log_std_ratio_first", "final_w1_first_per_layer": {layer: stat}},
        "gradient": {"seeds", "probes", "layers", "l2", "cos", "per_layer": {layer: {"l2",
        "cos", "g_norm"}}}, "landscape": {"seeds", "probes", "loss_variation",
        "grad_predictiveness", "beta_smoothness"}, "probe_time_s": {kind: stat} (seconds per
        run, summary.json) or None}; every stat is :func:`value_stat`.
    """
    runs = [r for r in group.runs if r.status == "finished"]
    dist = [v for v in map(run_distribution_view, runs) if v]
    grad = [v for v in map(run_gradient_view, runs) if v]
    land = [v for v in map(run_landscape_view, runs) if v]
    if not (dist or grad or land):
        return None
    out: dict = {"label": group.variant_label or group.label, "variant": bn_variant(group), "seeds": len(runs),
                 "distribution": None, "gradient": None, "landscape": None, "probe_time_s": None}
    if dist:
        layers: list[str] = []
        for v in dist:
            layers.extend(k for k in v["final_w1_first_per_layer"] if k not in layers)
        out["distribution"] = {
            "seeds": len(dist),
            **{k: value_stat([v[k] for v in dist]) for k in ("w1_prev_mean", "final_w1_first",
                                                             "final_mean_shift_first", "final_log_std_ratio_first")},
            "final_w1_first_per_layer": {n: value_stat([v["final_w1_first_per_layer"].get(n) for v in dist])
                                         for n in layers},
        }
    if grad:
        names: list[str] = []
        later: list[str] = []
        for v in grad:
            names.extend(k for k in v["per_layer"] if k not in names)
            later.extend(k for k in v["layers"] if k not in later)
        out["gradient"] = {
            "seeds": len(grad), "probes": [v["probes"] for v in grad], "layers": later,
            "l2": value_stat([v["l2"] for v in grad]), "cos": value_stat([v["cos"] for v in grad]),
            "per_layer": {n: {k: value_stat([v["per_layer"].get(n, {}).get(k) for v in grad])
                              for k in ("l2", "cos", "g_norm")} for n in names},
        }
    if land:
        out["landscape"] = {"seeds": len(land), "probes": [v["probes"] for v in land],
                            **{k: value_stat([v[k] for v in land]) for k in LANDSCAPE_KEYS}}
    times = [r.summary.get("probe_time_s") for r in runs if isinstance(r.summary.get("probe_time_s"), dict)]
    if times:
        out["probe_time_s"] = {k: value_stat([t.get(k) for t in times]) for k in PROBE_KINDS}
    return out


def format_stat(st: dict | None, missing: str = "n/a") -> str:
    """A :func:`value_stat` as "0.1234 ± 0.005" (4 significant digits; ``missing`` for None)."""
    if st is None or st["mean"] is None:
        return missing
    return f"{st['mean']:.4g} ± {st['std']:.2g}"


def _g(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def _ratio(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def _lower(x: float | None, y: float | None) -> bool | None:
    """x below (1 - ICS_MARGIN) * y; None when either is missing."""
    if x is None or y is None:
        return None
    return x < (1.0 - ICS_MARGIN) * y


def ics_comparison_sets(groups: list[ConfigGroup]) -> list[dict[str, ConfigGroup]]:
    """Matching configurations (same config except bn.* and experiment, :func:`pair_key`) by variant:
    [{"BN": g, "noisy BN": g, "no BN": g}] (the first of each variant), those with two variants or more."""
    sets: dict[str, dict[str, ConfigGroup]] = {}
    for g in groups:
        v = bn_variant(g)
        if v is not None:
            sets.setdefault(pair_key(g), {}).setdefault(v, g)
    return [s for s in sets.values() if len(s) > 1]


def distribution_verdict(pre: str, bn: dict | None, nb: dict | None) -> tuple[str, dict | None]:
    """BN vs no BN in the BN paper's distribution view: final W1 from the start, averaged over layers.

    Returns:
        (sentence, {"bn", "no_bn", "ratio", "reduced"}) -- reduced when BN's W1 is below
        (1 - ICS_MARGIN) x no BN's; (a "not measured" sentence, None) without the data.
    """
    bd, nd = (bn or {}).get("distribution"), (nb or {}).get("distribution")
    x = bd["final_w1_first"]["mean"] if bd else None
    y = nd["final_w1_first"]["mean"] if nd else None
    if x is None or y is None:
        return f"{pre}distribution view: not measured (shift_metrics missing for BN or no BN).", None
    ratio = x / y if y > 0 else None
    reduced = bool(_lower(x, y))
    line = (f"{pre}distribution view: at the end, the input distributions of BN's layers moved W1 = "
            f"{format_stat(bd['final_w1_first'])} from their start, no BN's {format_stat(nd['final_w1_first'])}: "
            f"BN {'reduces' if reduced else 'does not reduce'} this measure of covariate shift "
            f"(ratio {_ratio(ratio)}; step-to-step W1 BN "
            f"{_g(bd['w1_prev_mean']['mean'])} vs no BN {_g(nd['w1_prev_mean']['mean'])}).")
    return line, {"bn": x, "no_bn": y, "ratio": ratio, "reduced": reduced}


def gradient_verdict(pre: str, bn: dict | None, nb: dict | None) -> tuple[str, dict | None]:
    """BN vs no BN in Santurkar et al.'s gradient view (Def. 2.1), layers 2..K averaged.

    "less" when BN's ||G - G'|| is below (1 - ICS_MARGIN) x no BN's and its cos(G, G') is not
    lower by more than COS_MARGIN; "as much or more" when ||G - G'|| is not lower and cos
    not higher by more than COS_MARGIN; otherwise "mixed" (the two measures disagree).

    Returns:
        (sentence, {"bn_l2", "no_bn_l2", "bn_cos", "no_bn_cos", "result"}), or
        (a "not measured" sentence, None).
    """
    bg, ng = (bn or {}).get("gradient"), (nb or {}).get("gradient")
    x = bg["l2"]["mean"] if bg else None
    y = ng["l2"]["mean"] if ng else None
    if x is None or y is None:
        return (f"{pre}gradient view (Santurkar Def. 2.1): not measured (no grad_ics probes of layers 2..K "
                "for BN or no BN)."), None
    a, b = bg["cos"]["mean"], ng["cos"]["mean"]
    l2_less = bool(_lower(x, y))
    cos_worse = a is not None and b is not None and a < b - COS_MARGIN
    cos_better = a is not None and b is not None and a > b + COS_MARGIN
    if l2_less and not cos_worse:
        result = "less"
    elif not l2_less and not cos_better:
        result = "as much or more"
    else:
        result = "mixed"
    tail = {"less": "BN shows less gradient-based ICS",
            "as much or more": "BN shows as much or more gradient-based ICS",
            "mixed": ("the two measures disagree: BN's ||G - G'|| is " + ("lower" if l2_less else "not lower")
                      + " but its cos(G, G') is " + ("lower" if cos_worse else "higher")
                      + ", so BN's gradient-based ICS is neither clearly less nor more")}[result]
    line = (f"{pre}gradient view (Santurkar Def. 2.1): mean ||G - G'|| BN {format_stat(bg['l2'])} vs no BN "
            f"{format_stat(ng['l2'])}, cos BN {_g(a)} vs no BN {_g(b)}: {tail}.")
    return line, {"bn_l2": x, "no_bn_l2": y, "bn_cos": a, "no_bn_cos": b, "result": result}


def landscape_verdict(pre: str, bn: dict | None, nb: dict | None) -> tuple[str, dict | None]:
    """BN vs no BN loss-landscape smoothness (Santurkar et al. 2018, Sec. 3.1): smoother when BN's
    beta-smoothness is below (1 - ICS_MARGIN) x no BN's.

    Returns:
        (sentence, {"bn": {key: mean}, "no_bn": {key: mean}, "smoother"}), or (a "not measured" sentence, None).
    """
    bl, nl = (bn or {}).get("landscape"), (nb or {}).get("landscape")
    x = bl["beta_smoothness"]["mean"] if bl else None
    y = nl["beta_smoothness"]["mean"] if nl else None
    if x is None or y is None:
        return f"{pre}landscape: not measured (no landscape probes for BN or no BN).", None
    smoother = bool(_lower(x, y))
    line = (f"{pre}landscape: beta-smoothness BN {format_stat(bl['beta_smoothness'])} vs no BN "
            f"{format_stat(nl['beta_smoothness'])}, loss variation BN {_g(bl['loss_variation']['mean'])} vs no BN "
            f"{_g(nl['loss_variation']['mean'])}, gradient predictiveness BN {_g(bl['grad_predictiveness']['mean'])}"
            f" vs no BN {_g(nl['grad_predictiveness']['mean'])}: BN's loss landscape is "
            f"{'smoother' if smoother else 'not smoother'} along the gradient.")
    return line, {"bn": {k: bl[k]["mean"] for k in LANDSCAPE_KEYS},
                  "no_bn": {k: nl[k]["mean"] for k in LANDSCAPE_KEYS}, "smoother": smoother}


def noisy_verdict(pre: str, noisy: dict, bn: dict | None, nb: dict | None, targets: list[float],
                  noisy_max_steps: int | None) -> tuple[str, dict | None]:
    """Noisy BN vs BN (Santurkar et al. 2018, Sec. 2.1): the steps to the highest target that BN
    reached in all seeds, and the slowdown factor = mean noisy-BN steps / mean BN steps
    (a lower bound max_steps / BN steps when noisy BN reached it in no seed).

    Args:
        pre: the sentence prefix ("At lr=0.5: " or "").
        noisy, bn, nb: :func:`summarize_group` statistics of noisy BN, BN and no BN (None if absent).
        targets: the report's targets.
        noisy_max_steps: noisy BN's trainer.max_steps.

    Returns:
        (sentence, {"target", "factor", "lower_bound", "nearly_as_fast", "faster_than_no_bn"})
        (factor None when not measurable), or (sentence, None) without a BN configuration.
    """
    if bn is None:
        return f"{pre}noisy BN: no matching BN configuration, so its slowdown is not measured.", None
    full = [t for t in targets if bn["steps_to_target"][target_key(t)]["n"] > 0
            and bn["steps_to_target"][target_key(t)]["reached"] == bn["steps_to_target"][target_key(t)]["n"]]
    if not full:
        return (f"{pre}noisy BN: BN reached none of the targets in all its seeds, so the slowdown of noisy BN is "
                "not measured."), {"target": None, "factor": None, "lower_bound": None, "nearly_as_fast": None,
                                   "faster_than_no_bn": None}
    t = max(full)
    tk = target_key(t)
    bs, ns = bn["steps_to_target"][tk], noisy["steps_to_target"][tk]
    sp = compute_speedup(bs, ns, noisy_max_steps)  # "speedup" of BN over noisy BN = slowdown of noisy BN
    nbs = nb["steps_to_target"][tk] if nb else None
    and_nb = f" (and no BN {steps_phrase(nbs)})" if nbs else ""
    bn_txt = f"BN {bs['mean']:,.0f} ± {bs['std']:,.0f}"
    factor, lb = sp["value"], sp["lower_bound"]
    if factor is not None and not lb:
        line = (f"{pre}noisy BN reached {format_target(t)} in {ns['mean']:,.0f} ± {ns['std']:,.0f} steps vs "
                f"{bn_txt}{and_nb}: ")
        line += (f"injected distribution shift slows BN training by factor {factor:.2f}." if factor >= 1 else
                 f"injected distribution shift does not slow BN training (factor {factor:.2f}).")
    elif factor is not None:
        within = f" within {noisy_max_steps:,} steps" if noisy_max_steps else ""
        line = (f"{pre}noisy BN did not reach {format_target(t)}{within} in {ns['n']}/{ns['n']} runs vs "
                f"{bn_txt}{and_nb}: injected distribution shift slows BN training by a factor of at least "
                f"{factor:.1f}.")
    else:
        line = (f"{pre}noisy BN: {steps_phrase(ns)} to reach {format_target(t)} vs {bn_txt}{and_nb}: the slowdown "
                "factor is not measured (noisy BN did not reach it in all its seeds, or has no completed runs).")
    faster = None
    if ns["n"] and ns["reached"] == ns["n"] and nbs and nbs["n"]:
        faster = nbs["reached"] < nbs["n"] or nbs["mean"] > ns["mean"]
    return line, {"target": t, "factor": factor, "lower_bound": lb,
                  "nearly_as_fast": None if factor is None else (not lb and factor <= NEARLY_AS_FAST),
                  "faster_than_no_bn": faster}


def _ics_accuracy_line(pre: str, sides: list[tuple[str, dict]]) -> str | None:
    """"final test accuracy: BN 98.10 ± 0.05%, noisy BN ..., no BN ..."."""
    parts = [f"{name} {format_acc(s['final_test_accuracy'])}%" for name, s in sides
             if s["final_test_accuracy"]["mean"] is not None]
    return f"{pre}final test accuracy: {', '.join(parts)}." if len(parts) > 1 else None


def supports_paragraph(pre: str, comp: dict) -> str:
    """The "What this sweep supports" sentence of one set of matching configurations, built only
    from the booleans of :func:`ics_section`'s comparison (``comp``); absent measures are named
    "not measured" and never counted."""
    favour_s: list[str] = []    # for Santurkar et al.'s account / against the ICS account
    favour_ics: list[str] = []  # for the BN paper's ICS account / against Santurkar et al.'s
    neutral: list[str] = []
    missing: list[str] = []
    d, g, ls, n = comp["distribution"], comp["gradient"], comp["landscape"], comp["noisy"]
    if d is None:
        missing.append("the distribution view")
    elif d["reduced"]:
        neutral.append(f"BN reduces the distribution shift of its layers' inputs (W1 ratio {_ratio(d['ratio'])}), "
                       "which both accounts accept")
    else:
        favour_s.append(f"BN does not reduce the distribution shift of its layers' inputs (W1 ratio "
                        f"{_ratio(d['ratio'])})")
    if "noisy BN" not in comp["labels"]:
        missing.append("noisy BN")
    elif n is None or n["factor"] is None:
        missing.append("the slowdown of noisy BN")
    elif n["nearly_as_fast"]:
        faster = ", and still faster than no BN" if n["faster_than_no_bn"] else ""
        favour_s.append(f"BN's gains coexist with injected covariate shift (noisy BN is nearly as fast as BN: "
                        f"factor {n['factor']:.2f}{faster})")
    else:
        bound = "at least " if n["lower_bound"] else ""
        favour_ics.append(f"injected covariate shift costs BN much of its speed (noisy BN needs {bound}"
                          f"{n['factor']:.1f}x BN's steps)")
    if g is None:
        missing.append("gradient-based ICS")
    elif g["result"] == "less":
        favour_ics.append("BN shows less gradient-based ICS")
    elif g["result"] == "as much or more":
        favour_s.append("BN shows as much or more gradient-based ICS")
    else:
        neutral.append("BN's gradient-based ICS is mixed (||G - G'|| and cos disagree)")
    if ls is None:
        missing.append("the loss landscape")
    elif ls["smoother"]:
        favour_s.append("BN's loss landscape is smoother along the gradient")
    else:
        favour_ics.append("BN's loss landscape is not smoother along the gradient")
    observed = neutral + favour_s + favour_ics
    text = pre + ("; ".join(observed) + ". " if observed else "")
    if favour_s and not favour_ics:
        text += ("This supports Santurkar et al.'s account (BN helps by making the optimization landscape "
                 "smoother) over the reduction of internal covariate shift.")
    elif favour_ics and not favour_s:
        text += ("This supports the BN paper's account (BN helps by reducing internal covariate shift) over "
                 "Santurkar et al.'s.")
    elif favour_s:
        text += (f"The evidence is mixed: {len(favour_s)} observation(s) favour Santurkar et al.'s account, "
                 f"{len(favour_ics)} the reduction of internal covariate shift.")
    else:
        text += "Nothing measured here favours either account."
    if missing:
        text += f" Not measured: {', '.join(missing)}."
    return text


def ics_section(groups: list[ConfigGroup], stats: dict[str, dict], targets: list[float]) -> dict | None:
    """The section "Does BN reduce internal covariate shift?" (:data:`ICS_TITLE`).

    Sets the BN paper's view (distribution shift of the layers' inputs; steps to a target
    with injected shift, i.e. noisy BN) beside Santurkar et al. 2018's (gradient-based ICS,
    Def. 2.1; loss-landscape smoothness, Sec. 3.1) for every set of matching configurations
    (:func:`ics_comparison_sets`), with verdicts computed from the numbers and the
    thresholds :data:`ICS_MARGIN`, :data:`COS_MARGIN` and :data:`NEARLY_AS_FAST`.

    Args:
        groups: the configurations.
        stats: :func:`summarize_group` of each, by key (with its ``ics`` from :func:`ics_summary`).
        targets: the report's targets.

    Returns:
        None when no configuration has ICS data; else {"title", "configurations": [labels of
        the configurations with data], "comparisons": [{"context", "labels": {variant: label},
        "distribution", "gradient", "landscape", "noisy", "verdicts", "supports"}],
        "verdicts": [all sentences], "supports": [paragraphs], "figures": [the ICS_FILES to draw]}.
    """
    with_data = [g for g in groups if stats[g.key].get("ics")]
    if not with_data:
        return None
    comparisons = []
    for s in ics_comparison_sets(groups):
        ctx = pair_label(next(iter(s.values())), groups)
        pre = f"At {ctx}: " if ctx else ""
        ics = {v: stats[g.key].get("ics") for v, g in s.items()}
        st = {v: stats[g.key] for v, g in s.items()}
        comp: dict = {"context": ctx, "labels": {v: g.variant_label for v, g in s.items()},
                      "distribution": None, "gradient": None, "landscape": None, "noisy": None, "verdicts": []}
        if "BN" in s and "no BN" in s:
            for key, fn in (("distribution", distribution_verdict), ("gradient", gradient_verdict),
                            ("landscape", landscape_verdict)):
                line, comp[key] = fn(pre, ics["BN"], ics["no BN"])
                comp["verdicts"].append(line)
        if "noisy BN" in s:
            line, comp["noisy"] = noisy_verdict(pre, st["noisy BN"], st.get("BN"), st.get("no BN"), targets,
                                                s["noisy BN"].max_steps)
            comp["verdicts"].append(line)
            nd = (ics["noisy BN"] or {}).get("distribution")
            bd = (ics.get("BN") or {}).get("distribution")
            if nd and bd and nd["final_w1_first"]["mean"] is not None and bd["final_w1_first"]["mean"] is not None:
                visible = _lower(bd["final_w1_first"]["mean"], nd["final_w1_first"]["mean"])
                comp["verdicts"].append(
                    f"{pre}noisy BN's layer inputs moved W1 = {format_stat(nd['final_w1_first'])} from their start "
                    f"(BN {format_stat(bd['final_w1_first'])}): the injected shift is "
                    f"{'visible' if visible else 'not visible'} in the distribution view.")
        acc = _ics_accuracy_line(pre, [(v, st[v]) for v in ("BN", "noisy BN", "no BN") if v in st])
        if acc:
            comp["verdicts"].append(acc)
        comp["supports"] = supports_paragraph(pre, comp) if ("BN" in s and "no BN" in s) or "noisy BN" in s else ""
        comparisons.append(comp)
    figures = [name for name, view in zip(ICS_FILES, ("distribution", "gradient", "landscape"))
               if any(stats[g.key]["ics"][view] for g in with_data)]
    return {"title": ICS_TITLE, "configurations": [stats[g.key]["ics"]["label"] for g in with_data],
            "comparisons": comparisons, "verdicts": [v for c in comparisons for v in c["verdicts"]],
            "supports": [c["supports"] for c in comparisons if c["supports"]], "figures": figures}


# -------------------------------------------------------------------------- build


@dataclass
class Report:
    """Everything ``bnexp report`` computes.

    Attributes:
        sweep_dir: the sweep folder.
        groups: the configurations (for the figures).
        data: the structured report written to report.json.
    """

    sweep_dir: Path
    groups: list[ConfigGroup]
    data: dict


def default_targets(runs: list[Run]) -> list[float]:
    """Targets of the sweep: the union of the summaries' ``targets`` (else :data:`DEFAULT_TARGETS`)."""
    ts: set[float] = set()
    for r in runs:
        vals = r.summary.get("targets")
        if isinstance(vals, list):
            ts.update(float(v) for v in vals if isinstance(v, (int, float)) and 0 < v <= 1)
    return sorted(ts) if ts else list(DEFAULT_TARGETS)


def build_report(sweep_dir: Path, targets: list[float] | None = None) -> Report:
    """Read the sweep, group runs, compute every statistic, speedup, verdict, the Sec. 4.2 table and
    the ICS section (``data["ics"]``, None without ICS data).

    Args:
        sweep_dir: the sweep folder.
        targets: test accuracies in (0, 1]; None: the summaries' targets.

    Raises:
        ReportError: when ``sweep_dir`` does not exist, is not a folder or holds no run directory.
    """
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.exists():
        raise ReportError(f"the sweep folder {sweep_dir} does not exist.")
    if not sweep_dir.is_dir():
        raise ReportError(f"{sweep_dir} is not a folder; give the sweep folder that holds the run directories.")
    runs = [load_run(d) for d in find_run_dirs(sweep_dir)]
    if not runs:
        raise ReportError(f"no run directories (folders with summary.json or .hydra/config.yaml) under "
                          f"{sweep_dir}.")
    targets = sorted(targets) if targets else default_targets(runs)
    groups = group_runs(runs)
    stats = {g.key: summarize_group(g, targets) for g in groups}
    for g in groups:
        nb = match_no_bn(g, groups)
        stats[g.key]["no_bn_match"] = nb.label if nb else None
        stats[g.key]["speedup"] = {
            target_key(t): (compute_speedup(stats[g.key]["steps_to_target"][target_key(t)],
                                            stats[nb.key]["steps_to_target"][target_key(t)], nb.max_steps)
                            if nb else {"value": None, "lower_bound": None, "text": "n/a"})
            for t in targets}
    sec42 = sec42_table(groups)
    ics = ics_section(groups, stats, targets)
    data = {
        "sweep_dir": str(sweep_dir), "std": STD_NOTE, "targets": targets, "varying_keys": varying_keys(groups),
        "runs": len(runs), "sec42": sec42, "configurations": [stats[g.key] for g in groups],
        "verdicts": verdict_lines(groups, stats, targets, sec42), "ics": ics,
        "files": list(REPORT_FILES) + (ics["figures"] if ics else []),
    }
    return Report(sweep_dir, groups, data)


# ------------------------------------------------------------------------- figures


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(groups: list[ConfigGroup]) -> dict[str, Any]:
    """One color per BN/no-BN pair (pair_key), shared by the figures."""
    plt = _plt()
    cmap = plt.get_cmap("tab10" if len(groups) <= 20 else "tab20")
    keys: list[str] = []
    for g in groups:
        if pair_key(g) not in keys:
            keys.append(pair_key(g))
    return {k: cmap(i % cmap.N) for i, k in enumerate(keys)}


def accuracy_curve(group: ConfigGroup) -> tuple[list[int], list[float], list[float], list[float]]:
    """Test accuracy vs step over the completed seeds: (steps, mean, min, max).

    At each evaluated step the mean/min/max are over the seeds evaluated at that step
    (a diverged seed stops contributing where its metrics end).
    """
    by_step: dict[int, list[float]] = {}
    for r in group.completed:
        for rec in r.metrics:
            acc = rec.get("test_accuracy")
            if isinstance(acc, (int, float)) and math.isfinite(acc):
                by_step.setdefault(int(rec["step"]), []).append(float(acc))
    steps = sorted(by_step)
    return (steps, [float(np.mean(by_step[s])) for s in steps], [min(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])


def plot_accuracy(report: Report, path: Path) -> None:
    """Fig. 1(a) (Sec. 4.1): test accuracy vs steps, one line per configuration (mean over seeds),
    min-max band over seeds shaded; BN solid, no BN dashed; the Sec. 4.2 target dotted."""
    plt = _plt()
    colors = _colors(report.groups)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    drawn = 0
    for g in report.groups:
        steps, mean, lo, hi = accuracy_curve(g)
        if not steps:
            continue
        c = colors[pair_key(g)]
        style = ("-." if g.noisy else "-") if g.bn else "--"
        ax.plot(steps, mean, color=c, linestyle=style, label=f"{g.label} (n={len(g.completed)})")
        ax.fill_between(steps, lo, hi, color=c, alpha=0.15, linewidth=0)
        drawn += 1
    sec42 = report.data.get("sec42")
    if sec42 and sec42.get("target") is not None:
        ax.axhline(sec42["target"], color="gray", linestyle=":", linewidth=1,
                   label=f"baseline best {100 * sec42['target']:.2f}%")
    if not drawn:
        ax.text(0.5, 0.5, "no completed runs with metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training step")
    ax.set_ylabel("test accuracy")
    noisy = "; noisy BN dash-dot" if any(g.noisy for g in report.groups) else ""
    ax.set_title(f"Test accuracy vs steps (mean over seeds, min-max band); BN solid, no BN dashed{noisy}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="lower right" if drawn <= 8 else "upper left",
                  bbox_to_anchor=None if drawn <= 8 else (1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure_pairs(groups: list[ConfigGroup]) -> list[tuple[ConfigGroup | None, ConfigGroup | None]]:
    """Rows of the paired figures: (no-BN configuration, BN configuration), either may be None."""
    rows: list[tuple[ConfigGroup | None, ConfigGroup | None]] = []
    used: set[str] = set()
    for g in groups:
        if g.bn is True:
            nb = match_no_bn(g, groups)
            rows.append((nb, g))
            used.update({g.key} | ({nb.key} if nb else set()))
    rows.extend((g, None) for g in groups if g.key not in used and g.bn is not True)
    return rows


def _lowest_seed_shift(group: ConfigGroup) -> Run | None:
    """The completed run with the lowest seed that has shift.jsonl records."""
    runs = [r for r in group.completed if r.shift and isinstance(r.shift[0].get("unit"), dict)]
    return min(runs, key=_seed_order) if runs else None


def _short(text: str, width: int = 60) -> str:
    """``text`` wrapped onto lines of at most ``width`` characters (figure titles)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _percentile_panel(ax, group: ConfigGroup | None, side: str) -> None:
    """One panel of Fig. 1(b, c): the typical unit's median line and 15-85 band over steps.

    Args:
        ax: the matplotlib axes.
        group: the configuration (None: the sweep has none for this side).
        side: "no BN" or "BN" (used in the title).
    """
    from matplotlib.ticker import MaxNLocator

    run = _lowest_seed_shift(group) if group else None
    if run is None:
        why = ({"no BN": "no run without BN", "BN": "no run with BN"}.get(side, f"no {side} run")
               + " with these settings" if group is None else "no shift.jsonl records")
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=8)
        ax.set_title(_short(f"{side}: {group.label}") if group else side, fontsize=8)
        ax.set_xticks([])
        return
    recs = [r for r in run.shift if isinstance(r.get("unit"), dict) and _band_keys(r["unit"])]
    lo, mid, hi = _band_keys(recs[0]["unit"])
    steps = [r["step"] for r in recs]
    ax.fill_between(steps, [r["unit"].get(lo, np.nan) for r in recs], [r["unit"].get(hi, np.nan) for r in recs],
                    alpha=0.3, label=f"{lo}-{hi}")
    ax.plot(steps, [r["unit"].get(mid, np.nan) for r in recs], label=mid, marker="o" if len(recs) < 3 else None)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    u = recs[0]["unit"]
    ax.set_title(_short(f"{side}: {group.label}") + f"\nseed {run.seed}, unit {u.get('index')} of {u.get('layer')}",
                 fontsize=8)
    ax.set_xlabel("step")
    ax.legend(fontsize=7)


def plot_percentiles(report: Report, path: Path) -> None:
    """Fig. 1(b, c) (Sec. 4.1): percentiles of the input to a typical last-hidden-layer unit over
    training; per row one setting, no BN (left) beside BN (right) with a shared y axis; the run
    shown is the configuration's lowest seed."""
    plt = _plt()
    rows = figure_pairs(report.groups) or [(None, None)]
    fig, axes = plt.subplots(len(rows), 2, figsize=(9, 3.1 * len(rows)), sharey="row", squeeze=False)
    for (nb, bn), (ax0, ax1) in zip(rows, axes):
        _percentile_panel(ax0, nb, "no BN")
        _percentile_panel(ax1, bn, "BN")
        ax0.set_ylabel("input to nonlinearity")
        for ax in (ax0, ax1):
            ax.grid(alpha=0.3)
    fig.suptitle("Typical unit of the last hidden layer: median and 15-85 percentile band (no BN | BN)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_stability(report: Report, path: Path) -> None:
    """Per-layer bars (Sec. 4.1): |median_end - median_first| and the 15-85 spread ratio end/first,
    mean over finished seeds, one bar per configuration (BN solid, no BN hatched)."""
    plt = _plt()
    colors = _colors(report.groups)
    confs = [(g, s) for g, s in zip(report.groups, report.data["configurations"]) if s["stability"]]
    layers: list[str] = []
    for _, s in confs:
        layers.extend(k for k in s["stability"] if k not in layers)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.0 + 0.25 * len(confs)), squeeze=False)
    metrics = (("median_shift", "|median end - median first|"), ("spread_ratio", "15-85 spread: end / first"))
    for ax, (key, title) in zip(axes[0], metrics):
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        if not confs:
            ax.text(0.5, 0.5, "no shift.jsonl records", ha="center", va="center", transform=ax.transAxes)
            continue
        width = 0.8 / len(confs)
        for i, (g, s) in enumerate(confs):
            vals = [s["stability"].get(layer, {}).get(key) for layer in layers]
            xs = [j - 0.4 + width * (i + 0.5) for j in range(len(layers))]
            ax.bar(xs, [np.nan if v is None else v for v in vals], width, color=colors[pair_key(g)],
                   hatch=None if g.bn else "//", edgecolor="black", linewidth=0.4, label=g.label)
        ax.set_xticks(range(len(layers)), layers)
        if key == "spread_ratio":
            ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
    fig.suptitle("How far each layer's input distribution moved between the first and last monitor step "
                 "(BN solid, no BN hatched)", fontsize=9)
    bottom = 0.0
    if confs:
        ncol = min(3, len(confs))
        nrows = -(-len(confs) // ncol)
        bottom = min(0.5, 0.06 + 0.05 * nrows)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


_VARIANT_STYLE = {"BN": "-", "noisy BN": "-.", "no BN": "--"}


def mean_by_step(series: list[tuple[list[int], list[float | None]]]) -> tuple[list[int], list[float]]:
    """Mean over seeds at every step of per-seed (steps, values) series (finite values only)."""
    by_step: dict[int, list[float]] = {}
    for steps, vals in series:
        for st, v in zip(steps, vals):
            if v is not None and math.isfinite(v):
                by_step.setdefault(int(st), []).append(float(v))
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[s])) for s in steps]


def _ics_groups(report: Report, view: str) -> list[tuple[ConfigGroup, list[Run]]]:
    """The configurations with data for ``view`` and their finished runs."""
    out = []
    for g, s in zip(report.groups, report.data["configurations"]):
        if s.get("ics") and s["ics"].get(view):
            out.append((g, [r for r in g.runs if r.status == "finished"]))
    return out


def _ics_line(ax, i: int, g: ConfigGroup, steps: list[int], vals: list[float], n: int) -> None:
    plt = _plt()
    ax.plot(steps, vals, color=plt.get_cmap("tab10")(i % 10), linestyle=_VARIANT_STYLE.get(bn_variant(g) or "", "-"),
            marker="o" if len(steps) < 3 else None, label=f"{g.variant_label or g.label} (n={n})")


def _ics_figure(report: Report, path: Path, view: str, panels: list[tuple[str, str, Any]], title: str,
                log: bool = False) -> None:
    """One ICS figure: a panel per (key, y label, per-run series function), one line per configuration.

    Args:
        log: log y-scale on a panel whose plotted values are all positive.
    """
    plt = _plt()
    confs = _ics_groups(report, view)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    for ax, (key, ylabel, fn) in zip(axes[0], panels):
        drawn = []
        for i, (g, runs) in enumerate(confs):
            series = [fn(r) for r in runs]
            steps, vals = mean_by_step([s for s in series if s[0]])
            if steps:
                _ics_line(ax, i, g, steps, vals, sum(1 for s in series if s[0]))
                drawn.extend(vals)
        if log and drawn and min(drawn) > 0:
            ax.set_yscale("log")
        ax.set_title(ylabel, fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=7)
    fig.suptitle(title + " (mean over finished seeds; BN solid, noisy BN dash-dot, no BN dashed)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_ics_distribution(report: Report, path: Path) -> None:
    """ics_distribution.png: the BN paper's view -- Wasserstein-1 distance of each layer's input
    distribution from its first record (step 0), averaged over layers, vs step."""
    _ics_figure(report, path, "distribution",
                [("w1_first", "W1(now, step 0) of the layers' inputs, mean over layers", distribution_series)],
                "Distribution view (BN paper): how far the input distributions moved from their start")


def plot_ics_gradient(report: Report, path: Path) -> None:
    """ics_gradient.png: Santurkar et al.'s gradient-based ICS (Def. 2.1), layers 2..K averaged:
    ||G - G'||_2 (left) and cos(G, G') (right) vs step."""
    _ics_figure(report, path, "gradient",
                [("l2", "||G - G'||_2, layers 2..K", lambda r: gradient_series(r)[:2]),
                 ("cos", "cos(G, G'), layers 2..K", lambda r: (gradient_series(r)[0], gradient_series(r)[2]))],
                "Gradient-based ICS (Santurkar et al. 2018, Def. 2.1)")


def plot_ics_landscape(report: Report, path: Path) -> None:
    """ics_landscape.png: loss variation, gradient predictiveness and beta-smoothness along the
    gradient (Santurkar et al. 2018, Sec. 3.1, Fig. 4) vs step; log y-scale where all positive."""
    panels = [(k, title, (lambda r, k=k: (landscape_series(r)[0], landscape_series(r)[1][k])))
              for k, title in zip(LANDSCAPE_KEYS, ("loss variation", "gradient predictiveness (l2 change)",
                                                   "effective beta-smoothness"))]
    _ics_figure(report, path, "landscape", panels, "Loss landscape along the gradient (Santurkar et al. 2018)",
                log=True)


ICS_PLOTS = {"ics_distribution.png": plot_ics_distribution, "ics_gradient.png": plot_ics_gradient,
             "ics_landscape.png": plot_ics_landscape}


# -------------------------------------------------------------------------- tables


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(_md_escape(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows]
    return out


def main_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the main per-configuration table (text cells)."""
    targets = report.data["targets"]
    header = (["configuration", "runs", "max test acc (%)", "final test acc (%)"]
              + [f"steps to {format_target(t)}" for t in targets] + ["diverged", "failed"])
    rows = []
    for s in report.data["configurations"]:
        runs = f"{s['completed']}/{s['runs']}" if s["completed"] != s["runs"] else str(s["runs"])
        rows.append([s["label"], runs, format_acc(s["max_test_accuracy"]), format_acc(s["final_test_accuracy"])]
                    + [s["steps_to_target"][target_key(t)]["text"] for t in targets]
                    + [str(s["diverged"]), str(s["failed"])])
    return header, rows


def _sec42_md(sec42: dict) -> list[str]:
    """Markdown of the Sec. 4.2 table."""
    out = [f"## {SEC42_TITLE}", ""]
    if sec42["target"] is None:
        return out + ["The baseline has no completed runs, so there is no target (n/a).", ""]
    tgt = f"{100 * sec42['target']:.2f}%"
    out += [f"Target: the baseline's best test accuracy, {tgt} = mean over {len(_finite(sec42['target_per_seed']))}"
            " baseline seeds of each seed's maximum test accuracy. Steps are the first evaluation at or above "
            "it (from metrics.jsonl), mean ± std over the seeds that reached it.", ""]
    rows = []
    for r in sec42["rows"]:
        div = f"{r['diverged']}/{r['runs']} diverged" if r["diverged"] else "0"
        rows.append([r["label"], f"{r['completed']}/{r['runs']}", r["steps"]["text"], r["multiple_text"],
                     format_acc(r["max_test_accuracy"]), div])
    out += _md_table(["preset", "runs", f"steps to {tgt}", "steps vs baseline", "max test acc (%)", "diverged"],
                     rows)
    return out + [""]


def _speedup_md(report: Report) -> list[str]:
    """Markdown of the BN-over-no-BN speedup table (Sec. 4.1)."""
    targets = report.data["targets"]
    rows = [[s["label"], s["no_bn_match"]] + [s["speedup"][target_key(t)]["text"] for t in targets]
            for s in report.data["configurations"] if s["bn"] and s["no_bn_match"]]
    if not rows:
        return []
    return (["## Speedup of BN over no BN (Sec. 4.1, Fig. 1a)", "",
             "Speedup = mean steps without BN / mean steps with BN, when both reached the target in all seeds. "
             "\">= X (lower bound)\": BN reached it in all seeds and no BN in none within max_steps, "
             "so X = max_steps / mean BN steps is only a lower bound.", ""]
            + _md_table(["BN configuration", "matching no-BN"] + [format_target(t) for t in targets], rows) + [""])


def _stability_md(report: Report) -> list[str]:
    """Markdown of the per-layer stability numbers (Fig. 1b,c)."""
    rows = []
    for s in report.data["configurations"]:
        for layer, v in s["stability"].items():
            rows.append([s["label"], layer, "n/a" if v["median_shift"] is None else f"{v['median_shift']:.4f}",
                         "n/a" if v["spread_ratio"] is None else f"{v['spread_ratio']:.3f}", str(v["n"])])
    head = ["## Stability of each layer's input (Sec. 4.1, Fig. 1b,c)", "",
            "|p50_end - p50_first| and (p85-p15)_end / (p85-p15)_first of each hidden layer's input to its "
            "nonlinearity (all units, probe set of shift.jsonl), first vs last monitor step, mean over finished "
            "seeds.", ""]
    if not rows:
        return head + ["n/a: no shift.jsonl records in finished runs.", ""]
    return head + _md_table(["configuration", "layer", "|median shift|", "spread end/first", "seeds"], rows) + [""]


def _ics_rows(report: Report) -> list[tuple[str, dict | None]]:
    """(section label, ics summary or None) of every configuration, in report order."""
    out = []
    for g, s in zip(report.groups, report.data["configurations"]):
        out.append((s["ics"]["label"] if s.get("ics") else (g.variant_label or g.label), s.get("ics")))
    return out


def _view_cell(ics: dict | None, view: str, key: str) -> str:
    """A table cell: "mean ± std" of ``ics[view][key]``, "not measured" when the view is absent."""
    v = (ics or {}).get(view)
    return format_stat(v[key]) if v else "not measured"


def _ics_md(report: Report) -> list[str]:
    """Markdown of the section "Does BN reduce internal covariate shift?" ([] without ICS data)."""
    sec = report.data.get("ics")
    if not sec:
        return []
    out = [f"## {ICS_TITLE}", "",
           "Two views on the same runs. **The BN paper** (Ioffe & Szegedy 2015) calls internal covariate shift "
           "the change in the distribution of a layer's inputs during training: *W1 step to step* is the "
           "Wasserstein-1 distance between a layer's pooled inputs to its nonlinearity on the fixed probe set at "
           "consecutive monitor records (mean over the records after step 0), *W1 from start* the distance "
           "between the last record and step 0, *|Δmean|/std from start* the mean over units of |mean_end - "
           "mean_0| / std_0; all averaged over the hidden layers. **Santurkar et al. 2018** (\"How Does Batch "
           "Normalization Help Optimization?\") measure ICS by how much a layer's gradient changes when the "
           "layers before it take their update (Def. 2.1: ||G - G'||_2 and cos(G, G'), mean over the probes and "
           "over layers 2..K; layer 1 is 0 / 1 by definition) and argue that BN helps by making the loss "
           "landscape smoother (loss variation, gradient predictiveness and effective beta-smoothness along the "
           "gradient, Sec. 3.1); *noisy BN* is BN followed by injected, time-varying noise (Sec. 2.1), i.e. "
           "deliberate covariate shift.",
           "",
           f"Values are mean ± std over the finished seeds (diverged runs left out); {STD_NOTE}. \"not measured\": "
           f"no finished run of the configuration recorded it. A measure counts as lower with BN only when it is "
           f"below {1 - ICS_MARGIN:g} x the no-BN value; cosines differ when more than {COS_MARGIN:g} apart; noisy BN "
           f"is \"nearly as fast\" when it needs at most {NEARLY_AS_FAST:g}x BN's steps to the highest target BN "
           "reached in all seeds.", "",
           "### Distribution view (BN paper)", ""]
    rows = []
    for label, ics in _ics_rows(report):
        d = (ics or {}).get("distribution")
        per_layer = (", ".join(f"{k} {_g(v['mean'])}" for k, v in d["final_w1_first_per_layer"].items())
                     if d else "not measured")
        rows.append([label, str(d["seeds"]) if d else "0", _view_cell(ics, "distribution", "w1_prev_mean"),
                     _view_cell(ics, "distribution", "final_w1_first"),
                     _view_cell(ics, "distribution", "final_mean_shift_first"), per_layer])
    out += _md_table(["configuration", "seeds", "W1 step to step", "W1 from start (end)",
                      "|Δmean|/std from start (end)", "W1 from start per layer (end)"], rows) + [""]
    out += ["### Gradient-based ICS and loss landscape (Santurkar et al. 2018)", ""]
    rows = []
    for label, ics in _ics_rows(report):
        g, ls = (ics or {}).get("gradient"), (ics or {}).get("landscape")
        seeds = "/".join(str(v["seeds"]) for v in (g, ls) if v) or "0"
        rows.append([label, seeds, _view_cell(ics, "gradient", "l2"), _view_cell(ics, "gradient", "cos")]
                    + [_view_cell(ics, "landscape", k) for k in LANDSCAPE_KEYS])
    out += _md_table(["configuration", "seeds", "||G - G'|| (layers 2..K)", "cos(G, G')", "loss variation",
                      "gradient predictiveness", "beta-smoothness"], rows) + [""]
    rows = []
    for label, ics in _ics_rows(report):
        pt = (ics or {}).get("probe_time_s")
        rows.append([label] + [format_stat(pt[k]) if pt else "not measured" for k in PROBE_KINDS])
    out += ["### Cost of the probes (seconds per run, summary.json probe_time_s)", ""]
    out += _md_table(["configuration", "eval", "monitor", "grad_ics", "landscape"], rows) + [""]
    out += ["### Verdicts", ""]
    out += [f"- {v}" for v in sec["verdicts"]] or ["- No matching BN / noisy BN / no BN configurations to compare."]
    out += ["", "### What this sweep supports", ""]
    out += [p + "\n" for p in sec["supports"]] or ["Nothing to compare: the sweep has no matching BN / no BN / "
                                                   "noisy BN configurations.", ""]
    if sec["figures"]:
        names = {"ics_distribution.png": "Distribution view: W1 of the layers' inputs from step 0",
                 "ics_gradient.png": "Gradient-based ICS (Santurkar Def. 2.1), layers 2..K",
                 "ics_landscape.png": "Loss landscape along the gradient (Santurkar Sec. 3.1)"}
        out += ["### Figures", ""]
        for f in sec["figures"]:
            out += [f"![{names[f]}]({f})", ""]
    return out


def render_markdown(report: Report) -> str:
    """The text of report.md: Sec. 4.2 table (if any), verdicts, main table, speedups, figures,
    stability, the ICS section (if any), failed runs."""
    d = report.data
    out = ["# Batch Normalization sweep report", "",
           f"Sweep: `{d['sweep_dir']}`: {d['runs']} run directories, {len(d['configurations'])} configurations "
           f"(varying keys: {', '.join(d['varying_keys']) or 'none'}). Values are mean ± std over seeds; {STD_NOTE}. "
           "Steps to a target are averaged over the seeds that reached it; \"not reached (k/n)\": k of n completed "
           "runs never reached it. Failed and incomplete runs are left out of every mean.", ""]
    if d["sec42"]:
        out += _sec42_md(d["sec42"])
    out += ["## Verdicts", ""] + [f"- {v}" for v in d["verdicts"]] + [""]
    header, rows = main_table(report)
    out += ["## Results per configuration", ""] + _md_table(header, rows) + [""]
    out += _speedup_md(report)
    out += ["## Figures", "",
            "![Test accuracy vs steps (Fig. 1a)](accuracy_vs_steps.png)", "",
            "![Percentiles of a typical last-hidden-layer unit, no BN vs BN (Fig. 1b,c)](percentiles.png)", "",
            "![Per-layer stability of the input distribution](stability.png)", ""]
    out += _stability_md(report)
    out += _ics_md(report)
    bad = [(s["label"], r) for s in d["configurations"] for r in s["seeds"] if r["status"] in ("failed", "incomplete")]
    if bad:
        out += ["## Failed and incomplete runs", ""]
        out += [f"- {label}, seed {r['seed']}: {r['status']} ({r['error']}) `{r['path']}`" for label, r in bad]
        out += [""]
    return "\n".join(out)


def _num(v: Any) -> Any:
    """CSV cell: the number, or "" for missing."""
    return "" if v is None else v


def write_csv(report: Report, path: Path) -> None:
    """report.csv: one row per configuration; numeric columns, empty cell for not reached / n/a."""
    d = report.data
    layers: list[str] = []
    for s in d["configurations"]:
        layers.extend(k for k in s["stability"] if k not in layers)
    vary = d["varying_keys"]
    header = ["label"] + vary + ["bn", "experiment", "runs", "completed", "diverged", "failed", "incomplete",
                                  "max_test_accuracy_mean", "max_test_accuracy_std",
                                  "final_test_accuracy_mean", "final_test_accuracy_std"]
    for t in d["targets"]:
        tk = target_key(t)
        header += [f"steps_to_{tk}_mean", f"steps_to_{tk}_std", f"steps_to_{tk}_reached", f"steps_to_{tk}_n",
                   f"speedup_{tk}", f"speedup_{tk}_is_lower_bound"]
    for layer in layers:
        header += [f"{layer}_median_shift", f"{layer}_spread_ratio"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        for s in d["configurations"]:
            row = [s["label"]] + [format_value(s["config"][k]) if k in s["config"] else "" for k in vary]
            row += [_num(None if s["bn"] is None else int(s["bn"])), s["experiment"] or "", s["runs"],
                    s["completed"], s["diverged"], s["failed"], s["incomplete"]]
            for key in ("max_test_accuracy", "final_test_accuracy"):
                row += [_num(s[key]["mean"]), _num(s[key]["std"])]
            for t in d["targets"]:
                st, sp = s["steps_to_target"][target_key(t)], s["speedup"][target_key(t)]
                row += [_num(st["mean"]), _num(st["std"]), st["reached"], st["n"], _num(sp["value"]),
                        _num(None if sp["lower_bound"] is None else int(sp["lower_bound"]))]
            for layer in layers:
                v = s["stability"].get(layer, {})
                row += [_num(v.get("median_shift")), _num(v.get("spread_ratio"))]
            w.writerow(row)


def _json_safe(obj: Any) -> Any:
    """Replace non-finite floats by None (JSON has no NaN) and any non-JSON value (paths, dates) by its text."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    return str(obj)  # Path, datetime from YAML, enums: as text


def print_table(report: Report, console=None) -> None:
    """Print the main table (rich.table.Table), the Sec. 4.2 table and the verdicts to the terminal."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=max(console.width, 200))
    header, rows = main_table(report)
    table = Table(title=f"bnexp report: {report.sweep_dir}", show_lines=False)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    sec42 = report.data["sec42"]
    if sec42 and sec42["target"] is not None:
        t = Table(title=f"{SEC42_TITLE}: target {100 * sec42['target']:.2f}%")
        for h in ("preset", "steps", "vs baseline", "max test acc (%)", "diverged"):
            t.add_column(h)
        for r in sec42["rows"]:
            t.add_row(r["label"], r["steps"]["text"], r["multiple_text"], format_acc(r["max_test_accuracy"]),
                      str(r["diverged"]))
        console.print(t)
    for v in report.data["verdicts"]:
        console.print(f"- {v}", highlight=False, markup=False)
    sec = report.data.get("ics")
    if sec:
        t = Table(title=ICS_TITLE)
        for h in ("configuration", "W1 from start (end)", "||G - G'|| (layers 2..K)", "cos(G, G')",
                  "beta-smoothness", "probe s (grad_ics / landscape)"):
            t.add_column(h, justify="left" if h == "configuration" else "right")
        for label, ics in _ics_rows(report):
            pt = (ics or {}).get("probe_time_s")
            t.add_row(label, _view_cell(ics, "distribution", "final_w1_first"), _view_cell(ics, "gradient", "l2"),
                      _view_cell(ics, "gradient", "cos"), _view_cell(ics, "landscape", "beta_smoothness"),
                      " / ".join(_g(pt[k]["mean"]) for k in ("grad_ics", "landscape")) if pt else "not measured")
        console.print(t)
        for v in sec["verdicts"]:
            console.print(f"- {v}", highlight=False, markup=False)
        for p in sec["supports"]:
            console.print(f"What this sweep supports: {p}", highlight=False, markup=False)


def write_report(report: Report) -> list[Path]:
    """Write :data:`REPORT_FILES` into the sweep folder, and the :data:`ICS_FILES` the ICS section draws.

    Returns:
        the written paths.

    Raises:
        OSError: when the sweep folder is not writable.
    """
    d = report.sweep_dir
    (d / "report.md").write_text(render_markdown(report) + "\n", encoding="utf-8")
    write_csv(report, d / "report.csv")
    write_json(d / "report.json", _json_safe(report.data))
    plot_accuracy(report, d / "accuracy_vs_steps.png")
    plot_percentiles(report, d / "percentiles.png")
    plot_stability(report, d / "stability.png")
    ics_figures = (report.data.get("ics") or {}).get("figures", [])
    for name in ics_figures:
        ICS_PLOTS[name](report, d / name)
    return [d / f for f in REPORT_FILES] + [d / f for f in ics_figures]


# ----------------------------------------------------------------------------- CLI


def _parse_targets(values: list[str] | None) -> list[float] | None:
    """--targets values ("0.9 0.95" or "0.9,0.95") as floats in (0, 1].

    Raises:
        ReportError: for a value that is not a number in (0, 1].
    """
    if not values:
        return None
    out = []
    for item in ",".join(values).split(","):
        item = item.strip()
        if not item:
            continue
        try:
            t = float(item)
        except ValueError:
            raise ReportError(f"--targets: {item!r} is not a number; give test accuracies in (0, 1], "
                              "e.g. --targets 0.95 0.98.") from None
        if not 0.0 < t <= 1.0:
            raise ReportError(f"--targets: {item} is outside (0, 1]; targets are test accuracies, "
                              "e.g. 0.95 for 95%.")
        out.append(t)
    return sorted(set(out)) or None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bnexp report",
        description="Tables, verdicts and figures (paper Fig. 1, Sec. 4.1 and Sec. 4.2) from a sweep's run "
                    f"directories. Writes {', '.join(REPORT_FILES)} into SWEEP_DIR.")
    p.add_argument("sweep_dir", metavar="SWEEP_DIR", nargs="?",
                   help="folder holding the run directories (searched recursively)")
    p.add_argument("--targets", nargs="+", metavar="ACC",
                   help="test accuracies in (0, 1] to report steps for (default: the runs' trainer.targets)")
    return p


def _error(msg: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[bold red]bnexp report: error:[/] {msg}", highlight=False, soft_wrap=True)


def report_main(args: list[str]) -> int:
    """``bnexp report SWEEP_DIR [--targets ACC ...]``.

    Returns:
        0 when the report was written; 2 for a user error (missing folder, no runs, bad
        --targets, unwritable folder), printed as one line without a traceback.
    """
    parser = _parser()
    try:
        ns = parser.parse_args(list(args))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    if ns.sweep_dir is None and ns.targets and len(ns.targets) > 1:
        ns.sweep_dir = ns.targets.pop()  # "--targets 0.9 0.95 SWEEP_DIR": the greedy list took SWEEP_DIR
    if ns.sweep_dir is None:
        _error("give the sweep folder: bnexp report SWEEP_DIR [--targets ACC ...]")
        return 2
    try:
        report = build_report(Path(ns.sweep_dir), _parse_targets(ns.targets))
    except ReportError as exc:
        _error(str(exc))
        return 2
    try:
        paths = write_report(report)
    except OSError as exc:
        _error(f"cannot write the report into {report.sweep_dir} ({exc.strerror or exc}).")
        return 2
    print_table(report)
    from rich.console import Console

    Console().print("wrote " + ", ".join(str(p) for p in paths), highlight=False, soft_wrap=True)
    return 0
