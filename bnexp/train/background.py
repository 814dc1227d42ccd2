"""The records thread: test evaluations and covariate-shift summaries written beside the step loop.

At a due step the loop itself takes only what must be taken at that step -- a copy of the network
for the test evaluation, the probe set's pre-activations for the monitor, and the divergence checks
(:mod:`bnexp.train.measurements`) -- and hands the rest (the 10,000-image evaluation, the percentiles,
shift measures, histograms, TensorBoard scalars, the ``metrics.jsonl`` / ``shift.jsonl`` lines) to
one worker thread. The worker runs the jobs one at a time in the order they were handed over, so
the files and records are those the step loop would have written itself, and its torch work runs
with the same intra-op thread count as the loop (torch's setting is process-wide), so its numbers
are bit-identical on CPU (tests/test_background.py). On the paper's MLP the loop runs on one
thread (:func:`bnexp.config.resources.default_num_threads`), so on a machine with a second core the
records cost the loop almost nothing (README, Benchmarks).

The loop waits for the worker (:meth:`Background.drain`) before every checkpoint and at the end, so
a checkpoint and ``summary.json`` always hold every record of their step. ``trainer.async_records=false``
runs each job in the loop instead.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor


class Background:
    """Jobs run in submission order on one worker thread (``enabled``), or at once in the caller's.

    Args:
        enabled: use the worker thread; False: :meth:`submit` runs the job before it returns.

    A job that raises keeps its exception; the next :meth:`submit` or :meth:`drain` raises it in
    the step loop's thread (e.g. ``OSError`` from a full disk, which ends the run ``failed``).
    Used as a context manager it drains on exit and stops the worker (later jobs run at once); after
    an exception in the ``with`` body it still waits for the jobs handed over, and their own errors
    give way to it.
    """

    def __init__(self, enabled: bool):
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="bnexp-records") if enabled else None
        self._pending: list[Future] = []

    @property
    def enabled(self) -> bool:
        """Whether jobs run on the worker thread."""
        return self._pool is not None

    def busy(self) -> bool:
        """Whether a job handed over has not finished yet."""
        return any(not f.done() for f in self._pending)

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job()`` after every job handed over before it (on the worker, or now).

        Raises:
            Exception: the first error of an earlier job that finished with one.
        """
        if self._pool is None:
            job()
            return
        while self._pending and self._pending[0].done():
            self._pending.pop(0).result()
        self._pending.append(self._pool.submit(job))

    def drain(self) -> None:
        """Wait until every job handed over has run.

        Raises:
            Exception: the first error of those jobs (the later ones have run all the same).
        """
        pending, self._pending = self._pending, []
        errors = [f.exception() for f in pending]
        first = next((e for e in errors if e is not None), None)
        if first is not None:
            raise first

    def __enter__(self) -> Background:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.drain()
            else:
                for f in self._pending:
                    f.exception()
                self._pending = []
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None  # a later job runs at once
