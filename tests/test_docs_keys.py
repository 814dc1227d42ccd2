"""docs/configuration.md lists every config key a user sets: each key of the config schema
(bnexp/config/schema.py) appears on the page, in backticks, or is set by a config group's choice."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from bnexp.config import schema

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
# keys the group choice sets (documented by the group's row: `data`, `bn`, `logger`, ...), and the page's short forms
BY_GROUP = {"model.name": "model", "data.name": "data", "optim.name": "optim", "bn.enabled": "bn",
            "scale.name": "scale", "logger.tensorboard": "logger", "logger.csv": "logger", "logger.mlflow": "logger",
            "experiment": "+experiment"}
SHORT = {f"bn.noise_{x}": "bn.noise_a/b/c/d" for x in "abcd"}


def schema_keys(cls, prefix: str = "") -> list[str]:
    """The dotted keys of a config dataclass, nested dataclasses expanded."""
    hints, out = typing.get_type_hints(cls), []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        out += schema_keys(t, f"{prefix}{f.name}.") if dataclasses.is_dataclass(t) else [prefix + f.name]
    return out


def test_every_config_key_is_on_the_configuration_page():
    keys = schema_keys(schema.Config) + [f"model.{k}" for c in (schema.MLPConfig, schema.CNNConfig)
                                         for k in schema_keys(c)]
    assert len(set(keys)) > 80 and "monitor.shift_max_values" in keys  # the walk reaches the nested configs
    text = PAGE.read_text()
    missing = [k for k in dict.fromkeys(keys) if f"`{BY_GROUP.get(k, SHORT.get(k, k))}`" not in text]
    assert not missing, f"docs/configuration.md does not name {missing}"
