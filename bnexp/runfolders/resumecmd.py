"""The command that resumes one run folder, printed when a run stops early (Ctrl-C, SIGTERM, a full disk).

A plain re-run of ``bnexp train ...`` does not resume: Hydra names a new, timestamped run folder
each time (``hydra.run.dir`` in ``conf/config.yaml``). The command that resumes a run is its own
overrides plus ``hydra.run.dir=<its folder>``: ``trainer.resume=null`` (the default) continues an
unfinished run found in the run folder (:func:`bnexp.cli.run_job`).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

# values bnexp quotes for Hydra (bnexp.config.schema.quote_bn_overrides): shown as the user types them
_QUOTED_BN = re.compile(r"^([+~]{0,2}bn=)'(true|false)'$")
_PLAIN = re.compile(r"^[A-Za-z0-9_./+-]+$")  # a value Hydra's override grammar reads as it is


def _hydra_value(value: str) -> str:
    """``value`` as one value in Hydra's override grammar: a run folder named by its overrides holds
    ``=`` and ``,``, which must be inside a quoted string (Hydra: backslash escapes a quote)."""
    if _PLAIN.match(value):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def resume_command(run_dir: Path | str, overrides: list[str] | None) -> str:
    """The shell command that resumes the run in ``run_dir``.

    Args:
        run_dir: the run's folder (made absolute, so the command works from any folder).
        overrides: the job's task overrides (Hydra's ``hydra.overrides.task``), e.g. ``["bn='false'", "seed=1"]``;
            ``hydra.*`` overrides are not among them, and ``hydra.run.dir`` is added.

    Returns:
        e.g. ``bnexp train bn=false seed=1 hydra.run.dir=/home/me/outputs/runs/2026-11-27_15-00-00_bn=false,seed=1``,
        each argument quoted for a POSIX shell only where it needs it, the folder also for Hydra's
        grammar when its name holds ``=``, ``,`` or other special characters.
    """
    args = [_QUOTED_BN.sub(r"\1\2", o) for o in (overrides or [])]
    args.append(f"hydra.run.dir={_hydra_value(str(Path(run_dir).absolute()))}")
    return "bnexp train " + " ".join(shlex.quote(a) for a in args)


def resume_hint(run_dir: Path | str, overrides: list[str] | None, what: str = "Resume this run with") -> str:
    """The line that tells how to resume: ``"<what>: <the command of resume_command>"``."""
    return f"{what}: {resume_command(run_dir, overrides)}"
