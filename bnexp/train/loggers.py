"""The run's loggers (config group ``logger``): TensorBoard, a CSV file, MLflow, any combination.

The training loop and the measurements write through one object with ``SummaryWriter``'s interface
(:class:`RunLoggers`): every scalar (``add_scalar``) goes to each chosen logger with the same tag and
step; everything TensorBoard alone can show (Custom Scalars, histograms, HParams, images, text) goes
to TensorBoard when ``logger.tensorboard`` is on and nowhere otherwise. The run's own records
(``metrics.jsonl``, ``shift.jsonl``, ``summary.json``: what ``bnexp report`` reads) are written whatever
the loggers.

- ``logger=tensorboard`` (default): the event files in the run folder (:func:`bnexp.train.event_writer.open_writer`).
- ``logger=csv``: ``scalars.csv`` in the run folder, one row ``step,tag,value`` per scalar (long format:
  ``pandas.read_csv(...).pivot_table(index="step", columns="tag", values="value")`` gives one column per tag).
- ``logger=mlflow``: an MLflow run in the store ``logger.mlflow_tracking_uri`` (default
  ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the folder bnexp runs from: a local file, no
  server; MLflow 3 refuses new plain-folder stores), experiment ``logger.mlflow_experiment``, named after the run
  folder; the HParams columns (:func:`bnexp.train.tblog.flat_hparams`) as params, booleans as Hydra writes them
  (``bn=true``); the tag ``bnexp.run_dir``; when it closes, the run's config and records as artifacts
  (:data:`ARTIFACTS`, in MLflow's artifact store: ``./mlruns`` beside a local store unless set otherwise).
  Its id is kept in the run folder (``mlflow_run_id.txt``), so a resumed run logs into the same MLflow run.

A resumed run (``resumed_from`` = the checkpoint's step) drops what the CSV file holds after that step, as
TensorBoard's ``purge_step`` does; MLflow keeps its metrics (it cannot delete them): the steps after the
checkpoint appear twice there, with the later values last.

A logger never loses the run: an MLflow store that cannot be used when the run starts (locked, corrupt, in a
folder that cannot be written), or a CSV or MLflow logger that fails while the run trains, is one warning naming
the logger; the run goes on without it (its own records are complete). ``scalars.csv`` deleted while the run writes
it is written again from the next flush on, with one warning (its earlier rows are gone with the deleted file).
"""

from __future__ import annotations

import csv
import logging
import os
import time
from pathlib import Path

from bnexp.config.checks import MLFLOW_INSTALL, mlflow_available
from bnexp.errors import UserError

CSV_FILE = "scalars.csv"
MLFLOW_RUN_ID = "mlflow_run_id.txt"
# the run folder's files an MLflow run keeps as artifacts when it closes (the config as resolved and as typed,
# the records so far; summary.json is written after the loggers close, and stays in the run folder)
ARTIFACTS = ("config.yaml", ".hydra/overrides.yaml", "metrics.jsonl", "shift.jsonl")
MLFLOW_BATCH = 900  # metrics per log_batch call (MLflow accepts at most 1000)
log = logging.getLogger("bnexp")


class _NullWriter:
    """``SummaryWriter``'s interface writing nothing (``logger`` without tensorboard)."""

    all_writers: dict = {}

    @property
    def file_writer(self) -> "_NullWriter":
        return self

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


class CSVScalars:
    """Scalars as rows ``step,tag,value`` of ``<run_dir>/scalars.csv``.

    Args:
        run_dir: the run folder.
        resumed_from: the checkpoint's step when resuming (rows of later steps are dropped), None for a new run.

    Raises:
        OSError: the file cannot be written (the caller reports it as an output error).
    """

    def __init__(self, run_dir: Path, resumed_from: int | None = None):
        self.path = Path(run_dir) / CSV_FILE
        self.name, self.recreated, self.unflushed = f"logger=csv ({self.path})", False, []
        kept: list[list[str]] = []
        if resumed_from is not None and self.path.exists():
            with open(self.path, newline="") as f:
                kept = [row for row in list(csv.reader(f))[1:] if len(row) == 3 and _int(row[0]) <= resumed_from]
        self.file = open(self.path, "w", newline="")
        self.out = csv.writer(self.file)
        self.out.writerow(["step", "tag", "value"])
        self.out.writerows(kept)

    def scalar(self, tag: str, value: float, step: int) -> None:
        self.unflushed.append([step, tag, repr(value)])
        self.out.writerow(self.unflushed[-1])

    def flush(self) -> None:
        """Write the rows out; when the file was deleted (or replaced) meanwhile, write it again from the rows
        since the last flush on (header first), saying so once.

        Raises:
            OSError: the file cannot be written.
        """
        self.file.flush()
        try:
            here = os.path.samestat(os.stat(self.path), os.fstat(self.file.fileno()))
        except FileNotFoundError:
            here = False
        if not here:
            self.file.close()
            self.file = open(self.path, "w", newline="")
            self.out = csv.writer(self.file)
            self.out.writerow(["step", "tag", "value"])
            self.out.writerows(self.unflushed)
            self.file.flush()
            if not self.recreated:
                log.warning("%s was deleted while the run wrote it: it is written again from here on (its earlier "
                            "rows are gone; metrics.jsonl holds every record of the run)", self.path)
            self.recreated = True
        self.unflushed = []

    def close(self, status: str = "FINISHED") -> None:
        if not self.file.closed:
            self.flush()
            self.file.close()


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def default_tracking_uri() -> str:
    """``$MLFLOW_TRACKING_URI``, else ``sqlite:///<current folder>/mlflow.db`` (a local store, no server)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd().absolute() / 'mlflow.db'}"


class MLflowScalars:
    """Scalars as MLflow metrics of one MLflow run (created, or continued when the run folder names one).

    Args:
        run_dir: the run folder (its name is the MLflow run's name).
        tracking_uri: the MLflow store; None: :func:`default_tracking_uri`.
        experiment: the MLflow experiment's name (created when missing).
        params: the run's HParams values (:func:`bnexp.train.tblog.flat_hparams`), logged as params.

    Raises:
        UserError: mlflow is not installed, or the store cannot be opened (the message names
            ``logger.mlflow_tracking_uri``).
    """

    def __init__(self, run_dir: Path, tracking_uri: str | None, experiment: str, params: dict):
        problem = mlflow_available()
        if problem:
            raise UserError(problem)
        from mlflow import MlflowClient
        from mlflow.entities import Param, RunStatus

        for name in ("mlflow", "alembic"):  # their INFO lines (database set-up) are not the user's business
            logging.getLogger(name).setLevel(logging.WARNING)  # (after the import: mlflow sets INFO on import)

        self.uri = tracking_uri or default_tracking_uri()
        self.run_dir = Path(run_dir)
        self.name = f"logger=mlflow ({self.uri})"
        self.pending: list = []
        id_file = Path(run_dir) / MLFLOW_RUN_ID
        try:
            self.client = MlflowClient(tracking_uri=self.uri)
            known = id_file.read_text().strip() if id_file.exists() else ""
            if known:
                self.run_id = known
                self.client.update_run(known, status=RunStatus.to_string(RunStatus.RUNNING))
                return
            found = self.client.get_experiment_by_name(experiment)
            exp_id = found.experiment_id if found else self.client.create_experiment(experiment)
            run = self.client.create_run(exp_id, run_name=Path(run_dir).name,
                                         tags={"bnexp.run_dir": str(Path(run_dir).absolute())})
            self.run_id = run.info.run_id
            self.client.log_batch(self.run_id, params=[Param(k, param_text(v)) for k, v in params.items()])
        except Exception as exc:  # MLflow raises its own exceptions (and sqlalchemy's) for a store it cannot use
            if isinstance(exc, UserError):
                raise
            raise UserError(f"logger.mlflow_tracking_uri={self.uri}: MLflow cannot use this store "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}). Use a local "
                            f"sqlite:///PATH.db (needs {MLFLOW_INSTALL}) or a reachable server.") from None
        id_file.write_text(self.run_id + "\n")

    def scalar(self, tag: str, value: float, step: int) -> None:
        from mlflow.entities import Metric

        self.pending.append(Metric(tag, value, int(time.time() * 1000), step))
        if len(self.pending) >= MLFLOW_BATCH:
            self.flush()

    def flush(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:MLFLOW_BATCH], self.pending[MLFLOW_BATCH:]
            self.client.log_batch(self.run_id, metrics=batch)

    def close(self, status: str = "FINISHED") -> None:
        """Flush the metrics, log the run folder's :data:`ARTIFACTS` that exist, and end the MLflow run with
        ``status``."""
        self.flush()
        for name in ARTIFACTS:
            path = self.run_dir / name
            if path.is_file():
                folder = str(Path(name).parent)
                self.client.log_artifact(self.run_id, str(path), artifact_path=None if folder == "." else folder)
        self.client.set_terminated(self.run_id, status=status)


def param_text(value) -> str:
    """A HParams value as an MLflow param, written as Hydra's overrides write it: ``true``/``false`` for a bool
    (``bn=true``, not Python's ``True``), ``null`` for None, else ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)


class RunLoggers:
    """``SummaryWriter``'s interface over the chosen loggers: scalars to all of them, the rest to TensorBoard.

    Args:
        tensorboard: the run's ``SummaryWriter``, or None when ``logger.tensorboard`` is off.
        sinks: the scalar loggers (:class:`CSVScalars`, :class:`MLflowScalars`).

    Attributes:
        status: what MLflow records when the writer closes: ``FINISHED`` (the default), ``KILLED`` for an
            interrupted run, ``FAILED``.
    """

    def __init__(self, tensorboard=None, sinks: list | None = None):
        self.tb = tensorboard if tensorboard is not None else _NullWriter()
        self.sinks = list(sinks or [])
        self.status = "FINISHED"

    def _each(self, call) -> None:
        """``call(sink)`` for every scalar logger; one that fails is dropped with one warning naming it, and the
        run goes on (a logger never loses the run; its own records are complete)."""
        for sink in list(self.sinks):
            try:
                call(sink)
            except Exception as exc:  # noqa: BLE001  (OSError, MLflow's and sqlalchemy's own exceptions)
                self.sinks.remove(sink)
                log.warning("%s stopped working (%s: %s); it records nothing more of this run, which goes on (its "
                            "metrics.jsonl, shift.jsonl and summary.json are complete)", getattr(sink, "name", sink),
                            type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")

    def add_scalar(self, tag: str, value, global_step=None, *args, **kwargs) -> None:
        self.tb.add_scalar(tag, value, global_step, *args, **kwargs)
        self._each(lambda sink: sink.scalar(tag, float(value), int(global_step or 0)))

    def flush(self) -> None:
        self.tb.flush()
        self._each(lambda sink: sink.flush())

    def close(self) -> None:
        self.tb.close()
        self._each(lambda sink: sink.close(self.status))

    def __getattr__(self, name: str):  # add_histogram_raw, add_custom_scalars, file_writer, all_writers ...
        return getattr(self.tb, name)


def open_loggers(cfg, run_dir: Path, resumed_from: int | None, params: dict) -> RunLoggers:
    """The loggers ``cfg.logger`` asks for, opened on ``run_dir`` (rank 0 only).

    Args:
        cfg: the run config (its ``logger`` node; a config without one gets TensorBoard alone).
        run_dir: the run folder.
        resumed_from: the checkpoint's step when resuming, None for a new run.
        params: the run's HParams values, for MLflow's params.

    A store MLflow cannot open (locked, corrupt, unwritable) is one warning: the run goes on without MLflow.

    Raises:
        UserError: logger=mlflow without mlflow installed.
        OSError: a file of the run folder cannot be written.
    """
    from bnexp.train.event_writer import open_writer

    lg = cfg.get("logger") or {"tensorboard": True}
    sinks: list = []
    if lg.get("mlflow"):
        try:
            sinks.append(MLflowScalars(run_dir, lg.get("mlflow_tracking_uri"),
                                       str(lg.get("mlflow_experiment", "bnexp")), params))
        except UserError as exc:
            if mlflow_available() is not None:  # not installed: refused before training, as a config error
                raise
            log.warning("%s The run goes on without MLflow (its metrics.jsonl, shift.jsonl and summary.json are "
                        "complete).", exc)
    if lg.get("csv"):
        sinks.append(CSVScalars(run_dir, resumed_from))
    tb = open_writer(run_dir, resumed_from) if lg.get("tensorboard") else None
    return RunLoggers(tb, sinks)
