"""The run directory schema: every file of a run folder is written and read here, by the trainer
and by ``bnexp report`` alike.

Layout of a run directory (Hydra's output dir for the job)::

    .hydra/config.yaml      Hydra's composed config (HYDRA_CONFIG); .hydra/overrides.yaml (OVERRIDES)
    config.yaml             the resolved config bnexp writes (CONFIG; preset interpolations as values)
    train.log               the run's log
    events.out.tfevents.*   TensorBoard: scalars, histograms, margin charts, hparams, figure
    metrics.jsonl           one JSON record per test-set evaluation (METRICS)
    shift.jsonl             one JSON record per covariate-shift monitor step (SHIFT)
    ics.jsonl               one JSON record per gradient-ICS or landscape probe (ICS)
    summary.json            final/best test accuracy, steps-to-target, wall time, status (SUMMARY)
    percentiles.png         percentile bands of every layer's input to the nonlinearity
    checkpoint.pt           model, optimizer, sampler and record state (CHECKPOINT; metadata: ``step``,
                            ``config``, ``world_size``)

JSON files are written atomically (temporary file, fsync, rename), so a reader
never sees half a summary. All JSON is strict (RFC 8259): non-finite numbers are
written as ``null`` (the run's ``status`` says why, e.g. ``diverged``). Files get
the permissions of the umask (0644 under the usual 022), like any other new file.
A file-system error (permission, full disk, name too long) while writing an output
raises :class:`~bnexp.errors.OutputError`, a user error naming the path and the fix.

Reading is forgiving and never silent: a JSON-lines line that is not a JSON record is
skipped with a warning naming the file and the line, and the records after it are kept
(:func:`read_jsonl`); an unreadable summary or config reads as None.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import json
import logging
import math
import os
import signal
import tempfile
from pathlib import Path
from typing import Any, Collection

from bnexp.runfolders.runlock import RunLock  # noqa: F401  (the run-folder lock, re-exported)
from bnexp.runfolders.neutral_keys import IGNORED_FOR_RESUME

from bnexp.errors import OutputError

log = logging.getLogger("bnexp")

# The files of a run directory (names relative to it).
CONFIG = "config.yaml"
HYDRA_CONFIG = ".hydra/config.yaml"
OVERRIDES = ".hydra/overrides.yaml"
SUMMARY = "summary.json"
METRICS, SHIFT, ICS = "metrics.jsonl", "shift.jsonl", "ics.jsonl"
INFERENCE = "inference_stats.json"  # the test accuracies in each mode of normalization (bnexp.train.inference_eval)
CHECKPOINT = "checkpoint.pt"
# The timed probes: summary.json's ``probe_time_s`` has one entry (seconds) per kind, in this order.
PROBE_KINDS = ("eval", "monitor", "grad_ics", "landscape")

# Statuses after which a run is complete and a re-run of its sweep skips it.
COMPLETE_STATUSES = ("finished", "diverged")
ALL_STATUSES = ("running", "finished", "diverged", "failed", "interrupted")


def current_umask() -> int:
    """The process's file-mode creation mask (read from /proc, else by setting and restoring it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temporary file in the same folder, fsync, rename.

    The file gets mode 0666 minus the umask (as ``open`` would give it), not the 0600 of
    the temporary file.

    Raises:
        OSError: when the folder is not writable or the disk is full; ``path`` is then unchanged.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def json_safe(obj: Any) -> Any:
    """``obj`` as plain JSON data, recursively: every non-finite float (NaN, +-inf) becomes None
    (JSON has no NaN), numpy / torch scalars and arrays become Python numbers and lists, dict keys
    become text, and any other non-JSON value (a path, a date read from YAML, an enum) its text."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if callable(getattr(obj, "tolist", None)):  # numpy / torch scalars and arrays
        try:
            return json_safe(obj.tolist())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(obj)


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON text of ``obj``: non-finite numbers become null (``allow_nan=False``)."""
    return json.dumps(json_safe(obj), indent=indent, sort_keys=False, allow_nan=False)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented strict JSON, atomically.

    Raises:
        OutputError: the file could not be written (permission, full disk, long name).
    """
    write_text(path, dumps(obj, indent=2) + "\n")


def write_summary_even_on_a_full_disk(path: Path, summary: dict) -> None:
    """Write summary.json atomically; if that fails (a full disk has no room for the new copy),
    rewrite the existing file in place, whose blocks are already allocated, so that its status
    is never left at ``running``. Nothing is raised: the caller is already reporting an error."""
    try:
        write_json(path, summary)
        return
    except OutputError:
        pass
    try:
        with open(path, "r+b") as f:
            f.write(dumps(summary, indent=2).encode() + b"\n")
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        log.warning("could not record status failed in %s (%s)", path, exc.strerror or exc)


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically.

    Raises:
        OutputError: the file could not be written (permission, full disk, long name).
    """
    try:
        atomic_write_bytes(path, text.encode())
    except OSError as exc:
        raise OutputError(path, exc) from None


def append_jsonl(path: Path, record: dict) -> None:
    """Append one strict-JSON record as a line.

    Raises:
        OutputError: the line could not be written (full disk, permission).
    """
    try:
        with open(path, "a") as f:
            f.write(dumps(record) + "\n")
    except OSError as exc:
        raise OutputError(path, exc, resumable=(Path(path).parent / "checkpoint.pt").exists()) from None


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Replace a JSON-lines file by ``records``, atomically (used when a run resumes).

    Raises:
        OutputError: the file could not be written.
    """
    write_text(path, "".join(dumps(r) + "\n" for r in records))


def save_figure(fig, path: Path, dpi: int = 100, close: bool = False) -> bytes:
    """Save a matplotlib figure atomically (a reader never sees half an image); format from the suffix;
    ``close``: close the figure afterwards. Returns the file's bytes (e.g. the PNG, for TensorBoard: the
    figure is drawn once).

    Raises:
        OutputError: the file could not be written.
    """
    import io

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format=Path(path).suffix.lstrip(".") or "png")
    if close:
        import matplotlib.pyplot as plt

        plt.close(fig)
    try:
        atomic_write_bytes(path, buf.getvalue())
    except OSError as exc:
        raise OutputError(path, exc) from None
    return buf.getvalue()


def replace_files(files: dict[Path, bytes], remove: Collection[Path] = ()) -> None:
    """Write several files so that they change together: each is first written in full to a
    temporary file beside it (fsync), then all replace their targets (``os.replace``) and the files
    of the set that the new one lacks (``remove``, where they exist) are deleted, with SIGINT held back
    until the last one is done. A failure (full disk, permission) or a
    Ctrl-C while the temporary files are written removes them and leaves every target as it was.

    Raises:
        OSError: a temporary file could not be written (no target has changed).
        KeyboardInterrupt: Ctrl-C before the replacing started (no target has changed), or
            during it (every target has changed).
    """
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in files.items():
            fd, tmp = tempfile.mkstemp(dir=Path(path).parent, prefix=f".{Path(path).name}.", suffix=".tmp")
            staged.append((tmp, Path(path)))
            os.fchmod(fd, 0o666 & ~current_umask())
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    interrupted: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))
    except ValueError:  # not the main thread: signals go to the main thread anyway
        previous = None
    try:
        for tmp, path in staged:
            os.replace(tmp, path)
        for path in remove:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt


def read_jsonl(path: Path) -> list[dict]:
    """All records of a JSON-lines file ([] if it does not exist).

    A line that is not a JSON object (garbage, a torn line from an interrupted write, bytes
    that are not UTF-8) is skipped with a warning naming the file and the line number; the
    records before and after it are kept. Empty lines are ignored.

    Raises:
        OSError: the file exists but cannot be read (permission, a folder of that name).
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    out = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            torn = " (the last line, cut off by an interrupted write)" if n == len(lines) else ""
            log.warning("%s, line %d: not a JSON record%s (%s); skipped, the other records are kept",
                        path, n, torn, exc)
            continue
        if not isinstance(rec, dict):
            log.warning("%s, line %d: a JSON %s, not a record; skipped, the other records are kept",
                        path, n, type(rec).__name__)
            continue
        out.append(rec)
    return out


def read_records(run_dir: Path, name: str, required: tuple[str, ...] = ("step",)) -> list[dict]:
    """The records of the run's JSON-lines file ``name`` (:data:`METRICS`, :data:`SHIFT`, :data:`ICS`) that
    hold the ``required`` keys and a numeric ``step``, by step; [] with a warning for an unreadable file."""
    path = Path(run_dir) / name
    try:
        recs = read_jsonl(path)
    except OSError as exc:
        log.warning("%s is unreadable (%s); its records are left out", path, exc.strerror or exc)
        return []
    recs = [r for r in recs if all(k in r for k in required) and isinstance(r.get("step"), (int, float))
            and not isinstance(r.get("step"), bool)]
    return sorted(recs, key=lambda r: r["step"])


REACHED_TOL = 1e-9  # accuracy >= target - REACHED_TOL counts as reached (float round-off of means)


def first_reached(metrics: list[dict], target: float) -> int | None:
    """First evaluated step whose test accuracy is >= ``target`` (1e-9 tolerance), else None.

    Args:
        metrics: metrics.jsonl records sorted by step.
        target: test accuracy in [0, 1].
    """
    for rec in metrics:
        acc = rec.get("test_accuracy")
        if isinstance(acc, (int, float)) and math.isfinite(acc) and acc >= target - REACHED_TOL:
            return int(rec["step"])
    return None


_READ_ONCE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("bnexp_summaries_read_once", default=None)


@contextlib.contextmanager
def summaries_read_once():
    """Within the ``with`` block each run folder's summary.json is read once (later reads return a copy of
    the first): a decision made from one state of a sweep folder (the sweep scripts' stages,
    :mod:`bnexp.designs.orchestrate`) reads each run once however many checks look at it."""
    token = _READ_ONCE.set({})
    try:
        yield
    finally:
        _READ_ONCE.reset(token)


def read_summary(run_dir: Path) -> dict | None:
    """The run's summary.json, or None if absent, unreadable or not a JSON object (inside
    :func:`summaries_read_once`: as first read there)."""
    p = Path(run_dir) / SUMMARY
    seen = _READ_ONCE.get()
    if seen is not None and str(p) in seen:
        return copy.deepcopy(seen[str(p)])
    try:
        s = json.loads(p.read_text())
    except (OSError, ValueError):  # ValueError: JSONDecodeError and UnicodeDecodeError
        s = None
    s = s if isinstance(s, dict) else None
    if seen is not None:
        seen[str(p)] = copy.deepcopy(s)
    return s


def write_summary(run_dir: Path, summary: dict) -> None:
    """Write the run's summary.json (strict JSON, atomically); OutputError when it cannot be written."""
    write_json(Path(run_dir) / SUMMARY, summary)


def read_config(run_dir: Path) -> dict | None:
    """The run's config as a dict: :data:`CONFIG` (the resolved config bnexp writes, with preset
    interpolations such as ``${bnexp_mul:5,...}`` turned into values), else :data:`HYDRA_CONFIG`;
    None when both are missing or unreadable."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser, the same safe constructors
    for p in (Path(run_dir) / CONFIG, Path(run_dir) / HYDRA_CONFIG):
        try:
            cfg = yaml.load(p.read_text(), Loader=loader)
        except (OSError, ValueError, yaml.YAMLError):
            continue
        if isinstance(cfg, dict):
            return cfg
    return None


def is_run_dir(path: Path) -> bool:
    """True when ``path`` is a run directory: it holds summary.json or .hydra/config.yaml."""
    path = Path(path)
    return (path / SUMMARY).is_file() or (path / HYDRA_CONFIG).is_file()


# The folder of a sweep that holds its aggregate TensorBoard runs (one per configuration: the mean over seeds and its
# band, bnexp.report.aggregate; docs/tensorboard.md "over seeds"): never a run, never searched for runs.
AGGREGATE_DIR = "aggregate"


def is_aggregate_dir(path: Path) -> bool:
    """True for a sweep's :data:`AGGREGATE_DIR` (by its name), unless it is itself a run directory."""
    return Path(path).name == AGGREGATE_DIR and not is_run_dir(path)


def find_run_dirs(sweep_dir: Path) -> list[Path]:
    """The sorted run directories under ``sweep_dir`` (itself included), searched recursively through
    symlinked folders (a folder reached twice counts once) but not inside a run directory, nor inside a sweep's
    aggregate folder (:data:`AGGREGATE_DIR`, :func:`is_aggregate_dir`: the mean over seeds is not a run). A symlink
    loop, a dangling symlink or an unreadable folder is skipped with a warning naming it."""
    found, seen = [], set()

    def walk_error(exc: OSError) -> None:
        log.warning("skipped %s: %s", exc.filename, exc.strerror or exc)

    for root, dirs, files in os.walk(sweep_dir, onerror=walk_error, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # reached again through a symlink: a loop or a second link
            dirs[:] = []
            continue
        seen.add(real)
        if is_run_dir(Path(root)):
            found.append(Path(root))
            dirs[:] = []
            continue
        for name in files:  # os.walk lists a symlink that leads nowhere among the files
            problem = symlink_problem(Path(root) / name)
            if problem:
                log.warning("skipped %s: %s", Path(root) / name, problem)
        dirs[:] = sorted(d for d in dirs if d != ".hydra" and not is_aggregate_dir(Path(root) / d))
    return sorted(found)


def symlink_problem(path: Path) -> str | None:
    """"a symlink loop" or "a dangling symlink (to TARGET)" when ``path`` is a symlink that leads
    nowhere, else None."""
    import errno

    try:
        os.stat(path)
        return None
    except OSError as exc:
        if not Path(path).is_symlink():
            return None
        return "a symlink loop" if exc.errno == errno.ELOOP else f"a dangling symlink (to {os.readlink(path)})"


def is_complete(run_dir: Path) -> bool:
    """True if summary.json says the run finished or diverged (a sweep re-run skips it)."""
    s = read_summary(run_dir)
    return bool(s) and s.get("status") in COMPLETE_STATUSES


def clear_partial_outputs(run_dir: Path, checkpoint: bool = False) -> None:
    """Remove the logs (and with ``checkpoint``, the checkpoint and summary) of an earlier
    incomplete attempt before starting the run from scratch."""
    run_dir = Path(run_dir)
    paths = list(run_dir.glob("events.out.tfevents.*")) + [run_dir / n for n in ("metrics.jsonl", "shift.jsonl",
                                                                                  "ics.jsonl")]
    if checkpoint:
        paths += [run_dir / "checkpoint.pt", run_dir / "summary.json"]
    for p in paths:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


RECORD_FILES = ("metrics.jsonl", "shift.jsonl", "ics.jsonl")


def cut_records_after(run_dir: Path, step: int) -> int:
    """Keep only the records with ``record["step"] <= step`` in metrics/shift/ics.jsonl.

    With ``step < 0`` (a run starting over) every record goes, and so do the TensorBoard
    event files; for ``step >= 0`` the trainer's ``SummaryWriter(purge_step=step + 1)``
    drops the later events. Used so that no step is ever recorded twice.

    Returns:
        the number of records removed.

    Raises:
        OutputError: a file could not be rewritten.
    """
    run_dir = Path(run_dir)
    removed = 0
    for name in RECORD_FILES:
        path = run_dir / name
        if not path.exists():
            continue
        records = read_jsonl(path)
        kept = [r for r in records if isinstance(r.get("step"), int) and r["step"] <= step]
        removed += len(records) - len(kept)
        write_jsonl(path, kept)
    if step < 0:
        for p in run_dir.glob("events.out.tfevents.*"):
            p.unlink()
    return removed


def set_aside_unreadable_checkpoint(run_dir: Path, reason: object) -> Path:
    """Rename an unreadable ``checkpoint.pt`` (kept, never deleted) and cut the run's records,
    so the run can start over at step 0 without duplicated steps.

    The checkpoint becomes ``checkpoint.unreadable-<YYYYmmdd-HHMMSS>.pt``; every record of
    metrics/shift/ics.jsonl and the TensorBoard event files of the earlier attempt are removed
    (:func:`cut_records_after` with step -1); the log says what happened.

    Returns:
        the new path of the checkpoint.

    Raises:
        OutputError: the rename or the rewrite failed.
    """
    import logging
    import time

    run_dir = Path(run_dir)
    src = run_dir / "checkpoint.pt"
    dst = run_dir / f"checkpoint.unreadable-{time.strftime('%Y%m%d-%H%M%S')}.pt"
    n = 1
    while dst.exists():
        dst = run_dir / f"checkpoint.unreadable-{time.strftime('%Y%m%d-%H%M%S')}-{n}.pt"
        n += 1
    try:
        os.replace(src, dst)
    except OSError as exc:
        raise OutputError(src, exc) from None
    removed = cut_records_after(run_dir, -1)
    logging.getLogger("bnexp").warning(
        "checkpoint %s is not a readable checkpoint of this run (%s): kept as %s; the run starts over from "
        "step 0, and the %d "
        "records and TensorBoard events of the earlier attempt were removed so that no step appears twice",
        src, reason, dst.name, removed)
    return dst


def run_overrides(run_dir: Path) -> list[str] | None:
    """The command-line overrides of one run (Hydra's ``.hydra/overrides.yaml``), or None without a readable one
    (missing, not YAML, or not a list of strings: a file cut off or edited by hand)."""
    import yaml

    try:
        overrides = yaml.safe_load((Path(run_dir) / OVERRIDES).read_text()) or []
    except (OSError, ValueError, yaml.YAMLError):
        return None
    return overrides if isinstance(overrides, list) and all(isinstance(o, str) for o in overrides) else None


def _comparable(overrides: list[str]) -> list[str]:
    return sorted(o for o in overrides if not o.lstrip("+~").startswith(IGNORED_FOR_RESUME))


def find_resumable(run_dir: Path, overrides: list[str]) -> Path | None:
    """The newest run directory beside ``run_dir`` with the same overrides (ignoring
    ``trainer.resume`` and display options) that has a checkpoint and is not complete."""
    want = _comparable(overrides)
    candidates = []
    for d in Path(run_dir).parent.iterdir():
        if d == Path(run_dir) or not d.is_dir() or not (d / "checkpoint.pt").exists() or is_complete(d):
            continue
        theirs = run_overrides(d)
        if theirs is not None and _comparable(theirs) == want:
            candidates.append(d)
    return max(candidates, key=lambda d: (d / "checkpoint.pt").stat().st_mtime) if candidates else None




def save_checkpoint(path: Path, state: dict) -> None:
    """Save a checkpoint atomically with ``torch.save``."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def check_writable(run_dir: Path) -> None:
    """Raise OSError if ``run_dir`` cannot be written (probe with a temporary file)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(run_dir / ".write_test", b"ok")
    os.unlink(run_dir / ".write_test")


def flatten(d: dict, prefix: str = "") -> dict:
    """Flatten nested dicts into dotted keys: {"bn": {"enabled": True}} -> {"bn.enabled": True}.

    Lists stay values (they are not split into items); ``prefix`` is prepended to every key
    (pass "bn." to get "bn.enabled").
    """
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
