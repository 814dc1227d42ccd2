"""A held-out MNIST sweep in report.json (docs/mnist/PLAN.md, amendment): which split each stage read (the tuning
runs' summaries say "validation", the evaluation runs' "test"), the claims rows' own split, the page's Holm family
and the grid-edge marks of the rates the claims rest on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))


def _sweep(root: Path, validation: int = 10_000) -> Path:
    """BN on {1, 4}, no BN on {1, 2}: BN fastest at 4 (the top of its grid), no BN at 1 on the tuning seeds
    (read on the validation split); the evaluation seeds 1000-1004 at those rates (read on test)."""
    from test_report import make_run

    steps = {(True, 1.0): 1500, (True, 4.0): 1000, (False, 1.0): 3000, (False, 2.0): 4000}
    runs = [(bn, lr, s) for (bn, lr) in steps for s in (100, 101, 102)]
    runs += [(bn, lr, s) for bn, lr in ((True, 4.0), (False, 1.0)) for s in range(1000, 1005)]
    for bn, lr, s in runs:
        reach = steps[bn, lr] + (250 * (s % 3) if s >= 1000 else 0)
        d = make_run(root, f"bn={bn},lr={lr},seed={s}", bn=bn, lr=lr, seed=s, max_steps=6000, every=250,
                     knots=[(0, 0.1), (reach, 0.95), (6000, 0.96)], targets=[0.9, 0.95, 0.97])
        tuning = s < 1000
        cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
        cfg.setdefault("data", {})["validation"] = validation if tuning else 0
        (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        summary = json.loads((d / "summary.json").read_text())
        summary["evaluated_on"] = "validation" if tuning and validation else "test"
        (d / "summary.json").write_text(json.dumps(summary))
    return root


def test_report_json_says_which_split_each_stage_read(tmp_path):
    from bnexp.report import build_report

    data = build_report(_sweep(tmp_path)).data
    assert data["evaluated_on"] == {"tuning": ["validation"], "evaluation": ["test"]}
    assert data["tuning_split"] == "validation (10,000 held-out training images)"
    assert data["evaluation_split"] == "test"
    rows = data["best_rate_speedups"]
    assert rows and all(r["evaluated_on"] == ["test"] for r in rows)
    assert data["multiplicity"]["claims_tested"] == sum(r["p_value"] is not None for r in rows) > 0
    assert all("holm_verdict" in r and "detectable" in r for r in rows)
    # BN's rate 4 is the top of its grid and no record of the grid-edge rule exists: every claim is marked
    assert all(any(m.startswith("edge") for m in r["marks"]) for r in rows)
    assert all(r["marked_verdict"] == r["verdict"] + ", edge-bound" for r in rows
               if r["verdict"] in ("supported", "not supported"))


def test_a_sweep_without_a_validation_split_reads_test_everywhere(tmp_path):
    from bnexp.report import build_report

    data = build_report(_sweep(tmp_path, validation=0)).data
    assert data["evaluated_on"] == {"tuning": ["test"], "evaluation": ["test"]}
    assert data["tuning_split"] == "test"
