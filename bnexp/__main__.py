"""``python -m bnexp ...``: the same command line as the ``bnexp`` console script.

This is the form launchers need: ``python -m bnexp.train.torchrun --standalone --nproc-per-node=N -m
bnexp train ...`` starts N replicas of one run (data-parallel training, see
:mod:`bnexp.train.distributed`; plain ``torchrun`` takes the same options but ends every failure with
a traceback of its own, see :mod:`bnexp.train.torchrun`).
"""

import sys

from bnexp.cli import main

if __name__ == "__main__":
    sys.exit(main())
