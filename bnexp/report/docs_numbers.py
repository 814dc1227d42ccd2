"""One source of truth for the run numbers in the docs: marker blocks in README.md and docs/**/*.md that
``bnexp report --update-docs`` writes from a sweep's report.json and ``tests/test_docs_numbers.py`` checks.

**Marker syntax.** A run-derived table or sentence sits between two marker comments, each on a line of its own::

    <!-- bnexp:numbers source=docs/cifar/report.json view=cifar_headline -->

    (generated text: never edit it by hand)

    <!-- /bnexp:numbers -->

``source`` is a report.json path relative to the repository root (:func:`repo_root`); ``view`` names a renderer
of :data:`VIEWS`. The generated text sits between one blank line after the opening marker and one before the
closing marker. Markers inside fenced code blocks are text, not blocks. A comment line that looks like a marker
but is not one (``<!-- bnexp:number ...``, ``<!-- bnexp numbers ...``, ``<!-- BNEXP:numbers ...``) is an error, so
that a misspelt marker never leaves a block silently unwritten; a page named on the command line that holds no block
gets a note saying so. Pages are read and written as UTF-8: a page that is not UTF-8 is an error naming it.

**Pending sources.** While a block's source does not exist yet (a sweep still running), the block holds exactly
:func:`pending_text`; ``--update-docs`` writes it into an empty block and leaves it (reporting it as pending)
while the source is absent. Once the file exists the block must match the view's text. A missing source with
any other text in the block, an unknown view, a malformed marker and a report.json that lacks what the view
needs are errors: one ``bnexp report: error:`` line naming the markdown file and the marker's line, exit code 2,
nothing written.

**Adding a view** (in :mod:`bnexp.report.docs_views`): a function of report.json's dict that returns markdown
text, registered with ``@view("my_view")``, reading keys through ``need(report, "key", ...)`` (a missing key is
an error naming it); then a marker with ``view=my_view`` in the page, ``bnexp report --update-docs``, and a unit
test of the view on a synthetic report.json in tests/test_docs_numbers.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from bnexp.report.docs_views import VIEWS, ViewDataError
from bnexp.report.fmt import macro
from bnexp.analysis.runs import ReportError

OPEN = re.compile(r"^\s{0,3}<!--\s*bnexp:numbers\b(?P<attrs>.*?)-->\s*$")
CLOSE = re.compile(r"^\s{0,3}<!--\s*/bnexp:numbers\s*-->\s*$")
NEAR = re.compile(r"^\s{0,3}<!--\s*/?\s*bnexp\b", re.IGNORECASE)  # a comment meant as a marker
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
ATTRS = ("source", "view")
UPDATE_HINT = "bnexp report --update-docs"


class DocsError(ReportError):
    """A marker block that cannot be written or checked: its message names the markdown file and line."""


@dataclass(frozen=True)
class Block:
    """One marker block of the markdown file ``path``: ``line`` (1-based) of its opening marker, its ``source``
    and ``view`` as written, ``start`` and ``end`` (0-based indices in ``text.split("\\n")`` of the first line
    after the opening marker and of the closing marker) and ``body``, the lines between, joined with "\\n"."""

    path: Path
    line: int
    source: str
    view: str
    start: int
    end: int
    body: str


def pending_text(source: str) -> str:
    """The one sentence a block holds while its ``source`` does not exist yet (templates/docs_numbers.md.j2's
    ``pending``)."""
    return macro("pending", source, UPDATE_HINT, template="docs_numbers.md.j2")


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def parse_blocks(text: str, path: Path, root: Path | None = None) -> list[Block]:
    """The marker blocks of a markdown text, in order.

    Raises:
        DocsError: naming ``path`` (relative to ``root``) and the line: a comment line that looks like a marker
            but is not one (:data:`NEAR`: a misspelt marker), a closing marker without an opening one, an
            opening marker inside a block or never closed, a marker without ``source`` or ``view``,
            with another attribute or an attribute given twice.
    """
    where = _rel(path, root) if root else str(path)
    lines = text.split("\n")
    blocks, fence, open_ = [], None, None
    for i, line in enumerate(lines):
        if (f := FENCE.match(line)) and open_ is None:
            mark = f.group(1)
            if fence is None or (mark[0] == fence[0] and len(mark) >= len(fence)
                                 and not line.strip()[len(mark):].strip()):  # a fence opens, or the open one closes
                fence = mark if fence is None else None
                continue
        if fence is not None:
            continue
        if NEAR.match(line) and not OPEN.match(line) and not CLOSE.match(line):
            raise DocsError(f"{where}:{i + 1}: {line.strip()[:60]!r} is not a bnexp:numbers marker (misspelt?); "
                            "a block opens with <!-- bnexp:numbers source=PATH/report.json view=NAME --> and "
                            "closes with <!-- /bnexp:numbers -->.")
        if m := OPEN.match(line):
            if open_ is not None:
                raise DocsError(f"{where}:{i + 1}: a bnexp:numbers marker inside the block opened at line "
                                f"{open_[0] + 1}; close that block first (<!-- /bnexp:numbers -->).")
            open_ = (i, _attrs(m.group("attrs"), where, i + 1))
        elif CLOSE.match(line):
            if open_ is None:
                raise DocsError(f"{where}:{i + 1}: <!-- /bnexp:numbers --> without an opening "
                                f"<!-- bnexp:numbers source=... view=... --> before it.")
            j, attrs = open_
            blocks.append(Block(Path(path), j + 1, attrs["source"], attrs["view"], j + 1, i, "\n".join(lines[j + 1:i])))
            open_ = None
    if open_ is not None:
        raise DocsError(f"{where}:{open_[0] + 1}: this bnexp:numbers block is never closed; end it with a line "
                        "<!-- /bnexp:numbers -->.")
    return blocks


def _attrs(text: str, where: str, line: int) -> dict[str, str]:
    out = {}
    for item in text.split():
        key, eq, value = item.partition("=")
        if not eq or key not in ATTRS or not value:
            raise DocsError(f"{where}:{line}: cannot read {item!r} in the bnexp:numbers marker; it takes "
                            "source=PATH/report.json view=NAME, e.g. <!-- bnexp:numbers "
                            "source=docs/cifar/report.json view=cifar_headline -->.")
        if key in out:
            raise DocsError(f"{where}:{line}: {key} is given twice in the bnexp:numbers marker.")
        out[key] = value
    missing = [k for k in ATTRS if k not in out]
    if missing:
        raise DocsError(f"{where}:{line}: the bnexp:numbers marker lacks {' and '.join(missing)}; write "
                        "<!-- bnexp:numbers source=PATH/report.json view=NAME -->.")
    return out


def repo_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` that holds ``pyproject.toml`` or ``.git``; ``start`` itself
    (resolved) when there is none."""
    start = Path(start).resolve()
    for d in (start, *start.parents):
        if (d / "pyproject.toml").exists() or (d / ".git").exists():
            return d
    return start


def expected_body(block: Block, root: Path) -> tuple[str, bool]:
    """The text ``block`` should hold (the lines between its markers) and whether it is pending.

    Raises:
        DocsError: naming the file and the marker's line: an unknown view; a ``source`` that is absolute, does
            not end in .json, does not exist while the block holds other text than the pending sentence (or
            nothing), is not readable JSON, or lacks what the view needs.
    """
    where = f"{_rel(block.path, root)}:{block.line}"
    if block.view not in VIEWS:
        raise DocsError(f"{where}: unknown view {block.view!r} in the bnexp:numbers marker; the views are "
                        f"{', '.join(sorted(VIEWS))} (bnexp/report/docs_views.py).")
    if Path(block.source).is_absolute() or not block.source.endswith(".json"):
        raise DocsError(f"{where}: source={block.source} must be a report.json path relative to the repository "
                        f"root ({root}), e.g. source=docs/cifar/report.json.")
    src = root / block.source
    if not src.is_file():
        pending = pending_text(block.source)
        if block.body.strip() in ("", pending):
            return f"\n{pending}\n", True
        raise DocsError(f"{where}: the source {block.source} of this bnexp:numbers block (view {block.view}) does "
                        f"not exist, and the block holds text that nothing can check. Put the sweep's report.json "
                        f"there (its script copies it into docs/), or empty the block to mark it pending.")
    try:
        data = json.loads(src.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocsError(f"{where}: cannot read {block.source} as JSON ({exc}).") from None
    try:
        text = VIEWS[block.view](data)
    except ViewDataError as exc:
        raise DocsError(f"{where}: view {block.view} cannot render {block.source}: {exc}.") from None
    return "\n" + text.strip("\n") + "\n", False  # one blank line before and after the text


def rewrite(text: str, path: Path, root: Path) -> tuple[str, list[tuple[Block, bool, bool]]]:
    """(``text`` with every block's body replaced by :func:`expected_body`, everything outside the blocks kept
    byte for byte; [(block, changed, pending)]). Raises DocsError (:func:`parse_blocks`, :func:`expected_body`)."""
    lines = text.split("\n")
    result = []
    for b in reversed(parse_blocks(text, path, root)):
        body, pending = expected_body(b, root)
        lines[b.start:b.end] = body.split("\n")
        result.append((b, body != b.body, pending))
    return "\n".join(lines), result[::-1]


def markdown_files(root: Path) -> list[Path]:
    """README.md and docs/**/*.md of ``root`` that exist, in a stable order."""
    files = [root / "README.md"] + sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def read_page(path: Path, root: Path | None = None) -> str:
    """The text of the markdown page ``path``, read as UTF-8 (what the docs are written in, whatever the locale).

    Raises:
        DocsError: naming the page (relative to ``root``): it cannot be read (permissions, a folder), or it is
            not UTF-8 (the encoding it looks like, where a byte-order mark tells, and the first byte that is not
            UTF-8 with its offset).
    """
    where = _rel(path, root) if root else str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DocsError(f"{where}: cannot read this markdown file ({exc.strerror or exc}).") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        looks = ("UTF-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else
                 "UTF-32" if data[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff") else
                 "another encoding (Latin-1 or Windows-1252, perhaps)")
        raise DocsError(f"{where}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}; it looks like "
                        f"{looks}); the docs' markdown is UTF-8: convert the file (e.g. iconv -t UTF-8) and run "
                        f"`{UPDATE_HINT}` again. Nothing was written.") from None


def check_docs(root: Path, files: list[Path] | None = None) -> list[str]:
    """Every block of ``files`` (default :func:`markdown_files`) whose committed text differs from what its
    source gives, as "FILE:LINE view NAME: ..." lines ([] when all match). A pending block passes only while
    its source is absent. Raises DocsError for a block that cannot be rendered at all."""
    problems = []
    for f in files if files is not None else markdown_files(root):
        _, result = rewrite(read_page(f, root), f, root)
        problems += [f"{_rel(f, root)}:{b.line} view {b.view}: the committed text "
                     + ("pending text expected (source absent)" if pending else f"differs from {b.source}")
                     + f"; run `{UPDATE_HINT} {_rel(f, root)}`" for b, changed, pending in result if changed]
    return problems


def update_docs(files: list[str | Path] | None = None, cwd: Path | None = None, echo=print) -> list[Path]:
    """``bnexp report --update-docs [FILE ...]``: rewrite every marker block of ``files`` (default: README.md
    and docs/**/*.md of the repository around ``cwd``) from its source; the files change together or not at
    all (:func:`bnexp.runfolders.rundir.replace_files`). Idempotent: a second call changes nothing.

    Returns:
        The files that changed.

    A FILE without any block, and a default run that finds no block at all, get a note (``echo``).

    Raises:
        DocsError (a :class:`~bnexp.analysis.runs.ReportError`, exit code 2): a FILE that does not exist, no
            markdown file found, a file that cannot be read or is not UTF-8 (:func:`read_page`), any block error
            (a misspelt marker included: :func:`parse_blocks`; nothing is written then), or an unwritable file.
    """
    from bnexp.runfolders.rundir import replace_files

    cwd = Path(cwd or Path.cwd())
    if files:
        paths = [cwd / f for f in files]
        if missing := next((p for p in paths if not p.is_file()), None):
            raise DocsError(f"{missing}: no such markdown file.")
    else:
        root = repo_root(cwd)
        paths = markdown_files(root)
        if not paths:
            raise DocsError(f"no README.md or docs/**/*.md under {root}; run it in the repository or name the files.")
    new, blocks = {}, 0
    for p in paths:
        root = repo_root(p.parent)
        text = read_page(p, root)
        out, result = rewrite(text, p, root)
        blocks += len(result)
        if files and not result:  # a page named on the command line: say why nothing changes in it
            echo(f"{_rel(p, root)}: no bnexp:numbers block (nothing to write; a block opens with "
                 "<!-- bnexp:numbers source=PATH/report.json view=NAME -->)")
        for b, _, pending in result:
            if pending:
                echo(f"{_rel(p, root)}:{b.line} view {b.view}: pending ({b.source} does not exist yet)")
        if out != text:
            new[p] = out.encode()
        if result:
            n = len(result)
            echo(f"{_rel(p, root)}: {'updated' if out != text else 'up to date'} ({n} block{'s' * (n != 1)})")
    if not files and not blocks:
        echo(f"no bnexp:numbers block in README.md or docs/**/*.md under {repo_root(cwd)}")
    try:
        replace_files(new)
    except OSError as exc:
        raise DocsError(f"cannot write {', '.join(map(str, new))} ({exc.strerror or exc}); every file is "
                        "unchanged.") from None
    return list(new)


def update_docs_command(files: list[str], sweep_dir: str | None, targets: list[str] | None) -> int:
    """The ``--update-docs`` branch of ``bnexp report``: :func:`update_docs` on ``files``, exit code 0. A markdown
    file given before the option lands in ``sweep_dir`` (``bnexp report README.md --update-docs``): a FILE.

    Raises:
        DocsError: ``--targets`` or a SWEEP_DIR given with ``--update-docs``; see :func:`update_docs`.
    """
    if targets:
        raise DocsError("--update-docs takes no --targets: the numbers come from the report.json files the "
                        "blocks name.")
    if sweep_dir is not None:
        if not sweep_dir.endswith(".md"):
            raise DocsError(f"--update-docs takes markdown files, not a sweep folder ({sweep_dir}): run "
                            f"`bnexp report {sweep_dir}` first, copy its report.json where the blocks' source= says, "
                            "then `bnexp report --update-docs [FILE ...]`.")
        files = [sweep_dir, *files]
    changed = update_docs(files)
    print(f"{len(changed)} file{'s' * (len(changed) != 1)} rewritten" + (": " + ", ".join(map(str, changed))
                                                                         if changed else ""))
    return 0
