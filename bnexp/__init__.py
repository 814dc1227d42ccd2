"""bnexp: an experiment runner that reproduces and explains Batch Normalization.

Ioffe & Szegedy, "Batch Normalization: Accelerating Deep Network Training by
Reducing Internal Covariate Shift", ICML 2015.

Architecture (one module per concept):
``config`` (schemas, validation) -> ``data`` -> ``bn`` (the BN math) and
``models`` -> ``trainer`` (the step loop) with ``monitor`` (the covariate-shift
monitor) beside it -> ``rundir`` (outputs of one run) -> ``report``.
"""

__version__ = "0.1.0"
