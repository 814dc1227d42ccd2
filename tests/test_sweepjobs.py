"""The failed jobs of a sweep, collected by the Hydra callback bnexp.runfolders.sweepjobs.FailedJobs.

Launchers run a job's ``on_job_end`` in the process that ran the job (a joblib worker, a cluster
job) on a pickled copy of the callback made after ``on_multirun_start``; the list is printed by the
main process's ``on_multirun_end``. The end-to-end behaviour (the other jobs finish, exit code 1,
the list on stderr) is tests/test_failure_classes.py::test_sweep_with_a_failed_job_finishes_the_rest_and_exits_nonzero.
"""

from __future__ import annotations

import json

import pickle

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from bnexp.runfolders import sweepjobs
from bnexp.runfolders.sweepjobs import FailedJobs, FailedRun


def _job(sweep_dir, name: str, status: JobStatus, value) -> tuple:
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}, "runtime": {"output_dir": str(sweep_dir / name)}}})
    ret = JobReturn()
    ret.status, ret.return_value = status, value
    return cfg, ret


def test_failed_jobs_travel_from_the_workers_to_the_end_of_the_sweep(tmp_path, capsys):
    main = FailedJobs()
    main.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    worker_a, worker_b = pickle.loads(pickle.dumps(main)), pickle.loads(pickle.dumps(main))  # as launchers do
    worker_a.on_job_end(*_job(tmp_path, "seed=0", JobStatus.COMPLETED, {"status": "finished"}))
    worker_a.on_job_end(*_job(tmp_path, "seed=1", JobStatus.COMPLETED, FailedRun(str(tmp_path / "seed=1"), "bad lr")))
    worker_b.on_job_end(*_job(tmp_path, "seed=2", JobStatus.FAILED, RuntimeError("boom")))
    main.on_multirun_end(OmegaConf.create({}))
    failures = sweepjobs.sweep_failures()
    assert failures == [{"run_dir": str(tmp_path / "seed=1"), "error": "bad lr"},
                        {"run_dir": str(tmp_path / "seed=2"), "error": "RuntimeError: boom"}]
    err = " ".join(capsys.readouterr().err.split())
    assert "2 job(s) of the sweep failed" in err and f"{tmp_path / 'seed=1'}: bad lr" in err
    assert not list(tmp_path.glob(".failed_jobs.*"))  # the record is removed at the end


def test_a_sweep_without_failures_lists_nothing(tmp_path, capsys):
    cb = FailedJobs()
    cb.on_multirun_start(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    cb.on_job_end(*_job(tmp_path, "seed=0", JobStatus.COMPLETED, {"status": "finished"}))
    cb.on_multirun_end(OmegaConf.create({}))
    assert sweepjobs.sweep_failures() == [] and "failed" not in capsys.readouterr().err
    # a single run (no multirun start) records nothing
    single = FailedJobs()
    single.on_job_end(*_job(tmp_path, "run", JobStatus.COMPLETED, FailedRun("x", "y")))
    assert not list(tmp_path.glob(".failed_jobs.*"))


def test_sweep_summary_table_reads_every_run_of_the_sweep(tmp_path):
    """One row per run folder (named by the swept keys), the accuracies and first steps of its summary.json,
    '-' for a target never reached, the step an interrupted run stopped at."""
    from bnexp.runfolders.sweepsummary import summary_rows

    def run(name, **summary):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary))

    run("bn=true,seed=0", status="finished", step=3000, max_steps=3000, final_test_accuracy=0.96125,
        best_test_accuracy=0.9625, steps_to_target={"0.9": 500, "0.95": 2000})
    run("bn=false,seed=0", status="interrupted", step=1106, max_steps=3000, final_test_accuracy=None,
        best_test_accuracy=0.1135, steps_to_target={"0.9": None, "0.95": None})
    header, rows = summary_rows(tmp_path)
    assert header == ["run", "status", "final", "best", "90%", "95%"]
    assert rows == [["bn=false,seed=0", "interrupted @1,106", "-", "0.1135", "-", "-"],
                    ["bn=true,seed=0", "finished", "0.9613", "0.9625", "500", "2,000"]]
