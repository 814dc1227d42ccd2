"""The ICS study's design record, ``ics_design.json`` in a sweep folder (docs/ics/PLAN.md, "What report.json
records"): written by scripts/ics_study.sh (:mod:`bnexp.designs.orchestrate`) before its runs, read by
``bnexp report`` into report.json.

Keys: ``rates`` ({"BN": lr, "no BN": lr, "noisy BN": lr}, or {} when the configs' rate is used for every net),
``rate_source`` (one sentence: how the rates were chosen), ``tuning_dir`` (the folder of the tuning runs, or
None), ``tuning_seeds`` and ``evaluation_seeds`` (lists of ints; tuning empty when no rate was tuned),
``own_rates`` (true: each network at its own rate, so the claims pair BN and no BN across learning rates).
"""

from __future__ import annotations

import json
from pathlib import Path

from bnexp.analysis.runs import read_sweep_record

DESIGN_FILE = "ics_design.json"


def write_design(sweep_dir: Path, design: dict) -> Path:
    """Write ``design`` (the module docstring's keys) as ``sweep_dir/ics_design.json``, making the folder, and
    return its path. Raises OSError when the folder or the file cannot be written."""
    path = Path(sweep_dir) / DESIGN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(design, indent=1, sort_keys=True) + "\n")
    return path


def read_design(sweep_dir: Path) -> dict | None:
    """The design record of ``sweep_dir``, None when there is none or it is not a JSON object (a broken file
    is ignored with a warning naming it: the report then pairs configurations as without one). Seeds that are not
    a list of whole numbers (``tuning_seeds``, ``evaluation_seeds``) are dropped with a warning naming the file and
    the key: the report then takes the runs' seeds."""
    seeds = (lambda v: isinstance(v, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in v),
             "a list of whole-number seeds")
    return read_sweep_record(Path(sweep_dir) / DESIGN_FILE, {"tuning_seeds": seeds, "evaluation_seeds": seeds},
                             "ignored, the report pairs the configurations as without it")


def design_fields(design: dict | None, run_seeds) -> dict:
    """report.json's ``ics_design``, ``tuning_seeds`` and ``evaluation_seeds`` of an ICS sweep: from the design
    record (its evaluation seeds, else the runs' seeds ``run_seeds``); without one, no tuning seeds and the
    runs' seeds."""
    if design is None:
        return {"ics_design": None, "tuning_seeds": [], "evaluation_seeds": sorted({int(s) for s in run_seeds})}
    return {"ics_design": design, "tuning_seeds": sorted(int(s) for s in design.get("tuning_seeds") or []),
            "evaluation_seeds": sorted({int(s) for s in design.get("evaluation_seeds") or run_seeds})}


def ignored_keys(design: dict | None) -> tuple[str, ...]:
    """The config keys left out when BN and no BN are paired: ("lr",) when each network ran at its own rate."""
    return ("lr",) if design and design.get("own_rates") else ()
