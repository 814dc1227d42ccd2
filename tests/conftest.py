"""Shared test fixtures: the real datasets in ../shared/data, a `bnexp` runner, and the test tiers.

Tiers (pytest markers, see pyproject.toml): ``e2e`` marks a test that starts bnexp (or torchrun,
or any subprocess) as a process -- found here from the test's and its fixtures' source, so a new
test is tiered without remembering to mark it -- or that trains more than a few hundred steps
(marked by hand); ``slow`` marks the longest end-to-end runs. The fast tier for an edit-test loop:
``python -m pytest -m "not e2e and not slow"``.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("BNEXP_DATA_ROOT") or REPO.parent / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The folder holding MNIST/raw and cifar-10-batches-py (real data, offline)."""
    if not (DATA_ROOT / "MNIST" / "raw").is_dir():
        pytest.fail(f"real MNIST not found under {DATA_ROOT}: set BNEXP_DATA_ROOT to ../shared/data")
    return DATA_ROOT


@pytest.fixture
def run_bnexp(tmp_path, data_root):
    """Run the `bnexp` console script in a subprocess (cwd = tmp_path); returns CompletedProcess."""

    def run(*args: str, timeout: float = 600, env_extra: dict | None = None, cwd: Path | None = None):
        env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120", HYDRA_FULL_ERROR="")
        env.pop("HYDRA_FULL_ERROR")
        env.update(env_extra or {})
        exe = Path(sys.executable).with_name("bnexp")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bnexp.cli"]
        return subprocess.run(cmd + list(args), cwd=cwd or tmp_path, env=env, capture_output=True,
                              text=True, timeout=timeout)

    return run



@pytest.fixture
def bnexp_main(capsys, monkeypatch, data_root):
    """``bnexp ARGS`` run in this process (:func:`bnexp.cli.main`, what the console script calls), with
    the console-script runner's environment; returns (exit code, stderr, stdout). For commands refused
    before a run starts: the ~3 s a new process spends importing torch are saved. The logging Hydra
    sets up is undone. (This docstring names no process call: the e2e rule reads it.)"""
    import logging

    from bnexp import cli

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    def run(*args: str) -> tuple[int, str, str]:
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            code = cli.main(list(args))
        finally:
            for h in root.handlers:
                if h not in handlers:
                    h.close()
            root.handlers[:], root.level = handlers, level
        out = capsys.readouterr()
        return code, out.err, out.out

    return run


def spawn_bnexp(data_root: Path, cwd: Path, *args: str) -> subprocess.Popen:
    """Start the `bnexp` console script in the background (for tests that kill or race it)."""
    exe = Path(sys.executable).with_name("bnexp")
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), COLUMNS="120")
    return subprocess.Popen([str(exe), *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout: float = 300.0) -> None:
    """Poll `predicate` every 50 ms; TimeoutError after `timeout` seconds."""
    t0 = time.time()
    while not predicate():
        if time.time() - t0 > timeout:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


# Fast settings for end-to-end runs on real data.
FAST = ["trainer.progress=false", "trainer.num_threads=1"]

# A 20-step MNIST run for in-process tests of what happens around a run (checkpoints at 10 and 20,
# records at 0, 10, 20); a test module adds its own seed.
SHORT_RUN = ["trainer.progress=false", "trainer.num_threads=1", "trainer.device=cpu", "trainer.max_steps=20",
             "trainer.eval_every=10", "trainer.hist_every=10", "trainer.log_every=5", "trainer.probe_size=100",
             "trainer.ckpt_every=10"]


@pytest.fixture
def bnexp_train(run_bnexp):
    """`bnexp train` of one run as a process: FAST settings, then ``overrides``, then
    ``hydra.run.dir=run_dir``. Asserts exit code 0 (stderr shown otherwise) and returns
    (the CompletedProcess, the run's summary.json read as strict JSON)."""

    def train(run_dir: Path, *overrides: str, **kwargs):
        r = run_bnexp("train", *FAST, *overrides, f"hydra.run.dir={run_dir}", **kwargs)
        assert r.returncode == 0, r.stderr[-3000:]
        return r, strict_json((run_dir / "summary.json").read_text())

    return train


def strict_json(text: str):
    """``json.loads`` that refuses NaN and Infinity (the run folder's files are strict JSON)."""

    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def steps_of(path: Path) -> list[int]:
    """The ``step`` of every record of a JSON-lines file, in order ([] if it does not exist);
    a line that is not JSON fails the test."""
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def train_in_process(run_dir: Path, data_root: Path, overrides: list[str]) -> dict:
    """Train one run in this process (:func:`bnexp.train.trainer.train`) on the real data; returns its summary."""
    from bnexp.config.schema import compose_config
    from bnexp.train.trainer import train

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BNEXP_DATA_ROOT", str(data_root))
        return train(compose_config(overrides), run_dir)


def before_call(monkeypatch, module, name: str, action, call: int = 1) -> None:
    """Make ``module.name`` run ``action()`` on its ``call``-th call, then do its own work (unless
    ``action`` raises): a signal, a full disk, ... injected at one chosen point of a run."""
    real, calls = getattr(module, name), []

    def wrapper(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            action()
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)


class StepSyncs:
    """Host synchronisations of a training loop, per step (the GPU tier, and its CPU stand-in in
    tests/test_host_syncs.py).

    ``events`` is a list the caller's counter appends to, one item per sync (CUDA's sync-debug warnings, or
    the host reads of device values on the CPU); :meth:`wrap` marks each call of the loop's once-per-step
    method (``Trainer._update``, ``StackedNet.step``). What happens between update s and update s + 1 --
    step s's after-update measurements, its checkpoint, the next step's before-update measurements -- is
    step s's share; the share after the last update (the run's end) is not counted.
    """

    def __init__(self, events: list, first_step: int = 1):
        self.events, self.first_step, self.marks = events, first_step, []

    def wrap(self, monkeypatch, owner, name: str) -> None:
        real = getattr(owner, name)

        def marked(*args, **kwargs):
            self.marks.append(len(self.events))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, marked)

    def per_step(self) -> dict[int, int]:
        """{step s: syncs between update s and update s + 1}."""
        return {self.first_step + i: b - a for i, (a, b) in enumerate(zip(self.marks, self.marks[1:]))}


def due_kinds(trainer, step: int) -> set[str]:
    """What is due between update ``step`` and the next one: the names of the after-update measurements due
    at ``step``, of the before-update ones due at ``step + 1``, and ``checkpoint``."""
    kinds = {m.name for m in trainer.measurements
             if m.due(step if m.phase == "after" else step + 1, trainer.max_steps)}
    return kinds | ({"checkpoint"} if step % trainer.ckpt_every == 0 else set())


def pytest_configure(config):
    """Run as a terminal's foreground job would, also when started in the background: a shell starts
    background jobs with SIGINT ignored, which every child inherits, so Ctrl-C tests (in this process
    and in the bnexp processes they start) would see nothing. Python's own handler is put back."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# a test (or one of its fixtures, or a helper of its module it calls) that runs any of these
# starts a process: tier e2e
_PROCESS_CALLS = re.compile(r"\b(run_bnexp|spawn_bnexp|subprocess\.|Popen|torchrun|os\.system)\b")
_CALLS = re.compile(r"\b([A-Za-z_]\w*)\(")


def _starts_a_process(fn, module=None, depth: int = 1) -> bool:
    """Whether ``fn``'s source (or, ``depth`` levels down, a function of ``module`` it calls) starts a process."""
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    if _PROCESS_CALLS.search(src):
        return True
    if module is None or depth == 0:
        return False
    helpers = {getattr(module, name, None) for name in _CALLS.findall(src)}
    return any(inspect.isfunction(h) and h is not fn and h.__module__ == module.__name__
               and _starts_a_process(h, module, depth - 1) for h in helpers)


def _defined_in_the_suite(fn) -> bool:
    """Whether ``fn`` is defined in a file under tests/."""
    try:
        return Path(inspect.getsourcefile(fn)).resolve().is_relative_to(REPO / "tests")
    except (OSError, TypeError):
        return False


def pytest_collection_modifyitems(config, items):
    """Mark every test that starts a process (itself, through a fixture, or through a helper) ``e2e``."""
    for item in items:
        fn = getattr(item, "function", None)
        if fn is None or item.get_closest_marker("e2e"):
            continue
        module = getattr(item, "module", None)
        info = getattr(item, "_fixtureinfo", None)
        # the suite's own fixtures only: pytest's (capfd's docstring shows os.system) start nothing
        fixtures = [fdef.func for name in item.fixturenames
                    for fdef in (info.name2fixturedefs.get(name, ()) if info else ())
                    if _defined_in_the_suite(fdef.func)]
        if "run_bnexp" in item.fixturenames or any(
                _starts_a_process(f, module) for f in [fn, *fixtures]):
            item.add_marker(pytest.mark.e2e)


# ----- the fast tier's budget: CPU seconds per test ------------------------------------------
# CPU time (this process, all its threads, plus the children it reaped) approximates the wall time
# on an idle machine, also when the machine is busy. A test over this budget belongs in `slow` (or
# `e2e`); the terminal summary names every unmarked one, so the fast tier stays fast. (One-time costs,
# lazy imports on a first optimizer step or first data load, land in whichever test comes first: a
# unit test seen here once may be one of those.)
FAST_TIER_CPU_S = 2.5


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests that used the most CPU time (0: all), with their tier")


def _cpu_now() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_START = pytest.StashKey[float]()
_CPU: dict[str, tuple[float, bool]] = {}  # test id -> (CPU seconds, marked slow or e2e)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_CPU_START] = _cpu_now()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """After a test's teardown, put the CPU seconds of its setup, call and teardown together, and whether it
    is marked slow or e2e, in the teardown report's user_properties: under pytest-xdist the report travels
    from the worker that ran the test to the main process, where :func:`pytest_runtest_logreport` reads it."""
    outcome = yield
    if call.when == "teardown" and _CPU_START in item.stash:
        marked = bool(item.get_closest_marker("slow") or item.get_closest_marker("e2e"))
        outcome.get_result().user_properties.append(("cpu_s", (_cpu_now() - item.stash[_CPU_START], marked)))


def pytest_runtest_logreport(report):
    """Collect the CPU seconds of each test (one process, or the main process of pytest-xdist)."""
    for key, value in getattr(report, "user_properties", ()):
        if key == "cpu_s" and report.when == "teardown":
            _CPU[report.nodeid] = tuple(value)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The session's CPU time; tests over the fast tier's budget that are not marked slow or e2e;
    with --cpu-durations, the slowest tests by CPU time."""
    cpu = _CPU
    if not cpu:
        return
    tr = terminalreporter
    over = sorted(((t, n) for n, (t, marked) in cpu.items() if t > FAST_TIER_CPU_S and not marked), reverse=True)
    if over:
        tr.write_sep("=", f"tests over {FAST_TIER_CPU_S} s of CPU not marked slow or e2e (mark them)")
        for t, n in over:
            tr.write_line(f"{t:7.2f}s cpu  {n}")
    n = config.getoption("--cpu-durations")
    if n is not None:
        tr.write_sep("=", "CPU time per test")
        ranked = sorted(((t, marked, name) for name, (t, marked) in cpu.items()), reverse=True)
        for t, marked, name in ranked[: n or None]:
            tr.write_line(f"{t:7.2f}s cpu  {'slow/e2e' if marked else 'fast    '}  {name}")
    workers = config.getoption("numprocesses", None)  # pytest-xdist's -n; the workers' start-ups are theirs
    where = (f"over {len(cpu)} tests in pytest-xdist workers" if workers
             else f"process total incl. start-up and collection: {_cpu_now():.1f} s")
    tr.write_line(f"CPU time of the tests: {sum(t for t, _ in cpu.values()):.1f} s ({where})")


def shell_words(line: str) -> list[str]:
    """The arguments a POSIX shell (``sh``) reads from ``line``: how a user's shell reads a printed command."""
    out = subprocess.run(["sh", "-c", "for a in " + line + "; do printf '%s\\0' \"$a\"; done"], capture_output=True,
                         text=True, check=True).stdout
    return out.split("\0")[:-1]


def tensorboard_backend(logdir):
    """TensorBoard's own backend over LOGDIR, as its server builds it: (multiplexer, plugin context) -> the
    plugins' apps serve exactly what the dashboards would (no browser, no port)."""
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin

    mux = plugin_event_multiplexer.EventMultiplexer()
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    ctx = base_plugin.TBContext(logdir=str(logdir), multiplexer=mux,
                                data_provider=data_provider.MultiplexerDataProvider(mux, str(logdir)))
    return mux, ctx
