"""``python -m bnexp.train.torchrun [torchrun options] -m bnexp train ...``: torchrun, ending as bnexp ends.

torchrun's own process (the elastic agent) ends every run that is not a success with a Python
traceback of its own -- ``ChildFailedError`` when a replica exits non-zero (also for bnexp's
one-line refusals, exit code 2), ``SignalException`` when it receives SIGTERM/SIGINT -- and with exit
code 1 whatever the replicas said. This wrapper runs the same launcher (``torch.distributed.run``,
same options) and turns those two endings into bnexp's: no traceback, the exit code of the replica
that failed first (2 for a refusal, which rank 0 printed as one line), or 128 + N for signal N (every
replica has then saved its checkpoint and rank 0 recorded ``interrupted``, see
:class:`bnexp.train.signal_guard.SignalGuard`). The agent's own log lines are kept to errors of the agent itself.
docs/cluster.md, "Data-parallel runs", shows the command.

Plain ``torchrun`` cannot be made to end quietly from the replicas' side: its entry point
(``torch.distributed.run.main``, wrapped in ``@record``) raises ``ChildFailedError`` whenever a replica
exits non-zero, and Python prints that uncaught exception as a traceback in torchrun's own process.
A replica can only choose its exit code (0 would hide the refusal) and an error file (which changes
the table inside the traceback, not the traceback). Hence this wrapper, and :data:`LAUNCH` in every
message that tells how to start a data-parallel run.
"""

from __future__ import annotations

import logging
import sys

LAUNCH = "python -m bnexp.train.torchrun --standalone --nproc-per-node=N -m bnexp train ..."
"""The command bnexp's messages give for a data-parallel run (torchrun's options, bnexp's endings)."""


def launch(nproc: int | str = "N") -> str:
    """:data:`LAUNCH` with ``nproc`` replicas."""
    return LAUNCH.replace("=N ", f"={nproc} ")


def main(argv: list[str] | None = None) -> int:
    """Run torchrun with ``argv`` (default: the command line) and return bnexp's exit code.

    Returns:
        0 when every replica succeeded; the exit code of the first replica that failed (2: a user
        error it printed as one line); 128 + N when torchrun got signal N.
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch.distributed.elastic.agent.server.api  # noqa: F401  (its logger, made at import)

    for name in list(logging.root.manager.loggerDict):  # "Sending closing signal", "failed (exitcode: 2)"
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run(args)
    except ChildFailedError as exc:
        rank, first = exc.get_first_failure()
        code = first.exitcode
        if code < 0:  # killed by a signal
            print(f"bnexp: error: a replica (rank {rank}) was killed by signal {-code}; the run's folder says how far "
                  "it got (re-run the same command to resume).", file=sys.stderr)
            return 128 - code
        return code or 1
    except SignalException as exc:
        return 128 + int(exc.sigval)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
