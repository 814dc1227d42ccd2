"""``python -m bnexp ...``: the same command line as the ``bnexp`` console script.

This is the form launchers need: ``torchrun --standalone --nproc-per-node=N -m bnexp train ...``
starts N replicas of one run (data-parallel training, see :mod:`bnexp.train.distributed`).
"""

import sys

from bnexp.cli import main

if __name__ == "__main__":
    sys.exit(main())
