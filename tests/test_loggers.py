"""The ``logger`` config group: TensorBoard (default), CSV and MLflow, alone or combined, and ``experiment=NAME``
without Hydra's ``+``."""

from __future__ import annotations

import csv
import json

import pytest

from bnexp.config.schema import compose_config, validate
from bnexp.runfolders.rundir import read_jsonl
from bnexp.train.loggers import CSVScalars, RunLoggers

from conftest import FAST

SHORT = [*FAST, "trainer.max_steps=60", "trainer.eval_every=20", "trainer.hist_every=30", "trainer.log_every=10",
         "trainer.probe_size=200"]


def test_logger_group_options_combine_and_tensorboard_is_the_default():
    assert dict(compose_config([]).logger) == dict(compose_config(["logger=tensorboard"]).logger)
    on = lambda c: sorted(k for k in ("tensorboard", "csv", "mlflow") if c.logger[k])  # noqa: E731
    assert on(compose_config([])) == ["tensorboard"]
    assert on(compose_config(["logger=csv"])) == ["csv"]
    assert on(compose_config(["logger=[tensorboard,csv,mlflow]"])) == ["csv", "mlflow", "tensorboard"]


def test_experiment_without_plus_loads_the_preset():
    """``experiment=bn_x5`` is the preset (5x the base rate, its own budget), as ``+experiment=bn_x5`` always was."""
    plain, plus = compose_config(["experiment=bn_x5"]), compose_config(["+experiment=bn_x5"])
    assert plain == plus
    assert plain.experiment == "bn_x5" and plain.data.name == "cifar10"
    assert plain.lr == pytest.approx(5 * plain.scale.base_lr)
    assert plain.trainer.max_steps == plain.scale.fast_steps
    validate(plain)


def test_csv_rows_after_the_checkpoint_are_dropped_on_resume(tmp_path):
    """As TensorBoard's purge_step: a run resumed from step 20 keeps rows up to 20 and writes the later ones anew."""
    first = RunLoggers(None, [CSVScalars(tmp_path)])
    for step in (0, 10, 20, 30):
        first.add_scalar("Train/loss", step / 10, step)
    first.close()
    again = RunLoggers(None, [CSVScalars(tmp_path, resumed_from=20)])
    again.add_scalar("Train/loss", 9.5, 30)
    again.close()
    with open(tmp_path / "scalars.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["step"]), r["tag"], float(r["value"])) for r in rows] == [
        (0, "Train/loss", 0.0), (10, "Train/loss", 1.0), (20, "Train/loss", 2.0), (30, "Train/loss", 9.5)]
    assert not list(tmp_path.glob("events.out.tfevents.*"))  # no TensorBoard without logger.tensorboard


def test_csv_and_mlflow_loggers_hold_the_runs_own_records(run_bnexp, tmp_path):
    """A real run with logger=[csv,mlflow] and no TensorBoard: MLflow's client reads back the run (finished, the
    params, every test accuracy at its step) and scalars.csv holds the same values as metrics.jsonl."""
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "run"
    r = run_bnexp("train", *SHORT, "lr=0.3", "logger=[csv,mlflow]", f"logger.mlflow_tracking_uri={store}",
                  "logger.mlflow_experiment=first-hour", f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    assert "INFO mlflow" not in r.stdout + r.stderr  # the store's set-up is not the user's business
    assert not list(run_dir.glob("events.out.tfevents.*"))
    expected = {m["step"]: m["test_accuracy"] for m in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(expected) == [0, 20, 40, 60]

    client = MlflowClient(tracking_uri=store)
    run = client.get_run((run_dir / "mlflow_run_id.txt").read_text().strip())
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert client.get_experiment(run.info.experiment_id).name == "first-hour"
    assert run.data.params["lr"] == "0.3" and run.data.params["bn"] == "true"  # as Hydra writes it
    assert run.data.tags["bnexp.run_dir"] == str(run_dir)
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "Test/accuracy")}
    assert history == pytest.approx(expected)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["hparams/final_test_accuracy"] == pytest.approx(summary["final_test_accuracy"])

    with open(run_dir / "scalars.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["tag"] == "Test/accuracy"]
    assert {int(r["step"]): float(r["value"]) for r in rows} == pytest.approx(expected)


def test_mlflow_logger_without_mlflow_is_one_line_before_training(bnexp_main, tmp_path, monkeypatch):
    import bnexp.config.checks as checks

    monkeypatch.setattr(checks, "mlflow_available", lambda: "logger=mlflow needs the mlflow package: pip install x")
    code, err, out = bnexp_main("train", "logger=mlflow", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 2 and "logger=mlflow needs the mlflow package" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


# ----- a logger never loses the run (docs/reliability.md) ------------------------------------------------


class _Breaks:
    """A scalar logger that fails at its ``at``-th scalar, as a store that became locked or a full disk would."""

    name = "logger=broken (test)"

    def __init__(self, at: int):
        self.at, self.seen = at, 0

    def scalar(self, tag, value, step):
        self.seen += 1
        if self.seen >= self.at:
            raise OSError(28, "No space left on device")

    def flush(self):
        pass

    def close(self, status="FINISHED"):
        raise AssertionError("a dropped logger is not closed")


def test_a_logger_that_fails_mid_run_is_dropped_with_one_warning_and_the_others_go_on(tmp_path, caplog):
    broken = _Breaks(at=2)
    run = RunLoggers(None, [broken, CSVScalars(tmp_path)])
    for step in range(0, 50, 10):
        run.add_scalar("Train/loss", step / 10, step)
        run.flush()
    run.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "logger=broken (test) stopped working (OSError" in warnings[0], warnings
    assert broken.seen == 2
    with open(tmp_path / "scalars.csv", newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [0, 10, 20, 30, 40]


def test_scalars_csv_deleted_mid_run_is_written_again_and_said_once(tmp_path, caplog):
    run = RunLoggers(None, [CSVScalars(tmp_path)])
    for step in range(0, 60, 10):
        run.add_scalar("Train/loss", step / 10, step)
        if step in (10, 30):
            run.flush()
            (tmp_path / "scalars.csv").unlink()  # someone cleans the folder up while the run trains
    run.close()
    with open(tmp_path / "scalars.csv", newline="") as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [40, 50]  # written again after the last deletion
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "scalars.csv was deleted while the run wrote it" in warnings[0], warnings


def _locked(path):
    import sqlite3

    con = sqlite3.connect(path, timeout=0.1)
    con.execute("CREATE TABLE IF NOT EXISTS t (x)")
    con.commit()
    con.execute("BEGIN EXCLUSIVE")
    return con


@pytest.mark.slow  # imports mlflow in this process: over the fast tier's 2.5 s of CPU
@pytest.mark.parametrize("store", ["corrupt", "unwritable", "locked"])
def test_an_mlflow_store_that_cannot_be_used_is_one_warning_and_the_run_goes_on(tmp_path, caplog, store):
    """Corrupt (not a database), in a folder that cannot be made (a file stands where it would be), or locked by
    another process's transaction: MLflow is left out with one warning naming the store; CSV and TensorBoard go
    on."""
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from omegaconf import OmegaConf

    from bnexp.train.loggers import open_loggers

    db, hold = tmp_path / "mlflow.db", None
    if store == "corrupt":
        db.write_bytes(b"this is not an sqlite database, it was cut off or overwritten" * 50)
    elif store == "unwritable":
        (tmp_path / "a_file").write_text("")
        db = tmp_path / "a_file" / "mlflow.db"
    else:
        hold = _locked(db)
    cfg = OmegaConf.create({"logger": {"tensorboard": False, "csv": True, "mlflow": True,
                                       "mlflow_tracking_uri": f"sqlite:///{db}", "mlflow_experiment": "x"}})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    try:
        run = open_loggers(cfg, run_dir, None, {"lr": 0.1})
    finally:
        if hold is not None:
            hold.close()
    assert [type(s).__name__ for s in run.sinks] == ["CSVScalars"]
    run.add_scalar("Train/loss", 1.0, 0)
    run.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "bnexp"]
    assert len(warnings) == 1 and f"logger.mlflow_tracking_uri=sqlite:///{db}" in warnings[0], warnings
    assert "The run goes on without MLflow" in warnings[0]
    assert (run_dir / "scalars.csv").read_text().splitlines()[1] == "0,Train/loss,1.0"


@pytest.mark.slow  # imports mlflow in this process: over the fast tier's 2.5 s of CPU
def test_mlflow_params_read_as_typed_and_the_runs_files_are_artifacts(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    from bnexp.train.loggers import MLflowScalars

    monkeypatch.chdir(tmp_path)  # MLflow's default artifact store (./mlruns) lands here, not in the checkout
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "config.yaml").write_text("lr: 0.5\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text("- bn=true\n")
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    sink = MLflowScalars(run_dir, store, "x", {"bn": True, "bn.noise": False, "lr": 0.5, "experiment": "none"})
    sink.scalar("Test/accuracy", 0.5, 0)
    sink.close()
    client = MlflowClient(tracking_uri=store)
    run = client.get_run(sink.run_id)
    assert run.data.params == {"bn": "true", "bn.noise": "false", "lr": "0.5", "experiment": "none"}
    top = {a.path for a in client.list_artifacts(sink.run_id)}
    assert top == {"config.yaml", ".hydra", "metrics.jsonl"}  # shift.jsonl: none in this run folder
    assert {a.path for a in client.list_artifacts(sink.run_id, ".hydra")} == {".hydra/overrides.yaml"}


def test_mlflow_db_and_its_artifacts_are_ignored_by_git():
    from pathlib import Path

    lines = (Path(__file__).resolve().parent.parent / ".gitignore").read_text().split()
    assert {"mlflow.db", "mlruns/", "mlartifacts/"} <= set(lines)
