"""The run directory: where one run's outputs live, and how they are written.

Layout of a run directory (Hydra's output dir for the job)::

    .hydra/                 Hydra's composed config, overrides
    train.log               the run's log
    events.out.tfevents.*   TensorBoard: scalars, histograms, margin charts, hparams, figure
    metrics.jsonl           one JSON record per test-set evaluation
    shift.jsonl             one JSON record per covariate-shift monitor step
    summary.json            final/best test accuracy, steps-to-target, wall time, status
    percentiles.png         percentile bands of every layer's input to the nonlinearity
    checkpoint.pt           final model, optimizer and scheduler state

JSON files are written atomically (temporary file, fsync, rename), so a reader
never sees half a summary. All JSON is strict (RFC 8259): non-finite numbers are
written as ``null`` (the run's ``status`` says why, e.g. ``diverged``). Files get
the permissions of the umask (0644 under the usual 022), like any other new file.
A file-system error (permission, full disk, name too long) while writing an output
raises :class:`~bnexp.errors.OutputError`, a user error naming the path and the fix.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from bnexp.errors import OutputError

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
    """``obj`` with every non-finite float (NaN, +-inf) replaced by None, recursively
    (dicts, lists, tuples; numpy/torch scalars become Python numbers)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        try:
            return json_safe(obj.item())
        except (ValueError, RuntimeError):
            return obj
    return obj


def dumps(obj: Any, indent: int | None = None) -> str:
    """Strict JSON text of ``obj``: non-finite numbers become null (``allow_nan=False``)."""
    return json.dumps(json_safe(obj), indent=indent, sort_keys=False, allow_nan=False)


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented strict JSON, atomically.

    Raises:
        OutputError: the file could not be written (permission, full disk, long name).
    """
    write_text(path, dumps(obj, indent=2) + "\n")


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


def save_figure(fig, path: Path, dpi: int = 100) -> None:
    """Save a matplotlib figure atomically (a reader never sees half an image); format from the suffix.

    Raises:
        OutputError: the file could not be written.
    """
    import io

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format=Path(path).suffix.lstrip(".") or "png")
    try:
        atomic_write_bytes(path, buf.getvalue())
    except OSError as exc:
        raise OutputError(path, exc) from None


def read_jsonl(path: Path) -> list[dict]:
    """All records of a JSON-lines file ([] if it does not exist); a torn last line is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return out


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


def read_summary(run_dir: Path) -> dict | None:
    """The run's summary.json, or None if absent or unreadable."""
    p = Path(run_dir) / "summary.json"
    try:
        return json.loads(p.read_text())
    except (OSError, json.JSONDecodeError):
        return None


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


# Config keys that do not change a run's results: where the data lives, whether it is fetched or its
# checksums checked, display, threads, device, resume. A checkpoint resumes across changes of these.
RESULT_NEUTRAL_KEYS = ("trainer.resume", "trainer.progress", "trainer.num_threads", "trainer.device",
                       "data.root", "data.download", "data.verify_checksums")
IGNORED_FOR_RESUME = (*RESULT_NEUTRAL_KEYS, "hydra.")


def _run_overrides(run_dir: Path) -> list[str] | None:
    try:
        import yaml

        return list(yaml.safe_load((Path(run_dir) / ".hydra" / "overrides.yaml").read_text()) or [])
    except (OSError, ValueError, TypeError):
        return None


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
        theirs = _run_overrides(d)
        if theirs is not None and _comparable(theirs) == want:
            candidates.append(d)
    return max(candidates, key=lambda d: (d / "checkpoint.pt").stat().st_mtime) if candidates else None


class RunLock:
    """An exclusive lock on a run directory (``.lock``, flock), so parallel jobs never share one.

    The operating system releases it when the process dies, even by SIGKILL.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / ".lock"
        self.fd: int | None = None

    def acquire(self) -> bool:
        """True if this process now holds the lock, False if another process does."""
        import fcntl

        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd
        return True

    def holder(self) -> str:
        """The pid written by the holder, or '?'."""
        try:
            return self.path.read_text().strip() or "?"
        except OSError:
            return "?"

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self.fd is not None:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def save_checkpoint(path: Path, state: dict) -> None:
    """Save a checkpoint atomically with ``torch.save``."""
    import io

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

    Lists stay values (they are not split into items). ``prefix`` is put before every key as is
    (``flatten(d, "cfg.")``).
    """
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
