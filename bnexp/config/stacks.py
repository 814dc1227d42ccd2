"""Which runs of a sweep train together in one stack (``hydra/launcher=stacked``, docs/stacked.md).

Runs whose configs differ only in :data:`STACKABLE_KEYS` -- the seed, the rate, the init std, dropout,
weight decay, noisy BN's noise scale -- can be one batched model (:mod:`bnexp.train.stack_loop`); anything
else (network, ``bn``, dataset, mini-batch size, budget, schedule, ...) puts them in different stacks.
Only configs whose network has a stacked form that is proven equal to training alone are stacked
(:func:`why_alone`); the others are stacks of one, i.e. ordinary runs.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf, open_dict

from bnexp.config.checks import option_value

#: the keys in which the runs of one stack may differ
STACKABLE_KEYS = ("seed", "lr", "model.init_std", "model.dropout", "optim.weight_decay", "bn.noise_scale")

#: keys that never change a run's result (bnexp.runfolders.neutral_keys.RESULT_NEUTRAL_KEYS) may differ too
from bnexp.runfolders.neutral_keys import RESULT_NEUTRAL_KEYS  # noqa: E402


def why_alone(cfg: DictConfig) -> str | None:
    """Why a run of ``cfg`` trains alone (a stack of one), or None when it can join a stack.

    Stacked: ``model=mlp`` with torch's BN (``bn.norm=batch``, ``bn.impl=torch``, no ghost batches, noisy or
    not, before or after g) or without a normalizer, in one process. ``model=cnn`` trains alone: its
    stacked form (grouped convolutions) computes the same forward pass bit for bit, but its gradients
    differ in the last bits, and max-pooling turns such differences into different runs (docs/stacked.md).
    """
    if str(cfg.model.name) != "mlp":
        return f"model={cfg.model.name} is trained alone (docs/stacked.md)"
    bn = cfg.bn
    if bool(bn.enabled):
        if str(option_value(bn.get("norm", "batch"))) != "batch":
            return f"bn.norm={option_value(bn.norm)} has no stacked form"
        if str(option_value(bn.get("impl", "torch"))) != "torch":
            return "bn.impl=reference has no stacked form"
        if bn.get("ghost_batch_size") is not None:
            return "bn.ghost_batch_size has no stacked form"
    return None


def _without(tree: dict, keys: tuple[str, ...]) -> dict:
    out = dict(tree)
    for key in keys:
        node, *rest = key.split(".")
        if not rest:
            out.pop(node, None)
        elif isinstance(out.get(node), dict):
            out[node] = _without(out[node], (".".join(rest),))
    return out


def stack_key(cfg: DictConfig) -> str:
    """The part of a run config that all runs of a stack share: the resolved config without the
    stackable and result-neutral keys (and without Hydra's node), as text."""
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.pop("hydra", None)  # Hydra's node (not resolvable before the job starts) is no part of a run
    tree = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    neutral = tuple(k for k in RESULT_NEUTRAL_KEYS if not k.startswith("hydra"))
    return repr(_without(tree, STACKABLE_KEYS + neutral))


def group_runs(cfgs: list[DictConfig], max_stack: int) -> list[list[int]]:
    """Split the runs of a sweep into stacks.

    Args:
        cfgs: each run's composed config, in the sweep's order.
        max_stack: the most runs of one stack (``hydra.launcher.max_stack``), >= 1.

    Returns:
        the stacks as lists of indices into ``cfgs``, in order of their first run; a run that
        :func:`why_alone` keeps alone is a stack of one.

    Raises:
        ValueError: ``max_stack`` < 1.
    """
    if max_stack < 1:
        raise ValueError(f"max_stack must be >= 1, got {max_stack}")
    groups: dict[str, list[int]] = {}
    stacks: list[list[int]] = []
    for i, cfg in enumerate(cfgs):
        if why_alone(cfg) is not None:
            stacks.append([i])
            continue
        key = stack_key(cfg)
        group = groups.get(key)
        if group is None or len(group) >= max_stack:
            group = groups[key] = [i]
            stacks.append(group)
        else:
            group.append(i)
    return stacks
