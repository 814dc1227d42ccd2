"""One source of truth for the run numbers in the docs (issue 20, item 6): marker blocks that
``bnexp report --update-docs`` writes from a sweep's report.json, and ``tests/test_docs_numbers.py``
checks against it.

**Marker syntax.** A run-derived table or sentence in README.md or docs/**/*.md sits between two
marker comments, each on a line of its own::

    <!-- bnexp:numbers source=docs/cifar/report.json view=cifar_headline -->

    (generated text: never edit it by hand)

    <!-- /bnexp:numbers -->

``source`` is a report.json path relative to the repository root (the nearest folder at or above
the markdown file that holds ``pyproject.toml`` or ``.git``); ``view`` names a renderer of
:data:`VIEWS`. The generated text sits between one blank line after the opening marker and one
before the closing marker (so that a table or paragraph never runs into the comments). Markers
inside fenced code blocks are text, not blocks.

**Pending sources.** While a block's source does not exist yet (a sweep still running), the block
holds exactly :func:`pending_text` -- one sentence saying that the file does not exist yet and which
command fills the block -- so the page says so. ``--update-docs`` writes that sentence into an
empty block, and leaves it in place (reporting it as pending) while the source is absent. Once the
file exists the block must match the view's text. A missing source with any other text in the block
(numbers that nothing can check) is an error, as are an unknown view, a malformed marker and a
report.json that lacks what the view needs: one ``bnexp report: error:`` line naming the markdown
file and the marker's line, exit code 2, nothing written.

**Adding a view** (about 10 lines): write a function of report.json's dict that returns markdown
text and register it with :func:`view`::

    @view("mnist_best_rate")
    def mnist_best_rate(report: dict) -> str:
        \"\"\"What it shows, and which report.json keys it reads.\"\"\"
        br = need(report, "best_rate")              # a missing key -> a clear error naming it
        return "\\n".join(md_table(["target", "speedup"], [[k, v] for k, v in br["speedups"].items()]))

then put a marker with ``view=mnist_best_rate`` in the page, run ``bnexp report --update-docs`` and
add a unit test of the view on a synthetic report.json to tests/test_docs_numbers.py.

Entry points: :func:`update_docs` (the ``--update-docs`` command), :func:`check_docs` (the test),
:func:`parse_blocks`, :func:`rewrite`, :func:`markdown_files`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bnexp.report.claims import claims_md
from bnexp.report.fmt import md_table
from bnexp.report.load import ReportError

OPEN = re.compile(r"^\s{0,3}<!--\s*bnexp:numbers\b(?P<attrs>.*?)-->\s*$")
CLOSE = re.compile(r"^\s{0,3}<!--\s*/bnexp:numbers\s*-->\s*$")
FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
ATTRS = ("source", "view")
UPDATE_HINT = "bnexp report --update-docs"


class DocsError(ReportError):
    """A marker block that cannot be written or checked: its message names the markdown file and line."""


class ViewDataError(ValueError):
    """report.json lacks what a view needs (raised by :func:`need`)."""


@dataclass(frozen=True)
class Block:
    """One marker block of a markdown file.

    Attributes:
        path: the markdown file.
        line: 1-based line number of the opening marker.
        source: the report.json path as written (relative to the repository root).
        view: the renderer's name in :data:`VIEWS`.
        start, end: 0-based indices of the first line after the opening marker and of the closing marker
            line, in ``text.split("\\n")``.
        body: the lines between the markers, joined with "\\n".
    """

    path: Path
    line: int
    source: str
    view: str
    start: int
    end: int
    body: str


# ----------------------------------------------------------------------------- views

VIEWS: dict[str, Callable[[dict], str]] = {}


def view(name: str):
    """Register a renderer ``function(report_json_dict) -> markdown text`` under ``name`` in :data:`VIEWS`.

    Raises:
        ValueError: ``name`` is already registered.
    """
    def register(fn: Callable[[dict], str]) -> Callable[[dict], str]:
        if name in VIEWS:
            raise ValueError(f"the docs view {name!r} is registered twice")
        VIEWS[name] = fn
        return fn

    return register


def need(d: dict, *keys: str):
    """``d[k1][k2]...``, or :class:`ViewDataError` naming the dotted key that report.json lacks."""
    cur = d
    for i, k in enumerate(keys):
        if not isinstance(cur, dict) or cur.get(k) is None:
            raise ViewDataError(f"report.json has no {'.'.join(keys[:i + 1])}")
        cur = cur[k]
    return cur


NAMES = {"bn_x5": "BN-x5", "bn_baseline": "BN-Baseline", "bn_x30": "BN-x30", "bn_x5_sigmoid": "BN-x5-Sigmoid",
         "baseline_sigmoid": "Baseline-Sigmoid", "baseline_x5": "Baseline-x5", "baseline": "Baseline"}
PASS_WORDS = {True: "PASS", False: "FAIL", None: "UNDECIDED"}


def _pct(v) -> str:
    """A fraction as a percentage with 2 decimals (0.61234 -> "61.23"); "-" for None/NaN."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}"


def _details(report: dict, preset: str) -> dict:
    """frontier_analysis.speedup[preset] ({} when report.json has no frontier_analysis)."""
    return ((report.get("frontier_analysis") or {}).get("speedup") or {}).get(preset) or {}


def _headline_bound(report: dict, preset: str) -> str | None:
    """The headline S(a*)'s bound ("exact", "lower", "upper", "unknown") from frontier_analysis, if present."""
    return (_details(report, preset).get("headline") or {}).get("bound")


def _seed_bounds(report: dict, preset: str) -> dict[str, str]:
    """{seed: "lower" | "upper" | "unknown"} for the per-seed S that are bounds (frontier_analysis's per_seed)."""
    return {str(d.get("seed")): d["bound"] for d in _details(report, preset).get("per_seed") or []
            if d.get("bound") in BOUND_PREFIX}


BOUND_PREFIX = {"lower": ">= ", "upper": "<= ", "unknown": "~"}


def speedup_text(m: dict, bound: str | None = None) -> str:
    """S(a*) of a ``matched_accuracy`` entry: "6.10x", ">= 8.00x" (``speedup_is_lower_bound``), "<= 2.00x"
    (``bound`` "upper": the baseline reached a* at its smallest budget), or "not reached"."""
    s = m.get("speedup")
    if s is None:
        return "not reached"
    pre = ">= " if m.get("speedup_is_lower_bound") else BOUND_PREFIX.get(bound or "", "")
    return f"{pre}{s:.2f}x"


def per_seed_text(m: dict, bounds: dict[str, str] | None = None) -> str:
    """``speedup_per_seed`` as "per seed 3.50x-4.50x", "seed 0: 4.00x" (one seed), with "; not reached in
    seed 1" for seeds without a value and "; seed 1: >= 4.50x" for each value that is a bound (``bounds``:
    :func:`_seed_bounds`); "" without per-seed values."""
    per = {str(k): v for k, v in (m.get("speedup_per_seed") or {}).items()}
    bounds = bounds or {}
    vals = [v for v in per.values() if v is not None]
    missing = sorted((k for k, v in per.items() if v is None), key=lambda k: (len(k), k))
    if len(vals) >= 2:
        text = f"per seed {min(vals):.2f}x-{max(vals):.2f}x"
    elif len(vals) == 1:
        text = next(f"seed {k}: {BOUND_PREFIX.get(bounds.get(k), '')}{v:.2f}x" for k, v in per.items() if v is not None)
        bounds = {}
    else:
        text = ""
    for k in sorted(bounds, key=lambda k: (len(k), k)):
        if per.get(k) is not None:
            text += f"; seed {k}: {BOUND_PREFIX[bounds[k]]}{per[k]:.2f}x"
    if missing:
        text += ("; " if text else "") + f"not reached in seed {', '.join(missing)}"
    return text


def _each_seed(m: dict, bounds: dict[str, str]) -> str:
    """``speedup_per_seed`` seed by seed: "seed 0: 3.50x, seed 1: >= 8.00x, seed 2: not reached" ("-" without
    values; ``bounds`` as in :func:`per_seed_text`)."""
    per = sorted((m.get("speedup_per_seed") or {}).items(), key=lambda kv: (len(str(kv[0])), str(kv[0])))
    return ", ".join(f"seed {k}: " + ("not reached" if v is None else f"{BOUND_PREFIX.get(bounds.get(str(k)), '')}"
                                      f"{v:.2f}x") for k, v in per) or "-"


def _seeds(report: dict) -> int | None:
    rows = report.get("frontier") or []
    return len({r.get("seed") for r in rows}) or None


def _converged_sentence(converged) -> str:
    if converged is None:
        return "whether the baseline converged is unknown (it ran at one budget)"
    if converged:
        return "the baseline **converged** (its last budget doubling gained < 0.5 points)"
    return ("the baseline had **not converged** (its last budget doubling gained >= 0.5 points), so S(a\\*) is "
            "measured at its best accuracy so far")


@view("cifar_headline")
def cifar_headline(report: dict) -> str:
    """The README's CIFAR-10 Sec. 4.2 result paragraph, from ``matched_accuracy`` (bn_x5 and bn_baseline):
    a* in %, whether the baseline converged, S(a*) (">= x" for a lower bound) with its per-seed range, and
    the pass rule S(a*) >= 5 for bn_x5 (PASS / FAIL / UNDECIDED from bn_x5's ``pass``)."""
    ma = need(report, "matched_accuracy")
    x5 = need(report, "matched_accuracy", "bn_x5")
    n = _seeds(report)
    out = [f"**Result** (seed-mean frontiers{f' over {n} seeds' if n else ''}): the target a\\* is the "
           f"baseline's best seed-mean final test accuracy, **{_pct(x5['target_accuracy'])}%**; "
           f"{_converged_sentence(x5.get('baseline_converged'))}."]
    for p in ("bn_x5", "bn_baseline"):
        m = ma.get(p)
        if m is None:
            continue
        per = per_seed_text(m, _seed_bounds(report, p))
        s = f"{NAMES[p]}: S(a\\*) = **{speedup_text(m, _headline_bound(report, p))}**" + (f" ({per})" if per else "")
        if p == "bn_x5":
            s += f", pass rule S(a\\*) >= 5: **{PASS_WORDS[m.get('pass')]}**"
        out.append(s + ".")
    return " ".join(out)


@view("cifar_matched")
def cifar_matched(report: dict) -> str:
    """The matched-accuracy table for docs/cifar/README.md: one row per preset of ``matched_accuracy``
    (S(a*), per seed, the claim its ``pass`` decides, pass yes/no/undecided), after a sentence giving a* and
    whether the baseline converged."""
    ma = need(report, "matched_accuracy")
    if not ma:
        raise ViewDataError("report.json's matched_accuracy is empty")
    first = next(iter(ma.values()))
    rows = [[NAMES.get(p, p), speedup_text(m, _headline_bound(report, p)), _each_seed(m, _seed_bounds(report, p)),
             _details(report, p).get("claim") or "-", {True: "yes", False: "no", None: "undecided"}[m.get("pass")]]
            for p, m in ma.items()]
    head = (f"Target a\\* = **{_pct(first['target_accuracy'])}%**, the baseline's best seed-mean final test "
            f"accuracy; {_converged_sentence(first.get('baseline_converged'))}.")
    return "\n".join([head, "", *md_table(["preset", "S(a*)", "per seed (at each seed's a*_s)", "claim", "pass"],
                                          rows)])


def _mean(rows: list[dict], key: str) -> float | None:
    """Mean of ``key`` over ``rows`` where it is a number (None/NaN left out); None when there is none."""
    v = [r[key] for r in rows if r.get(key) is not None and not math.isnan(r[key])]
    return sum(v) / len(v) if v else None


@view("cifar_frontier")
def cifar_frontier(report: dict) -> str:
    """The frontier table for docs/cifar/README.md: one row per (preset, budget) of ``frontier``, in the
    presets' usual order then by budget: seed-mean and per-seed final test accuracy, seed-mean final train
    accuracy (%, 2 decimals; "-" where a seed has no run)."""
    from bnexp.report.frontier import ORDER

    rows = need(report, "frontier")
    seeds = sorted({int(r["seed"]) for r in rows})
    rank = {p: i for i, p in enumerate(ORDER)}
    keys = sorted({(r["preset"], int(r["budget_steps"])) for r in rows}, key=lambda k: (rank.get(k[0], 99), k))
    out = []
    for p, b in keys:
        sel = [r for r in rows if r["preset"] == p and int(r["budget_steps"]) == b]
        by_seed = {int(r["seed"]): r["final_test_accuracy"] for r in sel}

        out.append([NAMES.get(p, p), f"{b:,}", _pct(_mean(sel, "final_test_accuracy")),
                    *(_pct(by_seed.get(s)) for s in seeds), _pct(_mean(sel, "final_train_accuracy"))])
    return "\n".join(md_table(["preset", "budget (steps)", "test acc, seed mean (%)",
                               *(f"seed {s} (%)" for s in seeds), "train acc, seed mean (%)"], out))


@view("claims")
def claims(report: dict) -> str:
    """The claims table (:func:`bnexp.report.claims.claims_md`) of report.json's ``claims`` rows (rows of
    :func:`bnexp.report.claims.evaluate`), or of ``ics.claims`` when there is no top-level list."""
    rows = report.get("claims")
    if rows is None:
        rows = (report.get("ics") or {}).get("claims")
    if rows is None:
        raise ViewDataError("report.json has no claims (neither claims nor ics.claims)")
    if not rows:
        raise ViewDataError("report.json's claims list is empty")
    return "\n".join(claims_md(rows)).strip("\n")


# ----------------------------------------------------------------------------- blocks


def pending_text(source: str) -> str:
    """The one sentence a block holds while its ``source`` does not exist yet."""
    return (f"_Pending: `{source}` does not exist yet (its sweep has not run to the end); "
            f"`{UPDATE_HINT}` writes this block from it once it does._")


def _rel(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def parse_blocks(text: str, path: Path, root: Path | None = None) -> list[Block]:
    """The marker blocks of a markdown text, in order.

    Raises:
        DocsError: naming ``path`` (relative to ``root``) and the line: a closing marker without an opening
            one, an opening marker inside a block or never closed, a marker without ``source`` or ``view``,
            with another attribute or an attribute given twice.
    """
    where = _rel(path, root) if root else str(path)
    lines = text.split("\n")
    blocks, fence, open_ = [], None, None
    for i, line in enumerate(lines):
        f = FENCE.match(line)
        if f and open_ is None:
            mark = f.group(1)
            if fence is None:
                fence = mark
                continue
            if mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark):].strip():
                fence = None
                continue
        if fence is not None:
            continue
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
        DocsError: naming the file and the marker's line: an unknown view; a ``source`` that is absolute,
            does not end in .json, does not exist while the block holds other text than the pending
            sentence (or nothing), is not readable JSON, or lacks what the view needs.
    """
    where = f"{_rel(block.path, root)}:{block.line}"
    if block.view not in VIEWS:
        raise DocsError(f"{where}: unknown view {block.view!r} in the bnexp:numbers marker; the views are "
                        f"{', '.join(sorted(VIEWS))} (bnexp/report/docs_numbers.py).")
    if Path(block.source).is_absolute() or not block.source.endswith(".json"):
        raise DocsError(f"{where}: source={block.source} must be a report.json path relative to the repository "
                        f"root ({root}), e.g. source=docs/cifar/report.json.")
    src = root / block.source
    if not src.is_file():
        pending = _wrap(pending_text(block.source))
        if block.body.strip() in ("", pending.strip()):
            return pending, True
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
    return _wrap(text), False


def _wrap(text: str) -> str:
    """A view's text as a block body: one blank line before and after it."""
    return "\n" + text.strip("\n") + "\n"


def rewrite(text: str, path: Path, root: Path) -> tuple[str, list[tuple[Block, bool, bool]]]:
    """``text`` with every block's body replaced by :func:`expected_body`; everything outside the blocks is
    kept byte for byte.

    Returns:
        (new text, [(block, changed, pending)]).

    Raises:
        DocsError: see :func:`parse_blocks` and :func:`expected_body`.
    """
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


def check_docs(root: Path, files: list[Path] | None = None) -> list[str]:
    """Every block of ``files`` (default :func:`markdown_files`) whose committed text differs from what its
    source gives, as "FILE:LINE view NAME: ..." lines ([] when all match). A pending block passes only while
    its source is absent. Raises DocsError for a block that cannot be rendered at all."""
    problems = []
    for f in files if files is not None else markdown_files(root):
        _, result = rewrite(f.read_text(), f, root)
        for b, changed, pending in result:
            if changed:
                state = "pending text expected (source absent)" if pending else f"differs from {b.source}"
                problems.append(f"{_rel(f, root)}:{b.line} view {b.view}: the committed text {state}; "
                                f"run `{UPDATE_HINT} {_rel(f, root)}`")
    return problems


def update_docs(files: list[str | Path] | None = None, cwd: Path | None = None, echo=print) -> list[Path]:
    """``bnexp report --update-docs [FILE ...]``: rewrite every marker block of ``files`` (default: README.md
    and docs/**/*.md of the repository around ``cwd``) from its source; the files change together or not at
    all (:func:`bnexp.rundir.replace_files`). Idempotent: a second call changes nothing.

    Returns:
        The files that changed.

    Raises:
        DocsError (a :class:`~bnexp.report.load.ReportError`, exit code 2): a FILE that does not exist, no
            markdown file found, any block error (nothing is written then), or an unwritable file.
    """
    from bnexp.rundir import replace_files

    cwd = Path(cwd or Path.cwd())
    if files:
        paths = [cwd / f for f in files]
        for p in paths:
            if not p.is_file():
                raise DocsError(f"{p}: no such markdown file.")
    else:
        root = repo_root(cwd)
        paths = markdown_files(root)
        if not paths:
            raise DocsError(f"no README.md or docs/**/*.md under {root}; run it in the repository or name the files.")
    new = {}
    for p in paths:
        root = repo_root(p.parent)
        text = p.read_text()
        out, result = rewrite(text, p, root)
        for b, _, pending in result:
            if pending:
                echo(f"{_rel(p, root)}:{b.line} view {b.view}: pending ({b.source} does not exist yet)")
        if out != text:
            new[p] = out.encode()
        if result:
            n = len(result)
            echo(f"{_rel(p, root)}: {'updated' if out != text else 'up to date'} ({n} block{'s' * (n != 1)})")
    try:
        replace_files(new)
    except OSError as exc:
        raise DocsError(f"cannot write {', '.join(map(str, new))} ({exc.strerror or exc}); every file is "
                        "unchanged.") from None
    return list(new)


def update_docs_command(files: list[str], sweep_dir: str | None, targets: list[str] | None) -> int:
    """The ``--update-docs`` branch of ``bnexp report``: :func:`update_docs` on ``files``, exit code 0.

    A markdown file given before the option lands in ``sweep_dir`` (``bnexp report README.md --update-docs``)
    and is taken as a FILE.

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
