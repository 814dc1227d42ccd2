"""Packaging beyond pyproject.toml: the Hydra configs in conf/ ship inside the package as ``bnexp/conf`` (package
data), so that ``pip install .`` (not only an editable install) can run ``bnexp train``
(bnexp.config.schema.CONF_DIR). The rest is setuptools' namespace discovery of bnexp and hydra_plugins (Hydra
finds bnexp's launchers in the ``hydra_plugins`` namespace package)."""

from pathlib import Path

from setuptools import find_namespace_packages, setup

CONF = ["bnexp.conf"] + sorted("bnexp.conf." + ".".join(d.relative_to("conf").parts)
                               for d in Path("conf").rglob("*") if d.is_dir())

setup(
    packages=find_namespace_packages(include=["bnexp*", "hydra_plugins*"]) + CONF,
    package_dir={"bnexp.conf": "conf"},
    package_data={"bnexp.report": ["*.yaml"], "bnexp.report.templates": ["*.j2"], **{p: ["*.yaml"] for p in CONF}},
)
