"""Train-mode vs inference-mode accuracy of a finished BN run (the inference_statistics study, docs/studies/inference_statistics.md).

A BN network computes a different function in training (every unit normalized by the statistics of
its mini-batch, Alg. 1) and at inference (by fixed population statistics, Alg. 2). This module takes a
finished run's final weights (``checkpoint.pt``) and measures its test accuracy three ways, on the same
test images:

* ``batch`` -- batch statistics, as in training: the test images in a fixed seeded order, cut into
  consecutive mini-batches of the run's m (``trainer.batch_size``; the last floor(N/m)*m images are
  used, so every mini-batch has m examples), each normalized by its own mean and variance;
* ``ema`` -- the running averages the trainer kept (momentum ``bn.momentum``), i.e. what the trainer's
  own final test accuracy uses (``summary.json``'s ``final_test_accuracy`` when
  ``bn.population_stats=ema``; ``ema_full_test`` is that number on the whole test set);
* ``population`` -- Alg. 2, steps 10-12 (:func:`bnexp.nets.bn.recompute_population_statistics`): the weights
  frozen, E[x] = mean of mu_B and Var[x] = m/(m-1) * mean of sigma2_B over K = ceil(P / m) training
  mini-batches of m drawn by a seeded sampler, P = ``population_examples`` (10,000 by default).

``python -m bnexp.train.inference_eval SWEEP_DIR`` writes ``inference_stats.json`` into every finished BN run
folder under SWEEP_DIR (a folder whose file is newer than its summary.json is skipped, so a second call
does nothing) and prints one line per run.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from pathlib import Path

import torch
from torch import nn

from bnexp.runfolders import rundir
from bnexp.nets.bn import bn_layers, recompute_population_statistics
from bnexp.nets.datasets import BatchSampler, load_data
from bnexp.nets.models import build_model
from bnexp.train.checkpoint import load_checkpoint

RESULT = rundir.INFERENCE
POPULATION_EXAMPLES = 10_000
ORDER_SEED = 12345  # the test images' order for the batch-statistics evaluation (the same for every run)
MODES = ("batch", "ema", "population")


@torch.no_grad()
def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int) -> float:
    """Fraction of ``x`` (N, ...) classified as ``y`` (N,), ``chunk`` examples per forward pass."""
    correct = 0
    for i in range(0, len(y), chunk):
        correct += int((model(x[i:i + chunk]).argmax(1) == y[i:i + chunk]).sum())
    return correct / len(y)


def batch_mode(model: nn.Module) -> nn.Module:
    """A copy of ``model`` that normalizes with batch statistics (its BN layers in training mode, every
    other module in eval mode, e.g. no dropout); ``model`` is unchanged."""
    out = copy.deepcopy(model).eval()
    for layer in bn_layers(out):
        layer.train()
    return out


@torch.no_grad()
def evaluate_modes(model: nn.Module, test_x: torch.Tensor, test_y: torch.Tensor, train_x: torch.Tensor, m: int,
                   population_examples: int = POPULATION_EXAMPLES, seed: int = 0) -> dict:
    """Test accuracy of a BN ``model`` with batch statistics, running averages and Alg. 2 statistics.

    Args:
        model: a network with BN layers (unchanged by this call).
        test_x, test_y: (N, ...) test images and (N,) labels.
        train_x: (T, ...) training images for Alg. 2.
        m: the mini-batch size (>= 2) of the batch statistics and of Alg. 2's mini-batches.
        population_examples: P; Alg. 2 averages K = ceil(P / m) mini-batches.
        seed: seeds Alg. 2's sampler (the run's seed + 1, as the trainer's recompute does).

    Returns:
        {"m", "n_test" (floor(N/m)*m images, the same for the three modes), "population_batches" (K),
        "accuracy": {"batch", "ema", "population"} in [0, 1], "ema_full_test" (running averages, all N)}.

    Raises:
        ValueError: m < 2, m > N, or a model without BN layers.
    """
    if m < 2 or m > len(test_y):
        raise ValueError(f"m must be in [2, {len(test_y)}] (batch statistics need m >= 2), got {m}")
    if not bn_layers(model):
        raise ValueError("the model has no BN layers: train and inference modes are the same function")
    order = torch.randperm(len(test_y), generator=torch.Generator().manual_seed(ORDER_SEED)).to(test_y.device)
    n = len(test_y) // m * m
    x, y = test_x[order[:n]], test_y[order[:n]]
    ema = copy.deepcopy(model).eval()
    pop = copy.deepcopy(model).eval()
    k = math.ceil(population_examples / m)
    sampler = BatchSampler(len(train_x), m, seed, train_x.device)
    recompute_population_statistics(pop, (train_x[sampler.next()] for _ in range(k)))
    return {"m": m, "n_test": n, "population_batches": k,
            "accuracy": {"batch": _accuracy(batch_mode(model), x, y, m), "ema": _accuracy(ema, x, y, 500),
                         "population": _accuracy(pop, x, y, 500)},
            "ema_full_test": _accuracy(ema, test_x, test_y, 500)}


def _config(run_dir: Path):
    """The run's config (config.yaml, else .hydra/config.yaml) typed by the schema, as the trainer saw it
    (enums as enums); untyped when it no longer fits the schema; None without a config file."""
    from omegaconf import OmegaConf

    from bnexp.config.schema import Config

    for name in (rundir.CONFIG, rundir.HYDRA_CONFIG):
        if (run_dir / name).is_file():
            raw = OmegaConf.load(run_dir / name)
            try:
                return OmegaConf.merge(OmegaConf.structured(Config), raw)
            except Exception:  # keys or values of another bnexp version: read it as it is
                return raw
    return None


def needs_eval(run_dir: Path) -> bool:
    """True for a finished run with BN (batch statistics), a checkpoint, and no ``inference_stats.json``
    newer than its summary.json."""
    s = rundir.read_summary(run_dir) or {}
    cfg = _config(run_dir)
    if s.get("status") != "finished" or cfg is None or not (run_dir / rundir.CHECKPOINT).is_file():
        return False
    bn = cfg.get("bn") or {}
    if not bn.get("enabled", False) or str(bn.get("norm", "batch")).split(".")[-1] != "batch":
        return False
    out = run_dir / RESULT
    return not out.is_file() or out.stat().st_mtime < (run_dir / rundir.SUMMARY).stat().st_mtime


def evaluate_run(run_dir: Path, data_cache: dict | None = None,
                 population_examples: int = POPULATION_EXAMPLES, trust: bool = False) -> dict:
    """Evaluate one finished run folder's final weights (:func:`evaluate_modes`) and write
    ``inference_stats.json`` (with ``momentum`` and ``seed`` added) into it.

    Args:
        run_dir: the run folder (config.yaml, checkpoint.pt).
        data_cache: {dataset name: loaded data}, filled and reused across runs.
        trust: load a checkpoint that needs more than tensors (``--trust-checkpoints``; it may run code).

    Raises:
        bnexp.errors.DataError: the dataset is missing. OSError: the folder is not writable.
        bnexp.errors.UntrustedCheckpoint: the checkpoint needs more than tensors and ``trust`` is false.
    """
    cfg = _config(run_dir)
    device = torch.device("cpu")
    cache = data_cache if data_cache is not None else {}
    if cfg.data.name not in cache:
        cache[cfg.data.name] = load_data(cfg.data, device)
    data = cache[cfg.data.name]
    model = build_model(cfg, data.input_shape, data.num_classes)
    state = load_checkpoint(run_dir / rundir.CHECKPOINT, trust=trust)  # on the CPU, tensors only unless trusted
    model.load_state_dict(state["model"])
    out = evaluate_modes(model, data.test_x, data.test_y, data.train_x, int(cfg.trainer.batch_size),
                         population_examples, int(cfg.seed) + 1)
    out.update(momentum=float(cfg.bn.momentum), seed=int(cfg.seed), step=int(state["step"]))
    rundir.write_json(run_dir / RESULT, out)
    return out


def read_result(run_dir: Path) -> dict | None:
    """The run's ``inference_stats.json``, or None when absent or unreadable."""
    try:
        d = json.loads((Path(run_dir) / RESULT).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def main(argv: list[str] | None = None) -> int:
    """``python -m bnexp.train.inference_eval SWEEP_DIR``: evaluate every run that :func:`needs_eval`.

    Returns:
        0; 2 with one ``error:`` line when SWEEP_DIR is not a folder or the data cannot be loaded.
    """
    p = argparse.ArgumentParser(prog="python -m bnexp.train.inference_eval", description=__doc__.split("\n\n")[0])
    p.add_argument("sweep_dir", metavar="SWEEP_DIR")
    p.add_argument("--population-examples", type=int, default=POPULATION_EXAMPLES)
    p.add_argument("--trust-checkpoints", action="store_true",
                   help="load checkpoints that need more than tensors (full unpickling: only files you trust)")
    a = p.parse_args(argv)
    sweep = Path(a.sweep_dir)
    if not sweep.is_dir():
        print(f"error: {sweep} is not a folder", file=sys.stderr)
        return 2
    from bnexp.errors import UserError

    torch.set_num_threads(1)
    cache: dict = {}
    for run in rundir.find_run_dirs(sweep):
        if not needs_eval(run):
            continue
        try:
            r = evaluate_run(run, cache, a.population_examples, trust=a.trust_checkpoints)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        acc = r["accuracy"]
        print(f"{run.relative_to(sweep)}: batch {100 * acc['batch']:.2f}%, ema {100 * acc['ema']:.2f}%, "
              f"population {100 * acc['population']:.2f}% (m={r['m']}, K={r['population_batches']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
