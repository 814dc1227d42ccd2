"""A run folder holds one configuration: which differences between two resolved configs change results
(:func:`changed_keys`), and the refusal to run a config in a folder whose run was made with another
(:func:`refuse_other_config`, called by :func:`bnexp.cli.run_job` before anything in the folder changes).
The same rule decides whether a found checkpoint is this run's (:mod:`bnexp.train.resume`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bnexp.config.schema import resolved
from bnexp.errors import UserError
from bnexp.runfolders import rundir
from bnexp.runfolders.neutral_keys import RESULT_NEUTRAL_KEYS
from bnexp.runfolders.rundir import flatten


def changed_keys(old: dict, new: dict) -> list[tuple[str, Any, Any]]:
    """The result-changing differences between two resolved configs: [(key, old value, new value)].

    Keys of ``bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS`` (and keys under them) never count, nor keys the
    old config lacks (added to bnexp after that run was made). Texts compare case-insensitively
    (``'False'``, the old spelling of data.augment's default, is ``'false'``).
    """
    def neutral(key: str) -> bool:
        return any(key == n or key.startswith(n.rstrip(".") + ".") for n in RESULT_NEUTRAL_KEYS)

    def same(a, b) -> bool:
        return a == b or (isinstance(a, str) and isinstance(b, str) and a.casefold() == b.casefold())

    a, b = flatten(old), flatten(new)
    return [(k, a[k], b.get(k)) for k in a if not neutral(k) and not same(a[k], b.get(k))]


def refuse_other_config(cfg, run_dir: Path) -> None:
    """A run folder holds one configuration: refuse a folder whose complete or resumable run was
    made with a different result-changing value (its ``config.yaml``, written when it started).

    Keys of ``bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS`` never count (:func:`changed_keys`).

    Raises:
        UserError: naming the differing keys (old -> new) and the two ways out.
    """
    import yaml

    complete = rundir.is_complete(run_dir)
    if not (complete or (run_dir / "checkpoint.pt").exists()):
        return
    try:
        old = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return  # no record of its config (the checkpoint's own check still applies)
    changes = changed_keys(old if isinstance(old, dict) else {}, resolved(cfg))
    if not changes:
        return
    shown = "; ".join(f"{k}: {a!r} there, {b!r} now" for k, a, b in changes[:6])
    more = f"; and {len(changes) - 6} more" if len(changes) > 6 else ""
    what = "a finished" if complete else "an unfinished (resumable)"
    raise UserError(f"{run_dir} holds {what} run of another configuration ({shown}{more}). A run folder holds "
                    "one configuration: run this one in a new folder (another hydra.run.dir, or hydra.sweep.dir "
                    "for a sweep), or add trainer.resume=false to start this folder over (its results are "
                    "replaced).")
