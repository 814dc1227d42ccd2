"""What ``bnexp --help`` and ``bnexp train --help`` print.

``bnexp train --help`` lists every config key with its value (for the groups chosen on the command
line) and its one-line description, both from the schemas of :mod:`bnexp.config.schema`
(:func:`bnexp.config.schema.describe`), so the help never disagrees with the defaults.
"""

from __future__ import annotations

import bnexp

USAGE = """\
bnexp {version}: reproduce and explain Batch Normalization (Ioffe & Szegedy, 2015).

Usage:
  bnexp train [key=value ...]        one training run (defaults: the paper's Fig. 1 MNIST setup)
  bnexp train -m key=v1,v2 ...       a Hydra multirun (sweep) over the given values
  bnexp train --help                 every config group, and every key with its default and description
  bnexp report SWEEP_DIR             tables and figures from a sweep's run directories
  bnexp report --update-docs [FILE]  rewrite the docs' run numbers from their report.json

Config groups:
{groups}
Top-level switches: {bn}  act=sigmoid|relu  lr=FLOAT  seed=INT
Examples:
  bnexp train
  bnexp train model=cnn bn=true act=relu lr=0.05     (50,000 CNN steps: ~22 min on 2 CPU cores)
  bnexp train model=cnn trainer.max_steps=5000       (~2 min on 2 CPU cores)
  {sweep}
  bnexp train experiment=bn_x5 scale=cpu data.verify_checksums=false    (CIFAR-10, paper Sec. 4.2)
  bnexp train logger=[tensorboard,csv,mlflow]        (TensorBoard, scalars.csv and a local MLflow store)
Sweep scripts: scripts/reproduce_all.sh (the paper, in order), reproduce_mnist.sh, reproduce_cifar.sh,
  ics_study.sh, study.sh NAME (DRY_RUN=1 prints the plan and the estimated wall time)
Data: data.root=PATH or BNEXP_DATA_ROOT=PATH (default ~/.cache/bnexp/data); data.download=true fetches.
Outputs: outputs/runs/... and outputs/sweeps/...; view with: tensorboard --logdir outputs
"""

# The sweep that shows the effect in about 3 minutes on 2 CPU cores: at lr=2 the plain sigmoid net leaves chance
# within the budget (at the default 0.12 it stays at chance for thousands of steps), 3 seeds for the claims,
# 16 test evaluations and monitor records per run (docs/tensorboard.md)
SUGGESTED_SWEEP = ("bnexp train -m bn=true,false seed=0,1,2 lr=2 trainer.max_steps=4000 trainer.eval_every=250 "
                   "trainer.hist_every=250 hydra/launcher=joblib hydra.launcher.n_jobs=2 trainer.num_threads=1")


def config_groups() -> dict[str, list[str]]:
    """{group: [options]} from the YAML files under conf/ (hydra's own groups excluded)."""
    from bnexp.config.schema import CONF_DIR

    groups: dict[str, list[str]] = {}
    for d in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"):
        groups[d.name] = sorted(f.stem for f in d.glob("*.yaml"))
    return groups


def train_help(overrides: list[str]) -> str:
    """``bnexp train --help``: the config groups, then every key with its value for the groups chosen
    on the command line and its one-line description (from the schemas' field metadata)."""
    from omegaconf import OmegaConf

    from bnexp.config.schema import compose_config, describe

    cfg = compose_config(overrides)
    groups = "\n".join(f"  {g}: {', '.join(opts)}" for g, opts in config_groups().items())
    lines, section = [], None
    rows = describe(cfg)
    rows = [r for r in rows if "." not in r[0]] + [r for r in rows if "." in r[0]]  # top-level keys first
    for key, value, text in rows:
        head = key.split(".")[0] if "." in key else ""
        if head != section:
            section = head
            doc = (OmegaConf.get_type(cfg[head]).__doc__ or "").strip().splitlines()[0].replace("``", "") \
                if head else ""
            lines.append(f"\n{head or 'top level'}: {doc}" if head else "\ntop level:")
        kv = f"{key}={value}"
        lines.append(f"  {kv:<36} {text}" if len(kv) <= 36 else f"  {kv}\n  {'':<36} {text}")
    return (f"bnexp train: one training run (or a Hydra multirun with -m) of the Batch Normalization experiments.\n"
            f"Usage: bnexp train [-m] [key=value ...]     e.g.  bnexp train model=cnn bn=true act=relu lr=0.05\n"
            f"(50,000 CNN steps: about 22 min on 2 CPU cores; add trainer.max_steps=5000 for about 2 min)\n\n"
            f"== Config groups ==  (choose one with group=option; experiment=NAME adds a CIFAR-10 preset; "
            f"logger=[tensorboard,csv,mlflow] combines loggers)\n{groups}\n\n"
            f"== Keys ==  (override any with key=value; shown with the values of the groups chosen: "
            f"bnexp train model=cnn --help)" + "\n".join(lines) + "\n\n"
            f"Sweeps:  {SUGGESTED_SWEEP}\n"
            "Outputs: outputs/runs/<time>_<overrides>/ or <sweep dir>/<swept keys>/ (summary.json, metrics.jsonl, "
            "shift.jsonl, TensorBoard events).\n"
            "Data:    data.root=PATH or BNEXP_DATA_ROOT=PATH; data.download=true fetches when online.\n"
            "Hydra's own flags: bnexp train --hydra-help")


def usage() -> str:
    """``bnexp --help``: the commands, the config groups and examples."""
    found = config_groups()
    groups = "\n".join(f"  {g:11s} {g}={'|'.join(opts)}" for g, opts in found.items())
    order = ["true", "false", "noisy", "layer", "group"]  # BN on/off first, then its variants
    bn = "bn=" + "|".join(sorted(found.get("bn", []), key=lambda o: (order.index(o) if o in order else 9, o)))
    return USAGE.format(version=bnexp.__version__, groups=groups, bn=bn, sweep=SUGGESTED_SWEEP)
