"""Composition of the run config: every preset x scale (and the plain groups) resolves to the same
config as before the structured-config rewrite, pinned by tests/golden/resolved_configs.json.

The golden file was written at commit a323e09 (before the rewrite), and rewritten since as ``CHANGED`` below
says, by ``python tests/test_config_composition.py --write``: for each override list below, the resolved config
(``OmegaConf.to_container(resolve=True, enum_to_str=True)``) as JSON. The comparison is type-exact
(``5`` and ``5.0`` differ): the JSON texts are compared with sorted keys.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "golden" / "resolved_configs.json"

PRESETS = ("baseline", "baseline_sigmoid", "baseline_x5", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid")
# the CIFAR-10 frontier (docs/cifar/PLAN.md) drives budgets with these overrides on top of the presets: they must win
BUDGET = ["trainer.max_steps=2400", "optim.decay_steps=80", "trainer.eval_every=150", "trainer.hist_every=300",
          "trainer.ckpt_every=600", "lr=0.2", "model.dropout=0.1", "optim.weight_decay=0.0002",
          "scale.base_lr=0.05", "scale.dropout=0.2"]

CASES: list[list[str]] = (
    [[f"+experiment={p}"] for p in PRESETS]
    + [[f"+experiment={p}", f"scale={s}"] for p in PRESETS for s in ("cpu", "gpu")]
    + [[f"+experiment={p}", "scale=gpu", "scale.base_lr=0.04"] for p in PRESETS]
    + [[f"+experiment={p}", *BUDGET] for p in ("baseline", "bn_x5", "bn_x30")]
    + [["+experiment=baseline", "trainer.max_steps=3000"], ["+experiment=bn_x5", "scale=gpu", "scale.fast_steps=500"],
       ["+experiment=bn_baseline", "bn=noisy"], ["+experiment=bn_baseline", "bn=false"],
       ["+experiment=baseline", "bn=true", "act=sigmoid"], ["+experiment=bn_x5", "scale.halvings=2", "scale.evals=8"],
       ["+experiment=baseline_x5", "model.channels=[4,8,16]", "scale.base_weight_decay=0.001"]]
    + [[], ["model=cnn"], ["bn=false"], ["bn=noisy"], ["data=cifar10"], ["model=cnn", "data=cifar10", "act=relu"],
       ["scale=gpu"], ["bn=noisy", "bn.noise_scale=3"], ["optim.schedule=step", "optim.decay_rate=0.5"]]
)

# Deliberate changes since the golden file, per key: (old value, new value), and keys added since, with the value
# every case has. The file was rewritten (``--write``) when trainer.trust_checkpoint was added, after this test
# had passed with every key added or changed until then listed here: MNIST's data.augment 'False' -> 'false';
# bn.norm, bn.groups, bn.position (docs/normalizers.md), trainer.async_records, the logger group, and
# trainer.trust_checkpoint (bnexp.train.checkpoint), all at their defaults, which change no result.
# Added since that rewrite: data.validation (the validation split, bnexp.nets.datasets.hold_out): 0, the test set.
CHANGED: dict[str, tuple] = {}
ADDED: dict[str, object] = {"data.validation": 0}


def _key(overrides: list[str]) -> str:
    return " ".join(overrides) or "(defaults)"


def resolved(overrides: list[str]) -> dict:
    from omegaconf import OmegaConf

    from bnexp.config.schema import compose_config

    return OmegaConf.to_container(compose_config(overrides), resolve=True, enum_to_str=True)


def _apply_changes(cfg: dict) -> dict:
    for dotted, (old, new) in CHANGED.items():
        *parents, leaf = dotted.split(".")
        node = cfg
        for p in parents:
            node = node[p]
        if node.get(leaf) == old:
            node[leaf] = new
    for dotted, value in ADDED.items():
        *parents, leaf = dotted.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {}) if p == "logger" else node[p]  # logger: a node of its own
        assert leaf not in node, f"{dotted} is in the golden file already: drop it from ADDED"
        node[leaf] = value
    return cfg


@pytest.mark.parametrize("overrides", CASES, ids=_key)
def test_resolved_config_is_unchanged(overrides):
    golden = json.loads(GOLDEN.read_text())
    want = _apply_changes(golden[_key(overrides)])
    got = resolved(overrides)
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.write_text(json.dumps({_key(c): resolved(c) for c in CASES}, indent=1) + "\n")
    print(f"wrote {len(CASES)} configs to {GOLDEN}")
