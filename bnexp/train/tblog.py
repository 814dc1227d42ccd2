"""TensorBoard HParams: the keys a sweep varies, a few results, each value shown as what it is.

What the HParams dashboard (TensorBoard 2.x) shows, and why it is written this way:

- **Columns shown**: the dashboard displays the first five hyperparameters of the
  experiment (those marked ``differs`` first) and its first five metrics, each column
  10em (160 px) wide, so ten columns overflow a 1600 px window. The experiment
  therefore lists only the **keys the sweep varies** (read from the sweep's
  ``multirun.yaml``, see :mod:`bnexp.runfolders.runnames`; ``bn.noise`` too when ``bn=noisy`` is
  swept, ``bn.norm`` when ``bn=layer`` or ``bn=group`` is), or ``bn``, ``act``, ``lr``, ``seed`` for a single run, and as many metrics as
  leave at most :data:`TABLE_COLUMNS` columns: final test accuracy, then
  ``steps_to_<target>`` for the targets in increasing order, then best test accuracy
  (with one swept key, all of them: the dashboard shows five and offers the rest).
  Every run still records ``bn``, ``act``, ``lr``, ``seed``, ``model``, ``data``,
  ``experiment``, ``batch_size`` and its swept keys (:func:`flat_hparams`) in its
  session, so whichever run's experiment TensorBoard picks (it takes one arbitrarily),
  every run has a value in its columns. The whole config is in the TEXT tab
  (``config``) and the run's ``.hydra/``.
- **Value types**: the dashboard prints every number with 5 significant digits
  (``toPrecision(5)``: seed 0 reads ``0.0000``, batch size 60 ``60.000``), so integers
  are written as strings (``"0"``, ``"60"``) with a discrete domain (a checkbox filter);
  booleans as booleans (``true``/``false``, ``torch``'s ``hparams()`` writes them as
  0.0/1.0 because it tests ``int`` before ``bool``); floats as numbers with the swept
  interval as domain; strings with the swept values as domain. The summaries come from the
  HParams plugin's own API (``tensorboard.plugins.hparams.summary_v2``: ``HParam``, ``Discrete``,
  ``RealInterval``, ``Metric``, ``hparams_config_pb``, ``hparams_pb``); a column's type without a
  list of values and its ``differs`` flag, which the API has no argument for, are set through its
  domain hook (``Domain.update_hparam_info``).
- **Unreached targets**: a ``steps_to_<target>`` the run never reached (and a non-finite
  accuracy) is **not written**, so its cell is blank. The trade-off: the Parallel
  Coordinates view draws a run only when every *visible* column has a value (uncheck
  the ``steps to`` metrics in the left panel to see every run), and the Scatter Plot
  leaves that run out of the plots of that metric only.
- All summaries go into the run's own event file (``SummaryWriter.add_hparams``
  would make a second sub-run per run).
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Mapping

from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import summary_v2 as hp
from torch.utils.tensorboard import SummaryWriter

from bnexp.config.checks import option_value

MAX_COLUMNS = 25
# Columns of the HParams table that fit a 1600 px wide window beside "Trial ID" and "Show Metrics".
TABLE_COLUMNS = 6
# The dashboard displays this many hyperparameters and this many metrics by default.
DASHBOARD_SHOWS = 5
# Metrics shown in the HParams dashboard (written as scalars at the end of the run).
HPARAM_METRICS = ("hparams/final_test_accuracy", "hparams/best_test_accuracy")
# Columns shown for a single run (no sweep).
SINGLE_RUN_COLUMNS = ("bn", "act", "lr", "seed")
# Config groups whose swept choice is already a fixed column: the key holding it.
GROUP_COLUMNS = {"bn": "bn", "model": "model", "data": "data", "experiment": "experiment"}
STEPS_TO = "hparams/steps_to_"


def add_png(writer, tag: str, png: bytes, step: int) -> None:
    """An image of TensorBoard's Images tab from a PNG file's bytes (e.g. a figure already saved in the run
    folder: the same pixels as ``add_figure``, without drawing the figure a second time)."""
    import io

    import numpy as np
    from PIL import Image  # pillow: matplotlib's own PNG reader

    writer.add_image(tag, np.asarray(Image.open(io.BytesIO(png)).convert("RGB")), step, dataformats="HWC")


def not_reached_value(max_steps: int) -> int:
    """Deprecated: ``max_steps + 1``, what earlier versions wrote for a target not reached.

    Unreached targets are no longer written (blank in the HParams table); kept so that
    callers passing ``write_hparams_end(..., not_reached=not_reached_value(n))`` work.
    """
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
        return str(option_value(value))


def _unquote(text: str) -> str:
    """``'true'`` -> ``true``: a Hydra override value without its quotes."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def sweep_values(overrides: Iterable[str]) -> dict[str, list[str]]:
    """The swept keys of a multirun's overrides and their values, as HParams column names.

    Args:
        overrides: the multirun's task overrides (:func:`bnexp.runfolders.runnames.read_sweep_overrides`),
            e.g. ``["bn='true','false'", "seed=0,1", "trainer.max_steps=900"]``.

    Returns:
        ``{column: [value as text, ...]}`` for every swept key: ``+experiment`` is the
        ``experiment`` column, ``hydra.*`` keys are left out, and ``bn`` with a ``noisy``
        option adds ``bn.noise`` (``bn=true`` and ``bn=noisy`` both have BN layers), with a
        ``layer`` or ``group`` option ``bn.norm`` (``batch``, ``layer``, ``group``). A sweep
        whose values cannot be listed (``interval(...)``) maps to ``[]``. The last override
        of a key wins, as in Hydra's basic sweeper. E.g. ``{"bn": ["true", "false"],
        "seed": ["0", "1"]}`` for the example.

    Raises:
        hydra.errors.OverrideParseException: for text Hydra's override grammar rejects.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides(list(overrides)):
        key = o.get_key_element().lstrip("+~").split("@")[0]
        if key.startswith("hydra"):
            continue
        out.pop(key, None)
        if key == "bn":
            out.pop("bn.noise", None)
            out.pop("bn.norm", None)
        if not o.is_sweep_override():
            continue
        try:
            values = [_unquote(str(v)) for v in o.sweep_string_iterator()]
        except Exception:  # interval sweeps (optuna etc.) cannot be listed
            values = []
        out[key] = values
        if key == "bn" and "noisy" in values:
            out["bn.noise"] = ["False", "True"]
        if key == "bn" and {"layer", "group"} & set(values):  # bn=true,layer: both have bn.enabled true
            out["bn.norm"] = sorted({v if v in ("layer", "group") else "batch" for v in values})
    return out


def _hydra_sweep() -> dict[str, list[str]]:
    """:func:`sweep_values` of the running Hydra multirun ({} for a single run or outside Hydra)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return {}
        from bnexp.runfolders.runnames import read_sweep_overrides

        return sweep_values(read_sweep_overrides(hc.sweep.dir) or [])
    except Exception:  # not inside a Hydra job, or an unreadable multirun.yaml: no sweep columns
        return {}


def _hydra_choices() -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices)
    except Exception:  # not inside a Hydra job
        return {}


def flat_hparams(cfg, swept: Iterable[str] | None = None) -> dict:
    """The HParams values a run records: ``{name: bool | int | float | str}``, at most ``MAX_COLUMNS``.

    Args:
        cfg: the run's composed config (:class:`bnexp.config.schema.Config`).
        swept: the sweep's swept keys as Hydra writes them (``lr``, ``+experiment``, ``bn``)
            or as column names (:func:`sweep_values`); None reads them from the running
            Hydra multirun (none for a single run).

    Returns:
        ``bn`` (bool), ``act``, ``lr``, ``seed``, ``model``, ``data``, ``experiment``
        (``"none"`` without a preset), ``batch_size``, then one entry per other swept key
        in name order: the key's value, or for a config group its chosen option (``bn``
        with ``noisy`` swept adds ``bn.noise``, a bool). Python types are kept here (seed is
        an int); :func:`write_hparams_start` decides how TensorBoard shows them.
    """
    from omegaconf import OmegaConf

    out: dict = {
        "bn": bool(cfg.bn.enabled), "act": str(_scalar(cfg.act)), "lr": float(cfg.lr), "seed": int(cfg.seed),
        "model": str(cfg.model.name), "data": str(cfg.data.name),
        "experiment": str(cfg.experiment) if cfg.get("experiment") else "none",
        "batch_size": int(cfg.trainer.batch_size),
    }
    keys = list(_hydra_sweep() if swept is None else swept)
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
    """HParams metric tags in the order the dashboard shows them: final test accuracy, best test accuracy,
    then steps to each target, the highest first (the columns :func:`shown_metrics` keeps when the table
    has no room for all: with MNIST's targets and two swept keys, final, best, steps to 98% and to 97%)."""
    steps = [f"{STEPS_TO}{t:g}" for t in sorted(targets, reverse=True)]
    return [HPARAM_METRICS[0], HPARAM_METRICS[1], *steps]


def _metric(tag: str):
    """The HParams plugin's :class:`Metric` for a tag of :func:`metric_names`, with a readable name."""
    if tag.startswith(STEPS_TO):
        target = tag[len(STEPS_TO):]
        name, text = (f"steps to {target} test accuracy",
                      f"training steps until the test accuracy first reached {target}; "
                      "blank: not reached within the run")
    else:
        words = tag.split("/")[-1].replace("_", " ")
        name, text = words, f"{words} of the run (fraction of the test set)"
    return hp.Metric(tag, display_name=name, description=text)


def shown_metrics(metrics: list[str], n_hparams: int) -> list[str]:
    """The metrics the experiment lists, so that the table fits :data:`TABLE_COLUMNS` columns.

    The dashboard displays ``min(5, n)`` hyperparameters and ``min(5, m)`` metrics, so
    ``metrics`` (in display order) is cut to ``TABLE_COLUMNS - min(5, n_hparams)`` (at least
    one); when that leaves room for five or more, all are listed (five shown, the rest offered).
    """
    room = max(1, TABLE_COLUMNS - min(DASHBOARD_SHOWS, n_hparams))
    return list(metrics) if room >= DASHBOARD_SHOWS else list(metrics)[:room]


def _tb_value(value):
    """How TensorBoard is given a value: ints as text (it prints numbers as ``0.0000``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    return str(value)


def _column_domain(value, sweep: list[str] | None):
    """The HParams plugin's domain of a column: ``Discrete`` (bools; strings and integers as text) or
    ``RealInterval`` (floats) of the swept values, wrapped in :class:`_Column`.

    ``sweep`` holds the swept values as text (None: not swept); a domain is only set when this run's own
    value is among them, so a column never offers values the runs lack.
    """
    if isinstance(value, bool):
        return _Column(bool, sweep is not None, hp.Discrete([False, True]))
    if isinstance(value, float):
        try:
            nums = [float(v) for v in sweep or []]
        except ValueError:
            nums = []
        inner = hp.RealInterval(min(nums), max(nums)) if nums and min(nums) <= value <= max(nums) else None
        return _Column(float, sweep is not None, inner)
    texts = list(sweep or [])  # str, and int written as text
    if isinstance(value, int):
        try:
            texts = [str(n) for n in sorted({int(v) for v in texts})]
        except ValueError:
            texts = []
    else:
        texts = sorted(set(texts))
    return _Column(str, sweep is not None, _InOrder(texts) if str(value) in texts else None)


class _InOrder(hp.Discrete):
    """``hp.Discrete`` that keeps its values in the given order (integers as text in numeric order)."""

    def __init__(self, values: list[str]):
        super().__init__(values, dtype=str)
        self._in_order = list(values)

    @property
    def values(self) -> list[str]:
        return list(self._in_order)


class _Column(hp.Domain):
    """A domain for the HParams plugin's API (``hp.HParam(name, domain)``) that also states what the API has no
    argument for: the column's type when it has no list of values, and ``differs`` (a swept key: the dashboard
    shows those columns first).

    Args:
        dtype: bool, float or str (integers are shown as text).
        differs: the sweep varies this key.
        inner: the plugin's own domain (``hp.Discrete``, ``hp.RealInterval``), or None for no list of values.
    """

    TYPES = {bool: api_pb2.DATA_TYPE_BOOL, float: api_pb2.DATA_TYPE_FLOAT64, str: api_pb2.DATA_TYPE_STRING}

    def __init__(self, dtype: type, differs: bool, inner=None):
        self._dtype, self.differs, self.inner = dtype, differs, inner

    @property
    def dtype(self):
        return self._dtype

    def sample_uniform(self, rng=None):
        raise NotImplementedError("bnexp does not sample hyperparameters")

    def update_hparam_info(self, hparam_info) -> None:
        if self.inner is not None:
            self.inner.update_hparam_info(hparam_info)
            if isinstance(self.inner, _InOrder):  # hp.Discrete sorts as text: '10' before '2'
                hparam_info.ClearField("domain_discrete")
                hparam_info.domain_discrete.extend(self.inner.values)
        hparam_info.type = self.TYPES[self._dtype]
        hparam_info.differs = self.differs


def write_hparams_start(writer: SummaryWriter, hparam_dict: dict, metrics: list[str],
                        swept: Mapping[str, list] | Iterable[str] | None = None) -> None:
    """Write the experiment and session-start summaries into ``writer``'s own event file.

    Args:
        writer: the run's writer.
        hparam_dict: the run's values from :func:`flat_hparams` (bool, int, float or str);
            all of them are recorded in the session.
        metrics: metric tags from :func:`metric_names`, in display order.
        swept: the columns the sweep varies, as ``{column: [values as text]}``
            (:func:`sweep_values`) or just names; None reads the running Hydra multirun.
            These are the columns shown; with none, :data:`SINGLE_RUN_COLUMNS`.

    Raises:
        ValueError: more than ``MAX_COLUMNS`` columns, or a value of another type.
    """
    if len(hparam_dict) > MAX_COLUMNS:
        raise ValueError(f"{len(hparam_dict)} HParams columns; at most {MAX_COLUMNS} stay readable")
    sweep = _hydra_sweep() if swept is None else swept
    sweep = dict(sweep) if isinstance(sweep, Mapping) else {k: [] for k in sweep}
    sweep = {{"+experiment": "experiment"}.get(k, k.lstrip("+~")): v for k, v in sweep.items()}
    shown = [k for k in hparam_dict if k in sweep] or [k for k in SINGLE_RUN_COLUMNS if k in hparam_dict]
    values = {}
    for k, v in hparam_dict.items():
        v = _tb_value(v)
        if not isinstance(v, (bool, float, str)):
            raise ValueError(f"HParams value of {k} must be bool, int, float or str, got {type(v).__name__}")
        values[k] = v
    config = hp.hparams_config_pb([hp.HParam(k, _column_domain(hparam_dict[k], sweep.get(k))) for k in shown],
                                  [_metric(m) for m in shown_metrics(metrics, len(shown))])
    writer.file_writer.add_summary(config)
    # trial_id "": no session group name, so TensorBoard names each row by its run (its folder)
    writer.file_writer.add_summary(hp.hparams_pb(values, trial_id="", start_time_secs=time.time()))


def write_hparams_end(writer: SummaryWriter, metric_values: dict, step: int, not_reached: int | None = None) -> None:
    """Write the final metric scalars; a metric without a value is left out (a blank cell).

    Args:
        writer: the run's writer.
        metric_values: {tag: value}; None or a non-finite value (a target not reached, a
            diverged run's accuracy) is not written.
        step: the global step of the values (the run's last step).
        not_reached: ignored (deprecated): unreached targets used to be written as this.
    """
    del not_reached
    for tag, value in metric_values.items():
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            continue
        writer.add_scalar(tag, value, step)
