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


def clear_partial_outputs(run_dir: Path) -> None:
    """Remove the logs of an incomplete earlier attempt before starting the run from scratch."""
    run_dir = Path(run_dir)
    for p in list(run_dir.glob("events.out.tfevents.*")) + [run_dir / "metrics.jsonl", run_dir / "shift.jsonl"]:
        try:
            p.unlink()
        except FileNotFoundError:
            pass


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
