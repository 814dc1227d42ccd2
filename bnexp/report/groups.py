"""Grouping runs into configurations, and naming them.

A *configuration* is the set of runs (seeds) sharing a reduced config (:mod:`.load`);
its label names the keys that vary across the sweep, or its experiment (preset) name, or
its BN variant ("BN", "noisy BN", "no BN") when the sweep compares those. BN and no-BN
configurations of one setting are paired for the claims (:func:`comparison_sets`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable

import pandas as pd

from bnexp.analysis.runs import Run, canon, config_key, experiment_name, seed_order
from bnexp.analysis.rules import normalizer, normalizer_label, variant
from bnexp.report.fmt import label as table_label

# Short names of config keys in configuration labels.
KEY_ALIASES = {"bn.enabled": "bn", "model.name": "model", "data.name": "data", "optim.name": "optim"}
# Keys named in the label when nothing varies across the sweep.
SALIENT_KEYS = ("bn.enabled", "act", "lr")
#: run-length keys a design sets from another key: a study from m (max_steps = 240,000 / m), the CIFAR-10 ladder
#: from the budget (decay_steps = budget / 5, eval_every = budget / 4, ...)
SCHEDULE_KEYS = ("trainer.max_steps", "trainer.eval_every", "trainer.hist_every", "trainer.log_every",
                 "trainer.ckpt_every", "optim.decay_steps")
BUDGET = "trainer.max_steps"
#: a CIFAR-10 preset's sources of other keys and the key each sets (conf/experiment/*.yaml: lr = a multiple of
#: scale.base_lr; trainer.precision = scale.precision): named only where they say more than the key they set
SOURCES = {"scale.base_lr": "lr", "scale.precision": "trainer.precision"}


@dataclass
class ConfigGroup:
    """The runs (seeds, sorted) of one configuration: ``key`` (canonical JSON of ``config``, the reduced
    flattened config they share), ``label`` (the keys that vary across the sweep, or the experiment
    name) and ``variant_label`` (naming the BN variant, :func:`variant_label`; used by the ICS section)."""

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
    def finished(self) -> list[Run]:
        """The finished runs (diverged ones left out: their last record is not the end of training)."""
        return [r for r in self.runs if r.status == "finished"]

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
        return any(r.summary.get("bn_noise") is True for r in self.runs) if v is None else bool(v)

    @property
    def normalizer(self) -> str | None:
        """The configuration's normalizer code (:data:`bnexp.analysis.rules.NORMALIZERS`): "none" without BN,
        "noisy" for noisy BN (:attr:`noisy`), else :func:`bnexp.analysis.rules.normalizer` of the config; None when
        bn.enabled is unknown."""
        if self.bn is None:
            return None
        return "none" if not self.bn else "noisy" if self.noisy else normalizer(self.config)

    @property
    def experiment(self) -> str | None:
        """The experiment (preset) name, or None."""
        return experiment_name(self.config)

    @property
    def lr(self) -> float | None:
        """The configuration's learning rate (``lr``), or None when it is missing or not a number."""
        v = self.config.get("lr")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def max_steps(self) -> int | None:
        """trainer.max_steps of the configuration, else the largest summary ``max_steps``."""
        v = self.config.get("trainer.max_steps")
        if v is None:
            v = max((r.summary["max_steps"] for r in self.runs if r.summary.get("max_steps") is not None),
                    default=None)
        return None if v is None else int(v)


def group_runs(runs: list[Run]) -> list[ConfigGroup]:
    """The configurations of the runs (the reduced config; ``seed`` is not part of it), labelled, in
    :func:`_group_order`. A run without a config file joins the one config-backed configuration whose
    keys agree with all its summary fields, else it forms its own configuration."""
    groups: dict[str, ConfigGroup] = {}
    for run in sorted(runs, key=lambda r: not r.has_config):  # the config-backed runs first
        key = ("" if run.has_config else "summary:") + config_key(run.config)
        matches = [] if run.has_config else [
            g for g in groups.values() if not g.key.startswith("summary:") and run.config
            and all(k in g.config and canon(g.config[k]) == canon(v) for k, v in run.config.items())]
        group = matches[0] if len(matches) == 1 else groups.setdefault(key, ConfigGroup(key, dict(run.config)))
        group.runs.append(run)
    out = list(groups.values())
    for g in out:
        g.runs.sort(key=seed_order)
    label_groups(out)
    return sorted(out, key=_group_order)


def varying_keys(groups: list[ConfigGroup]) -> list[str]:
    """Config keys with more than one value across the configurations (missing keys ignored): ``experiment``
    and ``bn.enabled`` first, then as first seen in the configs."""
    values = pd.DataFrame([{k: json.dumps(canon(v), sort_keys=True) for k, v in g.config.items()} for g in groups])
    out = [k for k in values.columns if values[k].nunique() > 1]
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


def kv_label(config: dict, keys: Iterable[str]) -> str:
    """``config``'s ``keys`` (those it has) as "key=value" words, short aliases (:data:`KEY_ALIASES`) and
    :func:`format_value` values: "lr=0.5 trainer.batch_size=60"."""
    return " ".join(f"{KEY_ALIASES.get(k, k)}={format_value(config[k])}" for k in keys if k in config)


def following_keys(values: dict[str, list], budget_only: bool = False) -> set[str]:
    """The varying keys a label or legend leaves out because another one it names says the same, given each
    key's values over the configurations shown (one list per key, in one order; a missing value as None):
    the :data:`SCHEDULE_KEYS` whose values determine and are determined by (one to one) those of the budget
    (:data:`BUDGET`, which stays) or, unless ``budget_only``, of a key outside :data:`SCHEDULE_KEYS` and
    :data:`SOURCES`; and the preset sources (:data:`SOURCES`) one to one with the key each sets, where every
    configuration has that key. The ladder's
    decay_steps follows the budget; the batch-size study's max_steps follows m; the CIFAR-10 presets'
    scale.precision follows trainer.precision."""
    def follows(k: str, j: str) -> bool:
        return j in values and len(set(values[k])) == len(set(values[j])) == len(set(zip(values[k], values[j])))

    anchors = [j for j in values if j == BUDGET or (not budget_only and j not in SCHEDULE_KEYS and j not in SOURCES)]
    schedule = {k for k in values if k in SCHEDULE_KEYS and any(follows(k, j) for j in anchors if j != k)}
    return schedule | {k for k in values if k in SOURCES and follows(k, SOURCES[k]) and None not in values[SOURCES[k]]}


def key_values(groups: list[ConfigGroup], keys: Iterable[str]) -> dict[str, list]:
    """Each key's values over ``groups`` as labels write them (:func:`format_value`; None where a configuration
    lacks the key), for :func:`following_keys`."""
    return {k: [format_value(g.config[k]) if k in g.config else None for g in groups] for k in keys}


def label_keys(keys: list[str], groups: list[ConfigGroup]) -> list[str]:
    """``keys`` (varying across ``groups``) less those that follow the budget or name a preset's source of a
    key already named (:func:`following_keys` with ``budget_only``): a CIFAR-10 ladder's labels say
    trainer.max_steps once, not also its decay_steps, eval_every and hist_every."""
    drop = following_keys(key_values(groups, keys), budget_only=True)
    return [k for k in keys if k not in drop]


PRESET = "experiment"  # the CIFAR-10 preset (conf/experiment/): it sets act, bn, lr, dropout and weight decay


def shown_keys(groups: list[ConfigGroup]) -> list[str]:
    """The keys that vary among ``groups``, without the run-length keys that follow another key
    (:func:`following_keys`) and, where the preset (:data:`PRESET`) varies, without the keys
    whose value the preset fixes among ``groups`` (one value per preset: "experiment=bn_x5", not also its act, bn,
    lr and weight decay), and without ``lr`` where both the preset and its base rate (``scale.base_lr``: a
    preset's lr is a multiple of it) are named."""
    keys = varying_keys(groups)
    values = key_values(groups, keys)
    drop = following_keys(values)
    if PRESET in values:
        drop |= {k for k in keys if k != PRESET and len(set(zip(values[PRESET], values[k]))) == len(set(values[PRESET]))}
        if "scale.base_lr" in values and "scale.base_lr" not in drop:
            drop.add("lr")
    return [k for k in keys if k not in drop]


def bn_variant(group: ConfigGroup) -> str | None:
    """The BN variant of a configuration: "BN", "noisy BN" or "no BN" (None when bn.enabled is unknown):
    :func:`bnexp.analysis.rules.variant` of its normalizer."""
    return variant(group.normalizer)


def variant_label(group: ConfigGroup, groups: list[ConfigGroup]) -> str:
    """A label naming the BN variant (LayerNorm, GroupNorm, "BN after g" by their normalizer label) plus the
    other keys that vary across the sweep: "noisy BN lr=0.12"; "noisy BN noise_scale=3" at several noise
    strengths; a preset "BN (bn_x5 preset)" or, when several configurations share it, "noisy BN lr=0.1
    (bn_baseline preset)"; "[no config]" appended for summary-only ones; the label when bn.enabled is unknown."""
    v = bn_variant(group)
    if v is None:
        return group.label
    norm = normalizer_label(group.config)
    if v == "BN" and norm and norm != "BN":
        v = norm
    if v == "noisy BN" and len({noise_scale(g) for g in groups if bn_variant(g) == "noisy BN"}) > 1:
        v += f" noise_scale={noise_scale(group):g}"
    exp = group.experiment  # a preset's label names the keys that vary among its own configurations only
    same = [g for g in groups if g.experiment == exp] if exp else groups
    kv = pair_label(group, same) if not exp or len(same) > 1 else ""
    label = f"{v} {kv}".strip() + (f" ({exp} preset)" if exp else "")
    return label + (table_label("no_config") if group.key.startswith("summary:") else "")


def _dedupe(labels: list[str]) -> list[str]:
    """Append " #2", " #3", ... to repeated labels."""
    s = pd.Series(labels, dtype=object)
    return [label + (f" #{k}" if k > 1 else "") for label, k in zip(labels, s.groupby(s).cumcount() + 1)]


def label_groups(groups: list[ConfigGroup]) -> None:
    """Set each group's ``label`` and ``variant_label`` (:func:`variant_label`). The label is the experiment
    name, plus the other varying keys when several configurations share it; else the keys that vary across the
    sweep; "[no config]" appended for summary-only ones. When the configurations differ in their BN variant
    and the configs know bn.noise (a noisy-BN configuration, or the key), the label is the variant label,
    except for uniquely named presets; older sweeps keep "bn=true" labels."""
    vary = varying_keys(groups)
    names = [g.experiment for g in groups]
    variants = {bn_variant(g) for g in groups} - {None}
    use_variants = len(variants) > 1 and ("noisy BN" in variants or any("bn.noise" in g.config for g in groups))
    for g in groups:
        if use_variants and g.config and bn_variant(g) and not (g.experiment and names.count(g.experiment) == 1):
            g.label = variant_label(g, groups)  # already marked "[no config]" where it applies
            continue
        if not g.config:
            label = table_label("unknown_configuration")
        elif g.experiment:
            same = [h for h in groups if h.experiment == g.experiment]
            within = label_keys([k for k in varying_keys(same) if k not in ("experiment", "experiment.name")], same)
            label = f"{g.experiment} {kv_label(g.config, within) if len(same) > 1 else ''}".strip()
        else:
            label = kv_label(g.config, label_keys(vary, groups) if vary else SALIENT_KEYS) or table_label("all_runs")
        g.label = label + (table_label("no_config") if g.key.startswith("summary:") else "")
    for g, label in zip(groups, _dedupe([g.label for g in groups])):
        g.label = label
    for g, label in zip(groups, _dedupe([variant_label(g, groups) for g in groups])):
        g.variant_label = label


def pair_key(group: ConfigGroup, ignore: tuple[str, ...] = ()) -> str:
    """The configuration without its ``bn.*`` keys, experiment name and the top-level keys ``ignore`` (e.g.
    ("lr",) when each network ran at its own rate): BN and no BN of one setting share it."""
    prefix = "summary:" if group.key.startswith("summary:") else ""
    return prefix + config_key(group.config, ("bn", "experiment", *ignore))


def pair_label(group: ConfigGroup, groups: list[ConfigGroup], ignore: tuple[str, ...] = ()) -> str:
    """The varying keys of ``group`` other than bn.*, experiment and ``ignore``, e.g. "lr=0.5" ("" if none)."""
    keys = [k for k in varying_keys(groups) if not (k.startswith("bn.") or k.startswith("experiment"))
            and k.split(".")[0] not in ignore]
    return kv_label(group.config, label_keys(keys, groups))


def sort_value(v: Any) -> tuple:
    """Sort key of a config value: booleans, then numbers by value, then text."""
    if isinstance(v, bool):
        return (0, int(v), "")
    if isinstance(v, (int, float)):
        return (1, float(v) if math.isfinite(v) else math.inf, "")
    if isinstance(v, str):
        return (2, 0.0, v)
    return (3, 0.0, json.dumps(canon(v), sort_keys=True, default=str))


def _group_order(g: ConfigGroup) -> tuple:
    """Sort key: the baseline preset first, then presets by name, then by setting with BN first."""
    exp = g.experiment
    vals = tuple((k, sort_value(v)) for k, v in sorted(g.config.items())
                 if not k.startswith("bn.") and k != "experiment")
    return (exp != "baseline", exp is None, exp or "", vals, g.bn is not True, g.label)


def noise_scale(g: ConfigGroup) -> float:
    """bn.noise_scale of a configuration (1.0 when absent)."""
    v = g.config.get("bn.noise_scale", 1.0)
    return float(v) if isinstance(v, (int, float)) else 1.0


def comparison_sets(groups: list[ConfigGroup], ignore: tuple[str, ...] = ()) -> list[dict]:
    """Matching configurations (same config except bn.*, experiment and ``ignore``, :func:`pair_key`) with BN or
    noisy BN and no BN, for the claims table (:mod:`bnexp.report.ics_verdicts`): [{"BN": the first BN
    group or None, "no BN": the first no-BN group, "noisy": [noisy-BN groups by noise_scale]}]."""
    sets: dict[str, dict] = {}
    for g in groups:
        v = bn_variant(g)
        if v is not None:
            s = sets.setdefault(pair_key(g, ignore), {"BN": None, "no BN": None, "noisy": []})
            if v == "noisy BN":
                s["noisy"].append(g)
            elif s[v] is None:
                s[v] = g
    return [{**s, "noisy": sorted(s["noisy"], key=noise_scale)} for s in sets.values()
            if s["no BN"] is not None and (s["BN"] is not None or s["noisy"])]

