"""Run-folder names of sweep jobs: the swept keys only (``bn=true``, ``bn=false,lr=0.6``).

A Hydra multirun saves its master config, with the command line's overrides as
written (``bn='true','false' lr=0.6 trainer.max_steps=3000``), to
``<sweep dir>/multirun.yaml`` before it launches any job. The overrides that are
sweeps there (``a,b``, ``range(..)``, ``choice(..)``; the last override of a key
wins, as in Hydra's basic sweeper) are the keys that vary between the jobs, so a
job's folder is named by its own values of those keys and nothing else; the full
overrides stay in the job's ``.hydra/overrides.yaml`` and ``.hydra/config.yaml``.

The name depends only on the sweep's command line and the job's overrides, so it
is unique within the sweep and deterministic: re-running the same sweep command
into the same ``hydra.sweep.dir`` finds (and skips or resumes) the same folders.
Single runs (``hydra.run.dir``) keep their time-stamped names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from bnexp.errors import UserError

MAX_DIRNAME = 150


def safe_dirname(text: str) -> str:
    """Turn an override string such as ``bn='true',lr=0.1`` into a portable folder name.

    Quotes are dropped, slashes become ``-``, other characters outside ``[A-Za-z0-9_.,=+-]``
    become ``_``; an empty text becomes ``default``. Names longer than ``MAX_DIRNAME``
    characters (file systems allow 255 bytes) are cut and end in a hash of the full
    name, so they stay unique and deterministic.
    """
    text = text.replace("'", "").replace('"', "").replace("/", "-")
    text = re.sub(r"[^A-Za-z0-9_.,=+\-]", "_", text) or "default"
    if len(text) > MAX_DIRNAME:
        import hashlib

        digest = hashlib.sha1(text.encode()).hexdigest()[:10]
        text = f"{text[:MAX_DIRNAME - 11]}_{digest}"
    return text


def swept_keys(sweep_overrides: Iterable[str]) -> set[str]:
    """Keys (as Hydra writes them: ``lr``, ``+experiment``) that a multirun's overrides sweep.

    Args:
        sweep_overrides: the multirun's task overrides, e.g. ``["bn='true','false'", "lr=0.1"]``.

    Returns:
        ``{"bn"}`` for that example; a key given twice counts as swept when its last
        override is a sweep (Hydra's basic sweeper lets the last one win).

    Raises:
        hydra.errors.OverrideParseException: for text Hydra's override grammar rejects.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    last: dict[str, bool] = {}
    for o in OverridesParser.create().parse_overrides(list(sweep_overrides)):
        last[o.get_key_element()] = o.is_sweep_override()
    return {k for k, swept in last.items() if swept}


def swept_name(job_overrides: Iterable[str], keys: set[str]) -> str:
    """The job's overrides of the swept ``keys``, sorted and joined by ``,`` (Hydra's
    ``override_dirname`` restricted to those keys), as a folder name; "" when none."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = sorted(o.input_line for o in OverridesParser.create().parse_overrides(list(job_overrides))
                   if o.get_key_element() in keys)
    return safe_dirname(",".join(lines)) if lines else ""


def read_sweep_overrides(sweep_dir: str | Path) -> list[str] | None:
    """The multirun's task overrides and ``hydra.sweeper.params`` from ``multirun.yaml``
    (as Hydra's basic sweeper combines them), or None when the file is absent or unreadable."""
    from omegaconf import OmegaConf

    path = Path(str(sweep_dir)) / "multirun.yaml"
    try:
        cfg = OmegaConf.load(path)
        params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
        task = OmegaConf.select(cfg, "hydra.overrides.task") or []
        return [f"{k}={v}" for k, v in params.items()] + [str(t) for t in task]
    except Exception:  # missing file, yaml or omegaconf errors: the caller falls back to Hydra's name
        return None


def sweep_subdir(sweep_dir: str, job_overrides, override_dirname: str) -> str:
    """Hydra resolver ``${bnexp_sweep_subdir:${hydra.sweep.dir},${hydra.overrides.task},${hydra.job.override_dirname}}``.

    Args:
        sweep_dir: the multirun's ``hydra.sweep.dir`` (holding ``multirun.yaml``).
        job_overrides: this job's task overrides (a list of ``key=value`` strings).
        override_dirname: Hydra's name from all of the job's overrides (display keys
            excluded), used when the sweep's overrides cannot be read or sweep nothing
            (``bnexp train -m lr=0.1`` is one job, named ``lr=0.1``).

    Returns:
        the job's folder name, e.g. ``bn=false,lr=0.6``.
    """
    sweep = read_sweep_overrides(sweep_dir)
    if sweep:
        try:
            name = swept_name([str(o) for o in job_overrides], swept_keys(sweep))
        except Exception:  # an override Hydra itself accepted but our parse did not: keep Hydra's name
            name = ""
        if name:
            return name
    return safe_dirname(override_dirname)


def sweep_dir_override(folder: str | Path, name: str = "SWEEP_DIR") -> str:
    """``hydra.sweep.dir='FOLDER'`` quoted for Hydra's override grammar (a sweep folder's name from
    :func:`bnexp.designs.preflight.sweep_suffix` holds ``=`` and ``,``; a single quote is escaped as ``\\'``).

    Raises:
        UserError: a backslash or ``$`` in the folder (Hydra/OmegaConf escapes and interpolations).
    """
    text = str(folder)
    if "\\" in text or "$" in text:
        raise UserError(f"sweep folder '{text}' ({name}): a backslash or '$' cannot be passed to Hydra as "
                        f"hydra.sweep.dir; choose another folder")
    return "hydra.sweep.dir='" + text.replace("'", "\\'") + "'"
