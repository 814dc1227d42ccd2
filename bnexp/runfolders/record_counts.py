"""How many records a run writes into its folder's record files (metrics.jsonl, shift.jsonl) for its config, and the
minimum a verdict needs.

``bnexp report`` gives a verdict only from at least :data:`MIN_RECORDS` records per seed
(:mod:`bnexp.report.seed_advice`); a sweep's summary (:mod:`bnexp.runfolders.sweepsummary`) says so, once, when
``trainer.eval_every`` or ``trainer.hist_every`` would leave fewer.
"""

from __future__ import annotations

from omegaconf import DictConfig
MIN_RECORDS = 5  # records per seed a verdict needs (test evaluations, monitor records, probes)


def record_count(max_steps: int, every: int) -> int:
    """Records a run writes for an interval: one at step 0, one every ``every`` steps and one at
    the last step when it is not a multiple of ``every``."""
    return 1 + max_steps // every + (1 if max_steps % every else 0)


def sparse_record_warnings(cfg: DictConfig) -> list[str]:
    """Warnings for intervals that leave fewer than ``MIN_RECORDS`` records (too few for
    ``bnexp report`` to give a verdict from): one message per key, naming it."""
    t = cfg.trainer
    out = []
    for key, what in (("eval_every", "test evaluations"), ("hist_every", "covariate-shift monitor records")):
        n = record_count(int(t.max_steps), int(t[key]))
        if n < MIN_RECORDS:
            out.append(f"trainer.{key}={t[key]} with trainer.max_steps={t.max_steps} gives only {n} {what} "
                       f"(fewer than {MIN_RECORDS}); bnexp report needs at least {MIN_RECORDS} for a verdict. "
                       f"Use trainer.{key}<={max(1, int(t.max_steps) // (MIN_RECORDS - 1))}.")
    return out
