"""study.json, the marker of a study's sweep folder (``scripts/study.sh``): which study the folder holds (``bnexp
report`` then writes the study section, with the study's question) and the measured wall time of the script's calls
that trained, summed over every call (``wall_time_s``, ``calls``, ``jobs``; docs/studies/README.md's page shows it).

A call counts from the moment it starts training: :class:`StudyClock` adds it to ``calls`` then and writes its time
so far every minute while a command runs and after every command, so a call that cannot finish its own bookkeeping
(SIGKILL, a scheduler's kill after the grace time of its SIGTERM, a machine that goes down) still counts, up to its
last minute; a call stopped by SIGTERM or Ctrl-C counts to its end. Writes are atomic (a kill never leaves half a file).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

MARKER = "study.json"


def _read(sweep: Path, name: str) -> dict:
    """study.json of ``sweep`` when it is study ``name``'s (a fresh one otherwise, or when it is unreadable), with
    the study's question."""
    from bnexp.designs.studies import build_studies

    try:
        d = json.loads((sweep / MARKER).read_text())
    except (OSError, ValueError):
        d = {}
    d = d if isinstance(d, dict) and d.get("study") == name else {"study": name}
    d["question"] = build_studies()[name].question
    return d


def _write(sweep: Path, d: dict) -> None:
    from bnexp.runfolders.rundir import write_json

    sweep.mkdir(parents=True, exist_ok=True)
    write_json(sweep / MARKER, d)


def _number(value) -> float:
    """A count or time study.json holds; 0 for a missing or hand-edited (non-numeric) one."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else 0


def record_study(sweep: Path, name: str) -> None:
    """Mark ``sweep`` as study ``name``'s (study.json with the study's question), keeping the wall time recorded so
    far."""
    _write(sweep, _read(sweep, name))


class StudyClock:
    """The measured wall time of one call of ``scripts/study.sh`` that trains, in the sweep's study.json.

    Created when the call starts training: ``calls`` goes up by one at once and ``jobs`` is this call's; every
    :meth:`tick` (every minute while a command runs: :meth:`bnexp.runfolders.supervise.Supervisor.run`'s heartbeat;
    after each command; once at the end) writes ``wall_time_s`` = the earlier calls' time + this call's time so far.

    Args:
        sweep: the study's sweep folder. name: the study. jobs: this call's parallel jobs (JOBS).
    """

    def __init__(self, sweep: Path, name: str, jobs: int):
        self.sweep, self.name, self.start = Path(sweep), name, time.time()
        d = _read(self.sweep, name)
        self.before = _number(d.get("wall_time_s"))
        d.update(wall_time_s=self.before, jobs=jobs, calls=int(_number(d.get("calls"))) + 1)
        _write(self.sweep, d)
        self.jobs = jobs

    def tick(self) -> int:
        """Write this call's time so far into study.json; returns it (seconds, rounded)."""
        wall = round(time.time() - self.start)
        d = _read(self.sweep, self.name)
        d.update(wall_time_s=self.before + wall, jobs=self.jobs)
        d.setdefault("calls", 1)
        _write(self.sweep, d)
        return wall
