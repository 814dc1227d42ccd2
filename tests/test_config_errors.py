"""Bad command lines and config values: one ``bnexp: error:`` line naming the key, the value and
what is accepted, exit code 2, no traceback and none of Hydra's internals (docs/reliability.md).

The command-line classes run ``bnexp.cli.main`` in this process: Hydra composes (and refuses)
before any job starts, so no folder is made and no training runs. One test per class of error:
wrong types, unknown group options, unknown keys, unreadable overrides, a key given twice, flags
that do not go together, several values without -m; plus the range checks declared beside the
fields, and Ctrl-C.
"""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from bnexp import cli
from bnexp.config.schema import compose_config, validate
from bnexp.errors import ConfigError, UserError

from conftest import FAST, spawn_bnexp


def _run(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["train", *args])
    out = capsys.readouterr()
    return code, out.err + out.out


def _one_stop_line(text: str) -> str:
    """The one line of an interruption: ``bnexp: interrupted ...``, no error label, nothing internal."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bnexp: interrupted ") and "error" not in text, text
    return " ".join(lines[0].split())


def _one_error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bnexp: error: "), text
    for internal in ("Traceback", "HYDRA_FULL_ERROR", "full_key", "object_type", "Config search path",
                     "hydra.cc/docs", "Exception"):
        assert internal not in text, text
    return " ".join(lines[0].split())


@pytest.mark.parametrize("args,needles", [
    # wrong types: the key, the value given, what the key takes (type and range from the schema)
    (["lr=abc"], ["lr=abc", "lr takes a number", "must be > 0"]),
    (["seed=1.5"], ["seed=1.5", "seed takes an integer"]),
    (["trainer.max_steps=1e4"], ["trainer.max_steps=1e4", "takes an integer", "write trainer.max_steps=10000"]),
    (["trainer.resume=maybe"], ["trainer.resume=maybe", "true or false or null"]),
    (["model.hidden=[a]"], ["model.hidden=[a]", "a list of integers"]),
    (["trainer.targets=[a]"], ["trainer.targets=[a]", "a list of numbers"]),
    # an option no group (or enum) has: the options there are
    (["act=tanh"], ["act=tanh", "one of sigmoid, relu"]),
    (["bn=yes"], ["bn=yes", "use one of false, group, layer, noisy, true"]),
    (["model=resnet"], ["model=resnet", "use one of cnn, mlp"]),
    (["+experiment=nope"], ["+experiment=nope", "bn_x5"]),
    # named as typed: bnexp gives experiment=NAME the + Hydra needs, the user did not type it
    (["experiment=nope"], ["bnexp: error: experiment=nope: the config group experiment has no option nope", "bn_x5"]),
    (["-m", "experiment=bn_x5,nope"], ["bnexp: error: experiment=bn_x5,nope: the config group experiment has no "
                                       "option nope"]),
    (["bn.population_stats=foo"], ["bn.population_stats=foo", "one of ema, recompute"]),
    # unknown keys: the closest key of that node, or the model the key belongs to
    (["trainer.max_step=10"], ["unknown config key trainer.max_step", "Did you mean trainer.max_steps?"]),
    (["lrr=0.1"], ["unknown config key lrr", "Did you mean lr?"]),
    (["scale.evalz=3"], ["unknown config key scale.evalz", "Did you mean scale.evals?"]),
    (["model=cnn", "model.hidden=[10]"], ["model=cnn has no such key", "model=mlp"]),
    # the grammar: an override the shell split at a space, a character that needs quotes
    (["data.root=/tmp/my", "data"], ["'data'", "data.root=/tmp/my", "quoted", "data.root=\"/tmp/my data\""]),
    (["data.root=/tmp/(x"], ["data.root=/tmp/(x", "quoted"]),
    (["data.root='/tmp/x"], ["data.root='/tmp/x", "a quote is not closed"]),
    (["data.root=/x/~y"], ["data.root=/x/~y", "'~' cannot stand unquoted", "quoted"]),
    # ~ after = (bash expands it only at the start of a word): $HOME, which the shell expands; the quoted form only
    # where bnexp expands ~ itself (a quoted ~ in hydra.sweep.dir would make a folder named ~)
    (["data.root=~/data"], ["'data.root=~/data'", "does not expand ~ after =", "write data.root=$HOME/data",
                            "or quote it, 'data.root=\"~/data\"'"]),
    (["-m", "hydra.sweep.dir=~/s"], ["'hydra.sweep.dir=~/s'", "does not expand ~ after =",
                                     "write hydra.sweep.dir=$HOME/s, which the shell expands."]),
    # a key given twice: both values
    (["lr=0.1", "lr=0.2"], ["lr is given twice", "lr=0.1", "lr=0.2"]),
    (["bn=true", "bn=false"], ["bn is given twice", "bn='true'", "bn='false'"]),
    # several values without -m; a + on an existing key (experiment=NAME needs no +: tests/test_loggers.py)
    (["lr=0.1,0.2"], ["lr=0.1,0.2 gives several values", "-m", "lr=[0.1,0.2]"]),
    (["+lr=0.3"], ["lr exists already", "lr=0.3"]),
    (["~trainer.max_steps"], ["cannot delete trainer.max_steps"]),
    # flags
    (["-m", "lr=0.1,0.2", "--cfg", "hydra"], ["--cfg", "-m"]),
    (["--frobnicate"], ["unrecognized arguments: --frobnicate"]),
    (["lr=0.1", "-m", "seed=0,1", "--cfg", "job"], ["--cfg", "-m"]),  # flags and overrides in any order
])
def test_bad_command_line_is_one_line_exit_2(capsys, tmp_path, monkeypatch, args, needles):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BNEXP_LAST_OVERRIDE_WINS", raising=False)
    code, text = _run(capsys, *args, f"hydra.run.dir={tmp_path / 'run'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert code == 2, text
    line = _one_error_line(text)
    for needle in needles:
        assert needle in line, (needle, line)
    assert not (tmp_path / "run").exists() and not (tmp_path / "sweep").exists()


def test_the_quoted_tilde_the_hint_suggests_is_expanded_by_bnexp(monkeypatch, tmp_path):
    """The tilde hint's quoted form ('data.root="~/data"', only for bnexp.config.explain.TILDE_EXPANDED) reaches
    the data root as $HOME/data."""
    from omegaconf import OmegaConf

    from bnexp.config.explain import TILDE_EXPANDED
    from bnexp.nets.datasets import resolve_root

    monkeypatch.setenv("HOME", str(tmp_path))
    for key in TILDE_EXPANDED:
        cfg = compose_config([f'{key}="~/data"'])
        assert resolve_root(OmegaConf.select(cfg, key)) == tmp_path / "data"


def test_last_override_wins_when_the_scripts_say_so(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BNEXP_LAST_OVERRIDE_WINS", "1")
    code, text = _run(capsys, "lr=0.1", "lr=0.2", "--help")
    assert code == 0, text
    assert "bnexp: note: lr=0.2 replaces the earlier lr=0.1" in text
    assert "\n  lr=0.2 " in text  # the later value is the one composed


@pytest.mark.parametrize("overrides,needle", [
    # + adds a key even to a structured node, ~ deletes one: validate() checks both against the schema
    (["+trainer.max_step=10"], "Did you mean trainer.max_steps?"),
    (["+lrr=0.1"], "Did you mean lr?"),
    (["model=cnn", "+model.hidden=[10]"], "model=cnn has no such key (it belongs to model=mlp)"),
    (["~lr"], "lr was deleted"),
])
def test_added_or_deleted_keys_are_refused(overrides, needle):
    with pytest.raises(UserError) as e:
        validate(compose_config(overrides))
    assert needle in str(e.value)


@pytest.mark.parametrize("override,key,allowed", [
    ("trainer.eval_every=0", "trainer.eval_every", "must be >= 1"),
    ("bn.momentum=0", "bn.momentum", "must lie in (0, 1]"),
    ("optim.momentum=1", "optim.momentum", "must lie in [0, 1)"),
    ("bn.noise_b=0.5", "bn.noise_b", "must be >= 1"),
    ("monitor.percentiles=[50,15]", "monitor.percentiles", "increasing"),
    ("trainer.targets=[0.5,1.5]", "trainer.targets", "(0, 1]"),
    ("trainer.device=tpu", "trainer.device", "cuda:N"),
    ("data.augment=wild", "data.augment", "standard"),
    ("model.init=lecun", "model.init", "xavier"),
    ("scale.evals=0", "scale.evals", "must be >= 1"),  # checked before the presets divide by it
    ("seed=-1", "seed", "[0, 2^62)"),
    ("trainer.probe_size=1", "trainer.probe_size", ">= 2 images"),  # BN over a probe of one image
])
def test_field_ranges_from_the_schema(override, key, allowed):
    cfg = compose_config(["+experiment=bn_x5", override] if override.startswith("scale.") else [override])
    with pytest.raises(ConfigError) as e:
        validate(cfg)
    assert e.value.key == key and allowed in e.value.allowed


def test_every_schema_field_has_a_description_and_the_defaults_pass():
    import dataclasses

    from bnexp.config import schema as config

    for schema in (config.Config, config.BNConfig, config.MLPConfig, config.CNNConfig, config.DataConfig,
                   config.OptimConfig, config.TrainerConfig, config.MonitorConfig, config.ScaleConfig):
        for f in dataclasses.fields(schema):
            if not dataclasses.is_dataclass(f.default_factory() if callable(f.default_factory) else None) \
                    and f.name != "model":
                assert f.metadata.get("help"), f"{schema.__name__}.{f.name} has no description"
    for overrides in ([], ["model=cnn"], ["bn=noisy"], ["+experiment=bn_x5", "scale=gpu"]):
        validate(compose_config(overrides))


def test_mlp_and_cnn_share_the_init_and_dropout_keys_with_their_own_init_default():
    import dataclasses

    from bnexp.config import schema as config

    mlp, cnn = ({f.name: f for f in dataclasses.fields(s)} for s in (config.MLPConfig, config.CNNConfig))
    for key in ("init", "dropout"):
        assert mlp[key].metadata["help"] == cnn[key].metadata["help"]
    assert (mlp["init"].default, cnn["init"].default, mlp["dropout"].default, cnn["dropout"].default) == \
        ("normal", "torch", 0.0, 0.0)
    for model in ("mlp", "cnn"):
        for key, bad in (("init", "uniform"), ("dropout", 1.0)):
            with pytest.raises(ConfigError) as e:
                validate(compose_config([f"model={model}", f"model.{key}={bad}"]))
            assert e.value.key == f"model.{key}"


def test_ctrl_c_in_main_is_one_line_exit_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "train_main", interrupted)
    assert cli.main(["train"]) == 130
    assert _one_stop_line(capsys.readouterr().err) == "bnexp: interrupted (Ctrl-C)."


def test_an_error_raised_by_ctrl_c_is_exit_130(capsys, monkeypatch):
    """Ctrl-C inside argparse.parse_intermixed_args (Python 3.11) can make its finally block raise
    AttributeError (an action without save_nargs): still one line and exit 130, no traceback."""
    def interrupted(args):
        try:
            raise KeyboardInterrupt
        finally:
            raise AttributeError("'_StoreAction' object has no attribute 'save_nargs'")

    monkeypatch.setattr(cli, "train_main", interrupted)
    assert cli.main(["train"]) == 130
    assert _one_stop_line(capsys.readouterr().err) == "bnexp: interrupted (Ctrl-C)."


@pytest.mark.parametrize("delay", [0.3, 1.5, 4.0])
def test_ctrl_c_at_any_phase_exits_130_without_traceback(tmp_path, data_root, delay):
    """SIGINT while Python imports bnexp, while Hydra composes, while data loads or training runs."""
    run_dir = tmp_path / "run"
    p = spawn_bnexp(data_root, tmp_path, "train", *FAST, "trainer.max_steps=100000", f"hydra.run.dir={run_dir}")
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"bnexp did not exit within 120 s of the Ctrl-C; its stderr:\n{p.communicate()[1][-3000:]}")
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err + out and "KeyboardInterrupt" not in err + out, err
    assert err.count("bnexp: interrupted") == 1, err


_CTRL_C_IN_A_FINALIZER = """
import os, signal, sys, importlib
from bnexp import cli
module_name, name = sys.argv[1].split(":")
module = importlib.import_module(module_name)
real = getattr(module, name)

class Finalizer:
    def __del__(self):  # the garbage collector may run one at any moment, e.g. during an import
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(100000):  # the KeyboardInterrupt is raised here, inside __del__
            pass

def wrapped(*args, **kwargs):
    Finalizer()
    return real(*args, **kwargs)

setattr(module, name, wrapped)
sys.exit(cli.main(["train", "trainer.progress=false", "trainer.num_threads=1", "trainer.max_steps=20",
                   "hydra.run.dir=run"]))
"""


@pytest.mark.parametrize("where, first_line", [
    ("bnexp.cli:train_main", "interrupted (Ctrl-C) before training began; nothing was written."),
    ("bnexp.train.stack_loop:member_train", "interrupted (SIGINT): checkpoint saved"),
])
def test_a_ctrl_c_that_lands_in_a_finalizer_still_stops_the_run(tmp_path, data_root, where, first_line):
    """CPython cannot raise a KeyboardInterrupt inside a finalizer (it prints "Exception ignored" and goes
    on): the Ctrl-C must still stop bnexp -- before Hydra runs the job, or as the training loop takes over
    the signal -- with one line and exit code 130, and the run must not train."""
    import json
    import sys

    p = subprocess.run([sys.executable, "-c", _CTRL_C_IN_A_FINALIZER, where], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300, env={**__import__("os").environ, "BNEXP_DATA_ROOT": str(data_root)})
    assert p.returncode == 130, p.stderr
    assert "KeyboardInterrupt" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    assert p.stderr.count("bnexp: interrupted") == 1, p.stderr
    assert f"bnexp: {first_line}" in p.stderr and "error" not in p.stderr, p.stderr
    summary = tmp_path / "run" / "summary.json"
    assert not summary.exists() or json.loads(summary.read_text())["step"] == 0


def test_an_omegaconf_error_inside_a_job_is_internal_and_keeps_its_traceback(tmp_path, monkeypatch):
    """What escapes the job (user errors are handled there) is a bug: never worded as a user error."""
    import logging

    from omegaconf.errors import ConfigKeyError

    def bug(*args, **kwargs):
        raise ConfigKeyError("a bug in bnexp")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "_lead", bug)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with pytest.raises(ConfigKeyError, match="a bug in bnexp"):
            cli.main(["train", f"hydra.run.dir={tmp_path / 'run'}"])
    finally:  # Hydra configured the job's logging in this process
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("override", ["lr=abc", "lr=-1", "trainer.batch_size=1", "bn=maybe", "trainer.max_step=5"])
def test_config_errors_are_refused_before_torch_is_imported(tmp_path, data_root, override):
    """A typo is refused by the config alone: the process that refuses it never imports torch (which
    takes seconds to import, more under load), and leaves no run folder behind."""
    import sys

    code = ("import sys; from bnexp.cli import main; rc = main(['train', sys.argv[1], 'hydra.run.dir=run']); "
            "print('torch imported' if 'torch' in sys.modules else 'torch not imported'); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code, override], cwd=tmp_path, capture_output=True, text=True,
                       env={**__import__("os").environ, "BNEXP_DATA_ROOT": str(data_root)}, timeout=300)
    assert p.returncode == 2, p.stderr
    assert p.stdout.strip() == "torch not imported"
    assert p.stderr.count("bnexp: error:") == 1 and "Traceback" not in p.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("args, needle", [
    (["BN=true"], "Did you mean bn?"),
    (["--lr", "0.1"], "without dashes: lr=0.1"),
    (["--trainer.max_steps=5"], "without dashes: trainer.max_steps=5"),
])
def test_a_near_miss_gets_the_spelling_that_works(capsys, tmp_path, monkeypatch, args, needle):
    monkeypatch.chdir(tmp_path)
    code, err = _run(capsys, *args)
    assert code == 2 and needle in _one_error_line(err)


def test_help_lists_every_option_of_every_group():
    """bnexp --help and bnexp train --help name every file under conf/<group>/ (bn's five options among them),
    experiment=NAME without '+', and the logger group."""
    from bnexp.config.schema import CONF_DIR
    from bnexp.config.usage import train_help, usage

    top, train = usage(), train_help([])
    for group in ("bn", "data", "experiment", "logger", "model", "optim", "scale"):
        for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
            assert option in top.split(f"{group}=")[1].splitlines()[0], (group, option)
            assert option in train.split(f"  {group}: ")[1].splitlines()[0], (group, option)
    assert "bn=true|false|noisy|layer|group" in top and "+experiment" not in top
    assert "logger.mlflow_tracking_uri=null" in train


def test_a_removed_run_folder_takes_its_log_handler_along(tmp_path):
    """A run refused or interrupted before it began loses its folder; a record logged afterwards (torch logs
    from its atexit hooks) must not try to reopen the folder's train.log (a 'Logging error' traceback)."""
    import logging

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    h = logging.FileHandler(run_dir / "train.log")
    root = logging.getLogger()
    root.addHandler(h)
    try:
        cli._remove_refused_run_dir(run_dir, None)
        assert h not in root.handlers and not run_dir.exists()
        root.warning("after the folder is gone")
        assert not run_dir.exists()
    finally:
        root.removeHandler(h)
