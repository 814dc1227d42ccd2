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
never sees half a summary.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

# Statuses after which a run is complete and a re-run of its sweep skips it.
COMPLETE_STATUSES = ("finished", "diverged")
ALL_STATUSES = ("running", "finished", "diverged", "failed", "interrupted")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temporary file in the same folder, fsync, rename.

    Raises:
        OSError: when the folder is not writable or the disk is full; ``path`` is then unchanged.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
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


def write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def append_jsonl(path: Path, record: dict) -> None:
    """Append one JSON record as a line."""
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def write_jsonl(path: Path, records: list[dict]) -> None:
    """Replace a JSON-lines file by ``records``, atomically (used when a run resumes)."""
    atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in records).encode())


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


IGNORED_FOR_RESUME = ("trainer.resume", "trainer.progress", "trainer.num_threads", "hydra.")


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
