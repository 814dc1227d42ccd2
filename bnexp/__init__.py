"""bnexp: an experiment runner that reproduces and explains Batch Normalization.

Ioffe & Szegedy, "Batch Normalization: Accelerating Deep Network Training by
Reducing Internal Covariate Shift", ICML 2015.

Layers, bottom up (one module per concept; docs/development.md says what each holds,
tests/test_layout.py keeps every import pointing down): ``errors`` and ``interrupts``;
``runfolders`` (every file of a run folder); ``config`` (what to run); ``nets`` (the data,
the models, ``nets/bn`` the BN math); ``train`` (the step loop and its measurements);
``analysis`` (the per-run table and the rules); ``designs`` (planning sweeps) and
``report`` (after the runs); ``cli``.
"""

__version__ = "0.1.0"
