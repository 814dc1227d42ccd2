"""Paths a user names (a run or sweep folder, a data root) that lead nowhere: a symlink loop or a
dangling symlink in the path itself or in a folder above it, found before anything follows the path
(``pathlib.Path.resolve`` raises ``RuntimeError: Symlink loop`` on Python 3.11, ``mkdir`` a
``FileExistsError`` on a dangling link) so that the user gets one line naming the link instead.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def broken_link(path: Path) -> tuple[Path, str] | None:
    """The first component of ``path`` (from the root down; ``path`` made absolute without following
    links) that is a symlink leading nowhere, with what is wrong with it; None when there is none.

    Returns:
        (the link, "a symlink loop" or "a dangling symlink (to TARGET)"), or None. A component that
        simply does not exist yet (a folder still to be made) is no problem.
    """
    p = Path(os.path.abspath(os.path.expanduser(str(path))))
    for part in [*reversed(p.parents), p]:
        if not os.path.islink(part):
            if not os.path.exists(part):
                return None  # the rest is still to be made
            continue
        try:
            os.stat(part)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return part, "a symlink loop"
            return part, f"a dangling symlink (to {os.readlink(part)})"
    return None


def link_problem_message(path: Path, what: str, fix: str) -> str | None:
    """One line for :func:`broken_link` of ``path`` (``what``: e.g. "the run folder"; ``fix``: the way
    out), or None when the path has no such link."""
    found = broken_link(path)
    if found is None:
        return None
    link, problem = found
    where = "" if Path(link) == Path(os.path.abspath(os.path.expanduser(str(path)))) else f" (in {path})"
    return f"{what} {link} is {problem}{where}: it leads nowhere. {fix}"


def check_output_location(args: list[str]) -> str | None:
    """Check, before Hydra creates it, that the run (or sweep) folder can be created.

    Looks at ``hydra.run.dir=``/``hydra.sweep.dir=`` overrides (default: ``outputs`` in the
    current folder): an empty value or a leading ``~`` (:func:`output_folder_override`), a symlink loop or
    dangling symlink in it (:mod:`bnexp.runfolders.paths`), a name too long, a file in the way, no write
    permission. Returns an error message, or None when the location is usable.
    """
    refused = output_folder_override(args)
    if refused:
        return refused
    multirun = "-m" in args or "--multirun" in args
    key = "hydra.sweep.dir=" if multirun else "hydra.run.dir="
    target = Path("outputs")
    for a in args:
        if a.startswith(key):
            target = Path(a[len(key):].strip("'\""))
    static = Path(str(target).split("${")[0] or ".")  # the part Hydra does not compute
    problem = link_problem_message(static, "the output folder" if static == target else "the output path",
                                   f"Remove or fix the link, or choose another place with {key}PATH.")
    if problem:
        return problem
    if "${" in str(target):
        return None
    p = target.resolve()
    too_long = [part for part in p.parts if len(part.encode()) > 255]
    if too_long or len(str(p).encode()) > 4095:
        why = (f"a folder name of {len(too_long[0].encode())} bytes; at most 255" if too_long
               else "the path exceeds 4095 bytes")
        return (f"cannot create the output folder {target}: the name is too long for the file system ({why}). "
                f"Choose a shorter one with {key}PATH.")
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir():
        return (f"cannot create the output folder {target}: {p} is a file, not a folder. Choose another "
                f"place with {key}PATH.")
    if not os.access(p, os.W_OK):
        return (f"cannot create the output folder {target}: {p} is not writable (permissions or a "
                f"read-only disk). Choose another place with {key}PATH.")
    return None


def output_folder_override(args: list[str]) -> str | None:
    """Refuse a ``hydra.run.dir=`` or ``hydra.sweep.dir=`` override that names no usable folder, in either mode
    (with or without ``-m``):

    * an empty value (also ``''``, ``""`` or only spaces), as an unset shell variable gives
      (``hydra.run.dir=$RUN``): Hydra would take the current folder as the run (or sweep) folder and write
      checkpoint.pt, summary.json and .hydra/ among the user's files;
    * a value starting with ``~`` (quoted, ``'hydra.run.dir="~/x"'``, or not): neither the shell (after ``=``)
      nor Hydra expands it, so the run would go into a folder literally named ``~`` in the current folder.

    Returns:
        One line naming the key and what to give it, or None when no such override has either problem.
    """
    for a in args:
        key, eq, value = a.lstrip("+").partition("=")
        if not eq or key not in ("hydra.run.dir", "hydra.sweep.dir"):
            continue
        folder = value.strip().strip("'\"").strip()
        if not folder:
            what, example = ("run", "outputs/my_run") if key == "hydra.run.dir" else ("sweep", "outputs/my_sweep")
            return (f"{key} is empty ({a!r}; an unset shell variable?): give it a folder, e.g. {key}={example}, "
                    f"or leave it out for the default under outputs/ (an empty one would put the {what}'s files "
                    "into the current folder).")
        if folder.startswith("~"):
            home = "$HOME" + folder[1:] if folder == "~" or folder.startswith("~/") else "the full path"
            return (f"{a!r}: ~ is not expanded in {key} (neither by the shell after = nor by Hydra: the files would go "
                    f"into a folder named ~ in the current folder); write {key}={home}.")
    return None
