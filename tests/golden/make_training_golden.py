"""Record the exact results of a few short trainings, to check later code trains bit-identically.

Usage (from the repository root, real data in ``$BNEXP_DATA_ROOT``)::

    PYTHONPATH=$PWD python tests/golden/make_training_golden.py   # writes training_golden_<cpu kind>.json

Each configuration below trains a few hundred steps through the Python API
(:func:`bnexp.config.schema.compose_config`, :func:`bnexp.config.schema.validate`, :func:`bnexp.train.trainer.train`)
in a temporary folder, one torch thread, and records

* every ``metrics.jsonl`` record's ``test_loss``, ``test_accuracy`` and ``train_loss`` (floats as
  JSON keeps them: Python's shortest round-trip repr, so equality is bit equality);
* the percentiles of ``layer1`` in every ``shift.jsonl`` record;
* the ``ics.jsonl`` records' numbers (runs with gradient ICS / the landscape probe);
* ``summary.json``'s final test accuracy and loss (for ``population_stats=recompute`` the
  recomputed ones);
* a sha256 of the final model's state_dict (every tensor's name, dtype, shape and bytes, in key
  order), read from ``checkpoint.pt``.

``resume`` trains 300 steps with a checkpoint every 100, keeps the step-100 checkpoint, puts it
into a fresh folder and resumes there: its results must be the uninterrupted run's.

``torch.__version__`` and ``torch.backends.cpu.get_cpu_capability()`` are stored with them:
bit-identity is only expected with the same torch and the same CPU kernels, so there is one file per
CPU kernel level, ``training_golden_<level>.json`` (``avx2``, ``avx512``; ``tests/test_training_golden.py``
compares with the one of the machine it runs on). Make a new level's file with the code the others were
made with (check out that commit), so that it pins the same behaviour.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
GOLDEN_GLOB = "training_golden_*.json"


def golden_path(cpu_capability: str) -> Path:
    """The golden file of one CPU kernel level: ``training_golden_avx512.json`` for "AVX512"."""
    return HERE / f"training_golden_{cpu_capability.lower()}.json"

# common to every configuration: short, one thread, no progress bar, small probe
BASE = ["trainer.progress=false", "trainer.num_threads=1", "trainer.device=cpu", "trainer.max_steps=300",
        "trainer.eval_every=100", "trainer.hist_every=100", "trainer.log_every=50",
        "trainer.probe_size=200", "seed=3"]

CONFIGS: dict[str, list[str]] = {
    "mlp_bn": ["bn=true"],
    "mlp_plain": ["bn=false", "lr=0.5"],
    "mlp_noisy": ["bn=noisy"],
    "mlp_reference_bn": ["bn=true", "bn.impl=reference"],
    "cnn_dropout_momentum_exp": ["model=cnn", "model.channels=[4,8]", "model.fc=16", "model.dropout=0.2",
                                 "bn=true", "act=relu", "lr=0.05", "optim.momentum=0.9",
                                 "optim.schedule=exponential", "optim.decay_rate=0.5", "optim.decay_steps=100",
                                 "trainer.max_steps=200", "trainer.batch_size=32"],
    "mlp_grad_ics_landscape": ["bn=true", "monitor.grad_ics=true", "monitor.grad_ics_every=50",
                               "monitor.landscape=true", "monitor.landscape_every=100"],
    "mlp_recompute": ["bn=true", "bn.population_stats=recompute", "bn.recompute_batches=20"],
    "resume": ["bn=true", "trainer.ckpt_every=100"],
}


def _state_sha256(state: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.numpy().tobytes() if t.dtype != torch.bfloat16 else t.view(torch.int16).numpy().tobytes())
    return h.hexdigest()


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _numbers(obj):
    """The numbers of a JSON value, nested structure kept, strings dropped."""
    if isinstance(obj, dict):
        return {k: _numbers(v) for k, v in obj.items() if not isinstance(v, str)}
    if isinstance(obj, list):
        return [_numbers(v) for v in obj]
    return obj


def results_of(run_dir: Path) -> dict:
    """What the golden file keeps of one finished run folder."""
    metrics = _read_jsonl(run_dir / "metrics.jsonl")
    shift = _read_jsonl(run_dir / "shift.jsonl")
    ics = _read_jsonl(run_dir / "ics.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    state = torch.load(run_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    return {
        "metrics": [{k: r[k] for k in ("step", "test_loss", "test_accuracy", "train_loss")} for r in metrics],
        "shift_layer1": [{"step": r["step"], **{k: v for k, v in r["layers"]["layer1"].items()
                                                if k.startswith("p")}} for r in shift],
        "ics": [_numbers(r) for r in ics],
        "final_test_accuracy": summary["final_test_accuracy"],
        "final_test_loss": summary["final_test_loss"],
        "status": summary["status"],
        "step": summary["step"],
        "model_sha256": _state_sha256(state["model"]),
    }


def run_config(name: str, workdir: Path) -> dict:
    """Train configuration ``name`` of :data:`CONFIGS` in ``workdir/name`` and return its results."""
    from bnexp.runfolders import rundir
    from bnexp.config.schema import compose_config, validate
    from bnexp.train.trainer import train

    cfg = compose_config(BASE + CONFIGS[name])
    validate(cfg)
    run_dir = workdir / name
    run_dir.mkdir(parents=True)
    if name != "resume":
        train(cfg, run_dir)
        return results_of(run_dir)
    # keep the step-100 checkpoint of an uninterrupted run, then resume from it in a fresh folder
    kept = workdir / "resume_step100.pt"
    original = rundir.save_checkpoint

    def keep_first(path, state):
        original(path, state)
        if state["step"] == 100 and not kept.exists():
            shutil.copyfile(path, kept)

    rundir.save_checkpoint = keep_first
    try:
        train(cfg, run_dir)
    finally:
        rundir.save_checkpoint = original
    uninterrupted = results_of(run_dir)
    resumed_dir = workdir / "resume_resumed"
    resumed_dir.mkdir()
    shutil.copyfile(kept, resumed_dir / "checkpoint.pt")
    train(cfg, resumed_dir)
    resumed = results_of(resumed_dir)
    if resumed != uninterrupted:
        raise AssertionError("the resumed run differs from the uninterrupted one")
    return resumed


def environment() -> dict:
    """The torch version and CPU kernel level the results were made with."""
    return {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    out = {**environment(), "base_overrides": BASE, "configs": {}}
    with tempfile.TemporaryDirectory() as d:
        for name in CONFIGS:
            out["configs"][name] = {"overrides": CONFIGS[name], "results": run_config(name, Path(d))}
            print(f"{name}: final test accuracy {out['configs'][name]['results']['final_test_accuracy']}",
                  file=sys.stderr)
    path = golden_path(out["cpu_capability"])
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
