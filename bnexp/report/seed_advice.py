"""Which seeds a sweep lacks for a verdict, and the command that adds them (:func:`seed_advice`).

Every verdict of the report is a claims-table row (:mod:`bnexp.report.claims`), which needs
:data:`bnexp.report.claims.MIN_SEEDS` seeds and runs that left chance (:data:`bnexp.analysis.rules.CHANCE`).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Collection
from pathlib import Path

from bnexp.report.claims import MIN_SEEDS
from bnexp.report.fmt import macro
from bnexp.runfolders.unfinished import unfinished_advice
from bnexp.runfolders.resumecmd import as_typed
from bnexp.runfolders.rundir import run_overrides
from bnexp.runfolders.runnames import read_sweep_overrides


def seeds_to_add(present: list[int], min_seeds: int = MIN_SEEDS, tuning_seeds: Collection[int] = ()) -> list[int]:
    """The seeds that bring ``present`` to ``min_seeds``: the smallest non-negative seeds not in it ([0] -> [1, 2]);
    for a configuration of a held-out sweep run on ``tuning_seeds`` alone (a tuning grid's, docs/mnist/PLAN.md),
    the tuning seeds it lacks first ([100, 102] of 100-102 -> [101]), since another seed would not complete the
    grid that chooses the rate."""
    pool = sorted(tuning_seeds) if present and set(present) <= set(tuning_seeds) else []
    pool += [s for s in range(len(present) + min_seeds) if s not in pool]
    return [s for s in pool if s not in present][:max(0, min_seeds - len(present))]


SKIP = ("seed=", "hydra.", "hydra/")  # overrides a re-run command sets itself or that are Hydra's own


def _kept(overrides: list[str]) -> list[str]:
    return [o for o in overrides if not o.lstrip("+~").startswith(SKIP)]


def _sweep_dir(folder: Path) -> str:
    """``hydra.sweep.dir=FOLDER`` as one shell word Hydra's override grammar takes: a folder with characters
    the grammar refuses unquoted (``=``, ``,``, a space, ...) is quoted for Hydra
    (:func:`bnexp.runfolders.runnames.sweep_dir_override`) and then for the shell."""
    from bnexp.runfolders.runnames import sweep_dir_override
    from bnexp.errors import UserError

    text = str(folder)
    if re.fullmatch(r"[\w./+-]+", text):
        return f"hydra.sweep.dir={text}"
    try:
        return shlex.quote(sweep_dir_override(text))
    except UserError:  # a backslash or '$': Hydra cannot take it; shown as it is
        return shlex.quote(f"hydra.sweep.dir={text}")


def sweep_command(sweep_dir: Path, seeds: list[int], overrides: list[str] | None = None, folder: str = "") -> str:
    """The command that adds ``seeds`` to the sweep in ``sweep_dir``, as a shell command line that runs as
    printed: ``overrides`` (default: its multirun.yaml's, :func:`bnexp.runfolders.runnames.read_sweep_overrides`)
    without seed and hydra.*, each as the user types it (:func:`bnexp.runfolders.resumecmd.as_typed`:
    ``bn=true,false``, not multirun.yaml's ``bn='true','false'``) and quoted for the shell where needed, the
    seeds and a new sweep folder inside it (``folder``, default ``more_seeds/seed_1_2``: no ``=`` or ``,``, which
    Hydra's grammar refuses; no run folder is reused)."""
    keep = _kept(read_sweep_overrides(sweep_dir) or [] if overrides is None else overrides)
    seed = f"seed={','.join(map(str, seeds))}"
    typed = [shlex.quote(as_typed(o)) for o in keep] or ["<the sweep's overrides>"]
    folder = folder or f"more_seeds/seed_{'_'.join(map(str, seeds))}"
    return " ".join(["bnexp train -m", *typed, seed, _sweep_dir(Path(sweep_dir) / folder)])


def _values(overrides: list[str]) -> dict[str, set[str]] | None:
    """{key: the values it takes} of Hydra overrides, sweeps expanded by Hydra's override parser (quotes and
    case dropped: a job's ``bn='false'`` is the sweep's ``false``); None when they cannot be parsed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(_kept(overrides))
        return {o.get_key_element(): {str(v).strip("'\"").lower() for v in (
            o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()])} for o in parsed}
    except Exception:  # an interval sweep or a grammar error: coverage unknown
        return None


def own_overrides(group) -> list[str] | None:
    """The overrides its runs were started with: the first readable ``.hydra/overrides.yaml`` of ``group``'s
    runs (:func:`bnexp.runfolders.rundir.run_overrides`), or None."""
    return next((o for r in group.runs if (o := run_overrides(r.path)) is not None), None)


def from_last_call(job: list[str] | None, sweep: dict[str, set[str]] | None) -> bool:
    """Whether the last multirun call of the folder (``sweep``: :func:`_values` of multirun.yaml's overrides)
    trained the configuration whose runs were started with ``job`` (:func:`own_overrides`): ``job`` is one of
    that call's jobs. True when either side cannot be read (then the multirun.yaml command is the best there is)."""
    mine = None if job is None else _values(job)
    return sweep is None or mine is None or (mine.keys() == sweep.keys()
                                             and all(v <= sweep[k] for k, v in mine.items()))


MAX_COMMANDS = 5


def grid_commands(jobs: list[list[str] | None], seeds: list[list[int]], sweep_dir: Path,
                  min_seeds: int = MIN_SEEDS, tuning_seeds: Collection[int] = ()) -> list[str]:
    """Commands that add the missing seeds to configurations, given each one's overrides (``jobs``,
    :func:`own_overrides`) and present ``seeds``: configurations with the same override keys and the same seeds
    to add share one command, its values as sweep lists (``bn=true,false``), when their values form a full grid
    (every combination is one of them, so the command trains nothing new); otherwise one command each."""
    sets: dict[tuple, list[dict]] = {}
    for job, have in zip(jobs, seeds):
        kv = {k: v if sep else None for k, sep, v in (o.partition("=") for o in _kept(job or []))}  # "~key"
        kv = {k: v[1:-1] if v and re.fullmatch(r"'[\w.+-]+'", v) else v for k, v in kv.items()}  # 'true' -> true
        sets.setdefault((frozenset(kv), tuple(seeds_to_add(have, min_seeds, tuning_seeds))), []).append(kv)
    cmds = []
    for (_, add), configs in sets.items():
        values = {k: list(dict.fromkeys(c[k] for c in configs)) for k in configs[0]}
        grid = math.prod(len(v) for v in values.values()) == len({tuple(c.items()) for c in configs})
        for part in [values] if grid else [{k: [v] for k, v in c.items()} for c in configs]:
            cmds.append(sweep_command(sweep_dir, list(add), [k if v == [None] else f"{k}={','.join(v)}"
                                                             for k, v in part.items()],
                                      f"more_seeds/{len(cmds) + 1}"))
    return cmds


def ladder_seed_command(groups, add, sweep_dir: Path) -> str:
    """The command that adds the seeds ``add`` to the CIFAR-10 ladder sweep in ``sweep_dir`` the way
    docs/cifar/PLAN.md does (stage 5, extra seeds): ``EXTRA_SEEDS=2 [PRESETS=...] SWEEP_DIR=...
    scripts/reproduce_cifar.sh``. PRESETS (:data:`bnexp.analysis.frontier.PRESET_SETS`) is left out when the
    configurations (:class:`bnexp.report.groups.ConfigGroup`) ran only the baseline and the default presets,
    ``all`` when they ran all of them, else their names: a wider PRESETS would first climb ladders the sweep never
    ran."""
    from bnexp.analysis.frontier import PRESET_SETS

    ran = {str(g.config.get("experiment")) for g in groups if g.config.get("experiment")}
    presets = [p for p in PRESET_SETS["all"] if p in ran]
    env = [f"EXTRA_SEEDS={','.join(map(str, add))}"]
    if not ran <= {"baseline", *PRESET_SETS["default"]}:
        env.append("PRESETS=" + ("all" if set(presets) == set(PRESET_SETS["all"]) else ",".join(presets)))
    return shlex.join([*env, f"SWEEP_DIR={sweep_dir}", "scripts/reproduce_cifar.sh"])


def seed_advice(groups, sweep_dir: Path, ladder: bool = False, min_seeds: int = MIN_SEEDS,
                tuning_seeds: Collection[int] = ()) -> str | None:
    """The configurations (:class:`bnexp.report.groups.ConfigGroup`) with fewer than ``min_seeds`` completed
    seeds and how to add them ("Too few seeds for a verdict (...): bn=true has 1 seed (0); bn=false has 1 seed
    (0). Add seed=1,2: bnexp train -m bn=true,false seed=1,2 hydra.sweep.dir=SWEEP/more_seeds/seed_1_2, then bnexp
    report SWEEP."; the first three named, then how many more); None when all have.

    The command repeats the folder's multirun.yaml, which holds only the last ``bnexp train -m`` call. When a
    configuration was trained by an earlier call (:func:`from_last_call`; scripts/ics_study.sh makes two calls),
    or the configurations lack different seeds (one command for all would retrain a seed some have, which the
    report counts once, :mod:`bnexp.report.duplicate_seeds`), the commands come from the configurations' own overrides
    (:func:`grid_commands`). A ``ladder`` sweep (scripts/reproduce_cifar.sh's Sec. 4.2 frontier) is completed by
    that script. In a held-out sweep (``tuning_seeds``), a tuning configuration lacks its missing tuning seeds
    (:func:`seeds_to_add`). An unfinished sweep gets the command that resumes it instead
    (:func:`bnexp.runfolders.unfinished.unfinished_advice`): seeds are advised only once every run completed. The
    words are templates/seed_advice.md.j2's."""
    unfinished = unfinished_advice([r for g in groups for r in g.runs], sweep_dir)
    if unfinished is not None:
        return unfinished
    short = [g for g in groups if g.config and len(g.completed) < min_seeds]
    if not short:
        return None
    seeds = [sorted({r.seed for r in g.completed if r.seed is not None}) for g in short]
    adds = [tuple(seeds_to_add(have, min_seeds, tuning_seeds)) for have in seeds]
    add, one_set = sorted({s for a in adds for s in a}), len(set(adds)) == 1
    x = {"min_seeds": min_seeds, "short": [(g.label, len(g.completed), have) for g, have in zip(short[:3], seeds)],
         "more": max(len(short) - 3, 0), "add": add, "one_set": one_set, "ladder": ladder, "command": None,
         "commands": None, "last_call": None, "max_commands": MAX_COMMANDS, "sweep_dir": shlex.quote(str(sweep_dir))}
    if ladder:
        x["command"] = ladder_seed_command(groups, add, sweep_dir)
    else:
        task = read_sweep_overrides(sweep_dir)
        sweep = None if task is None else _values(task)
        jobs = [own_overrides(g) for g in short]
        x["last_call"] = all(from_last_call(job, sweep) for job in jobs)
        if x["last_call"] and (one_set or None in jobs):
            x["command"] = sweep_command(sweep_dir, add, task)
        else:
            x["commands"] = grid_commands(jobs, seeds, sweep_dir, min_seeds, tuning_seeds)
    return macro("advice", x, None, template="seed_advice.md.j2")
