"""The records thread (bnexp.train.background): job order, errors, and the same records as in the loop."""

from __future__ import annotations

import json
import threading

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bnexp.train.background import Background
from bnexp.config.schema import compose_config
from bnexp.train.trainer import train


def test_jobs_run_in_order_on_one_other_thread():
    seen, threads = [], set()
    with Background(True) as bg:
        for i in range(50):
            bg.submit(lambda i=i: (seen.append(i), threads.add(threading.get_ident())))
        bg.drain()
        assert seen == list(range(50))
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_disabled_runs_each_job_before_submit_returns():
    seen = []
    bg = Background(False)
    bg.submit(lambda: seen.append(threading.get_ident()))
    assert seen == [threading.get_ident()] and not bg.enabled


def test_a_failed_job_is_raised_at_drain_and_the_later_jobs_still_run():
    seen, gate = [], threading.Event()

    def fail():
        gate.wait(5)  # still running when the next job is handed over
        raise OSError(28, "No space left on device")

    with Background(True) as bg:
        bg.submit(fail)
        bg.submit(lambda: seen.append("after"))
        gate.set()
        with pytest.raises(OSError, match="No space"):
            bg.drain()
        assert seen == ["after"]
        bg.drain()  # raised once


def test_a_failed_job_is_raised_at_the_next_submit():
    done = threading.Event()

    def fail():
        done.set()
        raise ValueError("bad record")

    with Background(True) as bg:
        bg.submit(fail)
        done.wait(5)
        bg._pending[0].exception(5)  # finished
        with pytest.raises(ValueError, match="bad record"):
            bg.submit(lambda: None)


def test_an_error_in_the_loop_waits_for_the_jobs_and_wins():
    seen, gate = [], threading.Event()

    def slow():
        gate.wait(5)
        seen.append("written")

    def fail():
        raise OSError("worker")

    with pytest.raises(KeyError):
        with Background(True) as bg:
            bg.submit(slow)
            bg.submit(fail)
            gate.set()
            raise KeyError("loop")
    assert seen == ["written"]
    bg.submit(lambda: seen.append("inline"))  # after the with: at once
    assert seen == ["written", "inline"]


def _scalars(run_dir):
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.slow  # four trainings of 200 steps with evaluations and monitor records
@pytest.mark.parametrize("bn", ["true", "false"])
def test_async_records_equal_the_loops_own(bn, tmp_path, data_root):
    """trainer.async_records=true writes the metrics, shift records and TensorBoard scalars that the
    step loop writes itself (false): equal numbers (only the wall-clock times differ)."""
    out = {}
    for on in ("true", "false"):
        cfg = compose_config([f"bn={bn}", "trainer.max_steps=200", "trainer.eval_every=50", "trainer.hist_every=50",
                              "trainer.progress=false", f"trainer.async_records={on}", f"data.root={data_root}"])
        summary = train(cfg, tmp_path / on)
        assert summary["status"] == "finished" and summary["step"] == 200
        logs = {}
        for name in ("metrics", "shift"):
            logs[name] = [json.loads(line) for line in (tmp_path / on / f"{name}.jsonl").read_text().splitlines()]
            for rec in logs[name]:
                rec.pop("wall_time_s", None)
        out[on] = logs, _scalars(tmp_path / on), summary["final_test_accuracy"]
    assert [r["step"] for r in out["true"][0]["metrics"]] == [0, 50, 100, 150, 200]
    assert len(out["true"][0]["shift"]) == 5
    assert out["true"] == out["false"]
