"""TensorBoard helpers: hparams in the run's own event file.

``SummaryWriter.add_hparams`` writes into a new sub-run folder, which makes every
run appear twice in TensorBoard. Here the three hparams summaries (experiment,
session start, session end) go into the run's own event file, and the metric
values are plain scalars of that run, so the HParams dashboard shows one row per
run with its config and results.
"""

from __future__ import annotations

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

# Metrics shown in the HParams dashboard (written as scalars at the end of the run).
HPARAM_METRICS = ("hparams/final_test_accuracy", "hparams/best_test_accuracy")


def flat_hparams(cfg) -> dict:
    """The run's config flattened to {dotted.key: int|float|str|bool} (lists become strings)."""
    from omegaconf import OmegaConf

    out: dict = {}

    def walk(prefix, node):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(node, (int, float, str, bool)):
            out[prefix] = node
        elif node is None:
            out[prefix] = "null"
        else:
            out[prefix] = str(node)

    walk("", OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    # Top-level switches first, so the dashboard's first columns are the interesting ones.
    first = {"bn": bool(cfg.bn.enabled), "act": str(out.get("act")), "lr": float(cfg.lr),
             "seed": int(cfg.seed), "model": str(cfg.model.name), "data": str(cfg.data.name)}
    return {**first, **{k: v for k, v in out.items() if k not in first}}


def metric_names(targets) -> list[str]:
    """HParams metric tags: final/best test accuracy and steps to each target."""
    return list(HPARAM_METRICS) + [f"hparams/steps_to_{t:g}" for t in targets]


def write_hparams_start(writer: SummaryWriter, hparam_dict: dict, metrics: list[str]) -> None:
    """Write the experiment and session-start summaries into ``writer``'s own event file."""
    exp, ssi, _ = hparams(hparam_dict, {m: 0.0 for m in metrics})
    writer.file_writer.add_summary(exp)
    writer.file_writer.add_summary(ssi)


def write_hparams_end(writer: SummaryWriter, metric_values: dict, step: int) -> None:
    """Write the final metric scalars (None values are skipped: "not reached" shows blank)."""
    for tag, value in metric_values.items():
        if value is not None:
            writer.add_scalar(tag, value, step)
