"""TensorBoard HParams: a few meaningful columns and a value for every metric of every run.

What the HParams dashboard shows, and why it is written this way:

- **Columns** (at most :data:`MAX_COLUMNS`): ``bn`` (a boolean: BN layers on), ``act``,
  ``lr``, ``seed``, ``model``, ``data``, ``experiment``, ``batch_size`` and the keys
  that vary in the sweep (read from the sweep's ``multirun.yaml``, see
  :mod:`bnexp.runnames`), e.g. ``bn.noise`` when ``bn=true,noisy,false`` is swept or
  ``optim.momentum``. The whole config is in the run's ``config`` text summary and in
  ``.hydra/``. Booleans are written as booleans (``torch``'s ``hparams()`` writes them
  as 0.0/1.0, because it tests ``int`` before ``bool``), so here the summaries are
  built from TensorBoard's HParams protos (``api_pb2``, ``plugin_data_pb2``).
- **Visible columns**: the dashboard initially displays the first five columns, with
  the ones marked ``differs`` first (then by name); ``act``, ``bn``, ``lr``, ``seed``
  and the swept keys are marked, so those are the ones a user sees.
- **Metrics**: final and best test accuracy and ``steps_to_<target>`` for every
  target. A target that was not reached is written as ``max_steps + 1``
  (:func:`not_reached_value`): TensorBoard drops a run that has no value for a
  metric from the Parallel Coordinates and Scatter views, so every run gets a
  number, and a value above ``max_steps`` reads "not reached within the run".
- All summaries go into the run's own event file (``SummaryWriter.add_hparams``
  would make a second sub-run per run).
"""

from __future__ import annotations

import math
import time
from typing import Iterable

from torch.utils.tensorboard import SummaryWriter

MAX_COLUMNS = 25
# Metrics shown in the HParams dashboard (written as scalars at the end of the run).
HPARAM_METRICS = ("hparams/final_test_accuracy", "hparams/best_test_accuracy")
# Columns every run has; the first four are displayed first.
SHOWN_FIRST = ("bn", "act", "lr", "seed")
# Config groups whose swept choice is already a fixed column: the key holding it.
GROUP_COLUMNS = {"bn": "bn", "model": "model", "data": "data", "experiment": "experiment"}


def not_reached_value(max_steps: int) -> int:
    """The ``steps_to_<target>`` value written for a target not reached: ``max_steps + 1``."""
    return int(max_steps) + 1


def _scalar(value):
    """A config value as an HParams value: bool, int, float or str (lists and None as text)."""
    from enum import Enum

    if isinstance(value, Enum):  # act=sigmoid is a str Enum: its value, not "Activation.sigmoid"
        return value.value
    if isinstance(value, (bool, int, float, str)):
        return value
    if value is None:
        return "null"
    from omegaconf import OmegaConf

    try:
        return str(OmegaConf.to_container(value, resolve=True, enum_to_str=True))
    except ValueError:
        return str(getattr(value, "value", value))


def _hydra_sweep_keys() -> list[str]:
    """Keys swept by the running Hydra multirun (``[]`` for a single run or outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return []
        from bnexp.runnames import read_sweep_overrides, swept_keys

        overrides = read_sweep_overrides(hc.sweep.dir) or []
        keys = swept_keys(overrides)
        if "bn" in keys and any(o.lstrip("+~").startswith("bn=") and "noisy" in o for o in overrides):
            keys.add("bn.noise")  # bn=true and bn=noisy both have BN layers: tell them apart
        return sorted(keys)
    except Exception:  # not inside a Hydra job, or an unreadable multirun.yaml: no extra columns
        return []


def _hydra_choices() -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices)
    except Exception:  # not inside a Hydra job
        return {}


def flat_hparams(cfg, swept: Iterable[str] | None = None) -> dict:
    """The HParams columns of a run: ``{name: bool | int | float | str}``, at most ``MAX_COLUMNS``.

    Args:
        cfg: the run's composed config (:class:`bnexp.config.Config`).
        swept: the sweep's swept keys as Hydra writes them (``lr``, ``+experiment``, ``bn``);
            None reads them from the running Hydra multirun (none for a single run).

    Returns:
        ``bn`` (bool), ``act``, ``lr``, ``seed``, ``model``, ``data``, ``experiment``
        (``"none"`` without a preset), ``batch_size``, then one column per swept key in
        name order: the key's value, or for a config group its chosen option (``bn`` adds
        ``bn.noise``, a bool, since ``bn=true`` and ``bn=noisy`` both have BN layers).
    """
    from omegaconf import OmegaConf

    out: dict = {
        "bn": bool(cfg.bn.enabled), "act": str(_scalar(cfg.act)), "lr": float(cfg.lr), "seed": int(cfg.seed),
        "model": str(cfg.model.name), "data": str(cfg.data.name),
        "experiment": str(cfg.experiment) if cfg.get("experiment") else "none",
        "batch_size": int(cfg.trainer.batch_size),
    }
    keys = list(_hydra_sweep_keys() if swept is None else swept)
    choices = _hydra_choices()
    for raw in sorted(k.lstrip("+~") for k in keys):
        key = raw.split("@")[0]
        if key.startswith("hydra"):
            continue
        if key in GROUP_COLUMNS:  # bn=true,false: the bn column already tells them apart
            continue
        node = OmegaConf.select(cfg, key, default=None)
        if OmegaConf.is_dict(node):  # another config group (optim, scale): its chosen option
            out[key] = str(choices.get(key, node.get("name", _scalar(node))))
        else:
            out[key] = _scalar(node)
        if len(out) >= MAX_COLUMNS:
            break
    return out


def metric_names(targets) -> list[str]:
    """HParams metric tags: final/best test accuracy and steps to each target."""
    return list(HPARAM_METRICS) + [f"hparams/steps_to_{t:g}" for t in targets]


def _hparam_info(name: str, value, differs: bool):
    from tensorboard.plugins.hparams import api_pb2

    if isinstance(value, bool):
        dtype = api_pb2.DATA_TYPE_BOOL
    elif isinstance(value, (int, float)):
        dtype = api_pb2.DATA_TYPE_FLOAT64
    else:
        dtype = api_pb2.DATA_TYPE_STRING
    return api_pb2.HParamInfo(name=name, type=dtype, differs=differs)


def _plugin_summary(tag: str, plugin_data):
    """A Summary carrying HParams plugin data (what TensorBoard's hparams summary API writes)."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import metadata

    plugin_data.version = metadata.PLUGIN_DATA_VERSION
    smd = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
        plugin_name=metadata.PLUGIN_NAME, content=plugin_data.SerializeToString()))
    return Summary(value=[Summary.Value(tag=tag, metadata=smd)])


def write_hparams_start(writer: SummaryWriter, hparam_dict: dict, metrics: list[str],
                        swept: Iterable[str] | None = None) -> None:
    """Write the experiment and session-start summaries into ``writer``'s own event file.

    Args:
        writer: the run's writer.
        hparam_dict: columns from :func:`flat_hparams` (bool, int, float or str values).
        metrics: metric tags from :func:`metric_names`.
        swept: column names to mark ``differs`` besides bn/act/lr/seed; None: every
            column that :func:`flat_hparams` added beyond the fixed ones.

    Raises:
        ValueError: more than ``MAX_COLUMNS`` columns, or a value of another type.
    """
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    if len(hparam_dict) > MAX_COLUMNS:
        raise ValueError(f"{len(hparam_dict)} HParams columns; at most {MAX_COLUMNS} stay readable")
    fixed = ("bn", "act", "lr", "seed", "model", "data", "experiment", "batch_size")
    marked = set(SHOWN_FIRST) | (set(swept) if swept is not None else set(hparam_dict) - set(fixed))
    ssi = plugin_data_pb2.SessionStartInfo(start_time_secs=time.time())
    for k, v in hparam_dict.items():
        if isinstance(v, bool):  # before int: bool is an int subclass
            ssi.hparams[k].bool_value = v
        elif isinstance(v, (int, float)):
            ssi.hparams[k].number_value = float(v)
        elif isinstance(v, str):
            ssi.hparams[k].string_value = v
        else:
            raise ValueError(f"HParams value of {k} must be bool, int, float or str, got {type(v).__name__}")
    experiment = api_pb2.Experiment(
        hparam_infos=[_hparam_info(k, v, k in marked) for k, v in hparam_dict.items()],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m)) for m in metrics])
    writer.file_writer.add_summary(_plugin_summary(
        metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)))
    writer.file_writer.add_summary(_plugin_summary(
        metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=ssi)))


def write_hparams_end(writer: SummaryWriter, metric_values: dict, step: int, not_reached: int | None = None) -> None:
    """Write the final metric scalars, one value per metric.

    Args:
        writer: the run's writer.
        metric_values: {tag: value}; None means "target not reached".
        step: the global step of the values (the run's last step).
        not_reached: the value written for None (:func:`not_reached_value`); None skips them.
    """
    for tag, value in metric_values.items():
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            value = not_reached if tag.startswith("hparams/steps_to_") else None
        if value is not None:
            writer.add_scalar(tag, value, step)
