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
