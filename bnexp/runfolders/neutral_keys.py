"""The config keys that do not change what a run measures, in one list: a checkpoint resumes, and a complete
run is skipped, across changes of these keys; any other difference refuses the run folder (:mod:`bnexp.cli`,
:mod:`bnexp.config.oneconfig`). They do not name run folders either, and the report does not group runs by
them (torch-free).

What they are: where the data lives and whether it is fetched or checksum-checked; display (progress bar,
TensorBoard histograms); how often a checkpoint is written and whether the last one is kept; resuming; the
launcher (``hydra.launcher.*``). ``trainer.device`` and ``trainer.num_threads`` are here too: another device
or thread count changes the order of floating-point sums, so results may differ in the last bits (a run
resumed elsewhere is not bit-identical to an uninterrupted one), but not the experiment, and a run must be
able to move between machines. Two kinds (docs/reliability.md lists each): :data:`ROUNDING_KEYS` may move
results in the last bits (another thread count, device, or stack of the stacked launcher sums in another
order); :data:`BIT_NEUTRAL_KEYS` leave them bit for bit.
"""

from __future__ import annotations

RESULT_NEUTRAL_KEYS = ("trainer.resume", "trainer.progress", "trainer.num_threads", "trainer.async_records",
                       "trainer.device",
                       "trainer.ckpt_every", "trainer.save_checkpoint", "monitor.histograms",
                       "trainer.trust_checkpoint",
                       "data.root", "data.download", "data.verify_checksums", "logger", "hydra.launcher")
ROUNDING_KEYS = ("trainer.num_threads", "trainer.device", "hydra.launcher")
BIT_NEUTRAL_KEYS = tuple(k for k in RESULT_NEUTRAL_KEYS if k not in ROUNDING_KEYS)
#: what two runs' overrides are compared without, to find the one to resume (and Hydra's own settings)
IGNORED_FOR_RESUME = (*RESULT_NEUTRAL_KEYS, "hydra.")
