"""What the sweep scripts check before anything runs (:mod:`bnexp.designs.orchestrate`): every environment
value, every extra override and every block's composed config, once; and the names of their folders.

Each problem is one :class:`~bnexp.errors.UserError` naming the variable, override or folder (the
orchestrator prints it as one ``error:`` line and exits with code 2), so no block starts that the next
block would see fail the same way.

A block's config is checked as ``bnexp train`` checks a run's (Hydra's composition with the Hydra keys,
then :func:`bnexp.config.schema.validate`), for as few of its jobs as cover every value the user gave: the
first job, and one more for each value of a user's sweep (``NOISE_SCALES``, ``lr=a,b``) not yet covered.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bnexp.errors import UserError
from bnexp.runfolders.runnames import sweep_dir_override

LAST_WINS_ENV = "BNEXP_LAST_OVERRIDE_WINS"
SUFFIX_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,=+-")


def bnexp_argv() -> list[str]:
    """How to start ``bnexp``: the console script on PATH, else this Python's ``-m bnexp.cli``."""
    return ["bnexp"] if shutil.which("bnexp") else [sys.executable, "-m", "bnexp.cli"]


@dataclass
class Block:
    """One ``bnexp train -m`` call of a script.

    Attributes:
        label: what the output calls it. own: the script's overrides.
        user: the overrides that come from the user (environment values, then the extra arguments), after
            ``own`` (the last of a key wins): every value of theirs is validated.
    """

    label: str
    own: list[str]
    user: list[str] = field(default_factory=list)

    @property
    def args(self) -> list[str]:
        """The overrides of the call: :attr:`own`, then :attr:`user`."""
        return [*self.own, *self.user]

    @property
    def command(self) -> list[str]:
        """The command line, exactly as it is run."""
        return [*bnexp_argv(), "train", "-m", *self.args]


# ----- folder names ------------------------------------------------------------------------------------


def sweep_suffix(extra: list[str]) -> str:
    """The sweep folder's suffix for the extra overrides ("" without any): ``+`` and the overrides joined
    by ``,``, every byte outside ``A-Za-z0-9_.,=+-`` as ``_``; over 80 characters, the first 69 and ``_``
    and 10 hex digits of the joined text's SHA-1 (unique, deterministic: a re-run finds the same folder).
    E.g. ``["trainer.max_steps=2000", "seed=0"]`` -> ``+trainer.max_steps=2000,seed=0``."""
    if not extra:
        return ""
    joined = ",".join(extra)
    safe = "".join(chr(b) if chr(b) in SUFFIX_CHARS else "_" for b in joined.encode())
    if len(safe) > 80:
        safe = f"{safe[:69]}_{hashlib.sha1(joined.encode()).hexdigest()[:10]}"
    return "+" + safe


def check_writable(folder: Path, name: str) -> None:
    """Refuse a folder that cannot be created or written (its nearest existing parent is a file or not
    writable, or a name is too long), before anything runs.

    Raises:
        UserError: naming the folder, the variable that sets it and why.
    """
    p = Path(folder).resolve()
    if any(len(part.encode()) > 255 for part in p.parts) or len(str(p).encode()) > 4095:
        raise UserError(f"cannot create the folder {folder} ({name}): the name is too long for the file system; "
                        f"choose a shorter one with {name}=PATH")
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        raise UserError(f"cannot create the folder {folder} ({name}): {p} is a file, not a folder; choose another "
                        f"place with {name}=PATH")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UserError(f"cannot create or write the folder {folder} ({name}): {p} is not writable (permissions "
                        f"or a read-only disk); choose another place with {name}=PATH")


# ----- the environment ---------------------------------------------------------------------------------


class Env:
    """The scripts' environment values, read and checked once.

    Attributes:
        jobs: JOBS (default: the cores this process may use). dry_run: DRY_RUN=1. launcher: LAUNCHER
            (default stacked).

    Raises:
        UserError: a value that is not what its variable takes.
    """

    def __init__(self, environ):
        self.environ = environ
        environ[LAST_WINS_ENV] = "1"  # the extra overrides come last and replace the script's own values
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.jobs = self.positive_int("JOBS", cores)
        if self.get("DRY_RUN", "0") not in ("", "0", "1"):
            raise UserError(f"DRY_RUN={self.get('DRY_RUN')}: use DRY_RUN=1 to print the plan, 0 or unset to run it")
        self.dry_run = self.get("DRY_RUN") == "1"
        self.launcher = self.get("LAUNCHER") or "stacked"
        if not self.get("BNEXP_DATA_ROOT") and Path("../shared/data").is_dir():
            environ["BNEXP_DATA_ROOT"] = str(Path("../shared/data").resolve())
        self._verify: str | None = None

    def get(self, name: str, default: str = "") -> str:
        return self.environ.get(name, default)

    def _read(self, name: str, kind, unreadable):
        """``name``'s text (stripped) and that text read by ``kind``: ``unreadable`` where ``kind``
        raises ValueError, None where the variable is unset or empty."""
        text = self.get(name).strip()
        if not text:
            return text, None
        try:
            return text, kind(text)
        except ValueError:
            return text, unreadable

    def positive_int(self, name: str, default: int) -> int:
        """``name`` as a whole number >= 1 (``default`` when unset or empty).

        Raises:
            UserError: any other value.
        """
        text, value = self._read(name, int, 0)
        if value is None:
            return default
        if value < 1:
            raise UserError(f"{name}={text}: a whole number >= 1 (the parallel jobs of every block)")
        return value

    def number(self, name: str, default: float, minimum: float | None = None) -> float:
        """``name`` as a finite number > 0 (>= ``minimum`` when given), ``default`` when unset or empty.

        Raises:
            UserError: any other value.
        """
        import math

        text, value = self._read(name, float, math.nan)
        if value is None:
            return default
        ok = math.isfinite(value) and (value >= minimum if minimum is not None else value > 0)
        if not ok:
            raise UserError(f"{name}={text}: a number {'>= %g' % minimum if minimum is not None else '> 0'}")
        return value

    def _list(self, name: str, kind, what: str) -> tuple | None:
        text = self.get(name).strip()
        if not text:
            return None
        items = [x.strip() for x in text.split(",")]
        try:
            values = tuple(kind(x) for x in items)
        except ValueError:
            values = ()
        if not values or any(v != v or v < 0 or (kind is float and v <= 0) for v in values):
            raise UserError(f"{name}={text}: {what}, comma-separated (e.g. {name}=1,2)")
        dup = next((x for i, x in enumerate(values) if x in values[:i]), None)
        if dup is not None:
            raise UserError(f"{name}={text} lists {dup:g} twice: each value once (each run is trained once)")
        return values

    def int_list(self, name: str) -> tuple[int, ...] | None:
        """``name`` as distinct whole numbers >= 0 (seeds), None when unset or empty."""
        return self._list(name, int, "whole numbers >= 0")

    def number_list(self, name: str) -> tuple[float, ...] | None:
        """``name`` as distinct numbers > 0, None when unset or empty."""
        return self._list(name, float, "numbers > 0")

    def sweep_dir(self, name: str, default: str, extra: list[str]) -> Path:
        """The sweep folder: ``name``'s value, else ``default`` + :func:`sweep_suffix` of ``extra``.

        Raises:
            UserError: a folder Hydra cannot be given (:func:`sweep_dir_override`).
        """
        folder = self.get(name) or default + sweep_suffix(extra)
        sweep_dir_override(folder, name)
        return Path(folder)

    def docs_dir(self, name: str, default: str, is_default_run: bool) -> str:
        """Where a part's report is copied: ``name``'s value when set (even empty: nowhere), else ``default``
        for a default run and nowhere ("") for any other."""
        if name in self.environ:
            return self.environ[name]
        return default if is_default_run else ""

    @property
    def verify(self) -> str:
        """``data.verify_checksums``: VERIFY_CHECKSUMS, else false for the re-encoded CIFAR-10 copy in
        ../shared/data (../shared/README.md; a note says so), else true."""
        if self._verify is None:
            self._verify = self.get("VERIFY_CHECKSUMS") or "true"
            root, shared = self.get("BNEXP_DATA_ROOT"), Path("../shared/data")
            if not self.get("VERIFY_CHECKSUMS") and root and shared.is_dir() and \
                    Path(root).resolve() == shared.resolve():
                self._verify = "false"
                print("note: ../shared/data holds a non-canonical CIFAR-10 copy: using data.verify_checksums=false")
        return self._verify

    def launcher_args(self, sweep: Path) -> list[str]:
        """The Hydra launcher and sweep folder of every block: ``hydra/launcher=LAUNCHER`` (stacked or joblib:
        with ``hydra.launcher.n_jobs=JOBS``) and ``hydra.sweep.dir``."""
        args = [f"hydra/launcher={self.launcher}"]
        if self.launcher in ("joblib", "stacked"):
            args.append(f"hydra.launcher.n_jobs={self.jobs}")
        return args + [sweep_dir_override(sweep)]


# ----- overrides and configs ---------------------------------------------------------------------------


def check_overrides(extra: list[str]) -> list:
    """Hydra's grammar for the extra overrides, and no value listed twice in one sweep (``seed=0,0``).

    Returns:
        Hydra's ``Override`` objects.

    Raises:
        UserError: naming the override.
    """
    from bnexp.config.explain import parse_overrides
    from bnexp.config.schema import quote_bn_overrides

    os.environ[LAST_WINS_ENV] = "1"
    lines = [a for a in extra if a.startswith("-")]
    if lines:
        raise UserError(f"{lines[0]}: the scripts take Hydra overrides (key=value) only, not options")
    parsed = parse_overrides(quote_bn_overrides(list(extra)))
    for o in parsed:
        if o.is_sweep_override() and not o.is_range_sweep() and not o.is_interval_sweep():
            values = list(o.sweep_string_iterator())
            dup = next((v for i, v in enumerate(values) if v in values[:i]), None)
            if dup is not None:
                raise UserError(f"{o.input_line} lists {dup} twice: each value once (each run is trained once)")
    return parsed


def _key(override) -> str:
    return override.get_key_element()


def _cover(jobs: list[list[str]], user_keys: set[str]) -> list[list[str]]:
    """The first job, then each job that brings a (key, value) of a user's key not seen yet."""
    picks, seen = [], set()
    for job in jobs:
        pairs = {kv for kv in job if kv.split("=", 1)[0] in user_keys}
        if not picks or pairs - seen:
            picks.append(job)
            seen |= pairs
    return picks


def _user_error(exc: Exception, block: Block) -> UserError:
    from bnexp.config.explain import explain

    if isinstance(exc, UserError):
        return exc
    msg = explain(exc) or str(exc)
    return UserError(f"{msg} (in the block {block.label!r})")


def check_blocks(blocks: list[Block]) -> list[tuple[list[list[str]], object]]:
    """Compose and validate each block's configs (see the module docstring).

    Returns:
        per block: (its jobs, each a list of ``key=value`` overrides as Hydra's basic sweeper makes them,
        the first job's composed config).

    Raises:
        UserError: the first override, value or combination refused, named.
    """
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import open_dict

    from bnexp.config.schema import CONF_DIR, quote_bn_overrides, validate

    parser = OverridesParser.create()
    out = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for b in blocks:
            try:
                parsed = parser.parse_overrides(quote_bn_overrides(b.args))
                user_keys = {_key(o) for o in parser.parse_overrides(quote_bn_overrides(b.user))}
                jobs = BasicSweeper.split_arguments(parsed, None)[0]
                first = None
                for job in _cover(jobs, user_keys):
                    job = [o for o in job if not o.startswith("hydra.sweep.")]  # the script's own, quoted
                    cfg = compose("config", overrides=job, return_hydra_config=True)
                    with open_dict(cfg):
                        del cfg["hydra"]
                    validate(cfg)
                    first = cfg if first is None else first
            except Exception as exc:  # Hydra's and OmegaConf's errors, worded as bnexp train words them
                raise _user_error(exc, b) from None
            out.append((jobs, first))
    return out


def launchers() -> list[str]:
    """The options of Hydra's ``hydra/launcher`` group (conf/hydra/launcher and the installed plugins)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from bnexp.config.schema import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return sorted(GlobalHydra.instance().config_loader().get_group_options("hydra/launcher"))


def check_parts(parts: list, env: Env) -> list[list[tuple[list[list[str]], object]]]:
    """Everything :mod:`.orchestrate` checks before it starts: LAUNCHER, each part's folders (sweep and docs)
    and every block's configs (:func:`check_blocks`).

    Returns:
        per part, per block of its first decision: (its jobs, the first job's composed config), the input of
        :func:`bnexp.designs.stages.plan_from_configs`.

    Raises:
        UserError: the first problem, named.
    """
    options = launchers()
    if env.launcher not in options:
        raise UserError(f"LAUNCHER={env.launcher}: no such Hydra launcher; use one of {', '.join(options)}")
    for p in parts:
        check_writable(p.sweep_dir, "the sweep folder")
        if p.docs_dir:
            check_writable(Path(p.docs_dir), "the docs folder")
    return [check_blocks(p.blocks + p.validate)[:len(p.blocks)] for p in parts]


def complete_jobs(sweep_dir: Path, block: Block, jobs: list[list[str]]) -> list[list[str]]:
    """The jobs of ``block`` whose run folder in ``sweep_dir`` holds a complete run (finished or diverged:
    bnexp skips it). A run folder is named as the multirun names it: by the block's own ``hydra.sweep.subdir``
    pattern, which Hydra resolves against each job's composed config (:func:`_resolved_subdir`), else by the keys
    the block sweeps (:func:`bnexp.runfolders.runnames.swept_name`, Hydra's override_dirname of those keys)."""
    from hydra import initialize_config_dir

    from bnexp.config.schema import CONF_DIR, quote_bn_overrides
    from bnexp.runfolders.rundir import is_complete
    from bnexp.runfolders.runnames import swept_keys, swept_name

    keys = swept_keys(quote_bn_overrides([o for o in block.args if not o.startswith("hydra")]))
    subdir = [o for o in block.args if o.startswith("hydra.sweep.subdir=")][-1:]
    if not subdir:  # Hydra's override_dirname of the swept keys, as the sweep names it
        return [j for j in jobs if is_complete(Path(sweep_dir) / (swept_name(
            [o for o in j if not o.startswith("hydra")], keys) or "default"))]
    out = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for job in jobs:
            name = _resolved_subdir(quote_bn_overrides([o for o in job if not o.startswith("hydra.sweep.")] + subdir))
            out += [job] if name is not None and is_complete(Path(sweep_dir) / name) else []
    return out


def _resolved_subdir(job: list[str]) -> str | None:
    """``hydra.sweep.subdir`` of one job (its overrides, the block's subdir pattern among them) as Hydra
    resolves it when the job runs: the job's config composed with Hydra's own node (inside an initialized
    config dir), its ``${key}`` and ``${hydra:runtime.choices.group}`` interpolations resolved; None when Hydra
    cannot compose or resolve it (the job then counts as not complete)."""
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig

    try:
        cfg = compose("config", overrides=job, return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        try:
            return str(cfg.hydra.sweep.subdir)
        finally:
            HydraConfig.instance().cfg = None
    except Exception:  # Hydra's and OmegaConf's errors: a job it cannot name is not known to be complete
        return None
